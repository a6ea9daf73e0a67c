package provisioningrequest

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	autoscalingv1 "k8s.io/autoscaler/cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/seat"
)

// metadataNameField is the node field a seat on existing capacity is pinned with.
const metadataNameField = "metadata.name"

// seatName names seat i of request pr: by its name and UID (a restarted controller finds the
// seats it created; a request created again under the name gets other seats).
func seatName(pr *autoscalingv1.ProvisioningRequest, i int) string {
	base := pr.Name
	if len(base) > 200 {
		base = base[:200]
	}
	return fmt.Sprintf("%s-%s-%d", base, string(pr.UID)[:min(8, len(pr.UID))], i)
}

// seatPod is seat s.index of request pr: the shape of s.pod, labelled with the request's UID and
// named by it (a restarted controller finds the seats it created), in berth's namespace. A
// seat with s.node is pinned there by a required node-affinity match on the node's name (and
// marked pinned): Karpenter provisions nothing for a pod that names a node.
func seatPod(pr *autoscalingv1.ProvisioningRequest, s seatSpec, ns, image string) *corev1.Pod {
	p := seat.Pod(s.pod, ns, seatName(pr, s.index), image)
	p.Labels[berthv1alpha1.SeatForProvisioningRequestLabel] = string(pr.UID)
	p.Annotations[berthv1alpha1.SeatForProvisioningRequestAnnotation] = pr.Namespace + "/" + pr.Name
	if a := s.pod.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: a.NodeAffinity.DeepCopy()}
	}
	if s.node == "" {
		return p
	}
	p.Annotations[berthv1alpha1.PinnedNodeAnnotation] = s.node
	if p.Spec.Affinity == nil {
		p.Spec.Affinity = &corev1.Affinity{}
	}
	if p.Spec.Affinity.NodeAffinity == nil {
		p.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	pin := corev1.NodeSelectorRequirement{Key: metadataNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{s.node}}
	na := p.Spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil || len(na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) == 0 {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{pin}}}}
		return p
	}
	terms := na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	for j := range terms {
		terms[j].MatchFields = append(terms[j].MatchFields, pin)
	}
	return p
}
