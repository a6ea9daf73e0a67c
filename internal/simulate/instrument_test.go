package simulate

import (
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/gpu"
	"github.com/berth-dev/berth/internal/vllmsim"
)

// newTestSim is a run of trace through f under a, not started.
func newTestSim(t *testing.T, f Fleet, trace []vllmsim.TraceRequest, a Autoscaler) *fleetSim {
	t.Helper()
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	longest, err := longestAttainable(f)
	if err != nil {
		t.Fatal(err)
	}
	return newFleetSim(f, trace, a, longest)
}

// oneGPUNodes is f on single-GPU nodes: one replica per node.
func oneGPUNodes(t *testing.T, f Fleet) Fleet {
	t.Helper()
	sizes, err := SizesWithGPUs(f.Family, 1)
	if err != nil {
		t.Fatal(err)
	}
	f.Sizes = sizes
	return f
}

// addServing adds a Ready node of size, with the image, and a replica serving on it, to the
// Deployment's replicas.
func addServing(s *fleetSim, size gpu.Size) {
	n := s.launch(size)
	n.ready, n.imagePulled = 0, true
	s.res.NodeLaunches--
	p := s.addPod()
	s.bind(p, n)
	s.serve(p)
	s.spec++
}

// steady is d of requests at rate per second, every one of the given lengths.
func steady(d time.Duration, rate float64, prompt, output int) []vllmsim.TraceRequest {
	var out []vllmsim.TraceRequest
	gap := time.Duration(float64(time.Second) / rate)
	for at := gap; at < d; at += gap {
		out = append(out, vllmsim.TraceRequest{At: at, Prompt: prompt, Output: output})
	}
	return out
}

func TestClientsGiveUpAndTheEngineAbortsTheirRequests(t *testing.T) {
	trace := shortTrace(t, 4) // twice what one replica serves
	f := l4(t)
	s := newTestSim(t, f, trace, static{})
	s.run()
	r := s.result()
	if s.rec.aborted == 0 {
		t.Fatal("an overloaded replica aborted no request")
	}
	// Every request is accounted for once: finished, aborted, failed or lost.
	if got := s.rec.finished + s.rec.aborted + r.Failed + r.Lost; got != r.Requests {
		t.Errorf("%d finished + %d aborted + %d failed + %d lost = %d, want the %d requests", s.rec.finished, s.rec.aborted, r.Failed, r.Lost, got, r.Requests)
	}
	if r.TimedOut < s.rec.aborted || r.Good+r.TimedOut > r.Requests {
		t.Errorf("%d timed out, %d good of %d: the %d aborted must count as timed out, once", r.TimedOut, r.Good, r.Requests, s.rec.aborted)
	}
	// An aborted request leaves the queue: no first token comes later than the timeout and a tick.
	if worst := time.Duration(s.rec.ttft.quantile(1) * float64(time.Second)); worst > f.SLO.Timeout+f.Tick {
		t.Errorf("a first token %s after its arrival: its client had given up after %s", worst, f.SLO.Timeout)
	}
	if deadline := s.end + f.SLO.Timeout + 10*time.Minute; s.now >= deadline {
		t.Errorf("the run ended at its deadline (%s), not when every request was gone", s.now)
	}
}

// scaleDownAt keeps the fleet until at, then asks for to replicas; it records what each step
// saw.
type scaleDownAt struct {
	at  time.Duration
	to  int
	sim *fleetSim
	// maxTerminating is the most pods seen terminating at once; viewed the most replicas the
	// view held while some were; nodes the fewest nodes while some were.
	maxTerminating, viewed, nodes int
}

func (*scaleDownAt) Name() string     { return "scale-down" }
func (*scaleDownAt) Describe() string { return "scales down once" }
func (a *scaleDownAt) Step(now time.Duration, v View) (int, bool) {
	if k := len(a.sim.terminating); k > 0 {
		a.maxTerminating = max(a.maxTerminating, k)
		a.viewed = max(a.viewed, len(v.pods))
		a.nodes = min(a.nodes, len(a.sim.nodes))
	}
	return a.to, now >= a.at
}

