package disruption

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	kevents "k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/events"
	"github.com/berth-dev/berth/test/builders"
)

// TestReconcileReportsOncePerNode: a tainted node is reported once (condition, Event); a second
// pass, and the node's later deletion, report nothing new.
func TestReconcileReportsOncePerNode(t *testing.T) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := berthv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	pg := gang(berthv1alpha1.PodGroupRunning)
	node := builders.Node("n1").Obj()
	node.Spec.Taints = []corev1.Taint{karpv1.DisruptedNoScheduleTaint}
	c := fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&berthv1alpha1.PodGroup{}).
		WithObjects(pg, node, member("a", "n1", corev1.PodRunning).Obj(), member("b", "n1", corev1.PodRunning).Obj()).Build()
	rec := kevents.NewFakeRecorder(10)
	r := &Reconciler{Client: c, APIReader: c, Clock: clocktesting.NewFakePassiveClock(time.Now()), Recorder: events.NewRecorder(rec)}
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(pg)}
	run := func() []string {
		t.Helper()
		if _, err := r.Reconcile(context.Background(), req); err != nil {
			t.Fatalf("Reconcile: %v", err)
		}
		var out []string
		for len(rec.Events) > 0 {
			out = append(out, <-rec.Events)
		}
		return out
	}

	evs := run()
	if len(evs) != 1 || !strings.HasPrefix(evs[0], "Warning "+events.ReasonGangMemberDisrupted+" node n1") {
		t.Errorf("events = %q, want one %s about n1", evs, events.ReasonGangMemberDisrupted)
	}
	var got berthv1alpha1.PodGroup
	if err := c.Get(context.Background(), req.NamespacedName, &got); err != nil {
		t.Fatal(err)
	}
	cond := meta.FindStatusCondition(got.Status.Conditions, berthv1alpha1.ConditionDisrupted)
	if cond == nil || cond.Status != "True" || cond.Reason != berthv1alpha1.ReasonNodeDisrupted || !strings.Contains(cond.Message, "n1 (") {
		t.Fatalf("Disrupted condition = %+v", cond)
	}
	if evs := run(); len(evs) != 0 {
		t.Errorf("second pass emitted %q", evs)
	}
	if err := c.Delete(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	if evs := run(); len(evs) != 0 {
		t.Errorf("the reported node's deletion emitted %q", evs)
	}
}
