package nodepools

import (
	"fmt"
	"time"

	awsapis "github.com/aws/karpenter-provider-aws/pkg/apis"
	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kwokapis "sigs.k8s.io/karpenter/kwok/apis"
	kwokv1alpha1 "sigs.k8s.io/karpenter/kwok/apis/v1alpha1"
	karpapis "sigs.k8s.io/karpenter/pkg/apis"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/gpu"
)

// The group versions of the kinds Render produces (the API packages export only the groups).
var (
	// NodePoolGroupVersion is Karpenter's karpenter.sh/v1 (NodePool).
	NodePoolGroupVersion = schema.GroupVersion{Group: karpapis.Group, Version: "v1"}
	// EC2NodeClassGroupVersion is Karpenter AWS's karpenter.k8s.aws/v1 (EC2NodeClass).
	EC2NodeClassGroupVersion = schema.GroupVersion{Group: awsapis.Group, Version: "v1"}
	// KWOKNodeClassGroupVersion is Karpenter kwok's karpenter.kwok.sh/v1alpha1 (KWOKNodeClass).
	KWOKNodeClassGroupVersion = schema.GroupVersion{Group: kwokapis.Group, Version: "v1alpha1"}
)

// KwokNodeClassName is the KWOKNodeClass every kwok NodePool refers to.
const KwokNodeClassName = "default"

// ec2Family is what the EC2NodeClass needs to know about a family beyond the GPU catalogue.
type ec2Family struct {
	// rootVolume is the size of the root EBS volume.
	rootVolume string
	// instanceStore is true when every size has local NVMe instance storage.
	instanceStore bool
}

// ec2Families covers every GPU family of the catalogue (a test checks it). The p-families
// carry 8 large GPUs and serve the biggest models, so they get a bigger root volume: model
// weights and CUDA images run to hundreds of GiB.
var ec2Families = map[string]ec2Family{
	"p5":  {rootVolume: "500Gi", instanceStore: true},
	"p5e": {rootVolume: "500Gi", instanceStore: true},
	"p4d": {rootVolume: "500Gi", instanceStore: true},
	"g6e": {rootVolume: "200Gi", instanceStore: true},
	"g5":  {rootVolume: "200Gi", instanceStore: true},
	"g6":  {rootVolume: "200Gi", instanceStore: true},
}

// roleDefaults are the disruption settings of a role.
type roleDefaults struct {
	consolidateAfter       string
	expireAfter            string
	terminationGracePeriod *metav1.Duration
	weight                 int32
}

var roles = map[Role]roleDefaults{
	// Inference replicas come and go with load: an empty node is released after an hour (long
	// enough to ride out a traffic dip without paying a cold start of minutes). Nodes expire
	// after 30 days so AMIs and kernels stay patched; expiry drains gracefully but is forced
	// after terminationGracePeriod, which bounds a drain blocked by a PodDisruptionBudget.
	// Weight 20 sends GPU pods that select no role to the on-demand inference pool rather
	// than the spot training pool.
	RoleInference: {consolidateAfter: "1h", expireAfter: "720h", terminationGracePeriod: &metav1.Duration{Duration: time.Hour}, weight: 20},
	// Training gangs leave a node empty between jobs and the next job is often minutes away:
	// keep empty nodes 4h. Expiration is forceful in Karpenter v1 and would kill a multi-day
	// job, so training nodes never expire; no terminationGracePeriod either, so a graceful
	// drain (drift) waits for pods marked karpenter.sh/do-not-disrupt.
	RoleTraining: {consolidateAfter: "4h", expireAfter: "Never", weight: 10},
}

// NodePoolName is the name of the NodePool (and of its EC2NodeClass) for a GPU product and a
// role, e.g. "gpu-h100-training".
func NodePoolName(product string, role Role) string {
	return "gpu-" + product + "-" + string(role)
}

// DRANodePoolName is the name of the DRA variant of NodePoolName's pool, e.g.
// "gpu-h100-training-dra": both can serve one cluster side by side.
func DRANodePoolName(product string, role Role) string {
	return NodePoolName(product, role) + "-dra"
}

// poolName is the name of family f's pool (and EC2NodeClass) under o.
func poolName(f gpu.Family, o Options) string {
	if o.DRA {
		return DRANodePoolName(f.GPU, o.Role)
	}
	return NodePoolName(f.GPU, o.Role)
}

