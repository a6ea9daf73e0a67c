package nativegang

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	kevents "k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/events"
	"github.com/berth-dev/berth/internal/ledger"
	"github.com/berth-dev/berth/scheduling"
	"github.com/berth-dev/berth/test/builders"
)

func TestSeatPod(t *testing.T) {
	r := New(nil, nil, nil, nil, Options{})
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "train", Name: "ddp", UID: "0123456789ab"}}
	m := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "train", Name: "ddp-0"}, Spec: corev1.PodSpec{
		NodeSelector: map[string]string{"karpenter.k8s.aws/instance-gpu-name": "l40s"},
		Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{berthv1alpha1.GPUResource: resource.MustParse("8")}}}},
	}}
	s := r.seatPod(pg, m, 2)
	if s.Namespace != "berth-system" || s.Name != "ddp-01234567-2" || s.Labels[berthv1alpha1.SeatForNativeGroupLabel] != "0123456789ab" ||
		s.Annotations[berthv1alpha1.SeatForNativeGroupAnnotation] != "train/ddp" || s.Annotations[berthv1alpha1.SeatForMemberAnnotation] != "ddp-0" {
		t.Errorf("seat %s/%s labels %v annotations %v", s.Namespace, s.Name, s.Labels, s.Annotations)
	}
	if k, ok := groupOf(s); !ok || k.Namespace != "train" || k.Name != "ddp" {
		t.Errorf("seat maps to %v %v, want train/ddp", k, ok)
	}
	if got := s.Spec.Containers[0].Resources.Requests[berthv1alpha1.GPUResource]; got.Cmp(resource.MustParse("8")) != 0 || s.Spec.NodeSelector["karpenter.k8s.aws/instance-gpu-name"] != "l40s" {
		t.Errorf("seat does not stand for the member: %+v", s.Spec)
	}
	if s.Spec.Affinity != nil && s.Spec.Affinity.PodAffinity != nil {
		t.Errorf("no topology constraint, yet pod affinity %+v", s.Spec.Affinity.PodAffinity)
	}
	pg.Spec.SchedulingConstraints = &schedulingv1beta1.PodGroupSchedulingConstraints{Topology: []schedulingv1beta1.TopologyConstraint{{Key: corev1.LabelTopologyZone}}}
	s = r.seatPod(pg, m, 0)
	terms := s.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if len(terms) != 1 || terms[0].TopologyKey != corev1.LabelTopologyZone || terms[0].LabelSelector.MatchLabels[berthv1alpha1.SeatForNativeGroupLabel] != "0123456789ab" {
		t.Errorf("seats of a gang constrained to one zone keep together by %v", terms)
	}
}

