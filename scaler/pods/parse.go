package pods

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/berth-dev/berth/scaler"
)

// Metric families berth reads. vLLM renamed gpu_cache_usage_perc to kv_cache_usage_perc; both
// are understood. SGLang's equivalents make it a second engine.
const (
	VLLMWaiting    = "vllm:num_requests_waiting"
	VLLMRunning    = "vllm:num_requests_running"
	VLLMKVUsage    = "vllm:kv_cache_usage_perc"
	VLLMKVUsageOld = "vllm:gpu_cache_usage_perc"
	VLLMTTFT       = "vllm:time_to_first_token_seconds"
	VLLMITL        = "vllm:inter_token_latency_seconds"
	VLLMITLOld     = "vllm:time_per_output_token_seconds"
	// VLLMTPOT is the histogram of finished requests' mean time per output token: what an
	// ITL objective on a request's mean is judged by.
	VLLMTPOT        = "vllm:request_time_per_output_token_seconds"
	VLLMPreemptions = "vllm:num_preemptions_total"
	VLLMPrompt      = "vllm:prompt_tokens_total"
	VLLMGeneration  = "vllm:generation_tokens_total"
	// VLLMSuccess counts finished requests by finished_reason (stop, length, abort): with the
	// queue gauges, the requests that arrived.
	VLLMSuccess      = "vllm:request_success_total"
	SGLangPrompt     = "sglang:prompt_tokens_total"
	SGLangGeneration = "sglang:generation_tokens_total"
	SGLangWaiting    = "sglang:num_queue_reqs"
	SGLangRunning    = "sglang:num_running_reqs"
	SGLangTokenUsage = "sglang:token_usage"
	SGLangTTFT       = "sglang:time_to_first_token_seconds"
	SGLangITL        = "sglang:inter_token_latency_seconds"
	// VLLMCacheConfig is an info gauge whose num_gpu_blocks and block_size labels say how many
	// tokens an engine's KV cache holds.
	VLLMCacheConfig = "vllm:cache_config_info"
	// VLLMPromptLength is the histogram of finished requests' prompt lengths in tokens.
	VLLMPromptLength = "vllm:request_prompt_tokens"
	// SGLangUsedTokens is the KV-cache tokens in use on an SGLang server.
	SGLangUsedTokens = "sglang:num_used_tokens"
	modelLabel       = "model_name"
	engineLabel      = "engine"
)

// ErrNoSeries is a metrics page without a queue-depth series (for the model asked for).
var ErrNoSeries = errors.New("no queue series")

// Reading is one parsed metrics page: a sample per model_name, so several ScaledObjects that
// filter on different models share one scrape.
type Reading struct {
	// At is when the page was read.
	At time.Time
	// ByModel holds one sample per model_name ("" for series without the label).
	ByModel map[string]scaler.Sample
}

// Sample returns the replica's sample for model ("" sums every model).
func (r Reading) Sample(model string) (scaler.Sample, error) {
	if model != "" {
		s, ok := r.ByModel[model]
		if !ok {
			return scaler.Sample{}, fmt.Errorf("%w for model_name=%q (models served: %s; a LoRA adapter's requests are labelled with its base model's served name)", ErrNoSeries, model, strings.Join(r.models(), ", "))
		}
		return s, nil
	}
	if len(r.ByModel) == 0 {
		return scaler.Sample{}, fmt.Errorf("%w: neither %s nor %s", ErrNoSeries, VLLMWaiting, SGLangWaiting)
	}
	out := scaler.Sample{At: r.At}
	kvN := 0
	for _, m := range r.models() {
		s := r.ByModel[m]
		out.Waiting += s.Waiting
		out.Running += s.Running
		if s.HasKV {
			out.KVUsage += s.KVUsage
			out.HasKV = true
			kvN++
		}
		out.TTFT.Add(s.TTFT)
		out.Preemptions += s.Preemptions
		out.PromptTokens += s.PromptTokens
		out.Prompts += s.Prompts
		out.Tokens += s.Tokens
		out.Finished += s.Finished
		out.Aborted += s.Aborted
		out.HasFinished = out.HasFinished || s.HasFinished
		out.ITL.Add(s.ITL)
		out.TPOT.Add(s.TPOT)
	}
	if kvN > 0 {
		out.KVUsage /= float64(kvN)
	}
	// KV tokens are known for the replica only when known for every model it serves.
	out.HasKVTokens = len(r.ByModel) > 0
	for _, s := range r.ByModel {
		out.KVTokens += s.KVTokens
		out.HasKVTokens = out.HasKVTokens && s.HasKVTokens
	}
	if !out.HasKVTokens {
		out.KVTokens = 0
	}
	return out, nil
}

