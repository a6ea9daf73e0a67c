package gangs_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	autoscalingv1 "k8s.io/autoscaler/cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestProvisioningRequestGetsEveryNodeInOneBatch: a best-effort-atomic-scale-up request for 4
// pods of 8 L40S GPUs (what Kueue's provisioning admission check creates for a 4 × 8-GPU job)
// with no such capacity: berth's seats get one node each from Karpenter, all asked for at once;
// the request is Provisioned (CapacityIsProvisioned) once every seat is on a Ready node; the
// job's pods (Kueue's consume annotation) then take the seats' room, and the booking ends
// (CapacityBookingConsumed) with no seat left.
func TestProvisioningRequestGetsEveryNodeInOneBatch(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	ns := namespace(t, "provreq")
	const n, gpus = 4, 8
	pod := func(name string) *corev1.Pod { return l40sPod(ns, name, gpus) }
	before := claimNames(t)
	start := time.Now()
	pr := bestEffortRequest(t, ns, "train-prov-1", pod("x").Spec, n)
	got := &autoscalingv1.ProvisioningRequest{}
	rigtest.Eventually(t, 3*time.Minute, 200*time.Millisecond, "Provisioned", func(ctx context.Context) (bool, string, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pr), got); err != nil {
			return false, "", err
		}
		cond := meta.FindStatusCondition(got.Status.Conditions, autoscalingv1.Provisioned)
		return cond != nil && cond.Status == metav1.ConditionTrue, fmt.Sprintf("conditions %v", got.Status.Conditions), nil
	})
	provisioned := time.Since(start)
	var seats corev1.PodList
	if err := c.List(ctx, &seats, client.InNamespace(rig.BerthNamespace), client.MatchingLabels{berthv1alpha1.SeatForProvisioningRequestLabel: string(got.UID)}); err != nil {
		t.Fatal(err)
	}
	held := map[string]bool{}
	for _, s := range seats.Items {
		held[s.Spec.NodeName] = true
	}
	if len(seats.Items) != n || len(held) != n {
		t.Fatalf("%d seats on %d nodes, want %d on %d", len(seats.Items), len(held), n, n)
	}
	// The nodes launched here go with the test: other tests of the package count on no g6e
	// capacity being there (consolidation alone would take them only after consolidateAfter).
	t.Cleanup(func() { releaseNodes(t, ns, held) })
	// One batch: every NodeClaim launched for the seats was created within seconds of the first.
	// (An empty g6e node an earlier test left may hold a seat: that one needed no launch.)
	claims, err := nodeClaims(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var created []time.Time
	for _, nc := range claims {
		if !before[nc.Name] && held[nc.Status.NodeName] {
			created = append(created, nc.CreationTimestamp.Time)
		}
	}
	sort.Slice(created, func(i, j int) bool { return created[i].Before(created[j]) })
	if len(created) == 0 {
		t.Fatalf("no NodeClaim launched for the seats: the test needs g6e capacity that is not there")
	}
	if spread := created[len(created)-1].Sub(created[0]); spread > 5*time.Second {
		t.Errorf("NodeClaims created over %s: not one batch", spread)
	}
	if cond := meta.FindStatusCondition(got.Status.Conditions, autoscalingv1.Provisioned); cond.Reason != "CapacityIsProvisioned" {
		t.Errorf("Provisioned reason %q, want CapacityIsProvisioned", cond.Reason)
	}
	t.Logf("Provisioned %s after the request; %d NodeClaims created within %s of each other (%d seat(s) on nodes already there)",
		provisioned.Round(100*time.Millisecond), len(created), created[len(created)-1].Sub(created[0]), n-len(created))

	// The job's pods arrive (Kueue ungates them with the consume annotation) and run where the
	// seats were.
	consumers := time.Now()
	for i := range n {
		p := pod(fmt.Sprintf("train-%d", i))
		p.Annotations = map[string]string{autoscalingv1.ProvisioningRequestPodAnnotationKey: pr.Name,
			autoscalingv1.ProvisioningClassPodAnnotationKey: autoscalingv1.ProvisioningClassBestEffortAtomicScaleUp}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	rigtest.Eventually(t, 2*time.Minute, 200*time.Millisecond, "booking consumed", func(ctx context.Context) (bool, string, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pr), got); err != nil {
			return false, "", err
		}
		cond := meta.FindStatusCondition(got.Status.Conditions, autoscalingv1.BookingExpired)
		if cond != nil && cond.Reason == "CapacityBookingConsumed" {
			return true, "", nil
		}
		// Why not: the request's conditions, each consuming pod's node or what keeps it from
		// one, and the seats still held (a wait that times out says which side is stuck).
		consumers, err := consumerStates(ctx, ns)
		if err != nil {
			return false, "", err
		}
		var seats corev1.PodList
		if err := c.List(ctx, &seats, client.InNamespace(rig.BerthNamespace), client.MatchingLabels{berthv1alpha1.SeatForProvisioningRequestLabel: string(got.UID)}); err != nil {
			return false, "", err
		}
		return false, fmt.Sprintf("conditions %v; consumers: %s; %d seat(s) held", got.Status.Conditions, consumers, len(seats.Items)), nil
	})
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	onBooked := 0
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" {
			t.Errorf("pod %s is not bound", p.Name)
		}
		if held[p.Spec.NodeName] {
			onBooked++
		}
	}
	// kube-scheduler binds them where they fit: on the booked nodes, or on free g6e room an
	// earlier test left.
	t.Logf("every pod bound %s after it was created, %d of %d on the booked nodes", time.Since(consumers).Round(100*time.Millisecond), onBooked, n)
	rigtest.Eventually(t, 30*time.Second, 200*time.Millisecond, "no seat left", func(ctx context.Context) (bool, string, error) {
		var left corev1.PodList
		err := c.List(ctx, &left, client.InNamespace(rig.BerthNamespace), client.MatchingLabels{berthv1alpha1.SeatForProvisioningRequestLabel: string(got.UID)})
		return len(left.Items) == 0, fmt.Sprintf("%d seats", len(left.Items)), err
	})
}

