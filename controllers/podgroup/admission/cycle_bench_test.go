package admission

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
)

// BenchmarkCycle: one admission cycle at 1,000 nodes (8 GPUs each, all in use by 8,000 bound
// pods) and 500 waiting gangs of 4 one-GPU members (10,000 pods in all), once the waiting gangs'
// status has settled. Reports the p99 cycle time and writes per cycle (a settled waiting gang
// costs none). Writes go to controller-runtime's fake client; the cycle reads the cluster from
// the admission stores, as in production, fed with what the fake holds once the gangs settled.
//
//	go test ./controllers/podgroup/admission -run '^$' -bench Cycle -cpu 1
func BenchmarkCycle(b *testing.B) {
	objs := fullNodes(1000)
	objs = append(objs, waitingGangs(500)...)
	r, c, writes, clk, _ := budgetHarness(b, objs...)
	ctx := context.Background()
	if _, err := r.Reconcile(ctx, cycleKey); err != nil {
		b.Fatal(err)
	}
	settle := writes.total()
	useStores(b, r, c)
	if cy, err := r.newCycle(ctx); err != nil || len(cy.groups) != 500 || len(cy.members) != 500 {
		b.Fatalf("the stores hold %d PodGroups and %d gangs' members (%v), want 500 and 500", len(cy.groups), len(cy.members), err)
	}
	timeCycles(b, r, clk, writes)
	b.ReportMetric(float64(settle), "settling-writes")
}

// BenchmarkCycleProvisioning: BenchmarkCycle on a cluster out of room with gang provisioning on
// — 1,000 full nodes, 100 empty ones coming up (not Ready yet), 500 waiting gangs of 4 — once
// the gangs' capacity requests have settled: about 300 gangs each holding 4 seats kube-scheduler
// has not bound yet (the rest count on the booting nodes). What counting every unbound seat
// where it will bind (holdUnboundSeats), on both the cycle's snapshot and the booting one, costs
// a cluster waiting for Karpenter.
//
//	go test ./controllers/podgroup/admission -run '^$' -bench CycleProvisioning -cpu 1
func BenchmarkCycleProvisioning(b *testing.B) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC) // the harness's clock
	objs := fullNodes(1000)
	for i := range 100 {
		objs = append(objs, bootingNode(builders.Node(fmt.Sprintf("new-%03d", i)).GPU(8).Allocatable(corev1.ResourceCPU, "192").Obj(), now))
	}
	objs = append(objs, waitingGangs(500)...)
	r, c, writes, clk, _ := budgetHarness(b, objs...)
	r.opts.Provisioning = ProvisioningOptions{Enabled: true}
	ctx := context.Background()
	for range 3 { // the attempts start, their seats are created, then kept
		if _, err := r.Reconcile(ctx, cycleKey); err != nil {
			b.Fatal(err)
		}
		clk.Step(time.Second)
	}
	var seats corev1.PodList
	if err := c.List(ctx, &seats, client.InNamespace(DefaultSeatNamespace)); err != nil {
		b.Fatal(err)
	}
	if len(seats.Items) < 1000 {
		b.Fatalf("%d seats after settling, want the gangs without booting room to hold theirs", len(seats.Items))
	}
	useStores(b, r, c)
	timeCycles(b, r, clk, writes)
	b.ReportMetric(float64(len(seats.Items)), "seats")
}

// fullNodes are n nodes of 8 GPUs each, every GPU used by a running pod (8 per node).
func fullNodes(n int) []client.Object {
	var objs []client.Object
	for i := range n {
		name := fmt.Sprintf("node-%04d", i)
		objs = append(objs, builders.Node(name).GPU(8).Allocatable(corev1.ResourceCPU, "192").Obj())
		for j := range 8 {
			objs = append(objs, builders.Pod(fmt.Sprintf("%s-w%d", name, j), fmt.Sprintf("team-%d", i%10)).GPU(1).Node(name).Phase(corev1.PodRunning).Obj())
		}
	}
	return objs
}

// waitingGangs are n PodGroups of 4 gated one-GPU members each, in namespace ml.
func waitingGangs(n int) []client.Object {
	var objs []client.Object
	for i := range n {
		g := fmt.Sprintf("g%03d", i)
		objs = append(objs, builders.PodGroup(g, "ml").MinMember(4).Obj())
		for j := range 4 {
			objs = append(objs, builders.Pod(fmt.Sprintf("%s-%d", g, j), "ml").Member(g).Gated().GPU(1).Obj())
		}
	}
	return objs
}

// useStores makes r read from stores of c's objects, as in production, with a request cache
// built from those objects (in production its entries come from the informer's objects, which
// share their UID strings with the entries' keys).
func useStores(tb testing.TB, r *Reconciler, c client.Client) {
	tb.Helper()
	r.reader = storesOf(tb, c)
	r.requests = requestCache{}
}

