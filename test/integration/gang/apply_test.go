package gang_test

import (
	"context"
	"fmt"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/berth-dev/berth/controllers/podgroup/gate"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/rigtest"
)

// apply server-side-applies a multi-document manifest, as `kubectl apply --server-side` does.
func apply(t *testing.T, manifest string) {
	t.Helper()
	objs, err := rig.DecodeManifests([]byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if err := rigtest.Current().Apply(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
}

// deadWebhook installs a second pod-gate configuration pointing at a closed port, as if
// berth's webhook were down, and removes it when the test ends.
func deadWebhook(t *testing.T) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	port, err := rig.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("https://127.0.0.1:%d%s", port, gate.Path)
	cfg := gate.Configuration(admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: []byte("-")}, nil)
	cfg.Name = "berth-pod-gate-down"
	cfg.Webhooks[0].ClientConfig.CABundle = nil
	c := rigtest.Current().Client
	if err := c.Create(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), cfg) })
	return cfg
}
