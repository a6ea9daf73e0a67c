// Package doctor finds GPU autoscaling set-ups that misbehave: autoscalers driven by GPU duty
// cycle, memory or CPU; GPU ScaledObjects without a fallback or scaled to zero with no demand
// that exists at zero; GPU NodePools that let Karpenter consolidate busy nodes, lack the
// nvidia.com/gpu taint or limit, release nodes faster than a model loads or expire training
// nodes; @latest AMIs under GPU pools; general pools that can launch GPU instances; Karpenter
// settings that matter for GPUs (DRA requests ignored, NodeRepair off beside berth's agent);
// multi-pod GPU jobs whose pods need each other without a gang; LeaderWorkerSet groups no
// NodePool can hold whole, or scaled on a trigger that is not berth's; vLLM/SGLang Deployments
// that nothing scales on load; and Prometheus triggers on vLLM metrics without aggregation. Install
// checks berth itself (CRD, webhook, leader, agent coverage). Checks are pure functions over a
// Snapshot of the cluster; `berth doctor` reads the Snapshot through the kubeconfig.
package doctor

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/controllers/nodepool/guard"
)

// Snapshot is what the checks read. Kinds the cluster does not serve are left empty.
type Snapshot struct {
	HPAs          []autoscalingv2.HorizontalPodAutoscaler
	ScaledObjects []unstructured.Unstructured // keda.sh/v1alpha1
	NodePools     []karpv1.NodePool
	Jobs          []batchv1.Job
	// GangJobs are JobSets and PyTorchJobs (unstructured; their GPU pod templates are read).
	GangJobs    []unstructured.Unstructured
	Deployments []appsv1.Deployment
	// NodeClasses are Karpenter's EC2NodeClasses (their AMI selection).
	NodeClasses []awsv1.EC2NodeClass
	// Karpenter are Karpenter's controller Deployments, from every namespace (its settings).
	Karpenter []appsv1.Deployment
	// Nodes are the cluster's nodes (which run berth's agent).
	Nodes []corev1.Node
	// ResourceClaims names the ResourceClaims and ResourceClaimTemplates ("Kind namespace/name")
	// through which pods ask for devices (DRA).
	ResourceClaims []string
	// DeviceClassRequests are, per DeviceClass, the claims and templates ("Kind namespace/name")
	// that ask for it.
	DeviceClassRequests map[string][]string
	// ResourceSlices are the devices DRA drivers publish; DeviceClasses the classes.
	ResourceSlices []resourcev1.ResourceSlice
	DeviceClasses  []resourcev1.DeviceClass
	// ProvisioningChecks are Kueue's provisioning admission checks (AdmissionChecks with
	// controllerName kueue.x-k8s.io/provisioning-request and their ProvisioningRequestConfigs).
	ProvisioningChecks []ProvisioningCheck
	// ProvisioningRequestAPI: the cluster serves autoscaling.x-k8s.io/v1 ProvisioningRequest.
	ProvisioningRequestAPI bool
	// ClusterAutoscaler: a Cluster Autoscaler Deployment runs (it serves more classes).
	ClusterAutoscaler bool
	// GenericWorkload: the cluster serves scheduling.k8s.io/v1beta1 PodGroups (Kubernetes'
	// native gang scheduling, feature gate GenericWorkload, is on).
	GenericWorkload bool
	// NativeGangs are the native PodGroups with a gang policy.
	NativeGangs []NativeGang
	// LeaderWorkerSets are the LeaderWorkerSets (unstructured; their group shape is read).
	LeaderWorkerSets []unstructured.Unstructured
	// Unread are the kinds berth may not list (Kind → why): the checks that need them are
	// skipped.
	Unread map[string]string
}

// Kinds a check reads (Snapshot.Unread's keys).
const (
	KindHPA          = "HorizontalPodAutoscaler"
	KindJob          = "Job"
	KindDeployment   = "Deployment"
	KindNodePool     = "NodePool"
	KindScaledObject = "ScaledObject"
)

