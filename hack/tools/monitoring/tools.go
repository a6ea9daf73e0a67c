//go:build tools

// Package monitoring pins the Prometheus Operator, which hack/build-tools.sh builds for the rig
// (rig.StartPrometheusOperator), and whose CRDs — the set kube-prometheus-stack installs, from
// the operator's own module — the rig installs to dry-run berth's Helm chart and to run the
// operator. Its own module, so it never moves the rig's other tools.
package monitoring

import (
	_ "github.com/prometheus-operator/prometheus-operator/cmd/operator"
)
