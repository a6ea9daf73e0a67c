package lws_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/internal/vllmsim"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestLoadScalesWholeGroups: an LWS of groups of 2 pods × 8 H100s under a ScaledObject on
// berth's scaler. Load takes it from 1 to 3 groups; every group is adopted as a gang (its
// PodGroup owned by its leader), gets the nodes it lacks from one Karpenter batch (spare nodes
// another group's batch left count as spare), in one zone, has no pod bound
// while another of it waited at berth's gate, and carries do-not-disrupt while it serves.
// The scaler counts a group only once every pod of it is ready (the workers load 30 s longer
// than the leader). Load stops: groups are removed whole, their PodGroups with them, and
// consolidation takes their nodes.
func TestLoadScalesWholeGroups(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	const name, size = "llm", 2
	rigtest.LogEventsOnFailure(t, serving, rig.BerthNamespace, metav1.NamespaceDefault)
	// The first group must meet an empty pool (the batch check below counts on it): the nodes
	// a test run before this one left (-shuffle) go to consolidation first.
	rigtest.Eventually(t, 5*time.Minute, 2*time.Second, "the H100 pool empty before the first group", func(ctx context.Context) (bool, string, error) {
		var ncs karpv1.NodeClaimList
		if err := c.List(ctx, &ncs, client.MatchingLabels{karpv1.NodePoolLabelKey: rig.GPUNodePoolName("h100")}); err != nil {
			return false, "", err
		}
		return len(ncs.Items) == 0, fmt.Sprintf("%d H100 NodeClaims", len(ncs.Items)), nil
	})
	rel := rigtest.WatchReleases(t, serving)
	seats := watchSeats(t, c)
	lws := leaderWorkerSet(serving, name, 1, size, 10*time.Second, 40*time.Second)
	if err := c.Create(ctx, lws); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), lws) })
	so := vllmsim.ScaledObject(serving, name, vllmsim.ScaledObjectOptions{ScalerAddress: scalerProc.GRPCAddress,
		Min: 1, Max: 3, PollingInterval: 5, CooldownPeriod: 10, ScaleDownWindow: 20, MetricsPort: metricsPort,
		TargetQueueDepth: "2", TargetKVCache: "0.8"})
	vllmsim.TargetLeaderWorkerSet(so)
	if err := c.Create(ctx, so); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), so) })
	waitGroups(t, serving, name, 1, size, 5*time.Minute)

	// Under load, sample the scaler's ready replicas against the groups whole at that moment:
	// the scaler's count is older than the API's and groups only grow while scaling up, so a
	// count above the whole groups is a leader counted before its workers were ready.
	var mu sync.Mutex
	var early []string
	halfReady := 0 // samples in which some group's leader was ready and a worker was not
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var sampling sync.WaitGroup
	sampling.Add(1)
	go func() {
		defer sampling.Done()
		for sampleCtx.Err() == nil {
			ready := scalerGauge(sampleCtx, "berth_scaler_ready_replicas{")
			gs, err := groups(sampleCtx, c, serving, name)
			if err == nil {
				whole, half := 0, false
				for _, g := range gs {
					if g.whole(size) {
						whole++
					} else if g.leader != nil && g.ready > 0 && podReady(g.leader) {
						half = true
					}
				}
				mu.Lock()
				if half {
					halfReady++
				}
				if ready > float64(whole) {
					early = append(early, fmt.Sprintf("scaler counted %.0f ready, %d whole (%s)", ready, whole, describe(gs)))
				}
				mu.Unlock()
			}
			select {
			case <-sampleCtx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	// 5 requests/s against 2 per group: three groups.
	if err := sim.SetRate(ctx, 5); err != nil {
		t.Fatal(err)
	}
	gs := waitGroups(t, serving, name, 3, size, 8*time.Minute)
	rigtest.Eventually(t, time.Minute, time.Second, "the scaler counts the three groups", func(ctx context.Context) (bool, string, error) {
		r := scalerGauge(ctx, "berth_scaler_ready_replicas{")
		return r == 3, fmt.Sprintf("ready %v", r), nil
	})
	stopSampling()
	sampling.Wait()
	if len(early) > 0 {
		t.Errorf("the scaler counted groups before every pod of them was ready, %d times; first: %s", len(early), early[0])
	}
	if halfReady == 0 {
		t.Error("no sample caught a group whose leader was ready before its worker: the check above proved nothing")
	}
	t.Logf("%d samples caught a group with its leader ready and a worker not", halfReady)

	gangs := map[string][]string{}
	launchedFor := seats.launchedFor(ctx, t, c)
	launched := 0
	for lead, g := range gs {
		gangs[lead] = g.members
		launched += oneBatch(ctx, t, c, lead, g, launchedFor)
		var pg berthv1alpha1.PodGroup
		if err := c.Get(ctx, client.ObjectKey{Namespace: serving, Name: lead}, &pg); err != nil {
			t.Errorf("group %s has no PodGroup: %v", lead, err)
			continue
		}
		if pg.Spec.MinMember != size || len(pg.OwnerReferences) != 1 || pg.OwnerReferences[0].UID != g.leader.UID {
			t.Errorf("PodGroup %s: minMember %d, owners %+v; want %d, owned by leader %s", lead, pg.Spec.MinMember, pg.OwnerReferences, size, g.leader.UID)
		}
		for _, p := range g.pods {
			if p.Annotations[karpv1.DoNotDisruptAnnotationKey] != "true" {
				t.Errorf("serving pod %s has no do-not-disrupt: consolidation could split its group", p.Name)
			}
		}
	}
	if partly := rel.CheckWhole(t, gangs); partly > 0 {
		t.Errorf("%d of %d groups were partly released", partly, len(gangs))
	}
	// The first group met an empty pool: its nodes at least were launched for it.
	if launched < size {
		t.Errorf("%d nodes launched for the groups in all, want at least the first group's %d: the batch check above proved nothing", launched, size)
	}

	// Load stops: back to one group; the others go whole, with their PodGroups.
	if err := sim.SetRate(ctx, 0); err != nil {
		t.Fatal(err)
	}
	left := waitGroups(t, serving, name, 1, size, 6*time.Minute)
	rigtest.Eventually(t, 2*time.Minute, 2*time.Second, "the removed groups' PodGroups are gone", func(ctx context.Context) (bool, string, error) {
		var pgs berthv1alpha1.PodGroupList
		if err := c.List(ctx, &pgs, client.InNamespace(serving)); err != nil {
			return false, "", err
		}
		var names []string
		for _, pg := range pgs.Items {
			if pg.DeletionTimestamp == nil {
				names = append(names, pg.Name)
			}
		}
		if len(names) != 1 {
			return false, fmt.Sprintf("PodGroups %v", names), nil
		}
		_, kept := left[names[0]]
		return kept, fmt.Sprintf("PodGroups %v", names), nil
	})
	// No node holds part of a group beyond consolidation's delay (the rig's GPU pools: 30 s).
	rigtest.Eventually(t, 5*time.Minute, 2*time.Second, "only the remaining group's nodes are left", func(ctx context.Context) (bool, string, error) {
		var ncs karpv1.NodeClaimList
		if err := c.List(ctx, &ncs, client.MatchingLabels{karpv1.NodePoolLabelKey: rig.GPUNodePoolName("h100")}); err != nil {
			return false, "", err
		}
		live := 0
		for _, nc := range ncs.Items {
			if nc.DeletionTimestamp == nil {
				live++
			}
		}
		return live == size, fmt.Sprintf("%d H100 NodeClaims", live), nil
	})
}

// TestWorkerFailureRestartsItsGroupWhole: a worker of one serving group of two is lost. LWS
// restarts that group (RecreateGroupOnPodRestart); berth admits the new group whole under a
// new PodGroup, while the other group keeps serving throughout.
func TestWorkerFailureRestartsItsGroupWhole(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	ns := rigtest.Namespace(t, "restart")
	const name, size = "svc", 2
	lws := leaderWorkerSet(ns, name, 2, size, 5*time.Second, 10*time.Second)
	if err := c.Create(ctx, lws); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), lws) })
	before := waitGroups(t, ns, name, 2, size, 5*time.Minute)
	var oldPG berthv1alpha1.PodGroup
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-1"}, &oldPG); err != nil {
		t.Fatal(err)
	}
	rel := rigtest.WatchReleases(t, ns)

	// The other group must serve throughout: watch it while the failed one restarts.
	var mu sync.Mutex
	var interrupted []string
	watchCtx, stopWatching := context.WithCancel(ctx)
	var watching sync.WaitGroup
	watching.Add(1)
	go func() {
		defer watching.Done()
		for watchCtx.Err() == nil {
			gs, err := groups(watchCtx, c, ns, name)
			if g := gs[name+"-0"]; err == nil && (g == nil || !g.whole(size) || g.leader.UID != before[name+"-0"].leader.UID) {
				mu.Lock()
				interrupted = append(interrupted, describe(gs))
				mu.Unlock()
			}
			select {
			case <-watchCtx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	worker := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-1-1"}, worker); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, worker); err != nil {
		t.Fatal(err)
	}
	var after map[string]*group
	rigtest.Eventually(t, 5*time.Minute, 2*time.Second, "the failed group restarted whole", func(ctx context.Context) (bool, string, error) {
		gs, err := groups(ctx, c, ns, name)
		if err != nil {
			return false, "", err
		}
		after = gs
		g := gs[name+"-1"]
		return g != nil && g.whole(size) && g.leader.UID != before[name+"-1"].leader.UID, describe(gs), nil
	})
	stopWatching()
	watching.Wait()
	if len(interrupted) > 0 {
		t.Errorf("the other group stopped serving while one restarted (%d samples); first: %s", len(interrupted), interrupted[0])
	}
	var newPG berthv1alpha1.PodGroup
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-1"}, &newPG); err != nil {
		t.Fatal(err)
	}
	if newPG.UID == oldPG.UID || len(newPG.OwnerReferences) != 1 || newPG.OwnerReferences[0].UID != after[name+"-1"].leader.UID {
		t.Errorf("restarted group's PodGroup %s (owners %+v): want a new one owned by the new leader %s", newPG.UID, newPG.OwnerReferences, after[name+"-1"].leader.UID)
	}
	if partly := rel.CheckWhole(t, map[string][]string{name + "-1": after[name+"-1"].members}); partly > 0 {
		t.Error("the restarted group was partly released")
	}
}