func TestAScaledDownPodDrainsItsRequests(t *testing.T) {
	// Two L4 replicas on their own nodes, 0.8 requests/s of 1,000-token prompts and 400-token
	// outputs (some 20 s each): each replica always has requests when one is scaled away.
	trace := steady(10*time.Minute, 0.8, 1000, 400)
	for _, tc := range []struct {
		name     string
		drain    time.Duration
		wantLost bool
	}{
		{"no drain: its requests are lost", 0, true},
		{"a long enough drain: none are", 5 * time.Minute, false},
		{"a drain too short for its generations: some are", 2 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := oneGPUNodes(t, l4(t))
			f.DrainTimeout = tc.drain
			a := &scaleDownAt{at: 3 * time.Minute, to: 1, nodes: 1 << 30}
			s := newTestSim(t, f, trace, a)
			addServing(s, f.Sizes[0])
			a.sim = s
			s.run()
			r := s.result()
			if lost := r.Lost > 0; lost != tc.wantLost {
				t.Errorf("%d lost, want lost: %v", r.Lost, tc.wantLost)
			}
			if tc.drain == 0 {
				if a.maxTerminating != 0 {
					t.Errorf("%d pods terminating without a drain", a.maxTerminating)
				}
				return
			}
			if a.maxTerminating != 1 || a.viewed != 1 || a.nodes != 2 {
				t.Errorf("while draining: %d terminating, the scaler saw %d replicas, %d nodes; want 1, 1 (not the terminating one) and 2 (its node stays)",
					a.maxTerminating, a.viewed, a.nodes)
			}
			if len(s.terminating) != 0 {
				t.Errorf("%d pods still terminating at the end", len(s.terminating))
			}
		})
	}
}

func TestConsolidationEvictionsDrain(t *testing.T) {
	// Two 4-GPU nodes with a serving replica each: under WhenEmptyOrUnderutilized, Karpenter
	// moves one replica onto the other node's free GPUs. The evicted replica drains.
	f := l4(t)
	g612, ok := sizeWithGPUs(f.Family, 4)
	if !ok {
		t.Fatal("no 4-GPU g6 size")
	}
	f.Sizes = []gpu.Size{g612}
	f.Consolidation, f.ConsolidateAfter, f.Min, f.DrainTimeout = WhenEmptyOrUnderutilized, 30*time.Second, 1, 5*time.Minute
	s := newTestSim(t, f, steady(4*time.Minute, 0.5, 1000, 400), static{})
	addServing(s, g612)
	s.run()
	r := s.result()
	if r.Lost != 0 || r.LostToConsolidation != 0 {
		t.Errorf("%d lost (%d to consolidation): an evicted replica drains its requests", r.Lost, r.LostToConsolidation)
	}
	if len(s.nodes) != 1 {
		t.Errorf("%d nodes at the end, want the drained one gone", len(s.nodes))
	}
}

// sizeWithGPUs is the family's first size with gpus GPUs.
func sizeWithGPUs(f gpu.Family, gpus int64) (gpu.Size, bool) {
	for _, s := range f.Sizes {
		if s.GPUs == gpus {
			return s, true
		}
	}
	return gpu.Size{}, false
}

