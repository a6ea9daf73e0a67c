package vllmsim

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// Receiver takes arrivals from a LoadGenerator; *Replica is one.
type Receiver interface {
	// Submit enqueues n requests that arrived at time at.
	Submit(n int, at time.Time)
}

// LoadGenerator produces requests at a rate. By default (PatternSteady) it is a deterministic
// fluid process: each Step adds rate × elapsed time to an accumulator and emits its integer
// part, so 2.5 req/s stepped every 100ms emits one request on every fourth step, exactly 25 in
// 10s. SetPattern makes arrivals Poisson or bursty, from a seeded source. It is safe for
// concurrent use.
type LoadGenerator struct {
	mu      sync.Mutex
	rate    float64 // requests per second
	acc     float64 // requests owed but not yet emitted
	last    time.Time
	started bool
	next    int // round-robin cursor over the receivers
	// hold keeps arrivals while there is no receiver (a router queueing in front of a fleet at
	// zero) instead of dropping them; held counts them.
	hold   bool
	held   int
	queued bool
	// rand draws arrivals for the random patterns.
	rand arrivals
	// arrived counts every request generated.
	arrived uint64
	// replay is a trace being replayed from replayStart; replayNext the first not yet emitted.
	replay      []TraceRequest
	replayStart time.Time
	replayNext  int
	// robin is the round-robin cursor of replayed requests.
	robin int
	// rejected counts replayed requests a server refused (a prompt longer than it serves).
	rejected uint64
}

// Rejected is the number of replayed requests a server refused.
func (g *LoadGenerator) Rejected() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.rejected
}

// SizedReceiver is a Receiver that takes requests with their own lengths, as a trace gives
// them; *Replica is one. Replayed requests go to receivers that are not with default lengths.
type SizedReceiver interface {
	Receiver
	// SubmitRequest enqueues one request that arrived at at with its lengths; false when the
	// server rejects it (a prompt longer than it serves).
	SubmitRequest(at time.Time, prompt, output int) bool
}

// ReplayStatus is how far a trace replay has got.
type ReplayStatus struct {
	// Requests is the trace's length; Emitted how many have arrived so far.
	Requests int `json:"requests"`
	Emitted  int `json:"emitted"`
	// Started is when the replay began.
	Started time.Time `json:"started"`
	// Duration is the trace's span, first to last arrival.
	Duration time.Duration `json:"duration"`
}

// Replay makes the generator emit reqs (sorted by At), each at start+At with its own lengths,
// on top of the rate's arrivals (set the rate to 0 for the trace alone). A replay replaces any
// earlier one.
func (g *LoadGenerator) Replay(reqs []TraceRequest, start time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.replay = slices.Clone(reqs)
	slices.SortStableFunc(g.replay, func(a, b TraceRequest) int { return int(a.At - b.At) })
	g.replayStart, g.replayNext = start, 0
}

// ReplayStatus reports the replay's progress; ok is false when none was started.
func (g *LoadGenerator) ReplayStatus() (ReplayStatus, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.replay == nil {
		return ReplayStatus{}, false
	}
	st := ReplayStatus{Requests: len(g.replay), Emitted: g.replayNext, Started: g.replayStart}
	if n := len(g.replay); n > 0 {
		st.Duration = g.replay[n-1].At - g.replay[0].At
	}
	return st, true
}

// emitReplay hands out the replayed requests due by now, round-robin, each at its own time.
// With no receivers they are dropped like the rate's (counted as arrived), or held.
func (g *LoadGenerator) emitReplay(now time.Time, receivers []Receiver) int {
	n := 0
	for ; g.replayNext < len(g.replay); g.replayNext++ {
		r := g.replay[g.replayNext]
		at := g.replayStart.Add(r.At)
		if at.After(now) {
			break
		}
		g.arrived++
		n++
		if len(receivers) == 0 {
			if g.hold {
				g.held++
				g.queued = true
			}
			continue
		}
		g.robin %= len(receivers)
		if sr, ok := receivers[g.robin].(SizedReceiver); ok {
			if !sr.SubmitRequest(at, r.Prompt, r.Output) {
				g.rejected++
			}
		} else {
			receivers[g.robin].Submit(1, at)
		}
		g.robin++
	}
	return n
}

// Arrived is the number of requests generated since the start (held and dropped ones too).
func (g *LoadGenerator) Arrived() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.arrived
}

// SetPattern changes how requests arrive around the rate; seed makes random patterns
// reproducible.
func (g *LoadGenerator) SetPattern(p Pattern, seed uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.rand = newArrivals(seed)
	g.rand.pattern = p
}

// Pattern returns the arrival pattern.
func (g *LoadGenerator) Pattern() Pattern {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.rand.pattern
}

// HoldWithoutReceivers makes the generator keep arrivals while no receiver exists, like a
// router that queues requests for a model with no replica, and hand them out (first) as soon as
// one does.
func (g *LoadGenerator) HoldWithoutReceivers(hold bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hold = hold
}

// everHeld reports whether an arrival was ever held: like the picker's, the queue series
// exists only once something queued.
func (g *LoadGenerator) everHeld() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.queued
}

// Held is the number of arrivals held for want of a receiver.
func (g *LoadGenerator) Held() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held
}

// NewLoadGenerator returns a generator emitting rate requests per second from its first Step.
func NewLoadGenerator(rate float64) (*LoadGenerator, error) {
	g := &LoadGenerator{rand: newArrivals(1)}
	if err := g.SetRate(rate); err != nil {
		return nil, err
	}
	return g, nil
}

// ValidateRate reports whether rate is a usable arrival rate: finite and not negative.
func ValidateRate(rate float64) error {
	if math.IsNaN(rate) || math.IsInf(rate, 0) || rate < 0 {
		return fmt.Errorf("rate must be a finite, non-negative number of requests per second, got %v", rate)
	}
	return nil
}

// SetRate changes the arrival rate; it applies from the interval that the next Step closes.
func (g *LoadGenerator) SetRate(rate float64) error {
	if err := ValidateRate(rate); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.rate = rate
	return nil
}

// Rate returns the arrival rate in requests per second.
func (g *LoadGenerator) Rate() float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.rate
}

// Step emits the requests that arrived since the previous Step, timestamped now, one at a
// time round-robin over receivers (like a load balancer), and returns how many it emitted.
// With no receivers the requests are dropped, like a Service without endpoints — or held for
// the first receiver with HoldWithoutReceivers. The first Step only starts the clock.
func (g *LoadGenerator) Step(now time.Time, receivers []Receiver) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.started || now.Before(g.last) {
		g.started, g.last = true, now
		return 0
	}
	var n int
	if g.rand.pattern == PatternSteady {
		g.acc += g.rate * now.Sub(g.last).Seconds()
		// The epsilon absorbs float error, so that ten steps of 0.1 at 10/s make exactly ten.
		n = int(math.Floor(g.acc + 1e-9))
		g.acc = math.Max(0, g.acc-float64(max(n, 0)))
	} else {
		n = g.rand.draw(g.rate, g.last, now)
	}
	g.last = now
	g.arrived += uint64(max(n, 0))
	replayed := g.emitReplay(now, receivers)
	if len(receivers) == 0 {
		if g.hold && n > 0 {
			g.held += n
			g.queued = true
		}
		return 0
	}
	n += g.held
	g.held = 0
	if n <= 0 {
		return replayed
	}
	counts := make([]int, len(receivers))
	for range n {
		g.next %= len(receivers)
		counts[g.next]++
		g.next++
	}
	for i, c := range counts {
		if c > 0 {
			receivers[i].Submit(c, now)
		}
	}
	return n + replayed
}
