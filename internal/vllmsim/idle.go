package vllmsim

import (
	"errors"
	"fmt"
	"time"
)

// idleHorizon is how long IdleTTFT waits for a first token: far longer than any prefill.
const idleHorizon = time.Hour

// IdleTTFT is the time to first token of a lone request with a prompt of prompt tokens on an
// idle replica of cfg under the token model: its prefill, chunk by chunk, exactly as the
// engine runs it. No load can make a request's TTFT shorter; it grows with the prompt.
func IdleTTFT(cfg Config, prompt int) (time.Duration, error) {
	if cfg.Tokens == nil {
		return 0, errors.New("idle TTFT: the engine does not run the token model")
	}
	start := time.Unix(0, 0).UTC()
	r, err := NewReplica(cfg, start)
	if err != nil {
		return 0, fmt.Errorf("idle TTFT: %w", err)
	}
	var first firstTokenAt
	r.SetObserver(&first)
	if !r.SubmitRequest(start, prompt, 1) {
		return 0, fmt.Errorf("idle TTFT: a prompt of %d tokens fills max-model-len (%d)", prompt, cfg.Tokens.MaxModelLen)
	}
	r.Step(start.Add(idleHorizon))
	if first.at.IsZero() {
		return 0, fmt.Errorf("idle TTFT: no first token for a prompt of %d tokens within %s", prompt, idleHorizon)
	}
	return first.at.Sub(start), nil
}

// firstTokenAt is an Observer that keeps the time of the first token it sees.
type firstTokenAt struct{ at time.Time }

// FirstToken keeps at if it is the first.
func (f *firstTokenAt) FirstToken(_, at time.Time) {
	if f.at.IsZero() {
		f.at = at
	}
}

// Finished is part of Observer.
func (*firstTokenAt) Finished(time.Time, time.Time, time.Time, int) {}
