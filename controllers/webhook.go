package controllers

import (
	"context"
	"crypto/tls"
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

// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,verbs=get;list;watch;patch;update
// +kubebuilder:rbac:groups="",namespace=berth-system,resources=secrets,verbs=get;list;watch;create;update
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

func (o ManagerOptions) webhookServer(rot *certs.Rotator) webhook.Server {
	if o.Webhook.Port == 0 {
		return nil
	}
	opts := webhook.Options{Host: o.Webhook.Host, Port: o.Webhook.Port, CertDir: o.Webhook.CertDir}
	if rot != nil {
		// Served from the Secret, not from files: the server starts before the first
		// certificate is issued and every replica serves a renewal at once.
		opts.TLSOpts = []func(*tls.Config){rot.TLSOpts()}
	}
	return webhook.NewServer(opts)
}

// rotator is the self-managed certificate's Rotator (nil when cert-manager or the user provide
// the files, or the webhook is off).
func (o ManagerOptions) rotator() *certs.Rotator {
	w := o.Webhook
	if w.Port == 0 || !w.ManageCertificate {
		return nil
	}
	return certs.NewRotator(w.SecretNamespace, w.SecretName, w.Hosts, w.CertDir, gate.ConfigurationName)
}

// setupWebhook registers the gate and, with a self-managed certificate, the rotation of the
// certificate (cert-controller) and this replica's serving of it.
func (o ManagerOptions) setupWebhook(mgr ctrl.Manager, cfg *rest.Config, rot *certs.Rotator) error {
	w := o.Webhook
	if w.Port == 0 {
		return nil
	}
	gt := &gate.Gate{Adapters: w.Adapters, Decoder: admission.NewDecoder(mgr.GetScheme())}
	mgr.GetWebhookServer().Register(gate.Path, &webhook.Admission{Handler: gt})
	certs.WatchServingCertificate(w.CertDir)
	if rot == nil {
		return nil
	}
	direct, err := client.New(cfg, client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return fmt.Errorf("creating client for the webhook certificate: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return rot.Add(ctx, mgr, direct)
}
