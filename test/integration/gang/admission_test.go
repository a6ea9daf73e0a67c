package gang_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestGangWaitsForTheLastGPU: 8 members, 7 free GPUs — no member is ever bound and the
// PodGroup says why; one more GPU frees up — all 8 are bound, none before the last gate left.
func TestGangWaitsForTheLastGPU(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	ns := namespace(t)
	kwokNode(t, "wait-a", 8, nil)
	blocker := builders.Pod("blocker", ns).GPU(1).Node("wait-a").Obj()
	if err := c.Create(ctx, blocker); err != nil {
		t.Fatal(err)
	}
	rec := record(t, ns)
	gang(t, ns, "ddp", 8)

	rigtest.Eventually(t, 10*time.Second, 100*time.Millisecond, "PodGroup explains the wait", func(ctx context.Context) (bool, string, error) {
		cond := scheduledCondition(t, ns, "ddp")
		if cond == nil {
			return false, "no Scheduled condition", nil
		}
		return cond.Reason == berthv1alpha1.ReasonUnschedulable, cond.Reason + ": " + cond.Message, nil
	})
	cond := scheduledCondition(t, ns, "ddp")
	for _, want := range []string{"7 of 8 members fit", "needs 8 nvidia.com/gpu", "7 free"} {
		if !strings.Contains(cond.Message, want) {
			t.Errorf("Scheduled message %q lacks %q", cond.Message, want)
		}
	}
	// Hold for a while: nothing may be bound.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		total, gated, bound, err := memberStates(ctx, ns, "ddp")
		if err != nil {
			t.Fatal(err)
		}
		if bound > 0 || gated != total || total != 8 {
			t.Fatalf("while 7 GPUs were free: %d members, %d gated, %d bound", total, gated, bound)
		}
		time.Sleep(200 * time.Millisecond)
	}

	freed := time.Now()
	if err := c.Delete(ctx, blocker, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	waitAllBound(t, ns, "ddp", 8, 15*time.Second)
	rec.lastUngateBeforeFirstBind(t, 8)
	rec.releasedWithin(t, freed, 2*time.Second)

	var pg berthv1alpha1.PodGroup
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ddp"}, &pg); err != nil {
		t.Fatal(err)
	}
	if len(pg.Status.Assignments) != 8 || pg.Status.AdmittedAt == nil || len(pg.Status.Nodes) != 1 || pg.Status.Nodes[0] != "wait-a" {
		t.Errorf("status after admission: assignments %d, admittedAt %v, nodes %v", len(pg.Status.Assignments), pg.Status.AdmittedAt, pg.Status.Nodes)
	}
}

// TestCompetingGangs: two 8-member gangs, 12 free GPUs — the older one is admitted whole on
// the node that takes it all, the other waits, and no GPU is promised twice.
func TestCompetingGangs(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	ns := namespace(t)
	kwokNode(t, "compete-a", 8, nil)
	kwokNode(t, "compete-b", 4, nil)
	gang(t, ns, "first", 8)
	gang(t, ns, "second", 8)

	var admitted, waiting string
	rigtest.Eventually(t, 15*time.Second, 100*time.Millisecond, "one gang bound", func(ctx context.Context) (bool, string, error) {
		_, _, b1, err := memberStates(ctx, ns, "first")
		if err != nil {
			return false, "", err
		}
		_, _, b2, err := memberStates(ctx, ns, "second")
		switch {
		case b1 == 8:
			admitted, waiting = "first", "second"
		case b2 == 8:
			admitted, waiting = "second", "first"
		}
		return admitted != "", fmt.Sprintf("bound: first %d, second %d", b1, b2), err
	})
	time.Sleep(2 * time.Second)
	total, gated, bound, err := memberStates(ctx, ns, waiting)
	if err != nil {
		t.Fatal(err)
	}
	if bound != 0 || gated != total {
		t.Errorf("gang %s (waiting): %d bound, %d of %d gated; want none bound, all gated", waiting, bound, gated, total)
	}
	if cond := scheduledCondition(t, ns, waiting); cond == nil || cond.Reason != berthv1alpha1.ReasonUnschedulable {
		t.Errorf("waiting gang's Scheduled condition = %+v", cond)
	}
	// No node holds more GPUs than it has.
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	perNode := map[string]int64{}
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" {
			q := p.Spec.Containers[0].Resources.Requests[berthv1alpha1.GPUResource]
			perNode[p.Spec.NodeName] += q.Value()
		}
	}
	// First come, first served: "first" (created before "second"; a same-second tie goes by
	// name too) is admitted, all on the node that takes every member.
	if admitted != "first" {
		t.Errorf("admitted %s, want first (the older gang)", admitted)
	}
	if d := cmp.Diff(map[string]int64{"compete-a": 8}, perNode); d != "" {
		t.Errorf("GPUs bound per node (-want +got):\n%s", d)
	}
}

