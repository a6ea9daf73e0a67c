package dra_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestKarpenterLaunchesForAClaim: a pod that claims four L4s through a ResourceClaimTemplate
// (a CEL selector on the product name), on a pool with no nodes: Karpenter launches an
// instance type whose devices satisfy the claim, the driver publishes them, and kube-scheduler
// binds the pod with the claim allocated to devices of that node.
func TestKarpenterLaunchesForAClaim(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	ns := rigtest.Namespace(t, "dra")
	tmpl := builders.ClaimTemplate("four-l4", ns, 4, `device.attributes["gpu.nvidia.com"].productName.lowerAscii().contains("l4")`)
	if err := c.Create(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	p := builders.Pod("infer", ns).Ungated().Request(corev1.ResourceCPU, "2").Request(corev1.ResourceMemory, "8Gi").
		Tolerate("nvidia.com/gpu", "true", corev1.TaintEffectNoSchedule).
		NodeSelector(karpv1.NodePoolLabelKey, rig.GPUNodePoolName("l4")).ClaimFromTemplate("gpus", tmpl.Name).Obj()
	if err := c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	rigtest.Eventually(t, 3*time.Minute, time.Second, "the pod bound with its claim allocated", func(ctx context.Context) (bool, string, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			return false, "", err
		}
		var claims resourcev1.ResourceClaimList
		if err := c.List(ctx, &claims, client.InNamespace(ns)); err != nil {
			return false, "", err
		}
		var ncs karpv1.NodeClaimList
		if err := c.List(ctx, &ncs); err != nil {
			return false, "", err
		}
		st := fmt.Sprintf("pod on %q, %d claims, %d NodeClaims", p.Spec.NodeName, len(claims.Items), len(ncs.Items))
		for _, nc := range ncs.Items {
			st += fmt.Sprintf("; %s %s %s", nc.Name, nc.Labels[corev1.LabelInstanceTypeStable], nc.Status.NodeName)
		}
		if p.Spec.NodeName == "" || len(claims.Items) != 1 || claims.Items[0].Status.Allocation == nil {
			return false, st, nil
		}
		a := claims.Items[0].Status.Allocation
		if len(a.Devices.Results) != 4 {
			return false, st, fmt.Errorf("claim allocated %d devices, want 4", len(a.Devices.Results))
		}
		for _, r := range a.Devices.Results {
			if r.Driver != rig.DRADriver || r.Pool != p.Spec.NodeName {
				return false, st, fmt.Errorf("device %s/%s/%s is not of the pod's node %s", r.Driver, r.Pool, r.Device, p.Spec.NodeName)
			}
		}
		return true, st, nil
	})
	var n corev1.Node
	if err := c.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, &n); err != nil {
		t.Fatal(err)
	}
	t.Logf("bound to %s (%s) with its claim's 4 devices there", n.Name, n.Labels[corev1.LabelInstanceTypeStable])
}
