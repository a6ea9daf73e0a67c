package nativegangs_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/doctor"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/rigtest"
)

// podGroupInitiallyScheduled is kube-scheduler's condition on a native PodGroup.
const podGroupInitiallyScheduled = "PodGroupInitiallyScheduled"

// TestNativeGangThatDoesNotFitGetsNoCapacity records what upstream leaves out, on the real
// kube-scheduler and Karpenter with berth stopped: a native gang (minCount 4, four pods of 8
// L40S GPUs) with no L40S nodes is never placed, and Karpenter launches nothing for it —
// kube-scheduler's gang cycle marks it SchedulerError, not Unschedulable. berth doctor reports
// the cluster's native gang scheduling as on and this gang as one nothing provisions for. (When
// this test fails because Kubernetes or Karpenter changed, docs/native-gangs.md needs
// revisiting.)
func TestNativeGangThatDoesNotFitGetsNoCapacity(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	if err := berth.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := berth.Start(context.Background()); err != nil {
			t.Errorf("starting berth again: %v", err)
		}
	})
	rigtest.RemovePoolNodes(t, rig.GPUNodePoolName("l40s")) // no candidate node at all
	ns := rigtest.Namespace(t, "native")
	pg, _ := createNativeGang(t, ns, "train", false)
	var reason string
	rigtest.Eventually(t, time.Minute, 250*time.Millisecond, "kube-scheduler's verdict on the gang", func(ctx context.Context) (bool, string, error) {
		var got schedulingv1beta1.PodGroup
		if err := c.Get(ctx, client.ObjectKeyFromObject(pg), &got); err != nil {
			return false, "", err
		}
		cond := meta.FindStatusCondition(got.Status.Conditions, podGroupInitiallyScheduled)
		if cond == nil {
			return false, "no condition yet", nil
		}
		reason = cond.Reason + ": " + cond.Message
		return cond.Status == metav1.ConditionFalse, reason, nil
	})
	t.Logf("kube-scheduler: %s", reason)
	time.Sleep(15 * time.Second) // Karpenter batches pending pods for at most 10 s
	var claims karpv1.NodeClaimList
	if err := c.List(ctx, &claims); err != nil {
		t.Fatal(err)
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	bound := 0
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" {
			bound++
		}
	}
	t.Logf("after 15 s: %d NodeClaims, %d of 4 pods bound", len(claims.Items), bound)
	if bound != 0 {
		t.Errorf("%d members of a gang that does not fit were bound: the gang cycle placed part of it", bound)
	}
	if len(claims.Items) != 0 {
		t.Errorf("Karpenter launched %d NodeClaims for the native gang: upstream now provisions for it; revisit docs/native-gangs.md", len(claims.Items))
	}

	snap, err := doctor.Read(ctx, c, ns)
	if err != nil {
		t.Fatal(err)
	}
	report := doctor.Run(snap)
	if !report.GenericWorkload {
		t.Error("berth doctor reports native gang scheduling off on a cluster that serves scheduling.k8s.io/v1beta1")
	}
	var found []string
	for _, f := range report.Findings {
		if f.Check == doctor.CheckNativeGangWithoutCapacity {
			found = append(found, f.Object+": "+f.Problem)
		}
	}
	if len(found) != 1 || !strings.Contains(found[0], ns+"/train") {
		t.Errorf("doctor's %s findings %v, want the one gang", doctor.CheckNativeGangWithoutCapacity, found)
	}
	// Gone before berth starts again, so berth does not provision for it.
	if err := c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, pg); err != nil {
		t.Fatal(err)
	}
}