// Skipped is a check that did not run, and why.
type Skipped struct {
	Check  string `json:"check"`
	Reason string `json:"reason"`
}

// Report is what Run found: the findings, and the checks that did not run.
type Report struct {
	Findings []Finding `json:"findings"`
	Skipped  []Skipped `json:"skipped"`
	// Incomplete: some check did not run because berth may not read what it needs (a check
	// skipped on request does not count).
	Incomplete bool `json:"incomplete"`
	// GenericWorkload: Kubernetes' native gang scheduling is on (scheduling.k8s.io/v1beta1
	// PodGroups are served), so gangs may be declared either way (docs/native-gangs.md).
	GenericWorkload bool `json:"genericWorkload"`
}

// Finding is one problem, with the object it is about and how to fix it.
type Finding struct {
	// Check names the check, e.g. "gpu-util-autoscaling".
	Check string `json:"check"`
	// Object is "Kind namespace/name" (or "Kind name" for cluster-scoped objects).
	Object string `json:"object"`
	// Problem says what is wrong.
	Problem string `json:"problem"`
	// Fix says what to do.
	Fix string `json:"fix"`
}

// Check names.
const (
	CheckGPUUtilScaling    = "gpu-util-autoscaling"
	CheckUnsafeNodePool    = "gpu-nodepool-consolidation"
	CheckJobWithoutGang    = "gpu-job-without-gang"
	CheckVLLMWithoutScaler = "vllm-without-queue-scaler"
	CheckUnaggregatedQuery = "unaggregated-vllm-query"
)

// check is one check: its name, the kinds it reads, and the pure function.
type check struct {
	name  string
	needs []string
	run   func(Snapshot) []Finding
}

// checks are every check, in the order they run.
var checks = []check{
	{CheckGPUUtilScaling, []string{KindHPA, KindScaledObject}, gpuUtilScaling},
	{CheckResourceScaling, []string{KindHPA, KindScaledObject, KindDeployment}, resourceScaling},
	{CheckNoFallback, []string{KindScaledObject, KindDeployment}, withoutFallback},
	{CheckZeroWithoutDemand, []string{KindScaledObject, KindDeployment}, zeroWithoutDemand},
	{CheckUnsafeNodePool, []string{KindNodePool}, unsafeNodePools},
	{CheckGPUTaint, []string{KindNodePool}, gpuTaints},
	{CheckGPULimit, []string{KindNodePool}, gpuLimits},
	{CheckConsolidateAfter, []string{KindNodePool}, shortConsolidateAfter},
	{CheckTrainingExpiry, []string{KindNodePool}, trainingExpiry},
	{CheckLatestAMI, []string{KindNodePool, KindEC2NodeClass}, latestAMIs},
	{CheckGeneralPoolGPUs, []string{KindNodePool}, generalPoolGPUs},
	{CheckKarpenterIgnoresDRA, []string{KindKarpenter, KindResourceClaim}, karpenterIgnoresDRA},
	{CheckKarpenterNodeRepair, []string{KindKarpenter, KindNode}, karpenterNodeRepairOff},
	{CheckGPUAdvertisedTwice, []string{KindNode, KindResourceSlice}, gpuAdvertisedTwice},
	{CheckDeviceClassUnsatisfiable, []string{KindNode, KindResourceSlice, KindDeviceClass, KindResourceClaim}, deviceClassUnsatisfiable},
	{CheckJobWithoutGang, []string{KindJob, "JobSet", "PyTorchJob"}, jobsWithoutGang},
	{CheckVLLMWithoutScaler, []string{KindDeployment, KindHPA, KindScaledObject}, vllmWithoutScaler},
	{CheckUnaggregatedQuery, []string{KindScaledObject}, unaggregatedQueries},
	{CheckProvisioningWithoutProvider, []string{KindAdmissionCheck}, provisioningWithoutProvider},
	{CheckNativeGangWithoutCapacity, []string{KindNativePodGroup}, nativeGangsWithoutCapacity},
	{CheckLWSGroupFit, []string{KindLWS, KindNodePool}, lwsGroupsCannotFit},
	{CheckLWSScaledWithoutBerth, []string{KindScaledObject}, lwsScaledWithoutBerth},
}

