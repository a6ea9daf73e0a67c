package provisioningrequest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	autoscalingv1 "k8s.io/autoscaler/cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1"
	kevents "k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/events"
	"github.com/berth-dev/berth/internal/ledger"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/internal/seat"
	"github.com/berth-dev/berth/scheduling"
	"github.com/berth-dev/berth/test/builders"
)

// TestTemplatesCreatedJustBeforeTheRequest: Kueue creates a request's PodTemplates and then the
// request; the cache may not have a template yet. It is read from the API server; missing
// there too, the request waits templateGrace before it fails.
func TestTemplatesCreatedJustBeforeTheRequest(t *testing.T) {
	ctx := context.Background()
	tpl := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: "ppt", Namespace: "team-a"}}
	cache := fake.NewClientBuilder().Build()
	live := fake.NewClientBuilder().WithObjects(tpl).Build()
	r := New(cache, live, clocktesting.NewFakePassiveClock(t0), nil, Options{})
	pr := request(autoscalingv1.ProvisioningClassCheckCapacity)
	pods, err := r.requestedPods(ctx, pr, t0.Add(time.Second))
	if err != nil || len(pods) != 2 {
		t.Fatalf("template only on the API server: %d pods, %v", len(pods), err)
	}
	r = New(cache, cache, clocktesting.NewFakePassiveClock(t0), nil, Options{})
	if _, err := r.requestedPods(ctx, pr, t0.Add(time.Second)); !errors.Is(err, errTemplateNotYet) {
		t.Errorf("missing template on a young request: %v, want errTemplateNotYet", err)
	}
	if _, err := r.requestedPods(ctx, pr, t0.Add(templateGrace)); !errors.Is(err, errCannotBuild) || !strings.Contains(err.Error(), "team-a/ppt") {
		t.Errorf("missing template after the grace: %v, want errCannotBuild naming it", err)
	}
	// An API server that does not answer is a retry, never a failed request (Kueue evicts a
	// workload whose request fails).
	down := interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
		return apierrors.NewTimeoutError("etcd is slow", 1)
	}}
	slow := fake.NewClientBuilder().WithInterceptorFuncs(down).Build()
	r = New(cache, slow, clocktesting.NewFakePassiveClock(t0), nil, Options{})
	if _, err := r.requestedPods(ctx, pr, t0.Add(templateGrace)); err == nil || errors.Is(err, errCannotBuild) || errors.Is(err, errTemplateNotYet) {
		t.Errorf("a timeout reading the template: %v, want an error to retry on", err)
	}
}

// TestRecreatedRequestSweepsTheSeatsOfTheOneBefore: a request deleted and created again under
// its name before the controller saw it gone left seats labelled with the old UID, which no
// reconcile of the new one listed — holding their nodes for ever, and read by gang admission
// (which keys seats by the request's name) as the new request's room. They go on the new
// request's first reconcile, whatever its class; another request's seats and the new one's stay.
func TestRecreatedRequestSweepsTheSeatsOfTheOneBefore(t *testing.T) {
	for _, class := range []string{autoscalingv1.ProvisioningClassCheckCapacity, "queued-provisioning.gke.io"} {
		t.Run(class, func(t *testing.T) {
			ctx := context.Background()
			s, err := rig.NewScheme()
			if err != nil {
				t.Fatal(err)
			}
			seatOf := func(name, key, uid string) *corev1.Pod {
				p := builders.Pod(name, seat.DefaultNamespace).Obj()
				p.Labels = map[string]string{berthv1alpha1.SeatForProvisioningRequestLabel: uid}
				p.Annotations = map[string]string{berthv1alpha1.SeatForProvisioningRequestAnnotation: key}
				p.CreationTimestamp = metav1.NewTime(t0) // young: the new request keeps waiting for its own
				return p
			}
			pr := request(class)
			tpl := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: "ppt", Namespace: "team-a"}}
			c := fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(pr).WithObjects(pr, tpl,
				seatOf("old-0", "team-a/job-a-prov-1", "uid-old"), seatOf("old-1", "team-a/job-a-prov-1", "uid-old"),
				seatOf("current-0", "team-a/job-a-prov-1", "uid-pr"), seatOf("other-0", "team-a/job-b-prov-1", "uid-b")).
				WithIndex(&corev1.Event{}, "involvedObject.uid", func(o client.Object) []string { return []string{string(o.(*corev1.Event).InvolvedObject.UID)} }).Build()
			book := ledger.New(clocktesting.NewFakePassiveClock(t0))
			// The old request held room for a consuming pod: that hold goes with it.
			book.Hold("uid-old", []scheduling.PodOnNode{{Pod: consumer("c0", ""), Node: "n1"}}, t0.Add(time.Minute))
			r := New(c, c, clocktesting.NewFakePassiveClock(t0), events.NewRecorder(kevents.NewFakeRecorder(10)), Options{Ledger: book})
			if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "job-a-prov-1"}}); err != nil {
				t.Fatalf("reconcile: %v", err)
			}
			if held := book.Held("uid-old"); held != nil {
				t.Errorf("the old request's hold outlived its seats: %v", held)
			}
			var left corev1.PodList
			if err := c.List(ctx, &left, client.InNamespace(seat.DefaultNamespace)); err != nil {
				t.Fatal(err)
			}
			kept := map[string]bool{}
			for _, p := range left.Items {
				kept[p.Name] = true
			}
			if kept["old-0"] || kept["old-1"] || !kept["current-0"] || !kept["other-0"] {
				t.Errorf("seats left %v, want the new request's and the other request's only", kept)
			}
		})
	}
}

