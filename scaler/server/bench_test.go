package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/berth-dev/berth/scaler"
	"github.com/berth-dev/berth/scaler/pods"
	"github.com/berth-dev/berth/scaler/promsource"
	"github.com/berth-dev/berth/scaler/targets"
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
	ref := &pb.ScaledObjectRef{Name: "llama", Namespace: "inference", ScalerMetadata: map[string]string{
		"targetQueueDepth": "4", "targetKVCacheUsage": "0.8", "metricsPort": strconv.Itoa(port)}}
	return grpcClient(b, eng), reps, ref
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

// fleetResolver gives each ScaledObject its own replicas and a pollingInterval.
type fleetResolver struct {
	pods map[string][]scaler.Pod
	poll time.Duration
}

func (r *fleetResolver) Resolve(_ context.Context, _, name string, _ *scaler.Trigger) (targets.Info, error) {
	return targets.Info{Selector: labels.Set{"app": name}.AsSelector(), MaxReplicas: 1000, PollingInterval: r.poll}, nil
}

// Replicas says nothing of the target: the decisions hold at the live replicas.
func (r *fleetResolver) Replicas(context.Context, string, targets.Info) (int, bool, error) {
	return 0, false, nil
}

func (r *fleetResolver) List(_ context.Context, _ string, sel labels.Selector) ([]scaler.Pod, error) {
	for name, p := range r.pods {
		if sel.Matches(labels.Set{"app": name}) {
			return p, nil
		}
	}
	return nil, nil
}

// BenchmarkGetMetricsFromMemory is KEDA's GetMetrics against a scaler that reads its replicas
// in the background, with KEDA's default pollingInterval (30 s: every replica read each 10 s)
// and a short one (3 s: each second), serving real-sized vLLM v1 pages (2 engines, ~67 KiB):
// 50 ScaledObjects × 10 replicas, and 1 × 500. Reports
// GetMetrics p50/p99 (target p99 < 5 ms), and per 100 replicas the process CPU (fake replicas
// serving their pages included: an upper bound of the scaler's own), the heap in use, and the
// process's resident memory once the garbage is returned to the OS (the whole test process:
// an upper bound of the scaler's own, with a baseline of the Go runtime and the test binary).
func BenchmarkGetMetricsFromMemory(b *testing.B) {
	for _, shape := range []struct {
		objects, replicas int
		poll              time.Duration
	}{{50, 10, 30 * time.Second}, {1, 500, 30 * time.Second}, {50, 10, 3 * time.Second}, {1, 500, 3 * time.Second}} {
		poll := shape.poll
		b.Run(fmt.Sprintf("%dx%d/poll-%s", shape.objects, shape.replicas, poll), func(b *testing.B) {
			n := shape.objects * shape.replicas
			reps, port, podList := scalertest.Fleet(b, n)
			page := scalertest.VLLMv1(2, 3, 8, 0.6)
			for _, r := range reps {
				r.Set(page)
			}
			res := &fleetResolver{pods: map[string][]scaler.Pod{}, poll: poll}
			var refs []*pb.ScaledObjectRef
			for o := range shape.objects {
				name := fmt.Sprintf("model-%d", o)
				res.pods[name] = podList[o*shape.replicas : (o+1)*shape.replicas]
				refs = append(refs, &pb.ScaledObjectRef{Name: name, Namespace: "inference", ScalerMetadata: map[string]string{
					"targetQueueDepth": "4", "targetKVCacheUsage": "0.8", "metricsPort": strconv.Itoa(port)}})
			}
			scr := pods.New(pods.Options{Parallel: 32})
			ctx, cancel := context.WithCancel(context.Background())
			b.Cleanup(cancel)
			go scr.Run(ctx, 100*time.Millisecond)
			client := grpcClient(b, &Engine{Resolver: res, Pods: scr, Prometheus: promsource.New(promsource.Options{}), Policy: scaler.DefaultPolicy})
			for _, ref := range refs { // first sight of every replica, as after a restart
				if _, err := client.GetMetrics(ctx, &pb.GetMetricsRequest{ScaledObjectRef: ref, MetricName: scaler.SignalQueue.MetricName()}); err != nil {
					b.Fatal(err)
				}
			}
			time.Sleep(2 * time.Second) // background reads settle into their cadence
			var before, after syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
			wall := time.Now()
			lat := make([]time.Duration, 0, b.N)
			i := 0
			for b.Loop() {
				ref := refs[i%len(refs)]
				i++
				start := time.Now()
				if _, err := client.GetMetrics(ctx, &pb.GetMetricsRequest{ScaledObjectRef: ref, MetricName: scaler.SignalQueue.MetricName()}); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
				time.Sleep(time.Millisecond) // KEDA's calls are spread out, not a tight loop
			}
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
			elapsed := time.Since(wall)
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			cpu := time.Duration(after.Utime.Nano()+after.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()) * time.Nanosecond
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[(len(lat)*99)/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(cpu.Seconds()/elapsed.Seconds()*100/float64(n), "cpu-cores/100rep")
			b.ReportMetric(float64(ms.HeapInuse)/(1<<20)*100/float64(n), "heap-MiB/100rep")
			debug.FreeOSMemory()
			if rss, err := residentMiB(); err == nil {
				b.ReportMetric(rss, "rss-MiB")
				b.ReportMetric(rss*100/float64(n), "rss-MiB/100rep")
			} else {
				b.Logf("resident memory not reported: %v", err)
			}
		})
	}
}

// residentMiB is the process's resident set size (VmRSS in /proc/self/status), in MiB.
func residentMiB() (float64, error) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("reading the process status: %w", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kib float64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%f kB", &kib); err != nil {
				return 0, fmt.Errorf("parsing %q: %w", line, err)
			}
			return kib / 1024, nil
		}
	}
	return 0, errors.New("no VmRSS line in /proc/self/status")
}

// grpcClient serves eng over gRPC on loopback for the benchmark.
func grpcClient(b *testing.B, eng *Engine) pb.ExternalScalerClient {
	b.Helper()
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
	return pb.NewExternalScalerClient(conn)
}