// l40sPod is pod name of namespace ns asking for gpus L40S GPUs (g6e), tolerating the GPU taint.
func l40sPod(ns, name string, gpus int) *corev1.Pod {
	return builders.Pod(name, ns).GPU(gpus).NodeSelector(awsv1.LabelInstanceFamily, "g6e").
		Tolerate(berthv1alpha1.GPUResource, "", corev1.TaintEffectNoSchedule).Obj()
}

// claimNames are the NodeClaims there are now.
func claimNames(t *testing.T) map[string]bool {
	t.Helper()
	claims, err := nodeClaims(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, nc := range claims {
		out[nc.Name] = true
	}
	return out
}

// bestEffortRequest creates a best-effort-atomic-scale-up request name in ns for n pods of spec
// (its PodTemplate ppt-<name>-main first, as Kueue does).
func bestEffortRequest(t *testing.T, ns, name string, spec corev1.PodSpec, n int32) *autoscalingv1.ProvisioningRequest {
	t.Helper()
	ctx, c := context.Background(), rigtest.Current().Client
	tpl := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: "ppt-" + name + "-main", Namespace: ns}, Template: corev1.PodTemplateSpec{Spec: spec}}
	if err := c.Create(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	pr := &autoscalingv1.ProvisioningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: autoscalingv1.ProvisioningRequestSpec{ProvisioningClassName: autoscalingv1.ProvisioningClassBestEffortAtomicScaleUp,
			PodSets: []autoscalingv1.PodSet{{PodTemplateRef: autoscalingv1.Reference{Name: tpl.Name}, Count: n}}},
	}
	if err := c.Create(ctx, pr); err != nil {
		t.Fatal(err)
	}
	return pr
}

// releaseNodes deletes the pods of namespace ns and the NodeClaims behind nodes, and waits until
// those NodeClaims are gone.
func releaseNodes(t *testing.T, ns string, nodes map[string]bool) {
	t.Helper()
	ctx := context.Background()
	c := rigtest.Current().Client
	if err := c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.GracePeriodSeconds(0)); err != nil {
		t.Errorf("deleting the test's pods: %v", err)
	}
	claims, err := claimsFor(ctx, nodes)
	if err != nil {
		t.Errorf("finding the test's NodeClaims: %v", err)
		return
	}
	for i := range claims {
		if err := c.Delete(ctx, &claims[i]); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting NodeClaim %s: %v", claims[i].Name, err)
		}
	}
	rigtest.Eventually(t, time.Minute, 200*time.Millisecond, "the test's NodeClaims gone", func(ctx context.Context) (bool, string, error) {
		left, err := claimsFor(ctx, nodes)
		return len(left) == 0, fmt.Sprintf("%d NodeClaims left", len(left)), err
	})
}

