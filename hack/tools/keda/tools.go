//go:build tools

// Package keda pins the KEDA operator and metrics adapter that berth's local rig runs, built
// from the Go module proxy by hack/build-tools.sh. It is its own module so KEDA's large
// dependency graph never moves the versions of the Kubernetes control plane in ../go.mod.
package keda

import (
	_ "github.com/kedacore/keda/v2/cmd/adapter"
	_ "github.com/kedacore/keda/v2/cmd/operator"
)
