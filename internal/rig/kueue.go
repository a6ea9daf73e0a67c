package rig

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Kueue on the rig: its binary, namespace and the names its certificate rotator looks for.
const (
	// BinKueue is the Kueue controller manager (sigs.k8s.io/kueue/cmd/kueue), built by
	// hack/build-tools.sh.
	BinKueue = "kueue-controller"
	// KueueNamespace is where Kueue keeps its webhook certificate Secret, as its manifests install it.
	KueueNamespace = "kueue-system"
	// kueueWebhookService is the Service Kueue's webhook configurations and conversion webhooks
	// name; its certificate is issued for <service>.<namespace>.svc.
	kueueWebhookService = "kueue-webhook-service"
	kueueWebhookSecret  = "kueue-webhook-server-cert"
)

// kueueConversionCRDs are the CRDs Kueue serves in two versions through its conversion webhook
// (its config/components/crd patches); its certificate rotator injects its CA into them.
var kueueConversionCRDs = map[string]bool{
	"localqueues.kueue.x-k8s.io": true, "clusterqueues.kueue.x-k8s.io": true, "cohorts.kueue.x-k8s.io": true,
	"workloads.kueue.x-k8s.io": true, "multikueueclusters.kueue.x-k8s.io": true,
}

// kueueNamespacedWebhooks are Kueue's webhooks on core workloads, kept out of kube-system and
// Kueue's namespace as its config/components/webhook patches keep them.
var kueueNamespacedWebhooks = map[string]bool{
	"mpod.kb.io": true, "mdeployment.kb.io": true, "mstatefulset.kb.io": true,
	"vpod.kb.io": true, "vdeployment.kb.io": true, "vstatefulset.kb.io": true,
}

// KueueFrameworks are the Kueue integrations the rig enables: Jobs and plain pods (pod groups).
var KueueFrameworks = []string{"batch/job", "pod"}

// StartKueue runs the real Kueue controller manager against the rig, installed as its release
// manifests install it: the ProvisioningRequest CRD (so Kueue's provisioning admission check is
// on), Kueue's CRDs with their conversion webhooks, its mutating and validating webhooks, and its
// own certificate management. The apiserver reaches the webhooks through an ExternalName Service
// to localhost (Endpoints may not hold loopback addresses) and checks Kueue's certificate against
// the Service's name, as in a cluster. It returns once Kueue is ready and its CA is in every
// webhook configuration and conversion webhook.
func (r *Rig) StartKueue(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*r.opts.StartTimeout)
	defer cancel()
	if err := r.InstallCRDsFromDir(ctx, filepath.Join(r.opts.ToolsDir, "crds", "provisioningrequest")); err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: KueueNamespace}}
	if err := r.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("rig: creating namespace %s: %w", KueueNamespace, err)
	}
	ports, err := freePorts(2)
	if err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	webhookPort, healthPort := ports[0], ports[1]
	svc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": kueueWebhookService, "namespace": KueueNamespace},
		"spec": map[string]any{"type": "ExternalName", "externalName": "localhost",
			"ports": []any{map[string]any{"name": "https", "port": int64(webhookPort), "protocol": "TCP"}}},
	}}
	// The Secret its certificate rotator fills (its manifests create it empty).
	secret := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": kueueWebhookSecret, "namespace": KueueNamespace},
	}}
	if err := r.Client.Create(ctx, secret); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("rig: creating Secret %s/%s: %w", KueueNamespace, kueueWebhookSecret, err)
	}
	if err := r.Apply(ctx, svc); err != nil {
		return err
	}
	if err := r.installKueueCRDs(ctx, webhookPort); err != nil {
		return err
	}
	if err := r.installKueueWebhooks(ctx, webhookPort); err != nil {
		return err
	}
	dir := filepath.Join(r.opts.WorkDir, "kueue")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	cfgFile, certDir := filepath.Join(dir, "config.yaml"), filepath.Join(dir, "certs")
	if err := os.WriteFile(cfgFile, []byte(kueueConfig(webhookPort, healthPort, certDir)), 0o600); err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	p, err := r.start(BinKueue, r.bin(BinKueue), []string{
		"--kubeconfig=" + r.Kubeconfig, "--config=" + cfgFile,
		// The visibility API is an aggregated apiserver of its own; nothing here reads it.
		"--feature-gates=VisibilityOnDemand=false",
		"--zap-log-level=2",
	}, nil)
	if err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	if err := r.mountKueueCerts(ctx, certDir); err != nil {
		return err
	}
	if err := r.waitHealthy(ctx, p, "http://127.0.0.1:"+strconv.Itoa(healthPort)+"/readyz"); err != nil {
		return err
	}
	if err := r.waitKueueCA(ctx); err != nil {
		return err
	}
	r.opts.Logf("rig: Kueue running (webhooks on 127.0.0.1:%d)", webhookPort)
	return nil
}