// nodeSetup is the taint and labels of a pool's nodes: GPU nodes are tainted so only GPU work
// lands there. Device-plugin pools: the nvidia.com/gpu taint, which pods requesting
// nvidia.com/gpu tolerate through the ExtendedResourceToleration admission plugin. DRA pools:
// berth's DRA taint instead, which pods claiming GPUs through DRA tolerate (nothing adds it for
// them), so device-plugin pods — which would find no nvidia.com/gpu there — stay off; NVIDIA's
// GPU operator is told to run no device plugin on them (the DRA driver alone publishes their
// GPUs), and nvidia.com/gpu.present is set from the start so the DRA driver's kubelet plugin,
// whose default affinity selects it, runs without waiting for node feature discovery.
func nodeSetup(o Options) (corev1.Taint, map[string]string) {
	labels := map[string]string{berthv1alpha1.NodePoolRoleLabel: string(o.Role)}
	if !o.DRA {
		return corev1.Taint{Key: berthv1alpha1.GPUTaintKey, Value: "true", Effect: corev1.TaintEffectNoSchedule}, labels
	}
	labels[berthv1alpha1.GPUAllocationLabel] = berthv1alpha1.GPUAllocationDRA
	labels[berthv1alpha1.NVIDIADevicePluginDeployLabel] = "false"
	labels[berthv1alpha1.NVIDIAGPUPresentLabel] = "true"
	return corev1.Taint{Key: berthv1alpha1.DRAGPUTaintKey, Value: "true", Effect: corev1.TaintEffectNoSchedule}, labels
}

// Render builds the NodePools of o, one per family, each preceded by its EC2NodeClass (aws), or
// one KWOKNodeClass followed by the NodePools (kwok).
func Render(o Options) ([]client.Object, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	fams, err := o.families()
	if err != nil {
		return nil, err
	}
	var out []client.Object
	if o.Provider == ProviderKwok {
		out = append(out, kwokNodeClass())
	}
	for _, f := range fams {
		if o.Provider == ProviderAWS {
			nc, err := ec2NodeClass(f, o)
			if err != nil {
				return nil, err
			}
			out = append(out, nc)
		}
		out = append(out, nodePool(f, o))
	}
	return out, nil
}

// nodePool is the NodePool of family f.
func nodePool(f gpu.Family, o Options) *karpv1.NodePool {
	rd := roles[o.Role]
	name := poolName(f, o)
	taint, nodeLabels := nodeSetup(o)
	ref := &karpv1.NodeClassReference{Group: EC2NodeClassGroupVersion.Group, Kind: "EC2NodeClass", Name: name}
	if o.Provider == ProviderKwok {
		ref = &karpv1.NodeClassReference{Group: KWOKNodeClassGroupVersion.Group, Kind: "KWOKNodeClass", Name: KwokNodeClassName}
	}
	return &karpv1.NodePool{
		TypeMeta: metav1.TypeMeta{APIVersion: NodePoolGroupVersion.String(), Kind: "NodePool"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			// Marks the pool for berth's consolidation guard even if someone later widens the
			// requirements.
			Labels: map[string]string{berthv1alpha1.GPUPoolLabel: "true"},
			Annotations: map[string]string{
				// If the policy is ever switched to WhenEmptyOrUnderutilized, the guard blocks
				// underutilization consolidation, which would evict running GPU work.
				berthv1alpha1.ConsolidationGuardAnnotation: berthv1alpha1.ConsolidationGuardEnforce,
				// What the guard's when-empty mode would set: the role's own value.
				berthv1alpha1.ConsolidateAfterAnnotation: rd.consolidateAfter,
			},
		},
		Spec: karpv1.NodePoolSpec{
			Template: karpv1.NodeClaimTemplate{
				ObjectMeta: karpv1.ObjectMeta{Labels: nodeLabels},
				Spec: karpv1.NodeClaimTemplateSpec{
					// Only GPU workloads land on GPU nodes (nodeSetup).
					Taints: []corev1.Taint{taint},
					Requirements: []karpv1.NodeSelectorRequirementWithMinValues{
						// One family per pool: limits, weights and node classes stay per GPU.
						{Key: awsv1.LabelInstanceFamily, Operator: corev1.NodeSelectorOpIn, Values: []string{f.Name}},
						{Key: karpv1.CapacityTypeLabelKey, Operator: corev1.NodeSelectorOpIn, Values: o.CapacityTypes},
						// Every GPU family of the catalogue is x86-64 Linux.
						{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"amd64"}},
						{Key: corev1.LabelOSStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"linux"}},
					},
					NodeClassRef:           ref,
					ExpireAfter:            karpv1.MustParseNillableDuration(rd.expireAfter),
					TerminationGracePeriod: rd.terminationGracePeriod,
				},
			},
			Disruption: karpv1.Disruption{
				// Never consolidate a GPU node that still runs pods: moving a model server or a
				// training rank costs minutes of GPU time and may not fit elsewhere.
				ConsolidationPolicy: karpv1.ConsolidationPolicyWhenEmpty,
				ConsolidateAfter:    karpv1.MustParseNillableDuration(rd.consolidateAfter),
				// At most 10% of the pool's nodes are disrupted at once (drift, emptiness).
				Budgets: []karpv1.Budget{{Nodes: "10%"}},
			},
			Limits: limits(f, o),
			Weight: ptr.To(rd.weight),
		},
	}
}

