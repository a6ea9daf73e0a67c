package e2e

import (
	"context"
	"fmt"
	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestPendingGPUPodGetsANode: a pending pod asking for 8 nvidia.com/gpu on an 8-GPU training
// family makes Karpenter-kwok launch a p5/p4d NodeClaim; the node becomes Ready (kwok), its
// not-ready taint is removed (kube-controller-manager), kube-scheduler binds the pod and kwok
// runs it.
func TestPendingGPUPodGetsANode(t *testing.T) {
	ctx := context.Background()
	r := rigtest.Current()
	c := r.Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "e2e-provisioning"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	pod := builders.Pod("trainer-0", ns.Name).GPU(8).Request(corev1.ResourceCPU, "8").Request(corev1.ResourceMemory, "64Gi").Obj()
	pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: awsv1.LabelInstanceFamily, Operator: corev1.NodeSelectorOpIn, Values: []string{"p5", "p4d"}}},
		}}},
	}}
	start := time.Now()
	if err := c.Create(ctx, pod); err != nil {
		t.Fatalf("creating pod: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(ctx, pod, client.GracePeriodSeconds(0)) })

	var claim karpv1.NodeClaim
	rigtest.Eventually(t, 2*time.Minute, 250*time.Millisecond, "Karpenter launches a NodeClaim", func(ctx context.Context) (bool, string, error) {
		var claims karpv1.NodeClaimList
		if err := c.List(ctx, &claims); err != nil {
			return false, "", err
		}
		if len(claims.Items) == 0 {
			return false, "no NodeClaim yet", nil
		}
		if len(claims.Items) > 1 {
			return false, "", fmt.Errorf("want exactly one NodeClaim for one pod, got %d", len(claims.Items))
		}
		claim = claims.Items[0]
		launched := claim.StatusConditions().Get(karpv1.ConditionTypeLaunched)
		return launched != nil && launched.IsTrue(), fmt.Sprintf("NodeClaim %s conditions %v", claim.Name, claim.Status.Conditions), nil
	})
	t.Logf("NodeClaim %s launched after %s", claim.Name, time.Since(start).Round(time.Millisecond))
	it := claim.Labels[corev1.LabelInstanceTypeStable]
	if it != "p5.48xlarge" && it != "p4d.24xlarge" {
		t.Errorf("NodeClaim instance type = %q, want p5.48xlarge or p4d.24xlarge", it)
	}
	if got := claim.Labels[karpv1.NodePoolLabelKey]; got != "gpu-h100" && got != "gpu-a100" {
		t.Errorf("NodeClaim NodePool = %q, want gpu-h100 or gpu-a100", got)
	}

	rigtest.Eventually(t, 2*time.Minute, 250*time.Millisecond, "pod bound and running", func(ctx context.Context) (bool, string, error) {
		var p corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
			return false, "", err
		}
		return p.Status.Phase == corev1.PodRunning, fmt.Sprintf("node %q phase %s", p.Spec.NodeName, p.Status.Phase), nil
	})
	t.Logf("pod running after %s", time.Since(start).Round(time.Millisecond))

	var p corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
		t.Fatal(err)
	}
	var node corev1.Node
	if err := c.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, &node); err != nil {
		t.Fatalf("reading node %s: %v", p.Spec.NodeName, err)
	}
	if node.Labels[corev1.LabelInstanceTypeStable] != it {
		t.Errorf("pod runs on %s (%s), want the launched %s", node.Name, node.Labels[corev1.LabelInstanceTypeStable], it)
	}
	if got := node.Status.Allocatable[berthv1alpha1.GPUResource]; got.Value() != 8 {
		t.Errorf("node allocatable nvidia.com/gpu = %s, want 8", got.String())
	}
	for _, k := range []string{awsv1.LabelInstanceGPUCount, awsv1.LabelInstanceGPUName, awsv1.LabelInstanceGPUMemory, awsv1.LabelInstanceFamily} {
		if node.Labels[k] == "" {
			t.Errorf("node %s lacks label %s", node.Name, k)
		}
	}
	if !hasGPUTaint(node) {
		t.Errorf("node %s lacks the nvidia.com/gpu NoSchedule taint of its NodePool; taints %v", node.Name, node.Spec.Taints)
	}
	if p.Status.PodIP == "" {
		t.Errorf("running pod has no IP")
	}
}

func hasGPUTaint(n corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == berthv1alpha1.GPUResource && t.Effect == corev1.TaintEffectNoSchedule {
			return true
		}
	}
	return false
}
