package doctor

import (
	"testing"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// findingsOf runs every check on s: "check object" per finding.
func findingsOf(t *testing.T, s Snapshot) []string {
	t.Helper()
	var got []string
	for _, f := range Run(s).Findings {
		if f.Problem == "" || f.Fix == "" {
			t.Errorf("finding without problem or fix: %+v", f)
		}
		got = append(got, f.Check+" "+f.Object)
	}
	return got
}

func hpaOn(name, target string, metrics ...autoscalingv2.MetricSpec) autoscalingv2.HorizontalPodAutoscaler {
	return autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{Kind: "Deployment", Name: target}, Metrics: metrics}}
}

func resourceMetric(r corev1.ResourceName) autoscalingv2.MetricSpec {
	return autoscalingv2.MetricSpec{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{Name: r}}
}

func podsMetric(name string) autoscalingv2.MetricSpec {
	return autoscalingv2.MetricSpec{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{Metric: autoscalingv2.MetricIdentifier{Name: name}}}
}

// berthSO is a ScaledObject of target with berth's trigger (metadata extra), minReplicaCount
// min and a fallback when fallback is set.
func berthSO(name, target string, min int64, fallback bool, extra map[string]any) unstructured.Unstructured {
	md := map[string]any{"scalerAddress": "berth-scaler.berth-system:9090", "targetQueueDepth": "4"}
	for k, v := range extra {
		md[k] = v
	}
	u := scaledObject(name, target, map[string]any{"type": "external-push", "metadata": md})
	_ = unstructured.SetNestedField(u.Object, min, "spec", "minReplicaCount")
	if fallback {
		_ = unstructured.SetNestedMap(u.Object, map[string]any{"failureThreshold": int64(3), "replicas": int64(2)}, "spec", "fallback")
	}
	return u
}

func TestScalingChecks(t *testing.T) {
	deps := []appsv1.Deployment{deployment("llm", "vllm/vllm-openai:v0.11.0"), deployment("sgl", "lmsysorg/sglang:v0.5"), deployment("web", "nginx")}
	tests := []struct {
		name string
		snap Snapshot
		want []string
	}{
		{
			name: "CPU and memory on GPU servers; CPU on a web Deployment is fine",
			snap: Snapshot{Deployments: deps,
				HPAs: []autoscalingv2.HorizontalPodAutoscaler{hpaOn("llm-cpu", "llm", resourceMetric(corev1.ResourceCPU)), hpaOn("web", "web", resourceMetric(corev1.ResourceCPU))},
				ScaledObjects: []unstructured.Unstructured{
					scaledObject("sgl-mem", "sgl", map[string]any{"type": "memory", "metadata": map[string]any{"value": "80"}}),
				}},
			want: []string{"cpu-memory-autoscaling HorizontalPodAutoscaler ml/llm-cpu", "cpu-memory-autoscaling ScaledObject ml/sgl-mem",
				"vllm-without-queue-scaler Deployment ml/llm", "vllm-without-queue-scaler Deployment ml/sgl"},
		},
		{
			name: "prometheus-adapter HPA on a vLLM metric scales the Deployment; KEDA's own HPA is the ScaledObject's",
			snap: Snapshot{Deployments: deps[:1], HPAs: []autoscalingv2.HorizontalPodAutoscaler{
				hpaOn("llm", "llm", podsMetric("vllm_num_requests_waiting")),
				func() autoscalingv2.HorizontalPodAutoscaler {
					h := hpaOn("keda-hpa-x", "llm", resourceMetric(corev1.ResourceCPU))
					h.OwnerReferences = []metav1.OwnerReference{{APIVersion: "keda.sh/v1alpha1", Kind: "ScaledObject", Name: "x"}}
					return h
				}(),
			}},
		},
		{
			name: "no fallback; fallback set; a web Deployment's ScaledObject is not checked",
			snap: Snapshot{Deployments: deps, ScaledObjects: []unstructured.Unstructured{
				berthSO("bare", "llm", 1, false, nil), berthSO("safe", "sgl", 1, true, nil), berthSO("web", "web", 1, false, nil)}},
			want: []string{"scaledobject-without-fallback ScaledObject ml/bare"},
		},
		{
			name: "to zero on the replicas' own metrics; a demand query, a router metric or a queue sees zero",
			snap: Snapshot{Deployments: []appsv1.Deployment{deployment("a", "vllm/vllm-openai"), deployment("b", "vllm/vllm-openai"),
				deployment("c", "vllm/vllm-openai"), deployment("d", "vllm/vllm-openai"), deployment("e", "vllm/vllm-openai"), deployment("f", "vllm/vllm-openai")},
				ScaledObjects: []unstructured.Unstructured{
					berthSO("a", "a", 0, true, nil),
					berthSO("b", "b", 0, true, map[string]any{"demandPreset": "endpoint-picker", "inferencePool": "pool"}),
					func() unstructured.Unstructured {
						u := scaledObject("c", "c", prom(`sum(vllm:num_requests_waiting{model_name="m"})`)) // minReplicaCount unset: KEDA's 0
						_ = unstructured.SetNestedMap(u.Object, map[string]any{"replicas": int64(1)}, "spec", "fallback")
						return u
					}(),
					func() unstructured.Unstructured {
						u := scaledObject("d", "d", prom(`sum(rate(vllm:num_incoming_requests_total{model="m"}[1m]))`))
						_ = unstructured.SetNestedMap(u.Object, map[string]any{"replicas": int64(1)}, "spec", "fallback")
						return u
					}(),
					func() unstructured.Unstructured {
						u := scaledObject("e", "e", map[string]any{"type": "aws-sqs-queue", "metadata": map[string]any{"queueURL": "q"}})
						_ = unstructured.SetNestedMap(u.Object, map[string]any{"replicas": int64(1)}, "spec", "fallback")
						return u
					}(),
					berthSO("f", "f", 2, true, nil),
				}},
			want: []string{"scale-to-zero-without-demand ScaledObject ml/a", "scale-to-zero-without-demand ScaledObject ml/c"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, findingsOf(t, tt.snap)); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
		})
	}
}

