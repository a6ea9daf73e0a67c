package rigtest

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// CountBound lists the pods in ns and returns how many are bound and, when some are not, a
// report of each unbound one: its gates, pin, key label, release term, phase and what
// kube-scheduler last said of it (PodScheduled), and the key holders of its gang. A wait for
// "every member bound" that times out says why, not only how many.
func CountBound(ctx context.Context, c client.Reader, ns string) (bound int, report string, err error) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		return 0, "", fmt.Errorf("listing pods in %s: %w", ns, err)
	}
	keys := map[string][]string{}
	var unbound []*corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if g := p.Labels[berthv1alpha1.ReleaseLabel]; g != "" {
			state := "unbound"
			if p.Spec.NodeName != "" {
				state = "on " + p.Spec.NodeName
			}
			if p.DeletionTimestamp != nil {
				state += ", terminating"
			}
			keys[g] = append(keys[g], fmt.Sprintf("%s (%s)", p.Name, state))
		}
		if p.Spec.NodeName != "" {
			bound++
			continue
		}
		unbound = append(unbound, p)
	}
	sort.Slice(unbound, func(i, j int) bool { return unbound[i].Name < unbound[j].Name })
	var lines []string
	for i, p := range unbound {
		if i == 20 {
			lines = append(lines, fmt.Sprintf("… and %d more", len(unbound)-i))
			break
		}
		lines = append(lines, describeUnbound(p, keys))
	}
	return bound, strings.Join(lines, "; "), nil
}

// describeUnbound is one unbound pod's line in CountBound's report.
func describeUnbound(p *corev1.Pod, keys map[string][]string) string {
	var gates []string
	for _, g := range p.Spec.SchedulingGates {
		gates = append(gates, g.Name)
	}
	gang := p.Labels[berthv1alpha1.PodGroupLabel]
	term, hasTerm := berthv1alpha1.ReleaseGroup(p)
	scheduled := "no PodScheduled condition"
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			scheduled = fmt.Sprintf("PodScheduled=%s %s %q at %s", c.Status, c.Reason, c.Message, c.LastTransitionTime.UTC().Format("15:04:05"))
		}
	}
	pin := p.Annotations[berthv1alpha1.PinnedNodeAnnotation]
	return fmt.Sprintf("%s [gang %q, gates %v, pinned %q, key label %q, release term %v (%q), phase %s, %s, gang's key holders %v]",
		p.Name, gang, gates, pin, p.Labels[berthv1alpha1.ReleaseLabel], hasTerm, term, p.Status.Phase, scheduled, keys[gang])
}
