package admission

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/events"
	seatpkg "github.com/berth-dev/berth/internal/seat"
	"github.com/berth-dev/berth/scheduling"
)

// Whole-gang provisioning with seat pods.
//
// When a gang does not fit existing nodes, admission creates one seat pod for every member
// that has no place: a pause container with the member's requests, node selection and
// tolerations, the lowest priority (PriorityClass berth-seat), karpenter.sh/do-not-disrupt,
// and, for gangs with a topology key, required pod affinity among the gang's seats. The seats
// are created together, so Karpenter's provisioner sees the whole shortfall in one batch and
// launches every NodeClaim for it. Admission discounts a gang's own seats when it places that
// gang: once every seat is on a Ready node, the gang fits, is admitted onto those nodes, and
// its seats are deleted after the members' gates are gone and before the release barrier is
// lifted, so kube-scheduler binds the members into the capacity the seats held.

// DefaultSeatImage is the container image of seat pods; it only has to start and sleep.
const DefaultSeatImage = seatpkg.DefaultImage

// DefaultSeatNamespace is where seat pods live when ProvisioningOptions.SeatNamespace is empty.
const DefaultSeatNamespace = seatpkg.DefaultNamespace

// Retry backoff after a failed provisioning attempt: base doubling per failure in a row, capped.
const (
	provisioningBackoffBase = 30 * time.Second
	provisioningBackoffMax  = 10 * time.Minute
)

// ProvisioningOptions configure whole-gang provisioning. The zero value turns it off.
type ProvisioningOptions struct {
	// Enabled creates seat pods for gangs that do not fit existing nodes.
	Enabled bool
	// SeatImage is the seat container's image; DefaultSeatImage when empty.
	SeatImage string
	// SeatNamespace is the namespace seat pods live in (berth's own; DefaultSeatNamespace when
	// empty). Seats never live in the gang's namespace: there they would count against its
	// ResourceQuota next to the members they stand for, and a quota that fits the gang exactly
	// would refuse them.
	SeatNamespace string
}

// seatNamespace is where seats are created.
func (o ProvisioningOptions) seatNamespace() string {
	if o.SeatNamespace == "" {
		return DefaultSeatNamespace
	}
	return o.SeatNamespace
}

// standingFor are the seats that hold room for the gang when it judges what it lacks counting
// nodes coming up: its own not bound yet (where the booting snapshot guessed they bind; its
// bound ones are its attempt's, which attemptGrowth weighs against the attempt's seats) and
// every seat of a ProvisioningRequest its members consume, bound or not — the gang places into
// their room as into its own (gangView.holding), and counted against it, a gang of four that
// consumes a request of two asked Karpenter for four seats once the request's seats had bound.
func standingFor(gv gangView) []*corev1.Pod {
	return append(unbound(gv.seats), gv.booked...)
}

// awaitedSeats are the seats of the ProvisioningRequests the gang's members consume that hold
// room on no node of the booting snapshot: Karpenter is launching nodes for them that have not
// registered yet, or kube-scheduler bound them to a node berth's cache has not brought yet (it
// binds a seat the moment its node registers, and the pods' watch and the nodes' are apart).
// Counted nowhere, they left the members they stand for missing, and the gang asked Karpenter
// for a second batch beside the request's. A seat bound to a node that is gone stands in too
// until the pod garbage collector removes it: the wait is the request's, bounded by its
// timeout.
func awaitedSeats(booting *scheduling.Snapshot, gv gangView) []*corev1.Pod {
	if len(gv.booked) == 0 {
		return nil
	}
	held := map[*corev1.Pod]bool{}
	for _, s := range booting.Holding(gv.booked) {
		held[s] = true
	}
	var out []*corev1.Pod
	for _, s := range gv.booked {
		if !held[s] && s.Status.Phase != corev1.PodSucceeded && s.Status.Phase != corev1.PodFailed {
			out = append(out, s)
		}
	}
	return out
}

