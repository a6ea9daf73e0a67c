package server

import (
	"context"
	"net"
	"sort"
	"strconv"
	"testing"
	"time"

	pb "github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/berth-dev/berth/scaler"
	"github.com/berth-dev/berth/scaler/pods"
	"github.com/berth-dev/berth/scaler/promsource"
	"github.com/berth-dev/berth/test/scalertest"
)

// benchServer serves the scaler over n fake replicas; reuse is the scrape reuse window.
func benchServer(b *testing.B, n int, reuse time.Duration, clk clock.PassiveClock) (pb.ExternalScalerClient, []*scalertest.Replica, *pb.ScaledObjectRef) {
	b.Helper()
	reps, port, podList := scalertest.Fleet(b, n)
	for i, r := range reps {
		r.Set(scalertest.Page(float64(i%7), 8, 0.5+float64(i%5)/10))
	}
	eng := &Engine{Resolver: &staticResolver{pods: podList}, Pods: pods.New(pods.Options{FreshFor: reuse, Clock: clk}),
		Prometheus: promsource.New(promsource.Options{}), Policy: scaler.DefaultPolicy}
	gs, hs := NewGRPCServer(&Server{Engine: eng}, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = Serve(ctx, gs, hs, lis, time.Second) }()
	b.Cleanup(cancel)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	ref := &pb.ScaledObjectRef{Name: "llama", Namespace: "inference", ScalerMetadata: map[string]string{
		"targetQueueDepth": "4", "targetKVCacheUsage": "0.8", "metricsPort": strconv.Itoa(port)}}
	return pb.NewExternalScalerClient(conn), reps, ref
}

// BenchmarkGetMetrics100Replicas is one KEDA GetMetrics for a ScaledObject over 100 replicas
// with nothing cached: every call scrapes all 100 pages in parallel and parses them. Reports
// p50/p99 latency (target: p99 < 50 ms).
func BenchmarkGetMetrics100Replicas(b *testing.B) {
	client, _, ref := benchServer(b, 100, time.Nanosecond, nil)
	req := &pb.GetMetricsRequest{ScaledObjectRef: ref, MetricName: scaler.SignalQueue.MetricName()}
	ctx := context.Background()
	if _, err := client.GetMetrics(ctx, req); err != nil { // connections warm, as in steady state
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		if _, err := client.GetMetrics(ctx, req); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[(len(lat)*99)/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkKEDAPoll is one KEDA poll of a two-metric ScaledObject — GetMetrics for the queue
// and for the KV cache, then IsActive — plus a second ScaledObject on the same pods, with the
// default 2 s scrape reuse. Reports scrapes per replica per poll (1 is the goal).
func BenchmarkKEDAPoll(b *testing.B) {
	clk := clocktesting.NewFakeClock(time.Now())
	client, reps, ref := benchServer(b, 100, 2*time.Second, clk)
	other := &pb.ScaledObjectRef{Name: "llama-kv", Namespace: ref.Namespace, ScalerMetadata: ref.ScalerMetadata}
	ctx := context.Background()
	polls := 0
	b.ResetTimer()
	for b.Loop() {
		for _, r := range []*pb.ScaledObjectRef{ref, other} {
			for _, s := range []scaler.Signal{scaler.SignalQueue, scaler.SignalKVCache} {
				if _, err := client.GetMetrics(ctx, &pb.GetMetricsRequest{ScaledObjectRef: r, MetricName: s.MetricName()}); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := client.IsActive(ctx, r); err != nil {
				b.Fatal(err)
			}
		}
		polls++
		clk.Step(5 * time.Second) // KEDA's next poll comes after the reuse window
	}
	hits := 0
	for _, r := range reps {
		hits += r.Hits()
	}
	b.ReportMetric(float64(hits)/float64(len(reps))/float64(polls), "scrapes/replica/poll")
}
