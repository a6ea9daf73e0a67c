package vllmsim

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Defaults for the zero fields of Config.
const (
	// DefaultModel is the served model name reported in labels and /v1/models.
	DefaultModel = "meta-llama/Llama-3.1-8B-Instruct"
	// DefaultMaxNumSeqs is vLLM's --max-num-seqs: sequences running at once per engine.
	DefaultMaxNumSeqs = 16
	// DefaultKVBlocksTotal is the number of KV-cache blocks per engine.
	DefaultKVBlocksTotal = 1000
	// DefaultKVBlocksPerSeq is the number of KV-cache blocks a running sequence holds.
	DefaultKVBlocksPerSeq = 50
	// DefaultServiceTime is how long a sequence runs once admitted.
	DefaultServiceTime = 2 * time.Second
	// DefaultPrefillTime is the time from admission to the first token.
	DefaultPrefillTime = 100 * time.Millisecond
	// DefaultEngines is the number of engine cores (vLLM data-parallel ranks) per replica.
	DefaultEngines = 1
	// DefaultPromptTokens is the number of prompt tokens of every request.
	DefaultPromptTokens = 512
	// DefaultGenerationTokens is the number of generated tokens of every request.
	DefaultGenerationTokens = 256
)

// Config describes one emulated vLLM server. A zero field takes its Default value.
//
// The limits apply per engine, like vLLM's data-parallel engine cores, each of which has its
// own scheduler and KV cache: a replica with Engines engines runs up to Engines*MaxNumSeqs
// sequences and serves about Engines*MaxNumSeqs/ServiceTime requests per second.
type Config struct {
	// Model is the served model name (label model_name, /v1/models).
	Model string
	// MaxNumSeqs is the most sequences an engine runs at once.
	MaxNumSeqs int
	// KVBlocksTotal is the number of KV-cache blocks of an engine.
	KVBlocksTotal int
	// KVBlocksPerSeq is the number of blocks a running sequence holds; a request is admitted
	// only when this many blocks are free.
	KVBlocksPerSeq int
	// ServiceTime is how long a sequence runs once admitted, prefill included.
	ServiceTime time.Duration
	// PrefillTime is the time from admission to the first token.
	PrefillTime time.Duration
	// Engines is the number of engine cores; requests are spread round-robin over them and
	// each reports its own series, labelled engine="0", "1", ...
	Engines int
	// PromptTokens is the number of prompt tokens every request carries.
	PromptTokens int
	// GenerationTokens is the number of tokens every request generates.
	GenerationTokens int
	// LegacyKVName makes /metrics report KV-cache usage as vllm:gpu_cache_usage_perc, the name
	// vLLM used before 0.9, instead of vllm:kv_cache_usage_perc.
	LegacyKVName bool
	// KVGrowth makes a sequence's KV grow as it decodes, as vLLM's paged cache does: admitted
	// with its prompt's share of KVBlocksPerSeq (PromptTokens of PromptTokens+GenerationTokens),
	// growing linearly to KVBlocksPerSeq by completion. When growth finds no free block the
	// newest running sequence is preempted — back to the head of the queue, its progress lost
	// (vLLM v1 recomputes) — and vllm:num_preemptions_total counts it. Growth is applied at
	// each Step, so outcomes depend slightly on how often Step is called.
	KVGrowth bool
	// Tokens, when set, runs each engine token by token (see TokenModel): step times from the
	// batch, chunked prefill, KV that grows with every token, recompute preemption, and
	// request lengths drawn around PromptTokens and GenerationTokens with Spread. ServiceTime,
	// PrefillTime, KVBlocksPerSeq and KVGrowth do not apply.
	Tokens *TokenModel
	// Spread is how request lengths vary under Tokens.
	Spread LengthSpread
	// Seed seeds the length draws under Tokens (the same seed, the same requests).
	Seed uint64
}

// promptBlocks is the KV a sequence holds when admitted.
func (c *Config) promptBlocks() int {
	if !c.KVGrowth {
		return c.KVBlocksPerSeq
	}
	return max(1, int(math.Ceil(float64(c.KVBlocksPerSeq)*float64(c.PromptTokens)/float64(c.PromptTokens+c.GenerationTokens))))
}

