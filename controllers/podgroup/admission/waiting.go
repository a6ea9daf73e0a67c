package admission

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/events"
	seatpkg "github.com/berth-dev/berth/internal/seat"
	"github.com/berth-dev/berth/scheduling"
)

// A gang waiting to be admitted whole: enough members, a wait clock that starts only once no
// other scheduler holds them, placement, and — when it does not fit — capacity from Karpenter and
// the room it can already use kept from younger gangs.

// Backoff between schedule timeouts of a gang that retries: base doubling per timeout, capped.
const (
	scheduleBackoffBase = time.Minute
	scheduleBackoffMax  = 30 * time.Minute
)

// scheduleBackoff is the wait after the n-th schedule timeout of a wait.
func scheduleBackoff(n int32) time.Duration {
	d := scheduleBackoffBase
	for i := int32(1); i < n && d < scheduleBackoffMax; i++ {
		d *= 2
	}
	return min(d, scheduleBackoffMax)
}

// admitWhole moves a gang that has no admitted generation towards admission and says how soon it
// wants another look.
func (r *Reconciler) admitWhole(ctx context.Context, cy *cycle, gv gangView, gen generation) (time.Duration, error) {
	g := gv.group
	need, byJobs, err := r.waveNeed(ctx, gv, gen)
	if err != nil {
		return 0, err
	}
	if len(gen.fresh) < need {
		if byJobs {
			return jobRecheck, r.waitForMembers(ctx, cy, gv, gen, need)
		}
		return 0, r.waitForMembers(ctx, cy, gv, gen, need)
	}
	gang := scheduling.Gang{Members: gen.fresh}
	if g.Spec.Topology != nil {
		gang.TopologyKey = g.Spec.Topology.RequiredKey
	}
	// The gang's own seats, and those a ProvisioningRequest its members consume booked for it,
	// hold capacity for it: they are free when placing it.
	free := cy.snap.Without(gv.holding())
	res := scheduling.Place(free, gang)
	if !res.Fits() && len(gang.Members) > need {
		// An elastic gang: minMember placed together is enough; the others follow as they fit.
		part := scheduling.Gang{Members: gang.Members[:need], TopologyKey: gang.TopologyKey}
		if pres := scheduling.Place(free, part); pres.Fits() {
			gang, res = part, pres
		}
	}
	// A gang that fits is admitted — without starting its wait clock the first time it is
	// looked at (one status write, the admission, instead of two), and even when its wait has
	// just passed its timeout: the timeout is for a gang that does not fit (it was timed out
	// at its deadline instead).
	var wait time.Duration
	var backingOff bool
	if !res.Fits() {
		var err error
		if wait, backingOff, err = r.tendClock(ctx, cy, gv); err != nil || wait < 0 {
			return 0, err
		}
	}
	if res.Fits() {
		if err := cy.assume(gang.Members, res); err != nil {
			return 0, err
		}
		return 0, r.commit(ctx, cy, gv, gang.Members, res)
	}
	reason := berthv1alpha1.ReasonUnschedulable
	switch {
	case res.Unsupported:
		reason = berthv1alpha1.ReasonUnsupported
	case res.Blocked:
		reason = berthv1alpha1.ReasonWaitingForVolumes
	}
	placements.WithLabelValues(resultLabel(reason)).Inc()
	if backingOff {
		// Timed out and retrying later: it holds nothing and asks for nothing until then.
		return wait, nil
	}
	// Keep the room the gang can already use from gangs after it in this cycle — after its own
	// capacity request is judged, which must not count that room against the gang itself.
	defer reserveRoom(cy, gv, gang, res)
	if reason == berthv1alpha1.ReasonUnschedulable && r.opts.Provisioning.Enabled {
		if err := r.setScheduled(ctx, cy, g, metav1.ConditionFalse, berthv1alpha1.ReasonWaitingForCapacity,
			"the gang does not fit existing nodes; capacity for the members without a place is requested from Karpenter (see condition CapacityProvisioned)"); err != nil {
			return 0, err
		}
		next, err := r.provision(ctx, cy, gv, gang, res.Reason)
		if err != nil {
			return 0, err
		}
		return minPositive(wait, next), nil
	}
	return wait, r.setScheduled(ctx, cy, g, metav1.ConditionFalse, reason, res.Reason)
}

