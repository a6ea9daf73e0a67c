package vllmsim

// Kubernetes objects for a vLLM workload the emulator serves: what the dev cluster's demo and
// the rig's autoscaling tests deploy.

import (
	"maps"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/scaler/targets"
)

// DeploymentModel is the model the vLLM Deployment and ScaledObject built here serve.
const DeploymentModel = "meta-llama/Llama-3.1-8B-Instruct"

// DefaultModelLoad is how long a replica of Deployment takes from its node to serving: an
// image pull and a model load (BentoML measured about 10 minutes for an 8B model's 20 GB image
// on a cold node, under 30 s with the weights streamed; 90 s is a warm-node middle).
const DefaultModelLoad = 90 * time.Second

// SetModelLoad sets how long the dev cluster keeps each of dep's pods ContainerCreating on its
// node before it runs and reports Ready — and so before the emulator serves it, which it does
// for Running pods (0: at once).
func SetModelLoad(dep *appsv1.Deployment, d time.Duration) {
	ann := dep.Spec.Template.Annotations
	if d <= 0 {
		delete(ann, berthv1alpha1.DevStartDelayAnnotation)
		return
	}
	if ann == nil {
		ann = map[string]string{}
		dep.Spec.Template.Annotations = ann
	}
	ann[berthv1alpha1.DevStartDelayAnnotation] = d.String()
}

// Deployment is a one-replica vLLM server with one GPU per replica on a Karpenter NodePool,
// its pods labelled app=<name> plus extra labels, serving its API and metrics on port; each
// replica takes DefaultModelLoad to serve (SetModelLoad changes it).
func Deployment(namespace, name, nodePool string, port int32, extraLabels map[string]string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	maps.Copy(labels, extraLabels)
	one := resource.MustParse("1")
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{karpv1.NodePoolLabelKey: nodePool},
					Containers: []corev1.Container{{
						Name: "vllm", Image: "vllm/vllm-openai:v0.11.0",
						Args:  []string{"--model", DeploymentModel, "--max-num-seqs", "8", "--port", strconv.Itoa(int(port))},
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: port}},
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), berthv1alpha1.GPUResource: one},
							Limits:   corev1.ResourceList{berthv1alpha1.GPUResource: one},
						},
					}},
				},
			},
		},
	}
	SetModelLoad(dep, DefaultModelLoad)
	return dep
}

// ScaledObjectOptions shape a KEDA ScaledObject with one external-push trigger at berth's scaler.
type ScaledObjectOptions struct {
	ScalerAddress    string
	Min, Max         int64
	PollingInterval  int64
	CooldownPeriod   int64
	ScaleDownWindow  int64
	MetricsPort      int32
	TargetQueueDepth string
	TargetKVCache    string
	// StartupTimeout is the trigger's startupTimeoutSeconds ("" for berth's default).
	StartupTimeout string
	// Metadata adds further trigger metadata (demandPreset, prometheusAddress, ...).
	Metadata map[string]string
}

// ScaledObject is a KEDA ScaledObject (unstructured: berth does not link KEDA's API types)
// sizing the Deployment name with berth's scaler, filtering on DeploymentModel.
func ScaledObject(namespace, name string, o ScaledObjectOptions) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": targets.ScaledObjectGVK.GroupVersion().String(), "kind": targets.ScaledObjectGVK.Kind,
		"metadata": map[string]any{"name": name, "namespace": namespace},
		"spec": map[string]any{
			"scaleTargetRef":  map[string]any{"name": name},
			"minReplicaCount": o.Min, "maxReplicaCount": o.Max,
			"pollingInterval": o.PollingInterval, "cooldownPeriod": o.CooldownPeriod,
			"advanced": map[string]any{"horizontalPodAutoscalerConfig": map[string]any{"behavior": map[string]any{
				"scaleDown": map[string]any{"stabilizationWindowSeconds": o.ScaleDownWindow, "tolerance": "0"},
				"scaleUp":   map[string]any{"stabilizationWindowSeconds": int64(0), "tolerance": "0"},
			}}},
			"triggers": []any{map[string]any{"type": "external-push", "metadata": o.metadata()}},
		},
	}}
}

// metadata is the trigger's metadata; targets left empty are left out.
func (o ScaledObjectOptions) metadata() map[string]any {
	md := map[string]any{"scalerAddress": o.ScalerAddress, "metricsPort": strconv.Itoa(int(o.MetricsPort)), "model": DeploymentModel}
	for k, v := range o.Metadata {
		md[k] = v
	}
	for k, v := range map[string]string{"targetQueueDepth": o.TargetQueueDepth, "targetKVCacheUsage": o.TargetKVCache, "startupTimeoutSeconds": o.StartupTimeout} {
		if v != "" {
			md[k] = v
		}
	}
	return md
}