// blocksAt is the KV a sequence admitted at admitted holds at now.
func (c *Config) blocksAt(admitted, now time.Time) int {
	pb := c.promptBlocks()
	if !c.KVGrowth || c.ServiceTime <= 0 {
		return pb
	}
	progress := min(1, max(0, now.Sub(admitted).Seconds()/c.ServiceTime.Seconds()))
	return pb + int(math.Ceil(float64(c.KVBlocksPerSeq-pb)*progress))
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.Model == "" {
		c.Model = DefaultModel
	}
	setInt(&c.MaxNumSeqs, DefaultMaxNumSeqs)
	setInt(&c.KVBlocksTotal, DefaultKVBlocksTotal)
	setInt(&c.KVBlocksPerSeq, DefaultKVBlocksPerSeq)
	setInt(&c.Engines, DefaultEngines)
	setInt(&c.PromptTokens, DefaultPromptTokens)
	setInt(&c.GenerationTokens, DefaultGenerationTokens)
	if c.ServiceTime == 0 {
		c.ServiceTime = DefaultServiceTime
	}
	if c.PrefillTime == 0 {
		c.PrefillTime = DefaultPrefillTime
	}
	return c
}

func setInt(p *int, def int) {
	if *p == 0 {
		*p = def
	}
}

// Validate reports every field of c (after WithDefaults) that cannot describe a server.
func (c Config) Validate() error {
	c = c.WithDefaults()
	var errs []error
	for _, f := range []struct {
		name string
		v    int
	}{
		{"max-num-seqs", c.MaxNumSeqs},
		{"kv-blocks", c.KVBlocksTotal},
		{"kv-blocks-per-seq", c.KVBlocksPerSeq},
		{"engines", c.Engines},
		{"prompt tokens", c.PromptTokens},
		{"generation tokens", c.GenerationTokens},
	} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %d", f.name, f.v))
		}
	}
	if c.ServiceTime < 0 {
		errs = append(errs, fmt.Errorf("service time must be positive, got %s", c.ServiceTime))
	}
	if c.PrefillTime < 0 {
		errs = append(errs, fmt.Errorf("prefill time must be positive, got %s", c.PrefillTime))
	}
	if c.PrefillTime > c.ServiceTime {
		errs = append(errs, fmt.Errorf("prefill time %s exceeds service time %s", c.PrefillTime, c.ServiceTime))
	}
	if c.Tokens == nil && c.KVBlocksPerSeq > c.KVBlocksTotal {
		errs = append(errs, fmt.Errorf("kv-blocks-per-seq %d exceeds kv-blocks %d: no request could ever run", c.KVBlocksPerSeq, c.KVBlocksTotal))
	}
	if c.Tokens != nil {
		errs = append(errs, c.validateTokens()...)
	}
	return joinErrs("vLLM emulator config", errs)
}

// validateTokens reports what makes the token model unable to run every request it can draw.
func (c Config) validateTokens() []error {
	m := c.Tokens
	if err := m.Validate(); err != nil {
		return []error{err}
	}
	var errs []error
	if capacity := c.KVBlocksTotal * m.BlockSize; m.MaxModelLen > capacity {
		errs = append(errs, fmt.Errorf("max-model-len %d exceeds the KV cache (%d blocks × %d tokens = %d): a long request could never finish", m.MaxModelLen, c.KVBlocksTotal, m.BlockSize, capacity))
	}
	if c.PromptTokens >= m.MaxModelLen {
		errs = append(errs, fmt.Errorf("prompt tokens %d leave no room to generate within max-model-len %d", c.PromptTokens, m.MaxModelLen))
	}
	for _, s := range []struct {
		name string
		v    float64
	}{{"prompt length spread", c.Spread.Prompt}, {"generation length spread", c.Spread.Generation}} {
		if s.v < 0 || math.IsNaN(s.v) || s.v > 4 {
			errs = append(errs, fmt.Errorf("%s must be between 0 and 4 (σ of the log-normal), got %v", s.name, s.v))
		}
	}
	return errs
}

// joinErrs wraps errs, if any, as the invalid what.
func joinErrs(what string, errs []error) error {
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid %s: %w", what, err)
	}
	return nil
}
