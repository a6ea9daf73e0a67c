package admission

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/controllers/podgroup/status"
)

// holdPlan keeps what holds a released gang right: the key label (decideKey) and the node
// barrier, lifted (label added) on the nodes in up and taken off the nodes in down.
type holdPlan struct {
	key      keyPlan
	up, down []string
}

// barrierView is what decideHold reads of the nodes: the gang's barrier label (barrierKey), the
// nodes the cycle saw carrying it, and whether a node exists and carries it.
type barrierView struct {
	key      string
	labelled []string
	node     func(name string) (exists, labelled bool)
}

// decideHold decides how a released gang is held (pure): the key member (decideKey), and the
// node barrier, up on the nodes of members pinned behind it that are released but not bound yet
// (a restart may have stopped a release between removing the gates and lifting the barrier), and
// gone from every node once no member waits for it there and no member still gated is assigned
// there (a release in progress). Only those nodes are looked at: the ones members wait on, and
// the ones seen with the gang's barrier.
func decideHold(g *berthv1alpha1.PodGroup, members []*corev1.Pod, nodeOf map[string]string, bv barrierView) holdPlan {
	key := bv.key
	waiting, gated := map[string]bool{}, map[string]bool{}
	for _, m := range members {
		node, ok := nodeOf[m.Name]
		switch {
		case !ok:
		case gateIndex(m) >= 0:
			gated[node] = true
		case m.Spec.NodeName == "" && behindBarrier(m, key):
			waiting[node] = true
		}
	}
	p := holdPlan{key: decideKey(g, members, nodeOf)}
	for _, name := range slices.Sorted(maps.Keys(waiting)) {
		if exists, has := bv.node(name); exists && !has {
			p.up = append(p.up, name)
		}
	}
	for _, name := range bv.labelled {
		if !waiting[name] && !gated[name] {
			p.down = append(p.down, name)
		}
	}
	return p
}

// tendBarrier keeps what holds a released gang right: observe (the cycle's nodes), decide
// (decideHold), act (the key label and node labels written).
func (r *Reconciler) tendBarrier(ctx context.Context, cy *cycle, g *berthv1alpha1.PodGroup, members []*corev1.Pod, nodeOf map[string]string) error {
	key := barrierKey(g)
	p := decideHold(g, members, nodeOf, barrierView{key: key, labelled: cy.barrierNodes(key), node: func(name string) (bool, bool) {
		n, ok := cy.snap.Node(name)
		if !ok {
			return false, false
		}
		_, has := n.Node.Labels[key]
		return true, has
	}})
	return r.actHold(ctx, g, key, p)
}

// actHold writes a holdPlan; every write is tried, the errors joined.
func (r *Reconciler) actHold(ctx context.Context, g *berthv1alpha1.PodGroup, key string, p holdPlan) error {
	errs := []error{r.actKey(ctx, g, p.key)}
	for _, name := range p.up {
		errs = append(errs, r.setNodeLabel(ctx, name, key, true))
	}
	for _, name := range p.down {
		errs = append(errs, r.setNodeLabel(ctx, name, key, false))
	}
	return errors.Join(errs...)
}

// behindBarrier reports whether member m's pin requires the node barrier key.
func behindBarrier(m *corev1.Pod, key string) bool {
	a := m.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, e := range t.MatchExpressions {
			if e.Key == key {
				return true
			}
		}
	}
	return false
}

// sweepBarriers removes release barriers of PodGroups that no longer exist.
func (r *Reconciler) sweepBarriers(ctx context.Context, cy *cycle) error {
	return r.sweepNodeLabels(ctx, cy.nodes, berthv1alpha1.BarrierLabelPrefix, func(uid types.UID) bool {
		return cy.groupByUID(uid) != nil
	})
}

