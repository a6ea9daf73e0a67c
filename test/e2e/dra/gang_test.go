package dra_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestDRAGangProvisionedWhole: a gang of 4 members, each claiming 8 H100s through a
// ResourceClaimTemplate (a CEL selector on the product name), on a family with no nodes. berth
// finds no place, creates a seat per member carrying a copy of the member's template, Karpenter
// launches every node in one batch for the seats' claims, and the gang is released whole: no
// member bound while another is gated, every claim allocated to devices of its own member's
// node, no seat or seat template left.
func TestDRAGangProvisionedWhole(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	ns := rigtest.Namespace(t, "dragang")
	const n = 4
	pool := rig.GPUNodePoolName("h100")
	var before karpv1.NodeClaimList
	if err := c.List(ctx, &before, client.MatchingLabels{karpv1.NodePoolLabelKey: pool}); err != nil {
		t.Fatal(err)
	}
	if len(before.Items) != 0 {
		t.Fatalf("want no %s capacity before the test, found %d NodeClaims", pool, len(before.Items))
	}
	tmpl := builders.ClaimTemplate("eight-h100", ns, 8, `device.attributes["gpu.nvidia.com"].productName.lowerAscii().contains("h100")`)
	pg := builders.PodGroup("train", ns).MinMember(n).Obj()
	for _, obj := range []client.Object{tmpl, pg} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		m := builders.Pod(fmt.Sprintf("train-%d", i), ns).Member(pg.Name).Request(corev1.ResourceCPU, "16").Request(corev1.ResourceMemory, "64Gi").
			Tolerate("nvidia.com/gpu", "true", corev1.TaintEffectNoSchedule).NodeSelector(karpv1.NodePoolLabelKey, pool).
			ClaimFromTemplate("gpus", tmpl.Name).Obj()
		if err := c.Create(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pg), pg); err != nil {
		t.Fatal(err)
	}
	run := waitGangRunning(t, pg, n)
	maxSeats, seatTemplates, early := run.maxSeats, run.seatTemplates, run.early
	if len(early) > 0 {
		t.Errorf("members bound while others were gated: %v", early)
	}
	if maxSeats != n || seatTemplates != n {
		t.Errorf("saw at most %d seats and %d seat templates, want %d of each (one per member)", maxSeats, seatTemplates, n)
	}
	// Every member's claim on devices of its own node, one node per member (8 GPUs each).
	var ms corev1.PodList
	if err := c.List(ctx, &ms, client.InNamespace(ns), client.MatchingLabels{berthv1alpha1.PodGroupLabel: pg.Name}); err != nil {
		t.Fatal(err)
	}
	nodes := map[string]bool{}
	for _, m := range ms.Items {
		nodes[m.Spec.NodeName] = true
		if len(m.Status.ResourceClaimStatuses) != 1 || m.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
			t.Fatalf("member %s: claim statuses %v", m.Name, m.Status.ResourceClaimStatuses)
		}
		var claim resourcev1.ResourceClaim
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: *m.Status.ResourceClaimStatuses[0].ResourceClaimName}, &claim); err != nil {
			t.Fatal(err)
		}
		a := claim.Status.Allocation
		if a == nil || len(a.Devices.Results) != 8 {
			t.Fatalf("member %s's claim %s: allocation %+v, want 8 devices", m.Name, claim.Name, a)
		}
		for _, r := range a.Devices.Results {
			if r.Pool != m.Spec.NodeName {
				t.Errorf("member %s on %s has device %s/%s/%s of another node", m.Name, m.Spec.NodeName, r.Driver, r.Pool, r.Device)
			}
		}
	}
	if len(nodes) != n {
		t.Errorf("members on %d nodes, want %d", len(nodes), n)
	}
	// One Karpenter batch: every NodeClaim of the pool within its 10 s window of the first.
	var ncs karpv1.NodeClaimList
	if err := c.List(ctx, &ncs, client.MatchingLabels{karpv1.NodePoolLabelKey: pool}); err != nil {
		t.Fatal(err)
	}
	var first time.Time
	for _, nc := range ncs.Items {
		if first.IsZero() || nc.CreationTimestamp.Time.Before(first) {
			first = nc.CreationTimestamp.Time
		}
	}
	batch := 0
	for _, nc := range ncs.Items {
		if nc.CreationTimestamp.Sub(first) <= 10*time.Second {
			batch++
		}
	}
	t.Logf("%d NodeClaims (%d in the first batch) for a gang on %d nodes; at most %d seats with %d template copies", len(ncs.Items), batch, len(nodes), maxSeats, seatTemplates)
	if batch < n {
		t.Errorf("the first batch held %d NodeClaims for a gang that needs %d nodes", batch, n)
	}
	// The seats and their template copies go once the gang runs.
	rigtest.Eventually(t, 30*time.Second, 500*time.Millisecond, "no seat or seat template left", func(ctx context.Context) (bool, string, error) {
		seats, templates, err := seatsOf(ctx, pg)
		if err != nil {
			return false, "", err
		}
		return seats == 0 && templates == 0, fmt.Sprintf("%d seats, %d templates", seats, templates), nil
	})
}

