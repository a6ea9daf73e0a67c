package simulate

import (
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/vllmsim"
)

// seated asks for want replicas from at on and holds seats warm seats.
type seated struct {
	at          time.Duration
	want, seats int
}

func (seated) Name() string     { return "seated" }
func (seated) Describe() string { return "test" }
func (a seated) Step(now time.Duration, v View) (int, bool) {
	if now < a.at {
		return 0, false
	}
	return a.want, v.Spec != a.want
}
func (a seated) Seats() int { return a.seats }

// TestWarmSeats: a scale-up's replicas take the warm seats and pay only the model load; the
// seats are launched again for the next one; an unused seat's node is never consolidated.
func TestWarmSeats(t *testing.T) {
	f := l4(t)
	sizes, err := SizesWithGPUs(f.Family, 1)
	if err != nil {
		t.Fatal(err)
	}
	f.Sizes, f.WarmUp = sizes, time.Minute
	var trace []vllmsim.TraceRequest
	for at := time.Duration(0); at < 30*time.Minute; at += 2 * time.Second {
		trace = append(trace, vllmsim.TraceRequest{At: at, Prompt: 200, Output: 20})
	}
	res, err := RunInference(f, trace, seated{at: 10 * time.Minute, want: 3, seats: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Startups) != 2 || res.SeatsTaken != 2 {
		t.Fatalf("startups %+v, seats taken %d: want the 2 new replicas on the 2 seats", res.Startups, res.SeatsTaken)
	}
	for _, s := range res.Startups {
		if got := s.Serving - s.Created; got > f.ModelLoad+2*f.Tick {
			t.Errorf("a replica on a warm seat served %s after its scale-up, want its model load %s", got, f.ModelLoad)
		}
	}
	// 1 replica all along, 2 seats from the start, 2 more seats after the scale-up took the first.
	if res.NodeLaunches != 4 {
		t.Errorf("%d nodes launched, want 4 (2 seats, then 2 seats again)", res.NodeLaunches)
	}
	cold, err := RunInference(f, trace, seated{at: 10 * time.Minute, want: 3})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cold.StartupQuantile(0.5), f.ProvisionDelay+f.NodeLaunch+f.ImagePull+f.ModelLoad; got < want {
		t.Errorf("without seats a replica served %s after its scale-up, want at least a cold start %s", got, want)
	}
}

func TestBurstResponse(t *testing.T) {
	r := InferenceResult{Startups: []Startup{
		{Created: 100 * time.Second, Serving: 200 * time.Second},
		{Created: 110 * time.Second, Serving: 170 * time.Second},
		{Created: 1000 * time.Second, Serving: 1300 * time.Second},
	}}
	p50, answered, total := r.BurstResponse([]time.Duration{10 * time.Second, 90 * time.Second, 950 * time.Second, 5000 * time.Second}, 60*time.Second)
	// The burst at 10 s is in the warm-up; 90 s: the first new replica served at 170 s (80 s);
	// 950 s: at 1300 s (350 s); 5000 s: none.
	if answered != 2 || total != 3 || p50 != 350*time.Second {
		t.Errorf("BurstResponse = %s, %d of %d; want 350s (the median of 80 s and 350 s, the upper), 2 of 3", p50, answered, total)
	}
	if q := r.StartupQuantile(0.5); q != 100*time.Second {
		t.Errorf("StartupQuantile(0.5) = %s, want 100s (60, 100, 300)", q)
	}
}

// TestRecentBase: the simulated scraper reads each replica every second; a window's last
// interval starts, as berth's scraper takes it, at the newest reading at or before
// scaler.RecentWindow before the newest, inside the window — never at the newest itself, and
// at the window's start when nothing inside it is old enough.
func TestRecentBase(t *testing.T) {
	var history []reading
	for s := range 61 {
		history = append(history, reading{at: time.Duration(s) * time.Second, finished: float64(s)})
	}
	latest := history[60]
	if got := recentBase(history, history[0], latest); got.at != 45*time.Second || arrivedBetween(got, latest) != 15 {
		t.Errorf("from %s (%v arrived), want 45s (15)", got.at, arrivedBetween(got, latest))
	}
	joined := reading{at: 52 * time.Second} // became ready 8 s ago, counters at zero
	if got := recentBase(history[52:], joined, latest); got.at != joined.at {
		t.Errorf("joined 8 s ago: from %s, want its ready time %s", got.at, joined.at)
	}
}

// TestARestartWithoutAStoreForgetsTheModel: berth's scaler restarted without a model store
// (Forgets) loses what it learned at each restart time, once, and keeps it between them.
func TestARestartWithoutAStoreForgetsTheModel(t *testing.T) {
	b, err := NewBerth(BerthName, SLOTrigger(DefaultSLO), BerthBehavior, 15*time.Second, 1, 8)
	if err != nil {
		t.Fatal(err)
	}
	b.Forgets = []time.Duration{time.Minute, 2 * time.Minute}
	for _, step := range []struct {
		at       time.Duration
		capacity float64
	}{{30 * time.Second, 0.5}, {time.Minute, 0}, {75 * time.Second, 0.5}, {2 * time.Minute, 0}, {10 * time.Minute, 0.5}} {
		b.model.Capacity = 0.5
		b.Step(step.at, View{})
		if b.model.Capacity != step.capacity {
			t.Errorf("at %s: capacity %v, want %v", step.at, b.model.Capacity, step.capacity)
		}
	}
	if !strings.Contains(b.Describe(), "restarted without its fleet model at [1m0s 2m0s]") {
		t.Errorf("Describe() = %q: the report does not say the scaler was restarted", b.Describe())
	}
}