// ec2Pool is an EC2 NodePool with requirements reqs (key, operator, values...).
func ec2Pool(name string, reqs ...karpv1.NodeSelectorRequirementWithMinValues) karpv1.NodePool {
	np := karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: "karpenter.k8s.aws", Kind: "EC2NodeClass", Name: name}
	np.Spec.Template.Spec.Requirements = reqs
	np.Spec.Disruption.ConsolidationPolicy = karpv1.ConsolidationPolicyWhenEmpty
	np.Spec.Disruption.ConsolidateAfter = karpv1.MustParseNillableDuration("1h")
	return np
}

func req(key string, op corev1.NodeSelectorOperator, values ...string) karpv1.NodeSelectorRequirementWithMinValues {
	return karpv1.NodeSelectorRequirementWithMinValues{Key: key, Operator: op, Values: values}
}

func TestNodePoolChecks(t *testing.T) {
	good := nodePool("good", true, nil)
	good.Spec.Disruption.ConsolidationPolicy = karpv1.ConsolidationPolicyWhenEmpty
	noTaint := ec2Pool("no-taint", req(awsv1.LabelInstanceFamily, corev1.NodeSelectorOpIn, "p5"))
	noTaint.Spec.Limits = karpv1.Limits{berthv1alpha1.GPUResource: good.Spec.Limits[berthv1alpha1.GPUResource]}
	noLimit := nodePool("no-limit", true, nil)
	noLimit.Spec.Disruption.ConsolidationPolicy = karpv1.ConsolidationPolicyWhenEmpty
	noLimit.Spec.Limits = nil
	quick := nodePool("quick", true, nil)
	quick.Spec.Disruption.ConsolidationPolicy = karpv1.ConsolidationPolicyWhenEmpty
	quick.Spec.Disruption.ConsolidateAfter = karpv1.MustParseNillableDuration("30s")
	training := nodePool("gpu-h100-training", true, nil)
	training.Spec.Disruption.ConsolidationPolicy = karpv1.ConsolidationPolicyWhenEmpty
	training.Spec.Template.Spec.ExpireAfter = karpv1.MustParseNillableDuration("720h")
	trainingNever := nodePool("gpu-a100-training", true, nil)
	trainingNever.Spec.Disruption.ConsolidationPolicy = karpv1.ConsolidationPolicyWhenEmpty
	trainingNever.Spec.Template.Spec.ExpireAfter = karpv1.MustParseNillableDuration("Never")
	inference := nodePool("inference", true, nil) // expiring inference nodes are fine
	inference.Spec.Disruption.ConsolidationPolicy = karpv1.ConsolidationPolicyWhenEmpty
	inference.Spec.Template.Spec.ExpireAfter = karpv1.MustParseNillableDuration("720h")
	latest := nodePool("latest", true, nil)
	latest.Spec.Disruption.ConsolidationPolicy = karpv1.ConsolidationPolicyWhenEmpty
	latest.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: "karpenter.k8s.aws", Kind: "EC2NodeClass", Name: "gpu-latest"}
	// berth's DRA pools carry their own taint (nodepools render --dra); nvidia.com/gpu on one is
	// the finding, not the lack of it.
	draGood := nodePool("dra-good", true, nil)
	draGood.Spec.Disruption.ConsolidationPolicy = karpv1.ConsolidationPolicyWhenEmpty
	draGood.Spec.Template.Labels = map[string]string{berthv1alpha1.GPUAllocationLabel: berthv1alpha1.GPUAllocationDRA}
	draGood.Spec.Template.Spec.Taints = []corev1.Taint{{Key: berthv1alpha1.DRAGPUTaintKey, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	draWrong := *draGood.DeepCopy()
	draWrong.Name = "dra-wrong"
	draWrong.Spec.Template.Spec.Taints = []corev1.Taint{{Key: berthv1alpha1.GPUTaintKey, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	snap := Snapshot{
		NodePools: []karpv1.NodePool{good, noTaint, noLimit, quick, training, trainingNever, inference, latest, draGood, draWrong,
			ec2Pool("general"),
			ec2Pool("general-no-gpu-count", req(awsv1.LabelInstanceGPUCount, corev1.NodeSelectorOpDoesNotExist)),
			ec2Pool("general-cmr", req(awsv1.LabelInstanceCategory, corev1.NodeSelectorOpIn, "c", "m", "r")),
		},
		NodeClasses: []awsv1.EC2NodeClass{
			{ObjectMeta: metav1.ObjectMeta{Name: "gpu-latest"}, Spec: awsv1.EC2NodeClassSpec{AMISelectorTerms: []awsv1.AMISelectorTerm{{Alias: "al2023@latest"}}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "general"}, Spec: awsv1.EC2NodeClassSpec{AMISelectorTerms: []awsv1.AMISelectorTerm{{Alias: "al2023@latest"}}}}, // no GPU pool uses it
			{ObjectMeta: metav1.ObjectMeta{Name: "no-taint"}, Spec: awsv1.EC2NodeClassSpec{AMISelectorTerms: []awsv1.AMISelectorTerm{{Alias: "al2023@v20251117"}}}},
		},
	}
	want := []string{
		"general-nodepool-launches-gpus NodePool general",
		"gpu-nodeclass-latest-ami EC2NodeClass gpu-latest",
		"gpu-nodepool-consolidate-after NodePool quick",
		"gpu-nodepool-limit NodePool no-limit",
		"gpu-nodepool-taint NodePool dra-wrong",
		"gpu-nodepool-taint NodePool no-taint",
		"training-nodepool-expiry NodePool gpu-h100-training",
	}
	if diff := cmp.Diff(want, findingsOf(t, snap)); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
}

func karpenterDeployment(env ...corev1.EnvVar) appsv1.Deployment {
	return appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "karpenter", Namespace: "kube-system"}, Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "controller", Image: "public.ecr.aws/karpenter/controller:1.15.0", Env: env}}}}}}
}

