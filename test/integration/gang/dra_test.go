package gang_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

const draH100 = `device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"`

// TestDRAGang: gangs whose members claim eight H100s each through a ResourceClaimTemplate, on
// kwok nodes whose GPUs are published as ResourceSlices (as NVIDIA's DRA driver does), with the
// real kube-scheduler's DynamicResources plugin and kube-controller-manager's claim controller.
// A gang of four is admitted whole onto the four H100 nodes (never the L4 one), every claim
// allocated by kube-scheduler to devices of its member's own node. A second gang of two then
// finds no devices free: no member is released (the seven-of-eight trap, in devices), the
// PodGroup says why in device terms; when the first gang goes, the second is admitted.
func TestDRAGang(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	ns := namespace(t)
	pool := map[string]string{"pool": "dra-" + ns}
	class := builders.GPUClass()
	if err := c.Create(ctx, class); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating DeviceClass: %v", err)
	}
	var h100 []string
	for i := range 5 {
		name, product := fmt.Sprintf("%s-h%d", ns, i), "NVIDIA H100 80GB HBM3"
		if i == 4 {
			name, product = ns+"-l4", "NVIDIA L4"
		} else {
			h100 = append(h100, name)
		}
		kwokNode(t, name, 0, pool)
		sl := builders.GPUSlice(name, 8, product, "80Gi")
		if err := c.Create(ctx, sl); err != nil {
			t.Fatalf("creating ResourceSlice: %v", err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), sl) })
	}
	if err := c.Create(ctx, builders.ClaimTemplate("h100x8", ns, 8, draH100)); err != nil {
		t.Fatal(err)
	}
	members := func(group string, n int) {
		t.Helper()
		if err := c.Create(ctx, builders.PodGroup(group, ns).MinMember(int32(n)).Protect(true).Obj()); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			p := builders.Pod(fmt.Sprintf("%s-%d", group, i), ns).Member(group).ClaimFromTemplate("gpus", "h100x8")
			for k, v := range pool {
				p.NodeSelector(k, v)
			}
			if err := c.Create(ctx, p.Obj()); err != nil {
				t.Fatal(err)
			}
		}
	}

	members("train", 4)
	waitAllBound(t, ns, "train", 4, time.Minute)
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{berthv1alpha1.PodGroupLabel: "train"}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, p := range pods.Items {
		if !strings.Contains(strings.Join(h100, ","), p.Spec.NodeName) || seen[p.Spec.NodeName] {
			t.Errorf("member %s on %s: want one member on each H100 node %v", p.Name, p.Spec.NodeName, h100)
		}
		seen[p.Spec.NodeName] = true
		claimOnNode(t, &p)
	}
	// The consolidation guard's do-not-disrupt mark covers DRA members as any other.
	rigtest.Eventually(t, 30*time.Second, 200*time.Millisecond, "every member marked do-not-disrupt", func(ctx context.Context) (bool, string, error) {
		var ps corev1.PodList
		if err := c.List(ctx, &ps, client.InNamespace(ns), client.MatchingLabels{berthv1alpha1.PodGroupLabel: "train"}); err != nil {
			return false, "", err
		}
		marked := 0
		for _, p := range ps.Items {
			if p.Annotations[karpv1.DoNotDisruptAnnotationKey] == "true" {
				marked++
			}
		}
		return marked == 4, fmt.Sprintf("%d of 4 marked", marked), nil
	})

	// No H100 is free: a second gang waits whole, and says why in devices.
	members("next", 2)
	rigtest.Eventually(t, 30*time.Second, 200*time.Millisecond, "the second gang held, saying why", func(ctx context.Context) (bool, string, error) {
		total, gated, bound, err := memberStates(ctx, ns, "next")
		if err != nil {
			return false, "", err
		}
		var pg berthv1alpha1.PodGroup
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "next"}, &pg); err != nil {
			return false, "", err
		}
		msg := fmt.Sprintf("%d members, %d gated, %d bound, conditions %+v", total, gated, bound, pg.Status.Conditions)
		if bound > 0 || gated != total {
			t.Fatalf("a member of the second gang was released while the gang cannot fit: %s", msg)
		}
		for _, cond := range pg.Status.Conditions {
			if strings.Contains(cond.Message, "devices") {
				return total == 2, msg, nil
			}
		}
		return false, msg, nil
	})
	for _, p := range pods.Items {
		if err := c.Delete(ctx, &p, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
	}
	waitAllBound(t, ns, "next", 2, time.Minute)
}

