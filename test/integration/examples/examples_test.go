// Package examples_test applies every manifest under examples/ to a real kube-apiserver with
// berth's, Karpenter's and Karpenter AWS's CRDs, the way `kubectl apply --server-side` would.
package examples_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/scaler"
	"github.com/berth-dev/berth/test/rigtest"
)

func TestMain(m *testing.M) {
	rigtest.Main(m, rig.Options{}, func(ctx context.Context, r *rig.Rig) error {
		if err := rigtest.InstallBerthCRDs(ctx, r); err != nil {
			return err
		}
		if err := rigtest.InstallToolCRDs(ctx, r, rigtest.CRDsKEDA); err != nil {
			return err
		}
		return rigtest.InstallKarpenterAWSCRDs(ctx, r)
	})
}

func TestExamplesApply(t *testing.T) {
	ctx := context.Background()
	r := rigtest.Current()
	files, err := filepath.Glob("../../../examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	more, err := filepath.Glob("../../../examples/*/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, more...)
	if len(files) < 3 {
		t.Fatalf("found only %v", files)
	}
	if err := r.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			objs, err := rig.DecodeManifests(data)
			if err != nil {
				t.Fatalf("decoding: %v", err)
			}
			if len(objs) == 0 {
				t.Fatal("no objects")
			}
			for _, o := range objs {
				checkBerthTriggers(t, o)
				// Strict, like kubectl: an unknown or misspelt field is an error, not dropped.
				if err := r.Client.Patch(ctx, o, client.Apply, client.FieldOwner("examples"), client.ForceOwnership, client.FieldValidation("Strict")); err != nil { //nolint:staticcheck // SSA of unstructured objects
					t.Errorf("applying %s %s: %v", o.GetKind(), o.GetName(), err)
				}
			}
		})
	}
}

// checkBerthTriggers parses the metadata of every trigger of a ScaledObject that points at
// berth's scaler with the scaler's own rules, so an example never carries a key the scaler
// would refuse.
func checkBerthTriggers(t *testing.T, o *unstructured.Unstructured) {
	t.Helper()
	if o.GetKind() != "ScaledObject" {
		return
	}
	triggers, _, _ := unstructured.NestedSlice(o.Object, "spec", "triggers")
	n := 0
	for _, tr := range triggers {
		m, _ := tr.(map[string]any)
		if typ := m["type"]; typ != "external" && typ != "external-push" {
			continue
		}
		md := map[string]string{}
		raw, _ := m["metadata"].(map[string]any)
		for k, v := range raw {
			s, ok := v.(string)
			if !ok {
				t.Errorf("ScaledObject %s: trigger metadata %s is not a string (KEDA wants strings)", o.GetName(), k)
			}
			md[k] = s
		}
		if !strings.Contains(md["scalerAddress"], "berth") {
			continue
		}
		n++
		if _, err := scaler.ParseTrigger(md); err != nil {
			t.Errorf("ScaledObject %s: berth's scaler would refuse this trigger: %v", o.GetName(), err)
		}
	}
	if n == 0 {
		t.Errorf("ScaledObject %s has no trigger for berth's scaler", o.GetName())
	}
}
