package admission

import (
	"context"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
)

// TestElasticGang: a gang with more members than minMember. When all of them do not fit,
// minMember of them are placed together and released; the extras stay gated (never released
// one by one before the core) and join, one by one, as room appears.
func TestElasticGang(t *testing.T) {
	ctx := context.Background()
	objs := []client.Object{
		builders.Node("n0").GPU(8).Allocatable(corev1.ResourceCPU, "96").Obj(),
		builders.PodGroup("e", "ml").MinMember(2).Obj(),
	}
	for i := range 4 {
		objs = append(objs, builders.Pod(fmt.Sprintf("e-%d", i), "ml").Member("e").Gated().GPU(4).Obj())
	}
	r, base, _, _, _ := budgetHarness(t, objs...)
	released := func() []string {
		t.Helper()
		var pods corev1.PodList
		if err := base.List(ctx, &pods, client.InNamespace("ml")); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range pods.Items {
			if len(p.Spec.SchedulingGates) == 0 {
				out = append(out, p.Name+"@"+p.Annotations[berthv1alpha1.PinnedNodeAnnotation])
			}
		}
		slices.Sort(out)
		return out
	}

	cycleOnce(t, r)
	if got := released(); fmt.Sprint(got) != "[e-0@n0 e-1@n0]" {
		t.Fatalf("with room for 2 of 4: released %v, want minMember (e-0, e-1) together on n0", got)
	}
	bindAll(t, base, "ml")
	cycleOnce(t, r)
	if got := released(); len(got) != 2 {
		t.Fatalf("with no more room: released %v, want only the 2", got)
	}
	if g := read(t, base, builders.PodGroup("e", "ml").Obj()); len(g.Status.Assignments) != 2 {
		t.Fatalf("assignments %v, want the 2 placed", g.Status.Assignments)
	}

	if err := base.Create(ctx, builders.Node("n1").GPU(4).Allocatable(corev1.ResourceCPU, "96").Obj()); err != nil {
		t.Fatal(err)
	}
	cycleOnce(t, r)
	if got := released(); fmt.Sprint(got) != "[e-0@n0 e-1@n0 e-2@n1]" {
		t.Fatalf("with room for one more: released %v, want e-2 to join on n1", got)
	}
	if g := read(t, base, builders.PodGroup("e", "ml").Obj()); len(g.Status.Assignments) != 3 || g.Status.Restarts != 0 {
		t.Fatalf("assignments %v, restarts %d; want 3 in the same generation", g.Status.Assignments, g.Status.Restarts)
	}
}
