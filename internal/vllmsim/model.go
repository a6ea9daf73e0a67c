package vllmsim

import (
	"slices"
	"sync"
	"time"
)

// Bucket boundaries of vLLM's histograms (vllm/v1/metrics/loggers.py).
var (
	ttftBuckets = []float64{
		0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
	}
	requestLatencyBuckets = []float64{
		0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
		40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
	}
	// promptLengthBuckets are vLLM's 1-2-5 buckets for request_prompt_tokens (up to a
	// max-model-len of 128k).
	promptLengthBuckets = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000}
	itlBuckets          = []float64{
		0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
	}
)

// Histogram is a cumulative histogram like a Prometheus one: Buckets[i] counts the
// observations not above Bounds[i]; Count and Sum cover every observation.
type Histogram struct {
	// Bounds are the upper bounds of the buckets, ascending.
	Bounds []float64
	// Buckets are the cumulative counts, one per bound.
	Buckets []uint64
	// Count is the number of observations.
	Count uint64
	// Sum is the sum of the observations.
	Sum float64
}

func newHistogram(bounds []float64) Histogram {
	return Histogram{Bounds: bounds, Buckets: make([]uint64, len(bounds))}
}

func (h *Histogram) observe(v float64) {
	h.Count++
	h.Sum += v
	for i, b := range h.Bounds {
		if v <= b {
			h.Buckets[i]++
		}
	}
}

func (h Histogram) clone() Histogram {
	h.Buckets = append([]uint64(nil), h.Buckets...)
	return h
}

// EngineStats is a snapshot of one engine of a Replica.
type EngineStats struct {
	// Engine is the engine index, reported as label engine.
	Engine int
	// Running is the number of sequences running.
	Running int
	// Waiting is the number of requests in the waiting queue.
	Waiting int
	// KVBlocksUsed is the number of KV-cache blocks held by running sequences.
	KVBlocksUsed int
	// KVCacheUsage is KVBlocksUsed/KVBlocksTotal, from 0 to 1.
	KVCacheUsage float64
	// RequestSuccess counts completed requests (finished_reason "stop").
	RequestSuccess uint64
	// PromptTokens counts prompt tokens prefilled (on admission).
	PromptTokens uint64
	// GenerationTokens counts generated tokens (on completion).
	GenerationTokens uint64
	// Aborted counts requests aborted before their first token because their client gave up
	// (Replica.Abort; vllm:request_success_total{finished_reason="abort"}).
	Aborted uint64
	// Preemptions counts preempted sequences (only with Config.KVGrowth: otherwise blocks are
	// reserved in full on admission and it stays 0).
	Preemptions uint64
	// TTFT holds time to first token (queue wait + PrefillTime), observed on admission.
	TTFT Histogram
	// E2ELatency holds arrival-to-completion latency, observed on completion.
	E2ELatency Histogram
	// QueueTime holds the time spent waiting (arrival to first admission), observed on
	// completion like vLLM does.
	QueueTime Histogram
	// ITL holds the time between two output tokens of a sequence (only under Config.Tokens:
	// the fixed model has no tokens to time).
	ITL Histogram
	// RequestTPOT holds each finished request's mean time per output token after its first
	// (only under Config.Tokens; vllm:request_time_per_output_token_seconds): what an ITL
	// objective on a request's mean is judged by.
	RequestTPOT Histogram
	// PromptLength holds finished requests' prompt lengths in tokens, observed on completion
	// as vLLM does (vllm:request_prompt_tokens).
	PromptLength Histogram
	// BusySeconds is the time the engine had a step in flight (only under Config.Tokens): what
	// a GPU's duty cycle (DCGM_FI_DEV_GPU_UTIL) measures, busy whatever the batch size.
	BusySeconds float64
}

// Observer receives every request's milestones as the engine produces them (only under
// Config.Tokens), for callers that need each request's latency rather than histograms: the
// economics simulator and trace replays. Calls come from Step, with the replica locked: an
// Observer must not call back into the replica.
type Observer interface {
	// FirstToken is called when a request that arrived at arrived gets its first token at at.
	FirstToken(arrived, at time.Time)
	// Finished is called when a request completes at at, having generated output tokens
	// after its first token at first; its inter-token latency averaged
	// (at−first)/(output−1).
	Finished(arrived, first, at time.Time, output int)
}

// AbortObserver is an Observer that is also told of every request Replica.Abort removes.
type AbortObserver interface {
	Observer
	// Aborted is called when a request that arrived at arrived is aborted, without a first
	// token.
	Aborted(arrived time.Time)
}

type request struct {
	arrived, admitted, done time.Time
	// preempted marks a request back in the queue after a preemption: its first token was
	// already produced, so its re-admission observes no second one.
	preempted bool
}

