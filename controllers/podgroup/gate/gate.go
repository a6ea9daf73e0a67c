package gate

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// Path is where the webhook server serves the pod gate.
const Path = "/mutate-pod-gate"

// Gate is the mutating admission handler for pods: gang members get berth's scheduling gate
// (and, for adapted sources, berth's pod-group label and source annotations). Pods that are not
// gang members are returned unchanged.
type Gate struct {
	// Adapters are the enabled foreign gang sources, in priority order.
	Adapters []Source
	Decoder  admission.Decoder
}

// Handle mutates one pod CREATE.
func (g *Gate) Handle(_ context.Context, req admission.Request) admission.Response {
	var pod corev1.Pod
	if err := g.Decoder.Decode(req, &pod); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding pod: %w", err))
	}
	m, ok := Resolve(&pod, g.Adapters)
	if !ok {
		return admission.Allowed("not a gang member")
	}
	if key := pod.Annotations[berthv1alpha1.LWSExclusiveTopologyAnnotation]; m.Source.Name == SourceLWS.Name && key != "" {
		// LeaderWorkerSet creates the workers of an exclusively placed group only once its
		// leader is scheduled: a leader held for its workers would wait for good.
		return admission.Allowed("LeaderWorkerSet exclusive placement; not gated").WithWarnings(fmt.Sprintf(
			"LeaderWorkerSet pod %s is placed exclusively by %s (annotation %s): LeaderWorkerSet creates the group's workers only after the leader is scheduled, so berth cannot admit the group whole and leaves it to LeaderWorkerSet", pod.Name, key, berthv1alpha1.LWSExclusiveTopologyAnnotation))
	}
	if errs := validation.IsDNS1123Subdomain(m.Group); len(errs) > 0 {
		return admission.Denied(fmt.Sprintf("pod-group name %q (from %s) is not a valid PodGroup name: %s", m.Group, m.Source.Name, errs[0]))
	}
	if pod.Spec.NodeName != "" {
		// Pods created bound cannot carry scheduling gates; they are outside gang admission.
		return admission.Allowed("pod names a node; not gated").WithWarnings(
			fmt.Sprintf("pod is a member of gang %s but sets spec.nodeName, so berth cannot hold it for its gang", m.Group))
	}
	mutated := pod.DeepCopy()
	if m.Source.Name != SourceBerth.Name {
		if mutated.Labels == nil {
			mutated.Labels = map[string]string{}
		}
		if mutated.Annotations == nil {
			mutated.Annotations = map[string]string{}
		}
		mutated.Labels[berthv1alpha1.PodGroupLabel] = m.Group
		mutated.Annotations[berthv1alpha1.SourceAnnotation] = m.Source.Name
		if m.MinMember > 0 {
			mutated.Annotations[berthv1alpha1.MinMemberAnnotation] = strconv.Itoa(int(m.MinMember))
		}
	}
	if !hasGate(mutated) {
		mutated.Spec.SchedulingGates = append(mutated.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: berthv1alpha1.SchedulingGate})
	}
	addReleaseTerm(mutated, m.Group)
	raw, err := json.Marshal(mutated)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("encoding pod: %w", err))
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, raw)
}

// addReleaseTerm gives a member the release term of its gang (berthv1alpha1.ReleaseTerm), so
// admission opens the gang with one write however many nodes it spans. Not for a pod with
// required pod affinity of its own (it could never be the gang's key member), nor for a gang
// whose name is no label value: admission holds those with a barrier on the gang's nodes.
func addReleaseTerm(p *corev1.Pod, group string) {
	if _, ok := berthv1alpha1.ReleaseGroup(p); ok || berthv1alpha1.OwnRequiredPodAffinity(p) || !berthv1alpha1.CanCarryReleaseTerm(group) {
		return
	}
	if p.Spec.Affinity == nil {
		p.Spec.Affinity = &corev1.Affinity{}
	}
	if p.Spec.Affinity.PodAffinity == nil {
		p.Spec.Affinity.PodAffinity = &corev1.PodAffinity{}
	}
	pa := p.Spec.Affinity.PodAffinity
	pa.RequiredDuringSchedulingIgnoredDuringExecution = append(pa.RequiredDuringSchedulingIgnoredDuringExecution, berthv1alpha1.ReleaseTerm(group))
}

func hasGate(p *corev1.Pod) bool {
	for _, g := range p.Spec.SchedulingGates {
		if g.Name == berthv1alpha1.SchedulingGate {
			return true
		}
	}
	return false
}
