// Package builders makes test objects with sensible defaults in one line:
// builders.Pod("trainer-0", "ml").GPU(1).Member("llama").Obj().
package builders

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
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

// OnMemberLoss sets spec.onMemberLoss.
func (b *PodGroupBuilder) OnMemberLoss(p berthv1alpha1.MemberLossPolicy) *PodGroupBuilder {
	b.pg.Spec.OnMemberLoss = p
	return b
}

// OnScheduleTimeout sets spec.onScheduleTimeout.
func (b *PodGroupBuilder) OnScheduleTimeout(p berthv1alpha1.ScheduleTimeoutPolicy) *PodGroupBuilder {
	b.pg.Spec.OnScheduleTimeout = p
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

// ProvisioningTimeout sets spec.provisioningTimeoutSeconds.
func (b *PodGroupBuilder) ProvisioningTimeout(seconds int32) *PodGroupBuilder {
	b.pg.Spec.ProvisioningTimeoutSeconds = &seconds
	return b
}

// Obj returns a copy of the PodGroup built so far.
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

// PodFrom starts a builder from a copy of p.
func PodFrom(p *corev1.Pod) *PodBuilder { return &PodBuilder{p: *p.DeepCopy()} }

// WithReleaseTerm appends the release term of gang group to the pod's required pod affinity, as
// the pod gate does for the members it holds.
func (b *PodBuilder) WithReleaseTerm(group string) *PodBuilder {
	a := b.affinity()
	if a.PodAffinity == nil {
		a.PodAffinity = &corev1.PodAffinity{}
	}
	a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution,
		berthv1alpha1.ReleaseTerm(group))
	return b
}

// Ungated removes every scheduling gate.
func (b *PodBuilder) Ungated() *PodBuilder { b.p.Spec.SchedulingGates = nil; return b }

// Member labels the pod as a member of the named PodGroup.
func (b *PodBuilder) Member(group string) *PodBuilder {
	b.p.Labels[berthv1alpha1.PodGroupLabel] = group
	return b
}

// Label sets a label.
func (b *PodBuilder) Label(k, v string) *PodBuilder { b.p.Labels[k] = v; return b }

// ControlledBy makes the pod's controller the named object (a Job: "batch/v1", "Job").
func (b *PodBuilder) ControlledBy(apiVersion, kind, name string) *PodBuilder {
	yes := true
	b.p.OwnerReferences = append(b.p.OwnerReferences, metav1.OwnerReference{
		APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID("uid-" + name), Controller: &yes, BlockOwnerDeletion: &yes,
	})
	return b
}

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
	return b.Request(berthv1alpha1.GPUResource, resource.NewQuantity(int64(n), resource.DecimalSI).String())
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

// Pinned marks the pod released onto node by berth (berth's pin annotation; the matching node
// affinity is not added).
func (b *PodBuilder) Pinned(node string) *PodBuilder {
	if b.p.Annotations == nil {
		b.p.Annotations = map[string]string{}
	}
	b.p.Annotations[berthv1alpha1.PinnedNodeAnnotation] = node
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

// Tolerate adds a toleration (operator Exists when value is empty).
func (b *PodBuilder) Tolerate(key, value string, effect corev1.TaintEffect) *PodBuilder {
	t := corev1.Toleration{Key: key, Operator: corev1.TolerationOpEqual, Value: value, Effect: effect}
	if value == "" {
		t.Operator = corev1.TolerationOpExists
	}
	b.p.Spec.Tolerations = append(b.p.Spec.Tolerations, t)
	return b
}

// InitContainer adds an init container requesting cpu; restartable makes it a sidecar.
func (b *PodBuilder) InitContainer(name, cpu string, restartable bool) *PodBuilder {
	c := corev1.Container{Name: name, Image: "registry.k8s.io/pause:3.10",
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}
	if restartable {
		always := corev1.ContainerRestartPolicyAlways
		c.RestartPolicy = &always
	}
	b.p.Spec.InitContainers = append(b.p.Spec.InitContainers, c)
	return b
}

// Overhead sets the pod's runtime-class overhead.
func (b *PodBuilder) Overhead(name corev1.ResourceName, q string) *PodBuilder {
	if b.p.Spec.Overhead == nil {
		b.p.Spec.Overhead = corev1.ResourceList{}
	}
	b.p.Spec.Overhead[name] = resource.MustParse(q)
	return b
}

func (b *PodBuilder) affinity() *corev1.Affinity {
	if b.p.Spec.Affinity == nil {
		b.p.Spec.Affinity = &corev1.Affinity{}
	}
	return b.p.Spec.Affinity
}

// PodAffinity requires a pod labelled k=v in the same topologyKey domain.
func (b *PodBuilder) PodAffinity(topologyKey, k, v string) *PodBuilder {
	a := b.affinity()
	if a.PodAffinity == nil {
		a.PodAffinity = &corev1.PodAffinity{}
	}
	a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution,
		corev1.PodAffinityTerm{TopologyKey: topologyKey, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{k: v}}})
	return b
}