// gangRun is what waitGangRunning saw: the most seats and seat template copies at once, and
// every moment a member was bound while another was gated.
type gangRun struct {
	maxSeats, seatTemplates int
	early                   []string
}

// waitGangRunning waits until the gang's n members run, watching its seats and its gate.
func waitGangRunning(t *testing.T, pg *berthv1alpha1.PodGroup, n int) gangRun {
	t.Helper()
	c := rigtest.Current().Client
	ns := pg.Namespace
	var run gangRun
	rigtest.Eventually(t, 4*time.Minute, 200*time.Millisecond, "every member running", func(ctx context.Context) (bool, string, error) {
		var ms corev1.PodList
		if err := c.List(ctx, &ms, client.InNamespace(ns), client.MatchingLabels{berthv1alpha1.PodGroupLabel: pg.Name}); err != nil {
			return false, "", err
		}
		gatedN, bound, running := 0, 0, 0
		for _, m := range ms.Items {
			for _, g := range m.Spec.SchedulingGates {
				if g.Name == berthv1alpha1.SchedulingGate {
					gatedN++
				}
			}
			if m.Spec.NodeName != "" {
				bound++
			}
			if m.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		if bound > 0 && gatedN > 0 {
			run.early = append(run.early, fmt.Sprintf("%d bound while %d gated", bound, gatedN))
		}
		seats, templates, err := seatsOf(ctx, pg)
		if err != nil {
			return false, "", err
		}
		run.maxSeats, run.seatTemplates = max(run.maxSeats, seats), max(run.seatTemplates, templates)
		var g berthv1alpha1.PodGroup
		if err := c.Get(ctx, client.ObjectKeyFromObject(pg), &g); err != nil {
			return false, "", err
		}
		return running == n, fmt.Sprintf("%d running, %d bound, %d gated, %d seats, %d seat templates; phase %s, %v",
			running, bound, gatedN, seats, templates, g.Status.Phase, g.Status.Conditions), nil
	})
	return run
}

// TestDRASevenOfEight: a node with 8 L4s, one claimed by another pod, and a gang of 8 members
// claiming one L4 each on that instance type (other tests' L4 nodes are not theirs to use). Seven would fit: berth releases none of them, orders one seat (with
// its copy of the member's template) for the eighth, and releases all 8 once Karpenter's node
// for it is up — no member bound while another waits.
func TestDRASevenOfEight(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	ns := rigtest.Namespace(t, "dra78")
	const n = 8
	pool := rig.GPUNodePoolName("l4")
	one := builders.ClaimTemplate("one-l4", ns, 1, `device.attributes["gpu.nvidia.com"].productName.lowerAscii().contains("l4")`)
	if err := c.Create(ctx, one); err != nil {
		t.Fatal(err)
	}
	// The blocker takes one L4 of a g6.48xlarge (8 L4s): 7 left there.
	blocker := runBlocker(t, ns, one.Name)
	pg := builders.PodGroup("ddp", ns).MinMember(n).Obj()
	if err := c.Create(ctx, pg); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		m := builders.Pod(fmt.Sprintf("ddp-%d", i), ns).Member(pg.Name).Request(corev1.ResourceCPU, "1").
			Tolerate("nvidia.com/gpu", "true", corev1.TaintEffectNoSchedule).NodeSelector(karpv1.NodePoolLabelKey, pool).
			NodeSelector(corev1.LabelInstanceTypeStable, "g6.48xlarge").ClaimFromTemplate("gpu", one.Name).Obj()
		if err := c.Create(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pg), pg); err != nil {
		t.Fatal(err)
	}
	run := waitGangRunning(t, pg, n)
	if len(run.early) > 0 {
		t.Errorf("members bound while others were gated: %v", run.early)
	}
	if run.maxSeats != 1 || run.seatTemplates != 1 {
		t.Errorf("saw at most %d seats and %d seat templates, want 1 of each (for the eighth member)", run.maxSeats, run.seatTemplates)
	}
	var ms corev1.PodList
	if err := c.List(ctx, &ms, client.InNamespace(ns), client.MatchingLabels{berthv1alpha1.PodGroupLabel: pg.Name}); err != nil {
		t.Fatal(err)
	}
	on := map[string]int{}
	for _, m := range ms.Items {
		on[m.Spec.NodeName]++
	}
	// Released whole, berth places the gang where it fits best: the new node takes all 8 (one
	// node rather than two), or 7 go beside the blocker.
	if len(on) > 2 {
		t.Errorf("members per node %v: want them on the blocker's node and the new one at most", on)
	}
	t.Logf("members per node %v (the blocker on %s); at most %d seat", on, blocker.Spec.NodeName, run.maxSeats)
}

