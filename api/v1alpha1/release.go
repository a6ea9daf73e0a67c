package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// ReleaseTopologyKey is the topology key of a member's release term: kubernetes.io/os, a label
// the kubelet (and Karpenter) sets on every node with the same value across a cluster's Linux
// nodes, so one bound key member meets the term on every node its gang was placed on.
const ReleaseTopologyKey = corev1.LabelOSStable

// ReleaseTerm is the required pod-affinity term the pod gate adds to a member of the gang named
// group: it is met only in a ReleaseTopologyKey domain where a pod of the member's namespace
// labelled ReleaseLabel=group is bound. kube-scheduler lets the first pod that matches its own
// term through when no pod matches it yet, so the key member (labelled in its release patch)
// binds first and opens the gang for the others.
func ReleaseTerm(group string) corev1.PodAffinityTerm {
	return corev1.PodAffinityTerm{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{ReleaseLabel: group}},
		TopologyKey:   ReleaseTopologyKey,
	}
}

// CanCarryReleaseTerm reports whether the gang group can be opened by a release term: its name
// must be a valid label value.
func CanCarryReleaseTerm(group string) bool {
	return len(validation.IsValidLabelValue(group)) == 0
}

// IsReleaseTerm reports whether t is a release term, for any gang.
func IsReleaseTerm(t *corev1.PodAffinityTerm) bool {
	sel := t.LabelSelector
	return t.TopologyKey == ReleaseTopologyKey && sel != nil && len(sel.MatchLabels) == 1 &&
		sel.MatchLabels[ReleaseLabel] != "" && len(sel.MatchExpressions) == 0 &&
		len(t.Namespaces) == 0 && t.NamespaceSelector == nil && len(t.MatchLabelKeys) == 0 && len(t.MismatchLabelKeys) == 0
}

// ReleaseGroup returns the gang p's release term opens on, if p carries one.
func ReleaseGroup(p *corev1.Pod) (string, bool) {
	if p.Spec.Affinity == nil || p.Spec.Affinity.PodAffinity == nil {
		return "", false
	}
	terms := p.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	for i := range terms {
		if IsReleaseTerm(&terms[i]) {
			return terms[i].LabelSelector.MatchLabels[ReleaseLabel], true
		}
	}
	return "", false
}

// OwnRequiredPodAffinity reports whether p has required pod-affinity terms other than a release
// term. kube-scheduler lets a pod through on its own term only when it matches every one of its
// required affinity terms and no pod matches any of them, so such a pod cannot be a key member:
// the pod gate gives it no release term.
func OwnRequiredPodAffinity(p *corev1.Pod) bool {
	if p.Spec.Affinity == nil || p.Spec.Affinity.PodAffinity == nil {
		return false
	}
	terms := p.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	for i := range terms {
		if !IsReleaseTerm(&terms[i]) {
			return true
		}
	}
	return false
}
