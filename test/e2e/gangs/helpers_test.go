package gangs_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// namespace creates a namespace for one test and deletes it afterwards.
func namespace(t *testing.T, prefix string) string {
	t.Helper()
	return rigtest.Namespace(t, prefix)
}

// createGang creates a PodGroup and n members, each asking for gpus GPUs of an EC2 family.
func createGang(t *testing.T, pg *berthv1alpha1.PodGroup, n, gpus int, family string) {
	t.Helper()
	ctx := context.Background()
	c := rigtest.Current().Client
	if err := c.Create(ctx, pg); err != nil {
		t.Fatalf("creating PodGroup: %v", err)
	}
	for i := range n {
		p := builders.Pod(fmt.Sprintf("%s-%d", pg.Name, i), pg.Namespace).Member(pg.Name).GPU(gpus).
			NodeSelector(awsv1.LabelInstanceFamily, family).Obj()
		if err := c.Create(ctx, p); err != nil {
			t.Fatalf("creating member %s: %v", p.Name, err)
		}
	}
}

func members(ctx context.Context, ns, group string) ([]corev1.Pod, error) {
	var list corev1.PodList
	err := rigtest.Current().Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{berthv1alpha1.PodGroupLabel: group})
	return list.Items, err
}

func seatsOf(ctx context.Context, pg *berthv1alpha1.PodGroup) ([]corev1.Pod, error) {
	var list corev1.PodList
	err := rigtest.Current().Client.List(ctx, &list, client.InNamespace(rig.BerthNamespace), client.MatchingLabels{berthv1alpha1.SeatOfLabel: string(pg.UID)})
	var live []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	return live, err
}

func getGroup(ctx context.Context, pg *berthv1alpha1.PodGroup) (*berthv1alpha1.PodGroup, error) {
	var out berthv1alpha1.PodGroup
	err := rigtest.Current().Client.Get(ctx, client.ObjectKeyFromObject(pg), &out)
	return &out, err
}

func gated(p *corev1.Pod) bool {
	for _, g := range p.Spec.SchedulingGates {
		if g.Name == berthv1alpha1.SchedulingGate {
			return true
		}
	}
	return false
}

// observation is what the gang observer saw, polling every 25 ms.
type observation struct {
	mu sync.Mutex
	// boundAt is when each member was first seen bound.
	boundAt map[string]time.Time
	// maxSeats is the most seats that existed at once.
	maxSeats int
	// earlyBinds are members seen bound while another member still had its gate.
	earlyBinds []string
	// seatsReadyAt is when every seat was first seen on a node berth can use (Ready, the rig's
	// booting taint gone); ungatedAt is when no member was first seen gated.
	seatsReadyAt, ungatedAt time.Time
	// seatNodes are the nodes seats were seen bound to; usableAt is when each node was first
	// seen usable. Admission can release the gang and delete its seats between two polls of a
	// loaded machine, so "every seat on a usable node" is also taken from these.
	seatNodes map[string]bool
	usableAt  map[string]time.Time
	// errs are read errors.
	errs []error
}

// seatsUsableAt is when every seat's node was usable: seen directly, or else the latest time
// one of the nodes seats were bound to was first seen usable.
func (o *observation) seatsUsableAt() time.Time {
	if !o.seatsReadyAt.IsZero() || len(o.seatNodes) == 0 {
		return o.seatsReadyAt
	}
	var latest time.Time
	for n := range o.seatNodes {
		at, ok := o.usableAt[n]
		if !ok {
			return time.Time{}
		}
		if at.After(latest) {
			latest = at
		}
	}
	return latest
}

// observe polls a gang's members and seats until the returned stop is called.
func observe(pg *berthv1alpha1.PodGroup) (*observation, func() *observation) {
	o := &observation{boundAt: map[string]time.Time{}, seatNodes: map[string]bool{}, usableAt: map[string]time.Time{}}
	ctx := context.Background()
	once := func() {
		ms, err := members(ctx, pg.Namespace, pg.Name)
		seats, err2 := seatsOf(ctx, pg)
		usable, err3 := usableNodes(ctx)
		now := time.Now()
		o.mu.Lock()
		defer o.mu.Unlock()
		if err != nil || err2 != nil || err3 != nil {
			o.errs = append(o.errs, errors.Join(err, err2, err3))
			return
		}
		anyGated := false
		for i := range ms {
			anyGated = anyGated || gated(&ms[i])
		}
		for i := range ms {
			m := &ms[i]
			if m.Spec.NodeName == "" {
				continue
			}
			if _, seen := o.boundAt[m.Name]; !seen {
				o.boundAt[m.Name] = now
				if anyGated {
					o.earlyBinds = append(o.earlyBinds, m.Name)
				}
			}
		}
		o.maxSeats = max(o.maxSeats, len(seats))
		ready := 0
		for _, s := range seats {
			if usable[s.Spec.NodeName] {
				ready++
			}
			if s.Spec.NodeName != "" {
				o.seatNodes[s.Spec.NodeName] = true
			}
		}
		for n, ok := range usable {
			if _, seen := o.usableAt[n]; ok && !seen {
				o.usableAt[n] = now
			}
		}
		if len(seats) > 0 && ready == len(seats) && o.seatsReadyAt.IsZero() {
			o.seatsReadyAt = now
		}
		if len(ms) > 0 && !anyGated && o.ungatedAt.IsZero() {
			o.ungatedAt = now
		}
	}
	// Seats are also watched: a seat can be bound and deleted again between two polls (berth
	// admits the gang the moment its seats are on usable nodes), and every node a seat was on
	// must be known to judge how soon the members followed.
	stopSeats := watchSeatNodes(pg, func(node string) {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.seatNodes[node] = true
	})
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer stopSeats()
		tick := time.NewTicker(25 * time.Millisecond)
		defer tick.Stop()
		for {
			once()
			select {
			case <-stop:
				// One last look: on a loaded machine the last members may have been bound
				// after the previous one, while the caller already saw them running.
				once()
				return
			case <-tick.C:
			}
		}
	}()
	return o, func() *observation {
		close(stop)
		<-done
		return o
	}
}