// consumerStates says of each pod of namespace ns where it is bound or, unbound, its scheduling
// gates and what kube-scheduler last said of it.
func consumerStates(ctx context.Context, ns string) (string, error) {
	var pods corev1.PodList
	if err := rigtest.Current().Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		return "", err
	}
	var out []string
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" {
			out = append(out, p.Name+" on "+p.Spec.NodeName)
			continue
		}
		why := "no PodScheduled condition"
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled {
				why = fmt.Sprintf("%s: %s", cond.Reason, cond.Message)
			}
		}
		out = append(out, fmt.Sprintf("%s unbound (gates %v; %s)", p.Name, p.Spec.SchedulingGates, why))
	}
	sort.Strings(out)
	return strings.Join(out, "; "), nil
}

// TestGangConsumingARequestAsksForNoSecondBatch: a request written by hand (no Kueue gate) for
// a gang of 2 × 8 L40S GPUs, and the gang whose members consume it, applied a moment after.
// The request's seats are pending while Karpenter launches their nodes: the gang counts them as
// its own capacity on its way and asks Karpenter for nothing (before, the seats held room on
// no node and the gang asked for a second batch of two nodes beside the request's). It runs on
// the request's nodes, and no NodeClaim beyond the request's two is launched.
func TestGangConsumingARequestAsksForNoSecondBatch(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	ns := namespace(t, "provreq-gang")
	const n, gpus = 2, 8
	pod := func(name string) *corev1.Pod { return l40sPod(ns, name, gpus) }
	before := claimNames(t)
	pr := bestEffortRequest(t, ns, "llm-prov-1", pod("x").Spec, n)
	rigtest.Eventually(t, time.Minute, 50*time.Millisecond, "the request's seats", func(ctx context.Context) (bool, string, error) {
		var seats corev1.PodList
		err := c.List(ctx, &seats, client.InNamespace(rig.BerthNamespace), client.HasLabels{berthv1alpha1.SeatForProvisioningRequestLabel})
		mine := 0
		for _, s := range seats.Items {
			if s.Annotations[berthv1alpha1.SeatForProvisioningRequestAnnotation] == ns+"/"+pr.Name {
				mine++
			}
		}
		return mine == n, fmt.Sprintf("%d seats", mine), err
	})
	pg := builders.PodGroup("llm", ns).MinMember(n).Obj()
	if err := c.Create(ctx, pg); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		p := pod(fmt.Sprintf("llm-%d", i))
		p.Labels[berthv1alpha1.PodGroupLabel] = pg.Name
		p.Annotations = map[string]string{autoscalingv1.ProvisioningRequestPodAnnotationKey: pr.Name,
			autoscalingv1.ProvisioningClassPodAnnotationKey: autoscalingv1.ProvisioningClassBestEffortAtomicScaleUp}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	var got *berthv1alpha1.PodGroup
	rigtest.Eventually(t, 3*time.Minute, 200*time.Millisecond, "gang running", func(ctx context.Context) (bool, string, error) {
		var err error
		if got, err = getGroup(ctx, pg); err != nil {
			return false, "", err
		}
		states, err := consumerStates(ctx, ns)
		return got.Status.Phase == berthv1alpha1.PodGroupRunning, fmt.Sprintf("phase %s conditions %v; members: %s", got.Status.Phase, got.Status.Conditions, states), err
	})
	ms, err := members(ctx, ns, pg.Name)
	if err != nil {
		t.Fatal(err)
	}
	nodes := map[string]bool{}
	for _, m := range ms {
		nodes[m.Spec.NodeName] = true
	}
	t.Cleanup(func() { releaseNodes(t, ns, nodes) })
	if p := got.Status.Provisioning; p != nil {
		t.Errorf("the gang asked Karpenter for capacity of its own: %+v", p)
	}
	claims, err := nodeClaims(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var launched []string
	for _, nc := range claims {
		if !before[nc.Name] {
			launched = append(launched, nc.Name)
		}
	}
	if len(launched) > n {
		t.Errorf("%d NodeClaims launched (%v), want at most the request's %d", len(launched), launched, n)
	}
	t.Logf("gang running on %d node(s); %d NodeClaim(s) launched", len(nodes), len(launched))
}
