package admission

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	seatpkg "github.com/berth-dev/berth/internal/seat"
	"github.com/berth-dev/berth/scheduling"
)

// The seat pod itself: a pure function of the gang, the member it stands for and the shortfall.

// seatName is the deterministic name of seat i of an attempt: a restarted controller finds
// the seats it already created instead of creating more. It carries the gang's UID: seats of
// every namespace's gangs live in berth's one namespace, and two teams' gangs of one name
// must not share seats (the second found the first's seats there and got no batch of its own).
func seatName(g *berthv1alpha1.PodGroup, attempt int32, i int) string {
	base := g.Name
	if len(base) > 160 {
		base = base[:160]
	}
	return fmt.Sprintf("%s-%s-seat-%d-%d", base, g.UID, attempt, i)
}

// seatIdentity is a seat pod's name, its namespace (berth's own) and the image it runs.
type seatIdentity struct {
	namespace, name, image string
}

// seatPod is the seat that holds capacity for member m of gang g, in id.namespace (berth's own,
// so no ownerReference: sweepSeats deletes seats whose gang is gone). sf.Domain, when set,
// confines it to the topology domain where the gang's other members have room; nodes carrying
// the gang's reservation label (sf.Nodes, see reserve) are off limits, as their room is
// promised to those members.
func seatPod(g *berthv1alpha1.PodGroup, m *corev1.Pod, vt scheduling.VolumeTopology, id seatIdentity, sf scheduling.Shortfall) *corev1.Pod {
	seat := seatpkg.Pod(m, id.namespace, id.name, id.image)
	seat.Labels[berthv1alpha1.SeatOfLabel] = string(g.UID)
	seat.Annotations[berthv1alpha1.SeatForMemberAnnotation] = m.Name
	seat.Annotations[berthv1alpha1.SeatForGroupAnnotation] = g.Namespace + "/" + g.Name
	if g.Spec.NodePool != "" {
		if seat.Spec.NodeSelector == nil {
			seat.Spec.NodeSelector = map[string]string{}
		}
		seat.Spec.NodeSelector[karpv1.NodePoolLabelKey] = g.Spec.NodePool
	}
	seatClaims(seat, m)
	// Always set: at least the reservation term is there.
	seat.Spec.Affinity = seatAffinity(g, m, sf)
	for _, sel := range vt.Required {
		andNodeSelector(seat.Spec.Affinity, sel)
	}
	return seat
}

// andNodeSelector requires sel (a member's volume topology) on top of the seat's required node
// affinity: every existing term ANDed with each of sel's terms (terms are ORed).
func andNodeSelector(aff *corev1.Affinity, sel corev1.NodeSelector) {
	if len(sel.NodeSelectorTerms) == 0 {
		return
	}
	if aff.NodeAffinity == nil {
		aff.NodeAffinity = &corev1.NodeAffinity{}
	}
	req := aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if req == nil || len(req.NodeSelectorTerms) == 0 {
		aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = sel.DeepCopy()
		return
	}
	var terms []corev1.NodeSelectorTerm
	for _, t := range req.NodeSelectorTerms {
		for _, s := range sel.NodeSelectorTerms {
			terms = append(terms, corev1.NodeSelectorTerm{
				MatchExpressions: append(append([]corev1.NodeSelectorRequirement(nil), t.MatchExpressions...), s.MatchExpressions...),
				MatchFields:      append(append([]corev1.NodeSelectorRequirement(nil), t.MatchFields...), s.MatchFields...),
			})
		}
	}
	req.NodeSelectorTerms = terms
}