// watchSeatNodes calls seen with the node of every state of the gang's seats a watch delivers
// (a retry watcher: it resumes where a broken watch stopped), until the returned stop is called.
func watchSeatNodes(pg *berthv1alpha1.PodGroup, seen func(node string)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	cs, err := kubernetes.NewForConfig(rigtest.Current().Config)
	if err != nil {
		cancel()
		return func() {}
	}
	sel := berthv1alpha1.SeatOfLabel + "=" + string(pg.UID)
	list, err := cs.CoreV1().Pods(rig.BerthNamespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		cancel()
		return func() {}
	}
	for _, p := range list.Items {
		if p.Spec.NodeName != "" {
			seen(p.Spec.NodeName)
		}
	}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &toolscache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel
			return cs.CoreV1().Pods(rig.BerthNamespace).Watch(ctx, o)
		},
	})
	if err != nil {
		cancel()
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && p.Spec.NodeName != "" {
				seen(p.Spec.NodeName)
			}
		}
	}()
	return func() {
		w.Stop()
		cancel()
		<-done
	}
}

// usableNodes are the nodes admission may place members on: Ready, without the rig's booting
// taint.
func usableNodes(ctx context.Context) (map[string]bool, error) {
	var nodes corev1.NodeList
	if err := rigtest.Current().Client.List(ctx, &nodes); err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, n := range nodes.Items {
		ready := false
		for _, c := range n.Status.Conditions {
			ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
		}
		for _, t := range n.Spec.Taints {
			ready = ready && t.Key != berthv1alpha1.DevBootingTaint
		}
		out[n.Name] = ready
	}
	return out, nil
}

// admittedOnCapacity checks that the gang was released within d of its last seat's node
// becoming usable: admission reacts to that node event (the resync is an hour; a booting-node
// look-again is 5 s, so d must stay under it).
func (o *observation) admittedOnCapacity(t *testing.T, d time.Duration) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	seatsReady := o.seatsUsableAt()
	if seatsReady.IsZero() || o.ungatedAt.IsZero() {
		t.Errorf("did not see every seat's node usable (%v; seats on %v) and then every gate gone (%v)", seatsReady, o.seatNodes, o.ungatedAt)
		return
	}
	if took := o.ungatedAt.Sub(seatsReady); took > d {
		t.Errorf("members released %s after every seat was on a usable node, want within %s", took, d)
	}
}

// incompleteMemberSeconds is the member-seconds members spent bound while the gang was not
// complete: for each member, the time from its bind to the last member's bind.
func (o *observation) incompleteMemberSeconds(n int) (float64, time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.boundAt) != n {
		return -1, 0
	}
	var ts []time.Time
	for _, t := range o.boundAt {
		ts = append(ts, t)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	last := ts[len(ts)-1]
	var sum float64
	for _, t := range ts {
		sum += last.Sub(t).Seconds()
	}
	return sum, last.Sub(ts[0])
}

// nodeClaims lists NodeClaims whose NodePool is pool (all when pool is empty).
func nodeClaims(ctx context.Context, pool string) ([]karpv1.NodeClaim, error) {
	var list karpv1.NodeClaimList
	var opts []client.ListOption
	if pool != "" {
		opts = append(opts, client.MatchingLabels{karpv1.NodePoolLabelKey: pool})
	}
	err := rigtest.Current().Client.List(ctx, &list, opts...)
	return list.Items, err
}

// claimsFor returns the NodeClaims behind the given nodes.
func claimsFor(ctx context.Context, nodes map[string]bool) ([]karpv1.NodeClaim, error) {
	all, err := nodeClaims(ctx, "")
	var out []karpv1.NodeClaim
	for _, nc := range all {
		if nodes[nc.Status.NodeName] {
			out = append(out, nc)
		}
	}
	return out, err
}

// clearPool deletes the NodeClaims an earlier test left in NodePool pool and waits until they
// are gone: a test that must see its gangs go through seats cannot find capacity waiting.
func clearPool(t *testing.T, pool string) {
	t.Helper()
	ctx := context.Background()
	c := rigtest.Current().Client
	leftover, err := nodeClaims(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	for i := range leftover {
		if err := c.Delete(ctx, &leftover[i]); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
	}
	rigtest.Eventually(t, 2*time.Minute, 500*time.Millisecond, "no capacity left in "+pool+" by earlier tests", func(ctx context.Context) (bool, string, error) {
		left, err := nodeClaims(ctx, pool)
		return len(left) == 0, fmt.Sprintf("%d NodeClaims left", len(left)), err
	})
}

// testPool creates, for the test, a NodePool named name of instance family family, weighted
// above the rig's pools so the test's pods get its nodes: the rig's first GPU pool with those
// changes and edit's. It is deleted when the test ends.
func testPool(t *testing.T, name, family string, edit func(*karpv1.NodePool)) *karpv1.NodePool {
	t.Helper()
	pool := rig.DevNodePools()[0].DeepCopy()
	pool.Name = name
	pool.ResourceVersion = ""
	pool.Spec.Template.Spec.Requirements[0].Values = []string{family}
	pool.Spec.Weight = ptr.To[int32](100)
	edit(pool)
	c := rigtest.Current().Client
	if err := c.Create(context.Background(), pool); err != nil {
		t.Fatalf("creating NodePool %s: %v", name, err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), pool) })
	return pool
}
