package admission

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/scheduling"
	"github.com/berth-dev/berth/test/builders"
)

// TestDecideReservationSweep: dead reservations go; berth's do-not-disrupt mark goes once no
// gang whose attempt runs holds the node, never while one does or the node was reserved in this
// cycle, and never when berth did not make it.
func TestDecideReservationSweep(t *testing.T) {
	const live, dead = berthv1alpha1.ReservationLabelPrefix + "uid-live", berthv1alpha1.ReservationLabelPrefix + "uid-dead"
	const waiting = berthv1alpha1.ReservationLabelPrefix + "uid-waiting"
	marked := func(b *builders.NodeBuilder) *builders.NodeBuilder {
		return b.Annotation(karpv1.DoNotDisruptAnnotationKey, "true").Annotation(berthv1alpha1.ProtectedByAnnotation, berthv1alpha1.ProtectedByBerth)
	}
	for _, tc := range []struct {
		name        string
		node        *corev1.Node
		reservedNow bool
		want        reservationSweep
	}{
		{name: "nothing reserved, not marked", node: builders.Node("n").Obj()},
		{name: "a live reservation keeps the mark", node: marked(builders.Node("n").Label(live, "true").Label(dead, "true")).Obj(),
			want: reservationSweep{drop: []string{dead}}},
		{name: "the last reservation ended: the mark goes with it", node: marked(builders.Node("n").Label(dead, "true")).Obj(),
			want: reservationSweep{drop: []string{dead}, unprotect: true}},
		{name: "a mark left without a reservation (berth stopped between the writes) goes", node: marked(builders.Node("n")).Obj(),
			want: reservationSweep{unprotect: true}},
		{name: "reserved again in this cycle: the mark stays", node: marked(builders.Node("n").Label(dead, "true")).Obj(), reservedNow: true,
			want: reservationSweep{drop: []string{dead}}},
		// Waiting for its members (or another scheduler's gate), its attempt over: the label
		// stays for the next attempt, the mark does not keep the node from consolidation.
		{name: "a gang whose attempt is not running keeps its label, not the mark",
			node: marked(builders.Node("n").Label(waiting, "true")).Obj(),
			want: reservationSweep{unprotect: true}},
		{name: "someone else's do-not-disrupt is never removed",
			node: builders.Node("n").Label(dead, "true").Annotation(karpv1.DoNotDisruptAnnotationKey, "true").Obj(),
			want: reservationSweep{drop: []string{dead}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := decideReservationSweep(tc.node, func(uid types.UID) (bool, bool) {
				return uid == "uid-live" || uid == "uid-waiting", uid == "uid-live"
			}, tc.reservedNow)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(reservationSweep{})); diff != "" {
				t.Errorf("sweep (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReservedNodesAreKeptFromConsolidation: a gang counting on an empty spare node while the
// seats for its other members boot marks that node do-not-disrupt (Karpenter's consolidation
// deleted it in the meantime, and the gang asked for a second batch), leaves a do-not-disrupt
// someone else set as it was, and the sweep takes berth's mark off once the attempt is over.
func TestReservedNodesAreKeptFromConsolidation(t *testing.T) {
	ctx := context.Background()
	spare := builders.Node("spare").GPU(8).Obj()
	users := builders.Node("users").GPU(8).Annotation(karpv1.DoNotDisruptAnnotationKey, "false").Obj()
	c := fake.NewClientBuilder().WithObjects(spare, users).Build()
	r := New(c, c, clock.RealClock{}, nil, Options{})
	g := builders.PodGroup("train", "ml").MinMember(3).Obj()
	g.UID = "uid-train"
	g.Status.Provisioning = &berthv1alpha1.ProvisioningStatus{Attempt: 1, Seats: 1, StartedAt: &metav1.Time{Time: time.Now()}}
	get := func(name string) *corev1.Node {
		var n corev1.Node
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
			t.Fatal(err)
		}
		return &n
	}
	// A node whose do-not-disrupt someone set after the cycle read it.
	late := builders.Node("late").GPU(8).Obj()
	if err := c.Create(ctx, late); err != nil {
		t.Fatal(err)
	}
	seen := get("late")
	changed := seen.DeepCopy()
	changed.Annotations = map[string]string{karpv1.DoNotDisruptAnnotationKey: "false"}
	if err := c.Update(ctx, changed); err != nil {
		t.Fatal(err)
	}
	nodes := []*corev1.Node{get("spare"), get("users"), seen}
	cy := &cycle{now: time.Now(), nodes: nodes, groups: []*berthv1alpha1.PodGroup{g}, snap: scheduling.NewSnapshot(nodes, nil, nil)}
	wrote, remark, err := r.reserve(ctx, cy, g, []string{"spare", "users", "late"})
	if err != nil || !wrote || !remark {
		t.Fatalf("reserve: wrote %v, remark %v, err %v; want labels written and a look again for the node that changed", wrote, remark, err)
	}
	if n := get("late"); n.Labels[reserveKey(g)] != "true" || n.Annotations[karpv1.DoNotDisruptAnnotationKey] != "false" || n.Annotations[berthv1alpha1.ProtectedByAnnotation] != "" {
		t.Errorf("a node whose do-not-disrupt was set after the cycle read it: labels %v, annotations %v; want the label, theirs untouched", n.Labels, n.Annotations)
	}
	// The look again, on the fresh node: nothing to write, their annotation left as it is.
	again := &cycle{now: time.Now(), snap: scheduling.NewSnapshot([]*corev1.Node{get("late")}, nil, nil)}
	if wrote, remark, err := r.reserve(ctx, again, g, []string{"late"}); err != nil || wrote || remark {
		t.Fatalf("reserve again: wrote %v, remark %v, err %v; want nothing to do", wrote, remark, err)
	}
	if n := get("late"); n.Labels[reserveKey(g)] != "true" || n.Annotations[karpv1.DoNotDisruptAnnotationKey] != "false" || n.Annotations[berthv1alpha1.ProtectedByAnnotation] != "" {
		t.Errorf("reserved again: labels %v, annotations %v; want the reservation label and their annotation untouched", n.Labels, n.Annotations)
	}
	if a := get("spare").Annotations; a[karpv1.DoNotDisruptAnnotationKey] != "true" || a[berthv1alpha1.ProtectedByAnnotation] != berthv1alpha1.ProtectedByBerth {
		t.Errorf("reserved spare node's annotations %v: want do-not-disrupt set by berth", a)
	}
	if a := get("users").Annotations; a[karpv1.DoNotDisruptAnnotationKey] != "false" || a[berthv1alpha1.ProtectedByAnnotation] != "" {
		t.Errorf("a node whose do-not-disrupt someone else set: annotations %v, want theirs untouched", a)
	}
	// Same cycle, the nodes as it began: the mark stays.
	if err := r.sweepReservations(ctx, cy); err != nil {
		t.Fatal(err)
	}
	if a := get("spare").Annotations; a[karpv1.DoNotDisruptAnnotationKey] != "true" {
		t.Errorf("the sweep of the cycle that reserved the node took the mark off: %v", a)
	}
	// Next cycle, the attempt over (the gang admitted).
	g.Status.Provisioning.FinishedAt = &metav1.Time{Time: time.Now()}
	g.Status.Assignments = []berthv1alpha1.MemberAssignment{{Pod: "train-0", Node: "spare"}}
	next := &cycle{now: time.Now(), nodes: []*corev1.Node{get("spare"), get("users")}, groups: []*berthv1alpha1.PodGroup{g}}
	if err := r.sweepReservations(ctx, next); err != nil {
		t.Fatal(err)
	}
	if recordMarkedNodes(next.nodes); testutil.ToFloat64(markedNodes) != 1 {
		t.Errorf("berth_podgroup_do_not_disrupt_nodes = %v as the cycle read the nodes, want 1 (spare)", testutil.ToFloat64(markedNodes))
	}
	if recordMarkedNodes([]*corev1.Node{get("spare"), get("users")}); testutil.ToFloat64(markedNodes) != 0 {
		t.Errorf("berth_podgroup_do_not_disrupt_nodes = %v once the mark is off, want 0 (someone else's mark is not berth's)", testutil.ToFloat64(markedNodes))
	}
	for _, name := range []string{"spare", "users"} {
		n := get(name)
		if _, ok := n.Labels[reserveKey(g)]; ok {
			t.Errorf("node %s keeps the reservation of an admitted gang", name)
		}
		if name == "spare" && (n.Annotations[karpv1.DoNotDisruptAnnotationKey] != "" || n.Annotations[berthv1alpha1.ProtectedByAnnotation] != "") {
			t.Errorf("node spare keeps berth's do-not-disrupt after the reservation: %v", n.Annotations)
		}
		if name == "users" && n.Annotations[karpv1.DoNotDisruptAnnotationKey] != "false" {
			t.Errorf("the sweep changed someone else's do-not-disrupt: %v", n.Annotations)
		}
	}
}
