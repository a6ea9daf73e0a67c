package provisioningrequest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	autoscalingv1 "k8s.io/autoscaler/cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1"
	kevents "k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/events"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/internal/seat"
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
	if _, err := r.requestedPods(ctx, pr, t0.Add(templateGrace)); err == nil || errors.Is(err, errTemplateNotYet) || !strings.Contains(err.Error(), "team-a/ppt") {
		t.Errorf("missing template after the grace: %v, want an error naming it", err)
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
			r := New(c, c, clocktesting.NewFakePassiveClock(t0), events.NewRecorder(kevents.NewFakeRecorder(10)), Options{})
			if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "job-a-prov-1"}}); err != nil {
				t.Fatalf("reconcile: %v", err)
			}
			var left corev1.PodList
			if err := c.List(ctx, &left, client.InNamespace(seat.DefaultNamespace)); err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, p := range left.Items {
				names = append(names, p.Name)
			}
			if !equal(names, []string{"current-0", "other-0"}) {
				t.Errorf("seats left %v, want the new request's and the other request's only", names)
			}
		})
	}
}
