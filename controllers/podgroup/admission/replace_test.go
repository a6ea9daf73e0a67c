package admission

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
)

// TestAssignmentsStayOnePerSlot: a member of a running gang lost and replaced again and again
// leaves status.assignments at one entry per member — the replacement's assignment takes its
// predecessor's place — so the status does not grow with every replacement of a long-running
// gang (it grew by one entry per replacement before).
func TestAssignmentsStayOnePerSlot(t *testing.T) {
	pg := builders.PodGroup("g", "ml").MinMember(2).Obj()
	pg.UID = "uid-g"
	objs := []client.Object{
		builders.Node("n0").GPU(8).Allocatable(corev1.ResourceCPU, "96").Obj(),
		builders.Node("n1").GPU(8).Allocatable(corev1.ResourceCPU, "96").Obj(),
		pg,
	}
	member := func(name string) *corev1.Pod {
		p := builders.Pod(name, "ml").Member("g").Gated().GPU(8).WithReleaseTerm("g").Obj()
		p.UID = types.UID("uid-" + name)
		return p
	}
	objs = append(objs, member("g-0"), member("g-1"))
	r, base, _, _, _ := budgetHarness(t, objs...)
	ctx := context.Background()
	cycleOnce(t, r)
	bindAll(t, base, "ml")
	cycleOnce(t, r)

	current := "g-1"
	for i := range 5 {
		gone := &corev1.Pod{}
		if err := base.Get(ctx, client.ObjectKey{Namespace: "ml", Name: current}, gone); err != nil {
			t.Fatal(err)
		}
		if err := base.Delete(ctx, gone); err != nil {
			t.Fatal(err)
		}
		current = fmt.Sprintf("g-1-r%d", i)
		if err := base.Create(ctx, member(current)); err != nil {
			t.Fatal(err)
		}
		cycleOnce(t, r)
		bindAll(t, base, "ml")
		cycleOnce(t, r)

		var got berthv1alpha1.PodGroup
		if err := base.Get(ctx, client.ObjectKeyFromObject(pg), &got); err != nil {
			t.Fatal(err)
		}
		var pods []string
		for _, a := range got.Status.Assignments {
			pods = append(pods, a.Pod)
		}
		if d := cmp.Diff([]string{"g-0", current}, pods); d != "" {
			t.Fatalf("after replacement %d, assignments (-want +got):\n%s", i+1, d)
		}
		var p corev1.Pod
		if err := base.Get(ctx, client.ObjectKey{Namespace: "ml", Name: current}, &p); err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeName != "n1" {
			t.Errorf("replacement %s on %q, want its predecessor's node n1", current, p.Spec.NodeName)
		}
	}
}
