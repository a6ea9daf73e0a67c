package lws_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/internal/seat"
	"github.com/berth-dev/berth/internal/vllmsim"
	"github.com/berth-dev/berth/test/rigtest"
)

// leaders selects the group leaders of every LeaderWorkerSet (what the emulator serves).
const leaders = berthv1alpha1.LWSWorkerIndexLabel + "=0"

// leaderWorkerSet is what a user writes: groups of size pods, each pod gpus H100s on the rig's
// H100 NodePool, the leader serving after leaderLoad and each worker joining after workerLoad.
func leaderWorkerSet(ns, name string, replicas, size int64, leaderLoad, workerLoad time.Duration) *unstructured.Unstructured {
	return vllmsim.LeaderWorkerSet(ns, name, vllmsim.GroupOptions{Replicas: replicas, Size: size, GPUs: 8,
		Pool: rig.GPUNodePoolName("h100"), Port: metricsPort, LeaderLoad: leaderLoad, WorkerLoad: workerLoad})
}

// group is one group of a LeaderWorkerSet as the API shows it.
type group struct {
	leader  *corev1.Pod
	pods    []corev1.Pod // leader first, live pods only
	ready   int          // pods Ready
	bound   int          // pods bound to a node
	members []string
}

// whole reports whether every pod of a group of size exists and is Ready.
func (g group) whole(size int) bool { return len(g.pods) == size && g.ready == size }

// groups are the live pods of LeaderWorkerSet name by group (the leader's name).
func groups(ctx context.Context, c client.Client, ns, name string) (map[string]*group, error) {
	var list corev1.PodList
	if err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{berthv1alpha1.LWSNameLabel: name}); err != nil {
		return nil, err
	}
	out := map[string]*group{}
	for i := range list.Items {
		p := &list.Items[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		lead := p.Annotations[berthv1alpha1.LWSLeaderNameAnnotation]
		if lead == "" {
			lead = p.Name
		}
		g := out[lead]
		if g == nil {
			g = &group{}
			out[lead] = g
		}
		if lead == p.Name {
			g.leader = p
		}
		g.pods = append(g.pods, *p)
		g.members = append(g.members, p.Name)
		if p.Spec.NodeName != "" {
			g.bound++
		}
		if podReady(p) {
			g.ready++
		}
	}
	for _, g := range out {
		sort.Strings(g.members)
	}
	return out, nil
}

// podReady reports whether a pod's Ready condition is true.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// describe is a one-line view of groups for failure messages.
func describe(gs map[string]*group) string {
	names := make([]string, 0, len(gs))
	for n := range gs {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		g := gs[n]
		parts = append(parts, fmt.Sprintf("%s: %d pods, %d bound, %d ready", n, len(g.pods), g.bound, g.ready))
	}
	return strings.Join(parts, "; ")
}