// standInFor takes out of sf the missing members that seats stand for — one member a seat,
// each the first missing member whose requests the seat's cover — and says how many. The rest
// stay missing: members beyond the request (a request smaller than the gang, another shape)
// still get capacity of their own. Cluster Autoscaler leaves a request's consumers out of its
// scale-ups altogether; the wait this makes is the request's own, bounded by its provisioning
// timeout (its seats go when an attempt fails, and the members are missing again).
func standInFor(sf scheduling.Shortfall, seats []*corev1.Pod) (scheduling.Shortfall, int) {
	if len(seats) == 0 || len(sf.Missing) == 0 {
		return sf, 0
	}
	used := make([]bool, len(seats))
	out := sf
	out.Missing, out.Volumes = nil, nil
	n := 0
	for i, m := range sf.Missing {
		need := scheduling.PodRequests(m)
		taken := false
		for j, s := range seats {
			if !used[j] && covers(scheduling.PodRequests(s), need) {
				used[j], taken = true, true
				n++
				break
			}
		}
		if taken {
			continue
		}
		out.Missing = append(out.Missing, m)
		if i < len(sf.Volumes) {
			out.Volumes = append(out.Volumes, sf.Volumes[i])
		}
	}
	return out, n
}

// covers reports whether have holds at least every positive quantity of need.
func covers(have, need corev1.ResourceList) bool {
	for name, q := range need {
		if q.Sign() > 0 && have.Name(name, q.Format).Cmp(q) < 0 {
			return false
		}
	}
	return true
}

// requestNames names the ProvisioningRequests seats book for.
func requestNames(seats []*corev1.Pod) string {
	var names []string
	for _, s := range seats {
		if k := s.Annotations[berthv1alpha1.SeatForProvisioningRequestAnnotation]; k != "" && !slices.Contains(names, k) {
			names = append(names, k)
		}
	}
	return "ProvisioningRequest " + strings.Join(names, ", ")
}

// provisioningTimeoutOf is the gang's bound on one capacity request.
func provisioningTimeoutOf(g *berthv1alpha1.PodGroup) time.Duration {
	s := berthv1alpha1.DefaultProvisioningTimeoutSeconds
	if g.Spec.ProvisioningTimeoutSeconds != nil {
		s = *g.Spec.ProvisioningTimeoutSeconds
	}
	return time.Duration(s) * time.Second
}

// provisioningBackoff is the wait before the next attempt after failures attempts in a row
// failed (ProvisioningStatus.Failures, this one included).
func provisioningBackoff(failures int32) time.Duration {
	d := provisioningBackoffBase
	for i := int32(1); i < failures && d < provisioningBackoffMax; i++ {
		d *= 2
	}
	return min(d, provisioningBackoffMax)
}

// provision asks Karpenter for the capacity a gang that does not fit is missing, keeps that
// request whole while it runs, and withdraws it when it takes longer than the gang's
// provisioning timeout. snap counts the gang's own seats like any pod, so the shortfall is what
// the gang lacks without them and does not shrink as they bind; booting is the same snapshot
// with nodes that are coming up counted as available, so capacity already on its way is not
// asked for again. It returns how soon it wants another look.
func (r *Reconciler) provision(ctx context.Context, cy *cycle, gv gangView, gang scheduling.Gang, placeReason string) (time.Duration, error) {
	switch step, wait := decideAttempt(r.clock.Now(), gv.group.Status.Provisioning, provisioningTimeoutOf(gv.group)); step {
	case attemptWithdraw:
		return r.withdraw(ctx, cy, gv, placeReason, "")
	case attemptKeep:
		return r.keepAttempt(ctx, cy, gv, gang, placeReason)
	case attemptBackOff:
		// Seats left over from a withdrawal that was interrupted go.
		return wait, r.deleteSeats(ctx, gv.seats)
	}
	return r.startAttempt(ctx, cy, gv, gang, placeReason)
}

// attemptStep is what a gang that needs capacity does with its capacity request.
type attemptStep int

const (
	// attemptStart asks for the capacity the gang lacks (a first attempt, or the next one once
	// the backoff is over).
	attemptStart attemptStep = iota
	// attemptKeep keeps a running attempt whole.
	attemptKeep
	// attemptWithdraw ends a running attempt that ran out of time.
	attemptWithdraw
	// attemptBackOff waits out the backoff after a failed attempt, asking for nothing.
	attemptBackOff
)

