package provisioningrequest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	autoscalingv1 "k8s.io/autoscaler/cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// nodes creates n kwok nodes of 8 GPUs labelled pool=<pool> and waits until they are Ready
// and untainted (a check-capacity request counts only capacity that is there).
func nodes(t *testing.T, pool string, n int) {
	t.Helper()
	c := rigtest.Current().Client
	for i := range n {
		node := builders.Node(fmt.Sprintf("%s-%d", pool, i)).GPU(8).Allocatable(corev1.ResourceCPU, "96").Label("pool", pool).Obj()
		node.Annotations = map[string]string{berthv1alpha1.KwokNodeAnnotation: "fake"}
		node.Status.Conditions = nil
		if err := c.Create(context.Background(), node); err != nil {
			t.Fatal(err)
		}
	}
	rigtest.Eventually(t, time.Minute, 200*time.Millisecond, "nodes Ready", func(ctx context.Context) (bool, string, error) {
		var list corev1.NodeList
		if err := c.List(ctx, &list, client.MatchingLabels{"pool": pool}); err != nil {
			return false, "", err
		}
		ready := 0
		for _, n := range list.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue && len(n.Spec.Taints) == 0 {
					ready++
				}
			}
		}
		return ready == n, fmt.Sprintf("%d of %d Ready and untainted", ready, n), nil
	})
}

// request creates a PodTemplate of gpus GPUs on pool and a ProvisioningRequest of class for
// count of them (template missing: the request names a PodTemplate that does not exist).
func request(t *testing.T, ns, name, class, pool string, gpus, count int, template bool, params ...string) *autoscalingv1.ProvisioningRequest {
	t.Helper()
	c := rigtest.Current().Client
	ctx := context.Background()
	if template {
		pod := builders.Pod("x", ns).GPU(gpus).NodeSelector("pool", pool).Obj()
		tpl := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: "ppt-" + name, Namespace: ns},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}}, Spec: pod.Spec}}
		if err := c.Create(ctx, tpl); err != nil {
			t.Fatal(err)
		}
	}
	pr := &autoscalingv1.ProvisioningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: autoscalingv1.ProvisioningRequestSpec{ProvisioningClassName: class,
			PodSets: []autoscalingv1.PodSet{{PodTemplateRef: autoscalingv1.Reference{Name: "ppt-" + name}, Count: int32(count)}}},
	}
	for i := 0; i+1 < len(params); i += 2 {
		if pr.Spec.Parameters == nil {
			pr.Spec.Parameters = map[string]autoscalingv1.Parameter{}
		}
		pr.Spec.Parameters[params[i]] = autoscalingv1.Parameter(params[i+1])
	}
	if err := c.Create(ctx, pr); err != nil {
		t.Fatal(err)
	}
	return pr
}

// waitCondition waits until the request has condition typ with status and reason.
func waitCondition(t *testing.T, pr *autoscalingv1.ProvisioningRequest, typ string, status metav1.ConditionStatus, reason string, timeout time.Duration) *autoscalingv1.ProvisioningRequest {
	t.Helper()
	got := &autoscalingv1.ProvisioningRequest{}
	rigtest.Eventually(t, timeout, 200*time.Millisecond, fmt.Sprintf("%s %s=%s (%s)", pr.Name, typ, status, reason), func(ctx context.Context) (bool, string, error) {
		if err := rigtest.Current().Client.Get(ctx, client.ObjectKeyFromObject(pr), got); err != nil {
			return false, "", err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, typ)
		return c != nil && c.Status == status && c.Reason == reason, fmt.Sprintf("conditions %v", got.Status.Conditions), nil
	})
	return got
}

// seats lists the request's seats.
func seats(ctx context.Context, pr *autoscalingv1.ProvisioningRequest) ([]corev1.Pod, error) {
	var list corev1.PodList
	err := rigtest.Current().Client.List(ctx, &list, client.InNamespace(rig.BerthNamespace), client.MatchingLabels{berthv1alpha1.SeatForProvisioningRequestLabel: string(pr.UID)})
	return list.Items, err
}

