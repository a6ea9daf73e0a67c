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
// the room it can already use kept from younger gangs. Observe (admitWhole: the members a wave
// needs, the placement on the cycle's snapshot) → decide (decideWait, decideMembersWait: pure,
// a plan out) → act (actWait, actMembersWait: the plan's writes, in order).

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

// waitView is what decideWait reads: one gang with enough placeable members and no admitted
// generation, placed on the cycle's snapshot, at now.
type waitView struct {
	now time.Time
	// waitingSince and retryAt are the gang's wait clock (zero: not set); timeouts counts the
	// schedule timeouts of this wait.
	waitingSince, retryAt time.Time
	timeouts              int32
	// timeout is scheduleTimeoutSeconds (0: waits forever); failOnTimeout is onScheduleTimeout
	// Fail.
	timeout       time.Duration
	failOnTimeout bool
	// fits: the gang (or its minMember) was placed whole. Otherwise reason is the Scheduled
	// reason placement gives (Unschedulable, Unsupported, WaitingForVolumes) and why its words.
	fits        bool
	reason, why string
	// provisioning: capacity may be requested from Karpenter.
	provisioning bool
}

// waitPlan is what actWait does, in this order.
type waitPlan struct {
	// startWait starts a new wait now (status.waitingSince; a finished backoff cleared).
	startWait bool
	// timedOut ends a wait that passed its timeout (nil: it did not); nothing else is done.
	timedOut *timedOut
	// admit promises the placement and releases the members; nothing else is done.
	admit bool
	// result is the placement outcome counted (berth_podgroup_placements_total).
	result string
	// hold: the gang backs off after a timeout; it holds nothing and asks for nothing.
	hold bool
	// reserve keeps the room the gang can already use from the gangs after it in this cycle
	// (after its own capacity request is judged).
	reserve bool
	// provision requests the capacity the gang lacks from Karpenter.
	provision bool
	// reason and message are the Scheduled=False condition written.
	reason, message string
	// wait is how soon the gang wants another look (0: only on events).
	wait time.Duration
}

// timedOut is a schedule timeout: the attempt's seats and unused NodeClaims go; with fail the
// gang gives up for good, else it waits again from retryAt.
type timedOut struct {
	fail     bool
	timeouts int32
	retryAt  time.Time
	message  string
}

// decideWait is the waiting gang's whole policy. A gang that fits is admitted — even when its
// wait has just passed its timeout, and without starting its wait clock the first time it is
// looked at (one status write, the admission, instead of two): the timeout is for a gang that
// does not fit. One that does not fit starts its wait, backs off after a timeout holding
// nothing, times out at its deadline, or says why it waits and asks Karpenter for what it
// lacks.
func decideWait(v waitView) waitPlan {
	if v.fits {
		return waitPlan{admit: true}
	}
	var p waitPlan
	switch {
	case v.waitingSince.IsZero():
		p.startWait, p.wait = true, v.timeout
	case !v.retryAt.IsZero() && v.now.Before(v.retryAt):
		p.hold, p.wait = true, v.retryAt.Sub(v.now)
	case !v.retryAt.IsZero():
		// The backoff is over: a new wait, with a whole timeout, starts now.
		p.startWait, p.wait = true, v.timeout
	case v.timeout == 0:
	case v.now.Sub(v.waitingSince) < v.timeout:
		p.wait = max(time.Second, v.timeout-v.now.Sub(v.waitingSince))
	default:
		p.timedOut = decideTimeout(v)
		p.result = ResultTimeout
		return p
	}
	p.result = resultLabel(v.reason)
	if p.hold {
		return p
	}
	p.reserve = true
	if v.reason == berthv1alpha1.ReasonUnschedulable && v.provisioning {
		p.provision = true
		p.reason = berthv1alpha1.ReasonWaitingForCapacity
		p.message = "the gang does not fit existing nodes; capacity for the members without a place is requested from Karpenter (see condition CapacityProvisioned)"
		return p
	}
	p.reason, p.message = v.reason, v.why
	return p
}

