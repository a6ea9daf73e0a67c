package gangs_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestIncompleteBatchIsNotBilledPastTheTimeout: a gang of 4 × 8 A10G GPUs on a NodePool whose
// limit holds 2 such nodes. Karpenter launches 2 NodeClaims for the seats and can launch no more;
// at the provisioning timeout (15 s) berth withdraws the seats and deletes the 2 NodeClaims no
// pod uses, so the partial capacity is not billed past the timeout. Plain Karpenter, the same
// 4 pods without berth: 2 nodes come up, 2 pods run on them waiting for the other 2, and the
// nodes stay as long as the job does — measured over the same window.
func TestIncompleteBatchIsNotBilledPastTheTimeout(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	pool := testPool(t, "gpu-partial", "g5", func(pool *karpv1.NodePool) {
		pool.Spec.Limits = karpv1.Limits{berthv1alpha1.GPUResource: resource.MustParse("16")}
		// Consolidation alone would take these empty nodes only after 2 minutes.
		pool.Spec.Disruption.ConsolidateAfter = karpv1.MustParseNillableDuration("120s")
	})
	const window = 30 * time.Second
	gone := func(ctx context.Context) (int, error) {
		claims, err := nodeClaims(ctx, pool.Name)
		n := 0
		for _, nc := range claims {
			if nc.DeletionTimestamp == nil {
				n++
			}
		}
		return n, err
	}

	// berth: the gang's batch.
	ns := namespace(t, "partial")
	pg := builders.PodGroup("ddp", ns).MinMember(4).NodePool(pool.Name).ProvisioningTimeout(15).ScheduleTimeout(0).Obj()
	createGang(t, pg, 4, 8, "g5")
	rigtest.Eventually(t, time.Minute, 200*time.Millisecond, "2 NodeClaims launched", func(ctx context.Context) (bool, string, error) {
		n, err := gone(ctx)
		return n == 2, fmt.Sprintf("%d NodeClaims", n), err
	})
	var deadline time.Time // the attempt's start plus its timeout
	rigtest.Eventually(t, time.Minute, 100*time.Millisecond, "the attempt times out", func(ctx context.Context) (bool, string, error) {
		g, err := getGroup(ctx, pg)
		if err != nil {
			return false, "", err
		}
		cond := meta.FindStatusCondition(g.Status.Conditions, berthv1alpha1.ConditionCapacityProvisioned)
		if cond == nil || cond.Reason != berthv1alpha1.ReasonProvisioningFailed {
			return false, fmt.Sprintf("%+v", cond), nil
		}
		deadline = g.Status.Provisioning.StartedAt.Add(15 * time.Second)
		t.Logf("PodGroup says: %s", cond.Message)
		return true, "", nil
	})
	rigtest.Eventually(t, 20*time.Second, 100*time.Millisecond, "the NodeClaims no pod uses deleted", func(ctx context.Context) (bool, string, error) {
		n, err := gone(ctx)
		return n == 0, fmt.Sprintf("%d NodeClaims left", n), err
	})
	// At most: both were deleted by now (StartedAt has a one-second resolution).
	berthNodeSeconds := 2 * max(0, time.Since(deadline).Seconds())
	if err := c.Delete(ctx, pg); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}

	// Plain Karpenter: the same 4 pods, no gang.
	plain := namespace(t, "plain")
	for i := range 4 {
		p := builders.Pod(fmt.Sprintf("ddp-%d", i), plain).GPU(8).NodeSelector(awsv1.LabelInstanceFamily, "g5").
			NodeSelector(karpv1.NodePoolLabelKey, pool.Name).Tolerate(berthv1alpha1.GPUResource, "", corev1.TaintEffectNoSchedule).Obj()
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	rigtest.Eventually(t, time.Minute, 200*time.Millisecond, "2 of the 4 plain pods running", func(ctx context.Context) (bool, string, error) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(plain)); err != nil {
			return false, "", err
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == 2, fmt.Sprintf("%d running", running), nil
	})
	time.Sleep(window)
	n, err := gone(ctx)
	if err != nil {
		t.Fatal(err)
	}
	plainNodeSeconds := float64(n) * window.Seconds()
	t.Logf("node-seconds billed for the incomplete batch after the timeout: berth ≤ %.1f (NodeClaims deleted), plain Karpenter %.0f over %s and counting (%d nodes held by pods waiting for their peers)",
		berthNodeSeconds, plainNodeSeconds, window, n)
	if n != 2 {
		t.Errorf("plain Karpenter: %d nodes after %s, expected the 2 it launched to stay", n, window)
	}
	if berthNodeSeconds > 20 {
		t.Errorf("berth: %.1f node-seconds after the timeout, want the NodeClaims gone within seconds", berthNodeSeconds)
	}
	// The plain run's nodes go with the test.
	held := map[string]bool{}
	claims, err := nodeClaims(ctx, pool.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, nc := range claims {
		held[nc.Status.NodeName] = true
	}
	releaseNodes(t, plain, held)
}

