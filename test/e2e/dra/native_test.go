package dra_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestNativeDRAGangProvisionedWhole: a native gang (scheduling.k8s.io/v1beta1 PodGroup, minCount
// 2) whose members each claim one L4 of their own and share the gang's claim of two L4s
// (spec.resourceClaims, made for the gang from a template), on a cluster with no node at all.
// kube-scheduler's gang cycle then fails with SchedulerError — where Karpenter provisions
// nothing, the case berth orders seats for (with nodes that do not fit, the cycle reports
// Unschedulable and Karpenter provisions for the members itself: berth adds no seats, as
// test/e2e/nativegangs shows). berth's seats carry the claims — the first the
// gang's claim and its member's own, the second its own and kept to the first's node — so
// Karpenter launches one node with the four L4s in one batch; the seats give way and
// kube-scheduler places both members there: the gang's claim allocated once, to two devices of
// that node, reserved for the PodGroup; each member's own claim to a device of the same node.
func TestNativeDRAGangProvisionedWhole(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	pool := rig.GPUNodePoolName("l4")
	removeAllNodes(t)
	ns := rigtest.Namespace(t, "native-dra")
	l4 := `device.attributes["gpu.nvidia.com"].productName.lowerAscii().contains("l4")`
	pg := builders.NativeGroupWithClaim("serve", ns, 2, "shared", "two-l4")
	for _, obj := range []client.Object{builders.ClaimTemplate("two-l4", ns, 2, l4), builders.ClaimTemplate("one-l4", ns, 1, l4), pg} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatalf("creating %s (are GenericWorkload and DRAWorkloadResourceClaims on?): %v", obj.GetName(), err)
		}
	}
	var before karpv1.NodeClaimList
	if err := c.List(ctx, &before, client.MatchingLabels{karpv1.NodePoolLabelKey: pool}); err != nil {
		t.Fatal(err)
	}
	var names []string
	t.Cleanup(func() { // before the namespace: Karpenter cannot evict from a terminating one
		for _, n := range names {
			p := &corev1.Pod{}
			p.Namespace, p.Name = ns, n
			if err := c.Delete(context.Background(), p, client.GracePeriodSeconds(0)); client.IgnoreNotFound(err) != nil {
				t.Errorf("deleting member %s: %v", n, err)
			}
		}
	})
	for i := range 2 {
		m := builders.Pod(fmt.Sprintf("serve-%d", i), ns).Ungated().InNativeGroup(pg.Name).
			Request(corev1.ResourceCPU, "4").Request(corev1.ResourceMemory, "16Gi").
			Tolerate("nvidia.com/gpu", "true", corev1.TaintEffectNoSchedule).NodeSelector(karpv1.NodePoolLabelKey, pool).
			ClaimFromTemplate("shared", "two-l4").ClaimFromTemplate("own", "one-l4").Obj()
		if err := c.Create(ctx, m); err != nil {
			t.Fatal(err)
		}
		names = append(names, m.Name)
	}
	seatsSeen, copiesSeen := 0, 0
	reasons := map[string]bool{} // the gang cycle's reasons for not placing the gang
	rigtest.Eventually(t, 3*time.Minute, 250*time.Millisecond, "both members bound", func(ctx context.Context) (bool, string, error) {
		var seats corev1.PodList
		if err := c.List(ctx, &seats, client.MatchingLabels{berthv1alpha1.SeatForNativeGroupLabel: string(pg.UID)}); err != nil {
			return false, "", err
		}
		seatsSeen = max(seatsSeen, len(seats.Items))
		var copies resourcev1.ResourceClaimTemplateList
		if err := c.List(ctx, &copies, client.MatchingLabels{berthv1alpha1.SeatForNativeGroupLabel: string(pg.UID)}); err != nil {
			return false, "", err
		}
		copiesSeen = max(copiesSeen, len(copies.Items))
		bound, unbound, err := rigtest.CountBound(ctx, c, ns) // the namespace holds the members only
		if err != nil {
			return false, "", err
		}
		var got schedulingv1beta1.PodGroup
		if err := c.Get(ctx, client.ObjectKeyFromObject(pg), &got); err != nil {
			return false, "", err
		}
		if cond := meta.FindStatusCondition(got.Status.Conditions, "PodGroupInitiallyScheduled"); cond != nil && cond.Status == "False" {
			reasons[cond.Reason] = true
		}
		return bound == len(names), fmt.Sprintf("%d of %d bound (%s); %d seats, %d copies; PodGroup %v %v", bound, len(names), unbound, len(seats.Items), len(copies.Items),
			got.Status.Conditions, got.Status.ResourceClaimStatuses), nil
	})
	if seatsSeen != 2 || copiesSeen != 3 {
		t.Errorf("saw at most %d seats and %d template copies, want 2 seats and 3 copies (the gang's claim once, each member's own); the gang cycle said %v", seatsSeen, copiesSeen, reasons)
	}
	var node string
	for _, n := range names {
		var p corev1.Pod
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: n}, &p); err != nil {
			t.Fatal(err)
		}
		if node != "" && p.Spec.NodeName != node {
			t.Errorf("members on %s and %s: the gang's claim's devices are on one node", node, p.Spec.NodeName)
		}
		node = p.Spec.NodeName
	}
	var after karpv1.NodeClaimList
	if err := c.List(ctx, &after, client.MatchingLabels{karpv1.NodePoolLabelKey: pool}); err != nil {
		t.Fatal(err)
	}
	old := map[string]bool{}
	for _, nc := range before.Items {
		old[nc.Name] = true
	}
	var launched []string
	for _, nc := range after.Items {
		if !old[nc.Name] {
			launched = append(launched, nc.Name+" ("+nc.Labels[corev1.LabelInstanceTypeStable]+")")
		}
	}
	if len(launched) != 1 {
		t.Errorf("NodeClaims launched for the gang: %v, want one node with its four L4s", launched)
	}
	var claims resourcev1.ResourceClaimList
	if err := c.List(ctx, &claims, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	devices, groupClaims := 0, 0
	for _, cl := range claims.Items {
		a := cl.Status.Allocation
		if a == nil {
			t.Errorf("claim %s not allocated", cl.Name)
			continue
		}
		for _, r := range a.Devices.Results {
			if r.Pool != node {
				t.Errorf("claim %s's device %s is of %s, not of the members' node %s", cl.Name, r.Device, r.Pool, node)
			}
			devices++
		}
		for _, rf := range cl.Status.ReservedFor {
			if rf.Resource == "podgroups" && rf.Name == pg.Name {
				groupClaims++
			}
		}
	}
	if len(claims.Items) != 3 || devices != 4 || groupClaims != 1 {
		t.Errorf("%d claims, %d devices, %d reserved for the PodGroup; want 3 claims (the gang's and one per member), 4 devices, 1", len(claims.Items), devices, groupClaims)
	}
	rigtest.Eventually(t, time.Minute, 250*time.Millisecond, "seats and copies gone, the gang placed", func(ctx context.Context) (bool, string, error) {
		var seats corev1.PodList
		if err := c.List(ctx, &seats, client.MatchingLabels{berthv1alpha1.SeatForNativeGroupLabel: string(pg.UID)}); err != nil {
			return false, "", err
		}
		var copies resourcev1.ResourceClaimTemplateList
		if err := c.List(ctx, &copies, client.MatchingLabels{berthv1alpha1.SeatForNativeGroupLabel: string(pg.UID)}); err != nil {
			return false, "", err
		}
		var got schedulingv1beta1.PodGroup
		if err := c.Get(ctx, client.ObjectKeyFromObject(pg), &got); err != nil {
			return false, "", err
		}
		placed := meta.IsStatusConditionTrue(got.Status.Conditions, "PodGroupInitiallyScheduled")
		return len(seats.Items) == 0 && len(copies.Items) == 0 && placed, fmt.Sprintf("%d seats, %d copies, %v", len(seats.Items), len(copies.Items), got.Status.Conditions), nil
	})
	rigtest.WaitEvent(t, ns, pg.Name, "CapacityRequested")
	t.Logf("the native gang's 2 members bound together on %s (%v), 4 devices from 3 claims, the gang's claim reserved for its PodGroup", node, launched)
}

// removeAllNodes deletes every NodeClaim and waits until the cluster has no node at all.
func removeAllNodes(t *testing.T) {
	t.Helper()
	c := rigtest.Current().Client
	if err := c.DeleteAllOf(context.Background(), &karpv1.NodeClaim{}); err != nil {
		t.Fatalf("deleting every NodeClaim: %v", err)
	}
	rigtest.Eventually(t, 2*time.Minute, 250*time.Millisecond, "no node left", func(ctx context.Context) (bool, string, error) {
		var claims karpv1.NodeClaimList
		if err := c.List(ctx, &claims); err != nil {
			return false, "", err
		}
		var nodes corev1.NodeList
		if err := c.List(ctx, &nodes); err != nil {
			return false, "", err
		}
		return len(claims.Items)+len(nodes.Items) == 0, fmt.Sprintf("%d NodeClaims, %d nodes", len(claims.Items), len(nodes.Items)), nil
	})
}
