package admission

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/events"
	"github.com/berth-dev/berth/scheduling"
)

// Members that join an admitted generation one by one: replacements of lost members, and the
// extra members of an elastic gang.

// joiners are members that join an admitted generation one by one.
type joiners struct {
	// pods join in this order.
	pods []*corev1.Pod
	// prev is the assignment of the member each replacement takes the place of, by pod name
	// (absent: none known). The replacement goes on its node when it fits there, and its
	// assignment takes the predecessor's place in the status, which so stays one entry per
	// slot however many times a member is replaced.
	prev map[string]berthv1alpha1.MemberAssignment
	// withSeats: what does not fit gets capacity from Karpenter (replacements); without, it
	// waits until it fits (an elastic gang's extra members).
	withSeats bool
}

// admitIndividually places members of a running gang one by one (planJoins) and carries the
// plan out: each placed member is recorded in the assignments before it is released; a
// replacement that does not fit gets capacity from Karpenter (seats) when j.withSeats and
// provisioning is on; an extra member waits until it fits.
func (r *Reconciler) admitIndividually(ctx context.Context, cy *cycle, gv gangView, gen generation, j joiners) (time.Duration, error) {
	if len(j.pods) == 0 {
		return 0, nil
	}
	g := gv.group
	p, err := planJoins(cy, gv, r.domainOf(cy.snap, g, gen.assigned), r.avoidedNodes(gangKey(g), cy.now), j)
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, w := range p.waiting {
		placements.WithLabelValues(ResultNoFit).Inc()
		r.recorder.Warning(g, events.ReasonLateMemberWaiting, fmt.Sprintf("member %s, created after admission, does not fit yet: %s", w.pod.Name, w.reason))
	}
	for _, jn := range p.joins {
		errs = append(errs, r.commitOne(ctx, cy, gv, jn.pod, jn.node, jn.prev))
	}
	if len(p.waiting) == 0 || !j.withSeats || !r.opts.Provisioning.Enabled {
		return 0, errors.Join(errs...)
	}
	missing := make([]*corev1.Pod, len(p.waiting))
	for i, w := range p.waiting {
		// Its seats ask Karpenter for a new node, which is no node to avoid (and Karpenter
		// does not schedule pods with node fields).
		missing[i] = w.candidate
	}
	next, err := r.provision(ctx, cy, gv, scheduling.Gang{Members: missing}, fmt.Sprintf("%d replacement member(s) do not fit", len(missing)))
	return next, errors.Join(append(errs, err)...)
}

// joinPlan is where members joining an admitted generation go.
type joinPlan struct {
	// joins are the members placed, in order.
	joins []join
	// waiting are the members with no place yet.
	waiting []waitingJoiner
}

// join is one member placed on node, in place of the assignment prev (zero: none).
type join struct {
	pod  *corev1.Pod
	node string
	prev berthv1alpha1.MemberAssignment
}

// waitingJoiner is a member with no place: candidate is the member as placement saw it (in the
// gang's domain), reason why it does not fit.
type waitingJoiner struct {
	pod, candidate *corev1.Pod
	reason         string
}

// planJoins places j's members one by one on the cycle's snapshot (nothing is written): each in
// the gang's topology domain, off the nodes a member of the gang was stranded on lately (avoid)
// and, for a replacement, on its predecessor's node when it fits there. Each placement is kept
// in the cycle's snapshot, so the gangs after this one see it.
func planJoins(cy *cycle, gv gangView, domain string, avoid map[string]bool, j joiners) (joinPlan, error) {
	g := gv.group
	free := cy.snap.Without(cy.counted(gv.holding())) // the gang's seats (and booked ones) hold capacity for its replacements
	var p joinPlan
	for _, m := range j.pods {
		candidate := inDomain(m, g, domain)
		prev := j.prev[m.Name].Node
		if avoid[prev] {
			prev = "" // its predecessor was stranded there
		}
		res := placeOne(free, avoiding(candidate, avoid), prev)
		if !res.Fits() {
			p.waiting = append(p.waiting, waitingJoiner{pod: m, candidate: candidate, reason: res.Reason})
			continue
		}
		if free != cy.snap { // a copy without the seats: it counts the member too
			if err := free.Assume([]*corev1.Pod{candidate}, res); err != nil {
				return joinPlan{}, err
			}
		}
		if err := cy.assume([]*corev1.Pod{candidate}, res); err != nil {
			return joinPlan{}, err
		}
		p.joins = append(p.joins, join{pod: m, node: res.Assignments[0].Node, prev: j.prev[m.Name]})
	}
	return p, nil
}

