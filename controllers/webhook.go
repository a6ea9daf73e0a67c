package controllers

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/berth-dev/berth/controllers/podgroup/gate"
	"github.com/berth-dev/berth/internal/certs"
)

// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",namespace=berth-system,resources=secrets,verbs=get;create;update
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=berth-system,resources=leases,verbs=get;create;update

// WebhookOptions configure the pod-gate webhook and its certificate.
type WebhookOptions struct {
	// Host and Port the webhook server listens on; Port 0 disables the webhook.
	Host string
	Port int
	// CertDir holds tls.crt and tls.key.
	CertDir string
	// Adapters are the enabled foreign gang sources.
	Adapters []gate.Source
	// ManageCertificate makes the controller issue and rotate its own certificate
	// (otherwise cert-manager or the user provides CertDir's files).
	ManageCertificate bool
	// SecretNamespace and SecretName hold the self-managed certificate.
	SecretNamespace, SecretName string
	// Hosts are the names (and IPs) the certificate is for.
	Hosts []string
}

func (o ManagerOptions) webhookServer() webhook.Server {
	if o.Webhook.Port == 0 {
		return nil
	}
	return webhook.NewServer(webhook.Options{Host: o.Webhook.Host, Port: o.Webhook.Port, CertDir: o.Webhook.CertDir})
}

// setupWebhook registers the gate and, with a self-managed certificate, issues it before the
// webhook server starts (it needs the files) and keeps renewing it on every replica.
func (o ManagerOptions) setupWebhook(mgr ctrl.Manager, cfg *rest.Config) error {
	w := o.Webhook
	if w.Port == 0 {
		return nil
	}
	gt := &gate.Gate{Adapters: w.Adapters, Decoder: admission.NewDecoder(mgr.GetScheme())}
	mgr.GetWebhookServer().Register(gate.Path, &webhook.Admission{Handler: gt})
	certs.WatchServingCertificate(w.CertDir)
	if !w.ManageCertificate {
		return nil
	}
	direct, err := client.New(cfg, client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return fmt.Errorf("creating client for the webhook certificate: %w", err)
	}
	cm := &certs.CertManager{
		Client: direct, Namespace: w.SecretNamespace, SecretName: w.SecretName, Hosts: w.Hosts,
		CertDir: w.CertDir, WebhookConfiguration: gate.ConfigurationName,
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cm.Ensure(ctx); err != nil {
		return fmt.Errorf("issuing the webhook certificate: %w", err)
	}
	if err := mgr.Add(cm); err != nil {
		return fmt.Errorf("adding webhook certificate manager: %w", err)
	}
	return nil
}
