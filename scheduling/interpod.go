package scheduling

import (
	"math"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// podView is the pods on each node during one placement attempt: what the snapshot holds plus
// the gang's members placed so far.
type podView struct {
	nodes []*NodeState
	extra map[*NodeState][]*corev1.Pod
}

func (v *podView) pods(n *NodeState) []*corev1.Pod {
	if e := v.extra[n]; len(e) > 0 {
		return append(append([]*corev1.Pod(nil), n.pods...), e...)
	}
	return n.pods
}

// compiledTerm is a pod (anti-)affinity term ready to match pods.
type compiledTerm struct {
	sel        labels.Selector
	namespaces map[string]bool // nil: every namespace
	key        string
}

func (t compiledTerm) matches(p *corev1.Pod) bool {
	if t.namespaces != nil && !t.namespaces[p.Namespace] {
		return false
	}
	return t.sel.Matches(labels.Set(p.Labels))
}

func compileTerm(owner *corev1.Pod, t corev1.PodAffinityTerm) compiledTerm {
	sel, err := metav1.LabelSelectorAsSelector(t.LabelSelector)
	if err != nil || t.LabelSelector == nil {
		sel = labels.Nothing()
	}
	sel = withLabelKeys(sel, owner, t.MatchLabelKeys, selection.In)
	sel = withLabelKeys(sel, owner, t.MismatchLabelKeys, selection.NotIn)
	ct := compiledTerm{sel: sel, key: t.TopologyKey}
	switch {
	case t.NamespaceSelector != nil && len(t.NamespaceSelector.MatchLabels) == 0 && len(t.NamespaceSelector.MatchExpressions) == 0:
		// An empty namespaceSelector selects every namespace.
	case len(t.Namespaces) > 0:
		ct.namespaces = map[string]bool{}
		for _, ns := range t.Namespaces {
			ct.namespaces[ns] = true
		}
	default:
		ct.namespaces = map[string]bool{owner.Namespace: true}
	}
	return ct
}

func withLabelKeys(sel labels.Selector, owner *corev1.Pod, keys []string, op selection.Operator) labels.Selector {
	for _, k := range keys {
		v, ok := owner.Labels[k]
		if !ok {
			continue
		}
		if r, err := labels.NewRequirement(k, op, []string{v}); err == nil {
			sel = sel.Add(*r)
		}
	}
	return sel
}

func requiredAffinity(p *corev1.Pod) []corev1.PodAffinityTerm {
	if p.Spec.Affinity == nil || p.Spec.Affinity.PodAffinity == nil {
		return nil
	}
	return p.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution
}

func requiredAntiAffinity(p *corev1.Pod) []corev1.PodAffinityTerm {
	if p.Spec.Affinity == nil || p.Spec.Affinity.PodAntiAffinity == nil {
		return nil
	}
	return p.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
}

func hardSpread(p *corev1.Pod) []corev1.TopologySpreadConstraint {
	var out []corev1.TopologySpreadConstraint
	for _, c := range p.Spec.TopologySpreadConstraints {
		if c.WhenUnsatisfiable == corev1.DoNotSchedule {
			out = append(out, c)
		}
	}
	return out
}

// hasInterPodRules reports whether placing p depends on which pods run where.
func hasInterPodRules(p *corev1.Pod) bool {
	return len(requiredAffinity(p)) > 0 || len(requiredAntiAffinity(p)) > 0 || len(hardSpread(p)) > 0
}

// sameDomain reports whether a and b share a value of key (both must have it).
func sameDomain(a, b *NodeState, key string) bool {
	va, ok := a.Node.Labels[key]
	if !ok {
		return false
	}
	vb, ok := b.Node.Labels[key]
	return ok && va == vb
}

// affinityOK: every required pod-affinity term of p is met by some pod in n's domain of that
// term's key — or no pod anywhere matches the term and p matches it itself (the first of a
// group that wants to be together), as in kube-scheduler.
func affinityOK(p *corev1.Pod, n *NodeState, v *podView) bool {
	for _, raw := range requiredAffinity(p) {
		t := compileTerm(p, raw)
		if _, ok := n.Node.Labels[t.key]; !ok {
			return false
		}
		inDomain, anywhere := false, false
		for _, m := range v.nodes {
			for _, q := range v.pods(m) {
				if !t.matches(q) {
					continue
				}
				anywhere = true
				if sameDomain(m, n, t.key) {
					inDomain = true
				}
			}
		}
		if !inDomain && (anywhere || !t.matches(p)) {
			return false
		}
	}
	return true
}

// antiAffinityOK: no pod in n's domain matches one of p's anti-affinity terms, and p matches no
// anti-affinity term of a pod in that pod's domain (the rule is symmetric).
func antiAffinityOK(p *corev1.Pod, n *NodeState, v *podView) bool {
	var own []compiledTerm
	for _, raw := range requiredAntiAffinity(p) {
		own = append(own, compileTerm(p, raw))
	}
	for _, m := range v.nodes {
		for _, q := range v.pods(m) {
			for _, t := range own {
				if sameDomain(m, n, t.key) && t.matches(q) {
					return false
				}
			}
			for _, raw := range requiredAntiAffinity(q) {
				t := compileTerm(q, raw)
				if sameDomain(m, n, t.key) && t.matches(p) {
					return false
				}
			}
		}
	}
	return true
}

// spreadOK checks p's DoNotSchedule topology spread constraints for node n: the skew after
// placing p in n's domain must stay within maxSkew. Domains are counted over nodes that pass
// p's node affinity (nodeAffinityPolicy Honor, the default) and, with nodeTaintsPolicy Honor,
// its tolerations.
func spreadOK(p *corev1.Pod, n *NodeState, v *podView, aff nodeaffinity.RequiredNodeAffinity) bool {
	for _, c := range hardSpread(p) {
		dom, ok := n.Node.Labels[c.TopologyKey]
		if !ok {
			return false
		}
		sel, err := metav1.LabelSelectorAsSelector(c.LabelSelector)
		if err != nil || c.LabelSelector == nil {
			sel = labels.Nothing()
		}
		sel = withLabelKeys(sel, p, c.MatchLabelKeys, selection.In)
		honorAffinity := c.NodeAffinityPolicy == nil || *c.NodeAffinityPolicy == corev1.NodeInclusionPolicyHonor
		honorTaints := c.NodeTaintsPolicy != nil && *c.NodeTaintsPolicy == corev1.NodeInclusionPolicyHonor
		counts := map[string]int{}
		for _, m := range v.nodes {
			d, ok := m.Node.Labels[c.TopologyKey]
			if !ok {
				continue
			}
			if honorAffinity {
				if match, err := aff.Match(m.Node); err != nil || !match {
					continue
				}
			}
			if honorTaints && staticReject(m, p, aff, nil) != "" {
				continue
			}
			if _, seen := counts[d]; !seen {
				counts[d] = 0
			}
			for _, q := range v.pods(m) {
				if q.Namespace == p.Namespace && sel.Matches(labels.Set(q.Labels)) {
					counts[d]++
				}
			}
		}
		minCount := math.MaxInt
		for _, cnt := range counts {
			minCount = min(minCount, cnt)
		}
		if c.MinDomains != nil && int32(len(counts)) < *c.MinDomains {
			minCount = 0
		}
		if minCount == math.MaxInt {
			minCount = 0
		}
		self := 0
		if sel.Matches(labels.Set(p.Labels)) {
			self = 1
		}
		if counts[dom]+self-minCount > int(c.MaxSkew) {
			return false
		}
	}
	return true
}