// storesOf fills admission stores with c's PodGroups, pods and nodes, as informer events would.
func storesOf(tb testing.TB, c client.Client) *storeReader {
	tb.Helper()
	t := &trigger{}
	s := &storeReader{groups: newObjectStore(groupChanged, t.fire), pods: newObjectStore(podChanged, t.fire), nodes: newObjectStore(nodeChanged, t.fire)}
	var groups berthv1alpha1.PodGroupList
	var pods corev1.PodList
	var nodes corev1.NodeList
	for _, l := range []client.ObjectList{&groups, &pods, &nodes} {
		if err := c.List(context.Background(), l); err != nil {
			tb.Fatal(err)
		}
	}
	for _, o := range ptrs(groups.Items) {
		s.groups.OnAdd(o, true)
	}
	for _, o := range ptrs(pods.Items) {
		s.pods.OnAdd(o, true)
	}
	for _, o := range ptrs(nodes.Items) {
		s.nodes.OnAdd(o, true)
	}
	s.groups.registered(syncedRegistration{})
	s.pods.registered(syncedRegistration{})
	s.nodes.registered(syncedRegistration{})
	return s
}

// syncedRegistration is an event handler registration whose initial list was delivered.
type syncedRegistration struct {
	toolscache.ResourceEventHandlerRegistration
}

func (syncedRegistration) HasSynced() bool { return true }

// BenchmarkCycleRunning: one admission cycle at 1,000 nodes (8 GPUs each, half in use by 4,000
// bound pods, 4,000 more bound pods without GPUs) and 500 admitted gangs of 4 one-GPU members,
// every member bound (10,000 pods in all incl. 2,000 members): what a cluster of running gangs costs each cycle — each running gang
// is tended (its release, barrier, key, stranded and lost members). Reports the p99 cycle time
// and writes per cycle (a running gang costs none).
//
//	go test ./controllers/podgroup/admission -run '^$' -bench CycleRunning -cpu 1
func BenchmarkCycleRunning(b *testing.B) {
	var objs []client.Object
	for i := range 1000 {
		name := fmt.Sprintf("node-%04d", i)
		objs = append(objs, builders.Node(name).GPU(8).Allocatable(corev1.ResourceCPU, "192").Obj())
		for j := range 4 {
			objs = append(objs, builders.Pod(fmt.Sprintf("%s-w%d", name, j), fmt.Sprintf("team-%d", i%10)).GPU(1).Node(name).Phase(corev1.PodRunning).Obj())
			objs = append(objs, builders.Pod(fmt.Sprintf("%s-s%d", name, j), fmt.Sprintf("team-%d", i%10)).Node(name).Phase(corev1.PodRunning).Obj())
		}
	}
	for i := range 500 {
		g := fmt.Sprintf("g%03d", i)
		objs = append(objs, builders.PodGroup(g, "ml").MinMember(4).Obj())
		for j := range 4 {
			objs = append(objs, builders.Pod(fmt.Sprintf("%s-%d", g, j), "ml").Member(g).Gated().GPU(1).WithReleaseTerm(g).Obj())
		}
	}
	r, c, writes, clk, _ := budgetHarness(b, objs...)
	ctx := context.Background()
	if _, err := r.Reconcile(ctx, cycleKey); err != nil {
		b.Fatal(err)
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace("ml")); err != nil {
		b.Fatal(err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		node := p.Annotations[berthv1alpha1.PinnedNodeAnnotation]
		if node == "" || len(p.Spec.SchedulingGates) != 0 {
			b.Fatalf("member %s not released by the first cycle", p.Name)
		}
		p.Spec.NodeName = node
		p.Status.Phase = corev1.PodRunning
		if err := c.Update(ctx, p); err != nil {
			b.Fatal(err)
		}
	}
	useStores(b, r, c)
	if _, err := r.Reconcile(ctx, cycleKey); err != nil { // the key labels come off
		b.Fatal(err)
	}
	useStores(b, r, c)
	timeCycles(b, r, clk, writes)
}

// timeCycles runs the benchmark's cycles, one simulated second apart, and reports their p50 and
// p99 and the writes per cycle.
func timeCycles(b *testing.B, r *Reconciler, clk *clocktesting.FakeClock, writes *writeCounter) {
	b.Helper()
	ctx := context.Background()
	before := writes.total()
	b.ReportAllocs()
	b.ResetTimer()
	var took []time.Duration
	for b.Loop() {
		clk.Step(time.Second)
		start := time.Now()
		if _, err := r.Reconcile(ctx, cycleKey); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1e3, "p50-ms")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1e3, "p99-ms")
	b.ReportMetric(float64(writes.total()-before)/float64(len(took)), "writes/cycle")
}
