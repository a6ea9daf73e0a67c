package lifecycle_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/events"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestPlainPodsRaceARelease: between a gang's release and its members' binding, plain pods that
// tolerate the GPU taint take the GPUs the members were promised (here deterministically:
// kube-scheduler is stopped while berth releases the gang, and the racers are created bound to
// the node). A pin cannot be rewritten, so the members could never bind; berth notices them
// unschedulable on their node for --stranded-after, recreates them without the pin, and the
// gang is admitted again — whole, on new capacity. No member stays Pending with a pin it can
// never satisfy.
func TestPlainPodsRaceARelease(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	r := rigtest.Current()
	ns := namespace(t, "race")
	gpuPod := func(name string, gpus int) *corev1.Pod {
		return builders.Pod(name, ns).GPU(gpus).NodeSelector(awsv1.LabelInstanceFamily, "g5").
			Tolerate(berthv1alpha1.GPUResource, "", corev1.TaintEffectNoSchedule).Obj()
	}
	// A g5 node with 4 GPUs, kept from consolidation by a small pod.
	filler := gpuPod("filler", 4)
	create(t, filler)
	var node string
	rigtest.Eventually(t, 2*time.Minute, 200*time.Millisecond, "the filler running", func(ctx context.Context) (bool, string, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(filler), filler)
		node = filler.Spec.NodeName
		return filler.Status.Phase == corev1.PodRunning, string(filler.Status.Phase), err
	})
	keeper := builders.Pod("keeper", ns).Node(node).Tolerate(berthv1alpha1.GPUResource, "", corev1.TaintEffectNoSchedule).Obj()
	create(t, keeper)
	if err := c.Delete(ctx, filler, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	rigtest.Eventually(t, 30*time.Second, 100*time.Millisecond, "the filler gone", func(ctx context.Context) (bool, string, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(filler), &corev1.Pod{})
		return client.IgnoreNotFound(err) == nil && err != nil, "", client.IgnoreNotFound(err)
	})

	// kube-scheduler stops; berth admits the gang onto the node's 4 free GPUs and releases it.
	if err := r.StopComponent(rig.BinKubeScheduler, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	restarted := false
	defer func() {
		if !restarted {
			_ = r.StartScheduler(context.Background())
		}
	}()
	create(t, builders.PodGroup("race", ns).MinMember(2).Obj())
	for i := range 2 {
		p := gpuPod(fmt.Sprintf("race-%d", i), 2)
		p.Labels[berthv1alpha1.PodGroupLabel] = "race"
		create(t, p)
	}
	rigtest.Eventually(t, 30*time.Second, 50*time.Millisecond, "the gang released onto "+node, func(ctx context.Context) (bool, string, error) {
		ms, err := members(ctx, ns, "race")
		if err != nil {
			return false, "", err
		}
		released := 0
		for _, m := range ms {
			if !gated(&m) && pinnedTo(&m) == node {
				released++
			}
		}
		_, detail := running(ms)
		return released == 2, detail, nil
	})
	// The racers take the GPUs before kube-scheduler binds the members.
	for i := range 2 {
		racer := builders.Pod(fmt.Sprintf("racer-%d", i), ns).GPU(2).Node(node).Tolerate(berthv1alpha1.GPUResource, "", corev1.TaintEffectNoSchedule).Obj()
		create(t, racer)
	}
	start := time.Now()
	if err := r.StartScheduler(ctx); err != nil {
		t.Fatal(err)
	}
	restarted = true

	ms := waitRunning(t, ns, "race", 2, 3*time.Minute)
	for _, m := range ms {
		if m.Spec.NodeName == node {
			t.Errorf("member %s runs on %s, whose GPUs the racers hold", m.Name, node)
		}
	}
	t.Logf("stranded members recovered: the gang runs on %s %s after kube-scheduler came back", ms[0].Spec.NodeName, time.Since(start).Round(time.Second))
	var evs eventsv1.EventList
	if err := c.List(ctx, &evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	stranded := 0
	for _, e := range evs.Items {
		if e.Reason == events.ReasonMemberStranded && e.Regarding.Name == "race" {
			stranded++
		}
	}
	if stranded == 0 {
		t.Errorf("no %s Event on the PodGroup", events.ReasonMemberStranded)
	}
}

// pinnedTo is the node berth pinned a released member to ("" when none).
func pinnedTo(p *corev1.Pod) string { return p.Annotations[berthv1alpha1.PinnedNodeAnnotation] }
