package doctor

import (
	"fmt"
	"slices"
	"strings"
	"time"

	awsapis "github.com/aws/karpenter-provider-aws/pkg/apis"
	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/controllers/nodepool/guard"
	"github.com/berth-dev/berth/internal/nodepools"
)

// NodePool check names.
const (
	CheckGPUTaint         = "gpu-nodepool-taint"
	CheckGPULimit         = "gpu-nodepool-limit"
	CheckConsolidateAfter = "gpu-nodepool-consolidate-after"
	CheckTrainingExpiry   = "training-nodepool-expiry"
	CheckLatestAMI        = "gpu-nodeclass-latest-ami"
	CheckGeneralPoolGPUs  = "general-nodepool-launches-gpus"
)

// MinConsolidateAfter is the shortest consolidateAfter doctor accepts on a GPU pool: a GPU node
// takes minutes to launch and a model minutes more to load, so a pool that releases an empty
// node sooner pays that cold start again at the next small rise in load.
const MinConsolidateAfter = 10 * time.Minute

// KindEC2NodeClass is the kind of Karpenter's AWS node classes (Snapshot.Unread's key).
const KindEC2NodeClass = "EC2NodeClass"

// gpuPools are the NodePools that can launch GPU nodes.
func gpuPools(s Snapshot) []*karpv1.NodePool {
	var out []*karpv1.NodePool
	for i := range s.NodePools {
		if ok, _ := guard.IsGPUPool(&s.NodePools[i]); ok {
			out = append(out, &s.NodePools[i])
		}
	}
	return out
}

func poolObject(np *karpv1.NodePool) string { return obj("NodePool", "", np.Name) }

// gpuTaints finds GPU pools whose nodes are not tainted nvidia.com/gpu: pods that ask for no GPU
// land on them, fill the CPU and memory GPU pods need, and keep the node from being emptied.
func gpuTaints(s Snapshot) []Finding {
	var out []Finding
	for _, np := range gpuPools(s) {
		key := berthv1alpha1.GPUTaintKey
		if np.Spec.Template.Labels[berthv1alpha1.GPUAllocationLabel] == berthv1alpha1.GPUAllocationDRA {
			// berth's DRA pools carry their own taint: nvidia.com/gpu would let device-plugin
			// pods onto nodes whose device plugin is off (docs/dra.md).
			key = berthv1alpha1.DRAGPUTaintKey
		}
		if slices.ContainsFunc(np.Spec.Template.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key }) {
			continue
		}
		_, why := guard.IsGPUPool(np)
		out = append(out, Finding{Check: CheckGPUTaint, Object: poolObject(np),
			Problem: fmt.Sprintf("GPU NodePool (%s) without a %s taint: pods that ask for no GPU are placed on its nodes, take the CPU and memory GPU pods need and keep them from ever being empty", why, key),
			Fix:     fmt.Sprintf("add spec.template.spec.taints [{key: %s, value: \"true\", effect: NoSchedule}] (GPU pods and the NVIDIA plugins tolerate it; templates: berth nodepools render)", key)})
	}
	return out
}

// gpuLimits finds GPU pools with no limit on nvidia.com/gpu: a runaway ScaledObject or a job
// loop launches GPU instances without bound.
func gpuLimits(s Snapshot) []Finding {
	var out []Finding
	for _, np := range gpuPools(s) {
		if _, ok := np.Spec.Limits[berthv1alpha1.GPUResource]; ok {
			continue
		}
		out = append(out, Finding{Check: CheckGPULimit, Object: poolObject(np),
			Problem: fmt.Sprintf("GPU NodePool without a %s limit: a runaway autoscaler or job loop launches GPU instances until the account's quota stops it", berthv1alpha1.GPUResource),
			Fix:     fmt.Sprintf("set spec.limits.%s to the GPUs this pool may hold (berth nodepools render --gpu-limit)", berthv1alpha1.GPUResource)})
	}
	return out
}

// shortConsolidateAfter finds GPU pools that release an empty node sooner than a GPU node and a
// model take to come back.
func shortConsolidateAfter(s Snapshot) []Finding {
	var out []Finding
	for _, np := range gpuPools(s) {
		d := np.Spec.Disruption.ConsolidateAfter.Duration
		if d == nil || *d >= MinConsolidateAfter {
			continue // Never, or long enough
		}
		out = append(out, Finding{Check: CheckConsolidateAfter, Object: poolObject(np),
			Problem: fmt.Sprintf("GPU NodePool with consolidateAfter %s: an empty GPU node is released before a new one could launch and load a model (minutes each), so every dip in load is paid back with a cold start", d),
			Fix:     fmt.Sprintf("set spec.disruption.consolidateAfter to at least %s (berth's templates: 1h for inference, 4h for training)", MinConsolidateAfter)})
	}
	return out
}