// Checks are the names of every check (what --skip takes).
func Checks() []string {
	out := make([]string, len(checks))
	for i, c := range checks {
		out[i] = c.name
	}
	return out
}

// Run applies every check not in skip to s. A check that needs a kind berth could not list is
// skipped, and the report is incomplete. Findings are sorted by check and object.
func Run(s Snapshot, skip ...string) Report {
	r := Report{GenericWorkload: s.GenericWorkload}
	for _, c := range checks {
		if slices.Contains(skip, c.name) {
			r.Skipped = append(r.Skipped, Skipped{Check: c.name, Reason: "skipped on request (--skip)"})
			continue
		}
		var unread []string
		for _, k := range c.needs {
			if why, ok := s.Unread[k]; ok {
				unread = append(unread, k+" ("+why+")")
			}
		}
		if len(unread) > 0 {
			r.Skipped = append(r.Skipped, Skipped{Check: c.name, Reason: "cannot list " + strings.Join(unread, ", ")})
			r.Incomplete = true
			continue
		}
		r.Findings = append(r.Findings, c.run(s)...)
	}
	out := r.Findings
	sort.Slice(out, func(i, j int) bool {
		if out[i].Check != out[j].Check {
			return out[i].Check < out[j].Check
		}
		return out[i].Object < out[j].Object
	})
	return r
}

// gpuUtilMetric matches DCGM duty-cycle and GPU-memory metrics.
var gpuUtilMetric = regexp.MustCompile(`(?i)DCGM_FI_DEV_(GPU_UTIL|FB_USED|FB_FREE|MEM_COPY_UTIL)|DCGM_FI_PROF_GR_ENGINE_ACTIVE|gpu_(utilization|memory)`)

const gpuUtilFix = "scale vLLM on queue depth (vllm:num_requests_waiting) and KV-cache usage (vllm:kv_cache_usage_perc) per replica instead; GPU duty cycle reads 100% at any load and vLLM pre-allocates KV memory"

func gpuUtilScaling(s Snapshot) []Finding {
	var out []Finding
	for _, h := range s.HPAs {
		for _, m := range h.Spec.Metrics {
			if name := hpaMetricName(m); gpuUtilMetric.MatchString(name) {
				out = append(out, Finding{Check: CheckGPUUtilScaling, Object: obj("HorizontalPodAutoscaler", h.Namespace, h.Name),
					Problem: fmt.Sprintf("scales %s %s on %s", h.Spec.ScaleTargetRef.Kind, h.Spec.ScaleTargetRef.Name, name), Fix: gpuUtilFix})
			}
		}
	}
	for _, so := range s.ScaledObjects {
		for _, tr := range triggers(so) {
			if q := tr.meta["query"]; tr.kind == "prometheus" && gpuUtilMetric.MatchString(q) {
				out = append(out, Finding{Check: CheckGPUUtilScaling, Object: obj("ScaledObject", so.GetNamespace(), so.GetName()),
					Problem: fmt.Sprintf("prometheus trigger scales on GPU utilisation or memory: %s", q), Fix: gpuUtilFix})
			}
		}
	}
	return out
}

func hpaMetricName(m autoscalingv2.MetricSpec) string {
	switch {
	case m.External != nil:
		return m.External.Metric.Name
	case m.Pods != nil:
		return m.Pods.Metric.Name
	case m.Object != nil:
		return m.Object.Metric.Name
	}
	return ""
}

