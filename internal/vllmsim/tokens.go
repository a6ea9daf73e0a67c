package vllmsim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// TokenModel makes a Replica run vLLM's continuous-batching loop token by token instead of
// holding each sequence for a fixed ServiceTime. Every engine step, as vLLM v1's scheduler
// does, gives each running sequence the tokens it has pending — one for a sequence that is
// decoding, a chunk of its prompt for one that is prefilling — oldest first, within a budget
// of MaxNumBatchedTokens (chunked prefill), then admits waiting requests FIFO into what is left
// of the budget while fewer than MaxNumSeqs run and the KV cache has the blocks for their
// first chunk. A sequence that needs a block when none is free preempts the newest running
// sequence, which loses its KV and goes back to the head of the queue (recompute), counted in
// vllm:num_preemptions_total.
//
// A step lasts StepOverhead plus the longer of reading the weights and the scheduled
// sequences' KV from memory and computing its tokens (a roofline):
//
//	step = StepOverhead + max((WeightBytes + ΣKV tokens read × KVBytesPerToken) / Bandwidth,
//	                          tokens in the step × FLOPsPerToken / FLOPS)
//
// so a small decode batch is memory-bound (its step time is about the weights' read), a large
// one or a prefill chunk compute-bound, and the time per output token grows with the batch.
// Prompt and output lengths are drawn per request (Config.PromptTokens and GenerationTokens
// are the medians; see LengthSpread).
type TokenModel struct {
	// WeightBytes is the bytes of weights every step reads (the whole model over its
	// tensor-parallel ranks).
	WeightBytes float64
	// KVBytesPerToken is the KV cache one token takes over every layer (2 × layers × KV heads
	// × head dim × bytes per element).
	KVBytesPerToken float64
	// FLOPsPerToken is the compute one token costs, about twice the parameter count.
	FLOPsPerToken float64
	// Bandwidth is the memory bandwidth a step achieves, in bytes per second (all ranks).
	Bandwidth float64
	// FLOPS is the compute rate a step achieves, in floating-point operations per second.
	FLOPS float64
	// StepOverhead is the fixed cost of a step (scheduling, sampling, launch).
	StepOverhead time.Duration
	// MaxNumBatchedTokens is vLLM's --max-num-batched-tokens: the token budget of a step.
	MaxNumBatchedTokens int
	// BlockSize is the tokens per KV-cache block (vLLM's --block-size, 16).
	BlockSize int
	// MaxModelLen caps prompt plus output tokens of a request (vLLM's --max-model-len).
	MaxModelLen int
}

// LengthSpread is the spread of drawn request lengths: each is log-normal around its median
// (Config.PromptTokens, Config.GenerationTokens) with these σ of its logarithm; 0 draws the
// median every time.
type LengthSpread struct {
	// Prompt is σ of ln(prompt tokens).
	Prompt float64
	// Generation is σ of ln(generated tokens).
	Generation float64
}

// Validate reports every field of m that cannot describe an engine.
func (m *TokenModel) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"weight bytes", m.WeightBytes}, {"KV bytes per token", m.KVBytesPerToken},
		{"FLOPs per token", m.FLOPsPerToken}, {"bandwidth", m.Bandwidth}, {"FLOPS", m.FLOPS},
		{"max-num-batched-tokens", float64(m.MaxNumBatchedTokens)}, {"block size", float64(m.BlockSize)},
		{"max-model-len", float64(m.MaxModelLen)},
	} {
		if !(f.v > 0) || math.IsInf(f.v, 0) {
			errs = append(errs, fmt.Errorf("%s must be a positive number, got %v", f.name, f.v))
		}
	}
	if m.StepOverhead < 0 {
		errs = append(errs, fmt.Errorf("step overhead must not be negative, got %s", m.StepOverhead))
	}
	return joinErrs("token model", errs)
}

// tseq is one request in the token model.
type tseq struct {
	arrived, admitted, lastToken time.Time
	// first is when the first token came (kept across a preemption).
	first          time.Time
	prompt, output int
	// computed is the context tokens whose KV is in the cache; generated the output tokens
	// sampled. pending() tokens go into the next step: the prompt (and, after a preemption,
	// the output so far) while prefilling, the last sampled token while decoding.
	computed, generated int
	blocks              int
	firstToken          bool // the first token was observed (a recompute observes no second)
	queued              bool // the queue time was observed
	aborted             bool // gone (Replica.Abort): the step in flight leaves it alone
}

func (s *tseq) pending() int { return s.prompt + s.generated - s.computed }

