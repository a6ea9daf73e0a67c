package devcluster

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/rig"
)

// Scene 2: gang admission. A 4-member gang that fits only once the H100 node frees is held at
// its scheduling gate, then released and bound whole. berth asks Karpenter for the missing
// capacity (seats) when a gang does not fit, so the scene caps the H100 NodePool at the node
// it has: the request cannot be met, as when a GPU quota is used up, and the gang waits for
// the busy node.

// gangScene caps the H100 pool, holds a gang at its gate while its GPUs are taken, then frees
// them and shows the whole gang released and bound together; the cap is lifted at the end.
func gangScene(ctx context.Context, c client.Client, p *printer, busy *corev1.Pod) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	pool := rig.GPUNodePoolName("h100")
	if err := setGPULimit(ctx, c, pool, resource.NewQuantity(8, resource.DecimalSI)); err != nil {
		return err
	}
	p.say("capped NodePool %s at 8 nvidia.com/gpu (spec.limits): the one node it has, and it is busy", pool)
	lifted := false
	defer func() {
		if !lifted { // the scene failed: lift the cap anyway (the next run's reset would too)
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_ = restoreGPULimit(ctx, c, pool)
		}
	}()
	pg := &berthv1alpha1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "ddp", Namespace: DemoNamespace},
		Spec:       berthv1alpha1.PodGroupSpec{MinMember: 4},
	}
	if err := c.Create(ctx, pg); err != nil {
		return fmt.Errorf("creating PodGroup: %w", err)
	}
	for i := range 4 {
		m := demoTrainingPod(fmt.Sprintf("ddp-%d", i), "h100", 2)
		m.Labels[berthv1alpha1.PodGroupLabel] = "ddp"
		if err := c.Create(ctx, m); err != nil {
			return fmt.Errorf("creating member %s: %w", m.Name, err)
		}
	}
	p.say("created PodGroup ddp (minMember 4) and 4 members; the webhook gated them")
	if err := showHeld(ctx, c, p, pg); err != nil {
		return err
	}
	if err := p.members(ctx, c, "held", 3*time.Second); err != nil {
		return err
	}
	if err := showSeatTrouble(ctx, c, p, pg, pool); err != nil {
		return err
	}
	p.say("the busy pod %s finishes; its 8 GPUs are free", busy.Name)
	if err := c.Delete(ctx, busy, client.GracePeriodSeconds(0)); err != nil {
		return fmt.Errorf("deleting %s: %w", busy.Name, err)
	}
	if err := p.members(ctx, c, "released", 60*time.Second); err != nil {
		return err
	}
	if err := restoreGPULimit(ctx, c, pool); err != nil {
		return err
	}
	lifted = true
	p.say("lifted the cap on NodePool %s", pool)
	return nil
}

// showHeld waits for the PodGroup to say why it is held, and prints its conditions.
func showHeld(ctx context.Context, c client.Client, p *printer, pg *berthv1alpha1.PodGroup) error {
	var got berthv1alpha1.PodGroup
	for {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pg), &got); err != nil {
			return fmt.Errorf("reading PodGroup: %w", err)
		}
		sc := meta.FindStatusCondition(got.Status.Conditions, berthv1alpha1.ConditionScheduled)
		cp := meta.FindStatusCondition(got.Status.Conditions, berthv1alpha1.ConditionCapacityProvisioned)
		if sc != nil && sc.Reason != berthv1alpha1.ReasonWaitingForMembers && (sc.Reason != berthv1alpha1.ReasonWaitingForCapacity || cp != nil) {
			p.say("PodGroup ddp is held — %s: %s", sc.Reason, sc.Message)
			if cp != nil {
				p.say("  condition %s=%s (%s): %s", cp.Type, cp.Status, cp.Reason, shorten(cp.Message))
			}
			return nil
		}
		if err := pause(ctx, 250*time.Millisecond); err != nil {
			return fmt.Errorf("PodGroup ddp does not say why it waits (conditions %s): %w", conditionSummary(got.Status.Conditions), err)
		}
	}
}

