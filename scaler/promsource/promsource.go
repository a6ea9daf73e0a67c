// Package promsource is the scaler's "prometheus" source: it reads a scale target's replicas'
// vLLM series from a Prometheus server with instant queries, aggregated per pod and restricted
// to the target's pods, and bounds staleness by each series' own sample timestamp (an instant
// query would otherwise return a dead replica's last value for Prometheus's 5-minute lookback).
package promsource

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"k8s.io/utils/clock"

	"github.com/berth-dev/berth/scaler"
)

// ReasonQuery is the error reason of a failed evaluation (a query Prometheus did not answer,
// or answered with an error), as reported to Options.Observe and in
// berth_scaler_scrape_errors_total.
const ReasonQuery = "query"

// Options tunes a Source.
type Options struct {
	// Timeout bounds one evaluation's queries (default 5s).
	Timeout time.Duration
	// FreshFor is how long an evaluation's result is reused (default 2s).
	FreshFor time.Duration
	// MaxAge drops a replica whose newest sample is older than this (default 45s).
	MaxAge time.Duration
	// TTFTWindow is the rate() window of the TTFT quantile (default 1m).
	TTFTWindow time.Duration
	// RootCAs, when set, are the certificate authorities trusted for HTTPS Prometheus servers
	// (a private CA in front of Thanos or a self-hosted Prometheus); nil: the system's.
	RootCAs *x509.CertPool
	// AWSCredentials sign requests to servers whose trigger sets prometheusAwsRegion (SigV4);
	// nil: the AWS SDK's default chain (IRSA, EKS Pod Identity, environment, instance role),
	// loaded when a trigger first needs it.
	AWSCredentials aws.CredentialsProvider
	// Clock is injected for tests.
	Clock clock.PassiveClock
	// Observe, when set, is told about every evaluation: its duration and the error reason
	// ("" on success).
	Observe func(d time.Duration, reason string)
}

// Source queries Prometheus servers (one client per address and credentials).
type Source struct {
	opts    Options
	mu      sync.Mutex
	clients map[scaler.PrometheusConfig]promv1.API
	cache   map[string]cached
}

type cached struct {
	at  time.Time
	obs scaler.Observation
	err error
}

