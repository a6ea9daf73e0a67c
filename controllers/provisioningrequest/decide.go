package provisioningrequest

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	autoscalingv1 "k8s.io/autoscaler/cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/events"
	"github.com/berth-dev/berth/scheduling"
)

// The decision: a pure function of what Reconcile observed. Conditions and reasons are Cluster
// Autoscaler's (cluster-autoscaler provisioningrequest/conditions), so Kueue's provisioning
// admission check reads berth exactly as it reads Cluster Autoscaler.

// Condition reasons, as Cluster Autoscaler spells them.
const (
	ReasonAccepted                       = "Accepted"
	ReasonCapacityIsFound                = "CapacityIsFound"
	ReasonCapacityIsNotFound             = "CapacityIsNotFound"
	ReasonCapacityIsProvisioned          = "CapacityIsProvisioned"
	ReasonFailedToCreatePods             = "FailedToCreatePods"
	ReasonExpired                        = "Expired"
	ReasonCapacityReservationTimeExpired = "CapacityReservationTimeExpired"
	ReasonCapacityBookingConsumed        = "CapacityBookingConsumed"
)

// Timing defaults, Cluster Autoscaler's where it has one.
const (
	// DefaultBookingTime is how long provisioned capacity stays booked for the consuming pods
	// (Cluster Autoscaler's defaultReservationTime).
	DefaultBookingTime = 10 * time.Minute
	// DefaultExpiration is how long a request may stay unprovisioned before it fails
	// (Cluster Autoscaler's defaultExpirationTime).
	DefaultExpiration = 7 * 24 * time.Hour
	// DefaultProvisioningTimeout bounds one attempt of best-effort-atomic-scale-up: every seat
	// on a Ready node within it, or the attempt's seats go and it is retried after a backoff.
	DefaultProvisioningTimeout = time.Duration(berthv1alpha1.DefaultProvisioningTimeoutSeconds) * time.Second
	// checkCapacityBindTimeout bounds how long check-capacity's seats, pinned to the nodes
	// that have room, may take to bind: longer means the room was taken meanwhile.
	checkCapacityBindTimeout = 30 * time.Second
	// retryBase and retryMax bound the backoff between attempts (Cluster Autoscaler's
	// provisioning-request-initial-backoff-time and -max-backoff-time).
	retryBase = time.Minute
	retryMax  = 10 * time.Minute
	// noRetryParameter makes a check-capacity request fail instead of retrying.
	noRetryParameter = "noRetry"
)

// timing are the durations a decision uses.
type timing struct {
	booking, expiration, provisioning time.Duration
}

// observation is what Reconcile saw of one request.
type observation struct {
	pr  *autoscalingv1.ProvisioningRequest
	now time.Time
	// pods are the pods the request asks room for, one per count of each pod set; nil with
	// podsErr when they could not be built.
	pods    []*corev1.Pod
	podsErr error
	// seats are the request's seat pods; dead its seats that failed or finished (a kubelet
	// rejected or evicted them: they hold no room, bound or not).
	seats, dead []*corev1.Pod
	// consuming are the pods of the request's namespace that consume it (annotation
	// autoscaling.x-k8s.io/consume-provisioning-request).
	consuming []*corev1.Pod
	// fit is the placement of pods on existing capacity (the request's own seats not counted).
	fit scheduling.Result
	// ready reports whether a node is Ready (and known).
	ready func(node string) bool
	// held is the room the ledger holds for the request's consuming pods (heldRoom).
	held []scheduling.PodOnNode
}

// plan is what Reconcile does for a decision.
type plan struct {
	// conditions are set on the request's status (nothing else changes when empty and
	// attempts is unchanged).
	conditions []metav1.Condition
	// attempts is the failed-attempt count to record (-1: unchanged).
	attempts int
	// create are seats to create, remove seats to delete.
	create []seatSpec
	remove []*corev1.Pod
	// reclaim: an attempt ended incomplete, or the request is over (failed, its booking ended):
	// the NodeClaims launched for the seats in remove that no pod uses are deleted before the
	// seats — never when a seat gives way to a consuming pod, which has yet to bind there.
	reclaim bool
	// requeue is when to look again (0: on the next event only).
	requeue time.Duration
	// event is a Normal or Warning Event on the request, when reason is set.
	eventType, eventReason, eventNote string
	// setHold: the room held in the ledger for the consuming pods becomes hold, until
	// holdUntil (none when hold is empty). Set before the seats in remove go.
	setHold   bool
	hold      []scheduling.PodOnNode
	holdUntil time.Time
}

