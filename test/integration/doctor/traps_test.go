package doctor_test

import (
	"context"
	"sort"
	"testing"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/doctor"
	"github.com/berth-dev/berth/test/rigtest"
)

// trapsNS holds the namespaced objects of TestDoctorFindsTrapsNotLookalikes.
const trapsNS = "traps"

func gpuDeployment(name, image string) *appsv1.Deployment {
	tmpl := gpuTemplate(image, 1)
	tmpl.Labels = map[string]string{"app": name}
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyAlways
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: trapsNS},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}, Template: tmpl}}
}

func hpa(name, target string, m autoscalingv2.MetricSpec) *autoscalingv2.HorizontalPodAutoscaler {
	return &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: trapsNS}, Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
		ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: target},
		MinReplicas:    ptr.To[int32](1), MaxReplicas: 8, Metrics: []autoscalingv2.MetricSpec{m}}}
}

// berthScaledObject scales target through berth's scaler from minReplicas, with a fallback
// when fallback is set and extra trigger metadata.
func berthScaledObject(name, target string, minReplicas int64, fallback bool, extra map[string]any) *unstructured.Unstructured {
	md := map[string]any{"scalerAddress": "berth-scaler.berth-system:9090", "targetQueueDepth": "4"}
	for k, v := range extra {
		md[k] = v
	}
	spec := map[string]any{"scaleTargetRef": map[string]any{"name": target}, "minReplicaCount": minReplicas,
		"triggers": []any{map[string]any{"type": "external-push", "metadata": md}}}
	if fallback {
		spec["fallback"] = map[string]any{"failureThreshold": int64(3), "replicas": int64(2)}
	}
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
		"metadata": map[string]any{"name": name, "namespace": trapsNS}, "spec": spec}}
}

func gpuJob(name string, parallelism int32, completions *int32, mutate func(*batchv1.Job)) *batchv1.Job {
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: trapsNS}, Spec: batchv1.JobSpec{
		Parallelism: ptr.To(parallelism), Completions: completions, Template: gpuTemplate("pytorch/pytorch", 1)}}
	if mutate != nil {
		mutate(j)
	}
	return j
}

// ec2NodePool is a NodePool on EC2NodeClass nodeClass with requirements reqs; gpu gives it
// what doctor asks of a GPU pool (taint, limit, WhenEmpty after 1h).
func ec2NodePool(name, nodeClass string, gpu bool, reqs ...karpv1.NodeSelectorRequirementWithMinValues) *karpv1.NodePool {
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: karpv1.NodePoolSpec{
		Template: karpv1.NodeClaimTemplate{Spec: karpv1.NodeClaimTemplateSpec{
			NodeClassRef: &karpv1.NodeClassReference{Group: "karpenter.k8s.aws", Kind: "EC2NodeClass", Name: nodeClass},
			Requirements: reqs,
		}},
		Disruption: karpv1.Disruption{ConsolidationPolicy: karpv1.ConsolidationPolicyWhenEmpty, ConsolidateAfter: karpv1.MustParseNillableDuration("1h"),
			Budgets: []karpv1.Budget{{Nodes: "10%"}}},
	}}
	if gpu {
		np.Spec.Template.Spec.Taints = []corev1.Taint{{Key: berthv1alpha1.GPUResource, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
		np.Spec.Limits = karpv1.Limits{berthv1alpha1.GPUResource: resource.MustParse("64")}
	}
	return np
}

func gpuFamily(families ...string) karpv1.NodeSelectorRequirementWithMinValues {
	return karpv1.NodeSelectorRequirementWithMinValues{Key: awsv1.LabelInstanceFamily, Operator: corev1.NodeSelectorOpIn, Values: families}
}

func ec2NodeClass(name, alias string) *unstructured.Unstructured {
	tags := map[string]any{"karpenter.sh/discovery": "rig"}
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{"role": "KarpenterNodeRole-rig", "amiSelectorTerms": []any{map[string]any{"alias": alias}},
			"subnetSelectorTerms": []any{map[string]any{"tags": tags}}, "securityGroupSelectorTerms": []any{map[string]any{"tags": tags}}}}}
}

