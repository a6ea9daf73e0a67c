//go:build tools

// Package lws pins the LeaderWorkerSet controller (sigs.k8s.io/lws) that berth's local rig runs,
// built from the Go module proxy by hack/build-tools.sh: multi-node inference groups are
// adopted as gangs, scaled and restarted against the real controller. Its own module, so
// LWS's dependencies never move berth's or the rig's versions.
package lws

import (
	_ "sigs.k8s.io/lws/cmd"
)