// consumerBindWait is how long the room a seat gave way to a consuming pod is held for it
// after the request was last looked at: kube-scheduler binds an arrived pod in seconds; one
// that has not bound in that long does not fit there for some other reason.
const consumerBindWait = 2 * time.Minute

// seatSpec is a seat to create: the pod it stands for, its index among the request's pods
// (which names it) and, for a seat on existing capacity, its node (pinned there; Karpenter does
// not provision for pods that name a node).
type seatSpec struct {
	pod   *corev1.Pod
	index int
	node  string
}

// cond adds a condition to set, stamped with the request's generation and now.
func (p *plan) cond(o observation, typ string, status metav1.ConditionStatus, reason, msg string) {
	p.conditions = append(p.conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg,
		ObservedGeneration: o.pr.Generation, LastTransitionTime: metav1.NewTime(o.now)})
}

// event sets the plan's Event.
func (p *plan) event(typ, reason, note string) {
	p.eventType, p.eventReason, p.eventNote = typ, reason, note
}

// decide is the request's next step. Dead seats go whatever it is; room held for consuming
// pods is let go once no booking keeps it (booked holds it).
func decide(o observation, t timing) plan {
	p := next(o, t)
	p.remove = append(p.remove, o.dead...)
	if !p.setHold && len(o.held) > 0 {
		p.setHold = true
	}
	return p
}

// next is the request's next step for its live seats.
func next(o observation, t timing) plan {
	pr := o.pr
	p := &plan{attempts: -1}
	st := pr.Status.Conditions
	if meta.IsStatusConditionTrue(st, autoscalingv1.Failed) || meta.IsStatusConditionTrue(st, autoscalingv1.BookingExpired) {
		p.remove, p.reclaim = o.seats, !anyArrived(o) // over: nothing is held for it any more
		return *p
	}
	if !meta.IsStatusConditionTrue(st, autoscalingv1.Accepted) {
		p.cond(o, autoscalingv1.Accepted, metav1.ConditionTrue, ReasonAccepted, "ProvisioningRequest is accepted by berth (Karpenter capacity)")
	}
	switch prov := meta.FindStatusCondition(st, autoscalingv1.Provisioned); {
	case o.podsErr != nil:
		p.cond(o, autoscalingv1.Failed, metav1.ConditionTrue, ReasonFailedToCreatePods, o.podsErr.Error())
		p.remove, p.reclaim = o.seats, true
	case prov != nil && prov.Status == metav1.ConditionTrue:
		booked(o, t, prov, p)
	default:
		provisioning(o, t, p)
	}
	return *p
}