// sweepNodeLabels removes from every node the labels of prefix + a gang's UID whose gang is not
// live.
func (r *Reconciler) sweepNodeLabels(ctx context.Context, nodes []*corev1.Node, prefix string, live func(types.UID) bool) error {
	var errs []error
	for _, n := range nodes {
		for k := range n.Labels {
			if uid, ok := strings.CutPrefix(k, prefix); ok && !live(types.UID(uid)) {
				errs = append(errs, r.setNodeLabel(ctx, n.Name, k, false))
			}
		}
	}
	return errors.Join(errs...)
}

// reserveKey is the node label of one gang's reservation.
func reserveKey(g *berthv1alpha1.PodGroup) string {
	return berthv1alpha1.ReservationLabelPrefix + string(g.UID)
}

// reserve labels the nodes the gang's placeable members would use, before any seat exists,
// and marks them karpenter.sh/do-not-disrupt (unless the node carries that annotation already,
// set by someone else): an empty spare node the gang counts on is a consolidation candidate,
// and Karpenter deleting it while the seats' nodes boot made the gang ask for a second batch.
// The mark is written only on the node as the cycle saw it (its resourceVersion): a
// do-not-disrupt written since by someone else is theirs, and is never taken over. A node that
// changed since is labelled alone, and remark asks the caller to look again within a second,
// when the mark is written on the node as it is then. wrote reports whether it wrote a label
// the cycle did not see yet.
func (r *Reconciler) reserve(ctx context.Context, cy *cycle, g *berthv1alpha1.PodGroup, nodes []string) (wrote, remark bool, err error) {
	key := reserveKey(g)
	var errs []error
	for _, name := range nodes {
		if cy.reservedNow == nil {
			cy.reservedNow = map[string]bool{}
		}
		cy.reservedNow[name] = true
		ns, seen := cy.snap.Node(name)
		labelled, marked := false, !seen
		if seen {
			_, labelled = ns.Node.Labels[key]
			_, marked = ns.Node.Annotations[karpv1.DoNotDisruptAnnotationKey]
		}
		if labelled && marked {
			continue
		}
		if !marked {
			err := r.patchNode(ctx, name, ns.Node.ResourceVersion, map[string]any{key: "true"}, map[string]any{
				karpv1.DoNotDisruptAnnotationKey: "true", berthv1alpha1.ProtectedByAnnotation: berthv1alpha1.ProtectedByBerth})
			if err == nil {
				wrote = wrote || !labelled
				continue
			}
			if !apierrors.IsConflict(err) {
				errs = append(errs, fmt.Errorf("reserving node %s for gang %s/%s: %w", name, g.Namespace, g.Name, err))
				continue
			}
			remark = true
		}
		if labelled {
			continue
		}
		if err := r.patchNode(ctx, name, "", map[string]any{key: "true"}, nil); err != nil {
			errs = append(errs, fmt.Errorf("reserving node %s for gang %s/%s: %w", name, g.Namespace, g.Name, err))
			continue
		}
		wrote = true
	}
	return wrote, remark, errors.Join(errs...)
}