// TestScheduleTimeoutReclaimsTheBatch: the schedule timeout before the provisioning timeout —
// the order of the defaults (both 600 s; the schedule clock is tended first) — also ends the
// attempt, and its incomplete batch goes with its seats: the 2 NodeClaims Karpenter could
// launch for a gang of 4 on a pool that holds 2 are deleted within 30 s of the timeout, not
// left billed until consolidation.
func TestScheduleTimeoutReclaimsTheBatch(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	pool := testPool(t, "gpu-partial-schedule", "g5", func(pool *karpv1.NodePool) {
		pool.Spec.Limits = karpv1.Limits{berthv1alpha1.GPUResource: resource.MustParse("16")}
		pool.Spec.Disruption.ConsolidateAfter = karpv1.MustParseNillableDuration("120s")
	})
	live := func(ctx context.Context) (int, error) {
		claims, err := nodeClaims(ctx, pool.Name)
		n := 0
		for _, nc := range claims {
			if nc.DeletionTimestamp == nil {
				n++
			}
		}
		return n, err
	}
	ns := namespace(t, "partial-schedule")
	// The provisioning timeout is left at its default (600 s): only the schedule timeout ends
	// this attempt. BERTH_E2E_DEFAULT_TIMEOUTS=1 leaves the schedule timeout at its default too
	// (600 s, the case: both defaults, the schedule timeout first); make test shortens
	// it to 20 s, the same code path.
	b := builders.PodGroup("ddp", ns).MinMember(4).NodePool(pool.Name)
	scheduleTimeout := time.Duration(berthv1alpha1.DefaultScheduleTimeoutSeconds) * time.Second
	if os.Getenv("BERTH_E2E_DEFAULT_TIMEOUTS") == "" {
		b, scheduleTimeout = b.ScheduleTimeout(20), 20*time.Second
	}
	pg := b.Obj()
	createGang(t, pg, 4, 8, "g5")
	rigtest.Eventually(t, time.Minute, 200*time.Millisecond, "2 NodeClaims launched", func(ctx context.Context) (bool, string, error) {
		n, err := live(ctx)
		return n == 2, fmt.Sprintf("%d NodeClaims", n), err
	})
	var timedOut time.Time
	rigtest.Eventually(t, scheduleTimeout+100*time.Second, 100*time.Millisecond, "the schedule timeout passes", func(ctx context.Context) (bool, string, error) {
		g, err := getGroup(ctx, pg)
		if err != nil {
			return false, "", err
		}
		cond := meta.FindStatusCondition(g.Status.Conditions, berthv1alpha1.ConditionScheduled)
		if cond == nil || cond.Reason != berthv1alpha1.ReasonScheduleTimeout {
			return false, fmt.Sprintf("%+v", cond), nil
		}
		// Seen within the poll's 100 ms (the condition's transition time stays at the first
		// False: Unschedulable, when the gang was created).
		timedOut = time.Now()
		return true, "", nil
	})
	rigtest.Eventually(t, 30*time.Second, 100*time.Millisecond, "the NodeClaims no pod uses deleted within 30 s of the timeout", func(ctx context.Context) (bool, string, error) {
		n, err := live(ctx)
		return n == 0, fmt.Sprintf("%d NodeClaims left %.0f s after the timeout", n, time.Since(timedOut).Seconds()), err
	})
	t.Logf("the batch's NodeClaims were gone %.1f s after the schedule timeout", time.Since(timedOut).Seconds())
	if err := c.Delete(ctx, pg); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
}