// TestBerthGetsANativeGangItsCapacity: the same native gang with berth running (disruptionMode
// all). berth asks Karpenter for the four nodes in one batch; once they are Ready its seats give
// way and kube-scheduler's gang cycle places all four pods on exactly those nodes; every member
// is marked karpenter.sh/do-not-disrupt; no seat is left; the PodGroup's Events say what berth
// did.
func TestBerthGetsANativeGangItsCapacity(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	rigtest.RemovePoolNodes(t, rig.GPUNodePoolName("l40s"))
	ns := rigtest.Namespace(t, "native")
	before := map[string]bool{}
	var claims karpv1.NodeClaimList
	if err := c.List(ctx, &claims); err != nil {
		t.Fatal(err)
	}
	for _, nc := range claims.Items {
		before[nc.Name] = true
	}
	start := time.Now()
	pg, names := createNativeGang(t, ns, "train", true)
	nodes := map[string]bool{}
	rigtest.Eventually(t, 3*time.Minute, 250*time.Millisecond, "the whole gang bound", func(ctx context.Context) (bool, string, error) {
		clear(nodes)
		var status []string
		for _, name := range names {
			var p corev1.Pod
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
				return false, "", err
			}
			if p.Spec.NodeName != "" {
				nodes[p.Spec.NodeName] = true
			}
			status = append(status, fmt.Sprintf("%s node=%q", name, p.Spec.NodeName))
		}
		var got schedulingv1beta1.PodGroup
		if err := c.Get(ctx, client.ObjectKeyFromObject(pg), &got); err != nil {
			return false, "", err
		}
		return len(nodes) == len(names), fmt.Sprintf("%v; PodGroup %v", status, got.Status.Conditions), nil
	})
	bound := time.Since(start)
	if err := c.List(ctx, &claims); err != nil {
		t.Fatal(err)
	}
	var launched []karpv1.NodeClaim
	for _, nc := range claims.Items {
		if !before[nc.Name] {
			launched = append(launched, nc)
		}
	}
	if len(launched) != len(names) {
		t.Errorf("%d NodeClaims launched for a gang of %d", len(launched), len(names))
	}
	var first, last time.Time
	for _, nc := range launched {
		ts := nc.CreationTimestamp.Time
		if first.IsZero() || ts.Before(first) {
			first = ts
		}
		if ts.After(last) {
			last = ts
		}
		if !nodes[nc.Status.NodeName] {
			t.Errorf("NodeClaim %s (node %q) runs no member of the gang (members on %v)", nc.Name, nc.Status.NodeName, nodes)
		}
	}
	if last.Sub(first) > time.Second {
		t.Errorf("NodeClaims created %s apart, want one batch", last.Sub(first))
	}
	rigtest.Eventually(t, time.Minute, 250*time.Millisecond, "members protected, seats gone, PodGroup placed", func(ctx context.Context) (bool, string, error) {
		unprotected := 0
		for _, name := range names {
			var p corev1.Pod
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
				return false, "", err
			}
			if p.Annotations[karpv1.DoNotDisruptAnnotationKey] != "true" {
				unprotected++
			}
		}
		var seats corev1.PodList
		if err := c.List(ctx, &seats, client.MatchingLabels{berthv1alpha1.SeatForNativeGroupLabel: string(pg.UID)}); err != nil {
			return false, "", err
		}
		var got schedulingv1beta1.PodGroup
		if err := c.Get(ctx, client.ObjectKeyFromObject(pg), &got); err != nil {
			return false, "", err
		}
		placed := meta.IsStatusConditionTrue(got.Status.Conditions, podGroupInitiallyScheduled)
		return unprotected == 0 && len(seats.Items) == 0 && placed,
			fmt.Sprintf("%d members without do-not-disrupt, %d seats, PodGroup %v", unprotected, len(seats.Items), got.Status.Conditions), nil
	})
	for _, reason := range []string{"CapacityRequested", "CapacityHandedOver"} {
		rigtest.WaitEvent(t, ns, pg.Name, reason)
	}
	t.Logf("the native gang's 4 members bound on 4 nodes launched in one batch %.1fs after submission", bound.Seconds())
}

