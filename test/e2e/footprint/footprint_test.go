// Package footprint measures berth's controller process at cluster scale on the rig: 1,000 kwok
// nodes with 8 GPUs each, 10,000 pods (8,000 bound, every GPU in use, and 500 gangs of 4 gated
// members waiting for room), its peak resident memory and the CPU it uses once the cluster has
// settled. It has benchmarks only (`make bench`); the results are in docs/benchmarks.md.
package footprint

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

// ScaleEnv scales the cluster down for a quick run: "nodes,gangs" (default 1000,500).
const ScaleEnv = "BERTH_FOOTPRINT_SCALE"

// ProfileEnv names a folder the benchmark saves the controller's heap profile in, once the
// settled minute is measured (go tool pprof -sample_index=inuse_space <file>).
const ProfileEnv = "BERTH_FOOTPRINT_PROFILE"

var berth *rigtest.BerthProcess

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		os.Exit(m.Run()) // no benchmark asked for (plain `go test ./...`): no rig needed
	}
	rigtest.Main(m, rig.Options{}, func(ctx context.Context, r *rig.Rig) error {
		if err := rigtest.StartCluster(ctx, r, rig.KwokOptions{}); err != nil {
			return err
		}
		var err error
		berth, err = rigtest.NewBerthProcess(ctx, r)
		return err
	})
}

// The footprint targets (issue: 1,000 nodes, 10,000 pods, 500 gangs).
const (
	targetPeakRSSBytes = 300e6
	targetSettledCores = 0.25
)

// BenchmarkControllerFootprint loads the cluster with the controller running, waits until every
// gang says why it waits, then measures the controller's CPU over a minute of the settled
// cluster (kwok heartbeats and pod status reports keep coming) and its peak resident memory.
// Targets: peak RSS < 300 MB, CPU < 0.25 core settled; a run past either fails.
//
//	BERTH_TOOLS_DIR=$(hack/build-tools.sh --dir) go test ./test/e2e/footprint -run '^$' -bench Footprint -benchtime 1x -timeout 30m
func BenchmarkControllerFootprint(b *testing.B) {
	nodes, gangs := 1000, 500
	if v := os.Getenv(ScaleEnv); v != "" {
		if _, err := fmt.Sscanf(v, "%d,%d", &nodes, &gangs); err != nil {
			b.Fatalf("%s=%q: want nodes,gangs", ScaleEnv, v)
		}
	}
	for range b.N {
		ctx := context.Background()
		r := rigtest.Current()
		metricsPort, err := rig.FreePort()
		if err != nil {
			b.Fatal(err)
		}
		profilingPort, err := rig.FreePort()
		if err != nil {
			b.Fatal(err)
		}
		berth.Args = []string{fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", metricsPort), fmt.Sprintf("--profiling-bind-address=127.0.0.1:%d", profilingPort)}
		metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)
		if err := berth.Start(ctx); err != nil {
			b.Fatal(err)
		}
		pid := pidOf(b, r, berth.Running)
		start := time.Now()
		ns := "footprint"
		if err := r.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			b.Fatal(err)
		}
		parallel(b, nodes, func(i int) error {
			n := builders.Node(fmt.Sprintf("fp-%04d", i)).GPU(8).Allocatable(corev1.ResourceCPU, "96").Allocatable(corev1.ResourceMemory, "1024Gi").
				Allocatable(corev1.ResourcePods, "110").Obj()
			n.Annotations = map[string]string{berthv1alpha1.KwokNodeAnnotation: "fake"}
			n.Status.Conditions = nil
			return r.Client.Create(ctx, n)
		})
		// The nodes come up first, as a cluster's do: kube-controller-manager takes the
		// not-ready taint off and labels each node at its own pace (minutes for 1,000 on this
		// machine), and every such update asks admission for a cycle. Measured while that still
		// ran, the "settled" minute was the node start-up's cost, not the controller's at rest.
		rigtest.Eventually(b, 15*time.Minute, 2*time.Second, "every node up, untainted and labelled", func(ctx context.Context) (bool, string, error) {
			var list corev1.NodeList
			if err := r.Client.List(ctx, &list); err != nil {
				return false, "", err
			}
			up := 0
			for _, n := range list.Items {
				if len(n.Spec.Taints) == 0 && n.Labels[corev1.LabelOSStable] != "" && n.Labels["beta.kubernetes.io/os"] != "" && nodeReady(&n) {
					up++
				}
			}
			return up >= nodes, fmt.Sprintf("%d of %d nodes up", up, nodes), nil
		})
		nodesUp := time.Since(start)
		// Every GPU in use by a running pod.
		parallel(b, nodes*8, func(i int) error {
			p := builders.Pod(fmt.Sprintf("w-%05d", i), ns).GPU(1).Request(corev1.ResourceCPU, "1").Node(fmt.Sprintf("fp-%04d", i/8)).Obj()
			p.Labels["app"] = fmt.Sprintf("svc-%02d", i%50)
			return r.Client.Create(ctx, p)
		})
		// Gangs that cannot fit: they wait, and say why.
		parallel(b, gangs, func(i int) error {
			return r.Client.Create(ctx, builders.PodGroup(fmt.Sprintf("g%03d", i), ns).MinMember(4).Obj())
		})
		parallel(b, gangs*4, func(i int) error {
			g := fmt.Sprintf("g%03d", i/4)
			return r.Client.Create(ctx, builders.Pod(fmt.Sprintf("%s-%d", g, i%4), ns).Member(g).GPU(1).Obj())
		})
		loaded := time.Since(start) - nodesUp
		rigtest.Eventually(b, 15*time.Minute, 2*time.Second, "every gang says why it waits", func(ctx context.Context) (bool, string, error) {
			var list berthv1alpha1.PodGroupList
			if err := r.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
				return false, "", err
			}
			waiting := 0
			for _, g := range list.Items {
				if c := meta.FindStatusCondition(g.Status.Conditions, berthv1alpha1.ConditionScheduled); c != nil && c.Reason == berthv1alpha1.ReasonUnschedulable {
					waiting++
				}
			}
			return waiting == gangs, fmt.Sprintf("%d of %d gangs Unschedulable", waiting, gangs), nil
		})
		settled := time.Since(start)
		cpu0, cycles0 := cpuSeconds(b, pid), admissionCycles(ctx, b, metricsURL)
		t0 := time.Now()
		time.Sleep(time.Minute)
		cores := (cpuSeconds(b, pid) - cpu0) / time.Since(t0).Seconds()
		cycles := admissionCycles(ctx, b, metricsURL).minus(cycles0)
		rss := peakRSSMiB(b, pid)
		if dir := os.Getenv(ProfileEnv); dir != "" {
			saveHeapProfile(ctx, b, fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/heap", profilingPort), filepath.Join(dir, "footprint-heap.pb.gz"))
		}
		b.ReportMetric(rss, "peak-rss-MiB")
		b.ReportMetric(cores, "settled-cores")
		b.ReportMetric(settled.Seconds(), "settle-s")
		b.ReportMetric(cycles.count, "settled-cycles")
		b.Logf("%d nodes up in %s; %d pods (%d gangs waiting): loaded in %s, settled after %s; controller peak RSS %.0f MiB, %.3f cores over a settled minute; %.0f admission cycles in it (%.1f ms each on average)",
			nodes, nodesUp.Round(time.Second), nodes*8+gangs*4, gangs, loaded.Round(time.Second), (settled - nodesUp).Round(time.Second), rss, cores, cycles.count, 1000*cycles.sum/max(cycles.count, 1))
		// The targets hold at every scale (a smaller cluster costs less), so they are checked at
		// every scale: a run past them fails, it does not only report.
		if bytes := rss * (1 << 20); bytes >= targetPeakRSSBytes {
			b.Errorf("controller peak RSS %.0f MB, target < %.0f MB", bytes/1e6, targetPeakRSSBytes/1e6)
		}
		if cores >= targetSettledCores {
			b.Errorf("controller CPU %.3f cores once settled, target < %.2f", cores, targetSettledCores)
		}
		if err := berth.Stop(); err != nil {
			b.Fatal(err)
		}
	}
}

