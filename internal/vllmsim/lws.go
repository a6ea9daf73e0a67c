package vllmsim

import (
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// LeaderWorkerSetGVK is LeaderWorkerSet's kind (sigs.k8s.io/lws v1), written as unstructured:
// berth does not link its API packages.
var LeaderWorkerSetGVK = schema.GroupVersionKind{Group: berthv1alpha1.LWSGroup, Version: "v1", Kind: "LeaderWorkerSet"}

// GroupOptions shape a multi-node vLLM LeaderWorkerSet: Replicas groups of Size pods, each pod
// GPUs GPUs on NodePool Pool; the leader serves on Port after LeaderLoad (with LeaderLabels:
// what the emulator selects), each worker joins after WorkerLoad.
type GroupOptions struct {
	Replicas, Size, GPUs   int64
	Pool                   string
	Port                   int32
	LeaderLoad, WorkerLoad time.Duration
	LeaderLabels           map[string]string
}

// LeaderWorkerSet is what a user writes for a model too large for one node: a vLLM leader and
// its workers sharing one model (tensor parallel within a node, pipeline parallel across the
// group), each group restarted whole when a pod of it fails.
func LeaderWorkerSet(namespace, name string, o GroupOptions) *unstructured.Unstructured {
	gpus := strconv.FormatInt(o.GPUs, 10)
	pod := func(load time.Duration, leader bool) map[string]any {
		c := map[string]any{
			"name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
			"resources": map[string]any{
				"requests": map[string]any{"cpu": "4", berthv1alpha1.GPUResource: gpus},
				"limits":   map[string]any{berthv1alpha1.GPUResource: gpus},
			},
		}
		meta := map[string]any{}
		if load > 0 {
			meta["annotations"] = map[string]any{berthv1alpha1.DevStartDelayAnnotation: load.String()}
		}
		if leader {
			c["args"] = []any{"--model", DeploymentModel, "--tensor-parallel-size", gpus, "--pipeline-parallel-size", strconv.FormatInt(o.Size, 10),
				"--port", strconv.Itoa(int(o.Port))}
			c["ports"] = []any{map[string]any{"name": "http", "containerPort": int64(o.Port)}}
			if len(o.LeaderLabels) > 0 {
				labels := map[string]any{}
				for k, v := range o.LeaderLabels {
					labels[k] = v
				}
				meta["labels"] = labels
			}
		}
		return map[string]any{
			"metadata": meta,
			"spec": map[string]any{
				"nodeSelector": map[string]any{karpv1.NodePoolLabelKey: o.Pool},
				"containers":   []any{c},
			},
		}
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": name, "namespace": namespace},
		"spec": map[string]any{
			"replicas": o.Replicas,
			"leaderWorkerTemplate": map[string]any{
				"size": o.Size, "restartPolicy": "RecreateGroupOnPodRestart",
				"leaderTemplate": pod(o.LeaderLoad, true), "workerTemplate": pod(o.WorkerLoad, false),
			},
		},
	}}
	u.SetGroupVersionKind(LeaderWorkerSetGVK)
	return u
}

// TargetLeaderWorkerSet points a ScaledObject built by ScaledObject at the LeaderWorkerSet of
// its name: KEDA scales its groups.
func TargetLeaderWorkerSet(so *unstructured.Unstructured) {
	ref := so.Object["spec"].(map[string]any)["scaleTargetRef"].(map[string]any)
	ref["apiVersion"], ref["kind"] = LeaderWorkerSetGVK.GroupVersion().String(), LeaderWorkerSetGVK.Kind
}
