package admission

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	bevents "github.com/berth-dev/berth/internal/events"
	"github.com/berth-dev/berth/test/builders"
)

func TestNextRecreationStep(t *testing.T) {
	rec := berthv1alpha1.RecreatingMember{Pod: "m-0", UID: "uid-old"}
	pod := func(uid string, deleting bool) *corev1.Pod {
		p := builders.Pod("m-0", "ml").Obj()
		p.UID = typesUID(uid)
		if deleting {
			now := metav1.Now()
			p.DeletionTimestamp = &now
		}
		return p
	}
	for _, tc := range []struct {
		name string
		cur  *corev1.Pod
		want recreation
	}{
		{"no pod of that name: create it", nil, recreationCreate},
		{"another pod of that name: done", pod("uid-new", false), recreationDone},
		{"the old pod still going: wait", pod("uid-old", true), recreationWait},
		{"the old pod alive: ask the API server", pod("uid-old", false), recreationCheck},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := nextRecreationStep(rec, tc.cur); got != tc.want {
				t.Errorf("step = %d, want %d", got, tc.want)
			}
		})
	}
}

// recreateHarness is a Reconciler on a fake client holding gang g and its objects, whose pod
// creations fail while failCreate is set (the controller stopping between deletion and
// creation).
func recreateHarness(t *testing.T, objs ...client.Object) (newReconciler func() *Reconciler, c client.Client, failCreate *bool) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := berthv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var groups []client.Object
	for _, o := range objs {
		if _, ok := o.(*berthv1alpha1.PodGroup); ok {
			groups = append(groups, o)
		}
	}
	base := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(groups...).Build()
	fail := new(bool)
	c = interceptor.NewClient(base, interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, pod := obj.(*corev1.Pod); pod && *fail {
				return errors.New("connection refused (the controller stopped here)")
			}
			return cl.Create(ctx, obj, opts...)
		},
	})
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	return func() *Reconciler {
		return New(c, c, clk, bevents.NewRecorder(events.NewFakeRecorder(1000)), Options{})
	}, c, fail
}

// strandedBare is a bare member of gang g stranded on n1, owned (not controlled) by a ConfigMap.
func strandedBare() *corev1.Pod {
	p := strandedMember("m-0", "n1", "", false)
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "run-config", UID: "uid-cm"}}
	return p
}

func getGang(t *testing.T, c client.Client) *berthv1alpha1.PodGroup {
	t.Helper()
	var g berthv1alpha1.PodGroup
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ml", Name: "g"}, &g); err != nil {
		t.Fatal(err)
	}
	return &g
}

// TestRecreationSurvivesAStopBetweenDeleteAndCreate: berth deletes a stranded bare member to
// create it again unpinned, and stops before the creation. Only the record in the PodGroup's
// status holds the member then (it was held in memory before, and a kill there lost the
// member): the next controller creates it — same name, owner references, unpinned — and drops
// the record.
func TestRecreationSurvivesAStopBetweenDeleteAndCreate(t *testing.T) {
	ctx := context.Background()
	g := builders.PodGroup("g", "ml").MinMember(1).Obj()
	g.UID = "uid-g"
	newReconciler, c, failCreate := recreateHarness(t, g, strandedBare(), builders.Node("n1").GPU(8).Obj())
	live := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ml", Name: "m-0"}, live); err != nil {
		t.Fatal(err)
	}
	*failCreate = true
	replaced, err := newReconciler().replaceStranded(ctx, getGang(t, c), live, "test", unschedulable)
	if !replaced || err == nil {
		t.Fatalf("replaced %v, err %v: want the member deleted and its creation failed", replaced, err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(live), &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the stranded member is still there: %v", err)
	}
	if rs := getGang(t, c).Status.Recreating; len(rs) != 1 || rs[0].Pod != "m-0" || rs[0].UID != live.UID {
		t.Fatalf("status.recreating = %+v, want the member's record", rs)
	}

	*failCreate = false
	if _, err := newReconciler().Reconcile(ctx, cycleKey); err != nil {
		t.Fatal(err)
	}
	again := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(live), again); err != nil {
		t.Fatalf("the member was lost: %v", err)
	}
	if again.UID == live.UID {
		t.Error("the old member is still there")
	}
	if _, ok := pinned(again); ok {
		t.Error("the recreated member keeps its pin")
	}
	if len(again.OwnerReferences) != 1 || again.OwnerReferences[0].UID != "uid-cm" {
		t.Errorf("owner references = %+v, want the ConfigMap's kept", again.OwnerReferences)
	}
	if rs := getGang(t, c).Status.Recreating; len(rs) != 0 {
		t.Errorf("status.recreating = %+v after the member was created", rs)
	}
}