// booked tends a provisioned request: its seats hold the capacity until the consuming pods
// arrive (each arriving pod releases one seat: kube-scheduler binds it into the room), all of
// them run (CapacityBookingConsumed), or the booking time passes
// (CapacityReservationTimeExpired).
func booked(o observation, t timing, prov *metav1.Condition, p *plan) {
	bound, arrived := 0, 0
	for _, c := range o.consuming {
		switch {
		case c.Spec.NodeName != "":
			bound++
		case consumerArrived(c):
			arrived++
		}
	}
	total := len(o.pods)
	if bound >= total {
		p.cond(o, autoscalingv1.BookingExpired, metav1.ConditionTrue, ReasonCapacityBookingConsumed, fmt.Sprintf("Capacity booking consumed: all %d pods scheduled", total))
		p.remove, p.reclaim = o.seats, arrived == 0
		p.event(corev1.EventTypeNormal, events.ReasonBookingReleased, fmt.Sprintf("all %d pods scheduled; the booking ends", total))
		return
	}
	end := prov.LastTransitionTime.Add(t.booking)
	if !o.now.Before(end) {
		p.cond(o, autoscalingv1.BookingExpired, metav1.ConditionTrue, ReasonCapacityReservationTimeExpired,
			fmt.Sprintf("Capacity reservation time is expired: %d of %d pods scheduled within %s", bound, total, t.booking))
		p.remove, p.reclaim = o.seats, arrived == 0 // a pod on its way may yet bind to a seat's node
		p.event(corev1.EventTypeWarning, events.ReasonBookingReleased, fmt.Sprintf("booking time %s passed with %d of %d pods scheduled; the seats are removed", t.booking, bound, total))
		return
	}
	// Seats still held: one per pod that has neither arrived nor bound.
	keep := max(0, total-bound-arrived)
	if len(o.seats) > keep {
		p.remove = releaseOrder(o.seats)[:len(o.seats)-keep]
	}
	p.setHold, p.hold, p.holdUntil = true, heldRoom(o, p.remove), o.now.Add(consumerBindWait)
	if end.Before(p.holdUntil) {
		p.holdUntil = end
	}
	switch {
	case len(o.seats) > keep:
	case len(o.seats) < keep:
		p.event(corev1.EventTypeWarning, events.ReasonBookedCapacityLost, fmt.Sprintf(
			"%d seat(s) holding booked room went away (preempted, or their node is gone) before their pods arrived; those pods are scheduled like any other", keep-len(o.seats)))
	}
	p.requeue = end.Sub(o.now)
}

// heldRoom is the room to hold for the consuming pods kube-scheduler is about to place: the
// room of each seat on a node that gives way now (removed) or gave way before (o.held), for
// one arrived pod — until it binds. Without the hold, between a seat's deletion and its pod's
// binding, gang admission or another request could promise the room (a PodGroup gang released
// there first took the GPUs a Kueue workload was admitted on). A berth gang's member gets
// none, gated or released (pinned): its gang's admission places it, counting the seats as the
// gang's own room, and the ledger counts a released member on its node already. Each hold is a
// copy of its pod under the seat's UID: the ledger counts it while the cache shows neither the
// seat nor the pod bound.
func heldRoom(o observation, removed []*corev1.Pod) []scheduling.PodOnNode {
	waiting := map[string]*corev1.Pod{}
	var order []string
	for _, c := range o.consuming {
		if consumerArrived(c) && !gangMember(c) {
			waiting[c.Name] = c
			order = append(order, c.Name)
		}
	}
	slices.Sort(order)
	var out []scheduling.PodOnNode
	covered := map[string]bool{}
	for _, h := range o.held {
		if waiting[h.Pod.Name] != nil && !covered[h.Pod.Name] {
			out = append(out, h)
			covered[h.Pod.Name] = true
		}
	}
	for _, s := range removed {
		if s.Spec.NodeName == "" {
			continue // an unbound seat held no room
		}
		i := slices.IndexFunc(order, func(name string) bool { return !covered[name] })
		if i < 0 {
			break
		}
		c := waiting[order[i]].DeepCopy()
		c.UID = s.UID
		covered[c.Name] = true
		out = append(out, scheduling.PodOnNode{Pod: c, Node: s.Spec.NodeName})
	}
	return out
}

// gangMember reports whether p is a berth gang's member: held by berth's gate, released by
// gang admission (pinned to a node), or labelled with its PodGroup.
func gangMember(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == berthv1alpha1.SchedulingGate }) ||
		p.Annotations[berthv1alpha1.PinnedNodeAnnotation] != "" || p.Labels[berthv1alpha1.PodGroupLabel] != ""
}

// anyArrived reports whether a consuming pod waits to be scheduled (consumerArrived).
func anyArrived(o observation) bool {
	return slices.ContainsFunc(o.consuming, consumerArrived)
}

