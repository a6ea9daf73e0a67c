//go:build tools

// Package prometheus pins Prometheus, which hack/build-tools.sh builds for the rig: the rig
// runs it from the configuration the Prometheus Operator generates (rigtest.RunGenerated) —
// with Kubernetes service discovery, which Debian's package leaves out. Its own module: the
// operator's module pins an older client-go than this Prometheus builds with.
package prometheus

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
)