// decideTimeout is what a wait past its timeout ends in.
func decideTimeout(v waitView) *timedOut {
	if v.failOnTimeout {
		return &timedOut{fail: true, timeouts: v.timeouts, message: fmt.Sprintf(
			"not admitted within scheduleTimeoutSeconds (%s); onScheduleTimeout is Fail, so the gang gives up for good", v.timeout)}
	}
	n := v.timeouts + 1
	retryAt := v.now.Add(scheduleBackoff(n))
	return &timedOut{timeouts: n, retryAt: retryAt, message: fmt.Sprintf(
		"not admitted within scheduleTimeoutSeconds (%s, timeout %d): the gang gives back its capacity request and the room it held, and waits again from %s; it is still admitted if it fits before",
		v.timeout, n, retryAt.UTC().Format(time.RFC3339))}
}

// placementReason is the Scheduled reason of a placement that does not fit.
func placementReason(res scheduling.Result) string {
	switch {
	case res.Unsupported:
		return berthv1alpha1.ReasonUnsupported
	case res.Blocked:
		return berthv1alpha1.ReasonWaitingForVolumes
	}
	return berthv1alpha1.ReasonUnschedulable
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
		if err := r.actMembersWait(ctx, cy, g, decideMembersWait(g.Status, gen, len(gv.members), need)); err != nil {
			return 0, err
		}
		wait, err := r.attemptShortOfMembers(ctx, cy, gv)
		if byJobs {
			wait = minPositive(wait, jobRecheck)
		}
		return wait, err
	}
	gang := scheduling.Gang{Members: gen.fresh}
	if g.Spec.Topology != nil {
		gang.TopologyKey = g.Spec.Topology.RequiredKey
	}
	// The gang's own seats, and those a ProvisioningRequest its members consume booked for it,
	// hold capacity for it: they are free when placing it.
	free := cy.snap.Without(cy.counted(gv.holding()))
	// Nodes a member of the gang was stranded on a moment ago are kept from it (as placement
	// sees the members only: their pins name the nodes chosen).
	avoid := r.avoidedNodes(gangKey(g), cy.now)
	res := scheduling.Place(free, avoidingAll(gang, avoid))
	if !res.Fits() && len(gang.Members) > need {
		// An elastic gang: minMember placed together is enough; the others follow as they fit.
		part := scheduling.Gang{Members: gang.Members[:need], TopologyKey: gang.TopologyKey}
		if pres := scheduling.Place(free, avoidingAll(part, avoid)); pres.Fits() {
			gang, res = part, pres
		}
	}
	p := decideWait(r.waitView(g, res))
	return r.actWait(ctx, cy, gv, gang, res, p)
}

// waitView observes a gang's wait clock and its placement res.
func (r *Reconciler) waitView(g *berthv1alpha1.PodGroup, res scheduling.Result) waitView {
	st := g.Status
	v := waitView{
		now: r.clock.Now(), timeouts: st.ScheduleTimeouts, timeout: timeoutOf(g),
		failOnTimeout: g.Spec.OnScheduleTimeout == berthv1alpha1.ScheduleTimeoutFail,
		fits:          res.Fits(), reason: placementReason(res), why: res.Reason,
		provisioning: r.opts.Provisioning.Enabled,
	}
	if st.WaitingSince != nil {
		v.waitingSince = st.WaitingSince.Time
	}
	if st.ScheduleRetryAt != nil {
		v.retryAt = st.ScheduleRetryAt.Time
	}
	return v
}

// actWait carries out a waiting gang's plan p (placement res of gang).
func (r *Reconciler) actWait(ctx context.Context, cy *cycle, gv gangView, gang scheduling.Gang, res scheduling.Result, p waitPlan) (time.Duration, error) {
	g := gv.group
	if p.admit {
		if err := cy.assume(gang.Members, res); err != nil {
			return 0, err
		}
		return 0, r.commit(ctx, cy, gv, gang.Members, res)
	}
	if p.startWait {
		now := metav1.NewTime(r.clock.Now())
		if err := r.updateStatus(ctx, g, func(st *berthv1alpha1.PodGroupStatus) {
			st.WaitingSince, st.ScheduleRetryAt = &now, nil
		}); err != nil {
			return 0, err
		}
	}
	placements.WithLabelValues(p.result).Inc()
	if p.timedOut != nil {
		return 0, r.timeOut(ctx, gv, *p.timedOut)
	}
	if p.hold {
		return p.wait, nil
	}
	if p.reserve {
		// After the capacity request below is judged, which must not count this room against
		// the gang itself.
		defer reserveRoom(cy, gv, gang, res)
	}
	if err := r.setScheduled(ctx, cy, g, metav1.ConditionFalse, p.reason, p.message); err != nil {
		return 0, err
	}
	if !p.provision {
		return p.wait, nil
	}
	next, err := r.provision(ctx, cy, gv, gang, res.Reason)
	if err != nil {
		return 0, err
	}
	return minPositive(p.wait, next), nil
}