// New returns a Source.
func New(opts Options) *Source {
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.FreshFor <= 0 {
		opts.FreshFor = 2 * time.Second
	}
	if opts.MaxAge <= 0 {
		opts.MaxAge = 45 * time.Second
	}
	if opts.TTFTWindow <= 0 {
		opts.TTFTWindow = time.Minute
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Source{opts: opts, clients: map[scaler.PrometheusConfig]promv1.API{}, cache: map[string]cached{}}
}

// Queries are the PromQL a trigger runs for pods, in the order Observe runs them. Exported for
// documentation and tests.
func Queries(t *scaler.Trigger, namespace string, pods []string, window time.Duration) map[string]string {
	p := t.Prometheus
	sel := fmt.Sprintf(`%s=%q,%s=~%q`, p.NamespaceLabel, namespace, p.PodLabel, podRegex(pods))
	if t.Model != "" {
		sel += fmt.Sprintf(`,model_name=%q`, t.Model)
	}
	by := fmt.Sprintf("sum by (%s) ", p.PodLabel)
	avg := fmt.Sprintf("avg by (%s) ", p.PodLabel)
	q := map[string]string{
		"waiting": fmt.Sprintf(`%s({__name__=~"vllm:num_requests_waiting|sglang:num_queue_reqs",%s})`, by, sel),
		"running": fmt.Sprintf(`%s({__name__=~"vllm:num_requests_running|sglang:num_running_reqs",%s})`, by, sel),
		"kv": fmt.Sprintf(`%s(vllm:kv_cache_usage_perc{%s}) or %s(vllm:gpu_cache_usage_perc{%s}) or %s(sglang:token_usage{%s})`,
			avg, sel, avg, sel, avg, sel),
		"timestamp": fmt.Sprintf(`min by (%s) (timestamp({__name__=~"vllm:num_requests_waiting|sglang:num_queue_reqs",%s}))`, p.PodLabel, sel),
	}
	if t.TargetTTFT > 0 {
		q["ttft"] = fmt.Sprintf(`histogram_quantile(0.95, sum by (le) (rate({__name__=~"vllm:time_to_first_token_seconds_bucket|sglang:time_to_first_token_seconds_bucket",%s}[%s])))`,
			sel, model.Duration(window))
	}
	if t.MaxPreemptions > 0 {
		q["preemptions"] = fmt.Sprintf(`60 * sum(rate(vllm:num_preemptions_total{%s}[%s]))`, sel, model.Duration(window))
	}
	if t.TargetTokens > 0 {
		q["tokens"] = tokensQuery(by, sel, window)
	}
	if t.TargetKVTokens > 0 {
		// cache_config_info carries no model_name: it is matched on the engine of each
		// KV-usage series, and the cache size travels as labels (multiplied in fold).
		info := fmt.Sprintf(`%s=%q,%s=~%q`, p.NamespaceLabel, namespace, p.PodLabel, podRegex(pods))
		on := fmt.Sprintf("%s, %s, engine", p.NamespaceLabel, p.PodLabel)
		// One usage series per engine (a pod scraped twice counts once), one cache size per
		// engine (topk: conflicting info series do not fail the query), and an engine without
		// a cache size comes back marked "None": its pod is unknown, never counted short.
		usage := fmt.Sprintf(`max by (%s) (vllm:kv_cache_usage_perc{%s})`, on, sel)
		q["kv_tokens"] = fmt.Sprintf(`%[1]s * on(%[2]s) group_left(num_gpu_blocks, block_size) topk by (%[2]s) (1, max by (%[2]s, num_gpu_blocks, block_size) (vllm:cache_config_info{%[3]s}))`+
			` or on(%[2]s) label_replace(%[1]s, "num_gpu_blocks", "None", "", "")`, usage, on, info)
		q["kv_tokens_sglang"] = fmt.Sprintf(`%s(sglang:num_used_tokens{%s})`, by, sel)
	}
	if t.TargetQueuedPromptTokens > 0 {
		q["prompt_tokens"] = fmt.Sprintf(`%s(vllm:request_prompt_tokens_sum{%s})`, by, sel)
		q["prompts"] = fmt.Sprintf(`%s(vllm:request_prompt_tokens_count{%s})`, by, sel)
	}
	if t.TargetITL > 0 {
		// vLLM renamed time_per_output_token_seconds; pages of the transition carry both.
		q["itl"] = fmt.Sprintf(`histogram_quantile(0.95, sum by (le) (rate({__name__=~"vllm:inter_token_latency_seconds_bucket|sglang:inter_token_latency_seconds_bucket",%[1]s}[%[2]s])))`+
			` or histogram_quantile(0.95, sum by (le) (rate(vllm:time_per_output_token_seconds_bucket{%[1]s}[%[2]s])))`, sel, model.Duration(window))
	}
	return q
}

// tokensQuery is prompt plus generated tokens per second per pod. rate() drops the metric
// name, so the four counters' rates of one engine would collide in one vector ("same
// labelset"): each is told apart by a label before they are summed.
func tokensQuery(by, sel string, window time.Duration) string {
	var parts []string
	for _, name := range []string{"vllm:prompt_tokens_total", "vllm:generation_tokens_total", "sglang:prompt_tokens_total", "sglang:generation_tokens_total"} {
		parts = append(parts, fmt.Sprintf(`label_replace(rate(%s{%s}[%s]), "berth_counter", %q, "", "")`, name, sel, model.Duration(window), name))
	}
	return by + "(" + strings.Join(parts, " or ") + ")"
}

func podRegex(pods []string) string {
	q := make([]string, len(pods))
	for i, p := range pods {
		q[i] = regexp.QuoteMeta(p)
	}
	sort.Strings(q)
	return strings.Join(q, "|")
}

// Observe evaluates a trigger for a target's pods. Pods that are not ready are starting or
// stalled (scaler.SplitReplicas); ready pods without a series newer than MaxAge count as not
// sampled.
func (s *Source) Observe(ctx context.Context, t *scaler.Trigger, namespace string, pods []scaler.Pod) (scaler.Observation, error) {
	now := s.opts.Clock.Now()
	o := scaler.Observation{TTFTP95: math.NaN(), ITLP95: math.NaN(), PreemptionsPerMinute: math.NaN()}
	split := scaler.SplitReplicas(pods, now, t.StartupTimeout)
	o.Starting, o.Stalled = split.Starting, split.Stalled
	ready := make([]string, 0, len(split.Ready))
	for _, p := range split.Ready {
		ready = append(ready, p.Name)
	}
	o.Ready = len(ready)
	if o.Ready == 0 {
		return o, nil
	}
	queries := Queries(t, namespace, ready, s.opts.TTFTWindow)
	key := fmt.Sprintf("%+v|%s", t.Prometheus, strings.Join(sortedValues(queries), "|"))
	s.mu.Lock()
	if c, ok := s.cache[key]; ok && now.Sub(c.at) < s.opts.FreshFor {
		s.mu.Unlock()
		c.obs.Starting, c.obs.Stalled = o.Starting, o.Stalled
		return c.obs, c.err
	}
	s.mu.Unlock()

	start := s.opts.Clock.Now()
	res, err := s.query(ctx, t.Prometheus, queries, now)
	reason := ""
	if err != nil {
		reason = ReasonQuery
	}
	if s.opts.Observe != nil {
		s.opts.Observe(s.opts.Clock.Since(start), reason)
	}
	if err == nil {
		s.fold(&o, res, model.LabelName(t.Prometheus.PodLabel), now)
	}
	s.mu.Lock()
	s.cache[key] = cached{at: now, obs: o, err: err}
	for k, c := range s.cache {
		if now.Sub(c.at) > time.Minute {
			delete(s.cache, k)
		}
	}
	s.mu.Unlock()
	return o, err
}

func sortedValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// fold adds the per-pod results of fresh pods to o.
func (s *Source) fold(o *scaler.Observation, res map[string]model.Vector, podLabel model.LabelName, now time.Time) {
	perPod := func(name string) map[string]float64 {
		out := map[string]float64{}
		for _, smp := range res[name] {
			out[string(smp.Metric[podLabel])] = float64(smp.Value)
		}
		return out
	}
	waiting, running, kv, tokens := perPod("waiting"), perPod("running"), perPod("kv"), perPod("tokens")
	promptSum, prompts := perPod("prompt_tokens"), perPod("prompts")
	kvTokens := kvTokensPerPod(res["kv_tokens"], res["kv_tokens_sglang"], podLabel)
	for pod, ts := range perPod("timestamp") {
		at := time.Unix(0, int64(ts*1e9))
		age := now.Sub(at)
		w, ok := waiting[pod]
		if age > s.opts.MaxAge || !ok || math.IsNaN(w) || w < 0 {
			continue
		}
		o.OldestSample = max(o.OldestSample, age)
		o.Sampled++
		o.Waiting += w
		o.Running += max(0, running[pod])
		if u, ok := kv[pod]; ok && !math.IsNaN(u) {
			o.KVSampled++
			o.KVUsage += u
		}
		if kt, ok := kvTokens[pod]; ok {
			o.KVTokensSampled++
			o.KVTokens += kt
		}
		if q, ok := (scaler.Sample{Waiting: w, PromptTokens: promptSum[pod], Prompts: prompts[pod]}).QueuedPromptTokens(); ok && !math.IsNaN(q) {
			o.PromptSampled++
			o.QueuedPromptTokens += q
		}
		if r, ok := tokens[pod]; ok && !math.IsNaN(r) && r >= 0 {
			o.TokensSampled++
			o.TokensPerSecond += r
		}
	}
	o.TTFTP95, o.ITLP95 = quantile(res["ttft"]), quantile(res["itl"])
	if v := res["preemptions"]; len(v) == 1 && !math.IsNaN(float64(v[0].Value)) {
		o.PreemptionsPerMinute = float64(v[0].Value)
	}
}

// kvTokensPerPod is each pod's KV-cache tokens in use: vLLM's usage per engine times that
// engine's num_gpu_blocks × block_size (labels the query carried over from cache_config_info),
// or SGLang's used tokens. A pod with an engine whose cache size is not a number is unknown.
func kvTokensPerPod(vllm, sglang model.Vector, podLabel model.LabelName) map[string]float64 {
	out := map[string]float64{}
	unknown := map[string]bool{}
	for _, smp := range vllm {
		pod := string(smp.Metric[podLabel])
		blocks, errB := strconv.ParseFloat(string(smp.Metric["num_gpu_blocks"]), 64)
		size, errS := strconv.ParseFloat(string(smp.Metric["block_size"]), 64)
		v := float64(smp.Value)
		if errB != nil || errS != nil || blocks <= 0 || size <= 0 || math.IsNaN(v) || v < 0 {
			unknown[pod] = true
			continue
		}
		out[pod] += v * blocks * size
	}
	for _, smp := range sglang {
		pod := string(smp.Metric[podLabel])
		if _, ok := out[pod]; !ok && !unknown[pod] && !math.IsNaN(float64(smp.Value)) {
			out[pod] = float64(smp.Value)
		}
	}
	for pod := range unknown {
		delete(out, pod)
	}
	return out
}

// query runs the queries in parallel; any failure fails the evaluation.
func (s *Source) query(ctx context.Context, cfg scaler.PrometheusConfig, queries map[string]string, at time.Time) (map[string]model.Vector, error) {
	client, err := s.client(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := map[string]model.Vector{}
	var firstErr error
	for name, q := range queries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, _, err := client.Query(ctx, q, at)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("prometheus %s: query %s: %w", cfg.Address, name, err)
				}
				return
			}
			vec, ok := v.(model.Vector)
			if !ok {
				if firstErr == nil {
					firstErr = fmt.Errorf("prometheus %s: query %s returned a %s, want a vector", cfg.Address, name, v.Type())
				}
				return
			}
			out[name] = vec
		}()
	}
	wg.Wait()
	return out, firstErr
}