// TestSeatsOnlyOnTheRequestAsItIs: the cache lags the controller's own status write (an attempt
// just failed: its seats deleted, their deletion seen before the new status). Decided on the
// stale request — no attempt yet — seats would come back at once, with no backoff; they are
// created only when the request read live is the one decided on.
func TestSeatsOnlyOnTheRequestAsItIs(t *testing.T) {
	ctx := context.Background()
	s, err := rig.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	tpl := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: "ppt", Namespace: "team-a"}}
	build := func(pr *autoscalingv1.ProvisioningRequest) client.WithWatch {
		return fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(pr).WithObjects(pr, tpl).Build()
	}
	stale := request(autoscalingv1.ProvisioningClassBestEffortAtomicScaleUp, accepted)
	cache, live := build(stale.DeepCopy()), build(stale.DeepCopy())
	var updated autoscalingv1.ProvisioningRequest
	if err := live.Get(ctx, client.ObjectKeyFromObject(stale), &updated); err != nil {
		t.Fatal(err)
	}
	updated.Status.Conditions = append(updated.Status.Conditions, condAt(autoscalingv1.Provisioned, metav1.ConditionFalse, ReasonCapacityIsNotFound, t0))
	updated.Status.ProvisioningClassDetails = map[string]autoscalingv1.Detail{berthv1alpha1.ProvisioningAttemptsDetail: "1"}
	if err := live.Status().Update(ctx, &updated); err != nil {
		t.Fatal(err)
	}
	key := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(stale)}
	for _, tc := range []struct {
		name  string
		live  client.Reader
		seats int
	}{
		{name: "the cache lags", live: live, seats: 0},
		{name: "the cache is current", live: cache, seats: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := New(cache, tc.live, clocktesting.NewFakePassiveClock(t0.Add(time.Minute)), events.NewRecorder(kevents.NewFakeRecorder(10)), Options{})
			res, err := r.Reconcile(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			var seats corev1.PodList
			if err := cache.List(ctx, &seats, client.InNamespace(seat.DefaultNamespace)); err != nil {
				t.Fatal(err)
			}
			if len(seats.Items) != tc.seats {
				t.Errorf("%d seats created, want %d (requeue %s)", len(seats.Items), tc.seats, res.RequeueAfter)
			}
		})
	}
}

// TestRecreatedRequestFindsTheRoomOfTheOneBefore: the request before, of the same name, held a
// node's 8 GPUs with its seat; the new one (check-capacity, one 8-GPU pod) is placed with that
// seat — swept in the same reconcile — not counted: counted, it found no room and backed off.
func TestRecreatedRequestFindsTheRoomOfTheOneBefore(t *testing.T) {
	ctx := context.Background()
	s, err := rig.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	node := builders.Node("n1").GPU(8).Obj()
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	old := builders.Pod("old-0", seat.DefaultNamespace).GPU(8).Node("n1").Obj()
	old.Labels = map[string]string{berthv1alpha1.SeatForProvisioningRequestLabel: "uid-old"}
	old.Annotations = map[string]string{berthv1alpha1.SeatForProvisioningRequestAnnotation: "team-a/job-a-prov-1"}
	tpl := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: "ppt", Namespace: "team-a"},
		Template: corev1.PodTemplateSpec{Spec: builders.Pod("x", "team-a").GPU(8).Obj().Spec}}
	pr := request(autoscalingv1.ProvisioningClassCheckCapacity, accepted)
	pr.Spec.PodSets[0].Count = 1
	// The cache still shows the swept seat in this reconcile: its delete is not seen yet.
	lagging := interceptor.Funcs{Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
		if o.GetName() == "old-0" {
			return nil
		}
		return c.Delete(ctx, o, opts...)
	}}
	c := fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(pr).WithObjects(pr, tpl, node, old).WithInterceptorFuncs(lagging).
		WithIndex(&corev1.Event{}, "involvedObject.uid", func(o client.Object) []string { return []string{string(o.(*corev1.Event).InvolvedObject.UID)} }).Build()
	r := New(c, c, clocktesting.NewFakePassiveClock(t0), events.NewRecorder(kevents.NewFakeRecorder(10)), Options{})
	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(pr)}); err != nil {
		t.Fatal(err)
	}
	var seats corev1.PodList
	if err := c.List(ctx, &seats, client.InNamespace(seat.DefaultNamespace), client.MatchingLabels{berthv1alpha1.SeatForProvisioningRequestLabel: string(pr.UID)}); err != nil {
		t.Fatal(err)
	}
	var got autoscalingv1.ProvisioningRequest
	if err := c.Get(ctx, client.ObjectKeyFromObject(pr), &got); err != nil {
		t.Fatal(err)
	}
	if len(seats.Items) != 1 || seats.Items[0].Annotations[berthv1alpha1.PinnedNodeAnnotation] != "n1" {
		t.Errorf("seats %d, want one pinned to n1 (the old request's room); conditions %v", len(seats.Items), got.Status.Conditions)
	}
}

