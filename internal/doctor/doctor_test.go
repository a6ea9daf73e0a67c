package doctor

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

func gpuPodSpec(image string, gpus int64) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image,
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpus, resource.DecimalSI)}}}}}}
}

func scaledObject(name, target string, triggers ...map[string]any) unstructured.Unstructured {
	var ts []any
	for _, t := range triggers {
		ts = append(ts, t)
	}
	u := unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
		"metadata": map[string]any{"name": name, "namespace": "ml"},
		"spec":     map[string]any{"scaleTargetRef": map[string]any{"name": target}, "triggers": ts},
	}}
	return u
}

func prom(query string) map[string]any {
	return map[string]any{"type": "prometheus", "metadata": map[string]any{"serverAddress": "http://prom:9090", "query": query, "threshold": "5"}}
}

func TestChecks(t *testing.T) {
	tests := []struct {
		name string
		snap Snapshot
		want []string // "check object"
	}{
		{
			name: "HPA on DCGM duty cycle",
			snap: Snapshot{HPAs: []autoscalingv2.HorizontalPodAutoscaler{{
				ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "ml"},
				Spec: autoscalingv2.HorizontalPodAutoscalerSpec{ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{Kind: "Deployment", Name: "llm"},
					Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{Metric: autoscalingv2.MetricIdentifier{Name: "DCGM_FI_DEV_GPU_UTIL"}}}}},
			}}},
			want: []string{"gpu-util-autoscaling HorizontalPodAutoscaler ml/llm"},
		},
		{
			name: "CPU HPA is fine",
			snap: Snapshot{HPAs: []autoscalingv2.HorizontalPodAutoscaler{{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ml"},
				Spec: autoscalingv2.HorizontalPodAutoscalerSpec{Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{Name: corev1.ResourceCPU}}}}}}},
		},
		{
			name: "ScaledObject on GPU memory, and an unaggregated vLLM query",
			snap: Snapshot{
				ScaledObjects: []unstructured.Unstructured{
					scaledObject("mem", "a", prom("avg(DCGM_FI_DEV_FB_USED)")),
					scaledObject("raw", "b", prom(`vllm:num_requests_waiting{model_name="llama"}`)),
					scaledObject("good", "c", prom(`sum(vllm:num_requests_waiting{model_name="llama"})`)),
				},
			},
			want: []string{"gpu-util-autoscaling ScaledObject ml/mem", "unaggregated-vllm-query ScaledObject ml/raw"},
		},
		{
			name: "GPU NodePool on WhenEmptyOrUnderutilized; guarded and CPU pools are fine",
			snap: Snapshot{NodePools: []karpv1.NodePool{
				nodePool("gpu", true, nil),
				nodePool("gpu-guarded", true, []karpv1.Budget{{Nodes: "0", Reasons: []karpv1.DisruptionReason{karpv1.DisruptionReasonUnderutilized}}}),
				nodePool("cpu", false, nil),
			}},
			want: []string{"gpu-nodepool-consolidation NodePool gpu"},
		},
		{
			name: "parallel GPU Job without a gang; gang, single-pod and CPU jobs are fine",
			snap: Snapshot{Jobs: []batchv1.Job{
				job("ddp", 4, gpuPodSpec("pytorch", 8)),
				job("gang", 4, withLabel(gpuPodSpec("pytorch", 8), berthv1alpha1.PodGroupLabel, "gang")),
				job("single", 1, gpuPodSpec("pytorch", 8)),
				job("cpu", 4, corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}),
			}},
			want: []string{"gpu-job-without-gang Job ml/ddp"},
		},
		{
			name: "PyTorchJob with GPU workers and no gang",
			snap: Snapshot{GangJobs: []unstructured.Unstructured{{Object: map[string]any{
				"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": map[string]any{"name": "pt", "namespace": "ml"},
				"spec": map[string]any{"pytorchReplicaSpecs": map[string]any{
					"Master": map[string]any{"replicas": int64(1), "template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "resources": map[string]any{"limits": map[string]any{"nvidia.com/gpu": "8"}}}}}}},
					"Worker": map[string]any{"replicas": int64(3), "template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "resources": map[string]any{"limits": map[string]any{"nvidia.com/gpu": "8"}}}}}}},
				}},
			}}}},
			want: []string{"gpu-job-without-gang PyTorchJob ml/pt"},
		},
		{
			name: "vLLM Deployment without a queue scaler; one with berth's scaler is fine",
			snap: Snapshot{
				Deployments:   []appsv1.Deployment{deployment("llm", "vllm/vllm-openai:v0.11.0"), deployment("llm-scaled", "vllm/vllm-openai:v0.11.0"), deployment("web", "nginx")},
				ScaledObjects: []unstructured.Unstructured{berthSO("llm-scaled", "llm-scaled", 1, true, nil)},
			},
			want: []string{"vllm-without-queue-scaler Deployment ml/llm"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, f := range Run(tt.snap).Findings {
				if f.Problem == "" || f.Fix == "" {
					t.Errorf("finding without problem or fix: %+v", f)
				}
				got = append(got, f.Check+" "+f.Object)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
		})
	}
}

func nodePool(name string, gpuPool bool, budgets []karpv1.Budget) karpv1.NodePool {
	np := karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	np.Spec.Disruption.ConsolidationPolicy = karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized
	np.Spec.Disruption.ConsolidateAfter = karpv1.MustParseNillableDuration("1h")
	np.Spec.Disruption.Budgets = budgets
	if gpuPool {
		np.Spec.Template.Spec.Taints = []corev1.Taint{{Key: "nvidia.com/gpu", Effect: corev1.TaintEffectNoSchedule}}
		np.Spec.Limits = karpv1.Limits{"nvidia.com/gpu": resource.MustParse("64")}
	}
	return np
}

// job is a Job of parallelism pods that rendezvous (one completion each, torchrun's MASTER_ADDR).
func job(name string, parallelism int32, tmpl corev1.PodTemplateSpec) batchv1.Job {
	tmpl = *tmpl.DeepCopy()
	for i := range tmpl.Spec.Containers {
		tmpl.Spec.Containers[i].Env = append(tmpl.Spec.Containers[i].Env, corev1.EnvVar{Name: "MASTER_ADDR", Value: name + "-0." + name})
	}
	return batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml"},
		Spec: batchv1.JobSpec{Parallelism: ptr.To(parallelism), Completions: ptr.To(parallelism), Template: tmpl}}
}