func (r Reading) models() []string {
	out := make([]string, 0, len(r.ByModel))
	for m := range r.ByModel {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

// Parse reads a Prometheus text exposition page. Queue and running counts are summed across
// engine series, KV usage is the mean over engines (each engine has its own cache), TTFT
// histograms are merged. A model appears in ByModel only when it has a queue series.
func Parse(in io.Reader, at time.Time) (Reading, error) {
	body, err := io.ReadAll(in)
	if err != nil {
		return Reading{}, fmt.Errorf("reading the metrics page: %w", err)
	}
	return ParsePage(body, at)
}

// neededFamilies are the metric families berth reads; a page's other families (a vLLM v1
// page carries dozens of histograms) are skipped before parsing.
var neededFamilies = map[string]bool{
	VLLMWaiting: true, VLLMRunning: true, VLLMKVUsage: true, VLLMKVUsageOld: true, VLLMTTFT: true, VLLMITL: true, VLLMITLOld: true, VLLMTPOT: true, VLLMPreemptions: true,
	VLLMPrompt: true, VLLMGeneration: true, VLLMSuccess: true, SGLangPrompt: true, SGLangGeneration: true,
	SGLangWaiting: true, SGLangRunning: true, SGLangTokenUsage: true, SGLangTTFT: true, SGLangITL: true,
	VLLMCacheConfig: true, VLLMPromptLength: true, SGLangUsedTokens: true,
}

// ParsePage is Parse over a page already in memory. Only the lines of the families berth
// reads go to the text parser: on a real vLLM page that is a small fraction of its bytes.
func ParsePage(body []byte, at time.Time) (Reading, error) {
	kept, bad := keepFamilies(body)
	if bad != "" {
		return Reading{}, fmt.Errorf("parsing the metrics page: not the Prometheus text format: line %q", bad)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(kept))
	if err != nil {
		return Reading{}, fmt.Errorf("parsing the metrics page: %w", err)
	}
	pp := pageParser{fams: fams, at: at, byModel: map[string]*modelAcc{}, cacheTokens: cacheTokens(fams[VLLMCacheConfig])}
	if err := pp.gauges(); err != nil {
		return Reading{}, err
	}
	if err := pp.histograms(); err != nil {
		return Reading{}, err
	}
	return pp.reading(), nil
}

// modelAcc accumulates one model's series over a page's engines.
type modelAcc struct {
	s          scaler.Sample
	hasQueue   bool
	kvSum      float64
	kvN        int
	oldKV, sgl float64
	oldN, sglN int
	// kvTokens and oldKVTokens are usage × cache tokens over the engines of the current and the
	// old KV name; kvSized and oldSized count the engines whose cache size is known.
	kvTokens, oldKVTokens float64
	kvSized, oldSized     int
	sglUsed               float64
	sglUsedN              int
}

// pageParser folds one page's metric families into per-model samples.
type pageParser struct {
	fams    map[string]*dto.MetricFamily
	at      time.Time
	byModel map[string]*modelAcc
	// cacheTokens is each engine's KV-cache size in tokens, by engine label ("" for a page
	// whose cache_config_info has no engine label).
	cacheTokens map[string]float64
}

// cacheTokens reads vllm:cache_config_info: num_gpu_blocks × block_size per engine. An engine
// whose labels are missing or not numbers ("None" before vLLM has profiled the GPU) is left
// out: its cache size is unknown.
func cacheTokens(f *dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	if f == nil {
		return out
	}
	for _, m := range f.GetMetric() {
		var engine string
		var blocks, size float64
		for _, l := range m.GetLabel() {
			v, err := strconv.ParseFloat(l.GetValue(), 64)
			switch l.GetName() {
			case engineLabel:
				engine = l.GetValue()
			case "num_gpu_blocks":
				if err == nil {
					blocks = v
				}
			case "block_size":
				if err == nil {
					size = v
				}
			}
		}
		if blocks > 0 && size > 0 && !math.IsInf(blocks*size, 0) {
			out[engine] = blocks * size
		}
	}
	return out
}

// cacheOf is the KV-cache size in tokens of the engine a series belongs to: its engine's, or
// the page's only one when cache_config_info carries no engine label.
func (pp *pageParser) cacheOf(m *dto.Metric) (float64, bool) {
	engine := ""
	for _, l := range m.GetLabel() {
		if l.GetName() == engineLabel {
			engine = l.GetValue()
		}
	}
	if c, ok := pp.cacheTokens[engine]; ok {
		return c, true
	}
	if c, ok := pp.cacheTokens[""]; ok && len(pp.cacheTokens) == 1 {
		return c, true
	}
	return 0, false
}

// acc is the accumulator of the model a series is labelled with.
func (pp *pageParser) acc(m *dto.Metric) *modelAcc {
	name := ""
	for _, l := range m.GetLabel() {
		if l.GetName() == modelLabel {
			name = l.GetValue()
		}
	}
	a := pp.byModel[name]
	if a == nil {
		a = &modelAcc{s: scaler.Sample{At: pp.at}}
		pp.byModel[name] = a
	}
	return a
}

// gauges folds the queue, running and KV-usage gauges (vLLM's current and old names, SGLang's).
func (pp *pageParser) gauges() error {
	steps := []struct {
		name string
		fn   func(a *modelAcc, v float64)
	}{
		{VLLMPreemptions, func(a *modelAcc, v float64) { a.s.Preemptions += v }},
		{VLLMPrompt, func(a *modelAcc, v float64) { a.s.Tokens += v }},
		{VLLMGeneration, func(a *modelAcc, v float64) { a.s.Tokens += v }},
		{SGLangPrompt, func(a *modelAcc, v float64) { a.s.Tokens += v }},
		{SGLangGeneration, func(a *modelAcc, v float64) { a.s.Tokens += v }},
		{VLLMWaiting, func(a *modelAcc, v float64) { a.s.Waiting += v; a.hasQueue = true }},
		{SGLangWaiting, func(a *modelAcc, v float64) { a.s.Waiting += v; a.hasQueue = true }},
		{VLLMRunning, func(a *modelAcc, v float64) { a.s.Running += v }},
		{SGLangRunning, func(a *modelAcc, v float64) { a.s.Running += v }},
		{VLLMKVUsage, func(a *modelAcc, v float64) { a.kvSum += v; a.kvN++ }},
		{VLLMKVUsageOld, func(a *modelAcc, v float64) { a.oldKV += v; a.oldN++ }},
		{SGLangTokenUsage, func(a *modelAcc, v float64) { a.sgl += v; a.sglN++ }},
		{SGLangUsedTokens, func(a *modelAcc, v float64) { a.sglUsed += v; a.sglUsedN++ }},
	}
	for _, st := range steps {
		f := pp.fams[st.name]
		if f == nil {
			continue
		}
		for _, m := range f.GetMetric() {
			v, ok := value(f, m)
			if counterFamilies[st.name] {
				v, ok = counterValue(f, m)
			}
			if !ok {
				return fmt.Errorf("%s: want a %s, the page has a %s", st.name, wantType(st.name), f.GetType())
			}
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				return fmt.Errorf("%s: value %v", st.name, v)
			}
			a := pp.acc(m)
			st.fn(a, v)
			if c, ok := pp.cacheOf(m); ok {
				switch st.name {
				case VLLMKVUsage:
					a.kvTokens += v * c
					a.kvSized++
				case VLLMKVUsageOld:
					a.oldKVTokens += v * c
					a.oldSized++
				}
			}
		}
	}
	if err := pp.successes(); err != nil {
		return err
	}
	return pp.promptLengths()
}

// successes reads vllm:request_success_total: requests that completed (stop, length) apart from
// those aborted (a client that gave up), which count as arrived but not as served.
func (pp *pageParser) successes() error {
	f := pp.fams[VLLMSuccess]
	if f == nil {
		return nil
	}
	for _, m := range f.GetMetric() {
		v, ok := counterValue(f, m)
		if !ok {
			return fmt.Errorf("%s: want a counter, the page has a %s", VLLMSuccess, f.GetType())
		}
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return fmt.Errorf("%s: value %v", VLLMSuccess, v)
		}
		a := pp.acc(m)
		a.s.HasFinished = true
		if label(m, "finished_reason") == "abort" {
			a.s.Aborted += v
		} else {
			a.s.Finished += v
		}
	}
	return nil
}