func TestRouting(t *testing.T) {
	for _, tc := range []struct {
		routing Routing
		// preload requests on the first replica, then arrive more: each ends with want.
		preload, arrive int
		want            [2]int
	}{
		{RoundRobin, 10, 10, [2]int{15, 5}},
		{LeastOutstanding, 10, 10, [2]int{10, 10}},
		{LeastOutstanding, 10, 4, [2]int{10, 4}},
		{LeastOutstanding, 0, 1, [2]int{1, 0}}, // a tie goes to the first
		{"", 10, 10, [2]int{15, 5}},            // unset: round-robin
	} {
		f := oneGPUNodes(t, l4(t))
		f.Min, f.Routing = 2, tc.routing
		var trace []vllmsim.TraceRequest
		for range tc.arrive {
			trace = append(trace, vllmsim.TraceRequest{At: time.Second, Prompt: 100, Output: 10})
		}
		s := newTestSim(t, f, trace, static{})
		for range tc.preload {
			s.pods[0].replica.SubmitRequest(epoch, 100, 10)
		}
		s.now = time.Second
		s.arrivals()
		var got [2]int
		for i, p := range s.pods {
			running, waiting := p.replica.Queue()
			got[i] = running + waiting
		}
		if got != tc.want {
			t.Errorf("%q, %d on the first replica, %d arriving: %v, want %v", tc.routing, tc.preload, tc.arrive, got, tc.want)
		}
	}
}

func TestImagePullOncePerNode(t *testing.T) {
	f := l4(t)
	f.ImagePull, f.ModelLoad = 30*time.Second, 60*time.Second
	s := newTestSim(t, f, steady(time.Minute, 1, 100, 10), static{})
	fresh, warm := &node{}, &node{imagePulled: true}
	for _, tc := range []struct {
		name        string
		n           *node
		at, serving time.Duration
	}{
		{"the first pod on a fresh node pulls the image", fresh, 10 * time.Second, 100 * time.Second},
		{"a pod starting during the pull waits for it", fresh, 20 * time.Second, 100 * time.Second},
		{"a later pod skips it", fresh, 200 * time.Second, 260 * time.Second},
		{"a warm node has it", warm, 10 * time.Second, 70 * time.Second},
	} {
		p := s.addPod()
		s.bind(p, tc.n)
		s.now = tc.at
		s.start(p)
		if p.loaded != tc.serving {
			t.Errorf("%s: serving at %s, want %s", tc.name, p.loaded, tc.serving)
		}
	}
	f.ImagePull = 0 // only ModelLoad set: no pull time
	s = newTestSim(t, f, steady(time.Minute, 1, 100, 10), static{})
	p := s.addPod()
	s.bind(p, &node{})
	s.now = 10 * time.Second
	s.start(p)
	if p.loaded != 70*time.Second {
		t.Errorf("no image pull: serving at %s, want 70s", p.loaded)
	}
}

func TestUnattainableRequestsAreCounted(t *testing.T) {
	f := l4(t)
	longest, err := longestAttainable(f)
	if err != nil {
		t.Fatal(err)
	}
	at, err := vllmsim.IdleTTFT(f.Engine, longest)
	if err != nil {
		t.Fatal(err)
	}
	beyond, err := vllmsim.IdleTTFT(f.Engine, longest+1)
	if err != nil {
		t.Fatal(err)
	}
	if at > f.SLO.TTFT || beyond <= f.SLO.TTFT {
		t.Fatalf("longest attainable prompt %d: idle TTFT %s, and %s one token longer, around the %s SLO", longest, at, beyond, f.SLO.TTFT)
	}
	maxLen := f.Engine.Tokens.MaxModelLen
	trace := []vllmsim.TraceRequest{{At: time.Second, Prompt: 100, Output: 10}, {At: 20 * time.Second, Prompt: longest, Output: 10},
		{At: 40 * time.Second, Prompt: longest + 1, Output: 10}, {At: 60 * time.Second, Prompt: maxLen, Output: 10}}
	r, err := RunInference(f, trace, static{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Unattainable != 2 || r.Failed != 1 || r.Violations() != 2 || r.AttainableViolations() != 0 {
		t.Errorf("%d unattainable, %d failed, %d violations, %d attainable ones: want 2, 1 (max-model-len), 2 and 0",
			r.Unattainable, r.Failed, r.Violations(), r.AttainableViolations())
	}
}

func TestFleetValidatesRouting(t *testing.T) {
	f := l4(t)
	f.Routing = "random"
	if err := f.Validate(); err == nil || !strings.Contains(err.Error(), "routing") {
		t.Errorf("routing %q: %v, want an error naming it", f.Routing, err)
	}
}