// decideAttempt is the capacity request's state machine at now: status p (nil: never asked),
// bound timeout per attempt. It returns the step and, backing off, the time left.
func decideAttempt(now time.Time, p *berthv1alpha1.ProvisioningStatus, timeout time.Duration) (attemptStep, time.Duration) {
	switch {
	case p.Active() && now.Sub(p.StartedAt.Time) >= timeout:
		return attemptWithdraw, 0
	case p.Active():
		return attemptKeep, 0
	case p != nil && p.RetryAt != nil && now.Before(p.RetryAt.Time):
		return attemptBackOff, p.RetryAt.Sub(now)
	}
	return attemptStart, 0
}

// keepAttempt keeps a running attempt whole: the reservation and exactly its seats, and the
// condition saying how many seats are on Ready nodes. It returns the time left until the
// attempt's timeout.
func (r *Reconciler) keepAttempt(ctx context.Context, cy *cycle, gv gangView, gang scheduling.Gang, placeReason string) (time.Duration, error) {
	g, p := gv.group, gv.group.Status.Provisioning
	timeout := provisioningTimeoutOf(g)
	// While the attempt runs, its own seats' nodes boot: judge on the snapshot where booting
	// nodes are unavailable, or the seats would be counted twice.
	sf, ok := scheduling.ComputeShortfall(cy.snap, gang)
	if !ok {
		return 0, nil
	}
	_, remark, err := r.reserve(ctx, cy, g, sf.Nodes)
	if err != nil {
		return 0, err
	}
	// The attempt keeps its seats: room that frees while they wait (a seat bound elsewhere, a
	// seat's node Ready before the seat fits the snapshot's guess) reads as room for a member,
	// and shrinking to what is missing then deleted the seat holding the node the gang asked for
	// (its timeout could not reclaim it).
	want, seatsFrom := int(p.Seats), sf
	cy.countingBooting(g)
	awaited := awaitedSeats(cy.bootingSnapshot(), gv)
	grown, n, ok := attemptGrowth(cy.bootingSnapshot(), gang, g, gv.seats, awaited)
	if pending := standingFor(gv); ok && len(pending) > 0 {
		// Its own seats not bound yet sit where the booting snapshot guessed they bind, and
		// those a ProvisioningRequest its members consume booked for it hold room for it bound
		// or not: room the gang's members counted on. Judged again without them (only then — a
		// copy of the snapshot per gang per cycle — as the room they hold can only lower what
		// the gang lacks).
		grown, n, ok = attemptGrowth(cy.bootingSnapshot().Without(pending), gang, g, gv.seats, awaited)
	}
	if ok {
		next := p.DeepCopy()
		next.Seats = int32(n)
		if err := r.updateStatus(ctx, g, func(st *berthv1alpha1.PodGroupStatus) { st.Provisioning = next }); err != nil {
			return 0, err
		}
		r.recorder.Normal(g, events.ReasonCapacityRequested, fmt.Sprintf("attempt %d: %d more seat(s): room the gang counted on was taken by another workload", p.Attempt, n-want))
		want, seatsFrom = n, grown
	}
	if err := r.ensureSeats(ctx, gv, p.Attempt, seatsFrom, want, cy.dynamic); err != nil {
		return 0, err
	}
	msg := fmt.Sprintf("attempt %d: %d of %d seats on Ready nodes (%s); waiting up to %s", p.Attempt, seatsOnReady(cy, gv.seats), want, placeReason, timeout)
	if err := r.setProvisioned(ctx, cy, g, metav1.ConditionFalse, berthv1alpha1.ReasonProvisioning, msg, nil); err != nil {
		return 0, err
	}
	if remark {
		return time.Second, nil // a reserved node changed as it was marked: mark it again soon
	}
	return max(time.Second, timeout-r.clock.Since(p.StartedAt.Time)), nil
}

// seatsOnReady counts the seats bound to nodes the cycle's snapshot has Ready and available.
func seatsOnReady(cy *cycle, seats []*corev1.Pod) int {
	n := 0
	for _, s := range seats {
		if s.Spec.NodeName != "" {
			if node, ok := cy.snap.Node(s.Spec.NodeName); ok && node.Unavailable == "" {
				n++
			}
		}
	}
	return n
}

