package api_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-dev/berth/test/rig"
	"github.com/berth-dev/berth/test/rig/rigtest"
)

// TestSamplesApply: every manifest in config/samples is accepted by the apiserver (server-side
// dry run, so nothing is left behind).
func TestSamplesApply(t *testing.T) {
	files, err := filepath.Glob("../../../config/samples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples found: %v", err)
	}
	c := rigtest.Current().Client
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := rig.DecodeManifests(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, o := range objs {
			if err := c.Create(context.Background(), o, client.DryRunAll); err != nil {
				t.Errorf("%s: %s %s rejected: %v", filepath.Base(f), o.GetKind(), o.GetName(), err)
			}
		}
	}
}
