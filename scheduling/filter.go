package scheduling

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// rejections counts why nodes were ruled out, for messages like kube-scheduler's
// "0/12 nodes are available: 4 had untolerated taint {nvidia.com/gpu}, 8 didn't match ...".
type rejections map[string]int

func (r rejections) add(reason string) { r[reason]++ }

func (r rejections) String() string {
	reasons := make([]string, 0, len(r))
	for k := range r {
		reasons = append(reasons, k)
	}
	sort.Slice(reasons, func(i, j int) bool {
		if r[reasons[i]] != r[reasons[j]] {
			return r[reasons[i]] > r[reasons[j]]
		}
		return reasons[i] < reasons[j]
	})
	parts := make([]string, 0, len(reasons))
	for _, k := range reasons {
		parts = append(parts, fmt.Sprintf("%d %s", r[k], k))
	}
	return strings.Join(parts, ", ")
}

// logger is what the toleration helpers log to (they do not, for valid tolerations).
var logger = klog.Background()

var unschedulableTaint = corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}

func scheduleOrExecute(t *corev1.Taint) bool {
	return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
}

// staticReject says why a member can never go on a node regardless of what runs there, or "".
// vols are the member's volume topology selectors (nil: none).
func staticReject(n *NodeState, p *corev1.Pod, aff nodeaffinity.RequiredNodeAffinity, vols []*nodeaffinity.LazyErrorNodeSelector) string {
	if n.Unavailable != "" {
		return "unavailable (" + n.Unavailable + ")"
	}
	if n.Node.Spec.Unschedulable && !corev1helpers.TolerationsTolerateTaint(logger, p.Spec.Tolerations, &unschedulableTaint, false) {
		return "were unschedulable"
	}
	for i := range n.Node.Spec.Taints {
		t := &n.Node.Spec.Taints[i]
		if scheduleOrExecute(t) && !corev1helpers.TolerationsTolerateTaint(logger, p.Spec.Tolerations, t, false) {
			return fmt.Sprintf("had untolerated taint {%s: %s}", t.Key, t.Value)
		}
	}
	if ok, err := aff.Match(n.Node); err != nil || !ok {
		return "didn't match the member's node selector/affinity"
	}
	if _, ok := berthv1alpha1.ReleaseGroup(p); ok {
		if _, has := n.Node.Labels[berthv1alpha1.ReleaseTopologyKey]; !has {
			return "didn't have the label " + berthv1alpha1.ReleaseTopologyKey + " (berth's release term needs it)"
		}
	}
	if !volumesMatch(vols, n.Node) {
		return "didn't match the node affinity of the member's volumes"
	}
	return ""
}

// unsupported names what kube-scheduler would check for this pod that placement does not
// model, or "" when placement models everything that matters. Resource claims are modelled
// when the snapshot has the cluster's dynamic resources (SetDynamicResources).
func (s *Snapshot) unsupported(p *corev1.Pod) string {
	if len(p.Spec.ResourceClaims) > 0 && s.dra == nil {
		return "uses dynamic resource claims (spec.resourceClaims) and placement was not given the cluster's ResourceSlices"
	}
	if p.Spec.NodeName != "" {
		return "already names a node (spec.nodeName)"
	}
	if a := p.Spec.Affinity; a != nil {
		var terms []corev1.PodAffinityTerm
		if a.PodAffinity != nil {
			terms = append(terms, a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution...)
		}
		if a.PodAntiAffinity != nil {
			terms = append(terms, a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution...)
		}
		for _, t := range terms {
			if t.NamespaceSelector != nil && (len(t.NamespaceSelector.MatchLabels) > 0 || len(t.NamespaceSelector.MatchExpressions) > 0) {
				return "uses a namespaceSelector in required pod (anti-)affinity"
			}
		}
	}
	return ""
}
