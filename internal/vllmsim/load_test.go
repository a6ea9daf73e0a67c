package vllmsim

import (
	"math"
	"sync"
	"testing"
	"time"
)

type countingReceiver struct{ n int }

func (c *countingReceiver) Submit(n int, _ time.Time) { c.n += n }

func TestLoadGeneratorIsFluid(t *testing.T) {
	for _, tc := range []struct {
		rate  float64
		step  time.Duration
		steps int
		want  int
	}{
		{rate: 10, step: 100 * time.Millisecond, steps: 100, want: 100},
		{rate: 2.5, step: 100 * time.Millisecond, steps: 100, want: 25},
		{rate: 0.3, step: time.Second, steps: 10, want: 3},
		{rate: 12.5, step: 30 * time.Millisecond, steps: 1000, want: 375},
		{rate: 0, step: time.Second, steps: 10, want: 0},
	} {
		g, err := NewLoadGenerator(tc.rate)
		if err != nil {
			t.Fatal(err)
		}
		rc := &countingReceiver{}
		now := t0
		if n := g.Step(now, []Receiver{rc}); n != 0 {
			t.Errorf("first Step emitted %d", n)
		}
		for range tc.steps {
			now = now.Add(tc.step)
			g.Step(now, []Receiver{rc})
		}
		if rc.n != tc.want {
			t.Errorf("rate %v, %d steps of %s: %d arrivals, want %d", tc.rate, tc.steps, tc.step, rc.n, tc.want)
		}
	}
}

func TestLoadGeneratorRoundRobin(t *testing.T) {
	g, _ := NewLoadGenerator(10)
	rs := []*countingReceiver{{}, {}, {}}
	recv := []Receiver{rs[0], rs[1], rs[2]}
	now := t0
	g.Step(now, recv)
	for range 7 { // one arrival per step
		now = now.Add(100 * time.Millisecond)
		g.Step(now, recv)
	}
	if rs[0].n != 3 || rs[1].n != 2 || rs[2].n != 2 {
		t.Errorf("spread %d/%d/%d, want 3/2/2", rs[0].n, rs[1].n, rs[2].n)
	}
	// A burst of 5 continues where the cursor stopped: receivers 1, 2, 0, 1, 2.
	now = now.Add(500 * time.Millisecond)
	g.Step(now, recv)
	if rs[0].n != 4 || rs[1].n != 4 || rs[2].n != 4 {
		t.Errorf("spread %d/%d/%d, want 4/4/4", rs[0].n, rs[1].n, rs[2].n)
	}
	// Without receivers the arrivals are dropped, not saved up.
	now = now.Add(time.Second)
	if n := g.Step(now, nil); n != 0 {
		t.Errorf("Step without receivers emitted %d", n)
	}
	now = now.Add(100 * time.Millisecond)
	if n := g.Step(now, recv); n != 1 {
		t.Errorf("Step after a dropped second emitted %d, want 1", n)
	}
}

func TestLoadGeneratorSetRate(t *testing.T) {
	g, _ := NewLoadGenerator(1)
	for _, bad := range []float64{-1, math.NaN(), math.Inf(1), math.Inf(-1)} {
		if err := g.SetRate(bad); err == nil {
			t.Errorf("SetRate(%v) accepted", bad)
		}
	}
	if _, err := NewLoadGenerator(-3); err == nil {
		t.Error("NewLoadGenerator(-3) accepted")
	}
	if g.Rate() != 1 {
		t.Errorf("rate %v after rejected changes, want 1", g.Rate())
	}
	// Rate changes race with steps in a running fleet; -race checks that this is safe.
	var wg sync.WaitGroup
	rc := &countingReceiver{}
	wg.Go(func() {
		for i := range 100 {
			_ = g.SetRate(float64(i))
		}
	})
	wg.Go(func() {
		now := t0
		for range 100 {
			now = now.Add(10 * time.Millisecond)
			g.Step(now, []Receiver{rc})
		}
	})
	wg.Wait()
	if g.Rate() != 99 {
		t.Errorf("rate %v, want 99", g.Rate())
	}
}

// TestLoadGeneratorHoldsForTheFirstReceiver: without receivers arrivals are dropped, unless the
// generator holds them like a router; held arrivals go to the first receiver that appears.
func TestLoadGeneratorHoldsForTheFirstReceiver(t *testing.T) {
	for _, hold := range []bool{false, true} {
		g, err := NewLoadGenerator(10)
		if err != nil {
			t.Fatal(err)
		}
		g.HoldWithoutReceivers(hold)
		now := t0
		g.Step(now, nil)
		for range 20 { // 2 s at 10/s with nobody to serve
			now = now.Add(100 * time.Millisecond)
			g.Step(now, nil)
		}
		want := 0
		if hold {
			want = 20
		}
		if g.Held() != want {
			t.Errorf("hold %v: held %d, want %d", hold, g.Held(), want)
		}
		rc := &countingReceiver{}
		now = now.Add(100 * time.Millisecond)
		g.Step(now, []Receiver{rc})
		if rc.n != want+1 || g.Held() != 0 {
			t.Errorf("hold %v: the first receiver got %d (held now %d), want %d", hold, rc.n, g.Held(), want+1)
		}
	}
}

// TestArrivalPatterns: Poisson and bursty arrivals keep the mean rate over a long run, the same
// seed gives the same arrivals, and bursty traffic has lulls and peaks well above the mean.
func TestArrivalPatterns(t *testing.T) {
	run := func(p Pattern, seed uint64) []int { // arrivals per 5 s over 2 hours at 4/s
		g, err := NewLoadGenerator(4)
		if err != nil {
			t.Fatal(err)
		}
		g.SetPattern(p, seed)
		rc := &countingReceiver{}
		now := t0
		g.Step(now, []Receiver{rc})
		var per []int
		for range 1440 {
			before := rc.n
			for range 50 {
				now = now.Add(100 * time.Millisecond)
				g.Step(now, []Receiver{rc})
			}
			per = append(per, rc.n-before)
		}
		return per
	}
	for _, p := range []Pattern{PatternPoisson, PatternBursty} {
		a, b := run(p, 7), run(p, 7)
		total, zero, peak := 0, 0, 0
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("%s: the same seed gave different arrivals", p)
			}
			total += a[i]
			if a[i] == 0 {
				zero++
			}
			peak = max(peak, a[i])
		}
		if mean := float64(total) / (1440 * 5); math.Abs(mean-4) > 0.4 {
			t.Errorf("%s: mean rate %.2f/s, want about 4", p, mean)
		}
		switch p {
		case PatternPoisson:
			if zero > 5 || peak > 45 {
				t.Errorf("poisson at 20 per window: %d empty windows, peak %d", zero, peak)
			}
		case PatternBursty:
			if zero < 500 || peak < 60 {
				t.Errorf("bursty: %d of 1440 windows empty, peak %d per 5 s; want lulls and peaks near 80", zero, peak)
			}
		}
	}
	if _, err := ParsePattern("wavy"); err == nil {
		t.Error("an unknown pattern was accepted")
	}
}
