package doctor

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// lwsObject is a LeaderWorkerSet of groups of size pods with gpus each, on pool ("" any).
func lwsObject(name string, size, gpus int64, pool string) unstructured.Unstructured {
	spec := map[string]any{"containers": []any{map[string]any{"name": "vllm", "image": "vllm/vllm-openai",
		"resources": map[string]any{"limits": map[string]any{berthv1alpha1.GPUResource: resource.NewQuantity(gpus, resource.DecimalSI).String()}}}}}
	if pool != "" {
		spec["nodeSelector"] = map[string]any{karpv1.NodePoolLabelKey: pool}
	}
	return unstructured.Unstructured{Object: map[string]any{"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
		"metadata": map[string]any{"name": name, "namespace": "serving"},
		"spec":     map[string]any{"leaderWorkerTemplate": map[string]any{"size": size, "workerTemplate": map[string]any{"spec": spec}}}}}
}

// gpuPool is a GPU NodePool of one EC2 family with a GPU limit (0: none).
func gpuPool(name, family string, limit int64) karpv1.NodePool {
	np := karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	np.Spec.Template.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{{Key: "karpenter.k8s.aws/instance-family", Operator: corev1.NodeSelectorOpIn, Values: []string{family}}}
	np.Spec.Template.Spec.Taints = []corev1.Taint{{Key: berthv1alpha1.GPUResource, Effect: corev1.TaintEffectNoSchedule}}
	if limit > 0 {
		np.Spec.Limits = karpv1.Limits{berthv1alpha1.GPUResource: *resource.NewQuantity(limit, resource.DecimalSI)}
	}
	return np
}

func TestLWSGroupsCannotFit(t *testing.T) {
	pools := []karpv1.NodePool{gpuPool("h100", "p5", 16), gpuPool("l4", "g6", 64)}
	for _, tc := range []struct {
		name string
		lws  unstructured.Unstructured
		want string // "" no finding, else a fragment of the problem
	}{
		{"two 8-GPU pods in a 16-GPU pool", lwsObject("fits", 2, 8, "h100"), ""},
		{"three 8-GPU pods over the pool's limit", lwsObject("big", 3, 8, "h100"), "limit 16 is below the 24 GPUs"},
		{"8-GPU pods on a pool whose largest node has fewer", lwsObject("wide", 2, 16, "l4"), "asks for 16 GPUs; its largest instance has 8"},
		{"no pool named: one that can hold it is enough", lwsObject("any", 4, 8, ""), ""},
		{"no GPUs: not checked", lwsObject("cpu", 4, 0, "h100"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []Finding
			for _, f := range Run(Snapshot{NodePools: pools, LeaderWorkerSets: []unstructured.Unstructured{tc.lws}}).Findings {
				if f.Check == CheckLWSGroupFit {
					got = append(got, f)
				}
			}
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("unexpected finding %+v", got[0])
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0].Problem, tc.want)):
				t.Errorf("findings %+v, want one saying %q", got, tc.want)
			}
		})
	}
}

func TestLWSScaledWithoutBerth(t *testing.T) {
	so := func(name, kind string, trig map[string]any) unstructured.Unstructured {
		return unstructured.Unstructured{Object: map[string]any{"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
			"metadata": map[string]any{"name": name, "namespace": "serving"},
			"spec": map[string]any{"scaleTargetRef": map[string]any{"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": kind, "name": name},
				"triggers": []any{trig}}}}
	}
	berth := map[string]any{"type": "external-push", "metadata": map[string]any{"scalerAddress": "berth-scaler.berth-system:9090", "targetQueueDepth": "4"}}
	prom := map[string]any{"type": "prometheus", "metadata": map[string]any{"query": "sum(vllm:num_requests_waiting)", "threshold": "4"}}
	s := Snapshot{ScaledObjects: []unstructured.Unstructured{so("ok", "LeaderWorkerSet", berth), so("prom", "LeaderWorkerSet", prom), so("dep", "Deployment", prom)}}
	var got []string
	for _, f := range Run(s).Findings {
		if f.Check == CheckLWSScaledWithoutBerth {
			got = append(got, f.Object)
		}
	}
	if strings.Join(got, ",") != "ScaledObject serving/prom" {
		t.Errorf("findings on %v, want only ScaledObject serving/prom", got)
	}
}
