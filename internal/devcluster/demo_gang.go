package devcluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
const (
	// gangName is scene 2's PodGroup.
	gangName = "ddp"
	// gangTimeout bounds scene 2, with the busy node it sets up when it plays on its own.
	gangTimeout = trainingTimeout + 2*time.Minute
)

// gangScene makes sure the H100 node is busy, caps the H100 pool, holds a gang at its gate while
// the node's GPUs are taken, then frees them and shows the whole gang released and bound
// together; the cap is lifted at the end, also when the scene fails.
func gangScene(ctx context.Context, d *demo) (err error) {
	c, p := d.c, d.p
	busy, err := busyH100(ctx, d)
	if err != nil {
		return err
	}
	pool := rig.GPUNodePoolName("h100")
	if err := setGPULimit(ctx, c, pool, resource.NewQuantity(8, resource.DecimalSI)); err != nil {
		return err
	}
	p.say("capped NodePool %s at 8 nvidia.com/gpu (spec.limits): the one node it has, and it is busy", pool)
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if lerr := restoreGPULimit(ctx, c, pool); lerr != nil {
			err = errors.Join(err, lerr)
		} else if err == nil {
			p.say("lifted the cap on NodePool %s", pool)
		}
	}()
	pg := demoGroup(gangName, 4)
	if err := createGang(ctx, c, pg, func(name string) *corev1.Pod { return demoTrainingPod(name, "h100", 2) }); err != nil {
		return err
	}
	p.say("created PodGroup %s (minMember 4) and 4 members; the webhook gated them", gangName)
	if err := showHeld(ctx, c, p, pg); err != nil {
		return err
	}
	if err := stayGated(ctx, c, p, 3*time.Second); err != nil {
		return err
	}
	if err := showSeatTrouble(ctx, c, p, pg, pool); err != nil {
		return err
	}
	p.say("the busy pod %s finishes; its 8 GPUs are free", busy.Name)
	if err := c.Delete(ctx, busy, client.GracePeriodSeconds(0)); err != nil {
		return fmt.Errorf("deleting %s: %w", busy.Name, err)
	}
	return runWhole(ctx, c, p, 60*time.Second)
}

// showHeld waits for the PodGroup to say why it is held, and prints its conditions.
func showHeld(ctx context.Context, c client.Client, p *printer, pg *berthv1alpha1.PodGroup) error {
	var sc, cp *metav1.Condition
	err := waitFor(ctx, c, pg, 250*time.Millisecond, func(pg *berthv1alpha1.PodGroup) bool {
		sc = meta.FindStatusCondition(pg.Status.Conditions, berthv1alpha1.ConditionScheduled)
		cp = meta.FindStatusCondition(pg.Status.Conditions, berthv1alpha1.ConditionCapacityProvisioned)
		return sc != nil && sc.Reason != berthv1alpha1.ReasonWaitingForMembers && (sc.Reason != berthv1alpha1.ReasonWaitingForCapacity || cp != nil)
	})
	if err != nil {
		return fmt.Errorf("PodGroup %s does not say why it waits (conditions %s): %w", pg.Name, conditionSummary(pg.Status.Conditions), err)
	}
	p.say("PodGroup %s is held — %s: %s", pg.Name, sc.Reason, sc.Message)
	if cp != nil {
		p.say("  condition %s=%s (%s): %s", cp.Type, cp.Status, cp.Reason, shorten(cp.Message))
	}
	return nil
}

// stayGated prints the members' states for a while, failing if one leaves its gate.
func stayGated(ctx context.Context, c client.Client, p *printer, d time.Duration) error {
	err := poll(ctx, 100*time.Millisecond, d, func(ctx context.Context) (bool, error) {
		states, err := p.showMembers(ctx, c, gangName)
		for name, st := range states {
			if st != gated {
				return false, fmt.Errorf("member %s left its gate while the gang could not fit", name)
			}
		}
		return false, err
	})
	if errors.Is(err, errTimedOut) {
		return nil
	}
	return err
}

// runWhole prints the members' states until all of them run.
func runWhole(ctx context.Context, c client.Client, p *printer, d time.Duration) error {
	running := 0
	err := poll(ctx, 100*time.Millisecond, d, func(ctx context.Context) (bool, error) {
		states, err := p.showMembers(ctx, c, gangName)
		running = runningMembers(states)
		return running > 0 && running == len(states), err
	})
	if err != nil {
		return fmt.Errorf("the gang did not start: %w", err)
	}
	p.say("all %d members of %s run together", running, gangName)
	return nil
}

// showSeatTrouble prints what Karpenter says about the gang's first seat — why it launches
// no node for it — waiting a few seconds for it to say something.
func showSeatTrouble(ctx context.Context, c client.Client, p *printer, pg *berthv1alpha1.PodGroup, pool string) error {
	seats, err := seatPods(ctx, c, client.MatchingLabels{berthv1alpha1.SeatOfLabel: string(pg.UID)})
	if err != nil || len(seats) == 0 {
		return err
	}
	seat := seats[0]
	var word *eventsv1.Event
	err = poll(ctx, 250*time.Millisecond, 5*time.Second, func(ctx context.Context) (bool, error) {
		evs, err := eventsAbout(ctx, c, seat.Namespace, seat.UID)
		if i := slices.IndexFunc(evs, func(e eventsv1.Event) bool { return fromKarpenter(e) && e.Type == corev1.EventTypeWarning }); i >= 0 {
			word = &evs[i]
		}
		return word != nil, err
	})
	switch {
	case errors.Is(err, errTimedOut):
		p.say("  berth's %d seat pods stay pending: Karpenter launches no node for them", len(seats))
	case err != nil:
		return fmt.Errorf("waiting for Karpenter's word on %s: %w", seat.Name, err)
	default:
		p.say("  berth's %d seat pods stay pending; Karpenter on %s: %s", len(seats), seat.Name, clauseAbout(word.Note, pool))
	}
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
	stored := np.DeepCopy()
	delete(np.Spec.Limits, berthv1alpha1.GPUResource)
	if q != nil {
		if np.Spec.Limits == nil {
			np.Spec.Limits = karpv1.Limits{}
		}
		np.Spec.Limits[berthv1alpha1.GPUResource] = *q
	}
	// A patch that changes nothing is empty, and leaves the NodePool alone.
	if err := c.Patch(ctx, &np, client.MergeFrom(stored)); err != nil {
		return fmt.Errorf("setting the GPU limit of NodePool %s: %w", pool, err)
	}
	return nil
}

// restoreGPULimit gives a NodePool back the GPU limit `berth dev up` installed it with.
func restoreGPULimit(ctx context.Context, c client.Client, pool string) error {
	np, err := rigPool(pool)
	if err != nil {
		return err
	}
	if q, ok := np.Spec.Limits[berthv1alpha1.GPUResource]; ok {
		return setGPULimit(ctx, c, pool, &q)
	}
	return setGPULimit(ctx, c, pool, nil)
}