// claimOnNode checks that p's claim is allocated, reserved for p, to devices of p's node.
func claimOnNode(t *testing.T, p *corev1.Pod) {
	t.Helper()
	c := rigtest.Current().Client
	rigtest.Eventually(t, 30*time.Second, 200*time.Millisecond, "the claim of "+p.Name+" allocated on its node", func(ctx context.Context) (bool, string, error) {
		var got corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), &got); err != nil {
			return false, "", err
		}
		if len(got.Status.ResourceClaimStatuses) == 0 || got.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
			return false, "no claim created yet", nil
		}
		var rc resourceapi.ResourceClaim
		if err := c.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: *got.Status.ResourceClaimStatuses[0].ResourceClaimName}, &rc); err != nil {
			return false, "", err
		}
		if rc.Status.Allocation == nil {
			return false, "claim " + rc.Name + " not allocated", nil
		}
		for _, r := range rc.Status.Allocation.Devices.Results {
			if r.Pool != got.Spec.NodeName {
				return false, "", fmt.Errorf("claim %s has device %s/%s, member on %s", rc.Name, r.Pool, r.Device, got.Spec.NodeName)
			}
		}
		return len(rc.Status.Allocation.Devices.Results) == 8, fmt.Sprintf("%d devices", len(rc.Status.Allocation.Devices.Results)), nil
	})
}

// TestDRASharedClaimAndDevicePlugin: a gang whose three members share one ResourceClaim and a
// device-plugin gang, side by side on one cluster. Every member is bound exactly where berth
// pinned it (its pin annotation is kube-scheduler's node): the sharing members on the one node
// whose devices the claim was allocated, the device-plugin members on the device-plugin node.
func TestDRASharedClaimAndDevicePlugin(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	ns := namespace(t)
	pool := map[string]string{"pool": "drashared-" + ns}
	if err := c.Create(ctx, builders.GPUClass()); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating DeviceClass: %v", err)
	}
	for i := range 2 {
		name := fmt.Sprintf("%s-d%d", ns, i)
		kwokNode(t, name, 0, pool)
		sl := builders.GPUSlice(name, 2, "NVIDIA L4", "24Gi")
		if err := c.Create(ctx, sl); err != nil {
			t.Fatalf("creating ResourceSlice: %v", err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), sl) })
	}
	kwokNode(t, ns+"-plugin", 2, pool)
	if err := c.Create(ctx, builders.Claim("shared", ns, 2, "")); err != nil {
		t.Fatal(err)
	}
	for _, g := range []struct {
		name string
		n    int
		mk   func(string) *builders.PodBuilder
	}{
		{"sharing", 3, func(n string) *builders.PodBuilder {
			return builders.Pod(n, ns).Member("sharing").SharedClaim("gpus", "shared")
		}},
		{"plugin", 2, func(n string) *builders.PodBuilder { return builders.Pod(n, ns).Member("plugin").GPU(1) }},
	} {
		if err := c.Create(ctx, builders.PodGroup(g.name, ns).MinMember(int32(g.n)).Obj()); err != nil {
			t.Fatal(err)
		}
		for i := range g.n {
			p := g.mk(fmt.Sprintf("%s-%d", g.name, i))
			for k, v := range pool {
				p.NodeSelector(k, v)
			}
			if err := c.Create(ctx, p.Obj()); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitAllBound(t, ns, "sharing", 3, time.Minute)
	waitAllBound(t, ns, "plugin", 2, time.Minute)
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var claim resourceapi.ResourceClaim
	rigtest.Eventually(t, 30*time.Second, 200*time.Millisecond, "the shared claim allocated", func(ctx context.Context) (bool, string, error) {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shared"}, &claim)
		return err == nil && claim.Status.Allocation != nil, "not allocated", err
	})
	claimNode := claim.Status.Allocation.Devices.Results[0].Pool
	for _, p := range pods.Items {
		if pin := p.Annotations[berthv1alpha1.PinnedNodeAnnotation]; pin != p.Spec.NodeName {
			t.Errorf("member %s pinned to %q, bound to %q", p.Name, pin, p.Spec.NodeName)
		}
		switch group := p.Labels[berthv1alpha1.PodGroupLabel]; {
		case group == "sharing" && p.Spec.NodeName != claimNode:
			t.Errorf("member %s on %s, its shared claim's devices on %s", p.Name, p.Spec.NodeName, claimNode)
		case group == "plugin" && p.Spec.NodeName != ns+"-plugin":
			t.Errorf("device-plugin member %s on %s, want %s-plugin", p.Name, p.Spec.NodeName, ns)
		}
	}
}