// TestHandOverHoldsTheRoom: when the seats give way, the room those on nodes held is held for
// the gang's members in the shared ledger — before the seats are deleted, so no admission
// cycle sees it free — and given back once the gang is placed.
func TestHandOverHoldsTheRoom(t *testing.T) {
	ctx := context.Background()
	scheme := testScheme(t)
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "train", Name: "ddp", UID: "ng-uid"}}
	seats := []*corev1.Pod{
		builders.Pod("ddp-ng-uid-0", "berth-system").Label(berthv1alpha1.SeatForNativeGroupLabel, "ng-uid").GPU(8).Node("n1").Obj(),
		builders.Pod("ddp-ng-uid-1", "berth-system").Label(berthv1alpha1.SeatForNativeGroupLabel, "ng-uid").GPU(8).Obj(), // nominated, no node yet
	}
	seats[0].UID, seats[1].UID = "s0", "s1"
	seats[0].Annotations = map[string]string{berthv1alpha1.SeatForMemberAnnotation: "ddp-0"}
	// The member, not its seat, is held on the seat's node: its own device claims are what
	// must stay free there (the seat's template copies go with the seat).
	members := map[string]*corev1.Pod{"ddp-0": builders.Pod("ddp-0", "train").GPU(8).ClaimFromTemplate("gpus", "eight").Obj()}
	members["ddp-0"].UID = "m0"
	book := ledger.New(clocktesting.NewFakePassiveClock(time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)))
	heldAtDelete := 0
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(pg, seats[0], seats[1]).WithInterceptorFuncs(interceptor.Funcs{
		Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
			heldAtDelete = len(book.Promised(nil, nil))
			return c.Delete(ctx, o, opts...)
		},
	}).Build()
	r := New(c, c, clocktesting.NewFakePassiveClock(time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)), events.NewRecorder(kevents.NewFakeRecorder(10)), Options{Ledger: book})
	until := time.Date(2026, 12, 3, 9, 10, 0, 0, time.UTC)
	if err := r.act(ctx, pg, plan{handOver: true, holdUntil: until}, members, seats, claimPlan{}); err != nil {
		t.Fatal(err)
	}
	// Admission's cache shows the member, pending: the hold still counts (the ledger skips a
	// held pod the cache shows — the member copy is held under its seat's UID).
	held := book.Promised([]*corev1.Pod{members["ddp-0"]}, nil)
	if len(held) != 1 || held[0].Node != "n1" || held[0].Pod.Name != "ddp-0" || held[0].Pod.UID != "s0" || heldAtDelete != 1 {
		t.Fatalf("held after the hand-over: %v (at the seats' deletion: %d); want the bound seat's member on n1 under the seat's UID, held before the deletion", held, heldAtDelete)
	}
	if held[0].Pod == members["ddp-0"] {
		t.Error("the hold shares the cache's member object")
	}
	if err := r.act(ctx, pg, plan{release: true}, nil, nil, claimPlan{}); err != nil {
		t.Fatal(err)
	}
	if held := book.Promised(nil, nil); len(held) != 0 {
		t.Errorf("still held once the gang is placed: %v", held)
	}
}

// TestSeatsOfAPodGroupMadeAgainGo: a PodGroup deleted and created again under its name before
// the controller saw it gone left the seats of the one before — nothing else deletes them. The
// next reconcile of the name deletes them and keeps the current PodGroup's.
func TestSeatsOfAPodGroupMadeAgainGo(t *testing.T) {
	ctx := context.Background()
	scheme := testScheme(t)
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "train", Name: "ddp", UID: "new-uid"}}
	seat := func(name, uid, group string) *corev1.Pod {
		p := builders.Pod(name, "berth-system").Label(berthv1alpha1.SeatForNativeGroupLabel, uid).GPU(8).Node("n1").Obj()
		p.Annotations = map[string]string{berthv1alpha1.SeatForNativeGroupAnnotation: group}
		return p
	}
	old, current, other := seat("ddp-old-uid-0", "old-uid", "train/ddp"), seat("ddp-new-uid-0", "new-uid", "train/ddp"), seat("llm-o-0", "other-uid", "train/llm")
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(pg, old, current, other).Build()
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC))
	book := ledger.New(clk)
	// The old PodGroup was handing its room over: that hold goes with it.
	book.Hold("old-uid", []scheduling.PodOnNode{{Pod: old, Node: "n1"}}, clk.Now().Add(10*time.Minute))
	r := New(c, c, clk, events.NewRecorder(kevents.NewFakeRecorder(10)), Options{Ledger: book})
	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(pg)}); err != nil {
		t.Fatal(err)
	}
	if held := book.Held("old-uid"); held != nil {
		t.Errorf("the old PodGroup's hold outlived its seats: %v", held)
	}
	var left corev1.PodList
	if err := c.List(ctx, &left); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range left.Items {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	if d := cmp.Diff([]string{"ddp-new-uid-0", "llm-o-0"}, names); d != "" {
		t.Errorf("seats left (-want +got):\n%s", d)
	}
}

// testScheme is the client-go scheme the fake clients of these tests use.
func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}
