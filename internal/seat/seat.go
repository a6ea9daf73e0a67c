// Package seat builds seat pods: pause containers with a workload pod's requests at the lowest
// priority (PriorityClass berth-seat), which hold capacity — room on an existing node, or a
// node Karpenter launches for them — until the pods they stand for arrive. Gang admission
// (controllers/podgroup/admission) and ProvisioningRequests (controllers/provisioningrequest)
// both use them; each adds its own labels and affinity.
package seat

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/utils/ptr"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// Where seats live and what they run, when the controller is not told otherwise.
const (
	// DefaultNamespace is berth's own namespace, where seats are created.
	DefaultNamespace = "berth-system"
	// DefaultImage is the seats' container image.
	DefaultImage = "registry.k8s.io/pause:3.10"
)

// Pod is a seat named name in namespace ns, running image, that stands for pod m: m's requests
// (limits where the API requires them), host ports, scheduler, node selector and tolerations,
// berth's labels, karpenter.sh/do-not-disrupt, the seat PriorityClass and a locked-down
// security context. The caller adds its labels, annotations and affinity.
func Pod(m *corev1.Pod, ns, name, image string) *corev1.Pod {
	req := resourcehelper.PodRequests(m, resourcehelper.PodResourcesOptions{})
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns,
			Labels: map[string]string{
				berthv1alpha1.ManagedByLabel: berthv1alpha1.ManagedByBerth,
				berthv1alpha1.ComponentLabel: "seat",
			},
			Annotations: map[string]string{karpv1.DoNotDisruptAnnotationKey: "true"},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "seat", Image: image, Ports: Ports(m),
				Resources: corev1.ResourceRequirements{Requests: req, Limits: Limits(req)},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65535),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			PriorityClassName:             berthv1alpha1.SeatPriorityClassName,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			SchedulerName:                 m.Spec.SchedulerName,
			NodeSelector:                  maps.Clone(m.Spec.NodeSelector),
			Tolerations:                   append([]corev1.Toleration(nil), m.Spec.Tolerations...),
		},
	}
}

// Ports are the pod's host ports (its containers' and sidecars'): kube-scheduler and Karpenter
// then keep seats that cannot share a node apart, as the pods they stand for will be.
func Ports(m *corev1.Pod) []corev1.ContainerPort {
	var out []corev1.ContainerPort
	cs := append([]corev1.Container(nil), m.Spec.Containers...)
	for _, c := range m.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			cs = append(cs, c)
		}
	}
	for _, c := range cs {
		for _, p := range c.Ports {
			if p.HostPort > 0 {
				out = append(out, corev1.ContainerPort{ContainerPort: p.HostPort, HostPort: p.HostPort, HostIP: p.HostIP, Protocol: p.Protocol})
			}
		}
	}
	return out
}

// Limits are the limits a seat needs for its requests to be valid: equal to the request for
// every resource the API does not let a pod overcommit (hugepages-*, extended resources such as
// GPUs and EFA devices); none for cpu, memory and ephemeral storage, which a seat never uses.
func Limits(req corev1.ResourceList) corev1.ResourceList {
	limits := corev1.ResourceList{}
	for n, q := range req {
		if !overcommitable(n) {
			limits[n] = q
		}
	}
	return limits
}

// overcommitable reports whether a pod may request n without a limit equal to the request.
func overcommitable(n corev1.ResourceName) bool {
	switch n {
	case corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage:
		return true
	}
	return false
}