// reserveRoom keeps the room a gang that does not fit can already use (placement res) from the
// gangs after it in this cycle, and the room on nodes coming up that its capacity request
// counted on. Without seats, the Ready room from the placement just made; with seats, placed
// again where they count (the placement was made without them: reserving it would count a
// member and its seat on one node). That room is kept on the same nodes in the booting
// snapshot; there, the members left without a node beyond those the gang's seats stand for
// are placed on the nodes coming up, as its request judged them (startAttempt): kept from no
// one, every gang of a burst counted the same booting nodes as its own and none asked
// Karpenter for capacity until those nodes were Ready and taken — one node boot late.
// (Placing every member again on the booting snapshot counted the members the seats stand for
// besides the seats, which hold their own room there: holdUnboundSeats.)
func reserveRoom(cy *cycle, gv gangView, gang scheduling.Gang, res scheduling.Result) {
	held := gv.holding()
	if len(held) > 0 {
		res = scheduling.PlaceUnexplained(cy.snap, gang)
	}
	cy.reservePlaced(gang, res)
	if !cy.countsBooting[gv.group.UID] {
		return // its capacity request (if any) counted on no booting room this cycle
	}
	rest := notStoodFor(res.Unplaced(gang), held)
	if len(rest) == 0 {
		return
	}
	booting := scheduling.Gang{Members: rest, TopologyKey: gang.TopologyKey}
	cy.keepBooting(func(s *scheduling.Snapshot) { s.ReservePartial(booting) })
}

// notStoodFor is the members of rest that none of the seats stands for. A gang's seat stands
// for the member it names (SeatForMemberAnnotation). A seat that names none of rest — a
// ProvisioningRequest's, booked by shape, or one whose member was placed on a Ready node or
// re-created under another name — stands for a member of its shape, else for one whose
// requests fit in its own, else for the first member left: as many members as the gang holds
// seats are stood for, as before, but the member a seat was made for first. Taken by count
// alone, a gang of mixed shapes (a one-GPU leader, eight-GPU workers) with a seat for a worker
// kept a worker's room and left its leader's to the gangs after it.
func notStoodFor(rest, seats []*corev1.Pod) []*corev1.Pod {
	if len(rest) == 0 || len(seats) == 0 {
		return rest
	}
	stood := make([]bool, len(rest))
	index := make(map[string]int, len(rest))
	for i, m := range rest {
		index[m.Name] = i
	}
	var left []*corev1.Pod // seats that name no member of rest
	for _, s := range seats {
		if i, ok := index[s.Annotations[berthv1alpha1.SeatForMemberAnnotation]]; ok && !stood[i] {
			stood[i] = true
			continue
		}
		left = append(left, s)
	}
	if len(left) > 0 {
		shapes := make([]corev1.ResourceList, len(rest)) // the members', computed once
		for i, m := range rest {
			shapes[i] = scheduling.PodRequests(m)
		}
		seatShapes, used := make([]corev1.ResourceList, len(left)), make([]bool, len(left))
		for j, s := range left {
			seatShapes[j] = scheduling.PodRequests(s)
		}
		// Exact shapes first, then a member that fits in a seat, then any: a seat's room is
		// room whatever the template it was made from left out (a ProvisioningRequest's
		// PodTemplate gets no limits copied to requests, no overhead, no LimitRange defaults).
		for _, match := range []func(seat, member corev1.ResourceList) bool{sameRequests, fitsIn, func(_, _ corev1.ResourceList) bool { return true }} {
			for j := range left {
				if used[j] {
					continue // stands for a member already
				}
				for i := range rest {
					if !stood[i] && match(seatShapes[j], shapes[i]) {
						stood[i], used[j] = true, true
						break
					}
				}
			}
		}
	}
	var out []*corev1.Pod
	for i, m := range rest {
		if !stood[i] {
			out = append(out, m)
		}
	}
	return out
}