// consumerArrived reports whether a consuming pod waits to be scheduled: not bound, not
// finished, and held by no scheduling gate but berth's own (a pod Kueue still gates is not
// admitted yet; one berth's gate holds needs the room to be admitted into).
func consumerArrived(p *corev1.Pod) bool {
	if p.Spec.NodeName != "" || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	for _, g := range p.Spec.SchedulingGates {
		if g.Name != berthv1alpha1.SchedulingGate {
			return false
		}
	}
	return true
}

// provisioning tends a request that is not provisioned yet: it starts an attempt (seats), waits
// for its seats to be on Ready nodes (Provisioned), or ends an attempt that ran out of time and
// retries after a backoff; a request unprovisioned for DefaultExpiration fails.
func provisioning(o observation, t timing, p *plan) {
	pr := o.pr
	class := pr.Spec.ProvisioningClassName
	if o.now.Sub(pr.CreationTimestamp.Time) >= t.expiration {
		p.cond(o, autoscalingv1.Failed, metav1.ConditionTrue, ReasonExpired, "ProvisioningRequest is expired")
		p.remove, p.reclaim = o.seats, true
		return
	}
	attempts := failedAttempts(pr)
	if len(o.seats) == 0 && len(o.dead) > 0 {
		// Every seat of the attempt died on its node (rejected by its kubelet, evicted, a spot
		// interruption): the attempt ended. Started again at once it had no backoff, and a
		// later timeout reclaimed none of this batch's nodes (older than the new seats).
		failAttempt(o, p, attempts, fmt.Sprintf("all %d seat(s) of the attempt failed on their nodes (rejected by the kubelet or evicted)", len(o.dead)))
		return
	}
	if len(o.seats) > 0 {
		attempt(o, t, p, attempts)
		return
	}
	if prov := meta.FindStatusCondition(pr.Status.Conditions, autoscalingv1.Provisioned); prov != nil && attempts > 0 {
		if wait := prov.LastTransitionTime.Add(retryBackoff(attempts)).Sub(o.now); wait > 0 {
			p.requeue = wait
			return
		}
	}
	switch {
	case o.fit.Fits():
		for i, pod := range o.pods {
			p.create = append(p.create, seatSpec{pod: pod, index: i, node: o.fit.Assignments[i].Node})
		}
	case class == autoscalingv1.ProvisioningClassCheckCapacity:
		msg := "Capacity is not found, berth will try to find it later: " + o.fit.Reason
		if pr.Spec.Parameters[noRetryParameter] == "true" {
			p.cond(o, autoscalingv1.Failed, metav1.ConditionTrue, ReasonCapacityIsNotFound, "berth could not find requested capacity: "+o.fit.Reason)
			return
		}
		p.cond(o, autoscalingv1.Provisioned, metav1.ConditionFalse, ReasonCapacityIsNotFound, msg)
		p.attempts = attempts + 1
		p.requeue = retryBackoff(attempts + 1)
		return
	default:
		// best-effort-atomic-scale-up: a seat for every pod, created together, so Karpenter sees
		// the whole request in one batch; those that fit existing nodes bind there.
		for i, pod := range o.pods {
			p.create = append(p.create, seatSpec{pod: pod, index: i})
		}
		p.event(corev1.EventTypeNormal, events.ReasonCapacityRequested,
			fmt.Sprintf("%d seat(s) ask Karpenter for the capacity of %d pods in one batch (%s)", len(o.pods), len(o.pods), o.fit.Reason))
	}
	p.requeue = time.Second
}