// mountKueueCerts does what the kubelet does for Kueue's pod: once Kueue's certificate rotator
// has written its certificates to the Secret, their files appear in the folder the Secret is
// mounted at (Kueue waits for them there before it serves).
func (r *Rig) mountKueueCerts(ctx context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	var s corev1.Secret
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: KueueNamespace, Name: kueueWebhookSecret}, &s)
		return err == nil && len(s.Data["tls.crt"]) > 0 && len(s.Data["tls.key"]) > 0 && len(s.Data["ca.crt"]) > 0, nil
	}); err != nil {
		return fmt.Errorf("rig: Kueue never wrote its certificates to Secret %s/%s: %w", KueueNamespace, kueueWebhookSecret, err)
	}
	for name, data := range s.Data {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return fmt.Errorf("rig: %w", err)
		}
	}
	return nil
}

// kueueConfig is Kueue's Configuration for the rig: loopback ports, no leader election, its own
// certificate management (its files read from certDir), no metrics server.
func kueueConfig(webhookPort, healthPort int, certDir string) string {
	frameworks := ""
	for _, f := range KueueFrameworks {
		frameworks += "  - " + strconv.Quote(f) + "\n"
	}
	return fmt.Sprintf(`apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: %s
health:
  healthProbeBindAddress: 127.0.0.1:%d
metrics:
  bindAddress: "0"
webhook:
  host: 127.0.0.1
  port: %d
  certDir: %s
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: true
  webhookServiceName: %s
  webhookSecretName: %s
integrations:
  frameworks:
%s`, KueueNamespace, healthPort, webhookPort, certDir, kueueWebhookService, kueueWebhookSecret, frameworks)
}

// kueueWebhookClient is the clientConfig of every Kueue webhook on the rig.
func kueueWebhookClient(port int, path string) map[string]any {
	return map[string]any{"service": map[string]any{
		"name": kueueWebhookService, "namespace": KueueNamespace, "path": path, "port": int64(port),
	}}
}

// installKueueCRDs applies Kueue's CRDs, with the conversion webhook on those Kueue converts.
func (r *Rig) installKueueCRDs(ctx context.Context, port int) error {
	objs, err := readManifestDir(filepath.Join(r.opts.ToolsDir, "crds", "kueue"))
	if err != nil {
		return err
	}
	for _, o := range objs {
		if !kueueConversionCRDs[o.GetName()] {
			continue
		}
		conv := map[string]any{"strategy": "Webhook", "webhook": map[string]any{
			"clientConfig": kueueWebhookClient(port, "/convert"), "conversionReviewVersions": []any{"v1"},
		}}
		if err := unstructured.SetNestedField(o.Object, conv, "spec", "conversion"); err != nil {
			return fmt.Errorf("rig: CRD %s: %w", o.GetName(), err)
		}
	}
	return r.installCRDObjects(ctx, objs)
}

