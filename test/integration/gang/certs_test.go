package gang_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-dev/berth/controllers/podgroup/gate"
	"github.com/berth-dev/berth/test/rigtest"
)

// webhookSecret is where the in-process controller keeps its certificate (main_test.go).
var webhookSecret = client.ObjectKey{Namespace: "kube-system", Name: "berth-webhook-cert"}

// TestCABundleResetIsHealed: a CA bundle reset on the webhook configuration (GitOps applying the
// chart's empty caBundle, a hand edit) is injected again within seconds, and the webhook gates
// members again.
func TestCABundleResetIsHealed(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	var sec corev1.Secret
	if err := c.Get(ctx, webhookSecret, &sec); err != nil {
		t.Fatal(err)
	}
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: gate.ConfigurationName}, &cfg); err != nil {
		t.Fatal(err)
	}
	for i := range cfg.Webhooks {
		cfg.Webhooks[i].ClientConfig.CABundle = []byte("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n")
	}
	if err := c.Update(ctx, &cfg); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rigtest.Eventually(t, 10*time.Second, 100*time.Millisecond, "CA bundle injected again", func(ctx context.Context) (bool, string, error) {
		var got admissionregistrationv1.MutatingWebhookConfiguration
		if err := c.Get(ctx, client.ObjectKey{Name: gate.ConfigurationName}, &got); err != nil {
			return false, "", err
		}
		for _, w := range got.Webhooks {
			if !bytes.Equal(w.ClientConfig.CABundle, sec.Data["ca.crt"]) {
				return false, "webhook " + w.Name + " still has the reset bundle", nil
			}
		}
		return true, "", nil
	})
	t.Logf("CA bundle healed %v after the reset", time.Since(start).Round(time.Millisecond))
	if err := rigtest.WaitWebhookGates(ctx, c); err != nil {
		t.Fatal(err)
	}
}

// TestServingCertificateRenewalKeepsTheCA: a serving certificate that must be renewed (here:
// removed from the Secret) is issued again under the same CA — a replica still serving the
// previous one stays trusted under the bundle — and this replica serves the new one at once.
func TestServingCertificateRenewalKeepsTheCA(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	var sec corev1.Secret
	if err := c.Get(ctx, webhookSecret, &sec); err != nil {
		t.Fatal(err)
	}
	ca, leaf := sec.Data["ca.crt"], sec.Data["tls.crt"]
	delete(sec.Data, "tls.crt")
	delete(sec.Data, "tls.key")
	if err := c.Update(ctx, &sec); err != nil {
		t.Fatal(err)
	}
	rigtest.Eventually(t, 10*time.Second, 100*time.Millisecond, "serving certificate issued again", func(ctx context.Context) (bool, string, error) {
		var got corev1.Secret
		if err := c.Get(ctx, webhookSecret, &got); err != nil {
			return false, "", err
		}
		switch {
		case len(got.Data["tls.crt"]) == 0:
			return false, "no serving certificate yet", nil
		case bytes.Equal(got.Data["tls.crt"], leaf):
			return false, "the old certificate", nil
		case !bytes.Equal(got.Data["ca.crt"], ca):
			t.Fatalf("the CA changed with the serving certificate: replicas serving the old one would no longer be trusted")
		}
		return true, "", nil
	})
	if err := rigtest.WaitWebhookGates(ctx, c); err != nil {
		t.Fatal(err)
	}
}
