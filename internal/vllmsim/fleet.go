package vllmsim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// DefaultInterval is how often a Fleet steps its replicas and load generator.
const DefaultInterval = 100 * time.Millisecond

// FleetOptions configures a Fleet.
type FleetOptions struct {
	// Config is the configuration of every replica.
	Config Config
	// Rate is the initial arrival rate in requests per second.
	Rate float64
	// Interval is the time between steps (default DefaultInterval).
	Interval time.Duration
	// Clock drives the steps and stamps new replicas (default the real clock).
	Clock clock.WithTicker
	// Logf, if set, receives a line when a replica starts or stops serving.
	Logf func(format string, args ...any)
	// InferencePool, when set, puts an endpoint picker with flow control in front of the
	// fleet, as llm-d's (or Gateway API Inference Extension's) for this InferencePool: arrivals
	// wait in its queue while no replica serves instead of being dropped, and the admin
	// address serves its queue metrics on /metrics.
	InferencePool string
	// DrainTimeout, when positive, lets a replica whose address goes away finish what it holds
	// for up to that long, taking no new request — as vLLM does on SIGTERM within the pod's
	// terminationGracePeriodSeconds; what is left then is lost. 0: lost at once.
	DrainTimeout time.Duration
}

// Fleet serves one Replica per listen address and feeds them from one LoadGenerator, like a
// load balancer in front of a Deployment's pods. It is safe for concurrent use.
type Fleet struct {
	cfg      Config
	clock    clock.WithTicker
	interval time.Duration
	load     *LoadGenerator
	logf     func(format string, args ...any)

	pool string // InferencePool of the endpoint picker in front, "" for none
	// retired is the time-to-first-token histogram of replicas that stopped serving.
	retiredMu sync.Mutex
	retired   Histogram
	lost      uint64

	starts uint64 // replicas started, to give each its own length draws

	// latency is every request's exact time to first token since the last replay began.
	latency latencyLog

	setMu   sync.Mutex // serialises SetAddresses and Close
	mu      sync.Mutex // guards servers and closed
	servers map[string]*server
	closed  bool
	// draining are replicas whose address went away, finishing their requests until their
	// deadline (guarded by mu).
	draining []drainingReplica
	drain    time.Duration
}

// drainingReplica is a replica finishing its requests after its pod went away.
type drainingReplica struct {
	addr     string
	replica  *Replica
	deadline time.Time
}

type server struct {
	addr    string // as asked for
	bound   string // as listened on (differs for port 0)
	replica *Replica
	http    *http.Server
	done    chan struct{} // closed when Serve returns
}

// LoadStatus is the fleet-wide view served by GET /load.
type LoadStatus struct {
	// Rate is the arrival rate in requests per second.
	Rate float64 `json:"rate"`
	// Pattern is how the requests arrive around the rate.
	Pattern Pattern `json:"pattern"`
	// Replicas is the number of replicas serving.
	Replicas int `json:"replicas"`
	// Waiting is the number of queued requests over all replicas.
	Waiting int `json:"waiting"`
	// Running is the number of running requests over all replicas.
	Running int `json:"running"`
	// Held is the number of requests the endpoint picker holds for want of a replica.
	Held int `json:"held"`
	// Draining is the number of replicas finishing their requests after their pod went away.
	Draining int `json:"draining,omitempty"`
	// Arrived counts every request that arrived since the fleet started; Lost those that were
	// queued or running on a replica when it stopped serving (a deleted pod's).
	Arrived uint64 `json:"arrived"`
	Lost    uint64 `json:"lost"`
	// Rejected counts replayed requests a replica refused: prompts longer than its
	// max-model-len, which vLLM answers with a 400.
	Rejected uint64 `json:"rejected,omitempty"`
}

