// Package doctor_test runs `berth doctor` against a real kube-apiserver (with Karpenter's CRDs)
// seeded with the set-ups it must find, and with a clean namespace it must pass.
package doctor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/cli"
	"github.com/berth-dev/berth/internal/doctor"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/rigtest"
)

func TestMain(m *testing.M) {
	rigtest.Main(m, rig.Options{}, func(ctx context.Context, r *rig.Rig) error {
		if err := rigtest.InstallBerthCRDs(ctx, r); err != nil {
			return err
		}
		// Karpenter's with the AWS provider's EC2NodeClass (AMI checks), and KEDA's.
		if err := rigtest.InstallKarpenterAWSCRDs(ctx, r); err != nil {
			return err
		}
		return rigtest.InstallToolCRDs(ctx, r, rigtest.CRDsKEDA)
	})
}

func gpuTemplate(image string, gpus int64) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: image,
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{berthv1alpha1.GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)}}}}},
	}
}

// seed creates one object for every check (in namespace "sick") that `berth doctor` reads
// through the API.
func seed(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	c := rigtest.Current().Client
	for _, ns := range []string{"sick", "healthy"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "llama", Namespace: "sick"}, Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}, Template: gpuTemplate("vllm/vllm-openai:v0.11.0", 1)}}
	dep.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
	hpa := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: "llama", Namespace: "sick"}, Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
		ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "llama"},
		MinReplicas:    ptr.To[int32](1), MaxReplicas: 8,
		Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{
			Metric: autoscalingv2.MetricIdentifier{Name: "DCGM_FI_DEV_GPU_UTIL"},
			Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: ptr.To(resource.MustParse("80"))}}}},
	}}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "ddp", Namespace: "sick"}, Spec: batchv1.JobSpec{
		Parallelism: ptr.To[int32](4), Completions: ptr.To[int32](4), Template: gpuTemplate("pytorch/pytorch", 8)}}
	job.Spec.Template.Spec.Containers[0].Command = []string{"torchrun", "--nnodes=4", "train.py"}
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "gpu-doctor"}, Spec: karpv1.NodePoolSpec{
		Template: karpv1.NodeClaimTemplate{Spec: karpv1.NodeClaimTemplateSpec{
			NodeClassRef: &karpv1.NodeClassReference{Group: "karpenter.k8s.aws", Kind: "EC2NodeClass", Name: "default"},
			Requirements: []karpv1.NodeSelectorRequirementWithMinValues{{Key: awsv1.LabelInstanceFamily, Operator: corev1.NodeSelectorOpIn, Values: []string{"p5"}}},
		}},
		Disruption: karpv1.Disruption{ConsolidationPolicy: karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized, ConsolidateAfter: karpv1.MustParseNillableDuration("0s"),
			Budgets: []karpv1.Budget{{Nodes: "10%"}}},
	}}
	healthy := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "single", Namespace: "healthy"}, Spec: batchv1.JobSpec{Template: gpuTemplate("pytorch/pytorch", 8)}}
	for _, o := range []client.Object{dep, hpa, job, np, healthy} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}