func (s *Source) client(cfg scaler.PrometheusConfig) (promv1.API, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.clients[cfg]; ok {
		return c, nil
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	switch {
	case cfg.InsecureSkipVerify:
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the user asked for it (prometheusUnsafeSsl)
	case s.opts.RootCAs != nil:
		tr.TLSClientConfig = &tls.Config{RootCAs: s.opts.RootCAs, MinVersion: tls.VersionTLS12}
	}
	var rt http.RoundTripper = tr
	switch {
	case cfg.AWSRegion != "":
		creds := s.opts.AWSCredentials
		if creds == nil {
			var err error
			if creds, err = defaultAWSCredentials(); err != nil {
				return nil, err
			}
		}
		rt = sigv4RoundTripper{next: tr, creds: creds, region: cfg.AWSRegion, signer: v4.NewSigner(), clock: s.opts.Clock}
	case cfg.BearerToken != "" || cfg.Username != "":
		rt = authRoundTripper{next: tr, cfg: cfg}
	}
	c, err := api.NewClient(api.Config{Address: cfg.Address, RoundTripper: rt})
	if err != nil {
		return nil, fmt.Errorf("prometheus client for %s: %w", cfg.Address, err)
	}
	s.clients[cfg] = promv1.NewAPI(c)
	return s.clients[cfg], nil
}

type authRoundTripper struct {
	next http.RoundTripper
	cfg  scaler.PrometheusConfig
}

func (a authRoundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if a.cfg.BearerToken != "" {
		r.Header.Set("Authorization", "Bearer "+a.cfg.BearerToken)
	} else {
		r.SetBasicAuth(a.cfg.Username, a.cfg.Password)
	}
	return a.next.RoundTrip(r)
}

// ErrNoDemandSeries is a demandQuery that returned no series. berth does not read "no series"
// as "no demand": a router that is down or no longer scraped looks the same. Write
// `(<query>) or vector(0)` where no series really means nothing waits.
var ErrNoDemandSeries = errors.New("demandQuery returned no series")

// Demand runs the trigger's demandQuery: the requests waiting in front of the replicas (a
// vector is summed, a scalar taken as is). Results are reused for FreshFor. NaN, infinite or
// negative values and empty results are errors, never a zero.
func (s *Source) Demand(ctx context.Context, t *scaler.Trigger) (float64, error) {
	now := s.opts.Clock.Now()
	key := fmt.Sprintf("demand|%+v|%s", t.Prometheus, t.DemandQuery)
	s.mu.Lock()
	if c, ok := s.cache[key]; ok && now.Sub(c.at) < s.opts.FreshFor {
		s.mu.Unlock()
		return c.obs.Upstream, c.err
	}
	s.mu.Unlock()
	start := s.opts.Clock.Now()
	v, err := s.demand(ctx, t, now)
	if s.opts.Observe != nil {
		reason := ""
		if err != nil {
			reason = ReasonQuery
		}
		s.opts.Observe(s.opts.Clock.Since(start), reason)
	}
	s.mu.Lock()
	s.cache[key] = cached{at: now, obs: scaler.Observation{Upstream: v}, err: err}
	s.mu.Unlock()
	return v, err
}

func (s *Source) demand(ctx context.Context, t *scaler.Trigger, at time.Time) (float64, error) {
	client, err := s.client(t.Prometheus)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	res, _, err := client.Query(ctx, t.DemandQuery, at)
	if err != nil {
		return 0, fmt.Errorf("prometheus %s: demandQuery %s: %w", t.Prometheus.Address, t.DemandQuery, err)
	}
	var sum float64
	switch v := res.(type) {
	case model.Vector:
		if len(v) == 0 {
			return 0, fmt.Errorf("prometheus %s: %s: %w", t.Prometheus.Address, t.DemandQuery, ErrNoDemandSeries)
		}
		for _, smp := range v {
			sum += float64(smp.Value)
		}
	case *model.Scalar:
		sum = float64(v.Value)
	default:
		return 0, fmt.Errorf("prometheus %s: demandQuery %s returned a %s, want a vector or a scalar", t.Prometheus.Address, t.DemandQuery, res.Type())
	}
	if math.IsNaN(sum) || math.IsInf(sum, 0) || sum < 0 {
		return 0, fmt.Errorf("prometheus %s: demandQuery %s returned %v, want a count of waiting requests", t.Prometheus.Address, t.DemandQuery, sum)
	}
	return sum, nil
}

// quantile is a histogram_quantile result: NaN when Prometheus had no observations (or no
// single value).
func quantile(v model.Vector) float64 {
	if len(v) != 1 || math.IsInf(float64(v[0].Value), 0) {
		return math.NaN()
	}
	return float64(v[0].Value)
}