// NewFleet returns a fleet that serves no address yet.
func NewFleet(opts FleetOptions) (*Fleet, error) {
	if err := opts.Config.Validate(); err != nil {
		return nil, err
	}
	load, err := NewLoadGenerator(opts.Rate)
	if err != nil {
		return nil, fmt.Errorf("initial load: %w", err)
	}
	if opts.Interval < 0 {
		return nil, fmt.Errorf("step interval must be positive, got %s", opts.Interval)
	}
	f := &Fleet{
		cfg:      opts.Config.WithDefaults(),
		clock:    opts.Clock,
		interval: opts.Interval,
		load:     load,
		logf:     opts.Logf,
		servers:  map[string]*server{},
		pool:     opts.InferencePool,
		drain:    opts.DrainTimeout,
	}
	load.HoldWithoutReceivers(f.pool != "")
	if f.clock == nil {
		f.clock = clock.RealClock{}
	}
	if f.interval == 0 {
		f.interval = DefaultInterval
	}
	if f.logf == nil {
		f.logf = func(string, ...any) {}
	}
	return f, nil
}

// Load returns the fleet's load generator, to read or change the arrival rate.
func (f *Fleet) Load() *LoadGenerator { return f.load }

// SetAddresses makes the fleet serve exactly addrs: it starts a replica with an HTTP server
// listening on each new address and stops the servers of addresses no longer listed, whose
// queued and running requests are lost, like a deleted pod's. An address that cannot be
// listened on is reported in the error and the others are still served.
func (f *Fleet) SetAddresses(ctx context.Context, addrs []string) error {
	f.setMu.Lock()
	defer f.setMu.Unlock()
	want := map[string]bool{}
	for _, a := range addrs {
		if a != "" {
			want[a] = true
		}
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return errors.New("setting the addresses of the vLLM emulator fleet: the fleet is closed")
	}
	var gone []*server
	for a, s := range f.servers {
		if !want[a] {
			gone = append(gone, s)
			delete(f.servers, a)
		}
	}
	var add []string
	for a := range want {
		if f.servers[a] == nil {
			add = append(add, a)
		}
	}
	f.mu.Unlock()

	for _, s := range gone {
		_ = s.http.Close() // the pod is gone from the endpoints: no new connection reaches it
		<-s.done
		if f.drain > 0 {
			f.mu.Lock()
			f.draining = append(f.draining, drainingReplica{addr: s.addr, replica: s.replica, deadline: f.clock.Now().Add(f.drain)})
			f.mu.Unlock()
			running, waiting := s.replica.Queue()
			f.logf("draining the vLLM emulator on %s (%d running and %d waiting requests, for up to %s)", s.addr, running, waiting, f.drain)
			continue
		}
		f.stop(s.addr, s.replica)
	}
	slices.Sort(add)
	var errs []error
	for _, a := range add {
		s, err := f.start(ctx, a)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		f.mu.Lock()
		f.servers[a] = s
		f.mu.Unlock()
		f.logf("serving the vLLM emulator on %s", s.bound)
	}
	return errors.Join(errs...)
}

func (f *Fleet) start(ctx context.Context, addr string) (*server, error) {
	cfg := f.cfg
	cfg.Seed += f.starts // SetAddresses is serialised: no race on starts
	f.starts++
	r, err := NewReplica(cfg, f.clock.Now())
	if err != nil {
		return nil, err
	}
	r.SetObserver(&f.latency)
	h, err := r.Handler()
	if err != nil {
		return nil, err
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("serving the vLLM emulator on %s: %w", addr, err)
	}
	s := &server{
		addr:    addr,
		bound:   ln.Addr().String(),
		replica: r,
		http:    &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second},
		done:    make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			f.logf("the vLLM emulator on %s stopped: %v", addr, err)
		}
	}()
	return s, nil
}

