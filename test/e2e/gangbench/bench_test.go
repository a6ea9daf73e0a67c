package gangbench

import (
	"context"
	"fmt"
	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	"sort"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// scenario is one measured run: n pods of one GPU each, on an EC2 family nothing else uses.
type scenario struct {
	family string
	pool   string // the rig NodePool of the family
	n      int
	berth  bool // a berth gang (PodGroup + gated members) or plain pods
	filler bool // first occupy one GPU of an 8-GPU node, leaving 7 free
}

// BenchmarkGangProvisioning runs the acceptance scenarios once each (they take minutes):
// a 16-member gang with no capacity, and a gang of 8 with 7 GPUs free on an existing node,
// each with berth and on plain Karpenter + kube-scheduler.
func BenchmarkGangProvisioning(b *testing.B) {
	for _, sc := range []struct {
		name string
		s    scenario
	}{
		{"no-capacity/16x1/berth", scenario{family: "g6", pool: "gpu-l4", n: 16, berth: true}},
		{"no-capacity/16x1/plain", scenario{family: "g6e", pool: "gpu-l40s", n: 16}},
		{"7-free/8x1/berth", scenario{family: "p5", pool: "gpu-h100", n: 8, berth: true, filler: true}},
		{"7-free/8x1/plain", scenario{family: "p4d", pool: "gpu-a100", n: 8, filler: true}},
	} {
		b.Run(sc.name, func(b *testing.B) {
			for range b.N {
				res := run(b, sc.s)
				b.ReportMetric(res.provision.Seconds(), "provision-s")
				b.ReportMetric(res.boundIncomplete, "member-s-bound-incomplete")
				b.ReportMetric(res.gpuWasted, "gpu-s-wasted")
				b.ReportMetric(float64(res.nodeClaims), "nodeclaims")
				b.ReportMetric(res.batchSpan.Seconds(), "nodeclaim-span-s")
				b.Logf("%s: all running after %s; member-seconds bound while incomplete %.1f; GPU-seconds wasted %.1f; %d NodeClaims created over %s",
					sc.name, res.provision.Round(100*time.Millisecond), res.boundIncomplete, res.gpuWasted, res.nodeClaims, res.batchSpan.Round(100*time.Millisecond))
			}
		})
	}
}

// result is what one run measured.
type result struct {
	provision       time.Duration // pods created → every pod running
	boundIncomplete float64       // Σ over members of (last bind − own bind), seconds
	gpuWasted       float64       // Σ over members of GPUs × (last start − own start), seconds
	nodeClaims      int
	batchSpan       time.Duration // first to last NodeClaim created for the pods
}

func run(b *testing.B, s scenario) result {
	b.Helper()
	ctx := context.Background()
	c := rigtest.Current().Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-"}}
	if err := c.Create(ctx, ns); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = c.Delete(context.Background(), ns) }()
	before, err := claims(ctx, s.pool)
	if err != nil {
		b.Fatal(err)
	}
	if s.filler {
		filler := builders.Pod("filler", ns.Name).GPU(1).NodeSelector(awsv1.LabelInstanceFamily, s.family).Obj()
		if err := c.Create(ctx, filler); err != nil {
			b.Fatal(err)
		}
		waitRunning(b, ctx, ns.Name, map[string]string{}, 1, 10*time.Minute)
		if before, err = claims(ctx, s.pool); err != nil {
			b.Fatal(err)
		}
	}
	group := "gang"
	sel := map[string]string{"bench": group}
	start := time.Now()
	if s.berth {
		if err := c.Create(ctx, builders.PodGroup(group, ns.Name).MinMember(int32(s.n)).Obj()); err != nil {
			b.Fatal(err)
		}
	}
	for i := range s.n {
		pb := builders.Pod(fmt.Sprintf("%s-%d", group, i), ns.Name).Label("bench", group).GPU(1).
			NodeSelector(awsv1.LabelInstanceFamily, s.family)
		if s.berth {
			pb = pb.Member(group)
		}
		if err := c.Create(ctx, pb.Obj()); err != nil {
			b.Fatal(err)
		}
	}
	o := watch(ctx, ns.Name, sel)
	waitRunning(b, ctx, ns.Name, sel, s.n, 10*time.Minute)
	res := o.stop()
	res.provision = time.Since(start)
	after, err := claims(ctx, s.pool)
	if err != nil {
		b.Fatal(err)
	}
	var first, last time.Time
	for name, t := range after {
		if _, old := before[name]; old {
			continue
		}
		res.nodeClaims++
		if first.IsZero() || t.Before(first) {
			first = t
		}
		if t.After(last) {
			last = t
		}
	}
	res.batchSpan = last.Sub(first)
	return res
}

func claims(ctx context.Context, pool string) (map[string]time.Time, error) {
	var list karpv1.NodeClaimList
	if err := rigtest.Current().Client.List(ctx, &list, client.MatchingLabels{karpv1.NodePoolLabelKey: pool}); err != nil {
		return nil, err
	}
	out := map[string]time.Time{}
	for _, nc := range list.Items {
		out[nc.Name] = nc.CreationTimestamp.Time
	}
	return out, nil
}

func waitRunning(b *testing.B, ctx context.Context, ns string, sel map[string]string, n int, timeout time.Duration) {
	b.Helper()
	rigtest.Eventually(b, timeout, 200*time.Millisecond, fmt.Sprintf("%d pods running", n), func(ctx context.Context) (bool, string, error) {
		var list corev1.PodList
		if err := rigtest.Current().Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels(sel)); err != nil {
			return false, "", err
		}
		running := 0
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running >= n, fmt.Sprintf("%d/%d running", running, n), nil
	})
}

// observer polls the pods every 50 ms and records when each was first seen bound and running.
type observer struct {
	mu      sync.Mutex
	bound   map[string]time.Time
	running map[string]time.Time
	gpus    map[string]int64
	cancel  func()
	done    chan struct{}
}

func watch(ctx context.Context, ns string, sel map[string]string) *observer {
	ctx, cancel := context.WithCancel(ctx)
	o := &observer{bound: map[string]time.Time{}, running: map[string]time.Time{}, gpus: map[string]int64{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(o.done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			var list corev1.PodList
			if err := rigtest.Current().Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels(sel)); err == nil {
				now := time.Now()
				o.mu.Lock()
				for _, p := range list.Items {
					q := p.Spec.Containers[0].Resources.Requests[berthv1alpha1.GPUResource]
					o.gpus[p.Name] = q.Value()
					if _, ok := o.bound[p.Name]; !ok && p.Spec.NodeName != "" {
						o.bound[p.Name] = now
					}
					if _, ok := o.running[p.Name]; !ok && p.Status.Phase == corev1.PodRunning {
						o.running[p.Name] = now
					}
				}
				o.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return o
}

// stop ends the observation and computes the waste figures.
func (o *observer) stop() result {
	o.cancel()
	<-o.done
	o.mu.Lock()
	defer o.mu.Unlock()
	var res result
	res.boundIncomplete = spreadSum(o.bound, nil)
	res.gpuWasted = spreadSum(o.running, o.gpus)
	return res
}

// spreadSum is Σ weight × (latest − t) over the times (weight 1 when weights is nil).
func spreadSum(ts map[string]time.Time, weights map[string]int64) float64 {
	var names []string
	var last time.Time
	for n, t := range ts {
		names = append(names, n)
		if t.After(last) {
			last = t
		}
	}
	sort.Strings(names)
	var sum float64
	for _, n := range names {
		w := 1.0
		if weights != nil {
			w = float64(weights[n])
		}
		sum += w * last.Sub(ts[n]).Seconds()
	}
	return sum
}
