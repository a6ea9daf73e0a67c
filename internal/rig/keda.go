package rig

import (
	"context"
	"fmt"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// KEDA binaries and where KEDA keeps its things.
const (
	BinKEDAOperator = "keda-operator"
	BinKEDAAdapter  = "keda-adapter"
	// KEDANamespace is where the operator writes its certificates and the adapter's Service lives.
	KEDANamespace = "keda"
	kedaCertsName = "kedaorg-certs"
)

// KEDABuilt reports whether toolsDir holds KEDA's binaries (hack/build-tools.sh builds them last
// for the demo, which starts before they exist).
func KEDABuilt(toolsDir string) bool {
	for _, b := range []string{BinKEDAOperator, BinKEDAAdapter} {
		if fi, err := os.Stat(filepath.Join(toolsDir, "bin", b)); err != nil || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// StartKEDA runs the real KEDA operator and metrics adapter against the rig, with KEDA's CRDs
// and the aggregation layer routing external.metrics.k8s.io to the adapter on loopback, so the
// HPA controller in kube-controller-manager reads KEDA's external metrics as on a real cluster.
func (r *Rig) StartKEDA(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*r.opts.StartTimeout)
	defer cancel()
	if err := r.InstallCRDsFromDir(ctx, filepath.Join(r.opts.ToolsDir, "crds", "keda")); err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: KEDANamespace}}
	if err := r.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("rig: creating namespace %s: %w", KEDANamespace, err)
	}
	ports, err := freePorts(5)
	if err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	metricsPort, healthPort, grpcPort, adapterPort, adapterMetricsPort := ports[0], ports[1], ports[2], ports[3], ports[4]
	certDir := filepath.Join(r.opts.WorkDir, "keda-certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	env := []string{"WATCH_NAMESPACE=", "POD_NAMESPACE=" + KEDANamespace, "KEDA_CLUSTER_OBJECT_NAMESPACE=" + KEDANamespace}
	opArgs := []string{
		"--kubeconfig=" + r.Kubeconfig, "--cert-dir=" + certDir,
		"--enable-cert-rotation=true", "--enable-webhook-patching=false", "--enable-apiservice-patching=false",
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(metricsPort),
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(healthPort),
		"--metrics-service-bind-address=127.0.0.1:" + strconv.Itoa(grpcPort),
		"--zap-log-level=info",
	}
	// On its first start the operator writes its certificates to a Secret and exits on purpose
	// once its rotator sees them — possibly after its health endpoint already answers, so a
	// first process that looks healthy may still be about to exit (and a rig that went on with
	// it had no operator: no HPA, no scale loop). The first process only writes the
	// certificates: once they are in the Secret it is stopped, if it has not exited, and a
	// second one, which finds them, is what runs.
	op, err := r.start(BinKEDAOperator, r.bin(BinKEDAOperator), opArgs, env)
	if err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	if err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if done, _ := op.exited(); done {
			return true, nil
		}
		return r.kedaCertsWritten(ctx), nil
	}); err != nil {
		return fmt.Errorf("rig: KEDA operator never wrote its certificates to Secret %s/%s: %w", KEDANamespace, kedaCertsName, err)
	}
	if err := op.stop(10 * time.Second); err != nil {
		return fmt.Errorf("rig: stopping the KEDA operator's certificate-writing start: %w", err)
	}
	r.forget(op)
	if op, err = r.start(BinKEDAOperator, r.bin(BinKEDAOperator), opArgs, env); err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	if err := r.waitHealthy(ctx, op, "http://127.0.0.1:"+strconv.Itoa(healthPort)+"/healthz"); err != nil {
		return err
	}
	if err := r.copyKEDACerts(ctx, certDir); err != nil {
		return err
	}
	adapter, err := r.start(BinKEDAAdapter, r.bin(BinKEDAAdapter), []string{
		"--kubeconfig=" + r.Kubeconfig, "--lister-kubeconfig=" + r.Kubeconfig,
		"--authentication-kubeconfig=" + r.Kubeconfig, "--authorization-kubeconfig=" + r.Kubeconfig,
		"--secure-port=" + strconv.Itoa(adapterPort), "--bind-address=127.0.0.1", "--cert-dir=" + certDir,
		"--tls-cert-file=" + filepath.Join(certDir, "tls.crt"), "--tls-private-key-file=" + filepath.Join(certDir, "tls.key"),
		"--requestheader-client-ca-file=" + r.pki.path("front-proxy-ca.crt"),
		"--metrics-service-address=127.0.0.1:" + strconv.Itoa(grpcPort),
		"--metrics-service-grpc-authority=keda-operator.keda.svc.cluster.local",
		"--port=" + strconv.Itoa(adapterMetricsPort), "--v=1",
	}, env)
	if err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	if err := r.waitHealthy(ctx, adapter, "https://127.0.0.1:"+strconv.Itoa(adapterPort)+"/readyz"); err != nil {
		return err
	}
	return r.routeExternalMetrics(ctx, adapterPort)
}