// doctorCmd runs `berth doctor` with args and returns its output and error.
func doctorCmd(args ...string) (string, error) {
	root := cli.NewRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"doctor", "--kubeconfig=" + rigtest.Current().Kubeconfig}, args...))
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// findings runs `berth doctor -o json` with args and returns "check object" per finding,
// sorted: an empty, non-nil list when the command found nothing and succeeded.
func findings(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := doctorCmd(append([]string{"-o", "json"}, args...)...)
	if err != nil && !errors.Is(err, cli.ErrFindings) {
		t.Fatalf("doctor %v: %v\n%s", args, err, out)
	}
	var res struct {
		Findings []doctor.Finding `json:"findings"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("parsing JSON output: %v\n%s", err, out)
	}
	if res.Findings == nil {
		t.Fatalf("JSON output has no findings list:\n%s", out)
	}
	got := []string{}
	for _, f := range res.Findings {
		got = append(got, f.Check+" "+f.Object)
		if f.Fix == "" {
			t.Errorf("no fix for %+v", f)
		}
	}
	if (err == nil) != (len(got) == 0) {
		t.Errorf("doctor %v: error %v with %d finding(s); want ErrFindings exactly when it finds something", args, err, len(got))
	}
	sort.Strings(got)
	return got
}

// fixPool gives a GPU NodePool what doctor asks of one: the Underutilized budget, the
// nvidia.com/gpu taint and limit, and a consolidateAfter longer than a model load.
func fixPool(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	c := rigtest.Current().Client
	var np karpv1.NodePool
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &np); err != nil {
		t.Fatal(err)
	}
	np.Spec.Disruption.Budgets = append(np.Spec.Disruption.Budgets, karpv1.Budget{Nodes: "0", Reasons: []karpv1.DisruptionReason{karpv1.DisruptionReasonUnderutilized}})
	np.Spec.Disruption.ConsolidateAfter = karpv1.MustParseNillableDuration("1h")
	np.Spec.Template.Spec.Taints = []corev1.Taint{{Key: berthv1alpha1.GPUResource, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	np.Spec.Limits = karpv1.Limits{berthv1alpha1.GPUResource: resource.MustParse("64")}
	if err := c.Update(ctx, &np); err != nil {
		t.Fatal(err)
	}
}

// poolFindings are what doctor says of the seeded GPU pool gpu-doctor (p5, WhenEmptyOrUnderutilized
// after 0s, no taint, no limit), sorted.
var poolFindings = []string{
	"gpu-nodepool-consolidate-after NodePool gpu-doctor",
	"gpu-nodepool-consolidation NodePool gpu-doctor",
	"gpu-nodepool-limit NodePool gpu-doctor",
	"gpu-nodepool-taint NodePool gpu-doctor",
}

func TestDoctorFindsSeededProblems(t *testing.T) {
	seed(t)
	got := findings(t)
	want := append([]string{
		"gpu-job-without-gang Job sick/ddp",
		"gpu-util-autoscaling HorizontalPodAutoscaler sick/llama",
		"vllm-without-queue-scaler Deployment sick/llama",
	}, poolFindings...)
	sort.Strings(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}

	text, err := doctorCmd("-n", "sick")
	if !errors.Is(err, cli.ErrFindings) {
		t.Errorf("doctor -n sick: error %v, want %v", err, cli.ErrFindings)
	}
	t.Logf("human output:\n%s", text)
	for _, s := range []string{"sick/ddp", "fix:", "7 problem(s) found"} {
		if !strings.Contains(text, s) {
			t.Errorf("human output lacks %q", s)
		}
	}
	// kubectl's -o name: kind/name of each object, for xargs.
	if names, _ := doctorCmd("-n", "sick", "-o", "name"); !strings.Contains(names, "deployment/llama\n") || !strings.Contains(names, "nodepool/gpu-doctor\n") {
		t.Errorf("-o name:\n%s", names)
	}
	if wide, _ := doctorCmd("-n", "sick", "-o", "wide"); !strings.Contains(wide, "CHECK") || !strings.Contains(wide, "Deployment sick/llama") {
		t.Errorf("-o wide:\n%s", wide)
	}
	if wide, _ := doctorCmd("-n", "sick", "-o", "wide", "--no-headers"); strings.Contains(wide, "CHECK") || !strings.Contains(wide, "Deployment sick/llama") {
		t.Errorf("-o wide --no-headers:\n%s", wide)
	}
	// kubectl's templates, over the findings as -o json names them.
	if objs, _ := doctorCmd("-n", "sick", "-o", "jsonpath={.findings[*].object}"); !strings.Contains(objs, "Deployment sick/llama") || strings.Contains(objs, "problem") {
		t.Errorf("-o jsonpath:\n%s", objs)
	}
	if cols, _ := doctorCmd("-n", "sick", "-o", "custom-columns=OBJECT:.object,CHECK:.check"); !strings.HasPrefix(cols, "OBJECT") || !strings.Contains(cols, "Deployment sick/llama") {
		t.Errorf("-o custom-columns:\n%s", cols)
	}
	// NodePools are cluster-wide, so they show in every namespace's report; a namespace with
	// only healthy objects (a single-pod GPU Job) reports just that pool.
	if got := findings(t, "-n", "healthy"); !cmp.Equal(got, poolFindings) {
		t.Errorf("doctor -n healthy found %v, want only the cluster-wide NodePool", got)
	}
	if code := cli.Execute([]string{"doctor", "--kubeconfig=" + rigtest.Current().Kubeconfig, "-n", "sick"}); code != 1 {
		t.Errorf("berth doctor on findings exited %d, want 1", code)
	}

	// Once the pool is guarded, the healthy namespace is clean: exit 0, and it says so.
	fixPool(t, "gpu-doctor")
	if got := findings(t, "-n", "healthy"); got == nil || len(got) != 0 {
		t.Errorf("doctor -n healthy on a clean namespace found %v, want an empty list", got)
	}
	clean, err := doctorCmd("-n", "healthy")
	wantClean := "native gang scheduling (GenericWorkload): off (gangs are berth PodGroups, scheduling.berth.dev/v1alpha1)\nno problems found\n"
	if err != nil || clean != wantClean {
		t.Errorf("doctor -n healthy = %q, %v; want %q and no error", clean, err, wantClean)
	}
	if code := cli.Execute([]string{"doctor", "--kubeconfig=" + rigtest.Current().Kubeconfig, "-n", "healthy"}); code != 0 {
		t.Errorf("berth doctor on a clean namespace exited %d, want 0", code)
	}
	if _, err := doctorCmd("-o", "xml"); err == nil || !strings.Contains(err.Error(), "text, wide, name, json, yaml") {
		t.Errorf("bad -o: %v", err)
	}
}