// TestDeletedRequestReclaimsItsBatch: a request deleted mid-attempt (Kueue retrying, a workload
// deleted) left the nodes launched for its seats empty and billed until consolidation: the
// NodeClaims launched for them that no pod uses go with the seats.
func TestDeletedRequestReclaimsItsBatch(t *testing.T) {
	ctx := context.Background()
	s, err := rig.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	st := builders.Pod("job-a-prov-1-abc-0", seat.DefaultNamespace).GPU(8).Node("n9").Obj()
	st.UID = "uid-seat"
	st.CreationTimestamp = metav1.NewTime(t0)
	st.Labels = map[string]string{berthv1alpha1.SeatForProvisioningRequestLabel: "uid-pr"}
	st.Annotations = map[string]string{berthv1alpha1.SeatForProvisioningRequestAnnotation: "team-a/job-a-prov-1"}
	nc := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "nc-9", UID: "uid-nc", CreationTimestamp: metav1.NewTime(t0.Add(2 * time.Second))}}
	nc.Status.NodeName = "n9"
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(st, nc).
		WithIndex(&corev1.Event{}, "involvedObject.uid", func(o client.Object) []string { return []string{string(o.(*corev1.Event).InvolvedObject.UID)} }).
		WithIndex(&corev1.Pod{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).Build()
	r := New(c, c, clocktesting.NewFakePassiveClock(t0.Add(time.Minute)), events.NewRecorder(kevents.NewFakeRecorder(10)), Options{})
	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "job-a-prov-1"}}); err != nil {
		t.Fatal(err)
	}
	var claims karpv1.NodeClaimList
	if err := c.List(ctx, &claims); err != nil {
		t.Fatal(err)
	}
	var seats corev1.PodList
	if err := c.List(ctx, &seats, client.InNamespace(seat.DefaultNamespace)); err != nil {
		t.Fatal(err)
	}
	if len(claims.Items) != 0 || len(seats.Items) != 0 {
		t.Errorf("%d NodeClaims and %d seats left of a deleted request, want none", len(claims.Items), len(seats.Items))
	}
}

// TestSeatsGiveWayWithTheirRoomHeld: the room a seat gives way to an arrived pod is held in the
// shared ledger before the seat is deleted — no admission cycle or other request sees it free
// before the pod binds — and let go when the plan says so.
func TestSeatsGiveWayWithTheirRoomHeld(t *testing.T) {
	ctx := context.Background()
	book := ledger.New(clocktesting.NewFakePassiveClock(t0))
	s0 := builders.Pod("s0", "berth-system").GPU(8).Node("n1").Obj()
	s0.UID = "uid-s0"
	heldAtDelete := -1
	c := fake.NewClientBuilder().WithObjects(s0).WithInterceptorFuncs(interceptor.Funcs{
		Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
			heldAtDelete = len(book.Promised(nil, nil))
			return c.Delete(ctx, o, opts...)
		},
	}).Build()
	r := New(c, c, clocktesting.NewFakePassiveClock(t0), events.NewRecorder(kevents.NewFakeRecorder(10)), Options{Ledger: book})
	pr := request(autoscalingv1.ProvisioningClassBestEffortAtomicScaleUp)
	c0 := consumer("c0", "")
	c0.UID = s0.UID
	hold := []scheduling.PodOnNode{{Pod: c0, Node: "n1"}}
	if err := r.act(ctx, pr, plan{attempts: -1, remove: []*corev1.Pod{s0}, setHold: true, hold: hold, holdUntil: t0.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if heldAtDelete != 1 {
		t.Fatalf("promised rooms when the seat was deleted: %d, want its room held (1)", heldAtDelete)
	}
	if got := book.Held(pr.UID); len(got) != 1 || got[0].Node != "n1" {
		t.Fatalf("held after the seat went: %v", got)
	}
	if err := r.act(ctx, pr, plan{attempts: -1, setHold: true}); err != nil {
		t.Fatal(err)
	}
	if got := book.Promised(nil, nil); len(got) != 0 {
		t.Errorf("still held after the hold was let go: %v", got)
	}
}