// fitsIn reports whether every resource member requests is within what seat requests.
func fitsIn(seat, member corev1.ResourceList) bool {
	for name, q := range member {
		if s, ok := seat[name]; !ok || s.Cmp(q) < 0 {
			return false
		}
	}
	return true
}

// sameRequests reports whether a and b request the same quantity of every resource.
func sameRequests(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for name, q := range a {
		if o, ok := b[name]; !ok || o.Cmp(q) != 0 {
			return false
		}
	}
	return true
}

// membersWait is what a gang without enough placeable members does: its wait clock stops (time
// before every member exists, or while a queue holds some, does not count) and its Scheduled
// condition says what it waits for.
type membersWait struct {
	stopClock       bool
	reason, message string
}

// decideMembersWait decides for a gang with status st whose generation gen has fewer placeable
// members than need, members of its pods existing.
func decideMembersWait(st berthv1alpha1.PodGroupStatus, gen generation, members, need int) membersWait {
	w := membersWait{stopClock: st.WaitingSince != nil || st.ScheduleRetryAt != nil}
	switch {
	case len(gen.fresh)+len(gen.held) >= need:
		w.reason = berthv1alpha1.ReasonHeldByOtherScheduler
		w.message = fmt.Sprintf("%d of %d members are held by another scheduler's gate (%s); the gang waits for them, and its schedule timeout has not started",
			len(gen.held), len(gen.fresh)+len(gen.held), strings.Join(otherGates(gen.held), ", "))
	case members >= need && len(gen.fresh) == 0 && len(gen.held) == 0 && !gen.admitted():
		// Members exist but none carries the gate: created before berth's webhook was installed,
		// or past it. berth cannot hold them; say so instead of claiming admission.
		w.reason = berthv1alpha1.ReasonMembersNotGated
		w.message = fmt.Sprintf("none of the %d members carries the %s scheduling gate (created before berth's webhook was installed?); kube-scheduler places them one by one", members, berthv1alpha1.SchedulingGate)
	default:
		w.reason = berthv1alpha1.ReasonWaitingForMembers
		w.message = fmt.Sprintf("%d of %d members exist", len(gen.fresh)+len(gen.held), need)
	}
	return w
}

// actMembersWait carries out w for gang g.
func (r *Reconciler) actMembersWait(ctx context.Context, cy *cycle, g *berthv1alpha1.PodGroup, w membersWait) error {
	if w.stopClock {
		if err := r.updateStatus(ctx, g, func(st *berthv1alpha1.PodGroupStatus) {
			st.WaitingSince, st.ScheduleRetryAt, st.ScheduleTimeouts = nil, nil, 0
		}); err != nil {
			return err
		}
	}
	return r.setScheduled(ctx, cy, g, metav1.ConditionFalse, w.reason, w.message)
}

// attemptShortOfMembers ends, at its timeout, the capacity request of a gang that fell short of
// members while it ran (a Job Kueue suspended, members deleted): only a gang that fits or needs
// capacity looks at its request, so it ran on for as long as the gang waited, its seats holding
// the nodes Karpenter launched for them (and the nodes it counted on kept from consolidation).
// Within the timeout it runs on — members recreated a moment later (a Job replacing a pod) find
// it — and the gang is looked at again when it runs out. A request whose seats (those there
// are) were not all on Ready nodes by then failed to provision as well, whatever its members did
// (a NodePool limit, no instance type): it is withdrawn as a failure, with its backoff and
// Karpenter's reason, not as a withdrawal that hides it.
func (r *Reconciler) attemptShortOfMembers(ctx context.Context, cy *cycle, gv gangView) (time.Duration, error) {
	p, timeout := gv.group.Status.Provisioning, provisioningTimeoutOf(gv.group)
	switch step, _ := decideAttempt(r.clock.Now(), p, timeout); step {
	case attemptWithdraw:
		// Judged on the seats there are: a seat preempted meanwhile (nothing recreates it while
		// the gang is short) is no sign the capacity failed. (The seats go only after the
		// verdict is written, so a write that failed leaves them here to judge.)
		if len(gv.seats) > 0 && seatsOnReady(cy, gv.seats) < len(gv.seats) {
			return r.withdraw(ctx, cy, gv, "not all of their nodes are Ready", "the gang had also fallen short of members while the request ran")
		}
		return 0, r.abandonAttempt(ctx, cy, gv)
	case attemptKeep:
		return max(time.Second, timeout-r.clock.Since(p.StartedAt.Time)), nil
	}
	return 0, nil
}

