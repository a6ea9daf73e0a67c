package scaler

import (
	"math"
	"testing"
	"time"
)

func TestWindowsWhole(t *testing.T) {
	w := func(span time.Duration) ReplicaWindow { return ReplicaWindow{Span: span} }
	for _, tc := range []struct {
		name  string
		o     Observation
		whole bool
	}{
		{"every replica a minute", Observation{Ready: 2, Windows: []ReplicaWindow{w(time.Minute), w(58 * time.Second)}}, true},
		{"a replica without a window", Observation{Ready: 2, Windows: []ReplicaWindow{w(time.Minute)}}, false},
		{"a replica whose window began 35 s ago, after its first requests: its rate is over another span", Observation{Ready: 2, Windows: []ReplicaWindow{w(time.Minute), w(35 * time.Second)}}, false},
		{"a replica that joined 10 s ago, counted from its ready time", Observation{Ready: 2, Windows: []ReplicaWindow{w(time.Minute), {Span: 10 * time.Second, Joined: true}}}, true},
		{"only replicas that joined, 20 s ago: too short to keep", Observation{Ready: 1, Windows: []ReplicaWindow{{Span: 20 * time.Second, Joined: true}}}, false},
		{"too short for any", Observation{Ready: 1, Windows: []ReplicaWindow{w(20 * time.Second)}}, false},
		{"none ready", Observation{}, false},
	} {
		if got := tc.o.windowsWhole(); got != tc.whole {
			t.Errorf("%s: windowsWhole = %v, want %v", tc.name, got, tc.whole)
		}
	}
}

// TestWindowArrivals: the fleet's arrival rate. Replicas serving through their windows add
// their rates; a replica that joined inside the longest window adds every request it has had
// over that window. While replicas join, a rate per window counted the older replicas' larger
// share twice; a window from a joining replica's first page missed its first requests.
func TestWindowArrivals(t *testing.T) {
	w := func(span time.Duration, arrived float64) ReplicaWindow {
		return ReplicaWindow{Span: span, Arrived: arrived}
	}
	joined := func(span time.Duration, arrived float64) ReplicaWindow {
		return ReplicaWindow{Span: span, Arrived: arrived, Joined: true}
	}
	for _, tt := range []struct {
		name  string
		ws    []ReplicaWindow
		want  float64
		wantN int
	}{
		{"none", nil, math.NaN(), 0},
		{"four equal windows", []ReplicaWindow{w(time.Minute, 60), w(time.Minute, 60), w(time.Minute, 60), w(time.Minute, 60)}, 4, 4},
		// 5 req/s: four replicas took it all for the first 40 s (50 each), then nine shared the
		// last 20 s (100 requests, ~11 each): per-window rates summed read 4.07 + 2.8 ≈ 6.9.
		{"five replicas joined four 20 s ago",
			[]ReplicaWindow{w(time.Minute, 61), w(time.Minute, 61), w(time.Minute, 61), w(time.Minute, 61),
				joined(20*time.Second, 11.2), joined(20*time.Second, 11.2), joined(20*time.Second, 11.2), joined(20*time.Second, 11.2), joined(20*time.Second, 11.2)}, 5, 9},
		// The scrapes of the old replicas are 75 s apart where the window is a minute: their
		// rates, not their counts over the longest window, say what they carry.
		{"windows of different spans, none joined", []ReplicaWindow{w(75*time.Second, 150), w(time.Minute, 120)}, 4, 2},
		// 3 req/s, three replicas; a fourth joined 30 s ago and has had 22 (a quarter since).
		{"a replica that joined in a burst", []ReplicaWindow{w(time.Minute, 52), w(time.Minute, 52), w(time.Minute, 52), joined(30*time.Second, 22)}, 2.6 + 22.0/60, 4},
		{"a fleet that started 40 s ago", []ReplicaWindow{joined(40*time.Second, 80), joined(25*time.Second, 30)}, 110.0 / 40, 2},
		{"a window with no span is left out", []ReplicaWindow{w(time.Minute, 120), w(0, 50)}, 2, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, n := WindowArrivals(tt.ws)
			if n != tt.wantN || (math.IsNaN(tt.want) != math.IsNaN(got)) || (!math.IsNaN(tt.want) && math.Abs(got-tt.want) > 1e-9) {
				t.Errorf("WindowArrivals = %v over %d windows, want %v over %d", got, n, tt.want, tt.wantN)
			}
		})
	}
}

// TestRecentArrivals: the fleet's rate over the replicas' last scrape intervals, less three
// standard deviations of its Poisson noise: a scrape's noise proves no surge, a step does,
// and without an interval for every replica there is none.
func TestRecentArrivals(t *testing.T) {
	w := func(recent time.Duration, arrived float64) ReplicaWindow {
		return ReplicaWindow{Span: time.Minute, Recent: recent, RecentArrived: arrived}
	}
	for _, tt := range []struct {
		name string
		ws   []ReplicaWindow
		want float64
	}{
		{"none", nil, 0},
		// 8 req/s over four replicas: 120 in 15 s, a standard deviation of √120/15.
		{"steady", []ReplicaWindow{w(15*time.Second, 30), w(15*time.Second, 30), w(15*time.Second, 30), w(15*time.Second, 30)}, 8 - 3*math.Sqrt(120)/15},
		// A 3× step: 24 req/s, 360 in 15 s.
		{"a step", []ReplicaWindow{w(15*time.Second, 90), w(15*time.Second, 90), w(15*time.Second, 90), w(15*time.Second, 90)}, 24 - 3*math.Sqrt(360)/15},
		// Intervals of different spans: each replica's rate and variance.
		{"spans apart", []ReplicaWindow{w(15*time.Second, 45), w(10*time.Second, 30)}, 6 - 3*math.Sqrt(45.0/225+30.0/100)},
		{"a few requests prove nothing", []ReplicaWindow{w(15*time.Second, 4)}, 0},
		{"a replica without an interval", []ReplicaWindow{w(15*time.Second, 90), w(0, 0)}, 0},
		// A count that went down (a counter reset the source did not clamp) or is NaN adds
		// nothing, and never makes the rate NaN.
		{"a negative count", []ReplicaWindow{w(15*time.Second, 90), w(15*time.Second, -30)}, 6 - 3*math.Sqrt(90)/15},
		{"a NaN count", []ReplicaWindow{w(15*time.Second, 90), w(15*time.Second, math.NaN())}, 6 - 3*math.Sqrt(90)/15},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := RecentArrivals(tt.ws); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("RecentArrivals = %v, want %v", got, tt.want)
			}
		})
	}
}