// startAttempt asks for the capacity the gang lacks counting what is already booting: it
// reserves the nodes its placeable members would use, records the attempt (so a restart
// finishes it instead of starting another), then creates every seat at once.
func (r *Reconciler) startAttempt(ctx context.Context, cy *cycle, gv gangView, gang scheduling.Gang, placeReason string) (time.Duration, error) {
	g, p := gv.group, gv.group.Status.Provisioning
	// The seats that hold room for the gang stand for capacity on its way to it: judged with
	// them holding that room against it, a gang whose request's nodes were coming up, or had
	// come, asked Karpenter for the same capacity again.
	booting := cy.bootingSnapshot()
	sf, ok := scheduling.ComputeShortfall(booting.Without(standingFor(gv)), gang)
	if !ok {
		return 0, nil
	}
	cy.countingBooting(g)
	awaited := awaitedSeats(booting, gv)
	sf, standIns := standInFor(sf, awaited)
	if len(sf.Missing) == 0 && standIns > 0 {
		msg := fmt.Sprintf("%d member(s) wait for the capacity of %s, which they consume: %d of its seat(s) hold room on no node berth sees yet (Karpenter is launching them, or they are bound to a node that has just registered); nothing more is asked for them (%s)",
			standIns, requestNames(awaited), len(awaited), placeReason)
		return 5 * time.Second, r.setProvisioned(ctx, cy, g, metav1.ConditionFalse, berthv1alpha1.ReasonProvisioning, msg, nil)
	}
	if len(sf.Missing) == 0 {
		return 5 * time.Second, nil // capacity for every member is booting; look again soon
	}
	wrote, remark, err := r.reserve(ctx, cy, g, sf.Nodes)
	switch {
	case err != nil:
		return 0, err
	case wrote:
		// Seats are kept off the reserved nodes by the label alone (Karpenter ignores pods
		// that select on node names): created in the same breath, a seat could be scheduled
		// by a kube-scheduler that had not seen the label yet, onto the room it reserves (a
		// gang of 8 with 7 GPUs free then waited out its whole attempt). The seats come in
		// the cycle the labelled nodes start, once the cache shows them.
		return time.Second, nil
	}
	next, msg := nextAttempt(p, len(sf.Missing), r.clock.Now(), placeReason)
	attempt := next.Attempt
	if err := r.setProvisioned(ctx, cy, g, metav1.ConditionFalse, berthv1alpha1.ReasonProvisioning, msg, next); err != nil {
		return 0, err
	}
	provisioningAttempts.WithLabelValues(g.Namespace, g.Spec.NodePool, ProvisioningStarted).Inc()
	if err := r.ensureSeats(ctx, gv, attempt, sf, len(sf.Missing), cy.dynamic); err != nil {
		return 0, err
	}
	r.recorder.Normal(g, events.ReasonCapacityRequested, msg)
	log.FromContext(ctx).Info("requested capacity for gang", "podgroup", client.ObjectKeyFromObject(g), "seats", len(sf.Missing), "attempt", attempt)
	if remark {
		return time.Second, nil // a reserved node changed as it was marked: mark it again soon
	}
	return provisioningTimeoutOf(g), nil
}

// nextAttempt is the status of the attempt after p (nil: none yet) asking for seats seats at
// now, and what the CapacityProvisioned condition says of it.
func nextAttempt(p *berthv1alpha1.ProvisioningStatus, seats int, now time.Time, placeReason string) (*berthv1alpha1.ProvisioningStatus, string) {
	start := metav1.NewTime(now)
	next := &berthv1alpha1.ProvisioningStatus{Attempt: 1, Seats: int32(seats), StartedAt: &start}
	if p != nil {
		next.Attempt, next.Failures, next.LastFailure = p.Attempt+1, p.Failures, p.LastFailure
	}
	return next, fmt.Sprintf("attempt %d: requested capacity for %d member(s) with no place (%s)", next.Attempt, seats, placeReason)
}

// failedAttempt is the status of attempt p withdrawn at now because its capacity was not Ready
// within timeout (why), the CapacityProvisioned message, and the backoff before the next.
func failedAttempt(p *berthv1alpha1.ProvisioningStatus, now time.Time, timeout time.Duration, why string) (*berthv1alpha1.ProvisioningStatus, string, time.Duration) {
	backoff := provisioningBackoff(p.Failures + 1)
	finished, retry := metav1.NewTime(now), metav1.NewTime(now.Add(backoff))
	next := p.DeepCopy()
	next.FinishedAt, next.RetryAt, next.Failures = &finished, &retry, p.Failures+1
	next.LastFailure = truncate(fmt.Sprintf("capacity for %d member(s) was not Ready within %s: %s", p.Seats, timeout, why), 1024)
	return next, fmt.Sprintf("attempt %d failed: %s; seats withdrawn, retrying in %s", p.Attempt, next.LastFailure, backoff), backoff
}

