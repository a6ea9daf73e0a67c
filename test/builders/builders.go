// Package builders makes test objects with sensible defaults in one line:
// builders.Pod("trainer-0", "ml").GPU(1).Member("llama").Obj().
package builders

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/gpu"
)

// PodGroupBuilder builds a PodGroup.
type PodGroupBuilder struct{ pg berthv1alpha1.PodGroup }

// PodGroup starts a PodGroup with minMember 1.
func PodGroup(name, namespace string) *PodGroupBuilder {
	return &PodGroupBuilder{pg: berthv1alpha1.PodGroup{
		TypeMeta:   metav1.TypeMeta{APIVersion: berthv1alpha1.GroupVersion.String(), Kind: "PodGroup"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       berthv1alpha1.PodGroupSpec{MinMember: 1},
	}}
}

// MinMember sets spec.minMember.
func (b *PodGroupBuilder) MinMember(n int32) *PodGroupBuilder { b.pg.Spec.MinMember = n; return b }

// MinResources sets spec.minResources.
func (b *PodGroupBuilder) MinResources(r corev1.ResourceList) *PodGroupBuilder {
	b.pg.Spec.MinResources = r
	return b
}

// Topology sets spec.topology.requiredKey.
func (b *PodGroupBuilder) Topology(key string) *PodGroupBuilder {
	b.pg.Spec.Topology = &berthv1alpha1.TopologySpec{RequiredKey: key}
	return b
}

// NodePool sets spec.nodePool.
func (b *PodGroupBuilder) NodePool(name string) *PodGroupBuilder { b.pg.Spec.NodePool = name; return b }

// ScheduleTimeout sets spec.scheduleTimeoutSeconds.
func (b *PodGroupBuilder) ScheduleTimeout(seconds int32) *PodGroupBuilder {
	b.pg.Spec.ScheduleTimeoutSeconds = ptr.To(seconds)
	return b
}

// Protect sets spec.disruption.protect.
func (b *PodGroupBuilder) Protect(p bool) *PodGroupBuilder {
	b.pg.Spec.Disruption = &berthv1alpha1.DisruptionSpec{Protect: ptr.To(p)}
	return b
}

// Phase sets status.phase.
func (b *PodGroupBuilder) Phase(p berthv1alpha1.PodGroupPhase) *PodGroupBuilder {
	b.pg.Status.Phase = p
	return b
}

// Obj returns the PodGroup.
func (b *PodGroupBuilder) Obj() *berthv1alpha1.PodGroup { return b.pg.DeepCopy() }

// PodBuilder builds a Pod.
type PodBuilder struct{ p corev1.Pod }

// Pod starts a pod with one container requesting 100m CPU.
func Pod(name, namespace string) *PodBuilder {
	return &PodBuilder{p: corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "main", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}},
			}},
		},
	}}
}

// Member labels the pod as a member of the named PodGroup.
func (b *PodBuilder) Member(group string) *PodBuilder {
	b.p.Labels[berthv1alpha1.PodGroupLabel] = group
	return b
}

// Label sets a label.
func (b *PodBuilder) Label(k, v string) *PodBuilder { b.p.Labels[k] = v; return b }

// Request sets a resource request on the first container (and the limit, for extended resources).
func (b *PodBuilder) Request(name corev1.ResourceName, q string) *PodBuilder {
	c := &b.p.Spec.Containers[0]
	c.Resources.Requests[name] = resource.MustParse(q)
	if name != corev1.ResourceCPU && name != corev1.ResourceMemory {
		if c.Resources.Limits == nil {
			c.Resources.Limits = corev1.ResourceList{}
		}
		c.Resources.Limits[name] = resource.MustParse(q)
	}
	return b
}

// GPU requests n nvidia.com/gpu.
func (b *PodBuilder) GPU(n int) *PodBuilder {
	return b.Request(gpu.ResourceGPU, resource.NewQuantity(int64(n), resource.DecimalSI).String())
}

// NodeSelector adds a nodeSelector entry.
func (b *PodBuilder) NodeSelector(k, v string) *PodBuilder {
	if b.p.Spec.NodeSelector == nil {
		b.p.Spec.NodeSelector = map[string]string{}
	}
	b.p.Spec.NodeSelector[k] = v
	return b
}

// Gated adds berth's scheduling gate.
func (b *PodBuilder) Gated() *PodBuilder {
	b.p.Spec.SchedulingGates = append(b.p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: berthv1alpha1.SchedulingGate})
	return b
}

// Node sets spec.nodeName.
func (b *PodBuilder) Node(name string) *PodBuilder { b.p.Spec.NodeName = name; return b }

// Phase sets status.phase.
func (b *PodBuilder) Phase(p corev1.PodPhase) *PodBuilder { b.p.Status.Phase = p; return b }

// Deleting marks the pod as being deleted.
func (b *PodBuilder) Deleting() *PodBuilder {
	now := metav1.Now()
	b.p.DeletionTimestamp = &now
	return b
}

// Obj returns the Pod.
func (b *PodBuilder) Obj() *corev1.Pod { return b.p.DeepCopy() }