// TestRecreationWaitsForAHeldRemoval: a stranded member whose removal a finalizer holds keeps
// its name; nothing waits for it (the cycle used to poll up to 10 s), and the cycle its removal
// starts creates the member again.
func TestRecreationWaitsForAHeldRemoval(t *testing.T) {
	ctx := context.Background()
	g := builders.PodGroup("g", "ml").MinMember(1).Obj()
	g.UID = "uid-g"
	held := strandedBare()
	held.Finalizers = []string{"example.com/hold"}
	newReconciler, c, _ := recreateHarness(t, g, held, builders.Node("n1").GPU(8).Obj())
	r := newReconciler()
	live := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(held), live); err != nil {
		t.Fatal(err)
	}
	if replaced, err := r.replaceStranded(ctx, getGang(t, c), live, "test", unschedulable); !replaced || err != nil {
		t.Fatalf("replaced %v, %v", replaced, err)
	}
	if _, err := r.Reconcile(ctx, cycleKey); err != nil {
		t.Fatal(err)
	}
	cur := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(held), cur); err != nil || cur.UID != live.UID || cur.DeletionTimestamp == nil {
		t.Fatalf("want the old member still going: %v %+v", err, cur.ObjectMeta)
	}
	if rs := getGang(t, c).Status.Recreating; len(rs) != 1 {
		t.Fatalf("status.recreating = %+v while the old member goes", rs)
	}
	cur.Finalizers = nil
	if err := c.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, cycleKey); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(held), cur); err != nil || cur.UID == live.UID {
		t.Fatalf("the member was not created again once the old one went: %v", err)
	}
	if len(cur.Finalizers) != 0 {
		t.Errorf("the new member carries the old one's finalizers %v", cur.Finalizers)
	}
	if rs := getGang(t, c).Status.Recreating; len(rs) != 0 {
		t.Errorf("status.recreating = %+v after the member was created", rs)
	}
}

// TestRecreationNotDeletedIsDropped: the record was written but the deletion never happened
// (refused, or the controller stopped first): the member is intact and the record goes.
func TestRecreationNotDeletedIsDropped(t *testing.T) {
	ctx := context.Background()
	g := builders.PodGroup("g", "ml").MinMember(1).Obj()
	g.UID = "uid-g"
	m := strandedBare()
	g.Status.Recreating = []berthv1alpha1.RecreatingMember{{Pod: m.Name, UID: m.UID, Manifest: runtime.RawExtension{Raw: []byte(`{"metadata":{"name":"m-0"}}`)}}}
	newReconciler, c, _ := recreateHarness(t, g, m, builders.Node("n1").GPU(8).Obj())
	if _, err := newReconciler().Reconcile(ctx, cycleKey); err != nil {
		t.Fatal(err)
	}
	cur := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(m), cur); err != nil || cur.UID != m.UID {
		t.Fatalf("the intact member was touched: %v", err)
	}
	if rs := getGang(t, c).Status.Recreating; len(rs) != 0 {
		t.Errorf("status.recreating = %+v, want the record of an undeleted member dropped", rs)
	}
}
