package builders

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// NodeBuilder builds a Node.
type NodeBuilder struct{ n corev1.Node }

// Node starts a Ready Linux node (the hostname and OS labels the kubelet sets) with 8 CPUs,
// 32Gi memory and room for 110 pods.
func Node(name string) *NodeBuilder {
	return &NodeBuilder{n: corev1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name, corev1.LabelOSStable: "linux"}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"),
				corev1.ResourcePods: resource.MustParse("110"),
			},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}}
}

// Allocatable sets an allocatable resource.
func (b *NodeBuilder) Allocatable(name corev1.ResourceName, q string) *NodeBuilder {
	b.n.Status.Allocatable[name] = resource.MustParse(q)
	b.n.Status.Capacity = b.n.Status.Allocatable.DeepCopy()
	return b
}

// GPU sets allocatable nvidia.com/gpu.
func (b *NodeBuilder) GPU(n int) *NodeBuilder {
	return b.Allocatable(berthv1alpha1.GPUResource, resource.NewQuantity(int64(n), resource.DecimalSI).String())
}

// Label sets a label.
func (b *NodeBuilder) Label(k, v string) *NodeBuilder { b.n.Labels[k] = v; return b }

// Annotation sets an annotation.
func (b *NodeBuilder) Annotation(k, v string) *NodeBuilder {
	if b.n.Annotations == nil {
		b.n.Annotations = map[string]string{}
	}
	b.n.Annotations[k] = v
	return b
}

// Zone sets topology.kubernetes.io/zone.
func (b *NodeBuilder) Zone(z string) *NodeBuilder { return b.Label(corev1.LabelTopologyZone, z) }

// Taint adds a taint.
func (b *NodeBuilder) Taint(key, value string, effect corev1.TaintEffect) *NodeBuilder {
	b.n.Spec.Taints = append(b.n.Spec.Taints, corev1.Taint{Key: key, Value: value, Effect: effect})
	return b
}

// Unschedulable cordons the node.
func (b *NodeBuilder) Unschedulable() *NodeBuilder { b.n.Spec.Unschedulable = true; return b }

// Obj returns the Node.
func (b *NodeBuilder) Obj() *corev1.Node { return b.n.DeepCopy() }
