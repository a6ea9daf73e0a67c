//go:build tools

// Package kueue pins the Kueue controller manager (sigs.k8s.io/kueue) that berth's local rig
// and `berth dev up --kueue` run, built from the Go module proxy by hack/build-tools.sh: quotas,
// cohorts, preemption and the ProvisioningRequest admission check are tested against the real
// Kueue, with berth serving the ProvisioningRequests. Its own module, so Kueue's dependencies
// never move berth's or the rig's versions.
package kueue

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
