package guard

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kevents "k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/events"
)

func newScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	gv := schema.GroupVersion{Group: "karpenter.sh", Version: "v1"}
	s.AddKnownTypes(gv, &karpv1.NodePool{}, &karpv1.NodePoolList{})
	metav1.AddToGroupVersion(s, gv)
	return s
}

// harness is a Reconciler on a fake client holding nps, with its Events captured.
func harness(t *testing.T, funcs interceptor.Funcs, nps ...*karpv1.NodePool) (*Reconciler, client.Client, *kevents.FakeRecorder) {
	t.Helper()
	b := fake.NewClientBuilder().WithScheme(newScheme(t)).WithInterceptorFuncs(funcs)
	for _, np := range nps {
		b = b.WithObjects(np)
	}
	c := b.Build()
	rec := kevents.NewFakeRecorder(10)
	return &Reconciler{Client: c, Recorder: events.NewRecorder(rec), DefaultMode: ModeEnforce}, c, rec
}

// value reads a gauge or counter.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	if out.Gauge != nil {
		return out.GetGauge().GetValue()
	}
	return out.GetCounter().GetValue()
}

func drain(rec *kevents.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func reconcileOnce(t *testing.T, r *Reconciler, name string) reconcile.Result {
	t.Helper()
	res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKey{Name: name}})
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	return res
}

func TestReconcileEnforceOnce(t *testing.T) {
	np := pool().gpu().obj()
	np.Name = "enforce-once"
	r, c, rec := harness(t, interceptor.Funcs{}, np)
	before := value(t, guardActions.WithLabelValues(actionBudgetAdded))

	reconcileOnce(t, r, np.Name)
	var got karpv1.NodePool
	if err := c.Get(context.Background(), client.ObjectKey{Name: np.Name}, &got); err != nil {
		t.Fatal(err)
	}
	if IsUnsafe(&got) || !strings.HasPrefix(got.Annotations[berthv1alpha1.ConsolidationGuardStatusAnnotation], StatusEnforced+":") {
		t.Fatalf("after reconcile: budgets %+v, status %q", got.Spec.Disruption.Budgets, got.Annotations[berthv1alpha1.ConsolidationGuardStatusAnnotation])
	}
	if evs := drain(rec); len(evs) != 1 || !strings.HasPrefix(evs[0], "Normal "+events.ReasonConsolidationGuarded) {
		t.Errorf("events = %q, want one %s", evs, events.ReasonConsolidationGuarded)
	}
	if v := value(t, unsafeConsolidation.WithLabelValues(np.Name)); v != 0 {
		t.Errorf("unsafe gauge = %v, want 0", v)
	}

	// A second pass changes nothing and says nothing.
	rv := got.ResourceVersion
	reconcileOnce(t, r, np.Name)
	if err := c.Get(context.Background(), client.ObjectKey{Name: np.Name}, &got); err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != rv {
		t.Errorf("second reconcile patched the NodePool (resourceVersion %s → %s)", rv, got.ResourceVersion)
	}
	if evs := drain(rec); len(evs) != 0 {
		t.Errorf("second reconcile emitted %q", evs)
	}
	if d := value(t, guardActions.WithLabelValues(actionBudgetAdded)) - before; d != 1 {
		t.Errorf("budget_added counted %v times, want 1", d)
	}
}

func TestReconcileAuditAndDelete(t *testing.T) {
	np := pool().gpu().annotate(berthv1alpha1.ConsolidationGuardAnnotation, "strict").obj()
	np.Name = "audit-me"
	r, c, rec := harness(t, interceptor.Funcs{}, np)

	reconcileOnce(t, r, np.Name)
	var got karpv1.NodePool
	if err := c.Get(context.Background(), client.ObjectKey{Name: np.Name}, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.Disruption.Budgets) != 1 {
		t.Errorf("audit changed the budgets: %+v", got.Spec.Disruption.Budgets)
	}
	if s := got.Annotations[berthv1alpha1.ConsolidationGuardStatusAnnotation]; !strings.HasPrefix(s, StatusUnsafe+":") || !strings.Contains(s, `"strict"`) {
		t.Errorf("status = %q", s)
	}
	evs := strings.Join(drain(rec), "\n")
	for _, reason := range []string{events.ReasonInvalidConsolidationGuard, events.ReasonUnsafeConsolidation} {
		if !strings.Contains(evs, "Warning "+reason) {
			t.Errorf("no %s event in %q", reason, evs)
		}
	}
	if v := value(t, unsafeConsolidation.WithLabelValues(np.Name)); v != 1 {
		t.Errorf("unsafe gauge = %v, want 1", v)
	}

	if err := c.Delete(context.Background(), &got); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, np.Name)
	if unsafeConsolidation.DeleteLabelValues(np.Name) {
		t.Errorf("the deleted NodePool's gauge series is still there")
	}
}

func TestReconcileConflictRequeues(t *testing.T) {
	np := pool().gpu().obj()
	np.Name = "conflicted"
	conflict := interceptor.Funcs{Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
		return apierrors.NewConflict(schema.GroupResource{Group: "karpenter.sh", Resource: "nodepools"}, np.Name, nil)
	}}
	r, _, rec := harness(t, conflict, np)
	if res := reconcileOnce(t, r, np.Name); res.RequeueAfter != conflictRetry {
		t.Errorf("conflict: result %+v, want a requeue", res)
	}
	if evs := drain(rec); len(evs) != 0 {
		t.Errorf("a failed patch emitted %q", evs)
	}
}