// installKueueWebhooks creates Kueue's webhook configurations under the names its certificate
// rotator injects its CA into, routed to the webhook Service.
func (r *Rig) installKueueWebhooks(ctx context.Context, port int) error {
	path := filepath.Join(r.opts.ToolsDir, "kueue", "webhooks.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("rig: Kueue's webhook manifests (run hack/build-tools.sh): %w", err)
	}
	objs, err := DecodeManifests(data)
	if err != nil {
		return fmt.Errorf("rig: %s: %w", path, err)
	}
	for _, o := range objs {
		o.SetName("kueue-" + o.GetName())
		hooks, _, err := unstructured.NestedSlice(o.Object, "webhooks")
		if err != nil {
			return fmt.Errorf("rig: %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		for i, h := range hooks {
			m, ok := h.(map[string]any)
			if !ok {
				return fmt.Errorf("rig: %s %s: webhook %d is not an object", o.GetKind(), o.GetName(), i)
			}
			p, _, _ := unstructured.NestedString(m, "clientConfig", "service", "path")
			m["clientConfig"] = kueueWebhookClient(port, p)
			if name, _ := m["name"].(string); kueueNamespacedWebhooks[name] {
				m["namespaceSelector"] = map[string]any{"matchExpressions": []any{map[string]any{
					"key": corev1.LabelMetadataName, "operator": "NotIn", "values": []any{metav1.NamespaceSystem, KueueNamespace},
				}}}
			}
		}
		if err := unstructured.SetNestedSlice(o.Object, hooks, "webhooks"); err != nil {
			return fmt.Errorf("rig: %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		if err := r.Apply(ctx, o); err != nil {
			return err
		}
	}
	return nil
}

// waitKueueCA waits until Kueue's certificate rotator has put its CA into both webhook
// configurations and every conversion webhook: before that the apiserver cannot call Kueue.
func (r *Rig) waitKueueCA(ctx context.Context) error {
	type target struct {
		apiVersion, kind, name string
		path                   []string
	}
	targets := []target{
		{admissionregistrationv1.SchemeGroupVersion.String(), "MutatingWebhookConfiguration", "kueue-mutating-webhook-configuration", nil},
		{admissionregistrationv1.SchemeGroupVersion.String(), "ValidatingWebhookConfiguration", "kueue-validating-webhook-configuration", nil},
	}
	for name := range kueueConversionCRDs {
		targets = append(targets, target{apiextensionsv1.SchemeGroupVersion.String(), "CustomResourceDefinition", name,
			[]string{"spec", "conversion", "webhook", "clientConfig", "caBundle"}})
	}
	var missing error
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		missing = nil
		for _, t := range targets {
			o := &unstructured.Unstructured{}
			o.SetAPIVersion(t.apiVersion)
			o.SetKind(t.kind)
			if err := r.Client.Get(ctx, client.ObjectKey{Name: t.name}, o); err != nil {
				missing = errors.Join(missing, fmt.Errorf("%s %s: %w", t.kind, t.name, err))
				continue
			}
			if !hasCABundle(o, t.path) {
				missing = errors.Join(missing, fmt.Errorf("%s %s has no CA bundle", t.kind, t.name))
			}
		}
		return missing == nil, nil
	})
	if err != nil {
		return fmt.Errorf("rig: Kueue never injected its CA: %w", errors.Join(err, missing))
	}
	return nil
}

// hasCABundle says whether o carries a CA bundle at path, or, for webhook configurations (nil
// path), in every webhook.
func hasCABundle(o *unstructured.Unstructured, path []string) bool {
	if path != nil {
		ca, _, _ := unstructured.NestedString(o.Object, path...)
		return ca != ""
	}
	hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
	for _, h := range hooks {
		m, _ := h.(map[string]any)
		if ca, _, _ := unstructured.NestedString(m, "clientConfig", "caBundle"); ca == "" {
			return false
		}
	}
	return len(hooks) > 0
}
