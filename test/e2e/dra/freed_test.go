package dra_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestDRAGangAdmittedWhenItsDevicesAreFreed: a gang of 2 waits, on a cluster without gang
// provisioning (DRA on a fixed pool), for the L4s a pod holds on the node its members are
// pinned to (by a label). The pod is deleted; its claim's devices are freed after the pod is gone, which no
// pod, node or PodGroup event says. berth runs with a 10-minute resync: the gang is admitted
// within seconds, on the ResourceClaim's own events — before berth watched them, it waited for
// the resync.
func TestDRAGangAdmittedWhenItsDevicesAreFreed(t *testing.T) {
	ctx := context.Background()
	args := slices.Clone(berth.Args)
	restart := func(extra ...string) {
		t.Helper()
		if err := berth.Stop(); err != nil {
			t.Fatal(err)
		}
		berth.Args = append(slices.Clone(args), extra...)
		if err := berth.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { restart() }) // first: the rest of the package needs berth as it was
	restart("--gang-provisioning=false", "--admission-resync=10m")

	c := rigtest.Current().Client
	ns := rigtest.Namespace(t, "drafreed")
	const l4 = `device.attributes["gpu.nvidia.com"].productName.lowerAscii().contains("l4")`
	all, one := builders.ClaimTemplate("eight-l4", ns, 8, l4), builders.ClaimTemplate("one-l4", ns, 1, l4)
	for _, obj := range []client.Object{all, one} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	blocker := runBlocker(t, ns, all.Name) // all 8 L4s of its node
	// The members are pinned to the blocker's node by a label of the test's own, and the node is
	// kept from consolidation while the test runs (empty for a moment, Karpenter removed it and
	// the devices with it).
	node := blocker.Spec.NodeName
	pin := "test.berth.dev/" + ns
	mark := func(v any) {
		t.Helper()
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s},"annotations":{%q:%s}}}`, pin, v, karpv1.DoNotDisruptAnnotationKey, v)
		if err := c.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	mark(`"true"`)
	// The node goes with the test (its NodeClaim deleted: Karpenter taints it at once and
	// removes it once the namespace's pods are gone): left to consolidation, the next test
	// (-shuffle) met a spare g6.48xlarge it did not count on.
	t.Cleanup(func() {
		mark("null")
		var ncs karpv1.NodeClaimList
		if err := c.List(ctx, &ncs); err != nil {
			t.Fatal(err)
		}
		for i := range ncs.Items {
			if nc := &ncs.Items[i]; nc.Status.NodeName == node {
				if err := c.Delete(ctx, nc); err != nil && !apierrors.IsNotFound(err) {
					t.Fatal(err)
				}
			}
		}
	})
	pg := builders.PodGroup("ddp", ns).MinMember(2).Obj()
	if err := c.Create(ctx, pg); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		m := builders.Pod(fmt.Sprintf("ddp-%d", i), ns).Member(pg.Name).Request(corev1.ResourceCPU, "1").
			Tolerate("nvidia.com/gpu", "true", corev1.TaintEffectNoSchedule).NodeSelector(pin, "true").
			ClaimFromTemplate("gpu", one.Name).Obj()
		if err := c.Create(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	rigtest.Eventually(t, time.Minute, 200*time.Millisecond, "the gang waiting for devices", func(ctx context.Context) (bool, string, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(pg), pg)
		cond := meta.FindStatusCondition(pg.Status.Conditions, berthv1alpha1.ConditionScheduled)
		if cond == nil {
			return false, "no Scheduled condition", err
		}
		return cond.Status == metav1.ConditionFalse && cond.Reason == berthv1alpha1.ReasonUnschedulable, cond.Reason + ": " + cond.Message, err
	})
	time.Sleep(2 * time.Second) // the cycles the gang's own changes asked for are over
	if err := c.Delete(ctx, blocker, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	// Well within a minute: a condition message that changed is written again after a minute,
	// and that write's cycle would admit the gang without the watch.
	rigtest.Eventually(t, 20*time.Second, 200*time.Millisecond, "the gang admitted once the blocker's devices are freed", func(ctx context.Context) (bool, string, error) {
		var ms corev1.PodList
		if err := c.List(ctx, &ms, client.InNamespace(ns), client.MatchingLabels{berthv1alpha1.PodGroupLabel: pg.Name}); err != nil {
			return false, "", err
		}
		bound := 0
		for _, m := range ms.Items {
			if m.Spec.NodeName != "" {
				bound++
			}
		}
		// What the gang waits for, and the claims in the namespace, said when it times out.
		var claims resourcev1.ResourceClaimList
		if err := c.List(ctx, &claims, client.InNamespace(ns)); err != nil {
			return false, "", err
		}
		var cs []string
		for _, cl := range claims.Items {
			cs = append(cs, fmt.Sprintf("%s allocated=%v deleting=%v", cl.Name, cl.Status.Allocation != nil, cl.DeletionTimestamp != nil))
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(pg), pg); err != nil {
			return false, "", err
		}
		why := ""
		if cond := meta.FindStatusCondition(pg.Status.Conditions, berthv1alpha1.ConditionScheduled); cond != nil {
			why = cond.Reason + ": " + cond.Message
		}
		return bound == 2, fmt.Sprintf("%d of 2 members bound; %s; claims %v", bound, why, cs), nil
	})
	t.Logf("gang bound %.1f s after the blocker was deleted (resync 10 min)", time.Since(deleted).Seconds())
}