// label is the value of m's label name ("" when it has none).
func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// promptLengths reads the sum and count of finished requests' prompt lengths.
func (pp *pageParser) promptLengths() error {
	f := pp.fams[VLLMPromptLength]
	if f == nil {
		return nil
	}
	if f.GetType() != dto.MetricType_HISTOGRAM {
		return fmt.Errorf("%s: want a histogram, the page has a %s", VLLMPromptLength, f.GetType())
	}
	for _, m := range f.GetMetric() {
		h := m.GetHistogram()
		sum, n := h.GetSampleSum(), float64(h.GetSampleCount())
		if math.IsNaN(sum) || math.IsInf(sum, 0) || sum < 0 {
			return fmt.Errorf("%s: sum %v", VLLMPromptLength, sum)
		}
		a := pp.acc(m)
		a.s.PromptTokens += sum
		a.s.Prompts += n
	}
	return nil
}

// histograms merges the TTFT, inter-token latency and per-request time-per-output-token
// histograms of every engine. vLLM renamed time_per_output_token_seconds to
// inter_token_latency_seconds; the old name counts only on a page without the new one.
func (pp *pageParser) histograms() error {
	itl := []string{VLLMITL, SGLangITL}
	if pp.fams[VLLMITL] == nil {
		itl = append(itl, VLLMITLOld)
	}
	for _, set := range []struct {
		names []string
		dst   func(a *modelAcc) *scaler.Histogram
	}{
		{[]string{VLLMTTFT, SGLangTTFT}, func(a *modelAcc) *scaler.Histogram { return &a.s.TTFT }},
		{itl, func(a *modelAcc) *scaler.Histogram { return &a.s.ITL }},
		{[]string{VLLMTPOT}, func(a *modelAcc) *scaler.Histogram { return &a.s.TPOT }},
	} {
		for _, name := range set.names {
			f := pp.fams[name]
			if f == nil {
				continue
			}
			if f.GetType() != dto.MetricType_HISTOGRAM {
				return fmt.Errorf("%s: want a histogram, the page has a %s", name, f.GetType())
			}
			for _, m := range f.GetMetric() {
				if !set.dst(pp.acc(m)).Add(histogram(m.GetHistogram())) {
					return fmt.Errorf("%s: engines expose different bucket bounds", name)
				}
			}
		}
	}
	return nil
}

