package rig

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
)

// BinPrometheusOperator is the Prometheus Operator (github.com/prometheus-operator/prometheus-operator,
// from hack/tools/monitoring) and BinPrometheus is Prometheus (github.com/prometheus/prometheus,
// from hack/tools/prometheus), both built by hack/build-tools.sh.
const (
	BinPrometheusOperator = "prometheus-operator"
	BinPrometheus         = "prometheus"
)

// StartPrometheusOperator runs the real Prometheus Operator against the rig with its CRDs (the
// set kube-prometheus-stack installs, from the operator's own module): it selects
// ServiceMonitors, PodMonitors and PrometheusRules for each Prometheus resource and writes the
// Prometheus configuration and rule files it generates from them into Secrets and ConfigMaps,
// exactly as in a cluster. The StatefulSet it creates for a Prometheus has no kubelet to run it
// here; a test runs Prometheus itself from what the operator wrote. It talks to the API server
// with the rig's admin certificate (the operator has no kubeconfig flag).
func (r *Rig) StartPrometheusOperator(ctx context.Context) error {
	if err := r.InstallCRDsFromDir(ctx, filepath.Join(r.opts.ToolsDir, "crds", "monitoring")); err != nil {
		return fmt.Errorf("rig: Prometheus Operator CRDs: %w", err)
	}
	port, err := FreePort()
	if err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	listen := "127.0.0.1:" + strconv.Itoa(port)
	return r.StartComponent(ctx, BinPrometheusOperator, r.bin(BinPrometheusOperator), []string{
		"--apiserver=" + r.Config.Host,
		"--ca-file=" + r.pki.path("ca.crt"), "--cert-file=" + r.pki.path("admin.crt"), "--key-file=" + r.pki.path("admin.key"),
		"--web.listen-address=" + listen, "--log-level=info",
	}, nil, "http://"+listen+"/healthz")
}