// PodAntiAffinity forbids pods labelled k=v in the same topologyKey domain.
func (b *PodBuilder) PodAntiAffinity(topologyKey, k, v string) *PodBuilder {
	a := b.affinity()
	if a.PodAntiAffinity == nil {
		a.PodAntiAffinity = &corev1.PodAntiAffinity{}
	}
	a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution,
		corev1.PodAffinityTerm{TopologyKey: topologyKey, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{k: v}}})
	return b
}

// NodeAffinityIn requires node label key to be one of values.
func (b *PodBuilder) NodeAffinityIn(key string, values ...string) *PodBuilder {
	a := b.affinity()
	a.NodeAffinity = &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpIn, Values: values}}}},
	}}
	return b
}

// Spread adds a DoNotSchedule topology spread constraint over pods labelled k=v.
func (b *PodBuilder) Spread(topologyKey string, maxSkew int32, k, v string) *PodBuilder {
	b.p.Spec.TopologySpreadConstraints = append(b.p.Spec.TopologySpreadConstraints, corev1.TopologySpreadConstraint{
		MaxSkew: maxSkew, TopologyKey: topologyKey, WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{k: v}},
	})
	return b
}

// HostPort exposes a port of the first container on the node's IP (hostIP empty: all of them),
// as kube-scheduler counts it.
func (b *PodBuilder) HostPort(port int32, protocol corev1.Protocol, hostIP string) *PodBuilder {
	c := &b.p.Spec.Containers[0]
	c.Ports = append(c.Ports, corev1.ContainerPort{ContainerPort: port, HostPort: port, Protocol: protocol, HostIP: hostIP})
	return b
}

// HostNetwork runs the pod in the node's network namespace with port as its container's port;
// the API server sets hostPort to containerPort for such pods, as done here.
func (b *PodBuilder) HostNetwork(port int32) *PodBuilder {
	b.p.Spec.HostNetwork = true
	return b.HostPort(port, corev1.ProtocolTCP, "")
}

// Ephemeral mounts a generic ephemeral volume (its claim is named <pod>-<volume>).
func (b *PodBuilder) Ephemeral(volume, storageClass string) *PodBuilder {
	b.p.Spec.Volumes = append(b.p.Spec.Volumes, corev1.Volume{Name: volume, VolumeSource: corev1.VolumeSource{
		Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{
			Spec: corev1.PersistentVolumeClaimSpec{
				StorageClassName: &storageClass,
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")}},
			},
		}},
	}})
	return b
}

// PVC mounts a PersistentVolumeClaim.
func (b *PodBuilder) PVC(volume, claim string) *PodBuilder {
	b.p.Spec.Volumes = append(b.p.Spec.Volumes, corev1.Volume{Name: volume,
		VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
	return b
}