// withdraw ends a provisioning attempt that ran out of time: the NodeClaims launched for its
// seats that no pod uses are deleted (an incomplete batch is not billed past the timeout), every
// seat goes, the gang returns to Pending with the reason, and the next attempt waits for the
// backoff. note, when not empty, is added to the reason.
func (r *Reconciler) withdraw(ctx context.Context, cy *cycle, gv gangView, placeReason, note string) (time.Duration, error) {
	g, p, timeout := gv.group, gv.group.Status.Provisioning, provisioningTimeoutOf(gv.group)
	why := r.seatTrouble(ctx, gv.seats, placeReason)
	if note != "" {
		why += "; " + note
	}
	// The nodes that did come up for the seats would stay empty, billed, until consolidation:
	// they go now, before the seats (which say which they are).
	reclaimed, err := seatpkg.Reclaim(ctx, r.client, r.apiReader, gv.seats, "podgroup")
	if err != nil {
		log.FromContext(ctx).Error(err, "reclaiming the NodeClaims of an incomplete batch", "podgroup", client.ObjectKeyFromObject(g))
	}
	if len(reclaimed) > 0 {
		why = fmt.Sprintf("the %d NodeClaim(s) launched for it that no pod uses were deleted (%s); %s", len(reclaimed), strings.Join(reclaimed, ", "), why)
	}
	// The verdict is written before the seats go: a write that fails leaves the seats for the
	// next cycle to judge again (judged without them, the attempt read as one whose seats were
	// preempted); seats a failed delete leaves, the sweep removes (the attempt has ended).
	next, msg, backoff := failedAttempt(p, r.clock.Now(), timeout, why)
	if err := r.setProvisioned(ctx, cy, g, metav1.ConditionFalse, berthv1alpha1.ReasonProvisioningFailed, msg, next); err != nil {
		return 0, err
	}
	provisioningAttempts.WithLabelValues(g.Namespace, g.Spec.NodePool, ProvisioningTimeout).Inc()
	r.recorder.Warning(g, events.ReasonCapacityNotProvisioned, msg)
	return backoff, r.deleteSeats(ctx, gv.seats)
}

// seatTrouble explains why seats are not on Ready nodes: Karpenter's latest word on an
// unbound seat (NodePool limits, no instance type fits…), or kube-scheduler's.
func (r *Reconciler) seatTrouble(ctx context.Context, seats []*corev1.Pod, placeReason string) string {
	unbound := 0
	var first *corev1.Pod
	for _, s := range seats {
		if s.Spec.NodeName == "" {
			unbound++
			if first == nil {
				first = s
			}
		}
	}
	if first == nil {
		return fmt.Sprintf("all %d seats are on nodes, but the gang still does not fit them (%s)", len(seats), placeReason)
	}
	detail := ""
	var evs corev1.EventList
	sel := fields.SelectorFromSet(fields.Set{"involvedObject.uid": string(first.UID)})
	if err := r.apiReader.List(ctx, &evs, client.InNamespace(first.Namespace), client.MatchingFieldsSelector{Selector: sel}); err == nil {
		var latest *corev1.Event
		for i := range evs.Items {
			e := &evs.Items[i]
			if e.Type != corev1.EventTypeWarning {
				continue
			}
			if latest == nil || eventTime(e).After(eventTime(latest)) || (e.Source.Component == "karpenter" && latest.Source.Component != "karpenter") {
				latest = e
			}
		}
		if latest != nil {
			detail = latest.Message
		}
	}
	if detail == "" {
		if c := podCondition(first, corev1.PodScheduled); c != nil {
			detail = c.Message
		}
	}
	if detail == "" {
		detail = "no reason reported"
	}
	return fmt.Sprintf("%d of %d seats got no node; %s: %s", unbound, len(seats), first.Name, detail)
}