// reserveRoom keeps the room a gang that does not fit can already use (placement res) from the
// gangs after it in this cycle. Without seats, from the placement just made; with seats, placed
// again where they count (the placement was made without them: reserving it would count a
// member and its seat on one node).
func reserveRoom(cy *cycle, gv gangView, gang scheduling.Gang, res scheduling.Result) {
	if len(gv.holding()) == 0 {
		cy.reservePlaced(gang, res)
	} else {
		cy.reservePartial(gang)
	}
}

// waitForMembers says what a gang without enough placeable members waits for, and stops its
// wait clock: time before every member exists, or while a queue holds some, does not count.
func (r *Reconciler) waitForMembers(ctx context.Context, cy *cycle, gv gangView, gen generation, need int) error {
	g := gv.group
	if g.Status.WaitingSince != nil || g.Status.ScheduleRetryAt != nil {
		if err := r.updateStatus(ctx, g, func(st *berthv1alpha1.PodGroupStatus) {
			st.WaitingSince, st.ScheduleRetryAt, st.ScheduleTimeouts = nil, nil, 0
		}); err != nil {
			return err
		}
	}
	switch {
	case len(gen.fresh)+len(gen.held) >= need:
		return r.setScheduled(ctx, cy, g, metav1.ConditionFalse, berthv1alpha1.ReasonHeldByOtherScheduler,
			fmt.Sprintf("%d of %d members are held by another scheduler's gate (%s); the gang waits for them, and its schedule timeout has not started",
				len(gen.held), len(gen.fresh)+len(gen.held), strings.Join(otherGates(gen.held), ", ")))
	case len(gv.members) >= need && len(gen.fresh) == 0 && len(gen.held) == 0 && !gen.admitted():
		// Members exist but none carries the gate: created before berth's webhook was installed,
		// or past it. berth cannot hold them; say so instead of claiming admission.
		return r.setScheduled(ctx, cy, g, metav1.ConditionFalse, berthv1alpha1.ReasonMembersNotGated,
			fmt.Sprintf("none of the %d members carries the %s scheduling gate (created before berth's webhook was installed?); kube-scheduler places them one by one", len(gv.members), berthv1alpha1.SchedulingGate))
	}
	return r.setScheduled(ctx, cy, g, metav1.ConditionFalse, berthv1alpha1.ReasonWaitingForMembers,
		fmt.Sprintf("%d of %d members exist", len(gen.fresh)+len(gen.held), need))
}

// otherGates names the other schedulers' gates that hold pods.
func otherGates(pods []*corev1.Pod) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range pods {
		for _, gt := range p.Spec.SchedulingGates {
			if gt.Name != berthv1alpha1.SchedulingGate && !seen[gt.Name] {
				seen[gt.Name] = true
				out = append(out, gt.Name)
			}
		}
	}
	return out
}

// tendClock keeps the wait clock of a gang with enough placeable members: it starts the wait,
// ends a retry backoff that ran out, and times the gang out. It returns how long until the
// next deadline (0: none), whether the gang is backing off after a timeout, and a negative wait
// when the gang timed out just now (nothing more to do this cycle).
func (r *Reconciler) tendClock(ctx context.Context, cy *cycle, gv gangView) (time.Duration, bool, error) {
	g := gv.group
	now := r.clock.Now()
	st := g.Status
	switch {
	case st.WaitingSince == nil:
		return timeoutOf(g), false, r.updateStatus(ctx, g, func(st *berthv1alpha1.PodGroupStatus) {
			st.WaitingSince = &metav1.Time{Time: now}
		})
	case st.ScheduleRetryAt != nil && now.Before(st.ScheduleRetryAt.Time):
		return st.ScheduleRetryAt.Sub(now), true, nil
	case st.ScheduleRetryAt != nil:
		// The backoff is over: a new wait, with a whole timeout, starts now.
		return timeoutOf(g), false, r.updateStatus(ctx, g, func(st *berthv1alpha1.PodGroupStatus) {
			st.WaitingSince, st.ScheduleRetryAt = &metav1.Time{Time: now}, nil
		})
	}
	timeout := timeoutOf(g)
	if timeout == 0 {
		return 0, false, nil
	}
	if waited := now.Sub(st.WaitingSince.Time); waited < timeout {
		return max(time.Second, timeout-waited), false, nil
	}
	return -1, false, r.timeOut(ctx, gv, timeout)
}