// reading is the page's per-model samples: models with a queue series, KV usage from the
// current vLLM name, else the old one, else SGLang's.
func (pp *pageParser) reading() Reading {
	r := Reading{At: pp.at, ByModel: map[string]scaler.Sample{}}
	for name, a := range pp.byModel {
		if !a.hasQueue {
			continue
		}
		switch {
		case a.kvN > 0:
			a.s.KVUsage, a.s.HasKV = a.kvSum/float64(a.kvN), true
			a.s.KVTokens, a.s.HasKVTokens = a.kvTokens, a.kvSized == a.kvN
		case a.oldN > 0:
			a.s.KVUsage, a.s.HasKV = a.oldKV/float64(a.oldN), true
			a.s.KVTokens, a.s.HasKVTokens = a.oldKVTokens, a.oldSized == a.oldN
		case a.sglN > 0:
			a.s.KVUsage, a.s.HasKV = a.sgl/float64(a.sglN), true
		}
		if a.sglUsedN > 0 && !a.s.HasKVTokens {
			a.s.KVTokens, a.s.HasKVTokens = a.sglUsed, true
		}
		if !a.s.HasKVTokens {
			a.s.KVTokens = 0
		}
		r.ByModel[name] = a.s
	}
	return r
}

// counterValue reads a counter (or an untyped sample, as a page without # TYPE has).
func counterValue(f *dto.MetricFamily, m *dto.Metric) (float64, bool) {
	switch f.GetType() {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue(), true
	case dto.MetricType_UNTYPED:
		return m.GetUntyped().GetValue(), true
	}
	return 0, false
}