func (r *Rig) kedaCertsWritten(ctx context.Context) bool {
	var s corev1.Secret
	return r.Client.Get(ctx, client.ObjectKey{Namespace: KEDANamespace, Name: kedaCertsName}, &s) == nil && len(s.Data["tls.crt"]) > 0
}

// copyKEDACerts writes the operator's CA and serving pair where the adapter reads them (its
// gRPC client to the operator trusts ca.crt in --cert-dir).
func (r *Rig) copyKEDACerts(ctx context.Context, dir string) error {
	var s corev1.Secret
	if err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		return r.Client.Get(ctx, client.ObjectKey{Namespace: KEDANamespace, Name: kedaCertsName}, &s) == nil, nil
	}); err != nil {
		return fmt.Errorf("rig: KEDA's Secret %s/%s never appeared: %w", KEDANamespace, kedaCertsName, err)
	}
	for _, k := range []string{"ca.crt", "tls.crt", "tls.key"} {
		if len(s.Data[k]) == 0 {
			return fmt.Errorf("rig: KEDA's Secret %s/%s has no %s", KEDANamespace, kedaCertsName, k)
		}
		if err := os.WriteFile(filepath.Join(dir, k), s.Data[k], 0o600); err != nil {
			return fmt.Errorf("rig: %w", err)
		}
	}
	return nil
}

// apiServiceGV is the aggregation layer's API (APIService).
var apiServiceGV = schema.GroupVersion{Group: "apiregistration.k8s.io", Version: "v1"}

// routeExternalMetrics registers the adapter as external.metrics.k8s.io: an ExternalName
// Service to localhost (Endpoints may not hold loopback addresses) and the APIService.
func (r *Rig) routeExternalMetrics(ctx context.Context, port int) error {
	svc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": "keda-metrics-apiserver", "namespace": KEDANamespace},
		"spec": map[string]any{"type": "ExternalName", "externalName": "localhost",
			"ports": []any{map[string]any{"name": "https", "port": int64(port), "protocol": "TCP"}}},
	}}
	apisvc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": apiServiceGV.String(), "kind": "APIService",
		"metadata": map[string]any{"name": "v1beta1.external.metrics.k8s.io"},
		"spec": map[string]any{
			"group": "external.metrics.k8s.io", "version": "v1beta1", "insecureSkipTLSVerify": true,
			"groupPriorityMinimum": int64(100), "versionPriority": int64(100),
			"service": map[string]any{"name": "keda-metrics-apiserver", "namespace": KEDANamespace, "port": int64(port)},
		},
	}}
	for _, o := range []*unstructured.Unstructured{svc, apisvc} {
		if err := r.Apply(ctx, o); err != nil {
			return err
		}
	}
	// Available once the apiserver reaches the adapter through the route.
	if err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		got := &unstructured.Unstructured{}
		got.SetAPIVersion(apiServiceGV.String())
		got.SetKind("APIService")
		if err := r.Client.Get(ctx, client.ObjectKey{Name: "v1beta1.external.metrics.k8s.io"}, got); err != nil {
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Available" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		return fmt.Errorf("rig: APIService v1beta1.external.metrics.k8s.io never became Available: %w", err)
	}
	r.opts.Logf("rig: KEDA operator and metrics adapter running; external.metrics.k8s.io served")
	return nil
}

// forget drops an exited process from the rig's list (so Exited does not report it).
func (r *Rig) forget(p *process) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, q := range r.procs {
		if q == p {
			r.procs = append(r.procs[:i], r.procs[i+1:]...)
			return
		}
	}
}