func withLabel(t corev1.PodTemplateSpec, k, v string) corev1.PodTemplateSpec {
	t.Labels = map[string]string{k: v}
	return t
}

func deployment(name, image string) appsv1.Deployment {
	tmpl := gpuPodSpec(image, 1)
	if image == "nginx" {
		tmpl = corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image}}}}
	}
	return appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml"}, Spec: appsv1.DeploymentSpec{Template: tmpl}}
}

// TestSkips: a check is skipped on request, or when berth may not list a kind it needs — then
// the report says so and is incomplete; checks that can run still do.
func TestSkips(t *testing.T) {
	s := Snapshot{Unread: map[string]string{KindHPA: "forbidden"}}
	r := Run(s, CheckUnaggregatedQuery)
	got := map[string]string{}
	for _, sk := range r.Skipped {
		got[sk.Check] = sk.Reason
	}
	want := map[string]string{
		CheckUnaggregatedQuery: "skipped on request (--skip)",
		CheckGPUUtilScaling:    "cannot list HorizontalPodAutoscaler (forbidden)",
		CheckVLLMWithoutScaler: "cannot list HorizontalPodAutoscaler (forbidden)",
		CheckResourceScaling:   "cannot list HorizontalPodAutoscaler (forbidden)",
	}
	if !cmp.Equal(want, got) || !r.Incomplete {
		t.Errorf("skipped %v, incomplete %v; want %v, incomplete", got, r.Incomplete, want)
	}
	if r := Run(Snapshot{}, CheckUnaggregatedQuery); r.Incomplete || len(r.Skipped) != 1 {
		t.Errorf("a check skipped on request: %+v; want complete, one skip", r)
	}
	if names := Checks(); len(names) != len(checks) || names[0] != CheckGPUUtilScaling {
		t.Errorf("Checks() = %v", names)
	}
}