type engine struct {
	clock   time.Time // time up to which events have been processed
	waiting []request // FIFO
	running []request // ascending by done (admission is FIFO and service time constant)
	stats   EngineStats
	// tok runs the engine under Config.Tokens instead of waiting and running.
	tok *tokenEngine
	// obs, if set, receives each request's milestones (token model only).
	obs Observer
}

// Replica emulates one vLLM server. It is safe for concurrent use; time moves only through
// Step, driven by the caller's clock.
type Replica struct {
	cfg     Config
	created time.Time

	mu      sync.Mutex
	engines []*engine
	next    int // engine that gets the next arrival
}

// NewReplica returns an idle replica with cfg (zero fields take defaults) whose clock starts at now.
func NewReplica(cfg Config, now time.Time) (*Replica, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	r := &Replica{cfg: cfg, created: now}
	for i := range cfg.Engines {
		r.engines = append(r.engines, &engine{clock: now, stats: EngineStats{
			Engine:      i,
			TTFT:        newHistogram(ttftBuckets),
			E2ELatency:  newHistogram(requestLatencyBuckets),
			QueueTime:   newHistogram(requestLatencyBuckets),
			ITL:         newHistogram(itlBuckets),
			RequestTPOT: newHistogram(itlBuckets),

			PromptLength: newHistogram(promptLengthBuckets),
		}})
		if cfg.Tokens != nil {
			r.engines[i].tok = newTokenEngine(cfg.Seed, i)
		}
	}
	return r, nil
}

// Config returns the replica's configuration with defaults filled in.
func (r *Replica) Config() Config { return r.cfg }

// SetObserver makes o receive every request's milestones from now on (nil: none).
func (r *Replica) SetObserver(o Observer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.engines {
		e.obs = o
	}
}

// SubmitRequest enqueues one request that arrived at at with its own lengths — a trace's —
// on the next engine in turn, and reports whether it was accepted. Under the token model a
// prompt that fills max-model-len is rejected, as vLLM answers 400, and the output stops where
// max-model-len does; under the fixed model the lengths are ignored (every request takes
// ServiceTime).
func (r *Replica) SubmitRequest(at time.Time, prompt, output int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.engines[r.next]
	if e.tok != nil && prompt >= r.cfg.Tokens.MaxModelLen {
		return false
	}
	r.next = (r.next + 1) % len(r.engines)
	if e.tok != nil {
		e.tok.submitSized(at, prompt, output, &r.cfg)
		return true
	}
	e.waiting = append(e.waiting, request{arrived: at})
	return true
}

// Submit enqueues n requests that arrived at time at, spread round-robin over the engines.
// They are admitted on the next Step.
func (r *Replica) Submit(n int, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for range n {
		e := r.engines[r.next]
		r.next = (r.next + 1) % len(r.engines)
		if e.tok != nil {
			e.tok.submit(at, &r.cfg)
			continue
		}
		e.waiting = append(e.waiting, request{arrived: at})
	}
}

// Step advances the replica to now: it completes the sequences whose service time has passed
// and admits waiting requests in FIFO order, each at the moment a sequence slot and enough KV
// blocks became free, so the outcome does not depend on how often Step is called.
func (r *Replica) Step(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.engines {
		e.step(now, &r.cfg)
	}
}

func (e *engine) step(now time.Time, cfg *Config) {
	if now.Before(e.clock) {
		return // time does not go back
	}
	if e.tok != nil {
		e.tok.step(e, now, cfg)
		e.stats.KVBlocksUsed = e.tok.usedBlocks
		return
	}
	t := e.clock
	for {
		e.admit(t, now, cfg)
		if len(e.running) == 0 || e.running[0].done.After(now) {
			break
		}
		t = e.running[0].done
		e.complete(e.running[0], cfg)
		e.running = e.running[1:]
	}
	if cfg.KVGrowth {
		e.grow(now, cfg)
	}
	e.clock = now
}

// grow sets every running sequence's KV to what it holds at now and, while they need more
// blocks than the engine has, preempts the newest: it goes back to the head of the queue with
// its progress lost, as vLLM v1's recompute preemption does.
func (e *engine) grow(now time.Time, cfg *Config) {
	for {
		used := 0
		for _, r := range e.running {
			used += cfg.blocksAt(r.admitted, now)
		}
		if used <= cfg.KVBlocksTotal || len(e.running) <= 1 {
			e.stats.KVBlocksUsed = min(used, cfg.KVBlocksTotal)
			return
		}
		newest := len(e.running) - 1
		for i, r := range e.running {
			if r.admitted.After(e.running[newest].admitted) {
				newest = i
			}
		}
		victim := e.running[newest]
		e.running = append(e.running[:newest], e.running[newest+1:]...)
		e.waiting = append([]request{{arrived: victim.arrived, preempted: true}}, e.waiting...)
		e.stats.Preemptions++
	}
}