// karpenterDeployment is Karpenter's controller as its chart installs it, with env.
func karpenterDeployment(env ...corev1.EnvVar) *appsv1.Deployment {
	labels := map[string]string{berthv1alpha1.NameLabel: "karpenter", "app.kubernetes.io/instance": "karpenter"}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "karpenter", Namespace: "karpenter", Labels: labels}, Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "controller", Image: "public.ecr.aws/karpenter/controller:1.15.0", Env: env}}}}}}
}

// TestDoctorFindsTrapsNotLookalikes seeds one object per doctor v2 check next to a look-alike
// it must pass — a prometheus-adapter HPA on a vLLM metric, a sharded batch Job, a pool that
// excludes GPUs, a pinned AMI, a ScaledObject with a fallback and a demand at zero — and reads
// them through the API as `berth doctor -n traps` does; then sets Karpenter right and sees its
// findings go.
func TestDoctorFindsTrapsNotLookalikes(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	for _, ns := range []string{trapsNS, "karpenter"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	training := ec2NodePool("trap-training", "pinned", true, gpuFamily("p5"))
	training.Spec.Template.Labels = map[string]string{berthv1alpha1.NodePoolRoleLabel: "training"}
	// What a manifest without expireAfter gets (the CRD's default); the typed client would send Never.
	training.Spec.Template.Spec.ExpireAfter = karpv1.MustParseNillableDuration("720h")
	bare := ec2NodePool("trap-gpu", "latest", false, gpuFamily("p5"))
	bare.Spec.Disruption.ConsolidateAfter = karpv1.MustParseNillableDuration("30s")
	fine := ec2NodePool("fine-gpu", "pinned", true, gpuFamily("p5", "g6"))
	fine.Spec.Template.Spec.ExpireAfter = karpv1.MustParseNillableDuration("720h") // inference: expiring is fine
	cluster := []client.Object{
		training, bare, fine,
		ec2NodePool("trap-general", "pinned", false, karpv1.NodeSelectorRequirementWithMinValues{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"amd64"}}),
		ec2NodePool("fine-general", "pinned", false, karpv1.NodeSelectorRequirementWithMinValues{Key: awsv1.LabelInstanceGPUCount, Operator: corev1.NodeSelectorOpDoesNotExist}),
		ec2NodeClass("latest", "al2023@latest"), ec2NodeClass("pinned", "al2023@v20251117"),
		karpenterDeployment(corev1.EnvVar{Name: "FEATURE_GATES", Value: "ReservedCapacity=true,NodeRepair=false"}),
	}
	objs := []client.Object{
		gpuDeployment("llm", "vllm/vllm-openai:v0.11.0"),
		hpa("llm-cpu", "llm", autoscalingv2.MetricSpec{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
			Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](70)}}}),
		hpa("llm-adapter", "llm", autoscalingv2.MetricSpec{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{
			Metric: autoscalingv2.MetricIdentifier{Name: "vllm_num_requests_waiting"},
			Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: ptr.To(resource.MustParse("4"))}}}),
		gpuDeployment("sgl", "lmsysorg/sglang:v0.5.3"),
		berthScaledObject("sgl", "sgl", 0, false, nil),
		gpuDeployment("sgl-ok", "lmsysorg/sglang:v0.5.3"),
		berthScaledObject("sgl-ok", "sgl-ok", 0, true, map[string]any{"demandPreset": "endpoint-picker", "inferencePool": "sgl-ok"}),
		gpuJob("queue", 4, nil, nil),
		gpuJob("shards", 4, ptr.To[int32](4), func(j *batchv1.Job) { j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion) }),
		gpuJob("torchrun", 2, ptr.To[int32](2), func(j *batchv1.Job) {
			j.Spec.Template.Spec.Containers[0].Command = []string{"torchrun", "--nnodes=2", "train.py"}
		}),
		&resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "gpu", Namespace: trapsNS}, Spec: resourcev1.ResourceClaimTemplateSpec{
			Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpu",
				Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.nvidia.com"}}}}}}},
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-watched"}}
	// Everything goes at the end (the rig runs no namespace controller): the other tests read
	// every namespace and the cluster-wide kinds.
	t.Cleanup(func() {
		for _, o := range append(append(cluster, node), objs...) {
			// Background: a Job's default (orphan) adds a finalizer only the garbage collector removes.
			if err := c.Delete(ctx, o, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
				t.Error(err)
			}
		}
	})
	for _, o := range append(append([]client.Object{node}, cluster...), objs...) {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
	// berth's agent reports on the node.
	node.Status.Conditions = []corev1.NodeCondition{{Type: berthv1alpha1.NodeConditionGPUDegraded, Status: corev1.ConditionFalse,
		Reason: berthv1alpha1.ReasonGPUsHealthy, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if err := c.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}

	want := []string{
		doctor.CheckResourceScaling + " HorizontalPodAutoscaler traps/llm-cpu",
		doctor.CheckGeneralPoolGPUs + " NodePool trap-general",
		doctor.CheckJobWithoutGang + " Job traps/torchrun",
		doctor.CheckLatestAMI + " EC2NodeClass latest",
		doctor.CheckConsolidateAfter + " NodePool trap-gpu",
		doctor.CheckGPULimit + " NodePool trap-gpu",
		doctor.CheckGPUTaint + " NodePool trap-gpu",
		doctor.CheckKarpenterIgnoresDRA + " Deployment karpenter/karpenter",
		doctor.CheckKarpenterNodeRepair + " Deployment karpenter/karpenter",
		doctor.CheckZeroWithoutDemand + " ScaledObject traps/sgl",
		doctor.CheckNoFallback + " ScaledObject traps/sgl",
		doctor.CheckTrainingExpiry + " NodePool trap-training",
	}
	sort.Strings(want)
	if diff := cmp.Diff(want, findings(t, "-n", trapsNS)); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}

	// Karpenter set right: DRA requests simulated, NodeRepair on — its findings go.
	var karp appsv1.Deployment
	if err := c.Get(ctx, client.ObjectKey{Namespace: "karpenter", Name: "karpenter"}, &karp); err != nil {
		t.Fatal(err)
	}
	karp.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "FEATURE_GATES", Value: "NodeRepair=true"}, {Name: "IGNORE_DRA_REQUESTS", Value: "false"}}
	if err := c.Update(ctx, &karp); err != nil {
		t.Fatal(err)
	}
	got := findings(t, "-n", trapsNS)
	for _, f := range got {
		if f == doctor.CheckKarpenterIgnoresDRA+" Deployment karpenter/karpenter" || f == doctor.CheckKarpenterNodeRepair+" Deployment karpenter/karpenter" {
			t.Errorf("with Karpenter set right, still %q", f)
		}
	}
	if len(got) != len(want)-2 {
		t.Errorf("with Karpenter set right: %v", got)
	}
}