func TestKarpenterChecks(t *testing.T) {
	agentNode := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: berthv1alpha1.NodeConditionGPUDegraded, Status: corev1.ConditionFalse}}}}
	plainNode := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cpu-1"}}
	tests := []struct {
		name string
		snap Snapshot
		want []string
	}{
		{"defaults, DRA claims, berth's agent", Snapshot{Karpenter: []appsv1.Deployment{karpenterDeployment(corev1.EnvVar{Name: "FEATURE_GATES", Value: "ReservedCapacity=true,NodeRepair=false"})},
			ResourceClaims: []string{"ResourceClaimTemplate ml/gpu"}, Nodes: []corev1.Node{agentNode, plainNode}},
			[]string{"karpenter-ignores-dra Deployment kube-system/karpenter", "karpenter-node-repair-off Deployment kube-system/karpenter"}},
		{"set right", Snapshot{Karpenter: []appsv1.Deployment{karpenterDeployment(corev1.EnvVar{Name: "FEATURE_GATES", Value: "NodeRepair=true"}, corev1.EnvVar{Name: "IGNORE_DRA_REQUESTS", Value: "false"})},
			ResourceClaims: []string{"ResourceClaimTemplate ml/gpu"}, Nodes: []corev1.Node{agentNode}}, nil},
		{"flags win over the environment", Snapshot{Karpenter: []appsv1.Deployment{func() appsv1.Deployment {
			d := karpenterDeployment(corev1.EnvVar{Name: "IGNORE_DRA_REQUESTS", Value: "true"})
			d.Spec.Template.Spec.Containers[0].Args = []string{"--ignore-dra-requests=false", "--feature-gates=NodeRepair=true"}
			return d
		}()}, ResourceClaims: []string{"ResourceClaim ml/x"}, Nodes: []corev1.Node{agentNode}}, nil},
		{"no DRA, no agent: nothing to say", Snapshot{Karpenter: []appsv1.Deployment{karpenterDeployment()}, Nodes: []corev1.Node{plainNode}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, findingsOf(t, tt.snap)); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEmbarrassinglyParallelJobsNeedNoGang: pods that never talk to each other (a work queue,
// more completions than pods, a batch with no rendezvous) may start one by one; pods that
// rendezvous (Indexed with a subdomain, torchrun, MPI) may not.
func TestEmbarrassinglyParallelJobsNeedNoGang(t *testing.T) {
	plain := gpuPodSpec("batch-infer", 1)
	indexed := func(name string, subdomain string) batchv1.Job {
		tmpl := *plain.DeepCopy()
		tmpl.Spec.Subdomain = subdomain
		return batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml"}, Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](4), Completions: ptr.To[int32](4),
			CompletionMode: ptr.To(batchv1.IndexedCompletion), Template: tmpl}}
	}
	launcher := func(name string, cmd ...string) batchv1.Job {
		tmpl := *plain.DeepCopy()
		tmpl.Spec.Containers[0].Command = cmd
		return batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml"}, Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](2), Completions: ptr.To[int32](2), Template: tmpl}}
	}
	workQueue := batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "queue", Namespace: "ml"}, Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](8), Template: plain}}
	waves := job("waves", 4, plain)
	waves.Spec.Completions = ptr.To[int32](100)
	snap := Snapshot{Jobs: []batchv1.Job{
		workQueue, waves, indexed("shards", ""), launcher("batch", "python", "infer.py"),
		indexed("ddp", "ddp"), launcher("torchrun", "torchrun", "--nnodes=2", "train.py"), launcher("mpi", "mpirun", "-np", "16", "train"),
	}}
	want := []string{"gpu-job-without-gang Job ml/ddp", "gpu-job-without-gang Job ml/mpi", "gpu-job-without-gang Job ml/torchrun"}
	if diff := cmp.Diff(want, findingsOf(t, snap)); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
}
