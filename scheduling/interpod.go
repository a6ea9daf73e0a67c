package scheduling

import (
	"maps"
	"math"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// podView is the pods on each node during one placement attempt: what the snapshot holds plus
// the gang's members placed so far.
type podView struct {
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

// requiredAffinity is p's required pod-affinity terms, less berth's release term: that one is met
// by the gang's own key member at release, so placement only needs its topology key on the
// node (staticReject).
func requiredAffinity(p *corev1.Pod) []corev1.PodAffinityTerm {
	if p.Spec.Affinity == nil || p.Spec.Affinity.PodAffinity == nil {
		return nil
	}
	terms := p.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	for i := range terms {
		if berthv1alpha1.IsReleaseTerm(&terms[i]) {
			return slices.DeleteFunc(slices.Clone(terms), func(t corev1.PodAffinityTerm) bool { return berthv1alpha1.IsReleaseTerm(&t) })
		}
	}
	return terms
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

// antiPod is a pod in the snapshot with required anti-affinity terms, compiled once: the pods
// whose rules can repel a new member (kube-scheduler's PodsWithRequiredAntiAffinity).
type antiPod struct {
	pod   *corev1.Pod
	node  int
	terms []compiledTerm
}

func compileAnti(p *corev1.Pod) []compiledTerm {
	raw := requiredAntiAffinity(p)
	if len(raw) == 0 {
		return nil
	}
	out := make([]compiledTerm, len(raw))
	for i, t := range raw {
		out[i] = compileTerm(p, t)
	}
	return out
}

// interPod is what one class's inter-pod rules need to know about where pods run, counted per
// topology domain once per class and attempt (as kube-scheduler's InterPodAffinity and
// PodTopologySpread PreFilter do), then kept up to date as members are placed: checking a node
// is a few map lookups instead of a scan of every pod in the cluster.
type interPod struct {
	affinity []termCount // the class's required pod-affinity terms
	anti     []termCount // its required anti-affinity terms
	// repelled counts, by topology key and domain, pods whose required anti-affinity term
	// matches the class's members (the rule is symmetric).
	repelled map[string]map[string]int
	spread   []*spreadCount
}

// termCount is one (anti-)affinity term of the class with the pods that match it per domain of
// its key, and anywhere (pods on nodes without the key included).
type termCount struct {
	term     compiledTerm
	self     bool // the class's members match the term themselves
	byDomain map[string]int
	anywhere int
}

// spreadCount is one DoNotSchedule topology spread constraint of the class with the matching
// pods per domain over the nodes the constraint counts (nodeAffinityPolicy and nodeTaintsPolicy).
type spreadCount struct {
	key      string
	sel      labels.Selector
	ns       string
	maxSkew  int
	self     int // 1 when the class's members match the selector
	eligible []bool
	byDomain map[string]int
	// minCount is the smallest count over the domains (0 when there are fewer than minDomains),
	// atMin how many domains have it: counts only grow, so it is recomputed only when the last
	// domain at the minimum grows.
	minCount, atMin int
	tooFew          bool
}

// interPodFor counts, for class c, the pods in the snapshot and those placed earlier in this
// attempt against c's rules and the anti-affinity rules of every pod that has any. nil when
// nothing constrains c's members by where pods run.
func (a *attempt) interPodFor(c *class) *interPod {
	rep := c.rep
	ip := &interPod{repelled: map[string]map[string]int{}}
	for _, raw := range requiredAffinity(rep) {
		t := compileTerm(rep, raw)
		ip.affinity = append(ip.affinity, termCount{term: t, self: t.matches(rep), byDomain: map[string]int{}})
	}
	for _, raw := range requiredAntiAffinity(rep) {
		t := compileTerm(rep, raw)
		ip.anti = append(ip.anti, termCount{term: t, self: t.matches(rep), byDomain: map[string]int{}})
	}
	for _, con := range hardSpread(rep) {
		ip.spread = append(ip.spread, a.s.newSpreadCount(rep, con, c.aff))
	}
	for _, ap := range a.s.antiPods {
		ip.repel(a.s.nodes[ap.node], ap.terms, rep)
	}
	if len(ip.affinity)+len(ip.anti)+len(ip.spread) > 0 {
		for _, n := range a.s.nodes {
			for _, q := range n.pods {
				ip.count(n, q)
			}
		}
	}
	for n, ps := range a.view.extra {
		for _, q := range ps {
			ip.count(n, q)
			ip.repel(n, compileAnti(q), rep)
		}
	}
	for _, sc := range ip.spread {
		sc.settle()
	}
	if len(ip.affinity)+len(ip.anti)+len(ip.spread)+len(ip.repelled) == 0 {
		return nil
	}
	return ip
}

// repel records the domains of node n that a pod there with anti-affinity terms closes to p.
func (ip *interPod) repel(n *NodeState, terms []compiledTerm, p *corev1.Pod) {
	for _, t := range terms {
		v, ok := n.Node.Labels[t.key]
		if !ok || !t.matches(p) {
			continue
		}
		byDomain := ip.repelled[t.key]
		if byDomain == nil {
			byDomain = map[string]int{}
			ip.repelled[t.key] = byDomain
		}
		byDomain[v]++
	}
}

// count adds pod q on node n to the class's own terms and spread constraints.
func (ip *interPod) count(n *NodeState, q *corev1.Pod) {
	for i := range ip.affinity {
		t := &ip.affinity[i]
		if t.term.matches(q) {
			t.anywhere++
			if v, ok := n.Node.Labels[t.term.key]; ok {
				t.byDomain[v]++
			}
		}
	}
	for i := range ip.anti {
		t := &ip.anti[i]
		if v, ok := n.Node.Labels[t.term.key]; ok && t.term.matches(q) {
			t.byDomain[v]++
		}
	}
	for _, sc := range ip.spread {
		if v, ok := n.Node.Labels[sc.key]; ok && sc.eligible[n.idx] && q.Namespace == sc.ns && sc.sel.Matches(labels.Set(q.Labels)) {
			sc.byDomain[v]++
		}
	}
}

// placed counts a member of the class just placed on n.
func (ip *interPod) placed(n *NodeState) {
	if ip == nil {
		return
	}
	for i := range ip.affinity {
		if t := &ip.affinity[i]; t.self {
			t.anywhere++
			if v, ok := n.Node.Labels[t.term.key]; ok {
				t.byDomain[v]++
			}
		}
	}
	for i := range ip.anti {
		if t := &ip.anti[i]; t.self {
			if v, ok := n.Node.Labels[t.term.key]; ok {
				t.byDomain[v]++
			}
		}
	}
	for _, sc := range ip.spread {
		if v, ok := n.Node.Labels[sc.key]; ok && sc.self == 1 && sc.eligible[n.idx] {
			sc.inc(v)
		}
	}
}

// allows reports whether a member of the class may go on n: every affinity term is met in n's
// domain (or, for the first of a group that wants to be together, nowhere yet), no anti-affinity
// term of the class or of a pod in n's domains is violated, and every spread constraint's skew
// stays within maxSkew.
func (ip *interPod) allows(n *NodeState) bool {
	if ip == nil {
		return true
	}
	labels := n.Node.Labels
	for i := range ip.affinity {
		t := &ip.affinity[i]
		v, ok := labels[t.term.key]
		if !ok {
			return false
		}
		if t.byDomain[v] == 0 && (t.anywhere > 0 || !t.self) {
			return false
		}
	}
	for i := range ip.anti {
		t := &ip.anti[i]
		if v, ok := labels[t.term.key]; ok && t.byDomain[v] > 0 {
			return false
		}
	}
	for key, byDomain := range ip.repelled {
		if v, ok := labels[key]; ok && byDomain[v] > 0 {
			return false
		}
	}
	for _, sc := range ip.spread {
		v, ok := labels[sc.key]
		if !ok || sc.byDomain[v]+sc.self-sc.min() > sc.maxSkew {
			return false
		}
	}
	return true
}

// seedKey is the domains of n that decide the class's affinity terms: nodes with the same key
// are equivalent first choices for a self-affine group. "" when the class has no affinity terms.
func (ip *interPod) seedKey(n *NodeState) string {
	if ip == nil || len(ip.affinity) == 0 {
		return ""
	}
	var b strings.Builder
	for i := range ip.affinity {
		b.WriteString(n.Node.Labels[ip.affinity[i].term.key])
		b.WriteByte(0)
	}
	return b.String()
}

// clone copies the counts, for a retry of the same class.
func (ip *interPod) clone() *interPod {
	if ip == nil {
		return nil
	}
	// repelled does not change while one class is placed: its members' own anti-affinity
	// terms are counted in anti.
	c := &interPod{repelled: ip.repelled, affinity: cloneTerms(ip.affinity), anti: cloneTerms(ip.anti)}
	for _, sc := range ip.spread {
		cp := *sc
		cp.byDomain = maps.Clone(sc.byDomain)
		c.spread = append(c.spread, &cp)
	}
	return c
}

func cloneTerms(ts []termCount) []termCount {
	out := make([]termCount, len(ts))
	for i, t := range ts {
		t.byDomain = maps.Clone(t.byDomain)
		out[i] = t
	}
	return out
}

// newSpreadCount prepares constraint con of pod p: the nodes it counts (those with its key
// that pass p's node affinity under nodeAffinityPolicy Honor, the default, and its tolerations
// under nodeTaintsPolicy Honor) and their domains, each starting at zero.
func (s *Snapshot) newSpreadCount(p *corev1.Pod, con corev1.TopologySpreadConstraint, aff nodeaffinity.RequiredNodeAffinity) *spreadCount {
	sel, err := metav1.LabelSelectorAsSelector(con.LabelSelector)
	if err != nil || con.LabelSelector == nil {
		sel = labels.Nothing()
	}
	sel = withLabelKeys(sel, p, con.MatchLabelKeys, selection.In)
	sc := &spreadCount{key: con.TopologyKey, sel: sel, ns: p.Namespace, maxSkew: int(con.MaxSkew),
		eligible: make([]bool, len(s.nodes)), byDomain: map[string]int{}}
	if sel.Matches(labels.Set(p.Labels)) {
		sc.self = 1
	}
	honorAffinity := con.NodeAffinityPolicy == nil || *con.NodeAffinityPolicy == corev1.NodeInclusionPolicyHonor
	honorTaints := con.NodeTaintsPolicy != nil && *con.NodeTaintsPolicy == corev1.NodeInclusionPolicyHonor
	for _, m := range s.nodes {
		d, ok := m.Node.Labels[con.TopologyKey]
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
		sc.eligible[m.idx] = true
		sc.byDomain[d] += 0
	}
	sc.tooFew = con.MinDomains != nil && int32(len(sc.byDomain)) < *con.MinDomains
	return sc
}

// settle recomputes the minimum over the domains.
func (sc *spreadCount) settle() {
	sc.minCount, sc.atMin = math.MaxInt, 0
	for _, c := range sc.byDomain {
		switch {
		case c < sc.minCount:
			sc.minCount, sc.atMin = c, 1
		case c == sc.minCount:
			sc.atMin++
		}
	}
	if sc.atMin == 0 {
		sc.minCount = 0
	}
}

// min is the global minimum the skew is measured against.
func (sc *spreadCount) min() int {
	if sc.tooFew {
		return 0
	}
	return sc.minCount
}

// inc counts one more matching pod in domain v.
func (sc *spreadCount) inc(v string) {
	c, known := sc.byDomain[v]
	sc.byDomain[v] = c + 1
	if !known {
		sc.settle() // a new domain (cannot happen for eligible nodes, which are all pre-seeded)
		return
	}
	if c == sc.minCount {
		sc.atMin--
		if sc.atMin == 0 {
			sc.settle()
		}
	}
}