// TestCheckCapacityBooksRoomForTheConsumingPods: two 8-GPU pods on a pool of two 8-GPU nodes.
// The request is Accepted and Provisioned (CapacityIsFound) once two seats, pinned to the two
// nodes, are bound; a plain pod that would take the room finds none (the booking holds); the
// consuming pods (Kueue's annotation) take the seats' places one by one and the booking ends
// (BookingExpired, CapacityBookingConsumed) with no seat left.
func TestCheckCapacityBooksRoomForTheConsumingPods(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	ns := rigtest.Namespace(t, "checkcap")
	nodes(t, "cc", 2)
	start := time.Now()
	pr := request(t, ns, "train-a-1", autoscalingv1.ProvisioningClassCheckCapacity, "cc", 8, 2, true)
	got := waitCondition(t, pr, autoscalingv1.Provisioned, metav1.ConditionTrue, "CapacityIsFound", time.Minute)
	t.Logf("Provisioned (CapacityIsFound) %s after the request", time.Since(start).Round(10*time.Millisecond))
	if !meta.IsStatusConditionTrue(got.Status.Conditions, autoscalingv1.Accepted) {
		t.Errorf("not Accepted: %v", got.Status.Conditions)
	}
	ss, err := seats(ctx, got)
	if err != nil {
		t.Fatal(err)
	}
	on := map[string]bool{}
	for _, s := range ss {
		on[s.Spec.NodeName] = true
	}
	if len(ss) != 2 || len(on) != 2 || on[""] {
		t.Fatalf("want 2 seats bound on the 2 nodes, got %d on %v", len(ss), on)
	}

	consumers := time.Now()
	for i := range 2 {
		p := builders.Pod(fmt.Sprintf("train-a-%d", i), ns).GPU(8).NodeSelector("pool", "cc").Obj()
		p.Annotations = map[string]string{autoscalingv1.ProvisioningRequestPodAnnotationKey: pr.Name, autoscalingv1.ProvisioningClassPodAnnotationKey: autoscalingv1.ProvisioningClassCheckCapacity}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	waitCondition(t, pr, autoscalingv1.BookingExpired, metav1.ConditionTrue, "CapacityBookingConsumed", time.Minute)
	t.Logf("every consuming pod bound and the booking consumed %s after they were created", time.Since(consumers).Round(10*time.Millisecond))
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var where []string
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" || !strings.HasPrefix(p.Spec.NodeName, "cc-") {
			t.Errorf("consuming pod %s is on %q", p.Name, p.Spec.NodeName)
		}
		where = append(where, p.Name+"@"+p.Spec.NodeName)
	}
	t.Logf("consuming pods: %v", where)
	rigtest.Eventually(t, 30*time.Second, 200*time.Millisecond, "no seat left", func(ctx context.Context) (bool, string, error) {
		ss, err := seats(ctx, got)
		return len(ss) == 0, fmt.Sprintf("%d seats", len(ss)), err
	})
}

// TestCheckCapacityThatDoesNotFit: three 8-GPU pods on two 8-GPU nodes: Provisioned=False
// (CapacityIsNotFound, to be tried again), no seat; with noRetry the request fails instead.
func TestCheckCapacityThatDoesNotFit(t *testing.T) {
	ctx := context.Background()
	ns := rigtest.Namespace(t, "nofit")
	nodes(t, "nf", 2)
	pr := request(t, ns, "big-1", autoscalingv1.ProvisioningClassCheckCapacity, "nf", 8, 3, true)
	got := waitCondition(t, pr, autoscalingv1.Provisioned, metav1.ConditionFalse, "CapacityIsNotFound", time.Minute)
	if ss, err := seats(ctx, got); err != nil || len(ss) != 0 {
		t.Errorf("seats %d (%v), want none", len(ss), err)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, autoscalingv1.Provisioned); !strings.Contains(c.Message, "try to find it later") {
		t.Errorf("message %q", c.Message)
	}

	noRetry := request(t, ns, "big-2", autoscalingv1.ProvisioningClassCheckCapacity, "nf", 8, 3, true, "noRetry", "true")
	waitCondition(t, noRetry, autoscalingv1.Failed, metav1.ConditionTrue, "CapacityIsNotFound", time.Minute)
}

// TestRequestWithoutItsPodTemplateFails: Failed (FailedToCreatePods), naming the template.
func TestRequestWithoutItsPodTemplateFails(t *testing.T) {
	ns := rigtest.Namespace(t, "notpl")
	pr := request(t, ns, "lost-1", autoscalingv1.ProvisioningClassBestEffortAtomicScaleUp, "none", 8, 1, false)
	got := waitCondition(t, pr, autoscalingv1.Failed, metav1.ConditionTrue, "FailedToCreatePods", time.Minute)
	if c := meta.FindStatusCondition(got.Status.Conditions, autoscalingv1.Failed); !strings.Contains(c.Message, "ppt-lost-1") {
		t.Errorf("message %q does not name the PodTemplate", c.Message)
	}
}

// TestOtherClassesAreLeftAlone: a class berth does not serve gets no condition from berth — while
// berth answers a request of a class it serves, created after it (so the check is not passed
// by a controller that does nothing).
func TestOtherClassesAreLeftAlone(t *testing.T) {
	ctx := context.Background()
	ns := rigtest.Namespace(t, "other")
	pr := request(t, ns, "queued-1", "queued-provisioning.gke.io", "none", 8, 1, true)
	served := request(t, ns, "served-1", autoscalingv1.ProvisioningClassCheckCapacity, "none", 8, 1, true, "noRetry", "true")
	waitCondition(t, served, autoscalingv1.Failed, metav1.ConditionTrue, "CapacityIsNotFound", time.Minute)
	got := &autoscalingv1.ProvisioningRequest{}
	if err := rigtest.Current().Client.Get(ctx, client.ObjectKeyFromObject(pr), got); err != nil {
		t.Fatal(err)
	}
	if len(got.Status.Conditions) != 0 {
		t.Errorf("conditions on another provisioner's request: %v", got.Status.Conditions)
	}
}