// abandonAttempt withdraws the capacity request of a gang short of members (attemptShortOfMembers):
// the NodeClaims launched for its seats that no pod uses go, then the seats. It is not a failure
// to provision: no backoff — the next request starts once the members are back and do not fit.
func (r *Reconciler) abandonAttempt(ctx context.Context, cy *cycle, gv gangView) error {
	g, p := gv.group, gv.group.Status.Provisioning
	reclaimed, err := seatpkg.Reclaim(ctx, r.client, r.apiReader, gv.seats, "podgroup")
	if err != nil {
		log.FromContext(ctx).Error(err, "reclaiming the NodeClaims of an attempt withdrawn for want of members", "podgroup", client.ObjectKeyFromObject(g))
	}
	// The verdict first, then the seats (as withdraw): a write that fails leaves them to be
	// judged again; seats a failed delete leaves, the sweep removes.
	msg := fmt.Sprintf("attempt %d withdrawn at its timeout (%s): the gang fell short of members while it ran; its %d seat(s) and %d unused NodeClaim(s) went; the next attempt starts once the members are back and do not fit",
		p.Attempt, provisioningTimeoutOf(g), len(gv.seats), len(reclaimed))
	next := p.DeepCopy()
	next.FinishedAt = &metav1.Time{Time: r.clock.Now()}
	next.LastFailure = msg
	if err := r.setProvisioned(ctx, cy, g, metav1.ConditionFalse, berthv1alpha1.ReasonProvisioningWithdrawn, msg, next); err != nil {
		return err
	}
	provisioningAttempts.WithLabelValues(g.Namespace, g.Spec.NodePool, ProvisioningWithdrawn).Inc()
	r.recorder.Normal(g, events.ReasonCapacityWithdrawn, msg)
	return r.deleteSeats(ctx, gv.seats)
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

// timeOut carries out a schedule timeout t: the attempt's NodeClaims that nothing uses and its
// seats go (with the defaults the schedule timeout comes first: without the reclaim an
// incomplete batch stays billed until consolidation), the status records it, an Event says it.
// The members stay gated either way.
func (r *Reconciler) timeOut(ctx context.Context, gv gangView, t timedOut) error {
	g := gv.group
	now := metav1.NewTime(r.clock.Now())
	if reclaimed, err := seatpkg.Reclaim(ctx, r.client, r.apiReader, gv.seats, "podgroup"); err != nil {
		log.FromContext(ctx).Error(err, "reclaiming the NodeClaims of an attempt ended by the schedule timeout", "podgroup", client.ObjectKeyFromObject(g))
	} else if len(reclaimed) > 0 {
		log.FromContext(ctx).Info("reclaimed the NodeClaims of an attempt ended by the schedule timeout", "podgroup", client.ObjectKeyFromObject(g), "nodeClaims", reclaimed)
	}
	if err := r.deleteSeats(ctx, gv.seats); err != nil {
		return err
	}
	if err := r.updateStatus(ctx, g, func(st *berthv1alpha1.PodGroupStatus) {
		if !t.fail {
			st.ScheduleTimeouts = t.timeouts
			st.ScheduleRetryAt = &metav1.Time{Time: t.retryAt}
		}
		r.setCondition(st, g, berthv1alpha1.ConditionScheduled, metav1.ConditionFalse, berthv1alpha1.ReasonScheduleTimeout, t.message)
		endAttempt(st, now)
	}); err != nil {
		return err
	}
	r.recorder.Warning(g, events.ReasonGangTimedOut, t.message)
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