// isTrainingPool reports whether a GPU pool is meant for training: berth's role label, or
// "train" in its name or its nodes' labels.
func isTrainingPool(np *karpv1.NodePool) bool {
	if np.Spec.Template.Labels[berthv1alpha1.NodePoolRoleLabel] == string(nodepools.RoleTraining) {
		return true
	}
	if strings.Contains(strings.ToLower(np.Name), "train") {
		return true
	}
	for _, v := range np.Spec.Template.Labels {
		if strings.Contains(strings.ToLower(v), "train") {
			return true
		}
	}
	return false
}

// trainingExpiry finds training pools whose nodes expire: expiration is forceful in Karpenter v1
// (it waits for neither do-not-disrupt nor PodDisruptionBudgets past the grace period), so a
// multi-day job is killed when its node reaches expireAfter (720h unless set).
func trainingExpiry(s Snapshot) []Finding {
	var out []Finding
	for _, np := range gpuPools(s) {
		d := np.Spec.Template.Spec.ExpireAfter.Duration
		if d == nil || !isTrainingPool(np) {
			continue
		}
		out = append(out, Finding{Check: CheckTrainingExpiry, Object: poolObject(np),
			Problem: fmt.Sprintf("training NodePool whose nodes expire after %s: Karpenter v1 expires nodes forcefully, whatever karpenter.sh/do-not-disrupt says, and kills the gang running there", d),
			Fix:     "set spec.template.spec.expireAfter: Never on training pools and patch nodes by drift between jobs (berth nodepools render --role training)"})
	}
	return out
}

// latestAMIs finds EC2NodeClasses of GPU pools that follow an AMI alias's latest version: every
// AMI release drifts every GPU node, and Karpenter replaces nodes that run inference and
// training to roll it out.
func latestAMIs(s Snapshot) []Finding {
	used := map[string][]string{}
	for _, np := range gpuPools(s) {
		if ref := np.Spec.Template.Spec.NodeClassRef; ref != nil && ref.Kind == KindEC2NodeClass {
			used[ref.Name] = append(used[ref.Name], np.Name)
		}
	}
	var out []Finding
	for i := range s.NodeClasses {
		nc := &s.NodeClasses[i]
		pools := used[nc.Name]
		if len(pools) == 0 {
			continue
		}
		for _, t := range nc.Spec.AMISelectorTerms {
			if !strings.HasSuffix(t.Alias, "@latest") {
				continue
			}
			out = append(out, Finding{Check: CheckLatestAMI, Object: obj(KindEC2NodeClass, "", nc.Name),
				Problem: fmt.Sprintf("amiSelectorTerms alias %s on the node class of GPU NodePool(s) %s: each AMI release drifts every GPU node and Karpenter replaces them, running work included", t.Alias, strings.Join(pools, ", ")),
				Fix:     fmt.Sprintf("pin a release (alias %s@v20251117; berth nodepools render --ami-alias, the chart's nodePools AMI alias) and roll AMIs deliberately", strings.TrimSuffix(t.Alias, "@latest"))})
		}
	}
	return out
}

// generalPoolGPUs finds EC2 NodePools that neither select nor exclude GPU instances: Karpenter
// launches a GPU instance from them for any pod that asks for a GPU, outside the GPU pools'
// taints, limits and consolidation guard.
func generalPoolGPUs(s Snapshot) []Finding {
	var out []Finding
	for i := range s.NodePools {
		np := &s.NodePools[i]
		ref := np.Spec.Template.Spec.NodeClassRef
		if ok, _ := guard.IsGPUPool(np); ok || ref == nil || ref.Group != awsapis.Group || guard.ExcludesGPUs(np) {
			continue
		}
		out = append(out, Finding{Check: CheckGeneralPoolGPUs, Object: poolObject(np),
			Problem: "NodePool that does not exclude GPU instances: a pod asking for a GPU that no GPU pool takes (a missing toleration or selector) gets a GPU node from this pool, without the GPU pools' taint, limit or consolidation guard",
			Fix:     "add the requirement {key: karpenter.k8s.aws/instance-gpu-count, operator: DoesNotExist} (or list non-GPU instance categories) so only the GPU pools launch GPU instances"})
	}
	return out
}
