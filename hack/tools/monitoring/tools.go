//go:build tools

// Package monitoring pins Prometheus Operator's API types, from which hack/build-tools.sh
// generates the ServiceMonitor, PodMonitor and PrometheusRule CRDs the rig installs to
// dry-run berth's Helm chart. Its own module, so it never moves the rig's other tools.
package monitoring

import (
	_ "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
)