func unsafeNodePools(s Snapshot) []Finding {
	var out []Finding
	for i := range s.NodePools {
		np := &s.NodePools[i]
		if !guard.IsUnsafe(np) {
			continue
		}
		_, why := guard.IsGPUPool(np)
		out = append(out, Finding{Check: CheckUnsafeNodePool, Object: obj("NodePool", "", np.Name),
			Problem: fmt.Sprintf("GPU NodePool (%s) on consolidationPolicy %s without a budget blocking Underutilized: Karpenter may evict running inference or training to repack nodes", why, np.Spec.Disruption.ConsolidationPolicy),
			Fix:     fmt.Sprintf(`kubectl annotate nodepool %s %s=enforce (berth adds {nodes: "0", reasons: [Underutilized]}), or set consolidationPolicy: WhenEmpty; templates: berth nodepools render`, np.Name, berthv1alpha1.ConsolidationGuardAnnotation)})
	}
	return out
}

// gangLabels are the pod labels that put a pod in a gang berth admits (its own and the
// schedulers it adapts).
var gangLabels = []string{berthv1alpha1.PodGroupLabel, berthv1alpha1.CoschedulingPodGroupLabel, berthv1alpha1.CoschedulingLegacyPodGroupLabel,
	berthv1alpha1.VolcanoJobNameLabel, berthv1alpha1.KueueQueueNameLabel, berthv1alpha1.KAIQueueLabel}

func inGang(tmpl corev1.PodTemplateSpec) bool {
	for _, l := range gangLabels {
		if tmpl.Labels[l] != "" || tmpl.Annotations[l] != "" {
			return true
		}
	}
	return tmpl.Spec.SchedulerName != "" && tmpl.Spec.SchedulerName != corev1.DefaultSchedulerName
}

func gpusOf(spec corev1.PodSpec) int64 {
	var n int64
	for _, c := range spec.Containers {
		if q, ok := c.Resources.Limits[berthv1alpha1.GPUResource]; ok {
			n += q.Value()
		} else if q, ok := c.Resources.Requests[berthv1alpha1.GPUResource]; ok {
			n += q.Value()
		}
	}
	return n
}

const gangFix = "make the pods one gang: a PodGroup (scheduling.berth.dev/v1alpha1, minMember = pods) and the label scheduling.berth.dev/pod-group on the pod template, so no pod holds GPUs while it waits for the others (docs/gang-admission.md)"

func jobsWithoutGang(s Snapshot) []Finding {
	var out []Finding
	for _, j := range s.Jobs {
		par := int32(1)
		if j.Spec.Parallelism != nil {
			par = *j.Spec.Parallelism
		}
		if par < 2 || gpusOf(j.Spec.Template.Spec) == 0 || inGang(j.Spec.Template) || jobDone(j) || !talksToPeers(j) {
			continue
		}
		out = append(out, Finding{Check: CheckJobWithoutGang, Object: obj("Job", j.Namespace, j.Name),
			Problem: fmt.Sprintf("%d parallel pods with %d GPU(s) each are scheduled one by one", par, gpusOf(j.Spec.Template.Spec)), Fix: gangFix})
	}
	for _, u := range s.GangJobs {
		pods, gpus, gang := replicatedGPU(u)
		if pods < 2 || gpus == 0 || gang {
			continue
		}
		out = append(out, Finding{Check: CheckJobWithoutGang, Object: obj(u.GetKind(), u.GetNamespace(), u.GetName()),
			Problem: fmt.Sprintf("%d GPU pods are scheduled one by one", pods), Fix: gangFix})
	}
	return out
}

// rendezvous matches the environment variables, launchers and libraries of jobs whose pods
// connect to each other (PyTorch, DeepSpeed, Horovod/MPI, JAX, TensorFlow, NCCL).
var rendezvous = regexp.MustCompile(`\b(MASTER_ADDR|MASTER_PORT|WORLD_SIZE|NCCL_[A-Z_]+|PET_[A-Z_]+|TF_CONFIG|JAX_COORDINATOR_ADDRESS|OMPI_[A-Z_]+|` +
	`torchrun|torch\.distributed|deepspeed|mpirun|mpiexec|horovodrun|accelerate launch|jax\.distributed|ray start)\b`)

