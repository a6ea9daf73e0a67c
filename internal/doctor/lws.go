package doctor

import (
	"fmt"
	"strings"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/gpu"
)

// LeaderWorkerSet check names.
const (
	// CheckLWSGroupFit: a LeaderWorkerSet group no NodePool can hold whole.
	CheckLWSGroupFit = "lws-group-cannot-fit"
	// CheckLWSScaledWithoutBerth: a ScaledObject on a LeaderWorkerSet whose trigger is not
	// berth's scaler.
	CheckLWSScaledWithoutBerth = "lws-scaled-without-berth"
)

// KindLWS is LeaderWorkerSet's kind (Snapshot.Unread's key).
const KindLWS = "LeaderWorkerSet"

// lwsGVK is the LeaderWorkerSet API berth reads (sigs.k8s.io/lws v1).
var lwsGVK = schema.GroupVersionKind{Group: berthv1alpha1.LWSGroup, Version: "v1", Kind: KindLWS}

// lwsGroup is what one group of a LeaderWorkerSet asks for.
type lwsGroup struct {
	size             int64
	leader, worker   corev1.PodTemplateSpec
	leaderGPUs, each int64 // GPUs of the leader and of each worker
}

// readLWSGroup reads a LeaderWorkerSet's group shape (the leader uses the worker template
// when it has none of its own, as LeaderWorkerSet does).
func readLWSGroup(u unstructured.Unstructured) lwsGroup {
	g := lwsGroup{size: 1}
	if n, found, _ := unstructured.NestedInt64(u.Object, "spec", "leaderWorkerTemplate", "size"); found && n > 0 {
		g.size = n
	}
	if m, found, _ := unstructured.NestedMap(u.Object, "spec", "leaderWorkerTemplate", "workerTemplate"); found {
		_ = runtimeConvert(m, &g.worker)
	}
	g.leader = g.worker
	if m, found, _ := unstructured.NestedMap(u.Object, "spec", "leaderWorkerTemplate", "leaderTemplate"); found {
		g.leader = corev1.PodTemplateSpec{}
		_ = runtimeConvert(m, &g.leader)
	}
	g.leaderGPUs, g.each = gpusOf(g.leader.Spec), gpusOf(g.worker.Spec)
	return g
}

// gpus is what the whole group asks for.
func (g lwsGroup) gpus() int64 { return g.leaderGPUs + (g.size-1)*g.each }

// largestGPUs is the most GPUs one node of pool can have: the largest size of the GPU
// families its instance-family requirement allows (every family when it names none).
func largestGPUs(np *karpv1.NodePool) int64 {
	allowed := map[string]bool{}
	for _, r := range np.Spec.Template.Spec.Requirements {
		if r.Key == awsv1.LabelInstanceFamily && r.Operator == corev1.NodeSelectorOpIn {
			for _, v := range r.Values {
				allowed[v] = true
			}
		}
	}
	var most int64
	for _, f := range gpu.GPUFamilies() {
		if len(allowed) > 0 && !allowed[f.Name] {
			continue
		}
		for _, s := range f.Sizes {
			most = max(most, s.GPUs)
		}
	}
	return most
}

// groupFits says why pool cannot hold one whole group ("" when it can).
func groupFits(np *karpv1.NodePool, g lwsGroup) string {
	if limit, ok := np.Spec.Limits[berthv1alpha1.GPUResource]; ok && limit.Value() < g.gpus() {
		return fmt.Sprintf("its %s limit %d is below the %d GPUs of one group (%d pods)", berthv1alpha1.GPUResource, limit.Value(), g.gpus(), g.size)
	}
	if most := largestGPUs(np); most > 0 && max(g.leaderGPUs, g.each) > most {
		return fmt.Sprintf("a pod of the group asks for %d GPUs; its largest instance has %d", max(g.leaderGPUs, g.each), most)
	}
	return ""
}

// lwsGroupsCannotFit finds GPU LeaderWorkerSets whose groups no NodePool they may use can hold
// whole: each group is admitted whole or not at all, so such a group waits for good.
func lwsGroupsCannotFit(s Snapshot) []Finding {
	pools := gpuPools(s)
	var out []Finding
	for _, u := range s.LeaderWorkerSets {
		g := readLWSGroup(u)
		if g.gpus() == 0 || len(pools) == 0 {
			continue
		}
		named := g.leader.Spec.NodeSelector[karpv1.NodePoolLabelKey]
		var why []string
		fits := false
		for _, np := range pools {
			if named != "" && np.Name != named {
				continue
			}
			r := groupFits(np, g)
			if r == "" {
				fits = true
				break
			}
			why = append(why, "NodePool "+np.Name+": "+r)
		}
		if fits || len(why) == 0 {
			continue
		}
		out = append(out, Finding{Check: CheckLWSGroupFit, Object: obj(KindLWS, u.GetNamespace(), u.GetName()),
			Problem: fmt.Sprintf("no NodePool it may use can hold one whole group, and berth admits a group whole or not at all (%s)", strings.Join(why, "; ")),
			Fix:     fmt.Sprintf("raise the pool's %s limit to at least the group's GPUs times the groups you scale to, or allow an instance family with enough GPUs per node (berth nodepools render)", berthv1alpha1.GPUResource)})
	}
	return out
}

// lwsScaledWithoutBerth finds ScaledObjects on LeaderWorkerSets with no trigger at berth's
// scaler: another scaler counts every pod of a group (or none) and reads a leader as serving
// before its workers joined; berth counts one replica per group, ready once all of it is.
func lwsScaledWithoutBerth(s Snapshot) []Finding {
	var out []Finding
	for _, so := range s.ScaledObjects {
		kind, _, _ := unstructured.NestedString(so.Object, "spec", "scaleTargetRef", "kind")
		if kind != KindLWS {
			continue
		}
		berth := false
		for _, tr := range triggers(so) {
			berth = berth || ((tr.kind == "external" || tr.kind == "external-push") && berthTrigger(tr))
		}
		if berth {
			continue
		}
		target, _, _ := unstructured.NestedString(so.Object, "spec", "scaleTargetRef", "name")
		out = append(out, Finding{Check: CheckLWSScaledWithoutBerth, Object: obj(scaledObjectKind, so.GetNamespace(), so.GetName()),
			Problem: fmt.Sprintf("scales LeaderWorkerSet %s on a trigger that is not berth's: it does not know a group is one replica served by its leader, nor that a group is still starting until every pod of it is ready", target),
			Fix:     "use an external-push trigger at berth's scaler (docs/multi-node-inference.md): it reads each group's leader and counts a group once all of it is ready"})
	}
	return out
}