// counterFamilies are the counters among the families gauges reads.
var counterFamilies = map[string]bool{VLLMSuccess: true, VLLMPreemptions: true, VLLMPrompt: true, VLLMGeneration: true, SGLangPrompt: true, SGLangGeneration: true}

func wantType(family string) string {
	if counterFamilies[family] {
		return "counter"
	}
	return "gauge"
}

func value(f *dto.MetricFamily, m *dto.Metric) (float64, bool) {
	switch f.GetType() {
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue(), true
	case dto.MetricType_UNTYPED:
		return m.GetUntyped().GetValue(), true
	}
	return 0, false
}

// histogram converts a parsed classic histogram to cumulative buckets ending in +Inf.
func histogram(h *dto.Histogram) scaler.Histogram {
	out := scaler.Histogram{}
	for _, b := range h.GetBucket() {
		if math.IsInf(b.GetUpperBound(), 1) {
			continue
		}
		out.Bounds = append(out.Bounds, b.GetUpperBound())
		out.Counts = append(out.Counts, float64(b.GetCumulativeCount()))
	}
	out.Bounds = append(out.Bounds, math.Inf(1))
	out.Counts = append(out.Counts, float64(h.GetSampleCount()))
	return out
}

// keepFamilies returns the lines of body that belong to a needed family: its samples
// (histograms' _bucket, _sum and _count included) and its # HELP and # TYPE comments. A line
// that cannot start a sample (an HTML page, binary garbage) is returned as bad: the page is not
// the text format at all.
func keepFamilies(body []byte) (kept []byte, bad string) {
	out := make([]byte, 0, 4096)
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i+1], body[i+1:]
		} else {
			body = nil
		}
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' && !nameStart(t[0]) {
			return nil, string(t[:min(len(t), 80)])
		}
		if needed(line) {
			out = append(out, line...)
			if line[len(line)-1] != '\n' {
				out = append(out, '\n')
			}
		}
	}
	return out, ""
}

// nameStart reports whether c can start a metric name (or a quoted UTF-8 name's brace).
func nameStart(c byte) bool {
	return c == '_' || c == ':' || c == '{' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

// needed reports whether a text-format line belongs to a family berth reads. Lookups index the
// map with string(bytes), which does not allocate.
func needed(line []byte) bool {
	if bytes.HasPrefix(line, []byte("# HELP ")) || bytes.HasPrefix(line, []byte("# TYPE ")) {
		rest := line[len("# HELP "):]
		if i := bytes.IndexAny(rest, " \t\n"); i >= 0 {
			rest = rest[:i]
		}
		return neededFamilies[string(rest)]
	}
	if len(line) == 0 || line[0] == '#' {
		return false
	}
	name := line
	if i := bytes.IndexAny(line, "{ \t"); i >= 0 {
		name = line[:i]
	}
	if neededFamilies[string(name)] {
		return true
	}
	for _, suffix := range [][]byte{[]byte("_bucket"), []byte("_sum"), []byte("_count")} {
		if base := bytes.TrimSuffix(name, suffix); len(base) < len(name) && neededFamilies[string(base)] {
			return true
		}
	}
	return false
}
