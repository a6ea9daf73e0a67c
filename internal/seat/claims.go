package seat

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// Seats for pods that claim devices (DRA) carry the claims, so Karpenter's DRA-aware
// provisioning launches instance types whose devices satisfy them and kube-scheduler allocates
// them on the seat's node. A pod's claim templates must be in its own namespace and seats live
// in berth's, so each claim a seat carries is made from the seat's own copy of the template,
// owned by the seat: the copy, and the claim kube-controller-manager makes from it, go with the
// seat and free the devices for the pods it stood for.

// TemplateName is the name of the template copy for the i-th claim seat carries.
func TemplateName(seat string, i int) string { return seat + "-claim-" + strconv.Itoa(i) }

// CarryClaim gives seat a claim named name (the pod's own name for it) made from the seat's
// copy TemplateName(seat, i).
func CarryClaim(seat *corev1.Pod, name string, i int) {
	seat.Spec.ResourceClaims = append(seat.Spec.ResourceClaims, corev1.PodResourceClaim{
		Name: name, ResourceClaimTemplateName: ptr.To(TemplateName(seat.Name, i))})
}

// TemplateCopy is the copy TemplateName(seat, i) of a template's spec (the claim's metadata and
// spec) for seat (created: it has its UID), in the seat's namespace, owned by it and labelled
// berth's, with labels added.
func TemplateCopy(seat *corev1.Pod, i int, spec *resourceapi.ResourceClaimTemplateSpec, labels map[string]string) *resourceapi.ResourceClaimTemplate {
	l := map[string]string{
		berthv1alpha1.ManagedByLabel: berthv1alpha1.ManagedByBerth,
		berthv1alpha1.ComponentLabel: "seat",
	}
	for k, v := range labels {
		l[k] = v
	}
	return &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{
			Name: TemplateName(seat.Name, i), Namespace: seat.Namespace, Labels: l,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: seat.Name, UID: seat.UID, Controller: ptr.To(true)}},
		},
		Spec: *spec.DeepCopy(),
	}
}