// showSeatTrouble prints what Karpenter says about the gang's first seat — why it launches
// no node for it — waiting a few seconds for it to say something.
func showSeatTrouble(ctx context.Context, c client.Client, p *printer, pg *berthv1alpha1.PodGroup, pool string) error {
	var seats corev1.PodList
	if err := c.List(ctx, &seats, client.InNamespace(DemoNamespace), client.MatchingLabels{berthv1alpha1.SeatOfLabel: string(pg.UID)}); err != nil {
		return fmt.Errorf("listing seats of %s: %w", pg.Name, err)
	}
	if len(seats.Items) == 0 {
		return nil
	}
	seat := seats.Items[0]
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		var evs eventsv1.EventList
		if err := c.List(ctx, &evs, client.InNamespace(DemoNamespace)); err != nil {
			return fmt.Errorf("listing Events: %w", err)
		}
		for _, e := range evs.Items {
			if e.Regarding.UID == seat.UID && fromKarpenter(e) && e.Type == corev1.EventTypeWarning {
				p.say("  berth's %d seat pods stay pending; Karpenter on %s: %s", len(seats.Items), seat.Name, clauseAbout(e.Note, pool))
				return nil
			}
		}
		if err := pause(ctx, 250*time.Millisecond); err != nil {
			return fmt.Errorf("waiting for Karpenter's word on %s: %w", seat.Name, err)
		}
	}
	p.say("  berth's %d seat pods stay pending: Karpenter launches no node for them", len(seats.Items))
	return nil
}

// clauseAbout picks, from a Karpenter scheduling message that lists why each NodePool cannot
// take a pod ("...; ...; ..."), the part about one NodePool.
func clauseAbout(note, pool string) string {
	for _, part := range strings.Split(note, "; ") {
		if strings.Contains(part, "NodePool="+pool+")") || strings.Contains(part, "nodepool In ["+pool+"]") {
			return shorten(part)
		}
	}
	return shorten(note)
}

// setGPULimit sets a NodePool's nvidia.com/gpu limit, or removes it when q is nil.
func setGPULimit(ctx context.Context, c client.Client, pool string, q *resource.Quantity) error {
	var np karpv1.NodePool
	if err := c.Get(ctx, client.ObjectKey{Name: pool}, &np); err != nil {
		return fmt.Errorf("reading NodePool %s: %w", pool, err)
	}
	cur, has := np.Spec.Limits[berthv1alpha1.GPUResource]
	if (q == nil && !has) || (q != nil && has && cur.Cmp(*q) == 0) {
		return nil
	}
	stored := np.DeepCopy()
	if np.Spec.Limits == nil {
		np.Spec.Limits = karpv1.Limits{}
	}
	if q == nil {
		delete(np.Spec.Limits, berthv1alpha1.GPUResource)
	} else {
		np.Spec.Limits[berthv1alpha1.GPUResource] = *q
	}
	if err := c.Patch(ctx, &np, client.MergeFrom(stored)); err != nil {
		return fmt.Errorf("setting the GPU limit of NodePool %s: %w", pool, err)
	}
	return nil
}

// restoreGPULimit gives a NodePool back the GPU limit `berth dev up` installed it with.
func restoreGPULimit(ctx context.Context, c client.Client, pool string) error {
	for _, np := range rig.DevNodePools() {
		if np.Name != pool {
			continue
		}
		if q, ok := np.Spec.Limits[berthv1alpha1.GPUResource]; ok {
			return setGPULimit(ctx, c, pool, &q)
		}
		return setGPULimit(ctx, c, pool, nil)
	}
	return fmt.Errorf("the rig has no NodePool %s", pool)
}

// members prints each member's state (gated, released, bound, running) as it changes, until
// all run or the time is up (for phase "held": the whole time, failing if any is bound).
func (p *printer) members(ctx context.Context, c client.Client, phase string, d time.Duration) error {
	last := map[string]string{}
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(DemoNamespace), client.MatchingLabels{berthv1alpha1.PodGroupLabel: "ddp"}); err != nil {
			return fmt.Errorf("listing members: %w", err)
		}
		running := 0
		for _, m := range pods.Items {
			st := "gated"
			switch {
			case m.Status.Phase == corev1.PodRunning:
				st, running = "running on "+m.Spec.NodeName, running+1
			case m.Spec.NodeName != "":
				st = "bound to " + m.Spec.NodeName
			case len(m.Spec.SchedulingGates) == 0:
				st = "released"
			}
			if last[m.Name] != st {
				last[m.Name] = st
				p.say("  member %s: %s", m.Name, st)
				if phase == "held" && st != "gated" {
					return fmt.Errorf("member %s left its gate while the gang could not fit", m.Name)
				}
			}
		}
		if phase == "released" && running == len(pods.Items) && running > 0 {
			p.say("all %d members of ddp run together", running)
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	if phase == "released" {
		return fmt.Errorf("the gang did not start within %s", d)
	}
	return nil
}