// commitOne records one member joining the admitted generation, in place of the assignment of
// the member it replaces (prev; zero for none), and releases it.
func (r *Reconciler) commitOne(ctx context.Context, cy *cycle, gv gangView, p *corev1.Pod, node string, prev berthv1alpha1.MemberAssignment) error {
	g := gv.group
	now := r.clock.Now()
	var claims []string
	if g.Status.Provisioning.Active() {
		claims = r.nodeClaimsOf(ctx, cy, []string{node})
	}
	if err := r.fence(ctx); err != nil {
		return fmt.Errorf("not recording member %s: %w", p.Name, err)
	}
	if err := r.updateStatus(ctx, g, func(st *berthv1alpha1.PodGroupStatus) {
		st.Assignments = append(assignmentsWithout(withoutAssignment(st.Assignments, prev), p.Name), berthv1alpha1.MemberAssignment{Pod: p.Name, UID: p.UID, Node: node})
		st.Nodes = appendNode(st.Nodes, node)
		finishProvisioning(st, g, metav1.NewTime(now), claims)
	}); err != nil {
		return fmt.Errorf("recording member %s: %w", p.Name, err)
	}
	r.assume(g, g.Status.Assignments)
	placements.WithLabelValues(ResultAdmitted).Inc()
	if err := r.release(ctx, g, []*corev1.Pod{p}, gv.keyHolders(), map[string]string{p.Name: node}, nil); err != nil {
		return err
	}
	r.recorder.Normal(g, events.ReasonLateMemberAdmitted, fmt.Sprintf("member %s, created after admission, released onto %s", p.Name, node))
	return nil
}

// domainOf is the topology domain of the gang's admitted generation, or "".
func (r *Reconciler) domainOf(snap *scheduling.Snapshot, g *berthv1alpha1.PodGroup, assigned []berthv1alpha1.MemberAssignment) string {
	if g.Spec.Topology == nil {
		return ""
	}
	for _, a := range assigned {
		if n, ok := snap.Node(a.Node); ok {
			if d := n.Node.Labels[g.Spec.Topology.RequiredKey]; d != "" {
				return d
			}
		}
	}
	return ""
}

// inDomain is the member as placement must see it: confined to the gang's domain.
func inDomain(p *corev1.Pod, g *berthv1alpha1.PodGroup, domain string) *corev1.Pod {
	if domain == "" {
		return p
	}
	c := p.DeepCopy()
	if c.Spec.NodeSelector == nil {
		c.Spec.NodeSelector = map[string]string{}
	}
	c.Spec.NodeSelector[g.Spec.Topology.RequiredKey] = domain
	return c
}

// placeOne places one member, on node first when it is given and the member fits there.
func placeOne(snap *scheduling.Snapshot, p *corev1.Pod, node string) scheduling.Result {
	if node != "" {
		if _, ok := snap.Node(node); ok {
			on := p.DeepCopy()
			if on.Spec.NodeSelector == nil {
				on.Spec.NodeSelector = map[string]string{}
			}
			on.Spec.NodeSelector[corev1.LabelHostname] = hostnameOf(snap, node)
			if res := scheduling.Place(snap, scheduling.Gang{Members: []*corev1.Pod{on}}); res.Fits() {
				return res
			}
		}
	}
	return scheduling.Place(snap, scheduling.Gang{Members: []*corev1.Pod{p}})
}

// hostnameOf is a node's hostname label (its name when it has none).
func hostnameOf(snap *scheduling.Snapshot, node string) string {
	if n, ok := snap.Node(node); ok {
		if h := n.Node.Labels[corev1.LabelHostname]; h != "" {
			return h
		}
	}
	return node
}

// assignmentsWithout drops a pod's assignment.
func assignmentsWithout(as []berthv1alpha1.MemberAssignment, pod string) []berthv1alpha1.MemberAssignment {
	out := make([]berthv1alpha1.MemberAssignment, 0, len(as))
	for _, a := range as {
		if a.Pod != pod {
			out = append(out, a)
		}
	}
	return out
}

// withoutAssignment is as without the assignment a (matched on pod and UID); a zero a removes
// nothing.
func withoutAssignment(as []berthv1alpha1.MemberAssignment, a berthv1alpha1.MemberAssignment) []berthv1alpha1.MemberAssignment {
	if a.Pod == "" {
		return as
	}
	out := make([]berthv1alpha1.MemberAssignment, 0, len(as))
	for _, x := range as {
		if x.Pod != a.Pod || x.UID != a.UID {
			out = append(out, x)
		}
	}
	return out
}

// appendNode adds a node to a sorted set of node names.
func appendNode(nodes []string, node string) []string {
	for _, n := range nodes {
		if n == node {
			return nodes
		}
	}
	out := append(append([]string(nil), nodes...), node)
	sort.Strings(out)
	return out
}

// typesUID converts a UID string.
func typesUID(s string) types.UID { return types.UID(s) }