// scheduledSeq is a sequence's share of the step in flight.
type scheduledSeq struct {
	s *tseq
	n int
}

// tokenEngine is an engine under the token model.
type tokenEngine struct {
	waiting, running []*tseq
	usedBlocks       int
	// inflight is the step in flight, from stepStart to stepEnd; empty when idle.
	inflight           []scheduledSeq
	stepStart, stepEnd time.Time
	rng                *rand.Rand
}

func newTokenEngine(seed uint64, engine int) *tokenEngine {
	return &tokenEngine{rng: rand.New(rand.NewPCG(seed, uint64(engine)+0x632be59bd9b4e019))}
}

// submit queues a request that arrived at at, drawing its lengths.
func (t *tokenEngine) submit(at time.Time, cfg *Config) {
	m := cfg.Tokens
	prompt := t.draw(cfg.PromptTokens, cfg.Spread.Prompt, 1, m.MaxModelLen-1)
	output := t.draw(cfg.GenerationTokens, cfg.Spread.Generation, 1, m.MaxModelLen-prompt)
	t.waiting = append(t.waiting, &tseq{arrived: at, prompt: prompt, output: output})
}

// submitSized queues a request with given lengths (a prompt under max-model-len), its output
// cut where max-model-len is reached.
func (t *tokenEngine) submitSized(at time.Time, prompt, output int, cfg *Config) {
	m := cfg.Tokens
	prompt = max(prompt, 1)
	output = min(max(output, 1), m.MaxModelLen-prompt)
	t.waiting = append(t.waiting, &tseq{arrived: at, prompt: prompt, output: output})
}

// draw is a log-normal length around median with spread sigma, clamped to [lo, hi].
func (t *tokenEngine) draw(median int, sigma float64, lo, hi int) int {
	v := float64(median)
	if sigma > 0 {
		v *= math.Exp(sigma * t.rng.NormFloat64())
	}
	return min(max(int(math.Round(v)), lo), max(lo, hi))
}

// step advances the engine to now: it finishes the steps that end by now and starts the next
// at the end of each, so the outcome depends only on the arrivals, not on how often Step runs.
func (t *tokenEngine) step(e *engine, now time.Time, cfg *Config) {
	for {
		at := e.clock
		if len(t.inflight) > 0 {
			if t.stepEnd.After(now) {
				break
			}
			at = t.stepEnd
			t.finishStep(e, at, cfg)
		}
		if !t.startStep(e, at, cfg) {
			// Idle: the next step starts at the first arrival (which may be later than at).
			next, ok := t.firstArrival(at, now)
			if !ok {
				break
			}
			e.clock = next
			continue
		}
		e.clock = at
	}
	if now.After(e.clock) && len(t.inflight) == 0 {
		e.clock = now
	}
}

// firstArrival is the earliest arrival of a waiting request after at and not after now.
func (t *tokenEngine) firstArrival(at, now time.Time) (time.Time, bool) {
	var first time.Time
	for _, s := range t.waiting {
		if s.arrived.After(at) && !s.arrived.After(now) && (first.IsZero() || s.arrived.Before(first)) {
			first = s.arrived
		}
	}
	return first, !first.IsZero()
}

// startStep schedules a step at at; false when there is nothing to run.
func (t *tokenEngine) startStep(e *engine, at time.Time, cfg *Config) bool {
	m := cfg.Tokens
	budget := m.MaxNumBatchedTokens
	t.inflight = t.inflight[:0]
	var kvRead float64
	preemptions := e.stats.Preemptions
	for i := 0; i < len(t.running) && budget > 0; i++ {
		s := t.running[i]
		n := min(s.pending(), budget)
		if !t.reserve(e, s, n, cfg) {
			break // s itself was preempted: the ones after it were too
		}
		t.inflight = append(t.inflight, scheduledSeq{s, n})
		budget -= n
		kvRead += float64(s.computed + n)
	}
	// As vLLM v1's scheduler, no waiting request is admitted in a step that had to preempt a
	// running one: the cache is short already.
	for len(t.waiting) > 0 && budget > 0 && len(t.running) < cfg.MaxNumSeqs && e.stats.Preemptions == preemptions {
		s := t.waiting[0]
		if s.arrived.After(at) {
			break
		}
		n := min(s.pending(), budget)
		need := blocksFor(n, m.BlockSize)
		if cfg.KVBlocksTotal-t.usedBlocks < need {
			break
		}
		t.waiting = t.waiting[1:]
		t.running = append(t.running, s)
		t.usedBlocks += need
		s.blocks = need
		if !s.queued {
			s.queued, s.admitted = true, at
		}
		t.inflight = append(t.inflight, scheduledSeq{s, n})
		budget -= n
		kvRead += float64(s.computed + n)
	}
	if len(t.inflight) == 0 {
		return false
	}
	tokens := float64(m.MaxNumBatchedTokens - budget)
	memory := (m.WeightBytes + kvRead*m.KVBytesPerToken) / m.Bandwidth
	compute := tokens * m.FLOPsPerToken / m.FLOPS
	t.stepStart = at
	t.stepEnd = at.Add(m.StepOverhead + time.Duration(math.Max(memory, compute)*float64(time.Second)))
	return true
}

