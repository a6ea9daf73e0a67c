package simulate

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/vllmsim"
)

// shortTrace is 20 minutes of chat traffic rising to about two requests a second and back.
func shortTrace(t testing.TB, seed uint64) []vllmsim.TraceRequest {
	t.Helper()
	s := DefaultSynthetic
	s.Duration, s.Period, s.PeakAt = 20*time.Minute, 20*time.Minute, 10*time.Minute
	s.MeanRate, s.Diurnal, s.BurstEvery, s.Seed = 1.2, 0.6, 0, seed
	trace, err := s.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return trace
}

func l4(t testing.TB) Fleet {
	t.Helper()
	f, err := L4Fleet()
	if err != nil {
		t.Fatal(err)
	}
	f.Max, f.WarmUp = 8, 0
	return f
}

func berth(t testing.TB, f Fleet) *Berth {
	t.Helper()
	b, err := NewBerth(BerthName, L4Trigger, BerthBehavior, 15*time.Second, f.Min, f.Max)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// static keeps the fleet where it starts.
type static struct{}

func (static) Name() string                         { return "static" }
func (static) Describe() string                     { return "never scales" }
func (static) Step(time.Duration, View) (int, bool) { return 0, false }

func TestReplayIsDeterministicAndAccountsForEveryRequest(t *testing.T) {
	trace := shortTrace(t, 3)
	f := l4(t)
	a, err := RunInference(f, trace, berth(t, f))
	if err != nil {
		t.Fatal(err)
	}
	b, err := RunInference(f, trace, berth(t, f))
	if err != nil {
		t.Fatal(err)
	}
	if a.GPUHours != b.GPUHours || a.Good != b.Good || a.TTFTP95 != b.TTFTP95 || a.NodeLaunches != b.NodeLaunches {
		t.Errorf("two runs of the same inputs differ: %.4f vs %.4f GPU-hours, %d vs %d good, TTFT p95 %v vs %v", a.GPUHours, b.GPUHours, a.Good, b.Good, a.TTFTP95, b.TTFTP95)
	}
	if a.Requests != len(trace) || a.Good > a.Requests || a.Good == 0 {
		t.Errorf("%d requests, %d good: want every one of the trace's %d counted", a.Requests, a.Good, len(trace))
	}
	if a.NodeLaunches < 2 {
		t.Errorf("a load rising to three times one replica's capacity launched %d nodes", a.NodeLaunches)
	}
	// GPU-hours: one GPU per node, at least the minimum fleet for the whole trace.
	if min := a.Duration.Hours(); a.GPUHours < min {
		t.Errorf("%.3f GPU-hours, less than one node for %.3f hours", a.GPUHours, min)
	}
}

func TestAnOverloadedStaticFleetTimesOut(t *testing.T) {
	trace := shortTrace(t, 4)
	f := l4(t)
	r, err := RunInference(f, trace, static{})
	if err != nil {
		t.Fatal(err)
	}
	if r.TimedOut == 0 || r.Attainment() > 0.5 || r.NodeLaunches != 0 {
		t.Errorf("one L4 replica for twice its capacity: %d timed out, attainment %.2f, %d launches", r.TimedOut, r.Attainment(), r.NodeLaunches)
	}
	b, err := RunInference(f, trace, berth(t, f))
	if err != nil {
		t.Fatal(err)
	}
	if b.Attainment() <= r.Attainment() || b.TTFTP95 >= r.TTFTP95 {
		t.Errorf("berth (attainment %.3f, TTFT p95 %.1f s) no better than one static replica (%.3f, %.1f s)", b.Attainment(), b.TTFTP95, r.Attainment(), r.TTFTP95)
	}
}

func TestDutyCycleCannotSeeLoadOnceBusy(t *testing.T) {
	// A steady 0.5 requests/s keeps one L4 busy all the time but far from its capacity: the
	// duty cycle reads ~100 % and the HPA keeps adding replicas, each of which is busy too.
	s := DefaultSynthetic
	s.Duration, s.Diurnal, s.BurstEvery, s.MeanRate = 20*time.Minute, 0, 0, 0.5
	trace, err := s.Generate()
	if err != nil {
		t.Fatal(err)
	}
	f := l4(t)
	d, err := RunInference(f, trace, NewDutyCycle(f.Min, f.Max))
	if err != nil {
		t.Fatal(err)
	}
	b, err := RunInference(f, trace, berth(t, f))
	if err != nil {
		t.Fatal(err)
	}
	if d.GPUHours <= b.GPUHours {
		t.Errorf("duty cycle %.2f GPU-hours, berth %.2f: the duty cycle should over-provision a busy fleet", d.GPUHours, b.GPUHours)
	}
}

func TestHPABehavior(t *testing.T) {
	tests := []struct {
		name  string
		b     HPABehavior
		steps []struct{ at, current, rec int }
		want  []int
	}{
		{"default up: double or +4 per 15 s", DefaultHPABehavior,
			[]struct{ at, current, rec int }{{0, 2, 20}, {15, 6, 20}, {30, 12, 20}},
			[]int{6, 12, 20}},
		{"default down waits out 300 s of higher recommendations", DefaultHPABehavior,
			[]struct{ at, current, rec int }{{0, 10, 10}, {15, 10, 2}, {200, 10, 2}, {316, 10, 2}},
			[]int{10, 10, 10, 2}},
		{"a 10 % scale-down truncates, as the HPA does", HPABehavior{Down: HPARules{Policies: []HPAPolicy{{Percent: true, Value: 10, Period: time.Minute}}}},
			[]struct{ at, current, rec int }{{0, 20, 1}, {60, 18, 1}},
			[]int{18, 16}},
		{"Max of a Pods and a Percent down policy takes the larger change", HPABehavior{Down: HPARules{Policies: []HPAPolicy{{Value: 4, Period: time.Minute}, {Percent: true, Value: 10, Period: time.Minute}}}},
			[]struct{ at, current, rec int }{{0, 3, 1}},
			[]int{1}},
		{"a period's start counts the changes both ways: up by 2 from 10, not from 5", HPABehavior{Up: HPARules{Policies: []HPAPolicy{{Value: 2, Period: time.Minute}}}, Down: HPARules{Policies: []HPAPolicy{{Value: 5, Period: time.Minute}}}},
			[]struct{ at, current, rec int }{{0, 10, 5}, {10, 5, 12}},
			[]int{5, 12}},
		{"one pod a minute down", BerthBehavior,
			[]struct{ at, current, rec int }{{0, 5, 5}, {299, 5, 1}, {301, 5, 1}, {330, 4, 1}, {362, 4, 1}},
			[]int{5, 5, 4, 4, 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := hpa{behavior: tc.b, min: 1, max: 100}
			for i, s := range tc.steps {
				if got := h.normalize(time.Duration(s.at)*time.Second, s.current, s.rec); got != tc.want[i] {
					t.Errorf("step %d (t=%ds, current %d, recommendation %d): %d, want %d", i, s.at, s.current, s.rec, got, tc.want[i])
				}
			}
		})
	}
}

func TestAverageValueTolerance(t *testing.T) {
	if got := averageValue(10.5, 1, 10, DefaultHPABehavior); got != 10 {
		t.Errorf("5 %% over target within 10 %% tolerance: %d, want 10", got)
	}
	if got := averageValue(12, 1, 10, DefaultHPABehavior); got != 12 {
		t.Errorf("20 %% over: %d, want 12", got)
	}
}

func TestKubeAIAveragesOverItsWindow(t *testing.T) {
	k := NewKubeAI(1, 10)
	k.TargetRequests = 10
	mk := func(active int) View {
		p := &pod{replica: &vllmsim.Replica{}, history: []reading{{running: active}}}
		return View{Spec: 1, pods: []*pod{p}}
	}
	// 50 requests in flight for one sample of a 10-minute window: mean 50 → 5 replicas.
	if n, ok := k.Step(10*time.Second, mk(50)); !ok || n != 5 {
		t.Errorf("first sample: %d %v, want 5", n, ok)
	}
	// Then nothing: the mean falls, but only after 30 s of lower counts does it scale down.
	k.Step(20*time.Second, View{Spec: 5, pods: mk(0).pods})
	if _, ok := k.Step(30*time.Second, View{Spec: 5, pods: mk(0).pods}); ok {
		t.Errorf("scaled down before the 30 s delay")
	}
	if n, ok := k.Step(50*time.Second, View{Spec: 5, pods: mk(0).pods}); !ok || n != 2 {
		t.Errorf("after the delay: %d %v, want ceil(mean(50,0,0,0)/10) = 2", n, ok)
	}
}

func TestSyntheticTraffic(t *testing.T) {
	s := DefaultSynthetic
	s.Duration, s.Period, s.PeakAt, s.BurstEvery, s.MeanRate = 2*time.Hour, 2*time.Hour, time.Hour, 0, 5
	a, err := s.Generate()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := s.Generate()
	if len(a) != len(b) || a[len(a)/2] != b[len(b)/2] {
		t.Fatal("the same seed drew different traces")
	}
	if want := 5 * 7200.0; math.Abs(float64(len(a))-want)/want > 0.05 {
		t.Errorf("%d requests, want about %.0f", len(a), want)
	}
	var trough, peak int
	for _, r := range a {
		switch {
		case r.At < 10*time.Minute:
			trough++
		case r.At >= 55*time.Minute && r.At < 65*time.Minute:
			peak++
		}
		if r.Prompt < 1 || r.Output < 1 || r.Prompt+r.Output > s.MaxTokens {
			t.Fatalf("request %+v outside 1..%d tokens", r, s.MaxTokens)
		}
	}
	if ratio := float64(peak) / float64(trough); ratio < 2.5 {
		t.Errorf("peak/trough %d/%d = %.1f, want about 4 with a 0.6 swing", peak, trough, ratio)
	}
	bad := s
	bad.MeanRate, bad.Diurnal = -1, 2
	if _, err := bad.Generate(); err == nil || !strings.Contains(err.Error(), "mean rate") || !strings.Contains(err.Error(), "diurnal") {
		t.Errorf("invalid parameters: %v, want every problem named", err)
	}
}

func TestJobTraceRoundTrip(t *testing.T) {
	jobs, err := DefaultSyntheticJobs.Generate()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteJobs(&buf, jobs); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJobs(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != len(jobs) || back[3].Members != jobs[3].Members || (back[3].Duration-jobs[3].Duration).Abs() > time.Millisecond {
		t.Errorf("round trip changed the jobs: %+v vs %+v", back[3], jobs[3])
	}
	_, err = ReadJobs(strings.NewReader(jobHeader + "\n10,0,8,60\n20,2,8,-1\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2") || !strings.Contains(err.Error(), "line 3") {
		t.Errorf("bad lines: %v, want both named", err)
	}
}

func TestReportWritesTablesGoalsAndPlots(t *testing.T) {
	trace := shortTrace(t, 5)
	f := l4(t)
	c, err := P5Cluster()
	if err != nil {
		t.Fatal(err)
	}
	jobs := []Job{{At: 0, Members: 2, GPUsPerMember: 8, Duration: 30 * time.Minute}, {At: time.Minute, Members: 4, GPUsPerMember: 8, Duration: time.Hour}}
	rep, err := Run(Options{Requests: trace, RequestSource: "test", Fleet: f, Trigger: SLOTrigger(f.SLO), Behavior: BerthBehavior, SyncPeriod: 15 * time.Second,
		Jobs: jobs, JobSource: "two jobs", Cluster: c, Frontier: true, Oracle: true})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := rep.Write(dir); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| berth |", "| unattainable |", "image pull 30s (once per node) and model load 1m0s", "| hpa-duty-cycle |", "| keda-waiting |", "| kubeai-concurrency |", "| oracle |", "### The static-N frontier", "| fixed fleet | GPU-hours |",
		"vs the static-N frontier at equal GPU-hours", "GPU-hours vs the oracle", "| kube-scheduler |", "## Goals", "idle GPU-hours from partial gangs", "replicas.png", "training.png"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	for _, p := range []string{"replicas.png", "queue.png", "ttft.png", "training.png"} {
		if st, err := os.Stat(filepath.Join(dir, p)); err != nil || st.Size() < 1000 {
			t.Errorf("plot %s: %v", p, err)
		}
	}
}