// limits bound what a pool may launch: o.GPULimit GPUs. A DRA node advertises no nvidia.com/gpu
// once it is up (no device plugin: its GPUs are ResourceSlices), so Karpenter counts a DRA
// pool's GPUs against the limit only while its NodeClaims are in flight; DRA pools also carry a
// node limit — as many nodes as the GPU limit needs at the family's smallest size, so it never
// stops growth the GPU limit allows and bounds a runaway where the GPU limit no longer can.
func limits(f gpu.Family, o Options) karpv1.Limits {
	l := karpv1.Limits{berthv1alpha1.GPUResource: *resource.NewQuantity(o.GPULimit, resource.DecimalSI)}
	if o.DRA {
		l[karpenterNodesLimit] = *resource.NewQuantity(draNodeLimit(f, o.GPULimit), resource.DecimalSI)
	}
	return l
}

// draNodeLimit is how many nodes of family f hold gpus GPUs at its smallest GPU size (rounded up).
func draNodeLimit(f gpu.Family, gpus int64) int64 {
	least := int64(0)
	for _, s := range f.Sizes {
		if s.GPUs > 0 && (least == 0 || s.GPUs < least) {
			least = s.GPUs
		}
	}
	if least == 0 {
		return gpus
	}
	return (gpus + least - 1) / least
}

// ec2NodeClass is the EC2NodeClass of family f's NodePool.
func ec2NodeClass(f gpu.Family, o Options) (*awsv1.EC2NodeClass, error) {
	ef, ok := ec2Families[f.Name]
	if !ok {
		return nil, fmt.Errorf("no EC2NodeClass settings for instance family %s", f.Name)
	}
	discovery := o.discoveryTags()
	nc := &awsv1.EC2NodeClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: EC2NodeClassGroupVersion.String(), Kind: "EC2NodeClass"},
		ObjectMeta: metav1.ObjectMeta{Name: poolName(f, o)},
		Spec: awsv1.EC2NodeClassSpec{
			// For GPU instance types Karpenter picks the NVIDIA-accelerated variant of the
			// AL2023 EKS AMI (driver, container toolkit and device plugin prerequisites).
			// @latest follows new releases and drifts nodes onto them; production should pin a
			// version (Options.AMIAlias: al2023@v20251117) and roll it deliberately.
			AMISelectorTerms:           []awsv1.AMISelectorTerm{{Alias: o.AMIAlias}},
			Role:                       o.nodeRole(),
			SubnetSelectorTerms:        []awsv1.SubnetSelectorTerm{{Tags: discovery}},
			SecurityGroupSelectorTerms: []awsv1.SecurityGroupSelectorTerm{{Tags: discovery}},
			BlockDeviceMappings: []*awsv1.BlockDeviceMapping{{
				// The AL2023 root device; encrypted gp3, deleted with the instance.
				DeviceName: ptr.To("/dev/xvda"),
				EBS: &awsv1.BlockDevice{
					VolumeSize:          ptr.To(resource.MustParse(ef.rootVolume)),
					VolumeType:          ptr.To("gp3"),
					Encrypted:           ptr.To(true),
					DeleteOnTermination: ptr.To(true),
				},
			}},
			// IMDSv2 only, and a hop limit of 1 so pods cannot reach the node role's
			// credentials (pods get their own through IRSA or Pod Identity).
			MetadataOptions: &awsv1.MetadataOptions{
				HTTPEndpoint:            ptr.To("enabled"),
				HTTPProtocolIPv6:        ptr.To("disabled"),
				HTTPPutResponseHopLimit: ptr.To[int64](1),
				HTTPTokens:              ptr.To("required"),
			},
			Tags: map[string]string{berthv1alpha1.GPUFamilyTag: f.GPU},
		},
	}
	if ef.instanceStore {
		// The local NVMe disks become one RAID0 array holding kubelet's and containerd's
		// data: image pulls and emptyDir model caches at NVMe speed, not gp3's 125 MiB/s.
		nc.Spec.InstanceStorePolicy = ptr.To(awsv1.InstanceStorePolicyRAID0)
	}
	for _, id := range o.CapacityReservationIDs {
		nc.Spec.CapacityReservationSelectorTerms = append(nc.Spec.CapacityReservationSelectorTerms, awsv1.CapacityReservationSelectorTerm{ID: id})
	}
	if len(o.CapacityReservationTags) > 0 {
		nc.Spec.CapacityReservationSelectorTerms = append(nc.Spec.CapacityReservationSelectorTerms, awsv1.CapacityReservationSelectorTerm{Tags: o.CapacityReservationTags})
	}
	return nc, nil
}

// kwokNodeClass is the node class of kwok NodePools.
func kwokNodeClass() *kwokv1alpha1.KWOKNodeClass {
	return &kwokv1alpha1.KWOKNodeClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: KWOKNodeClassGroupVersion.String(), Kind: "KWOKNodeClass"},
		ObjectMeta: metav1.ObjectMeta{Name: KwokNodeClassName},
	}
}

// karpenterNodesLimit is the key of a NodePool's node-count limit (Karpenter's resources.Node).
const karpenterNodesLimit corev1.ResourceName = "nodes"