// seatsOf counts the live seats of pg and the claim template copies they carry.
func seatsOf(ctx context.Context, pg *berthv1alpha1.PodGroup) (seats, templates int, err error) {
	c := rigtest.Current().Client
	mine := []client.ListOption{client.InNamespace(rig.BerthNamespace), client.MatchingLabels{berthv1alpha1.SeatOfLabel: string(pg.UID)}}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, mine...); err != nil {
		return 0, 0, err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			seats++
		}
	}
	var ts resourcev1.ResourceClaimTemplateList
	if err := c.List(ctx, &ts, mine...); err != nil {
		return 0, 0, err
	}
	return seats, len(ts.Items), nil
}

// runBlocker runs pod "blocker" in ns on a g6.48xlarge (8 L4s) of the rig's L4 pool, claiming
// devices from template, and returns it once it runs.
func runBlocker(t *testing.T, ns, template string) *corev1.Pod {
	t.Helper()
	c := rigtest.Current().Client
	blocker := builders.Pod("blocker", ns).Ungated().Request(corev1.ResourceCPU, "1").
		Tolerate("nvidia.com/gpu", "true", corev1.TaintEffectNoSchedule).NodeSelector(karpv1.NodePoolLabelKey, rig.GPUNodePoolName("l4")).
		NodeSelector(corev1.LabelInstanceTypeStable, "g6.48xlarge").ClaimFromTemplate("gpu", template).Obj()
	if err := c.Create(context.Background(), blocker); err != nil {
		t.Fatal(err)
	}
	rigtest.Eventually(t, 2*time.Minute, time.Second, "the blocker running", func(ctx context.Context) (bool, string, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(blocker), blocker)
		return blocker.Status.Phase == corev1.PodRunning, fmt.Sprintf("phase %s on %q", blocker.Status.Phase, blocker.Spec.NodeName), err
	})
	return blocker
}