func eventTime(e *corev1.Event) time.Time {
	if !e.LastTimestamp.IsZero() {
		return e.LastTimestamp.Time
	}
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

func podCondition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// setProvisioned writes the CapacityProvisioned condition and, when next is not nil, the
// provisioning status. A new message alone (seats that became Ready, a new placement reason) is
// written at most once per messageRefresh.
func (r *Reconciler) setProvisioned(ctx context.Context, cy *cycle, g *berthv1alpha1.PodGroup, status metav1.ConditionStatus, reason, msg string, next *berthv1alpha1.ProvisioningStatus) error {
	cur := meta.FindStatusCondition(g.Status.Conditions, berthv1alpha1.ConditionCapacityProvisioned)
	if next == nil && cur != nil && cur.Status == status && cur.Reason == reason && cur.ObservedGeneration == g.Generation &&
		(cur.Message == msg || !r.refreshDue(cy, g, berthv1alpha1.ConditionCapacityProvisioned)) {
		return nil // nothing new, or only a new message that waits for its refresh
	}
	if err := r.updateStatus(ctx, g, func(st *berthv1alpha1.PodGroupStatus) {
		if next != nil {
			st.Provisioning = next
		}
		r.setCondition(st, g, berthv1alpha1.ConditionCapacityProvisioned, status, reason, msg)
	}); err != nil {
		return err
	}
	r.refreshed(g, berthv1alpha1.ConditionCapacityProvisioned)
	return nil
}

// finishProvisioning marks an attempt that ended with the gang admitted as a success, in the
// status about to be written at admission. A gang admitted with no attempt running (room freed
// during its backoff) ends its run of failures too: they are failures in a row.
func finishProvisioning(st *berthv1alpha1.PodGroupStatus, g *berthv1alpha1.PodGroup, now metav1.Time, nodeClaims []string) {
	p := st.Provisioning
	if !p.Active() {
		if p != nil && (p.Failures != 0 || p.RetryAt != nil) {
			p = p.DeepCopy()
			p.Failures, p.RetryAt = 0, nil // no backoff left for a gang that needs capacity again
			st.Provisioning = p
		}
		return
	}
	p = p.DeepCopy()
	p.FinishedAt, p.Failures = &now, 0
	provisioningAttempts.WithLabelValues(g.Namespace, g.Spec.NodePool, ProvisioningProvisioned).Inc()
	provisioningDuration.Observe(now.Sub(p.StartedAt.Time).Seconds())
	p.RetryAt = nil
	st.Provisioning = p
	st.NodeClaims = nodeClaims
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: berthv1alpha1.ConditionCapacityProvisioned, Status: metav1.ConditionTrue, Reason: berthv1alpha1.ReasonProvisioned,
		Message:            fmt.Sprintf("capacity for %d member(s) Ready after %s (attempt %d)", p.Seats, now.Sub(p.StartedAt.Time).Round(time.Second), p.Attempt),
		ObservedGeneration: g.Generation, LastTransitionTime: now,
	})
}

// nodeClaimsOf names the Karpenter NodeClaims behind nodes, matched on the provider ID (which
// a NodeClaim reports from launch on, long before its status.nodeName); empty when Karpenter's
// API is not there or cannot be read (the names are informative only).
// The NodeClaims are listed once per cycle, on the first admission that needs them.
func (r *Reconciler) nodeClaimsOf(ctx context.Context, cy *cycle, nodes []string) []string {
	if cy.nodeClaims == nil {
		var list karpv1.NodeClaimList
		if err := r.apiReader.List(ctx, &list); err != nil {
			log.FromContext(ctx).V(1).Info("cannot list NodeClaims", "error", err)
			return nil
		}
		cy.nodeClaims = list.Items
		if cy.nodeClaims == nil {
			cy.nodeClaims = []karpv1.NodeClaim{}
		}
	}
	snap := cy.snap
	byProvider := map[string]bool{}
	byName := map[string]bool{}
	for _, n := range nodes {
		byName[n] = true
		if ns, ok := snap.Node(n); ok && ns.Node.Spec.ProviderID != "" {
			byProvider[ns.Node.Spec.ProviderID] = true
		}
	}
	var out []string
	for _, nc := range cy.nodeClaims {
		if byProvider[nc.Status.ProviderID] || byName[nc.Status.NodeName] {
			out = append(out, nc.Name)
		}
	}
	sort.Strings(out)
	return out
}
