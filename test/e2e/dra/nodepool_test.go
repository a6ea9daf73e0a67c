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

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/nodepools"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestDRANodePoolBesideTheDevicePluginPool: `berth nodepools render --dra` (kwok) applied beside
// the rig's device-plugin pool of the same family, which it outweighs (inference 20 > 10). Two
// pods with no node selector: one claiming an A10G through DRA lands on a node of the DRA pool
// (the only GPU pool whose taint it tolerates; its claim on that node's devices, the node
// labelled for the DRA driver), and one requesting nvidia.com/gpu — tolerating nvidia.com/gpu,
// as the ExtendedResourceToleration admission plugin makes it — lands on the device-plugin
// pool, though the DRA pool is preferred by weight: were the DRA pool tainted nvidia.com/gpu,
// Karpenter would launch that pod onto a node whose device plugin is switched off.
func TestDRANodePoolBesideTheDevicePluginPool(t *testing.T) {
	ctx := context.Background()
	r := rigtest.Current()
	c := r.Client
	objs, err := nodepools.Render(nodepools.Options{Families: []string{"a10g"}, Provider: nodepools.ProviderKwok, DRA: true})
	if err != nil {
		t.Fatal(err)
	}
	np := objs[1].(*karpv1.NodePool)
	np.Spec.Template.Spec.StartupTaints = append(np.Spec.Template.Spec.StartupTaints, rig.NotReadyStartupTaint)
	np.Spec.Disruption.ConsolidateAfter = karpv1.MustParseNillableDuration("30s")
	if err := r.ApplyTyped(ctx, np); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Delete(context.Background(), np); client.IgnoreNotFound(err) != nil {
			t.Errorf("deleting NodePool %s: %v", np.Name, err)
		}
	})
	dpPool := rig.GPUNodePoolName("a10g")
	ns := rigtest.Namespace(t, "dra-pool")
	tmpl := builders.ClaimTemplate("one-a10g", ns, 1, `device.attributes["gpu.nvidia.com"].productName.lowerAscii().contains("a10g")`)
	if err := c.Create(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	draPod := builders.Pod("dra", ns).Ungated().Request(corev1.ResourceCPU, "2").Request(corev1.ResourceMemory, "8Gi").
		Tolerate(berthv1alpha1.DRAGPUTaintKey, "true", corev1.TaintEffectNoSchedule).ClaimFromTemplate("gpu", tmpl.Name).Obj()
	dpPod := builders.Pod("device-plugin", ns).Ungated().Request(corev1.ResourceCPU, "2").Request(corev1.ResourceMemory, "8Gi").GPU(1).
		NodeSelector(corev1.LabelInstanceTypeStable, "g5.xlarge"). // a10g, as the DRA pool offers too
		Tolerate(berthv1alpha1.GPUTaintKey, "", corev1.TaintEffectNoSchedule).Obj()
	for _, p := range []*corev1.Pod{draPod, dpPod} {
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	poolOf := func(ctx context.Context, p *corev1.Pod) (string, *corev1.Node, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil || p.Spec.NodeName == "" {
			return "", nil, err
		}
		var n corev1.Node
		if err := c.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, &n); err != nil {
			return "", nil, err
		}
		return n.Labels[karpv1.NodePoolLabelKey], &n, nil
	}
	rigtest.Eventually(t, 3*time.Minute, time.Second, "both pods bound, each on its own kind of pool", func(ctx context.Context) (bool, string, error) {
		draOn, draNode, err := poolOf(ctx, draPod)
		if err != nil {
			return false, "", err
		}
		dpOn, _, err := poolOf(ctx, dpPod)
		if err != nil {
			return false, "", err
		}
		st := fmt.Sprintf("DRA pod on pool %q, device-plugin pod on pool %q", draOn, dpOn)
		if dpOn != "" && dpOn != dpPool {
			return false, st, fmt.Errorf("the device-plugin pod landed on pool %s, want %s", dpOn, dpPool)
		}
		if draOn != "" && draOn != np.Name {
			return false, st, fmt.Errorf("the DRA pod landed on pool %s, want %s", draOn, np.Name)
		}
		if draOn == "" || dpOn == "" {
			return false, st, nil
		}
		for k, v := range np.Spec.Template.Labels {
			if draNode.Labels[k] != v {
				return false, st, fmt.Errorf("the DRA pool's node %s has %s=%q, want %q", draNode.Name, k, draNode.Labels[k], v)
			}
		}
		var claims resourcev1.ResourceClaimList
		if err := c.List(ctx, &claims, client.InNamespace(ns)); err != nil {
			return false, st, err
		}
		if len(claims.Items) != 1 || claims.Items[0].Status.Allocation == nil {
			return false, st + "; claim not allocated yet", nil
		}
		for _, res := range claims.Items[0].Status.Allocation.Devices.Results {
			if res.Pool != draNode.Name {
				return false, st, fmt.Errorf("the DRA pod's device %s is of pool %s, not of its node %s", res.Device, res.Pool, draNode.Name)
			}
		}
		return true, st, nil
	})
}
