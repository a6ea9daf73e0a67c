package admission

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
)

// TestOfAnotherLeader: LeaderWorkerSet recreated a group's leader (same name, new UID) before
// the old leader's PodGroup went. That PodGroup is left alone — its new leader released into it
// as a replacement member then left the new group's PodGroup waiting for good — until the
// adapter replaces it with one the new leader owns.
func TestOfAnotherLeader(t *testing.T) {
	leader := func(uid string) *corev1.Pod {
		p := builders.Pod("llm-0", "ml").Member("llm-0").Obj()
		p.UID = types.UID(uid)
		return p
	}
	worker := builders.Pod("llm-0-1", "ml").Member("llm-0").Obj()
	group := func(from, owner string) *berthv1alpha1.PodGroup {
		g := builders.PodGroup("llm-0", "ml").MinMember(2).Obj()
		g.Labels = map[string]string{berthv1alpha1.AdaptedFromLabel: from}
		g.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "llm-0", UID: types.UID(owner)}}
		return g
	}
	for _, tc := range []struct {
		name    string
		gv      gangView
		another bool
	}{
		{name: "its own leader", gv: gangView{group: group("lws", "uid-a"), members: []*corev1.Pod{leader("uid-a"), worker}}},
		{name: "a new leader of the name", gv: gangView{group: group("lws", "uid-a"), members: []*corev1.Pod{leader("uid-b"), worker}}, another: true},
		{name: "no leader yet (the old one gone, its workers going)", gv: gangView{group: group("lws", "uid-a"), members: []*corev1.Pod{worker}}},
		{name: "not a LeaderWorkerSet group", gv: gangView{group: group("kueue", "uid-a"), members: []*corev1.Pod{leader("uid-b")}}},
		{name: "owned by no pod", gv: gangView{group: func() *berthv1alpha1.PodGroup {
			g := group("lws", "uid-a")
			g.OwnerReferences = nil
			return g
		}(), members: []*corev1.Pod{leader("uid-b")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ofAnotherLeader(tc.gv); got != tc.another {
				t.Errorf("ofAnotherLeader = %v, want %v", got, tc.another)
			}
		})
	}
}

// TestLeaderReadyWorkersGetCapacity: a LeaderWorkerSet group under startupPolicy LeaderReady
// is admitted leader first (minMember 1; its workers exist only once the leader is ready). Its
// workers are members it needs, not elastic extras: where they do not fit, capacity is asked for
// them — on a pool at zero they waited gated for good (Karpenter provisions nothing for a gated
// pod). Extras of any other gang still only join where there is room.
func TestLeaderReadyWorkersGetCapacity(t *testing.T) {
	for _, tc := range []struct {
		from  string
		seats int32
	}{{from: "lws", seats: 1}, {from: "", seats: 0}} {
		t.Run("adapted from "+tc.from, func(t *testing.T) {
			g := builders.PodGroup("llm-0", "ml").MinMember(1).Obj()
			if tc.from != "" {
				g.Labels = map[string]string{berthv1alpha1.AdaptedFromLabel: tc.from}
			}
			objs := []client.Object{g, builders.Node("n0").GPU(8).Allocatable(corev1.ResourceCPU, "96").Obj(),
				builders.Pod("llm-0", "ml").Member("llm-0").Gated().GPU(8).Obj()}
			r, base := provisioningHarness(t, objs...)
			cycleOnce(t, r) // the leader, alone
			bindAll(t, base, "ml")
			if err := base.Create(context.Background(), builders.Pod("llm-0-1", "ml").Member("llm-0").Gated().GPU(8).Obj()); err != nil {
				t.Fatal(err)
			}
			cycleOnce(t, r)
			cycleOnce(t, r)
			var seats int32
			if p := read(t, base, g).Status.Provisioning; p != nil {
				seats = p.Seats
			}
			if seats != tc.seats {
				t.Errorf("seats asked for the worker that does not fit: %d, want %d", seats, tc.seats)
			}
		})
	}
}

// TestNextGroupAvoidsTheStrandedNode: a member of gang ml/llm-0 was stranded on a node
// kube-scheduler refuses for a reason berth does not see. Under RecreateGroupOnPodRestart,
// LeaderWorkerSet restarts the whole group when berth replaces that member — a new PodGroup of
// the same name — and placed on that node again it was stranded again, every StrandedAfter. The
// gang's next generation, whatever its PodGroup's UID, goes elsewhere for AvoidStrandedNodeFor.
func TestNextGroupAvoidsTheStrandedNode(t *testing.T) {
	objs := func() []client.Object {
		return []client.Object{builders.PodGroup("llm-0", "ml").MinMember(1).Obj(),
			builders.Node("n1").GPU(8).Allocatable(corev1.ResourceCPU, "96").Obj(), builders.Node("n2").GPU(8).Allocatable(corev1.ResourceCPU, "96").Obj(),
			builders.Pod("llm-0", "ml").Member("llm-0").Gated().GPU(8).Obj()}
	}
	pinnedTo := func(t *testing.T, c client.Client) string {
		t.Helper()
		var p corev1.Pod
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ml", Name: "llm-0"}, &p); err != nil {
			t.Fatal(err)
		}
		return p.Annotations[berthv1alpha1.PinnedNodeAnnotation]
	}
	r, base, _, _, _ := budgetHarness(t, objs()...)
	cycleOnce(t, r)
	first := pinnedTo(t, base)
	if first == "" {
		t.Fatal("the gang was not admitted")
	}
	r, base, _, clk, _ := budgetHarness(t, objs()...)
	r.markStranded("ml/llm-0", first, clk.Now().Add(-time.Minute))
	cycleOnce(t, r)
	if got := pinnedTo(t, base); got == "" || got == first {
		t.Errorf("pinned to %q, want the node other than %s (a member was stranded there a minute ago)", got, first)
	}
}