// reserve makes room in the KV cache for n more tokens of s, preempting the newest running
// sequences while blocks are short; false when s was the one preempted.
func (t *tokenEngine) reserve(e *engine, s *tseq, n int, cfg *Config) bool {
	need := blocksFor(s.computed+n, cfg.Tokens.BlockSize) - s.blocks
	for cfg.KVBlocksTotal-t.usedBlocks < need {
		victim := t.running[len(t.running)-1]
		t.running = t.running[:len(t.running)-1]
		t.usedBlocks -= victim.blocks
		victim.blocks, victim.computed = 0, 0
		t.waiting = append([]*tseq{victim}, t.waiting...)
		e.stats.Preemptions++
		if victim == s {
			return false
		}
	}
	t.usedBlocks += need
	s.blocks += need
	return true
}

// abort drops the sequences that arrived before olderThan without a first token, freeing
// their blocks, and returns their arrivals; one in the step in flight is marked so that the
// step's end skips it.
func (t *tokenEngine) abort(olderThan time.Time) []time.Time {
	var gone []time.Time
	drop := func(s *tseq) bool {
		if s.firstToken || !s.arrived.Before(olderThan) {
			return false
		}
		gone = append(gone, s.arrived)
		t.usedBlocks -= s.blocks
		s.blocks, s.aborted = 0, true
		return true
	}
	t.waiting = slices.DeleteFunc(t.waiting, drop)
	t.running = slices.DeleteFunc(t.running, drop)
	return gone
}

func blocksFor(tokens, blockSize int) int { return (tokens + blockSize - 1) / blockSize }

// finishStep applies the step that ended at end: its tokens are computed, every sequence whose
// context is complete samples a token, and finished ones leave.
func (t *tokenEngine) finishStep(e *engine, end time.Time, cfg *Config) {
	e.stats.BusySeconds += end.Sub(t.stepStart).Seconds()
	for _, sc := range t.inflight {
		s := sc.s
		if s.aborted {
			continue
		}
		s.computed += sc.n
		if s.pending() > 0 {
			continue // prefill goes on in the next step
		}
		s.generated++
		e.stats.GenerationTokens++
		if !s.firstToken {
			s.firstToken = true
			e.stats.PromptTokens += uint64(s.prompt)
			e.stats.TTFT.observe(end.Sub(s.arrived).Seconds())
			s.first = end
			if e.obs != nil {
				e.obs.FirstToken(s.arrived, end)
			}
		} else if !s.lastToken.IsZero() {
			e.stats.ITL.observe(end.Sub(s.lastToken).Seconds())
		}
		s.lastToken = end
	}
	t.inflight = t.inflight[:0]
	kept := t.running[:0]
	for _, s := range t.running {
		if s.generated < s.output {
			kept = append(kept, s)
			continue
		}
		t.usedBlocks -= s.blocks
		e.stats.RequestSuccess++
		e.stats.PromptLength.observe(float64(s.prompt))
		e.stats.E2ELatency.observe(end.Sub(s.arrived).Seconds())
		// As vLLM, on completion: a window of vllm:request_queue_time_seconds holds its
		// finished requests', which waited a whole decode before the first tokens it counts.
		e.stats.QueueTime.observe(s.admitted.Sub(s.arrived).Seconds())
		tpot := 0.0 // one token: none after the first (vLLM observes 0)
		if s.output > 1 {
			tpot = end.Sub(s.first).Seconds() / float64(s.output-1)
		}
		e.stats.RequestTPOT.observe(tpot)
		if e.obs != nil {
			e.obs.Finished(s.arrived, s.first, end, s.output)
		}
	}
	clear(t.running[len(kept):])
	t.running = kept
	e.stats.KVBlocksUsed = t.usedBlocks
}