// TestNativeGangUnschedulableIsLeftToKarpenter: one L40S node exists (empty), the gang needs
// four. kube-scheduler's gang cycle then reports the gang Unschedulable, and Karpenter provisions
// for its members itself: berth adds no seats (they would double the launch), so exactly the
// three missing nodes are launched and the gang is placed.
func TestNativeGangUnschedulableIsLeftToKarpenter(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	rigtest.RemovePoolNodes(t, rig.GPUNodePoolName("l40s"))
	ns := rigtest.Namespace(t, "native")
	// One empty L40S node: a pod brings it up and goes.
	gpus := resource.MustParse("8")
	warm := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "warm", Namespace: ns}, Spec: corev1.PodSpec{
		NodeSelector: map[string]string{"karpenter.k8s.aws/instance-gpu-name": "l40s"},
		Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{berthv1alpha1.GPUResource: gpus}, Limits: corev1.ResourceList{berthv1alpha1.GPUResource: gpus}}}}}}
	if err := c.Create(ctx, warm); err != nil {
		t.Fatal(err)
	}
	rigtest.Eventually(t, 2*time.Minute, 250*time.Millisecond, "one L40S node up", func(ctx context.Context) (bool, string, error) {
		var p corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(warm), &p); err != nil {
			return false, "", err
		}
		return p.Status.Phase == corev1.PodRunning, string(p.Status.Phase), nil
	})
	if err := c.Delete(ctx, warm, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	var claims karpv1.NodeClaimList
	if err := c.List(ctx, &claims); err != nil {
		t.Fatal(err)
	}
	before := map[string]bool{}
	for _, nc := range claims.Items {
		before[nc.Name] = true
	}
	pg, names := createNativeGang(t, ns, "train", false)
	rigtest.Eventually(t, 3*time.Minute, 250*time.Millisecond, "the whole gang bound", func(ctx context.Context) (bool, string, error) {
		bound := 0
		for _, name := range names {
			var p corev1.Pod
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
				return false, "", err
			}
			if p.Spec.NodeName != "" {
				bound++
			}
		}
		return bound == len(names), fmt.Sprintf("%d of %d bound", bound, len(names)), nil
	})
	if err := c.List(ctx, &claims); err != nil {
		t.Fatal(err)
	}
	launched := 0
	for _, nc := range claims.Items {
		if !before[nc.Name] {
			launched++
		}
	}
	if launched != 3 {
		t.Errorf("%d NodeClaims launched for the 3 members the existing node could not take, want 3", launched)
	}
	var evs corev1.EventList
	if err := c.List(ctx, &evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.InvolvedObject.Name == pg.Name && e.Reason == "CapacityRequested" {
			t.Errorf("berth asked for capacity for a gang Karpenter provisions for itself: %s", e.Message)
		}
	}
}

// createNativeGang creates a native PodGroup (gang minCount 4; disruptionMode all when protect)
// and its four members, each asking for 8 L40S GPUs, and returns the group and member names.
func createNativeGang(t *testing.T, ns, name string, protect bool) (*schedulingv1beta1.PodGroup, []string) {
	t.Helper()
	ctx := context.Background()
	c := rigtest.Current().Client
	pg := &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: schedulingv1beta1.PodGroupSpec{
			SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 4}},
		},
	}
	if protect {
		pg.Spec.DisruptionMode = &schedulingv1beta1.DisruptionMode{All: &schedulingv1beta1.AllDisruptionMode{}}
	}
	if err := c.Create(ctx, pg); err != nil {
		t.Fatalf("creating a native PodGroup (is GenericWorkload on?): %v", err)
	}
	gpus := resource.MustParse("8")
	var names []string
	// Gone before the namespace is: Karpenter cannot evict pods from a terminating namespace,
	// so nodes they run on would outlive the test.
	t.Cleanup(func() {
		for _, n := range names {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n}}
			if err := c.Delete(context.Background(), p, client.GracePeriodSeconds(0)); client.IgnoreNotFound(err) != nil {
				t.Errorf("deleting member %s: %v", n, err)
			}
		}
		if err := c.Delete(context.Background(), pg); client.IgnoreNotFound(err) != nil {
			t.Errorf("deleting PodGroup %s: %v", pg.Name, err)
		}
	})
	for i := range 4 {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, i), Namespace: ns},
			Spec: corev1.PodSpec{
				SchedulingGroup: &corev1.PodSchedulingGroup{PodGroupName: ptr.To(pg.Name)},
				NodeSelector:    map[string]string{"karpenter.k8s.aws/instance-gpu-name": "l40s"},
				Containers: []corev1.Container{{Name: "trainer", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{berthv1alpha1.GPUResource: gpus}, Limits: corev1.ResourceList{berthv1alpha1.GPUResource: gpus}}}},
			}}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		names = append(names, p.Name)
	}
	return pg, names
}