// talksToPeers reports whether a Job's pods need each other (and so must start together): one
// pod per completion (Indexed pods with a subdomain reach each other by hostname) or a launcher
// or rendezvous variable of a distributed framework. A work queue (completions unset, or more
// completions than parallel pods) or a plain batch of independent pods does not.
func talksToPeers(j batchv1.Job) bool {
	if j.Spec.Completions == nil || (j.Spec.Parallelism != nil && *j.Spec.Completions > *j.Spec.Parallelism) {
		return false
	}
	spec := j.Spec.Template.Spec
	if j.Spec.CompletionMode != nil && *j.Spec.CompletionMode == batchv1.IndexedCompletion && spec.Subdomain != "" {
		return true
	}
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		text := strings.Join(c.Command, " ") + " " + strings.Join(c.Args, " ")
		for _, e := range c.Env {
			text += " " + e.Name
		}
		if rendezvous.MatchString(text) {
			return true
		}
	}
	return false
}

func jobDone(j batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// replicatedGPU counts the GPU pods of a JobSet or PyTorchJob and whether they are in a gang.
func replicatedGPU(u unstructured.Unstructured) (pods int64, gpus int64, gang bool) {
	var groups []map[string]any
	switch u.GetKind() {
	case "PyTorchJob":
		specs, _, _ := unstructured.NestedMap(u.Object, "spec", "pytorchReplicaSpecs")
		for _, v := range specs {
			if m, ok := v.(map[string]any); ok {
				groups = append(groups, map[string]any{"replicas": m["replicas"], "template": m["template"]})
			}
		}
		if sp, found, _ := unstructured.NestedString(u.Object, "spec", "runPolicy", "schedulingPolicy", "queue"); found && sp != "" {
			gang = true
		}
	case "JobSet":
		rjs, _, _ := unstructured.NestedSlice(u.Object, "spec", "replicatedJobs")
		for _, v := range rjs {
			m, ok := v.(map[string]any)
			if !ok {
				continue
			}
			replicas, _, _ := unstructured.NestedInt64(m, "replicas")
			par, found, _ := unstructured.NestedInt64(m, "template", "spec", "parallelism")
			if !found {
				par = 1
			}
			tmpl, _, _ := unstructured.NestedMap(m, "template", "spec", "template")
			groups = append(groups, map[string]any{"replicas": max(replicas, 1) * par, "template": tmpl})
		}
	}
	for _, g := range groups {
		var n int64 = 1
		switch r := g["replicas"].(type) {
		case int64:
			n = r
		case float64:
			n = int64(r)
		}
		var tmpl corev1.PodTemplateSpec
		if m, ok := g["template"].(map[string]any); ok {
			_ = runtimeConvert(m, &tmpl)
		}
		if gpusOf(tmpl.Spec) > 0 {
			pods += n
			gpus += gpusOf(tmpl.Spec) * n
		}
		if inGang(tmpl) {
			gang = true
		}
	}
	return pods, gpus, gang
}

// llmServer matches the image, command or arguments of an LLM inference server.
var llmServer = regexp.MustCompile(`(?i)vllm|sglang`)

// isVLLM reports whether a Deployment runs vLLM or SGLang on GPUs.
func isVLLM(d appsv1.Deployment) bool {
	for _, c := range d.Spec.Template.Spec.Containers {
		text := c.Image + " " + strings.Join(c.Command, " ") + " " + strings.Join(c.Args, " ")
		if llmServer.MatchString(text) {
			return gpusOf(d.Spec.Template.Spec) > 0
		}
	}
	return false
}

// loadMetric reports whether an HPA metric follows load: a pods, object or external metric
// (KEDA's, prometheus-adapter's or another adapter's) that is not GPU duty cycle or memory.
func loadMetric(m autoscalingv2.MetricSpec) bool {
	name := hpaMetricName(m)
	return name != "" && !gpuUtilMetric.MatchString(name)
}

// vllmWithoutScaler finds vLLM and SGLang Deployments that nothing scales on load: no
// ScaledObject with a trigger other than cpu, memory or GPU utilisation, and no HPA on a
// custom or external metric (prometheus-adapter's vllm_num_requests_waiting counts).
func vllmWithoutScaler(s Snapshot) []Finding {
	scaled := map[string]bool{}
	for _, so := range s.ScaledObjects {
		target, _, _ := unstructured.NestedString(so.Object, "spec", "scaleTargetRef", "name")
		for _, tr := range loadTriggers(so) {
			if tr.kind != "prometheus" || !gpuUtilMetric.MatchString(tr.meta["query"]) {
				scaled[so.GetNamespace()+"/"+target] = true
			}
		}
	}
	for _, h := range s.HPAs {
		if h.Spec.ScaleTargetRef.Kind == defaultScaleTargetKind && slices.ContainsFunc(h.Spec.Metrics, loadMetric) {
			scaled[h.Namespace+"/"+h.Spec.ScaleTargetRef.Name] = true
		}
	}
	var out []Finding
	for _, d := range s.Deployments {
		if !isVLLM(d) || scaled[d.Namespace+"/"+d.Name] {
			continue
		}
		out = append(out, Finding{Check: CheckVLLMWithoutScaler, Object: obj("Deployment", d.Namespace, d.Name),
			Problem: "vLLM/SGLang Deployment that nothing scales on load (queue depth, concurrency or KV-cache usage): no ScaledObject or HPA on such a metric",
			Fix:     "add a KEDA ScaledObject with an external-push trigger to berth's scaler (targetQueueDepth, targetKVCacheUsage; docs/scaler.md, examples/vllm-scaledobject.yaml), or a prometheus trigger on aggregated sum(vllm:num_requests_waiting) / avg(vllm:kv_cache_usage_perc)"})
	}
	return out
}

// aggregation matches a PromQL aggregation over the whole query.
var aggregation = regexp.MustCompile(`(?i)\b(sum|avg|max|min|count|quantile|topk|bottomk)\s*(by|without)?\s*\(`)

func unaggregatedQueries(s Snapshot) []Finding {
	var out []Finding
	for _, so := range s.ScaledObjects {
		for _, tr := range triggers(so) {
			q := tr.meta["query"]
			if tr.kind != "prometheus" || !strings.Contains(q, "vllm:") || aggregation.MatchString(q) {
				continue
			}
			out = append(out, Finding{Check: CheckUnaggregatedQuery, Object: obj("ScaledObject", so.GetNamespace(), so.GetName()),
				Problem: fmt.Sprintf("prometheus trigger query %q returns one series per pod; KEDA fails (or reads one pod) as soon as there are two replicas", q),
				Fix:     "aggregate it (sum(vllm:num_requests_waiting{model_name=\"...\"})), or use berth's scaler, which scrapes every replica itself"})
		}
	}
	return out
}

type trigger struct {
	kind string
	meta map[string]string
}

func triggers(so unstructured.Unstructured) []trigger {
	raw, _, _ := unstructured.NestedSlice(so.Object, "spec", "triggers")
	var out []trigger
	for _, r := range raw {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		t := trigger{meta: map[string]string{}}
		t.kind, _ = m["type"].(string)
		if md, ok := m["metadata"].(map[string]any); ok {
			for k, v := range md {
				if s, ok := v.(string); ok {
					t.meta[k] = s
				}
			}
		}
		out = append(out, t)
	}
	return out
}

func obj(kind, ns, name string) string {
	if ns == "" {
		return kind + " " + name
	}
	return kind + " " + ns + "/" + name
}
