package rig

import (
	"context"
	"encoding/json"
	"fmt"
	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	kwokv1alpha1 "sigs.k8s.io/karpenter/kwok/apis/v1alpha1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/gpu"
	"github.com/berth-dev/berth/internal/nodepools"
)

// KarpenterGroupVersion is the group and version of Karpenter's NodePool and NodeClaim.
var KarpenterGroupVersion = schema.GroupVersion{Group: "karpenter.sh", Version: "v1"}

// KwokGroupVersion is the group and version of Karpenter-kwok's KWOKNodeClass.
var KwokGroupVersion = schema.GroupVersion{Group: "karpenter.kwok.sh", Version: "v1alpha1"}

// KwokNodeClassName is the KWOKNodeClass every rig NodePool refers to.
const KwokNodeClassName = "default"

// CPUNodePoolName is the rig's NodePool for CPU-only pods.
const CPUNodePoolName = "cpu"

// GPUNodePoolName is the name of the rig's NodePool for a GPU product, e.g. "gpu-h100".
func GPUNodePoolName(product string) string { return "gpu-" + product }

// KwokNodeClass is the node class of the rig's NodePools.
func KwokNodeClass() *kwokv1alpha1.KWOKNodeClass {
	return &kwokv1alpha1.KWOKNodeClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: KwokGroupVersion.String(), Kind: "KWOKNodeClass"},
		ObjectMeta: metav1.ObjectMeta{Name: KwokNodeClassName},
	}
}

// DevNodePools are the rig's NodePools: one per GPU family — the kwok rendering of berth's
// training NodePool template (`berth nodepools render --provider kwok --role training`), named
// gpu-<product> and consolidated after 30 s instead of hours to suit the rig's time scale — and
// one CPU pool.
func DevNodePools() []*karpv1.NodePool {
	objs, err := nodepools.Render(nodepools.Options{Families: []string{nodepools.AllFamilies}, Role: nodepools.RoleTraining, Provider: nodepools.ProviderKwok})
	if err != nil {
		panic(fmt.Sprintf("rig: rendering the NodePool templates: %v", err)) // the inputs are constant
	}
	var out []*karpv1.NodePool
	for _, o := range objs {
		np, ok := o.(*karpv1.NodePool)
		if !ok {
			continue
		}
		np = np.DeepCopy()
		np.Name = GPUNodePoolName(productOf(np))
		np.Spec.Disruption.ConsolidateAfter = karpv1.MustParseNillableDuration("30s")
		delete(np.Annotations, berthv1alpha1.ConsolidateAfterAnnotation)
		out = append(out, np)
	}
	cpu := nodePool(CPUNodePoolName, "m5", "c5")
	cpu.Spec.Disruption.ConsolidationPolicy = karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized
	cpu.Spec.Limits = karpv1.Limits{corev1.ResourceCPU: resource.MustParse("256")}
	out = append(out, cpu)
	for _, np := range out {
		np.Spec.Template.Spec.StartupTaints = append(np.Spec.Template.Spec.StartupTaints, NotReadyStartupTaint)
	}
	return out
}

// NotReadyStartupTaint stands in for the not-ready taint a kubelet registers its node with:
// Karpenter puts it on the node as it registers it (in the same update that lifts Karpenter's
// own unregistered taint, so there is no moment without either), and kwok removes it once it
// reports the node Ready (after the rig's node-ready delay). Without it kube-scheduler would
// bind pods to a kwok node the moment it exists, and the node-ready delay would delay nothing.
// (The real node.kubernetes.io/not-ready taint cannot be used: kube-controller-manager strips
// it from a node that has no Ready condition yet.)
var NotReadyStartupTaint = corev1.Taint{Key: berthv1alpha1.DevBootingTaint, Effect: corev1.TaintEffectNoSchedule}

// productOf is the GPU product of a rendered GPU NodePool, from its instance-family requirement.
func productOf(np *karpv1.NodePool) string {
	for _, r := range np.Spec.Template.Spec.Requirements {
		if r.Key == awsv1.LabelInstanceFamily && len(r.Values) == 1 {
			for _, f := range gpu.GPUFamilies() {
				if f.Name == r.Values[0] {
					return f.GPU
				}
			}
		}
	}
	panic(fmt.Sprintf("rig: rendered NodePool %s has no single GPU instance family", np.Name))
}

func nodePool(name string, families ...string) *karpv1.NodePool {
	return &karpv1.NodePool{
		TypeMeta:   metav1.TypeMeta{APIVersion: KarpenterGroupVersion.String(), Kind: "NodePool"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: karpv1.NodePoolSpec{
			Template: karpv1.NodeClaimTemplate{
				Spec: karpv1.NodeClaimTemplateSpec{
					NodeClassRef: &karpv1.NodeClassReference{Group: "karpenter.kwok.sh", Kind: "KWOKNodeClass", Name: KwokNodeClassName},
					Requirements: []karpv1.NodeSelectorRequirementWithMinValues{
						{Key: awsv1.LabelInstanceFamily, Operator: corev1.NodeSelectorOpIn, Values: families},
						{Key: karpv1.CapacityTypeLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeSpot, karpv1.CapacityTypeOnDemand}},
						{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"amd64"}},
						{Key: corev1.LabelOSStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"linux"}},
					},
					ExpireAfter: karpv1.MustParseNillableDuration("Never"),
				},
			},
			Disruption: karpv1.Disruption{
				ConsolidateAfter: karpv1.MustParseNillableDuration("30s"),
				Budgets:          []karpv1.Budget{{Nodes: "10%"}},
			},
			Weight: ptr.To[int32](10),
		},
	}
}

// InstallDevNodePools applies the KWOKNodeClass and DevNodePools.
func (r *Rig) InstallDevNodePools(ctx context.Context) error {
	objs := []runtime.Object{KwokNodeClass()}
	for _, np := range DevNodePools() {
		objs = append(objs, np)
	}
	for _, o := range objs {
		if err := r.ApplyTyped(ctx, o); err != nil {
			return err
		}
	}
	return nil
}

// ApplyTyped server-side applies a typed object (its TypeMeta set), without its status.
func (r *Rig) ApplyTyped(ctx context.Context, o runtime.Object) error {
	data, err := json.Marshal(o)
	if err != nil {
		return fmt.Errorf("rig: encoding %T: %w", o, err)
	}
	obj := &unstructured.Unstructured{}
	if err := json.Unmarshal(data, &obj.Object); err != nil {
		return fmt.Errorf("rig: decoding %T: %w", o, err)
	}
	delete(obj.Object, "status")
	return r.Apply(ctx, obj)
}