// Addresses returns the addresses served, as given to SetAddresses, sorted.
func (f *Fleet) Addresses() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.servers))
	for a := range f.servers {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// BoundAddr returns the address actually listened on for addr, which differs from addr when
// its port is 0; ok is false when addr is not served.
func (f *Fleet) BoundAddr(addr string) (bound string, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s := f.servers[addr]; s != nil {
		return s.bound, true
	}
	return "", false
}

// Replica returns the replica served on addr; ok is false when addr is not served.
func (f *Fleet) Replica(addr string) (r *Replica, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s := f.servers[addr]; s != nil {
		return s.replica, true
	}
	return nil, false
}

// replicas returns the served replicas ordered by address.
func (f *Fleet) replicas() []*Replica {
	f.mu.Lock()
	defer f.mu.Unlock()
	addrs := make([]string, 0, len(f.servers))
	for a := range f.servers {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	out := make([]*Replica, len(addrs))
	for i, a := range addrs {
		out[i] = f.servers[a].replica
	}
	return out
}

// stop retires a replica that serves no more: what it still holds is lost.
func (f *Fleet) stop(addr string, r *Replica) {
	f.retire(r)
	running, waiting := r.Queue()
	f.retiredMu.Lock()
	f.lost += uint64(running + waiting)
	f.retiredMu.Unlock()
	f.logf("stopped the vLLM emulator on %s (%d running and %d waiting requests lost)", addr, running, waiting)
}

// Step emits the arrivals due by now over the replicas, ordered by address, then advances
// every replica to now, draining ones too (they get no arrival; one that is empty or past its
// deadline stops). Run calls it on every tick; tests call it with their own times.
func (f *Fleet) Step(now time.Time) {
	rs := f.replicas()
	recv := make([]Receiver, len(rs))
	for i, r := range rs {
		recv[i] = r
	}
	f.load.Step(now, recv)
	for _, r := range rs {
		r.Step(now)
	}
	f.mu.Lock()
	draining := f.draining
	f.draining = nil
	f.mu.Unlock()
	var keep []drainingReplica
	for _, d := range draining {
		d.replica.Step(now)
		running, waiting := d.replica.Queue()
		if running+waiting > 0 && now.Before(d.deadline) {
			keep = append(keep, d)
			continue
		}
		f.stop(d.addr, d.replica)
	}
	f.mu.Lock()
	f.draining = append(keep, f.draining...)
	f.mu.Unlock()
}

// Status returns the arrival rate and the replicas' queues, summed.
func (f *Fleet) Status() LoadStatus {
	f.retiredMu.Lock()
	lost := f.lost
	f.retiredMu.Unlock()
	st := LoadStatus{Rate: f.load.Rate(), Pattern: f.load.Pattern(), Held: f.load.Held(), Arrived: f.load.Arrived(), Lost: lost, Rejected: f.load.Rejected()}
	f.mu.Lock()
	st.Draining = len(f.draining)
	f.mu.Unlock()
	for _, r := range f.replicas() {
		running, waiting := r.Queue()
		st.Replicas++
		st.Running += running
		st.Waiting += waiting
	}
	return st
}

// Run steps the fleet every interval of its clock until ctx is done. It leaves the servers
// running; call Close to stop them.
func (f *Fleet) Run(ctx context.Context) {
	t := f.clock.NewTicker(f.interval)
	defer t.Stop()
	f.Step(f.clock.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			f.Step(f.clock.Now())
		}
	}
}

// Close shuts every server down gracefully, waiting for open requests until ctx is done,
// after which it closes their connections. The fleet serves nothing afterwards.
func (f *Fleet) Close(ctx context.Context) error {
	f.setMu.Lock()
	defer f.setMu.Unlock()
	f.mu.Lock()
	f.closed = true
	servers := f.servers
	f.servers = map[string]*server{}
	f.mu.Unlock()
	var errs []error
	for _, s := range servers {
		if err := s.http.Shutdown(ctx); err != nil {
			_ = s.http.Close()
			errs = append(errs, fmt.Errorf("shutting down the vLLM emulator on %s: %w", s.addr, err))
		}
		<-s.done
	}
	return errors.Join(errs...)
}

// retire keeps what a replica that stops serving observed.
func (f *Fleet) retire(r *Replica) {
	f.retiredMu.Lock()
	defer f.retiredMu.Unlock()
	for _, e := range r.Snapshot() {
		f.retired = mergeHistogram(f.retired, e.TTFT)
	}
}

// TTFT is the fleet's time-to-first-token histogram since it started: every engine of every
// replica, those that stopped serving included.
func (f *Fleet) TTFT() Histogram {
	f.retiredMu.Lock()
	out := f.retired.clone()
	f.retiredMu.Unlock()
	for _, r := range f.replicas() {
		for _, e := range r.Snapshot() {
			out = mergeHistogram(out, e.TTFT)
		}
	}
	if out.Bounds == nil {
		out = newHistogram(ttftBuckets)
	}
	return out
}

// StartReplay replays reqs from now over the fleet's replicas and starts a fresh exact
// latency record for them.
func (f *Fleet) StartReplay(reqs []TraceRequest) ReplayStatus {
	f.latency.reset()
	f.load.Replay(reqs, f.clock.Now())
	st, _ := f.load.ReplayStatus()
	return st
}

// ReplayReport is a replay's progress and its requests' exact latencies so far.
type ReplayReport struct {
	Replay ReplayStatus `json:"replay"`
	// FirstTokens is how many requests got their first token; TTFT their exact quantiles in
	// seconds (p50, p95, p99).
	FirstTokens int                `json:"firstTokens"`
	TTFT        map[string]float64 `json:"ttftSeconds"`
	// Arrived, Lost and Rejected are the fleet's counters (LoadStatus).
	Arrived  uint64 `json:"arrived"`
	Lost     uint64 `json:"lost"`
	Rejected uint64 `json:"rejected"`
}

// Replay reports the replay in progress; ok is false when none was started.
func (f *Fleet) Replay() (ReplayReport, bool) {
	st, ok := f.load.ReplayStatus()
	if !ok {
		return ReplayReport{}, false
	}
	ls := f.Status()
	n, q := f.latency.quantiles(0.5, 0.95, 0.99)
	return ReplayReport{Replay: st, FirstTokens: n, Arrived: ls.Arrived, Lost: ls.Lost, Rejected: ls.Rejected,
		TTFT: map[string]float64{"p50": q[0], "p95": q[1], "p99": q[2]}}, true
}

// maxLatencyRecords bounds the exact latency record (8 MB): a replay longer than that keeps
// its first requests' latencies.
const maxLatencyRecords = 1 << 20

// latencyLog records every request's time to first token; it is the Observer of every
// replica of a Fleet.
type latencyLog struct {
	mu   sync.Mutex
	ttft []float64
}

func (l *latencyLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ttft = nil
}

// FirstToken records one request's time to first token.
func (l *latencyLog) FirstToken(arrived, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ttft) < maxLatencyRecords {
		l.ttft = append(l.ttft, at.Sub(arrived).Seconds())
	}
}

// Finished is part of Observer; the log keeps first tokens only.
func (*latencyLog) Finished(time.Time, time.Time, time.Time, int) {}

// quantiles returns how many first tokens were recorded and their qs-quantiles (nearest
// rank; NaN without any).
func (l *latencyLog) quantiles(qs ...float64) (int, []float64) {
	l.mu.Lock()
	v := slices.Clone(l.ttft)
	l.mu.Unlock()
	slices.Sort(v)
	out := make([]float64, len(qs))
	for i, q := range qs {
		out[i] = Quantile(v, q)
	}
	return len(v), out
}

// Quantile is the nearest-rank q-quantile of sorted values: the smallest value with at least
// q of them at or below it; NaN for none.
func Quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// mergeHistogram adds b to a (same bounds; an empty a takes b's).
func mergeHistogram(a, b Histogram) Histogram {
	if a.Bounds == nil {
		return b.clone()
	}
	for i := range a.Buckets {
		a.Buckets[i] += b.Buckets[i]
	}
	a.Count += b.Count
	a.Sum += b.Sum
	return a
}
