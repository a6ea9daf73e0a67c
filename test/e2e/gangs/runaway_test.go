package gangs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestRunawayNodesStayBounded: every node of the gang's NodePool comes up with a taint that is
// never removed (a startup taint no agent clears), so no seat and no member can ever bind there.
// berth asks for capacity once per provisioning timeout, backing off between attempts; the
// seats never exceed the members that need room, and Karpenter launches one batch, not one per
// attempt.
func TestRunawayNodesStayBounded(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	pool := rig.DevNodePools()[0].DeepCopy()
	pool.Name = "gpu-runaway"
	pool.ResourceVersion = ""
	pool.Spec.Template.Spec.Requirements[0].Values = []string{"p5e"}
	pool.Spec.Template.Labels = map[string]string{"e2e.berth.dev/pool": "runaway"}
	pool.Spec.Template.Spec.StartupTaints = []corev1.Taint{{Key: "e2e.berth.dev/never-ready", Effect: corev1.TaintEffectNoSchedule}}
	pool.Spec.Weight = ptr.To[int32](100)
	if err := c.Create(ctx, pool); err != nil {
		t.Fatalf("creating NodePool: %v", err)
	}
	ns := namespace(t, "runaway")
	pg := builders.PodGroup("stuck", ns).MinMember(2).NodePool(pool.Name).ProvisioningTimeout(10).ScheduleTimeout(0).Obj()
	if err := c.Create(ctx, pg); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		p := builders.Pod(fmt.Sprintf("stuck-%d", i), ns).Member("stuck").GPU(8).
			NodeSelector("e2e.berth.dev/pool", "runaway").NodeSelector(awsv1.LabelInstanceFamily, "p5e").Obj()
		if err := rigtest.CreateRetrying(ctx, c, p); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = c.DeleteAllOf(context.Background(), &corev1.Pod{}, client.InNamespace(ns), client.GracePeriodSeconds(0))
		_ = c.Delete(context.Background(), pg)
		_ = c.Delete(context.Background(), pool)
	})
	pg, err := getGroup(ctx, pg)
	if err != nil {
		t.Fatal(err)
	}
	// Watch for 80 s: attempt 1 at once, withdrawn after 10 s, attempt 2 after the 30 s backoff,
	// withdrawn 10 s later, attempt 3 not before another 60 s.
	maxSeats, maxClaims := 0, 0
	launched := map[string]bool{} // every NodeClaim seen over the whole run
	var attempts int32
	deadline := time.Now().Add(80 * time.Second)
	for time.Now().Before(deadline) {
		seats, err := seatsOf(ctx, pg)
		if err != nil {
			t.Fatal(err)
		}
		claims, err := nodeClaims(ctx, pool.Name)
		if err != nil {
			t.Fatal(err)
		}
		g, err := getGroup(ctx, pg)
		if err != nil {
			t.Fatal(err)
		}
		maxSeats, maxClaims = max(maxSeats, len(seats)), max(maxClaims, len(claims))
		for _, nc := range claims {
			launched[nc.Name] = true
		}
		if g.Status.Provisioning != nil {
			attempts = g.Status.Provisioning.Attempt
		}
		time.Sleep(250 * time.Millisecond)
	}
	g, err := getGroup(ctx, pg)
	if err != nil {
		t.Fatal(err)
	}
	cond := meta.FindStatusCondition(g.Status.Conditions, berthv1alpha1.ConditionCapacityProvisioned)
	t.Logf("after 80 s: %d attempts, at most %d seats and %d NodeClaims at once, %d in all; %+v", attempts, maxSeats, maxClaims, len(launched), cond)
	if attempts != 2 {
		t.Errorf("%d provisioning attempts in 80 s, want 2 (10 s timeout, then 30 s and 60 s of backoff)", attempts)
	}
	if maxSeats > 2 {
		t.Errorf("%d seats at once for 2 members", maxSeats)
	}
	if maxClaims > 2 {
		t.Errorf("%d NodeClaims at once for 2 members of 8 GPUs: more than one batch", maxClaims)
	}
	if len(launched) > 2*int(attempts) {
		t.Errorf("%d NodeClaims launched over %d attempts for 2 members of 8 GPUs: more than one batch per attempt", len(launched), attempts)
	}
	for _, p := range mustMembers(t, ns, "stuck") {
		if p.Spec.NodeName != "" {
			t.Errorf("member %s bound to %s, a node no pod tolerates", p.Name, p.Spec.NodeName)
		}
	}
}

func mustMembers(t *testing.T, ns, group string) []corev1.Pod {
	t.Helper()
	ms, err := members(context.Background(), ns, group)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}