// TestReservedSpareNodeIsNotConsolidated: a gang of 2 × 8 A10G GPUs on a NodePool whose limit
// holds one such node, which an earlier pod left empty. One member fits that node; the other's
// seat gets no node (the limit), so the attempt runs on. While it does, berth keeps the spare
// node from Karpenter's consolidation (10 s after it emptied, here): the node carries berth's
// karpenter.sh/do-not-disrupt and is still there a minute later. Once the gang is gone
// the mark goes too, and consolidation takes the node. (Unmarked, a gang's spare node was
// consolidated mid-attempt on the LWS rig test, and the gang asked Karpenter for a second batch.)
func TestReservedSpareNodeIsNotConsolidated(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	pool := testPool(t, "gpu-spare", "g5", func(pool *karpv1.NodePool) {
		pool.Spec.Limits = karpv1.Limits{berthv1alpha1.GPUResource: resource.MustParse("8")}
		pool.Spec.Disruption.ConsolidateAfter = karpv1.MustParseNillableDuration("10s")
		pool.Spec.Disruption.Budgets = []karpv1.Budget{{Nodes: "100%"}}
	})
	ns := namespace(t, "spare")
	filler := builders.Pod("filler", ns).GPU(8).NodeSelector(awsv1.LabelInstanceFamily, "g5").
		NodeSelector(karpv1.NodePoolLabelKey, pool.Name).Tolerate(berthv1alpha1.GPUResource, "", corev1.TaintEffectNoSchedule).Obj()
	if err := c.Create(ctx, filler); err != nil {
		t.Fatal(err)
	}
	rigtest.Eventually(t, 2*time.Minute, 200*time.Millisecond, "the filler running on a node of the pool", func(ctx context.Context) (bool, string, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(filler), filler); err != nil {
			return false, "", err
		}
		return filler.Status.Phase == corev1.PodRunning, string(filler.Status.Phase), nil
	})
	spare := filler.Spec.NodeName
	if err := c.Delete(ctx, filler, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	pg := builders.PodGroup("ddp", ns).MinMember(2).NodePool(pool.Name).ProvisioningTimeout(300).ScheduleTimeout(0).Obj()
	createGang(t, pg, 2, 8, "g5")

	marked := func(n *corev1.Node) bool {
		return n.Annotations[karpv1.DoNotDisruptAnnotationKey] == "true" && n.Annotations[berthv1alpha1.ProtectedByAnnotation] == berthv1alpha1.ProtectedByBerth
	}
	rigtest.Eventually(t, 30*time.Second, 200*time.Millisecond, "the spare node reserved and marked do-not-disrupt by berth", func(ctx context.Context) (bool, string, error) {
		var n corev1.Node
		if err := c.Get(ctx, client.ObjectKey{Name: spare}, &n); err != nil {
			return false, "", err
		}
		return marked(&n), fmt.Sprintf("annotations %v", n.Annotations), nil
	})
	// Six times the pool's consolidateAfter (Karpenter validates an empty node for 15 s more before it
	// deletes it): the node stays, the attempt runs on.
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(time.Second) {
		var n corev1.Node
		if err := c.Get(ctx, client.ObjectKey{Name: spare}, &n); err != nil || n.DeletionTimestamp != nil || !marked(&n) {
			t.Fatalf("the spare node the gang counts on went or lost its mark mid-attempt: err %v, deleting since %v, annotations %v", err, n.DeletionTimestamp, n.Annotations)
		}
		claims, err := claimsFor(ctx, map[string]bool{spare: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, nc := range claims {
			if nc.DeletionTimestamp != nil {
				t.Fatalf("Karpenter is deleting NodeClaim %s of the spare node the gang counts on", nc.Name)
			}
		}
	}
	g, err := getGroup(ctx, pg)
	if err != nil {
		t.Fatal(err)
	}
	if !g.Status.Provisioning.Active() {
		t.Fatalf("the gang's attempt is over (%+v): the check above proved nothing", g.Status.Provisioning)
	}

	// The gang goes: the mark goes with its reservation, and consolidation takes the node.
	if err := c.Delete(ctx, pg); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	rigtest.Eventually(t, 2*time.Minute, 500*time.Millisecond, "the unmarked spare node consolidated", func(ctx context.Context) (bool, string, error) {
		var n corev1.Node
		err := c.Get(ctx, client.ObjectKey{Name: spare}, &n)
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, "", err
		}
		return false, fmt.Sprintf("node %s: annotations %v, deleting %v", spare, n.Annotations, n.DeletionTimestamp != nil), nil
	})
}
