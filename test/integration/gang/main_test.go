// Package gang_test checks gang admission on a real control plane: kube-apiserver,
// kube-scheduler, kube-controller-manager and kwok nodes, with berth's controller manager and
// pod-gate webhook running in-process.
package gang_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/berth-dev/berth/controllers"
	"github.com/berth-dev/berth/controllers/podgroup/gate"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/rigtest"
)

// webhookPort is where the in-process webhook listens.
var webhookPort int

func TestMain(m *testing.M) {
	rigtest.Main(m, rig.Options{}, func(ctx context.Context, r *rig.Rig) error {
		if err := rigtest.StartCluster(ctx, r, rig.KwokOptions{}); err != nil {
			return err
		}
		var err error
		if webhookPort, err = rig.FreePort(); err != nil {
			return err
		}
		return startBerth(ctx, r)
	})
}

// startBerth installs the webhook configuration (pointing at loopback) and runs the manager.
func startBerth(ctx context.Context, r *rig.Rig) error {
	url := fmt.Sprintf("https://localhost:%d%s", webhookPort, gate.Path)
	adapters := []gate.Source{gate.SourceCoscheduling, gate.SourceVolcano, gate.SourceKueue}
	cfg := gate.Configuration(admissionregistrationv1.WebhookClientConfig{URL: &url}, adapters)
	if err := r.Client.Create(ctx, cfg); err != nil {
		return fmt.Errorf("creating webhook configuration: %w", err)
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	mgr, err := controllers.NewManager(r.Config, controllers.ManagerOptions{
		Options: controllers.Options{AdmissionResync: rigtest.AdmissionResync},
		Webhook: controllers.WebhookOptions{
			Host: "127.0.0.1", Port: webhookPort, CertDir: filepath.Join(r.WorkDir(), "webhook-certs"),
			Adapters: adapters, ManageCertificate: true, SecretNamespace: "kube-system", SecretName: "berth-webhook-cert",
			Hosts: []string{"localhost"},
		},
	})
	if err != nil {
		return err
	}
	rigtest.RunManager(mgr)
	return rigtest.WaitWebhookGates(ctx, r.Client)
}
