package nativegang

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

func TestSeatPod(t *testing.T) {
	r := New(nil, nil, nil, nil, Options{})
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "train", Name: "ddp", UID: "0123456789ab"}}
	m := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "train", Name: "ddp-0"}, Spec: corev1.PodSpec{
		NodeSelector: map[string]string{"karpenter.k8s.aws/instance-gpu-name": "l40s"},
		Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{berthv1alpha1.GPUResource: resource.MustParse("8")}}}},
	}}
	s := r.seatPod(pg, m, 2)
	if s.Namespace != "berth-system" || s.Name != "ddp-01234567-2" || s.Labels[berthv1alpha1.SeatForNativeGroupLabel] != "0123456789ab" ||
		s.Annotations[berthv1alpha1.SeatForNativeGroupAnnotation] != "train/ddp" || s.Annotations[berthv1alpha1.SeatForMemberAnnotation] != "ddp-0" {
		t.Errorf("seat %s/%s labels %v annotations %v", s.Namespace, s.Name, s.Labels, s.Annotations)
	}
	if k, ok := groupOf(s); !ok || k.Namespace != "train" || k.Name != "ddp" {
		t.Errorf("seat maps to %v %v, want train/ddp", k, ok)
	}
	if got := s.Spec.Containers[0].Resources.Requests[berthv1alpha1.GPUResource]; got.Cmp(resource.MustParse("8")) != 0 || s.Spec.NodeSelector["karpenter.k8s.aws/instance-gpu-name"] != "l40s" {
		t.Errorf("seat does not stand for the member: %+v", s.Spec)
	}
	if s.Spec.Affinity != nil && s.Spec.Affinity.PodAffinity != nil {
		t.Errorf("no topology constraint, yet pod affinity %+v", s.Spec.Affinity.PodAffinity)
	}
	pg.Spec.SchedulingConstraints = &schedulingv1beta1.PodGroupSchedulingConstraints{Topology: []schedulingv1beta1.TopologyConstraint{{Key: corev1.LabelTopologyZone}}}
	s = r.seatPod(pg, m, 0)
	terms := s.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if len(terms) != 1 || terms[0].TopologyKey != corev1.LabelTopologyZone || terms[0].LabelSelector.MatchLabels[berthv1alpha1.SeatForNativeGroupLabel] != "0123456789ab" {
		t.Errorf("seats of a gang constrained to one zone keep together by %v", terms)
	}
}