// seatAffinity is a seat's scheduling constraints: the member's node affinity, off the nodes
// reserved for the gang's placeable members, in the gang's topology domain (pod affinity among
// the gang's seats), and spread like the member's self anti-affinity.
func seatAffinity(g *berthv1alpha1.PodGroup, m *corev1.Pod, sf scheduling.Shortfall) *corev1.Affinity {
	aff := &corev1.Affinity{}
	if m.Spec.Affinity != nil && m.Spec.Affinity.NodeAffinity != nil {
		aff.NodeAffinity = m.Spec.Affinity.NodeAffinity.DeepCopy()
	}
	// Nodes whose room is promised to the gang's placeable members carry the gang's
	// reservation label; seats stay off them. (Karpenter ignores pods that select on
	// kubernetes.io/hostname or matchFields, so a node label it is.)
	addRequiredNodeTerm(aff, corev1.NodeSelectorRequirement{Key: reserveKey(g), Operator: corev1.NodeSelectorOpDoesNotExist})
	// A required pod-affinity term holds only on a node that has its topology key: the member's
	// release term (kubernetes.io/os) and its own terms. A seat without them landed on nodes
	// its member could never follow it to (hand-registered or virtual nodes without the
	// label), and the gang cycled through attempts holding the capacity.
	for _, key := range affinityKeys(m) {
		addRequiredNodeTerm(aff, corev1.NodeSelectorRequirement{Key: key, Operator: corev1.NodeSelectorOpExists})
	}
	if g.Spec.Topology != nil {
		key := g.Spec.Topology.RequiredKey
		switch {
		case sf.Domain != "":
			addRequiredNodeTerm(aff, corev1.NodeSelectorRequirement{Key: key, Operator: corev1.NodeSelectorOpIn, Values: []string{sf.Domain}})
		case sf.Hint != "":
			preferDomain(aff, key, sf.Hint)
		}
		aff.PodAffinity = &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{berthv1alpha1.SeatOfLabel: string(g.UID)}},
			TopologyKey:   key,
		}}}
	}
	if terms := selfAntiAffinity(m); len(terms) > 0 {
		aff.PodAntiAffinity = &corev1.PodAntiAffinity{}
		for _, key := range terms {
			aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append(aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution, corev1.PodAffinityTerm{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{berthv1alpha1.SeatOfLabel: string(g.UID)}},
				TopologyKey:   key,
			})
		}
	}
	return aff
}

// preferDomain puts a preference for domain (a value of key) first among the seat's preferred
// node-affinity terms. No member has a place yet, so the seats' pod affinity alone would hold
// them together, and Karpenter does not: it picks a domain for each new node on its own until
// one of them is known (several within one batch), and the next batch adds nodes in one
// domain for the seats stranded apart. Karpenter takes the heaviest preferred term as a
// requirement and relaxes it when nothing can launch there; kube-scheduler only scores it.
//
// The member's own heaviest preference (spot capacity, say) rides in the same term, so the
// hint does not push it aside: relaxed, the term gives way to the member's own terms as they
// were. A member that prefers a value of key itself keeps its preference and gets no hint.
func preferDomain(aff *corev1.Affinity, key, domain string) {
	if aff.NodeAffinity == nil {
		aff.NodeAffinity = &corev1.NodeAffinity{}
	}
	own := aff.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	term := corev1.NodeSelectorTerm{}
	if h := heaviest(own); h != nil {
		for _, e := range h.Preference.MatchExpressions {
			if e.Key == key {
				return
			}
		}
		term = *h.Preference.DeepCopy()
	}
	term.MatchExpressions = append(term.MatchExpressions, corev1.NodeSelectorRequirement{Key: key, Operator: corev1.NodeSelectorOpIn, Values: []string{domain}})
	aff.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution = append([]corev1.PreferredSchedulingTerm{{Weight: 100, Preference: term}}, own...)
}

// heaviest is the first of the preferred terms with the greatest weight, nil when there are
// none.
func heaviest(terms []corev1.PreferredSchedulingTerm) *corev1.PreferredSchedulingTerm {
	var h *corev1.PreferredSchedulingTerm
	for i := range terms {
		if h == nil || terms[i].Weight > h.Weight {
			h = &terms[i]
		}
	}
	return h
}

// selfAntiAffinity returns the topology keys of the member's required anti-affinity terms that
// select the member itself ("one member per node"): seats must spread the same way.
func selfAntiAffinity(m *corev1.Pod) []string {
	if m.Spec.Affinity == nil || m.Spec.Affinity.PodAntiAffinity == nil {
		return nil
	}
	var keys []string
	for _, t := range m.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		sel, err := metav1.LabelSelectorAsSelector(t.LabelSelector)
		if err != nil || t.LabelSelector == nil {
			continue
		}
		if sel.Matches(labels.Set(m.Labels)) {
			keys = append(keys, t.TopologyKey)
		}
	}
	return keys
}

// addRequiredNodeTerm ANDs req into every required node-affinity term (or adds a term).
func addRequiredNodeTerm(aff *corev1.Affinity, req corev1.NodeSelectorRequirement) {
	if aff.NodeAffinity == nil {
		aff.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := aff.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil || len(na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) == 0 {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{}}}
	}
	terms := na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	for i := range terms {
		terms[i].MatchExpressions = append(terms[i].MatchExpressions, req)
	}
}

// affinityKeys are the topology keys of m's required pod-affinity terms (its release term's
// among them), each once: a node must carry them for m to be placed there.
func affinityKeys(m *corev1.Pod) []string {
	if m.Spec.Affinity == nil || m.Spec.Affinity.PodAffinity == nil {
		return nil
	}
	var keys []string
	for _, t := range m.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		if t.TopologyKey != "" && !slices.Contains(keys, t.TopologyKey) {
			keys = append(keys, t.TopologyKey)
		}
	}
	return keys
}