// attempt tends an attempt whose seats exist.
func attempt(o observation, t timing, p *plan, attempts int) {
	pr := o.pr
	onReady, pinnedOnly := 0, true
	started := o.seats[0].CreationTimestamp.Time
	for _, s := range o.dead { // the attempt began with its first seat, dead or alive
		if s.CreationTimestamp.Before(&metav1.Time{Time: started}) {
			started = s.CreationTimestamp.Time
		}
	}
	for _, s := range o.seats {
		if s.CreationTimestamp.Before(&metav1.Time{Time: started}) {
			started = s.CreationTimestamp.Time
		}
		if s.Spec.NodeName != "" && o.ready(s.Spec.NodeName) {
			onReady++
		}
		if s.Annotations[berthv1alpha1.PinnedNodeAnnotation] == "" {
			pinnedOnly = false
		}
	}
	want := len(o.pods)
	if onReady >= want && len(o.seats) >= want {
		reason, msg := ReasonCapacityIsProvisioned, fmt.Sprintf("Capacity is provisioned: %d pods' room on Ready nodes, booked for %s", want, t.booking)
		if pinnedOnly {
			reason, msg = ReasonCapacityIsFound, fmt.Sprintf("Capacity is found in the cluster: %d pods' room, booked for %s", want, t.booking)
		}
		p.cond(o, autoscalingv1.Provisioned, metav1.ConditionTrue, reason, msg)
		p.attempts = 0
		p.requeue = t.booking
		p.event(corev1.EventTypeNormal, events.ReasonCapacityBooked, msg)
		return
	}
	timeout := t.provisioning
	if pinnedOnly {
		timeout = checkCapacityBindTimeout
	}
	if left := started.Add(timeout).Sub(o.now); left > 0 {
		p.requeue = min(left, 5*time.Second)
		if missing := want - len(o.seats); !pinnedOnly && missing > 0 {
			// A seat preempted, deleted by someone else, dead or never created (a failed
			// Create) comes back within the attempt: without it the attempt could only time
			// out. (A pinned seat stood for room that is gone; the bind timeout ends it.)
			have := map[string]bool{}
			for _, s := range o.seats {
				have[s.Name] = true
			}
			for i, pod := range o.pods {
				if !have[seatName(pr, i)] && missing > 0 {
					p.create = append(p.create, seatSpec{pod: pod, index: i})
					missing--
				}
			}
		}
		return
	}
	// Out of time: the nodes launched for the seats that no pod uses and the seats go (nothing
	// half-provisioned stays held or billed) and the request waits.
	p.remove = o.seats
	failAttempt(o, p, attempts, fmt.Sprintf("%d of %d pods' room on Ready nodes within %s", onReady, want, timeout))
}

// failAttempt ends an attempt that did not provision (why): the NodeClaims launched for its
// seats (p.remove, and the dead ones decide adds) that no pod uses are reclaimed, and the
// request waits for its backoff — or fails, for check-capacity with noRetry.
func failAttempt(o observation, p *plan, attempts int, why string) {
	pr := o.pr
	p.reclaim = true
	msg := "Capacity is not found, berth will try to find it later: " + why
	if pr.Spec.ProvisioningClassName == autoscalingv1.ProvisioningClassCheckCapacity && pr.Spec.Parameters[noRetryParameter] == "true" {
		p.cond(o, autoscalingv1.Failed, metav1.ConditionTrue, ReasonCapacityIsNotFound, msg)
		return
	}
	p.cond(o, autoscalingv1.Provisioned, metav1.ConditionFalse, ReasonCapacityIsNotFound, msg)
	p.attempts = attempts + 1
	p.requeue = retryBackoff(attempts + 1)
	p.event(corev1.EventTypeWarning, events.ReasonCapacityNotProvisioned, msg)
}

// failedAttempts is the count berth keeps in the request's class details.
func failedAttempts(pr *autoscalingv1.ProvisioningRequest) int {
	n, err := strconv.Atoi(string(pr.Status.ProvisioningClassDetails[berthv1alpha1.ProvisioningAttemptsDetail]))
	if err != nil {
		return 0
	}
	return n
}

// retryBackoff is the wait after the n-th failed attempt: retryBase doubling, at most retryMax.
func retryBackoff(n int) time.Duration {
	d := retryBase
	for i := 1; i < n && d < retryMax; i++ {
		d *= 2
	}
	return min(d, retryMax)
}

// releaseOrder orders seats for release: unbound ones first (they hold nothing yet), then the
// bound ones, each group in name order.
func releaseOrder(seats []*corev1.Pod) []*corev1.Pod {
	var unbound, bound []*corev1.Pod
	for _, s := range seats {
		if s.Spec.NodeName == "" {
			unbound = append(unbound, s)
		} else {
			bound = append(bound, s)
		}
	}
	return append(unbound, bound...)
}
