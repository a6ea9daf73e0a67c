package doctor

import (
	"fmt"
	"regexp"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/berth-dev/berth/scaler"
)

// Scaling check names.
const (
	CheckResourceScaling    = "cpu-memory-autoscaling"
	CheckNoFallback         = "scaledobject-without-fallback"
	CheckZeroWithoutDemand  = "scale-to-zero-without-demand"
	scaledObjectKind        = "ScaledObject"
	scaledObjectOwnerGroup  = "keda.sh"
	defaultScaleTargetKind  = "Deployment"
	kedaDefaultMinReplicas  = int64(0)
	resourceScalingFixShort = "scale on queue depth, concurrency or KV-cache usage per replica (berth's scaler: targetQueueDepth, targetConcurrency, targetKVCacheUsage; docs/scaler.md)"
)

// perReplicaMetric matches the metrics a vLLM or SGLang engine exports about itself: they exist
// only while a replica does (a router's own, such as the production stack's
// vllm:num_incoming_requests_total, exist at zero).
var perReplicaMetric = regexp.MustCompile(`\b(vllm|sglang)[:_](num_requests_(waiting|running|swapped)|kv_cache_usage_perc|gpu_cache_usage_perc|` +
	`num_queue_reqs|num_running_reqs|token_usage|gen_throughput|num_preemptions|request_|time_to_first_token|time_per_output_token|inter_token_latency|e2e_request|prompt_tokens|generation_tokens)`)

// gpuDeployments indexes the snapshot's Deployments that ask for GPUs by "namespace/name".
func gpuDeployments(s Snapshot) map[string]*appsv1.Deployment {
	out := map[string]*appsv1.Deployment{}
	for i := range s.Deployments {
		d := &s.Deployments[i]
		if gpusOf(d.Spec.Template.Spec) > 0 {
			out[d.Namespace+"/"+d.Name] = d
		}
	}
	return out
}

// scaledGPUDeployment is the GPU Deployment a ScaledObject scales, or nil.
func scaledGPUDeployment(so unstructured.Unstructured, deps map[string]*appsv1.Deployment) *appsv1.Deployment {
	kind, _, _ := unstructured.NestedString(so.Object, "spec", "scaleTargetRef", "kind")
	name, _, _ := unstructured.NestedString(so.Object, "spec", "scaleTargetRef", "name")
	if kind != "" && kind != defaultScaleTargetKind {
		return nil
	}
	return deps[so.GetNamespace()+"/"+name]
}

// ownedByKEDA reports whether KEDA made the HPA for a ScaledObject (its findings are the
// ScaledObject's).
func ownedByKEDA(h autoscalingv2.HorizontalPodAutoscaler) bool {
	for _, o := range h.OwnerReferences {
		if o.Kind == scaledObjectKind && strings.HasPrefix(o.APIVersion, scaledObjectOwnerGroup+"/") {
			return true
		}
	}
	return false
}

// resourceName is the cpu or memory an HPA metric scales on, or "".
func resourceName(m autoscalingv2.MetricSpec) corev1.ResourceName {
	switch {
	case m.Resource != nil:
		return m.Resource.Name
	case m.ContainerResource != nil:
		return m.ContainerResource.Name
	}
	return ""
}

// resourceScaling finds GPU Deployments scaled on CPU or memory: vLLM and SGLang pre-allocate
// GPU memory and keep host memory flat, and their CPU follows tokenisation, not the queue on
// the GPU.
func resourceScaling(s Snapshot) []Finding {
	deps := gpuDeployments(s)
	var out []Finding
	for _, h := range s.HPAs {
		if ownedByKEDA(h) || h.Spec.ScaleTargetRef.Kind != defaultScaleTargetKind {
			continue
		}
		if deps[h.Namespace+"/"+h.Spec.ScaleTargetRef.Name] == nil {
			continue
		}
		for _, m := range h.Spec.Metrics {
			if r := resourceName(m); r == corev1.ResourceCPU || r == corev1.ResourceMemory {
				out = append(out, Finding{Check: CheckResourceScaling, Object: obj("HorizontalPodAutoscaler", h.Namespace, h.Name),
					Problem: fmt.Sprintf("scales GPU Deployment %s on %s: a GPU server's %s does not follow the requests waiting for its GPUs", h.Spec.ScaleTargetRef.Name, r, r),
					Fix:     resourceScalingFixShort})
				break
			}
		}
	}
	for _, so := range s.ScaledObjects {
		d := scaledGPUDeployment(so, deps)
		if d == nil {
			continue
		}
		for _, tr := range triggers(so) {
			if tr.kind == "cpu" || tr.kind == "memory" {
				out = append(out, Finding{Check: CheckResourceScaling, Object: obj(scaledObjectKind, so.GetNamespace(), so.GetName()),
					Problem: fmt.Sprintf("%s trigger scales GPU Deployment %s: a GPU server's %s does not follow the requests waiting for its GPUs", tr.kind, d.Name, tr.kind),
					Fix:     resourceScalingFixShort})
				break
			}
		}
	}
	return out
}

