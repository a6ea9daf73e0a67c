package certs

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/berth-dev/berth/controllers/podgroup/gate"
)

func TestCertManagerIssuesRenewsAndInjects(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	url := "https://127.0.0.1:9443/x"
	cfg := gate.Configuration(admissionregistrationv1.WebhookClientConfig{URL: &url}, []gate.Source{gate.SourceKueue})
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(cfg).Build()
	dir := t.TempDir()
	m := &CertManager{Client: c, Namespace: "berth-system", SecretName: "cert", Hosts: []string{"berth-webhook.berth-system.svc", "127.0.0.1"},
		CertDir: dir, WebhookConfiguration: gate.ConfigurationName, Validity: 90 * 24 * time.Hour, Clock: clk}
	if err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	var sec corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: "berth-system", Name: "cert"}, &sec); err != nil {
		t.Fatal(err)
	}
	cert, err := parseCert(sec.Data[keyCert])
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range m.Hosts {
		if err := cert.VerifyHostname(h); err != nil {
			t.Errorf("certificate not valid for %s: %v", h, err)
		}
	}
	if data, err := os.ReadFile(filepath.Join(dir, keyCert)); err != nil || string(data) != string(sec.Data[keyCert]) {
		t.Errorf("tls.crt not written to the cert dir: %v", err)
	}
	var got admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: gate.ConfigurationName}, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Webhooks) != 2 {
		t.Fatalf("webhook configuration has %d webhooks, want 2 (berth and kueue)", len(got.Webhooks))
	}
	for _, w := range got.Webhooks {
		if string(w.ClientConfig.CABundle) != string(sec.Data[keyCACert]) {
			t.Errorf("webhook %s has no CA injected", w.Name)
		}
	}

	// Halfway through its life the certificate is kept; with under a third left it is renewed.
	clk.Step(45 * 24 * time.Hour)
	if err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	var same corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: "berth-system", Name: "cert"}, &same); err != nil {
		t.Fatal(err)
	}
	if string(same.Data[keyCert]) != string(sec.Data[keyCert]) {
		t.Error("certificate renewed with half its lifetime left")
	}
	clk.Step(20 * 24 * time.Hour)
	if err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	var renewed corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: "berth-system", Name: "cert"}, &renewed); err != nil {
		t.Fatal(err)
	}
	if string(renewed.Data[keyCert]) == string(sec.Data[keyCert]) {
		t.Error("certificate not renewed with under a third of its lifetime left")
	}
	if err := c.Get(ctx, client.ObjectKey{Name: gate.ConfigurationName}, &got); err != nil {
		t.Fatal(err)
	}
	for _, w := range got.Webhooks {
		if string(w.ClientConfig.CABundle) != string(renewed.Data[keyCACert]) {
			t.Errorf("renewed CA not injected into webhook %s", w.Name)
		}
	}
	// Renewed now, for Validity: it expires exactly 90 days from the (whole-second) fake clock.
	exp, err := m.CertificateExpiry(ctx)
	if want := clk.Now().Add(90 * 24 * time.Hour); err != nil || !exp.Equal(want) {
		t.Errorf("expiry %v (err %v), want %v", exp, err, want)
	}

	// Other hosts (the Service was renamed): renewed at once.
	m.Hosts = []string{"berth.other.svc"}
	before := renewed.Data[keyCert]
	if err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "berth-system", Name: "cert"}, &renewed); err != nil {
		t.Fatal(err)
	}
	if string(renewed.Data[keyCert]) == string(before) {
		t.Error("certificate not reissued for new hosts")
	}
}
