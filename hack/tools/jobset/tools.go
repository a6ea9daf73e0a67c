//go:build tools

// Package jobset pins the JobSet controller (sigs.k8s.io/jobset) that berth's local rig runs,
// built from the Go module proxy by hack/build-tools.sh: gangs of JobSets restarted by their
// failure policy are tested against the real controller. Its own module, so JobSet's
// dependencies never move berth's or the rig's versions.
package jobset

import (
	_ "sigs.k8s.io/jobset"
)
