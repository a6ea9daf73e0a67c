package devcluster

import (
	"context"
	"fmt"
	"time"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/rig"
)

// Scene 1: a pending 8-GPU training pod on a cluster with no GPU nodes makes Karpenter launch an
// H100 node for it. The pod keeps the node busy, which scene 2's gang waits for.
const (
	// busyPod is the 8-GPU training pod that takes a whole H100 node.
	busyPod = "llm-train-0"
	// trainingTimeout bounds scene 1: Karpenter launches the node, which becomes Ready.
	trainingTimeout = 2 * time.Minute
)

// trainingScene creates the 8-GPU pod and follows it until it runs on the node Karpenter
// launched for it.
func trainingScene(ctx context.Context, d *demo) error {
	if _, err := busyH100(ctx, d); err != nil {
		return err
	}
	d.p.say("Karpenter provisioned a GPU node for the pending pod, which now runs.")
	return nil
}

// busyH100 is the 8-GPU pod running on an H100 node Karpenter launched for it: created (scene 1,
// or scene 2 on its own) or found (scene 2 after scene 1), and followed until it runs.
func busyH100(ctx context.Context, d *demo) (*corev1.Pod, error) {
	pod := demoTrainingPod(busyPod, "h100", 8)
	switch err := d.c.Create(ctx, pod); {
	case apierrors.IsAlreadyExists(err): // scene 1 created it
	case err != nil:
		return nil, fmt.Errorf("creating pod %s: %w", pod.Name, err)
	default:
		d.p.say("created pod %s/%s requesting 8 nvidia.com/gpu with nodeSelector %s=h100", pod.Namespace, pod.Name, awsv1.LabelInstanceGPUName)
	}
	return pod, d.p.follow(ctx, d.c, pod, rig.GPUNodePoolName("h100"))
}

// demoTrainingPod is a pod asking for gpus GPUs of one product.
func demoTrainingPod(name, product string, gpus int64) *corev1.Pod {
	q := *resource.NewQuantity(gpus, resource.DecimalSI)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: DemoNamespace, Labels: map[string]string{appLabel: "llm-train"}},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{awsv1.LabelInstanceGPUName: product},
			Containers: []corev1.Container{{
				Name: "trainer", Image: "nvcr.io/nvidia/pytorch:25.01-py3",
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi"), berthv1alpha1.GPUResource: q},
					Limits:   corev1.ResourceList{berthv1alpha1.GPUResource: q},
				},
			}},
		},
	}
}