// admit moves requests from the head of the queue to running while there is room, each at
// the later of t and its arrival; requests that arrive after now wait.
func (e *engine) admit(t, now time.Time, cfg *Config) {
	for len(e.waiting) > 0 && len(e.running) < cfg.MaxNumSeqs &&
		cfg.KVBlocksTotal-e.stats.KVBlocksUsed >= cfg.promptBlocks() {
		req := e.waiting[0]
		if req.arrived.After(now) {
			return
		}
		req.admitted = t
		if req.arrived.After(t) {
			req.admitted = req.arrived
		}
		req.done = req.admitted.Add(cfg.ServiceTime)
		e.waiting = e.waiting[1:]
		e.running = append(e.running, req)
		e.stats.KVBlocksUsed += cfg.promptBlocks()
		e.stats.PromptTokens += uint64(cfg.PromptTokens)
		if !req.preempted {
			e.stats.TTFT.observe((req.admitted.Sub(req.arrived) + cfg.PrefillTime).Seconds())
		}
	}
}

func (e *engine) complete(req request, cfg *Config) {
	e.stats.KVBlocksUsed = max(0, e.stats.KVBlocksUsed-cfg.blocksAt(req.admitted, req.done))
	e.stats.RequestSuccess++
	e.stats.PromptLength.observe(float64(cfg.PromptTokens))
	e.stats.GenerationTokens += uint64(cfg.GenerationTokens)
	e.stats.QueueTime.observe(req.admitted.Sub(req.arrived).Seconds())
	e.stats.E2ELatency.observe(req.done.Sub(req.arrived).Seconds())
}

// Snapshot returns the state and counters of every engine, in engine order.
func (r *Replica) Snapshot() []EngineStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]EngineStats, len(r.engines))
	for i, e := range r.engines {
		s := e.stats
		s.Running, s.Waiting = e.queue()
		s.KVCacheUsage = float64(s.KVBlocksUsed) / float64(r.cfg.KVBlocksTotal)
		s.TTFT, s.E2ELatency, s.QueueTime, s.ITL = s.TTFT.clone(), s.E2ELatency.clone(), s.QueueTime.clone(), s.ITL.clone()
		s.RequestTPOT = s.RequestTPOT.clone()
		out[i] = s
	}
	return out
}

// Unfinished calls visit for every request the replica holds, queued or running: when it
// arrived and whether it has had its first token. The economics simulator uses it to account
// for the requests a removed replica loses.
func (r *Replica) Unfinished(visit func(arrived time.Time, firstToken bool)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.engines {
		if e.tok != nil {
			for _, q := range [][]*tseq{e.tok.waiting, e.tok.running} {
				for _, s := range q {
					visit(s.arrived, s.firstToken)
				}
			}
			continue
		}
		for _, q := range e.waiting {
			visit(q.arrived, q.preempted)
		}
		for _, q := range e.running {
			visit(q.arrived, true) // the fixed model's first token comes at admission
		}
	}
}

// Abort removes every request that arrived before olderThan and has had no first token, from
// the queue and from running, as vLLM aborts the request of a client that disconnected: a
// running one frees its KV blocks, and one in the step in flight gets nothing from that step
// (whose time is spent all the same). It returns how many went, counts them in
// EngineStats.Aborted and tells an AbortObserver. Under the fixed model only queued requests
// go: a running one had its first token on admission.
func (r *Replica) Abort(olderThan time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.engines {
		n += e.abort(olderThan)
	}
	return n
}

// abort is Abort on one engine.
func (e *engine) abort(olderThan time.Time) int {
	var gone []time.Time
	if e.tok != nil {
		gone = e.tok.abort(olderThan)
		e.stats.KVBlocksUsed = e.tok.usedBlocks
	} else {
		e.waiting = slices.DeleteFunc(e.waiting, func(q request) bool {
			if q.preempted || !q.arrived.Before(olderThan) {
				return false
			}
			gone = append(gone, q.arrived)
			return true
		})
	}
	e.stats.Aborted += uint64(len(gone))
	if o, ok := e.obs.(AbortObserver); ok {
		for _, at := range gone {
			o.Aborted(at)
		}
	}
	return len(gone)
}

// Queue returns the requests running and waiting, summed over the engines.
func (r *Replica) Queue() (running, waiting int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.engines {
		r, w := e.queue()
		running += r
		waiting += w
	}
	return running, waiting
}

// queue is the engine's running and waiting counts.
func (e *engine) queue() (running, waiting int) {
	if e.tok != nil {
		return len(e.tok.running), len(e.tok.waiting)
	}
	return len(e.running), len(e.waiting)
}
