package builders

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// GPUDriver is the NVIDIA DRA driver's name, which the rig's kwok driver publishes too.
const GPUDriver = "gpu.nvidia.com"

// GPUSlice is the ResourceSlice a GPU driver publishes for node: n devices gpu-0… with the
// productName and memory attributes NVIDIA's driver sets, in one pool named after the node.
func GPUSlice(node string, n int, product string, memory string) *resourceapi.ResourceSlice {
	devs := make([]resourceapi.Device, n)
	for i := range devs {
		devs[i] = resourceapi.Device{
			Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"productName": {StringValue: ptr.To(product)},
				"index":       {IntValue: ptr.To(int64(i))},
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				"memory": {Value: resource.MustParse(memory)},
			},
		}
	}
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + GPUDriver},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: GPUDriver, NodeName: ptr.To(node),
			Pool:    resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
			Devices: devs,
		},
	}
}

// GPUClass is the DeviceClass gpu.nvidia.com: every device of the GPU driver.
func GPUClass() *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: GPUDriver},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{
			{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", GPUDriver)}},
		}},
	}
}

// GPUClaimSpec asks for exactly n devices of the GPU class, each matching the CEL selector
// sel ("" for any).
func GPUClaimSpec(n int, sel string) resourceapi.ResourceClaimSpec {
	req := resourceapi.ExactDeviceRequest{DeviceClassName: GPUDriver, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(n)}
	if sel != "" {
		req.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: sel}}}
	}
	return resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpus", Exactly: &req}}}}
}

// ClaimTemplate is a ResourceClaimTemplate for n GPUs matching sel.
func ClaimTemplate(name, namespace string, n int, sel string) *resourceapi.ResourceClaimTemplate {
	return &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: GPUClaimSpec(n, sel)},
	}
}

// Claim is a ResourceClaim for n GPUs matching sel, not allocated.
func Claim(name, namespace string, n int, sel string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, UID: types.UID("uid-claim-" + namespace + "-" + name)},
		Spec:       GPUClaimSpec(n, sel),
	}
}

// AllocatedClaim is Claim allocated to devices gpu-<i> of node's pool, available on node only.
func AllocatedClaim(name, namespace, node string, devices ...int) *resourceapi.ResourceClaim {
	c := Claim(name, namespace, len(devices), "")
	res := make([]resourceapi.DeviceRequestAllocationResult, len(devices))
	for i, d := range devices {
		res[i] = resourceapi.DeviceRequestAllocationResult{Request: "gpus", Driver: GPUDriver, Pool: node, Device: fmt.Sprintf("gpu-%d", d)}
	}
	c.Status.Allocation = &resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{Results: res},
		NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
			{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}},
		}}}},
	}
	return c
}

// ClaimFromTemplate adds a pod resource claim made from a ResourceClaimTemplate.
func (b *PodBuilder) ClaimFromTemplate(name, template string) *PodBuilder {
	b.p.Spec.ResourceClaims = append(b.p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: name, ResourceClaimTemplateName: ptr.To(template)})
	return b
}

// SharedClaim adds a pod resource claim naming an existing ResourceClaim.
func (b *PodBuilder) SharedClaim(name, claim string) *PodBuilder {
	b.p.Spec.ResourceClaims = append(b.p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: name, ResourceClaimName: ptr.To(claim)})
	return b
}

// ClaimCreated records in the pod's status the claim kube-controller-manager created for its
// pod resource claim name.
func (b *PodBuilder) ClaimCreated(name, claim string) *PodBuilder {
	b.p.Status.ResourceClaimStatuses = append(b.p.Status.ResourceClaimStatuses, corev1.PodResourceClaimStatus{Name: name, ResourceClaimName: ptr.To(claim)})
	return b
}

// InNativeGroup puts the pod in Kubernetes' native PodGroup name (spec.schedulingGroup).
func (b *PodBuilder) InNativeGroup(name string) *PodBuilder {
	b.p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(name)}
	return b
}

// NativeGroupWithClaim is a native PodGroup (scheduling.k8s.io/v1beta1) gang of minCount whose
// members share claim name made from template.
func NativeGroupWithClaim(name, namespace string, minCount int32, claim, template string) *schedulingv1beta1.PodGroup {
	return &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: schedulingv1beta1.PodGroupSpec{
			SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: minCount}},
			ResourceClaims:   []schedulingv1beta1.PodGroupResourceClaim{{Name: claim, ResourceClaimTemplateName: ptr.To(template)}},
		},
	}
}