// parallel runs f for 0..n-1 on 16 workers and fails on the first error.
func parallel(b *testing.B, n int, f func(int) error) {
	b.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	next := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		b.Fatal(first)
	}
}

func pidOf(b *testing.B, r *rig.Rig, name string) int {
	b.Helper()
	for _, c := range r.Components() {
		if c.Name == name && c.Running {
			return c.PID
		}
	}
	b.Fatalf("no running component %s", name)
	return 0
}

// cpuSeconds is the user + system CPU time of process pid (/proc/<pid>/stat, in clock ticks of
// 1/100 s on Linux).
func cpuSeconds(b *testing.B, pid int) float64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name (which is in parentheses and may hold spaces).
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100
}

// peakRSSMiB is the peak resident set of process pid (VmHWM).
func peakRSSMiB(b *testing.B, pid int) float64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			kb, _ := strconv.ParseFloat(strings.Fields(line)[1], 64)
			return kb / 1024
		}
	}
	b.Fatal("no VmHWM in /proc/<pid>/status")
	return 0
}

// cycleStats are the admission cycle histogram's count and sum (seconds).
type cycleStats struct{ count, sum float64 }

func (a cycleStats) minus(b cycleStats) cycleStats {
	return cycleStats{a.count - b.count, a.sum - b.sum}
}

// admissionCycles reads the controller's admission cycle histogram from its metrics endpoint.
func admissionCycles(ctx context.Context, b *testing.B, url string) cycleStats {
	b.Helper()
	code, body, err := rigtest.GetMetrics(ctx, url, "")
	if err != nil || code != 200 {
		b.Fatalf("scraping %s: %d, %v", url, code, err)
	}
	var st cycleStats
	for _, line := range strings.Split(body, "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		switch name {
		case "berth_podgroup_admission_cycle_duration_seconds_count":
			st.count, _ = strconv.ParseFloat(value, 64)
		case "berth_podgroup_admission_cycle_duration_seconds_sum":
			st.sum, _ = strconv.ParseFloat(value, 64)
		}
	}
	return st
}

// nodeReady reports whether n's Ready condition is True.
func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// saveHeapProfile GETs the controller's heap profile and writes it to file.
func saveHeapProfile(ctx context.Context, b *testing.B, url, file string) {
	b.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		b.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatalf("getting the heap profile: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("getting the heap profile: %d, %v", resp.StatusCode, err)
	}
	if err := os.WriteFile(file, data, 0o600); err != nil {
		b.Fatal(err)
	}
	b.Logf("heap profile in %s", file)
}