// loadTriggers are a ScaledObject's triggers other than cpu and memory (KEDA's fallback covers
// only those).
func loadTriggers(so unstructured.Unstructured) []trigger {
	var out []trigger
	for _, tr := range triggers(so) {
		if tr.kind != "cpu" && tr.kind != "memory" {
			out = append(out, tr)
		}
	}
	return out
}

// withoutFallback finds ScaledObjects of GPU Deployments with no spec.fallback: when the metric
// path fails (scaler or Prometheus down, a NetworkPolicy), KEDA reports errors to the HPA,
// which keeps the replica count it had, however the load moves.
func withoutFallback(s Snapshot) []Finding {
	deps := gpuDeployments(s)
	var out []Finding
	for _, so := range s.ScaledObjects {
		d := scaledGPUDeployment(so, deps)
		if d == nil || len(loadTriggers(so)) == 0 {
			continue
		}
		if fb, found, _ := unstructured.NestedMap(so.Object, "spec", "fallback"); found && len(fb) > 0 {
			continue
		}
		out = append(out, Finding{Check: CheckNoFallback, Object: obj(scaledObjectKind, so.GetNamespace(), so.GetName()),
			Problem: fmt.Sprintf("no fallback: while its metrics cannot be read, GPU Deployment %s stays at whatever count it had (at zero, it stays at zero) however many requests queue", d.Name),
			Fix:     "add spec.fallback {failureThreshold: 3, replicas: <the count that serves your peak>} (KEDA applies it after that many failed reads; berth's scaler fails loudly instead of reporting zero)"})
	}
	return out
}

// berthTrigger reports whether an external trigger is berth's scaler (its address, or a key
// only berth reads).
func berthTrigger(tr trigger) bool {
	if strings.Contains(tr.meta["scalerAddress"], "berth") {
		return true
	}
	for _, k := range []string{scaler.KeyTargetQueueDepth, scaler.KeyTargetConcurrency, scaler.KeyTargetKVCacheUsage, scaler.KeyTargetKVTokens,
		scaler.KeyTargetQueuedPrompt, scaler.KeyTargetTTFTSeconds, scaler.KeyTargetTokens, scaler.KeyFollow, scaler.KeyRole} {
		if tr.meta[k] != "" {
			return true
		}
	}
	return false
}

// seesDemandAtZero reports whether a trigger can report demand while its target has no replica.
func seesDemandAtZero(tr trigger) bool {
	switch tr.kind {
	case "cpu", "memory":
		return false
	case "external", "external-push":
		if !berthTrigger(tr) {
			return true // another scaler: berth cannot tell
		}
		return tr.meta[scaler.KeyDemandQuery] != "" || tr.meta[scaler.KeyDemandPreset] != "" || tr.meta[scaler.KeyFollow] != ""
	case "prometheus":
		return !perReplicaMetric.MatchString(tr.meta["query"])
	}
	return true // queues, streams and the like exist without the consumer
}

// zeroWithoutDemand finds ScaledObjects that take a GPU Deployment to zero replicas with no
// trigger that sees demand at zero: the metrics they read are the replicas' own, so once the
// last replica is gone nothing reports the queue, and the fleet never wakes.
func zeroWithoutDemand(s Snapshot) []Finding {
	deps := gpuDeployments(s)
	var out []Finding
	for _, so := range s.ScaledObjects {
		d := scaledGPUDeployment(so, deps)
		if d == nil {
			continue
		}
		minReplicas, found, _ := unstructured.NestedInt64(so.Object, "spec", "minReplicaCount")
		if !found {
			minReplicas = kedaDefaultMinReplicas
		}
		if idle, ok, _ := unstructured.NestedInt64(so.Object, "spec", "idleReplicaCount"); ok && idle == 0 {
			minReplicas = 0
		}
		if minReplicas > 0 || len(loadTriggers(so)) == 0 {
			continue // KEDA refuses zero on cpu and memory alone
		}
		zeroOK := false
		for _, tr := range triggers(so) {
			zeroOK = zeroOK || seesDemandAtZero(tr)
		}
		if zeroOK {
			continue
		}
		out = append(out, Finding{Check: CheckZeroWithoutDemand, Object: obj(scaledObjectKind, so.GetNamespace(), so.GetName()),
			Problem: fmt.Sprintf("scales GPU Deployment %s to zero (minReplicaCount 0, KEDA's default) but every trigger reads the replicas' own metrics: at zero nothing reports the queue, and requests wait until someone scales it by hand", d.Name),
			Fix:     "give berth's trigger a demand that exists at zero (demandQuery, or demandPreset: endpoint-picker with inferencePool; docs/scaler.md#from-zero), or set minReplicaCount: 1"})
	}
	return out
}