// scalerGauge is the value of one of the scaler's series (first line starting with prefix), -1
// when it is not exported.
func scalerGauge(ctx context.Context, prefix string) float64 {
	for _, l := range strings.Split(scalerMetrics(ctx), "\n") {
		if strings.HasPrefix(l, prefix) {
			f := strings.Fields(l)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

func scalerMetrics(ctx context.Context) string {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, scalerProc.MetricsURL, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// nodeClaimsOf are the NodeClaims of the nodes a group's pods run on, by node.
func nodeClaimsOf(ctx context.Context, c client.Client, g *group) (map[string]karpv1.NodeClaim, error) {
	var list karpv1.NodeClaimList
	if err := c.List(ctx, &list); err != nil {
		return nil, err
	}
	byNode := map[string]karpv1.NodeClaim{}
	for _, nc := range list.Items {
		byNode[nc.Status.NodeName] = nc
	}
	out := map[string]karpv1.NodeClaim{}
	for _, p := range g.pods {
		if nc, ok := byNode[p.Spec.NodeName]; ok && p.Spec.NodeName != "" {
			out[p.Spec.NodeName] = nc
		}
	}
	return out, nil
}

// seatWatch records, while a test runs, the node each seat in berth's namespace was bound to:
// seats are deleted once their gang is admitted, and Karpenter's Nominated Events do not say
// everything (it writes one per pod per 2 minutes, so a NodeClaim it launches again for a seat
// goes unnamed).
type seatWatch struct {
	mu     sync.Mutex
	nodeOf map[string]string // seat name → node
}

// watchSeats polls berth's namespace for bound seats until the test ends.
func watchSeats(t *testing.T, c client.Client) *seatWatch {
	t.Helper()
	w := &seatWatch{nodeOf: map[string]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			var pods corev1.PodList
			if err := c.List(ctx, &pods, client.InNamespace(rig.BerthNamespace), client.HasLabels{berthv1alpha1.SeatOfLabel}); err == nil {
				w.mu.Lock()
				for _, p := range pods.Items {
					if p.Spec.NodeName != "" {
						w.nodeOf[p.Name] = p.Spec.NodeName
					}
				}
				w.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

// launchedFor is, for each NodeClaim, the gangs (seat-name prefixes "<podgroup>-<uid>-seat-")
// whose seats Karpenter nominated it for or were bound to its node.
func (w *seatWatch) launchedFor(ctx context.Context, t *testing.T, c client.Client) map[string]map[string]bool {
	t.Helper()
	var ncs karpv1.NodeClaimList
	if err := c.List(ctx, &ncs); err != nil {
		t.Fatal(err)
	}
	claimOfNode := map[string]string{}
	for _, nc := range ncs.Items {
		claimOfNode[nc.Status.NodeName] = nc.Name
	}
	out := map[string]map[string]bool{}
	add := func(claim, seatName string) {
		i := strings.Index(seatName, "-seat-")
		if claim == "" || i < 0 {
			return
		}
		if out[claim] == nil {
			out[claim] = map[string]bool{}
		}
		out[claim][seatName[:i+len("-seat-")]] = true
	}
	var evs corev1.EventList
	if err := c.List(ctx, &evs, client.InNamespace(rig.BerthNamespace)); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		for _, claim := range seat.NominatedIn(e) {
			add(claim, e.InvolvedObject.Name)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for name, node := range w.nodeOf {
		add(claimOfNode[node], name)
	}
	return out
}

// oneBatch fails unless a group's nodes are in one zone and those Karpenter launched for it
// came from one batch, created within Karpenter's batch window (10 s idle, at most) of one
// another. A node of the group was launched for it unless its NodeClaim is older than the
// group's PodGroup (spare capacity the group was admitted onto) or was launched for another
// group's seats only (nominated for them or bound by them: Karpenter launching again for a
// seat, docs/gang-provisioning.md, leaves such a node spare for the next group).
func oneBatch(ctx context.Context, t *testing.T, c client.Client, name string, g *group, launchedFor map[string]map[string]bool) int {
	t.Helper()
	ncs, err := nodeClaimsOf(ctx, c, g)
	if err != nil {
		t.Fatal(err)
	}
	var pg berthv1alpha1.PodGroup
	if err := c.Get(ctx, client.ObjectKey{Namespace: g.leader.Namespace, Name: name}, &pg); err != nil {
		t.Fatal(err)
	}
	mine := fmt.Sprintf("%s-%s-seat-", pg.Name, pg.UID)
	var first, last time.Time
	zones := map[string]bool{}
	launched := 0
	for _, nc := range ncs {
		zones[nc.Labels[corev1.LabelTopologyZone]] = true
		at := nc.CreationTimestamp.Time
		if at.Before(pg.CreationTimestamp.Time) || (len(launchedFor[nc.Name]) > 0 && !launchedFor[nc.Name][mine]) {
			continue
		}
		launched++
		if first.IsZero() || at.Before(first) {
			first = at
		}
		if at.After(last) {
			last = at
		}
	}
	t.Logf("group %s: %d nodes, %d launched for it", name, len(ncs), launched)
	if len(ncs) != len(g.pods) {
		t.Errorf("group %s: %d pods on %d Karpenter nodes, want one node per pod (8 GPUs each)", name, len(g.pods), len(ncs))
	}
	if len(zones) != 1 {
		t.Errorf("group %s spans zones %v: its nodes should share one", name, zones)
	}
	if last.Sub(first) > 10*time.Second {
		t.Errorf("group %s: the NodeClaims launched for it were created %v apart — not one batch", name, last.Sub(first))
	}
	return launched
}

// waitGroups waits until LeaderWorkerSet name has want whole groups and no other pod.
func waitGroups(t *testing.T, ns, name string, want, size int, timeout time.Duration) map[string]*group {
	t.Helper()
	c := rigtest.Current().Client
	var out map[string]*group
	rigtest.Eventually(t, timeout, 2*time.Second, fmt.Sprintf("%d whole groups of %s", want, name), func(ctx context.Context) (bool, string, error) {
		gs, err := groups(ctx, c, ns, name)
		if err != nil {
			return false, "", err
		}
		out = gs
		whole := 0
		for _, g := range gs {
			if g.whole(size) {
				whole++
			}
		}
		return whole == want && len(gs) == want, describe(gs) + "; scaler ready " + strconv.FormatFloat(scalerGauge(ctx, "berth_scaler_ready_replicas{"), 'f', -1, 64), nil
	})
	return out
}
