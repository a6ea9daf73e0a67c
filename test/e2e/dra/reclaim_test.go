package dra_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestDRAIncompleteBatchReclaimed: a gang of 4 members, two claiming 8 A10Gs each and two 16 —
// more than any instance type of the pool has. Karpenter launches 2 NodeClaims for the first two
// seats' claims and none for the others; at the provisioning timeout (15 s) berth withdraws the
// seats — their claims and template copies go with them — and deletes the 2 NodeClaims no pod
// uses, and no member is bound.
func TestDRAIncompleteBatchReclaimed(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	pool := rig.DevNodePools()[0].DeepCopy()
	pool.Name = "gpu-dra-partial"
	pool.ResourceVersion = ""
	pool.Spec.Template.Spec.Requirements[0].Values = []string{"g5"}
	// No limit: Karpenter v1.15 sizing claims launched four g5.48xlarge for four such seats
	// under a limit of 16 nvidia.com/gpu, and under one of 400 cpu (docs/dra.md). The batch is
	// incomplete because two members ask for what no instance type has.
	pool.Spec.Limits = nil
	pool.Spec.Disruption.ConsolidateAfter = karpv1.MustParseNillableDuration("120s") // not what removes them
	pool.Spec.Weight = ptr.To[int32](100)
	if err := c.Create(ctx, pool); err != nil {
		t.Fatalf("creating NodePool: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), pool) })
	live := func(ctx context.Context) (int, error) {
		var ncs karpv1.NodeClaimList
		if err := c.List(ctx, &ncs, client.MatchingLabels{karpv1.NodePoolLabelKey: pool.Name}); err != nil {
			return 0, err
		}
		n := 0
		for _, nc := range ncs.Items {
			if nc.DeletionTimestamp == nil {
				n++
			}
		}
		return n, nil
	}
	ns := rigtest.Namespace(t, "drapartial")
	a10g := `device.attributes["gpu.nvidia.com"].productName.lowerAscii().contains("a10g")`
	eight, sixteen := builders.ClaimTemplate("eight-a10g", ns, 8, a10g), builders.ClaimTemplate("sixteen-a10g", ns, 16, a10g)
	pg := builders.PodGroup("ddp", ns).MinMember(4).NodePool(pool.Name).ProvisioningTimeout(15).ScheduleTimeout(0).Obj()
	for _, obj := range []client.Object{eight, sixteen, pg} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		tmpl := eight
		if i >= 2 {
			tmpl = sixteen
		}
		m := builders.Pod(fmt.Sprintf("ddp-%d", i), ns).Member(pg.Name).Request(corev1.ResourceCPU, "4").
			Tolerate("nvidia.com/gpu", "true", corev1.TaintEffectNoSchedule).NodeSelector(karpv1.NodePoolLabelKey, pool.Name).
			ClaimFromTemplate("gpus", tmpl.Name).Obj()
		if err := c.Create(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	// Two at least (Karpenter sometimes launches a node more than a batch needs).
	rigtest.Eventually(t, time.Minute, 200*time.Millisecond, "NodeClaims launched for the first two seats", func(ctx context.Context) (bool, string, error) {
		n, err := live(ctx)
		return n >= 2, fmt.Sprintf("%d NodeClaims", n), err
	})
	var withdrawn string // what the PodGroup says of the failed attempt, naming the NodeClaims reclaimed
	rigtest.Eventually(t, time.Minute, 100*time.Millisecond, "the attempt times out", func(ctx context.Context) (bool, string, error) {
		var g berthv1alpha1.PodGroup
		if err := c.Get(ctx, client.ObjectKeyFromObject(pg), &g); err != nil {
			return false, "", err
		}
		cond := meta.FindStatusCondition(g.Status.Conditions, berthv1alpha1.ConditionCapacityProvisioned)
		if cond == nil || cond.Reason != berthv1alpha1.ReasonProvisioningFailed {
			var ncs karpv1.NodeClaimList
			if err := c.List(ctx, &ncs); err != nil {
				return false, "", err
			}
			st := fmt.Sprintf("%+v; NodeClaims:", cond)
			for _, nc := range ncs.Items {
				st += fmt.Sprintf(" %s(%s %s)", nc.Name, nc.Labels[karpv1.NodePoolLabelKey], nc.Labels[corev1.LabelInstanceTypeStable])
			}
			var ms corev1.PodList
			if err := c.List(ctx, &ms, client.InNamespace(ns)); err != nil {
				return false, "", err
			}
			for _, m := range ms.Items {
				st += fmt.Sprintf("; %s on %q gates %d", m.Name, m.Spec.NodeName, len(m.Spec.SchedulingGates))
			}
			return false, st, nil
		}
		t.Logf("PodGroup says: %s", cond.Message)
		withdrawn = cond.Message
		return true, "", nil
	})
	// The NodeClaims berth names as reclaimed go; so do the seats and their template copies. A
	// NodeClaim Karpenter launched again for a seat it had already nominated (it does not emit a
	// second nomination for the same pod, so nothing ties it to the seats) may outlive the
	// attempt: it must hold no pod, and consolidation takes it.
	rigtest.Eventually(t, 30*time.Second, 200*time.Millisecond, "the NodeClaims no pod uses deleted, no seat or seat template left", func(ctx context.Context) (bool, string, error) {
		var ncs karpv1.NodeClaimList
		if err := c.List(ctx, &ncs, client.MatchingLabels{karpv1.NodePoolLabelKey: pool.Name}); err != nil {
			return false, "", err
		}
		named, left, unnamed := 0, 0, []string{}
		for _, nc := range ncs.Items {
			switch {
			case strings.Contains(withdrawn, nc.Name):
				named++
				if nc.DeletionTimestamp == nil {
					left++
				}
			case nc.DeletionTimestamp == nil:
				unnamed = append(unnamed, nc.Name)
				var pods corev1.PodList
				if nc.Status.NodeName != "" {
					if err := c.List(ctx, &pods, client.MatchingFields{"spec.nodeName": nc.Status.NodeName}); err != nil {
						return false, "", err
					}
				}
				if len(pods.Items) > 0 {
					return false, fmt.Sprintf("NodeClaim %s (not reclaimed) runs %d pods", nc.Name, len(pods.Items)), nil
				}
			}
		}
		seats, templates, err := seatsOf(ctx, pg)
		if err != nil {
			return false, "", err
		}
		if len(unnamed) > 0 && left == 0 && seats == 0 && templates == 0 {
			t.Logf("left to consolidation, empty: %v", unnamed)
		}
		return strings.Count(withdrawn, pool.Name+"-") >= 2 && left == 0 && seats == 0 && templates == 0,
			fmt.Sprintf("%d of the reclaimed NodeClaims not deleted, %d seats, %d seat templates (reclaimed: %s)", left, seats, templates, withdrawn), nil
	})
	var ms corev1.PodList
	if err := c.List(ctx, &ms, client.InNamespace(ns), client.MatchingLabels{berthv1alpha1.PodGroupLabel: pg.Name}); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms.Items {
		if m.Spec.NodeName != "" {
			t.Errorf("member %s bound to %s from an incomplete batch", m.Name, m.Spec.NodeName)
		}
	}
}
