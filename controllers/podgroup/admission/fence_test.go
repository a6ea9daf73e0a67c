package admission

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
)

func TestLeaseFence(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	key := types.NamespacedName{Namespace: "berth-system", Name: "berth-controller"}
	lease := func(holder string, renewedAgo time.Duration) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15),
				RenewTime: &metav1.MicroTime{Time: now.Add(-renewedAgo)}}}
	}
	for _, tc := range []struct {
		name  string
		lease *coordinationv1.Lease
		ok    bool
	}{
		{"held and just renewed", lease("me", 2*time.Second), true},
		{"held, 6 s of lease left", lease("me", 9*time.Second), true},
		{"held, renewals failing: 4 s left", lease("me", 11*time.Second), false},
		{"held but expired", lease("me", 20*time.Second), false},
		{"another replica took it", lease("other", time.Second), false},
		{"no Lease", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := fake.NewClientBuilder()
			if tc.lease != nil {
				b = b.WithObjects(tc.lease)
			}
			f := LeaseFence{Reader: b.Build(), Lease: key, Identity: "me", Clock: clocktesting.NewFakePassiveClock(now)}
			err := f.Check(context.Background())
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrFenced)) {
				t.Errorf("Check = %v, want ok %v (errors wrap ErrFenced)", err, tc.ok)
			}
		})
	}
}

// fenceFunc is a Fence from a function.
type fenceFunc func(context.Context) error

func (f fenceFunc) Check(ctx context.Context) error { return f(ctx) }

// TestFencedReplicaPromisesNothing: a replica whose fence fails writes no promise and releases
// no member and does not count as a finished cycle (the stall alert's heartbeat); once the fence
// holds again, the gang is admitted as usual.
func TestFencedReplicaPromisesNothing(t *testing.T) {
	node := builders.Node("n0").GPU(8).Allocatable(corev1.ResourceCPU, "96").Obj()
	pg := builders.PodGroup("g", "ml").MinMember(2).Obj()
	pg.UID = "uid-g"
	objs := []client.Object{node, pg}
	for i := range 2 {
		p := builders.Pod(fmt.Sprintf("g-%d", i), "ml").Member("g").Gated().GPU(1).Obj()
		p.UID = types.UID(fmt.Sprintf("uid-%d", i))
		objs = append(objs, p)
	}
	r, base, writes, clk, _ := budgetHarness(t, objs...)
	lastCycle.Set(0)
	lost := true
	r.opts.Fence = fenceFunc(func(context.Context) error {
		if lost {
			return fmt.Errorf("%w: lease held by another replica", ErrFenced)
		}
		return nil
	})
	if _, err := r.Reconcile(context.Background(), cycleKey); !errors.Is(err, ErrFenced) {
		t.Fatalf("cycle of a fenced replica: %v, want an error wrapping ErrFenced", err)
	}
	if writes.total() != 0 {
		t.Fatalf("a fenced replica wrote %v", writes)
	}
	// The heartbeat the stall alert reads: a fenced cycle did not do its work.
	if got := testGauge(t, lastCycle); got != 0 {
		t.Errorf("berth_podgroup_admission_last_cycle_timestamp_seconds after a fenced cycle = %v, want 0", got)
	}
	lost = false
	cycleOnce(t, r)
	if got, want := testGauge(t, lastCycle), float64(clk.Now().UnixMilli())/1e3; got != want {
		t.Errorf("berth_podgroup_admission_last_cycle_timestamp_seconds after a cycle = %v, want %v (the clock)", got, want)
	}
	var pods corev1.PodList
	if err := base.List(context.Background(), &pods, client.InNamespace("ml")); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if len(p.Spec.SchedulingGates) != 0 {
			t.Errorf("member %s still gated once the fence holds", p.Name)
		}
	}
}

// TestGangThatFitsAtItsDeadlineIsAdmitted: a gang whose wait has just passed its schedule
// timeout, and which fits now, is admitted — it was timed out instead, giving back the room it
// could have had.
func TestGangThatFitsAtItsDeadlineIsAdmitted(t *testing.T) {
	node := builders.Node("n0").GPU(8).Allocatable(corev1.ResourceCPU, "96").Obj()
	pg := builders.PodGroup("g", "ml").MinMember(2).ScheduleTimeout(10).Obj()
	pg.UID = "uid-g"
	objs := []client.Object{node, pg}
	for i := range 2 {
		p := builders.Pod(fmt.Sprintf("g-%d", i), "ml").Member("g").Gated().GPU(1).Obj()
		p.UID = types.UID(fmt.Sprintf("uid-%d", i))
		objs = append(objs, p)
	}
	r, base, _, clk, _ := budgetHarness(t, objs...)
	var g berthv1alpha1.PodGroup
	if err := base.Get(context.Background(), client.ObjectKeyFromObject(pg), &g); err != nil {
		t.Fatal(err)
	}
	g.Status.WaitingSince = &metav1.Time{Time: clk.Now().Add(-11 * time.Second)}
	if err := base.Status().Update(context.Background(), &g); err != nil {
		t.Fatal(err)
	}
	cycleOnce(t, r)
	if err := base.Get(context.Background(), client.ObjectKeyFromObject(pg), &g); err != nil {
		t.Fatal(err)
	}
	cond := meta.FindStatusCondition(g.Status.Conditions, berthv1alpha1.ConditionScheduled)
	if cond == nil || cond.Status != metav1.ConditionTrue || g.Status.ScheduleTimeouts != 0 {
		t.Errorf("a gang that fits at its deadline: Scheduled %+v, timeouts %d; want admitted", cond, g.Status.ScheduleTimeouts)
	}
}