// TestJobGangByApply: a Job with parallelism 4 and the pod-group label, applied together with
// its PodGroup, is admitted as one gang.
func TestJobGangByApply(t *testing.T) {
	ns := namespace(t)
	kwokNode(t, "job-a", 8, nil)
	manifest := fmt.Sprintf(`
apiVersion: scheduling.berth.dev/v1alpha1
kind: PodGroup
metadata: {name: train, namespace: %[1]s}
spec: {minMember: 4}
---
apiVersion: batch/v1
kind: Job
metadata: {name: train, namespace: %[1]s}
spec:
  parallelism: 4
  completions: 4
  completionMode: Indexed
  template:
    metadata:
      labels: {scheduling.berth.dev/pod-group: train}
    spec:
      restartPolicy: Never
      containers:
      - name: trainer
        image: nvcr.io/nvidia/pytorch:25.01-py3
        resources: {limits: {nvidia.com/gpu: 1}}
`, ns)
	apply(t, manifest)
	waitAllBound(t, ns, "train", 4, 20*time.Second)
}

// TestAdapters: pods labelled for scheduler-plugins coscheduling (with a berth PodGroup of the
// same name) and for Kueue (whose count annotation gives the PodGroup its size) become gangs.
func TestAdapters(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	ns := namespace(t)
	kwokNode(t, "adapt-a", 8, nil)

	if err := c.Create(ctx, builders.PodGroup("cosched", ns).MinMember(2).Obj()); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		p := builders.Pod(fmt.Sprintf("cosched-%d", i), ns).Label(berthv1alpha1.CoschedulingPodGroupLabel, "cosched").GPU(1).Obj()
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		p := builders.Pod(fmt.Sprintf("kueue-%d", i), ns).Label(berthv1alpha1.KueuePodGroupNameLabel, "kq").GPU(1).Obj()
		p.Annotations = map[string]string{berthv1alpha1.KueuePodGroupTotalCountAnnotation: "3"}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	waitAllBound(t, ns, "cosched", 2, 15*time.Second)
	waitAllBound(t, ns, "kq", 3, 15*time.Second)
	var pg berthv1alpha1.PodGroup
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kq"}, &pg); err != nil {
		t.Fatalf("no PodGroup created for the Kueue group: %v", err)
	}
	if pg.Spec.MinMember != 3 {
		t.Errorf("adapted PodGroup minMember = %d, want 3 from kueue.x-k8s.io/pod-group-total-count", pg.Spec.MinMember)
	}
}

// TestUnlabelledPodsIgnoreAWebhookOutage: with the webhook unreachable, pods without a gang
// label are created as usual; gang members are refused rather than created ungated.
func TestUnlabelledPodsIgnoreAWebhookOutage(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	ns := namespace(t)
	deadWebhook(t)
	if err := c.Create(ctx, builders.Pod("plain", ns).Obj()); err != nil {
		t.Errorf("unlabelled pod refused while the webhook is down: %v", err)
	}
	err := c.Create(ctx, builders.Pod("member", ns).Member("g").Obj())
	if err == nil {
		t.Error("a gang member was created while the webhook was down (it would run ungated)")
	} else if !strings.Contains(err.Error(), "failed calling webhook") {
		t.Errorf("member refused with %v, want a webhook failure", err)
	}
}
