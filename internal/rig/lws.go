package rig

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/certs"
)

// BinLWS is the LeaderWorkerSet controller (sigs.k8s.io/lws/cmd), built by hack/build-tools.sh.
const BinLWS = "lws-controller"

// LWSBuilt reports whether the LeaderWorkerSet controller's binary is in the tools folder.
func LWSBuilt(toolsDir string) bool {
	fi, err := os.Stat(filepath.Join(toolsDir, "bin", BinLWS))
	return err == nil && fi.Mode()&0o111 != 0
}

// StartLWS runs the real LeaderWorkerSet controller against the rig with its CRD and its
// webhooks registered as LeaderWorkerSet's manifests register them (defaulting and validating
// LeaderWorkerSets; labelling each group's pods, which its controller reads), routed to the
// controller's loopback port under a CA the rig issues. Its pod webhooks see only
// LeaderWorkerSet pods, as its kustomize patches scope them.
func (r *Rig) StartLWS(ctx context.Context) error {
	if err := r.InstallCRDsFromDir(ctx, filepath.Join(r.opts.ToolsDir, "crds", "lws")); err != nil {
		return err
	}
	dir := filepath.Join(r.opts.WorkDir, "lws")
	certDir := filepath.Join(dir, "certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	now := time.Now()
	ca, err := certs.Issue(certs.CA("lws-webhook-ca", now.Add(-time.Hour), now.Add(24*time.Hour)), nil)
	if err != nil {
		return fmt.Errorf("rig: lws webhook CA: %w", err)
	}
	kp, err := certs.Issue(certs.Serving("lws-webhook", []string{"127.0.0.1"}, now.Add(-time.Hour), now.Add(24*time.Hour)), ca)
	if err != nil {
		return fmt.Errorf("rig: lws webhook certificate: %w", err)
	}
	for name, data := range map[string][]byte{"tls.crt": kp.CertPEM, "tls.key": kp.KeyPEM} {
		if err := os.WriteFile(filepath.Join(certDir, name), data, 0o600); err != nil {
			return fmt.Errorf("rig: %w", err)
		}
	}
	ports, err := freePorts(2)
	if err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	health := "127.0.0.1:" + strconv.Itoa(ports[1])
	cfg := fmt.Sprintf(`apiVersion: config.lws.x-k8s.io/v1alpha1
kind: Configuration
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
webhook:
  host: 127.0.0.1
  port: %d
  certDir: %s
metrics:
  bindAddress: "0"
health:
  healthProbeBindAddress: %s
`, ports[0], certDir, health)
	cfgFile := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		return fmt.Errorf("rig: %w", err)
	}
	if err := r.StartComponent(ctx, BinLWS, r.bin(BinLWS), []string{"--kubeconfig=" + r.Kubeconfig, "--config=" + cfgFile}, nil,
		"http://"+health+"/readyz"); err != nil {
		return err
	}
	return r.installLWSWebhooks(ctx, ports[0], ca.CertPEM)
}

// installLWSWebhooks registers LeaderWorkerSet's webhook configurations (from its
// config/webhook manifests) pointed at 127.0.0.1:port.
func (r *Rig) installLWSWebhooks(ctx context.Context, port int, caPEM []byte) error {
	raw, err := os.ReadFile(filepath.Join(r.opts.ToolsDir, "lws", "webhooks.yaml"))
	if err != nil {
		return fmt.Errorf("rig: LeaderWorkerSet's webhook manifests (hack/build-tools.sh copies them): %w", err)
	}
	route := func(cc *admissionregistrationv1.WebhookClientConfig, rules []admissionregistrationv1.RuleWithOperations) (*metav1.LabelSelector, error) {
		if cc.Service == nil || cc.Service.Path == nil {
			return nil, fmt.Errorf("rig: a LeaderWorkerSet webhook without a service path")
		}
		url := fmt.Sprintf("https://127.0.0.1:%d%s", port, *cc.Service.Path)
		*cc = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM}
		for _, rule := range rules {
			for _, res := range rule.Resources {
				if res == "pods" {
					return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: berthv1alpha1.LWSNameLabel, Operator: metav1.LabelSelectorOpExists}}}, nil
				}
			}
		}
		return nil, nil
	}
	for _, doc := range bytes.Split(raw, []byte("\n---")) {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return fmt.Errorf("rig: LeaderWorkerSet webhook manifests: %w", err)
		}
		var obj client.Object
		switch meta.Kind {
		case "MutatingWebhookConfiguration":
			m := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := yaml.Unmarshal(doc, m); err != nil {
				return fmt.Errorf("rig: %w", err)
			}
			for i := range m.Webhooks {
				w := &m.Webhooks[i]
				if w.ObjectSelector, err = route(&w.ClientConfig, w.Rules); err != nil {
					return err
				}
			}
			m.Name = "lws-" + m.Name
			obj = m
		case "ValidatingWebhookConfiguration":
			v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := yaml.Unmarshal(doc, v); err != nil {
				return fmt.Errorf("rig: %w", err)
			}
			for i := range v.Webhooks {
				w := &v.Webhooks[i]
				if w.ObjectSelector, err = route(&w.ClientConfig, w.Rules); err != nil {
					return err
				}
			}
			v.Name = "lws-" + v.Name
			obj = v
		default:
			continue
		}
		if err := r.Client.Create(ctx, obj); err != nil {
			return fmt.Errorf("rig: registering LeaderWorkerSet's %s: %w", meta.Kind, err)
		}
	}
	r.opts.Logf("rig: LeaderWorkerSet controller running (webhooks on 127.0.0.1:%d)", port)
	return nil
}