// timeOut ends a wait that passed scheduleTimeoutSeconds: with onScheduleTimeout Fail the gang
// fails for good; with Retry it gives back its capacity request and backs off before waiting
// again. Its members stay gated either way.
func (r *Reconciler) timeOut(ctx context.Context, gv gangView, timeout time.Duration) error {
	g := gv.group
	now := metav1.NewTime(r.clock.Now())
	// The schedule timeout ends a provisioning attempt too (with the defaults it comes first):
	// the NodeClaims launched for its seats that nothing uses go with them, or an incomplete
	// batch stays billed until consolidation.
	if reclaimed, err := seatpkg.Reclaim(ctx, r.client, r.apiReader, gv.seats, "podgroup"); err != nil {
		log.FromContext(ctx).Error(err, "reclaiming the NodeClaims of an attempt ended by the schedule timeout", "podgroup", client.ObjectKeyFromObject(g))
	} else if len(reclaimed) > 0 {
		log.FromContext(ctx).Info("reclaimed the NodeClaims of an attempt ended by the schedule timeout", "podgroup", client.ObjectKeyFromObject(g), "nodeClaims", reclaimed)
	}
	if err := r.deleteSeats(ctx, gv.seats); err != nil {
		return err
	}
	placements.WithLabelValues(ResultTimeout).Inc()
	if g.Spec.OnScheduleTimeout == berthv1alpha1.ScheduleTimeoutFail {
		msg := fmt.Sprintf("not admitted within scheduleTimeoutSeconds (%s); onScheduleTimeout is Fail, so the gang gives up for good", timeout)
		if err := r.updateStatus(ctx, g, func(st *berthv1alpha1.PodGroupStatus) {
			r.setCondition(st, g, berthv1alpha1.ConditionScheduled, metav1.ConditionFalse, berthv1alpha1.ReasonScheduleTimeout, msg)
			endAttempt(st, now)
		}); err != nil {
			return err
		}
		r.recorder.Warning(g, events.ReasonGangTimedOut, msg)
		return nil
	}
	n := g.Status.ScheduleTimeouts + 1
	backoff := scheduleBackoff(n)
	msg := fmt.Sprintf("not admitted within scheduleTimeoutSeconds (%s, timeout %d): the gang gives back its capacity request and the room it held, and waits again from %s; it is still admitted if it fits before",
		timeout, n, now.Add(backoff).UTC().Format(time.RFC3339))
	if err := r.updateStatus(ctx, g, func(st *berthv1alpha1.PodGroupStatus) {
		st.ScheduleTimeouts = n
		st.ScheduleRetryAt = &metav1.Time{Time: now.Add(backoff)}
		r.setCondition(st, g, berthv1alpha1.ConditionScheduled, metav1.ConditionFalse, berthv1alpha1.ReasonScheduleTimeout, msg)
		endAttempt(st, now)
	}); err != nil {
		return err
	}
	r.recorder.Warning(g, events.ReasonGangTimedOut, msg)
	return nil
}

// endAttempt closes a running capacity request in a status being written (its seats are gone).
func endAttempt(st *berthv1alpha1.PodGroupStatus, now metav1.Time) {
	if st.Provisioning.Active() {
		p := st.Provisioning.DeepCopy()
		p.FinishedAt = &now
		p.LastFailure = "withdrawn: the gang's schedule timeout passed"
		st.Provisioning = p
	}
}
