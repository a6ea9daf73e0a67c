package api_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestSamplesApply: every manifest in config/samples is accepted by the apiserver (server-side
// dry run, so nothing is left behind).
func TestSamplesApply(t *testing.T) {
	files, err := filepath.Glob("../../../config/samples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples found: %v", err)
	}
	dryRunFiles(t, files)
}

// TestConfigApplies: the kustomize manifests (RBAC, webhook) are accepted by the apiserver.
func TestConfigApplies(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "berth-system"}}
	if err := rigtest.Current().Client.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	dryRunFiles(t, []string{"../../../config/rbac/role.yaml", "../../../config/webhook/manifests.yaml", "../../../config/scheduling/priorityclass.yaml"})
}

// dryRunFiles creates every object of each YAML file with a server-side dry run.
func dryRunFiles(t *testing.T, files []string) {
	t.Helper()
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
