package admission

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/scheduling"
)

// tendBarrier keeps a gang's release barrier right: up on the nodes of members that are
// released but not bound yet (a restart may have stopped a release between removing the gates
// and lifting the barrier), and gone from every node once no member waits for it.
func (r *Reconciler) tendBarrier(ctx context.Context, snap *scheduling.Snapshot, g *berthv1alpha1.PodGroup, members []*corev1.Pod, nodeOf map[string]string) error {
	key := barrierKey(g)
	waiting := map[string]bool{}
	for _, m := range members {
		if node, ok := nodeOf[m.Name]; ok && m.Spec.NodeName == "" && gateIndex(m) < 0 {
			waiting[node] = true
		}
	}
	for _, n := range snap.Nodes() {
		_, has := n.Node.Labels[key]
		switch {
		case waiting[n.Name()] && !has:
			if err := r.setNodeLabel(ctx, n.Name(), key, true); err != nil {
				return err
			}
		case !waiting[n.Name()] && has && !r.gatedAssigned(members, nodeOf, n.Name()):
			if err := r.setNodeLabel(ctx, n.Name(), key, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// gatedAssigned reports whether a still-gated member is assigned to node (its release is in
// progress in this very cycle, so the barrier stays).
func (r *Reconciler) gatedAssigned(members []*corev1.Pod, nodeOf map[string]string, node string) bool {
	for _, m := range members {
		if nodeOf[m.Name] == node && gateIndex(m) >= 0 {
			return true
		}
	}
	return false
}

// sweepBarriers removes release barriers of PodGroups that no longer exist.
func (r *Reconciler) sweepBarriers(ctx context.Context, nodes []*corev1.Node, gs []*berthv1alpha1.PodGroup) error {
	live := map[string]bool{}
	for _, g := range gs {
		live[barrierKey(g)] = true
	}
	return r.sweepNodeLabels(ctx, nodes, berthv1alpha1.BarrierLabelPrefix, live)
}

// sweepNodeLabels removes from every node the labels starting with prefix that are not live.
func (r *Reconciler) sweepNodeLabels(ctx context.Context, nodes []*corev1.Node, prefix string, live map[string]bool) error {
	for _, n := range nodes {
		for k := range n.Labels {
			if strings.HasPrefix(k, prefix) && !live[k] {
				if err := r.setNodeLabel(ctx, n.Name, k, false); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
