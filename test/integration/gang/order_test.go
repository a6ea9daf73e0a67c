package gang_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// orderedGang creates a PodGroup of n members of gpus GPUs each, on nodes labelled pool, with
// the given PriorityClass ("" for none).
func orderedGang(t *testing.T, ns, name string, n, gpus int, pool, priorityClass string) {
	t.Helper()
	c := rigtest.Current().Client
	if err := c.Create(context.Background(), builders.PodGroup(name, ns).MinMember(int32(n)).Obj()); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		p := builders.Pod(fmt.Sprintf("%s-%d", name, i), ns).Member(name).GPU(gpus).NodeSelector("pool", pool).Obj()
		p.Spec.PriorityClassName = priorityClass
		if err := c.Create(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
}

// blocker binds a plain pod using gpus GPUs to node.
func blocker(t *testing.T, ns, node string, gpus int) *corev1.Pod {
	t.Helper()
	p := builders.Pod("blocker-"+node, ns).GPU(gpus).Node(node).Obj()
	if err := rigtest.Current().Client.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	return p
}

// waitUnschedulable waits until the PodGroup group says it does not fit.
func waitUnschedulable(t *testing.T, ns, group string) {
	t.Helper()
	rigtest.Eventually(t, 10*time.Second, 100*time.Millisecond, group+" waits", func(ctx context.Context) (bool, string, error) {
		cond := scheduledCondition(t, ns, group)
		return cond != nil && cond.Reason == berthv1alpha1.ReasonUnschedulable, fmt.Sprintf("%+v", cond), nil
	})
}

// stillGated checks, for a few seconds, that no member of group binds.
func stillGated(t *testing.T, ns, group string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if _, _, bound, err := memberStates(context.Background(), ns, group); err != nil || bound > 0 {
			t.Fatalf("%d members of %s bound (err %v); want none", bound, group, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestPriorityBeforeAge: two gangs wait for one node's GPUs; when they free up, the younger gang
// of the higher PriorityClass is admitted, the older lower-priority one keeps waiting.
func TestPriorityBeforeAge(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	ns := namespace(t)
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "berth-test-training-high"}, Value: 1000}
	if err := c.Create(ctx, pc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), pc) })
	kwokNode(t, "order-prio", 8, map[string]string{"pool": "prio"})
	b := blocker(t, ns, "order-prio", 8)
	orderedGang(t, ns, "old-low", 2, 4, "prio", "")
	waitUnschedulable(t, ns, "old-low")
	time.Sleep(time.Second) // older by a second
	orderedGang(t, ns, "young-high", 2, 4, "prio", pc.Name)
	// Both gangs are seen waiting before the GPUs free up: otherwise the outcome depends on which
	// informer event berth sees first, not on the order under test.
	waitUnschedulable(t, ns, "young-high")
	if err := c.Delete(ctx, b, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	waitAllBound(t, ns, "young-high", 2, 15*time.Second)
	stillGated(t, ns, "old-low", 2*time.Second)
}

// TestWaitingGangKeepsItsRoom: a gang waiting for capacity keeps the room it can already use: a
// younger gang that would fit there is not placed there (it would delay the older one again and
// again), but backfills room the waiting gang cannot use; when the rest frees up, the waiting
// gang is admitted into the room it kept.
func TestWaitingGangKeepsItsRoom(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	ns := namespace(t)
	kwokNode(t, "order-a", 8, map[string]string{"pool": "a", "shared": "yes"})
	kwokNode(t, "order-b", 4, map[string]string{"pool": "b", "shared": "yes"})
	b := blocker(t, ns, "order-a", 4)
	// The big gang fits only on node a, where 4 of its 8 GPUs are free: one member's worth.
	orderedGang(t, ns, "big", 2, 4, "a", "")
	waitUnschedulable(t, ns, "big")
	// A younger one-member gang that fits anywhere "shared": node a's free room is big's, so it
	// backfills node b.
	if err := c.Create(ctx, builders.PodGroup("small", ns).MinMember(1).Obj()); err != nil {
		t.Fatal(err)
	}
	small := builders.Pod("small-0", ns).Member("small").GPU(4).NodeSelector("shared", "yes").Obj()
	if err := c.Create(ctx, small); err != nil {
		t.Fatal(err)
	}
	waitAllBound(t, ns, "small", 1, 15*time.Second)
	if err := c.Get(ctx, client.ObjectKeyFromObject(small), small); err != nil || small.Spec.NodeName != "order-b" {
		t.Errorf("the younger gang runs on %q (err %v), want order-b: order-a's free GPUs are kept for the waiting gang", small.Spec.NodeName, err)
	}
	// A second younger gang that only fits node a is kept off it.
	if err := c.Create(ctx, builders.PodGroup("squatter", ns).MinMember(1).Obj()); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, builders.Pod("squatter-0", ns).Member("squatter").GPU(4).NodeSelector("pool", "a").Obj()); err != nil {
		t.Fatal(err)
	}
	stillGated(t, ns, "squatter", 3*time.Second)
	// The rest frees up: the waiting gang is admitted whole on node a, ahead of the squatter.
	if err := c.Delete(ctx, b, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	waitAllBound(t, ns, "big", 2, 15*time.Second)
	stillGated(t, ns, "squatter", time.Second)
}