// sweepReservations removes reservation labels of gangs whose capacity request ended (admitted,
// withdrawn, timed out) or that are gone, and berth's do-not-disrupt mark once no gang's
// attempt counts on the node. The mark is removed only from the node as the cycle saw it (its
// resourceVersion): a node that changed since (another gang's label written a moment ago)
// answers Conflict, and is judged again a second later (sweep).
func (r *Reconciler) sweepReservations(ctx context.Context, cy *cycle) error {
	live := func(uid types.UID) (bool, bool) {
		g := cy.groupByUID(uid)
		if g == nil {
			return false, false
		}
		return reservationLive(g, cy.now), g.Status.Provisioning.Active()
	}
	var errs []error
	for _, n := range cy.nodes {
		sw := decideReservationSweep(n, live, cy.reservedNow[n.Name])
		if len(sw.drop) == 0 && !sw.unprotect {
			continue
		}
		if sw.unprotect {
			// First, on the node as read: a label written since (another gang reserving it)
			// answers Conflict, and the node is judged again.
			if err := r.patchNode(ctx, n.Name, n.ResourceVersion, nil, map[string]any{
				karpv1.DoNotDisruptAnnotationKey: nil, berthv1alpha1.ProtectedByAnnotation: nil}); err != nil {
				errs = append(errs, fmt.Errorf("taking berth's do-not-disrupt off node %s: %w", n.Name, err))
			}
		}
		if len(sw.drop) > 0 {
			labels := map[string]any{}
			for _, k := range sw.drop {
				labels[k] = nil
			}
			if err := r.patchNode(ctx, n.Name, "", labels, nil); err != nil {
				errs = append(errs, fmt.Errorf("sweeping reservations off node %s: %w", n.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// reservationSweep is what the sweep takes off one node: the reservation labels of gangs whose
// reservation ended, and (unprotect) berth's do-not-disrupt mark.
type reservationSweep struct {
	drop      []string
	unprotect bool
}

// decideReservationSweep decides (pure) what comes off node n: the reservation labels whose gang
// is not live (live's first result), and berth's do-not-disrupt mark unless a gang whose
// capacity request runs (live's second result) holds a label there or a gang reserved the node
// in this cycle (reservedNow), which n as the cycle began does not show. A reservation label
// outlives its attempt while the gang is about to start the next one, or waits without one (for
// members, a gang of another scheduler); the mark does not — an empty GPU node marked for a gang
// that stopped asking for capacity stayed out of consolidation for as long as the gang waited.
// A mark berth did not make (no scheduling.berth.dev/do-not-disrupt-by: berth) is never removed.
func decideReservationSweep(n *corev1.Node, live func(types.UID) (label, mark bool), reservedNow bool) reservationSweep {
	var sw reservationSweep
	held := reservedNow
	for k := range n.Labels {
		uid, ok := strings.CutPrefix(k, berthv1alpha1.ReservationLabelPrefix)
		if !ok {
			continue
		}
		label, mark := live(types.UID(uid))
		if !label {
			sw.drop = append(sw.drop, k)
		}
		held = held || (label && mark)
	}
	slices.Sort(sw.drop)
	sw.unprotect = !held && n.Annotations[berthv1alpha1.ProtectedByAnnotation] == berthv1alpha1.ProtectedByBerth
	return sw
}

// reservationLive reports whether gang g's reservation labels must stay: its attempt runs, or
// it is about to start one — a waiting gang whose labels are written a cycle before its seats
// and its attempt (startAttempt), which a sweep in between took off again, letting the seat
// onto the reserved room. An attempt that ended (admitted, withdrawn and backing off) and a
// gang timed out or backing off from its schedule timeout hold none.
func reservationLive(g *berthv1alpha1.PodGroup, now time.Time) bool {
	st := g.Status
	switch {
	case status.TimedOutForGood(g):
		return false
	case st.Provisioning.Active():
		return true
	case len(st.Assignments) > 0 || st.ScheduleRetryAt != nil:
		return false
	case st.Provisioning != nil && st.Provisioning.FinishedAt != nil:
		return st.Provisioning.RetryAt != nil && !now.Before(st.Provisioning.RetryAt.Time) // its next attempt may start
	}
	return true
}

// barrierNodes are the nodes the cycle saw carrying barrier label key, by name; the index of
// every barrier label is built on first use, in one pass over the nodes.
func (cy *cycle) barrierNodes(key string) []string {
	if cy.barriers == nil {
		cy.barriers = map[string][]string{}
		for _, n := range cy.nodes {
			for k := range n.Labels {
				if strings.HasPrefix(k, berthv1alpha1.BarrierLabelPrefix) {
					cy.barriers[k] = append(cy.barriers[k], n.Name)
				}
			}
		}
	}
	return cy.barriers[key]
}

// recordMarkedNodes exports how many of nodes carry berth's do-not-disrupt mark (every cycle,
// whether or not its sweeps run).
func recordMarkedNodes(nodes []*corev1.Node) {
	marked := 0
	for _, n := range nodes {
		if n.Annotations[berthv1alpha1.ProtectedByAnnotation] == berthv1alpha1.ProtectedByBerth {
			marked++
		}
	}
	markedNodes.Set(float64(marked))
}
