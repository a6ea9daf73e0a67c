package gangs_test

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// staticNodes are the 8-GPU nodes the one-GPU gangs fit on (and only they: the gangs select
// their zone): 180 GPUs asked for, 192 there.
const staticNodes = 24

// staticZone is the zone label of the static nodes.
const staticZone = "chaos-static"

// TestKilledAtRandomDuringProvisioning: 100 gangs of two members arrive while the controller is
// SIGKILLed every 0.5–2 s and started again. Ninety ask for one GPU each and fit on static nodes;
// ten ask for two 4-GPU members on p5 nodes, which do not exist, and get them from Karpenter
// through seats (80 GPUs, well inside the rig's p5 NodePool limit of 128 with what earlier tests
// left).
// Every gang ends bound whole, none partly released, no seat left behind, and no NodeClaim
// launched twice (a seat created twice would launch a node no member uses).
func TestKilledAtRandomDuringProvisioning(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	ns := namespace(t, "chaos")
	started := metav1.Now()
	seed := rigtest.Seed(t)
	rng := rand.New(rand.NewSource(seed))
	for i := range staticNodes {
		n := builders.Node(fmt.Sprintf("chaos-static-%02d", i)).Zone(staticZone).GPU(8).Allocatable(corev1.ResourceCPU, "96").Obj()
		n.Annotations = map[string]string{berthv1alpha1.KwokNodeAnnotation: "fake"}
		n.Status.Conditions = nil
		if err := c.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), n) })
	}
	// Static nodes still coming up would send the first gangs to Karpenter for capacity that
	// is about to exist: the test is about gangs that fit and gangs that do not.
	rigtest.Eventually(t, time.Minute, 200*time.Millisecond, "static nodes Ready", func(ctx context.Context) (bool, string, error) {
		ready := 0
		for i := range staticNodes {
			var n corev1.Node
			if err := c.Get(ctx, client.ObjectKey{Name: fmt.Sprintf("chaos-static-%02d", i)}, &n); err != nil {
				return false, "", err
			}
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready == staticNodes, fmt.Sprintf("%d of %d Ready", ready, staticNodes), nil
	})
	// p5 capacity an earlier test left would take seat gangs without seats: it goes first, so
	// every seat gang must go through seats and every NodeClaim launched must carry a member.
	pool := rig.GPUNodePoolName("h100")
	clearPool(t, pool)
	started = metav1.Now()
	rec := rigtest.WatchReleases(t, ns)
	const gangs, size, seatGangs = 100, 2, 10
	all := map[string][]string{}
	stopKilling := berth.KillAtRandom(ctx, seed, 500*time.Millisecond, 2*time.Second)
	for i := range gangs {
		name := fmt.Sprintf("g%03d", i)
		if err := rigtest.CreateRetrying(ctx, c, builders.PodGroup(name, ns).MinMember(size).Obj()); err != nil {
			t.Fatal(err)
		}
		for j := range size {
			b := builders.Pod(fmt.Sprintf("%s-%d", name, j), ns).Member(name).GPU(1).NodeSelector(corev1.LabelTopologyZone, staticZone)
			if i%(gangs/seatGangs) == 0 {
				b = builders.Pod(fmt.Sprintf("%s-%d", name, j), ns).Member(name).GPU(4).NodeSelector(awsv1.LabelInstanceFamily, "p5")
			}
			p := b.Obj()
			if err := rigtest.CreateRetrying(ctx, c, p); err != nil {
				t.Fatal(err)
			}
			all[name] = append(all[name], p.Name)
		}
		time.Sleep(time.Duration(rng.Intn(500)) * time.Millisecond)
	}
	bound := func(ctx context.Context) (int, error) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return 0, err
		}
		n := 0
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" {
				n++
			}
		}
		return n, nil
	}
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		if n, err := bound(ctx); err == nil && n == gangs*size {
			break
		}
		time.Sleep(time.Second)
	}
	kills, killErr := stopKilling()
	if killErr != nil {
		t.Fatal(killErr)
	}
	t.Logf("%d kills", kills)
	if kills < 5 {
		t.Errorf("only %d kills: the run did not exercise restarts", kills)
	}
	rigtest.Eventually(t, 2*time.Minute, time.Second, "every member bound", func(ctx context.Context) (bool, string, error) {
		n, unbound, err := rigtest.CountBound(ctx, c, ns)
		return n == gangs*size, fmt.Sprintf("%d of %d bound; unbound: %s", n, gangs*size, unbound), err
	})
	if partly := rec.CheckWhole(t, all); partly > 0 {
		t.Errorf("%d gangs partly released", partly)
	}
	var groups berthv1alpha1.PodGroupList
	if err := c.List(ctx, &groups, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	throughSeats := 0
	var why []string
	for _, g := range groups.Items {
		if cond := meta.FindStatusCondition(g.Status.Conditions, berthv1alpha1.ConditionCapacityProvisioned); cond != nil {
			throughSeats++
			why = append(why, fmt.Sprintf("%s: %s %s", g.Name, cond.Reason, cond.Message))
		}
	}
	if throughSeats != seatGangs {
		t.Errorf("%d gangs admitted through seats, want the %d that needed p5 capacity (none was left):\n%s", throughSeats, seatGangs, strings.Join(why, "\n"))
	}
	rigtest.Eventually(t, 30*time.Second, 500*time.Millisecond, "no seat left", func(ctx context.Context) (bool, string, error) {
		var left []string
		for name := range all {
			pg, err := getGroup(ctx, builders.PodGroup(name, ns).Obj())
			if err != nil {
				return false, "", err
			}
			seats, err := seatsOf(ctx, pg)
			if err != nil {
				return false, "", err
			}
			for _, s := range seats {
				left = append(left, s.Name)
			}
		}
		return len(left) == 0, strings.Join(left, ", "), nil
	})
	// No more NodeClaims launched than members that needed capacity, and none that carries no
	// member: none for a seat created twice (no p5 capacity existed or was freed meanwhile).
	var members corev1.PodList
	if err := c.List(ctx, &members, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, p := range members.Items {
		used[p.Spec.NodeName] = true
	}
	claims, err := nodeClaims(ctx, rig.GPUNodePoolName("h100"))
	if err != nil {
		t.Fatal(err)
	}
	var unused []string
	launched := 0
	for _, nc := range claims {
		if nc.CreationTimestamp.Before(&started) {
			t.Errorf("NodeClaim %s from before the test survived its deletion", nc.Name)
			continue
		}
		launched++
		if !used[nc.Status.NodeName] {
			unused = append(unused, nc.Name)
		}
	}
	if launched > seatGangs*size {
		t.Errorf("%d NodeClaims launched for %d members that needed capacity (at most one 8-GPU node each): seats were created twice", launched, seatGangs*size)
	}
	if len(unused) > 0 {
		t.Errorf("NodeClaims launched that carry no member: %v", unused)
	}
	t.Logf("%d NodeClaims launched for %d members that needed capacity", launched, seatGangs*size)
}
