package vllmsim

import (
	"testing"
	"time"
)

// abortLog records what an AbortObserver hears.
type abortLog struct {
	firstTokens int
	aborted     []time.Time
}

func (a *abortLog) FirstToken(time.Time, time.Time)             { a.firstTokens++ }
func (*abortLog) Finished(time.Time, time.Time, time.Time, int) {}
func (a *abortLog) Aborted(arrived time.Time)                   { a.aborted = append(a.aborted, arrived) }

// tokenConfigSeqs is tokenConfig running at most seqs sequences.
func tokenConfigSeqs(seqs int) Config {
	c := tokenConfig()
	c.MaxNumSeqs = seqs
	return c
}

// fixedConfigSeqs is a fixed-model engine of seqs slots, a second per request.
func fixedConfigSeqs(seqs int) Config { return Config{MaxNumSeqs: seqs, ServiceTime: time.Second} }

// submitAll submits n requests of the given lengths arriving at t0+at.
func submitAll(r *Replica, at time.Duration, prompt, output, n int) {
	for range n {
		r.SubmitRequest(t0.Add(at), prompt, output)
	}
}

func TestAbortRemovesRequestsWithoutAFirstToken(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		cfg  Config
		// setup submits and steps to stepTo; Abort(t0+olderThan) then must remove want.
		setup     func(r *Replica)
		stepTo    time.Duration
		olderThan time.Duration
		want      int
		// left is what is running and waiting after; firstTokens how many first tokens came
		// by the end (10 s on).
		leftRunning, leftWaiting, firstTokens int
	}{
		{"queued behind a long request", tokenConfigSeqs(1), func(r *Replica) { submitAll(r, 0, 100, 900, 2) },
			time.Second, ms, 1, 1, 0, 1},
		{"prefilling, its second chunk in flight", tokenConfigSeqs(4), func(r *Replica) { submitAll(r, 0, 1000, 10, 1) },
			50 * ms, ms, 1, 0, 0, 0},
		{"prefilling, its last chunk in flight", tokenConfigSeqs(4), func(r *Replica) { submitAll(r, 0, 1000, 10, 1) },
			90 * ms, ms, 1, 0, 0, 0},
		{"decoding: it has its first token", tokenConfigSeqs(4), func(r *Replica) { submitAll(r, 0, 100, 900, 1) },
			100 * ms, ms, 0, 1, 0, 1},
		{"arrived at the cut, not before it", tokenConfigSeqs(4), func(r *Replica) { submitAll(r, time.Second, 1000, 10, 1) },
			time.Second, time.Second, 0, 1, 0, 1},
		{"fixed model: the queued one only", fixedConfigSeqs(1), func(r *Replica) { r.Submit(2, t0) },
			0, ms, 1, 1, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newTestReplica(t, tc.cfg)
			log := &abortLog{}
			r.SetObserver(log)
			tc.setup(r)
			r.Step(t0.Add(tc.stepTo))
			if got := r.Abort(t0.Add(tc.olderThan)); got != tc.want {
				t.Errorf("Abort removed %d, want %d", got, tc.want)
			}
			s := r.Snapshot()[0]
			if s.Aborted != uint64(tc.want) || len(log.aborted) != tc.want {
				t.Errorf("counted %d aborted, observer told of %d: want %d", s.Aborted, len(log.aborted), tc.want)
			}
			if running, waiting := r.Queue(); running != tc.leftRunning || waiting != tc.leftWaiting {
				t.Errorf("left %d running and %d waiting, want %d and %d", running, waiting, tc.leftRunning, tc.leftWaiting)
			}
			if tc.cfg.Tokens != nil && tc.leftRunning == 0 && s.KVBlocksUsed != 0 {
				t.Errorf("%d KV blocks still held with nothing running", s.KVBlocksUsed)
			}
			r.Step(t0.Add(tc.stepTo + 10*time.Second))
			if tc.cfg.Tokens != nil && log.firstTokens != tc.firstTokens {
				t.Errorf("%d first tokens, want %d: an aborted request must get none", log.firstTokens, tc.firstTokens)
			}
		})
	}
}

func TestAbortedStepInFlightStillTakesItsTime(t *testing.T) {
	r := newTestReplica(t, tokenConfigSeqs(4))
	submitAll(r, 0, 1000, 10, 1)
	r.Step(t0.Add(50 * time.Millisecond)) // chunk 2 of 4 in flight, 25.6 ms to 51.2 ms
	r.Abort(t0.Add(time.Millisecond))
	submitAll(r, 50*time.Millisecond, 100, 1, 1)
	log := &firstTokens{}
	r.SetObserver(log)
	r.Step(t0.Add(time.Second))
	// The newcomer waits out the aborted chunk (to 51.2 ms), then prefills in one 10.1 ms step.
	if want := 11300 * time.Microsecond; len(log.ttft) != 1 || log.ttft[0] != want {
		t.Errorf("the newcomer's TTFT %v, want [%s]: the aborted chunk's step still runs", log.ttft, want)
	}
}

func TestIdleTTFT(t *testing.T) {
	cfg := tokenConfig()
	short, err := IdleTTFT(cfg, 100)
	if err != nil {
		t.Fatal(err)
	}
	// One memory-bound step: 10 ms + 100 KV tokens × 1 µs.
	if want := 10100 * time.Microsecond; short != want {
		t.Errorf("100-token prompt: %s, want %s", short, want)
	}
	long, err := IdleTTFT(cfg, 1000)
	if err != nil {
		t.Fatal(err)
	}
	// Four compute-bound chunks of 256, 256, 256 and 232 tokens at 100 µs a token.
	if want := 100 * time.Millisecond; long != want {
		t.Errorf("1,000-token prompt: %s, want %s", long, want)
	}
	if _, err := IdleTTFT(cfg, 1024); err == nil {
		t.Error("a prompt of max-model-len: no error")
	}
	if _, err := IdleTTFT(fixedConfigSeqs(1), 10); err == nil {
		t.Error("the fixed model: no error")
	}
}