// TestDoctorInstallFindsGPUNodesWithoutAgent: `berth doctor --install` names each GPU node
// (allocatable nvidia.com/gpu) where berth's agent has not reported within doctor.AgentStale —
// never, or too long ago — and passes nodes it watches and nodes without GPUs.
func TestDoctorInstallFindsGPUNodesWithoutAgent(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	withGPUs := func(name string, heartbeat *metav1.Time) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := c.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(ctx, n) })
		n.Status.Capacity = corev1.ResourceList{berthv1alpha1.GPUResource: resource.MustParse("8")}
		n.Status.Allocatable = n.Status.Capacity
		if heartbeat != nil {
			n.Status.Conditions = []corev1.NodeCondition{{Type: berthv1alpha1.NodeConditionGPUDegraded, Status: corev1.ConditionFalse,
				Reason: berthv1alpha1.ReasonGPUsHealthy, LastHeartbeatTime: *heartbeat, LastTransitionTime: *heartbeat}}
		}
		if name == "cpu-only" {
			n.Status.Capacity, n.Status.Allocatable = nil, nil
		}
		if err := c.Status().Update(ctx, n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	now := metav1.Now()
	stale := metav1.NewTime(now.Add(-2 * doctor.AgentStale))
	withGPUs("gpu-watched", &now)
	withGPUs("gpu-unwatched", nil)
	withGPUs("gpu-agent-gone", &stale)
	withGPUs("cpu-only", nil)
	skip := doctor.CheckInstallCRD + "," + doctor.CheckInstallWebhook + "," + doctor.CheckInstallLeader
	got := findings(t, "--install", "-n", "default", "--skip", skip)
	want := []string{doctor.CheckInstallAgent + " Node gpu-agent-gone", doctor.CheckInstallAgent + " Node gpu-unwatched"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
}
