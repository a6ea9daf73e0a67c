package rig

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
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
	wc, err := r.prepareWebhookController("lws", "config.lws.x-k8s.io")
	if err != nil {
		return err
	}
	if err := r.StartComponent(ctx, BinLWS, r.bin(BinLWS), []string{"--kubeconfig=" + r.Kubeconfig, "--config=" + wc.configFile}, nil,
		"http://"+wc.health+"/readyz"); err != nil {
		return err
	}
	return r.installLWSWebhooks(ctx, wc.webhookPort, wc.caPEM)
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
