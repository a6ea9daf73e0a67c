package nodepools_test

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/nodepools"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestRenderedTemplatesApply renders every GPU family for every role and provider, applies the
// YAML the command prints (server-side apply), and reads each object back: the apiserver must
// accept it and keep every rendered field (a structural schema silently prunes unknown ones).
func TestRenderedTemplatesApply(t *testing.T) {
	for _, provider := range nodepools.Providers {
		for _, role := range nodepools.Roles {
			t.Run(string(provider)+"/"+string(role), func(t *testing.T) {
				ctx := context.Background()
				objs := renderManifests(t, nodepools.Options{
					Families: []string{nodepools.AllFamilies}, Role: role, Provider: provider, ClusterName: "berth-it",
				})
				for _, o := range objs {
					if err := rigtest.Current().Apply(ctx, o); err != nil {
						t.Fatalf("apply rejected: %v", err)
					}
					// nodeClassRef is immutable: the next provider's NodePools of the same
					// names are created afresh.
					t.Cleanup(func() { deleteObject(t, o) })
				}
				for _, o := range objs {
					got := getObject(t, o)
					if missing := missingFields(o.Object["spec"], got.Object["spec"], "spec"); len(missing) > 0 {
						t.Errorf("%s %s lost or changed fields on the apiserver: %v", o.GetKind(), o.GetName(), missing)
					}
				}
			})
		}
	}
}

// TestNodePoolReadBack reads a NodePool back as the typed Karpenter object and checks the
// fields that matter for GPU work survived the round trip.
func TestNodePoolReadBack(t *testing.T) {
	ctx := context.Background()
	objs := renderManifests(t, nodepools.Options{Families: []string{"h100"}, Role: nodepools.RoleTraining, ClusterName: "berth-it"})
	for _, o := range objs {
		if err := rigtest.Current().Apply(ctx, o); err != nil {
			t.Fatalf("apply rejected: %v", err)
		}
		t.Cleanup(func() { deleteObject(t, o) })
	}
	var np karpv1.NodePool
	name := nodepools.NodePoolName("h100", nodepools.RoleTraining)
	if err := rigtest.Current().Client.Get(ctx, client.ObjectKey{Name: name}, &np); err != nil {
		t.Fatalf("getting NodePool %s: %v", name, err)
	}
	if b := np.Spec.Disruption.Budgets; len(b) != 1 || b[0].Nodes != "10%" {
		t.Errorf("budgets = %+v, want [{nodes: 10%%}]", b)
	}
	wantTaint := corev1.Taint{Key: berthv1alpha1.GPUResource, Value: "true", Effect: corev1.TaintEffectNoSchedule}
	if ts := np.Spec.Template.Spec.Taints; len(ts) != 1 || !ts[0].MatchTaint(&wantTaint) || ts[0].Value != "true" {
		t.Errorf("taints = %+v, want [%v]", ts, wantTaint)
	}
	if d := np.Spec.Template.Spec.ExpireAfter.Duration; d != nil {
		t.Errorf("expireAfter = %v, want Never", *d)
	}
	if np.Spec.Disruption.ConsolidationPolicy != karpv1.ConsolidationPolicyWhenEmpty {
		t.Errorf("consolidationPolicy = %s, want WhenEmpty", np.Spec.Disruption.ConsolidationPolicy)
	}
	if ref := np.Spec.Template.Spec.NodeClassRef; ref == nil || ref.Kind != "EC2NodeClass" || ref.Name != name {
		t.Errorf("nodeClassRef = %+v, want EC2NodeClass %s", ref, name)
	}
}

// renderManifests renders o and decodes the printed YAML, as kubectl would read it.
func renderManifests(t *testing.T, o nodepools.Options) []*unstructured.Unstructured {
	t.Helper()
	rendered, err := nodepools.Render(o)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	var buf bytes.Buffer
	if err := nodepools.Encode(&buf, rendered, nodepools.FormatYAML); err != nil {
		t.Fatalf("Encode: %v", err)
	}
	objs, err := rig.DecodeManifests(buf.Bytes())
	if err != nil {
		t.Fatalf("decoding rendered YAML: %v", err)
	}
	if len(objs) != len(rendered) {
		t.Fatalf("decoded %d objects, rendered %d", len(objs), len(rendered))
	}
	return objs
}

func getObject(t *testing.T, o *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(o.GroupVersionKind())
	if err := rigtest.Current().Client.Get(context.Background(), client.ObjectKeyFromObject(o), got); err != nil {
		t.Fatalf("getting %s %s: %v", o.GetKind(), o.GetName(), err)
	}
	return got
}

func deleteObject(t *testing.T, o *unstructured.Unstructured) {
	t.Helper()
	if err := rigtest.Current().Client.Delete(context.Background(), o.DeepCopy()); client.IgnoreNotFound(err) != nil {
		t.Errorf("deleting %s %s: %v", o.GetKind(), o.GetName(), err)
	}
}

// missingFields lists the paths under path where got lacks or differs from a value of want;
// fields only got has (server defaults) are fine. Leaves compare by their printed form, as
// YAML and JSON decode numbers to different types.
func missingFields(want, got any, path string) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: want an object, got %v", path, got)}
		}
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var out []string
		for _, k := range keys {
			out = append(out, missingFields(w[k], g[k], path+"."+k)...)
		}
		return out
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("%s: want %v, got %v", path, w, got)}
		}
		var out []string
		for i := range w {
			out = append(out, missingFields(w[i], g[i], fmt.Sprintf("%s[%d]", path, i))...)
		}
		return out
	default:
		if got == nil || (fmt.Sprint(want) != fmt.Sprint(got) && !reflect.DeepEqual(want, got)) {
			return []string{fmt.Sprintf("%s: want %v, got %v", path, want, got)}
		}
		return nil
	}
}
