package nativegang

import (
	"fmt"
	"time"

	"github.com/berth-dev/berth/internal/events"
)

// Defaults of the controller's timing.
const (
	// DefaultProvisioningTimeout bounds one attempt: the seats' nodes must all be Ready by then.
	DefaultProvisioningTimeout = 10 * time.Minute
	// DefaultRetryAfter is how long after a timed-out attempt berth asks again.
	DefaultRetryAfter = time.Minute
)

// state is what decide reads: one native gang, its members and its seats, at now.
type state struct {
	now time.Time
	// minCount is the gang's schedulingPolicy.gang.minCount.
	minCount int
	// unplaced: kube-scheduler's PodGroupInitiallyScheduled condition is False (its gang cycle
	// found no placement), for unplacedReason; placed: it is True.
	unplaced, placed bool
	unplacedReason   string
	// pending are the members not bound to a node (and not being deleted); bound the others.
	pending, bound []string
	// protect: the group's disruptionMode is all; unprotected are bound members without
	// karpenter.sh/do-not-disrupt.
	protect     bool
	unprotected []string
	// seats: how many exist, and how many have a node launched for them (bound, or nominated
	// by Karpenter to a NodeClaim).
	seats, seatsLaunched int
	// requestedAt, handedOver and retryAt are the group's annotations (zero when absent): when
	// the attempt asked for capacity, when its seats gave way, when to ask again.
	requestedAt, handedOver, retryAt time.Time

	timeout, retryAfter time.Duration
	// claimsBlocked says why the seats cannot carry the members' device claims ("": they
	// can, or there are none): no seats are ordered.
	claimsBlocked string
}

// plan is what act does.
type plan struct {
	// seatsFor are the members to create seats for (one batch).
	seatsFor []string
	// watch starts an attempt in which Karpenter provisions for the members themselves (they
	// are Unschedulable): berth only withdraws what it launched if the gang is not placed.
	watch bool
	// handOver deletes the seats (every node is launched) and records the hand-over; the room
	// the seats bound to nodes held stays held for the members in the capacity ledger until
	// holdUntil (the attempt's deadline), so no PodGroup gang is promised it first.
	handOver  bool
	holdUntil time.Time
	// release gives back what the ledger holds for the gang (placed, or the attempt ended).
	release bool
	// reclaim withdraws a timed-out attempt: the NodeClaims launched for it (for its seats,
	// or, once handed over, nominated for the pending members) that no pod uses are deleted,
	// the seats too; retryAt is set.
	reclaim bool
	retryAt time.Time
	// clear removes the seats of a placed gang (nothing left to hold).
	clear bool
	// protect are bound members to mark karpenter.sh/do-not-disrupt.
	protect []string
	// eventReason and eventNote, when set, are recorded on the PodGroup (Warning when warn).
	eventReason, eventNote string
	warn                   bool
	// requeue is when to look again without an event (0: on the next change).
	requeue time.Duration
}

// placedOrGone reports whether the plan ends the gang's need for capacity (placed, or no member
// pending).
func (p plan) placedOrGone() bool { return p.release || p.clear }

// reasonUnschedulable is kube-scheduler's reason for a gang its cycle found no room for; for
// its other reason (SchedulerError, what a gang gets when no node is a candidate at all)
// Karpenter provisions nothing.
const reasonUnschedulable = "Unschedulable"

// decide is the controller's whole policy. A gang kube-scheduler cannot place gets a seat per
// pending member, all at once, so Karpenter launches its nodes in one batch: it provisions
// nothing for the members themselves while their gang cycle fails with SchedulerError (when
// the cycle reports them Unschedulable Karpenter provisions for them, and berth adds no seats). As soon
// as every seat has its node launched, the seats give way: the members then wait for exactly
// those nodes (Karpenter maps them onto its in-flight NodeClaims instead of launching more)
// and kube-scheduler's gang cycle places them all once they are Ready. If the gang is not
// placed within the timeout, the attempt's unused NodeClaims are deleted and it is retried
// later. Members of a gang with disruptionMode all are marked do-not-disrupt once bound.
func decide(s state) plan {
	var p plan
	if s.protect {
		p.protect = s.unprotected
	}
	deadline := s.requestedAt.Add(s.timeout)
	// active: an attempt asked for capacity and has not been withdrawn; launched: its seats
	// are still waiting, or they gave way in this attempt.
	active := !s.requestedAt.IsZero() && s.retryAt.Before(s.requestedAt)
	launched := s.seats > 0 || !s.handedOver.Before(s.requestedAt)
	switch {
	case s.placed || len(s.pending) == 0:
		// The held room goes back once the cache shows every member bound (kube-scheduler's
		// condition can come before the binds do: admission, reading the same cache, would see
		// the room free and no member on it).
		p.clear, p.release = s.seats > 0, len(s.pending) == 0
		return p
	case s.seats > 0 && s.seatsLaunched == s.seats:
		p.handOver, p.holdUntil = true, deadline
		p.eventReason = events.ReasonCapacityHandedOver
		p.eventNote = fmt.Sprintf("Karpenter launched the %d node(s) the gang needs in one batch; their seats gave way, and kube-scheduler places the gang once they are Ready", s.seats)
		p.requeue = max(deadline.Sub(s.now), time.Second)
		return p
	case active && launched && !s.now.Before(deadline):
		// The attempt's nodes did not all come, or came but the gang is still not placed.
		p.reclaim, p.release = true, true
		p.retryAt = s.now.Add(s.retryAfter)
		p.warn = true
		p.eventReason = events.ReasonCapacityNotProvisioned
		p.eventNote = fmt.Sprintf("the gang is not placed %s after berth asked for its nodes; the attempt is withdrawn and retried at %s",
			s.timeout, p.retryAt.UTC().Format(time.RFC3339))
		return p
	case s.seats > 0 || (active && launched):
		p.requeue = max(deadline.Sub(s.now), time.Second)
		return p
	case !s.unplaced || len(s.pending)+len(s.bound) < s.minCount:
		// kube-scheduler has not given up on the gang, or the gang is not whole yet.
		return p
	case !s.retryAt.IsZero() && s.now.Before(s.retryAt):
		p.requeue = s.retryAt.Sub(s.now)
		return p
	case s.unplacedReason == reasonUnschedulable:
		// Karpenter provisions for Unschedulable pods, the members together: seats would
		// double it. berth keeps the attempt's clock.
		p.watch = true
		p.requeue = s.timeout
		return p
	}
	if s.claimsBlocked != "" {
		p.warn, p.eventReason = true, events.ReasonCapacityNotRequested
		p.eventNote = "kube-scheduler cannot place the gang and berth orders no nodes for it: " + s.claimsBlocked
		p.requeue = s.retryAfter
		return p
	}
	p.seatsFor = s.pending
	p.eventReason = events.ReasonCapacityRequested
	p.eventNote = fmt.Sprintf("kube-scheduler cannot place the gang (minCount %d); berth asks Karpenter for the nodes of its %d pending member(s) in one batch", s.minCount, len(s.pending))
	return p
}
