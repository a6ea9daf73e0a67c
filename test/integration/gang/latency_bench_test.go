package gang_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// BenchmarkAdmissionLatency measures, on the rig (real apiserver, kube-scheduler, kwok nodes,
// berth's manager and webhook), the latency from a gang's last member being created to all of
// its gates removed and to all of its members bound, with capacity present: 120 gangs of 4
// one-GPU members, one after another, onto 60 nodes of 8 GPUs. Reports p50/p99 of both.
func BenchmarkAdmissionLatency(b *testing.B) {
	const gangs, size = 120, 4
	ctx := context.Background()
	c := rigtest.Current().Client
	for i := range 60 {
		n := builders.Node(fmt.Sprintf("lat-%02d", i)).GPU(8).Allocatable(corev1.ResourceCPU, "96").Obj()
		n.Annotations = map[string]string{"kwok.x-k8s.io/node": "fake"}
		n.Status.Conditions = nil
		if err := c.Create(ctx, n); err != nil {
			b.Fatal(err)
		}
	}
	var released, bound []time.Duration
	for b.Loop() {
		released, bound = released[:0], bound[:0]
		ns := fmt.Sprintf("lat-%d", time.Now().UnixNano())
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metaName(ns)}); err != nil {
			b.Fatal(err)
		}
		for g := range gangs {
			name := fmt.Sprintf("g%03d", g)
			if err := c.Create(ctx, builders.PodGroup(name, ns).MinMember(size).Obj()); err != nil {
				b.Fatal(err)
			}
			for m := range size {
				if err := c.Create(ctx, builders.Pod(fmt.Sprintf("%s-%d", name, m), ns).Member(name).GPU(1).Obj()); err != nil {
					b.Fatal(err)
				}
			}
			start := time.Now()
			var rel time.Duration
			for {
				var pods corev1.PodList
				if err := c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{berthv1alpha1.PodGroupLabel: name}); err != nil {
					b.Fatal(err)
				}
				gated, isBound := 0, 0
				for _, p := range pods.Items {
					if len(p.Spec.SchedulingGates) > 0 {
						gated++
					}
					if p.Spec.NodeName != "" {
						isBound++
					}
				}
				if gated == 0 && rel == 0 {
					rel = time.Since(start)
				}
				if isBound == size {
					released = append(released, rel)
					bound = append(bound, time.Since(start))
					break
				}
				if time.Since(start) > time.Minute {
					b.Fatalf("gang %s not bound after a minute", name)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		if err := c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.GracePeriodSeconds(0)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(pct(released, 50).Seconds(), "released-p50-s")
	b.ReportMetric(pct(released, 99).Seconds(), "released-p99-s")
	b.ReportMetric(pct(bound, 50).Seconds(), "bound-p50-s")
	b.ReportMetric(pct(bound, 99).Seconds(), "bound-p99-s")
	b.ReportMetric(float64(len(bound)), "gangs")
}

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s)*p + 99) / 100
	if i > 0 {
		i--
	}
	return s[i]
}
