package admission

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/events"
	"github.com/berth-dev/berth/scheduling"
)

// admitLate places members created after the gang was admitted (a replacement for a failed or
// evicted member, say) one by one, in the gang's topology domain when it has one. Each is
// recorded in the assignments before it is released. A late member that does not fit stays
// gated and the Scheduled condition says so.
func (r *Reconciler) admitLate(ctx context.Context, snap *scheduling.Snapshot, g *berthv1alpha1.PodGroup, late []*corev1.Pod, assigned []berthv1alpha1.MemberAssignment) error {
	domain := ""
	if g.Spec.Topology != nil {
		for _, a := range assigned {
			if n, ok := snap.Node(a.Node); ok {
				domain = n.Node.Labels[g.Spec.Topology.RequiredKey]
				break
			}
		}
	}
	for _, p := range late {
		candidate := p
		if domain != "" {
			candidate = p.DeepCopy()
			if candidate.Spec.NodeSelector == nil {
				candidate.Spec.NodeSelector = map[string]string{}
			}
			candidate.Spec.NodeSelector[g.Spec.Topology.RequiredKey] = domain
		}
		res := scheduling.Place(snap, scheduling.Gang{Members: []*corev1.Pod{candidate}})
		if !res.Fits() {
			placements.WithLabelValues(ResultNoFit).Inc()
			r.recorder.Warning(g, events.ReasonLateMemberWaiting, fmt.Sprintf("member %s, created after admission, does not fit yet: %s", p.Name, res.Reason))
			continue
		}
		if err := snap.Assume([]*corev1.Pod{candidate}, res); err != nil {
			return err
		}
		var cur berthv1alpha1.PodGroup
		if err := r.client.Get(ctx, client.ObjectKeyFromObject(g), &cur); err != nil {
			return fmt.Errorf("reading PodGroup: %w", err)
		}
		node := res.Assignments[0].Node
		cur.Status.Assignments = append(assignmentsWithout(cur.Status.Assignments, p.Name), berthv1alpha1.MemberAssignment{Pod: p.Name, Node: node})
		if err := r.client.Status().Update(ctx, &cur); err != nil {
			return fmt.Errorf("recording late member %s: %w", p.Name, err)
		}
		r.assume(g, cur.Status.Assignments)
		placements.WithLabelValues(ResultAdmitted).Inc()
		if err := r.release(ctx, g, []*corev1.Pod{p}, map[string]string{p.Name: node}, nil); err != nil {
			return err
		}
		r.recorder.Normal(g, events.ReasonLateMemberAdmitted, fmt.Sprintf("member %s, created after admission, released onto %s", p.Name, node))
	}
	return nil
}

func assignmentsWithout(as []berthv1alpha1.MemberAssignment, pod string) []berthv1alpha1.MemberAssignment {
	out := make([]berthv1alpha1.MemberAssignment, 0, len(as))
	for _, a := range as {
		if a.Pod != pod {
			out = append(out, a)
		}
	}
	return out
}
