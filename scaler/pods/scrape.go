package pods

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/berth-dev/berth/scaler"
)

// maxPageBytes bounds what one scrape may read; vLLM's page is a few tens of KiB.
const maxPageBytes = 8 << 20

// Options tunes a Scraper.
type Options struct {
	// Timeout bounds one scrape (default 2s).
	Timeout time.Duration
	// FreshFor is how long a scrape's outcome (page or error) is reused: one KEDA poll calls
	// GetMetrics and IsActive back to back, and several ScaledObjects may select the same pods
	// (default 2s).
	FreshFor time.Duration
	// MaxAge is the staleness bound: a replica whose scrape fails keeps counting with its last
	// page until that page is this old (default 45s).
	MaxAge time.Duration
	// TTFTWindow is the window the p95 time to first token is computed over (default 60s).
	TTFTWindow time.Duration
	// Parallel bounds concurrent scrapes (default 32).
	Parallel int
	// Clock is injected for tests (default the real clock).
	Clock clock.PassiveClock
	// Client makes the requests (default a client with keep-alives).
	Client *http.Client
	// Observe, when set, is told about every scrape: its duration and the error reason ("" on
	// success).
	Observe func(d time.Duration, reason string)
}

func (o *Options) defaults() {
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	if o.FreshFor <= 0 {
		o.FreshFor = 2 * time.Second
	}
	if o.MaxAge <= 0 {
		o.MaxAge = 45 * time.Second
	}
	if o.TTFTWindow <= 0 {
		o.TTFTWindow = time.Minute
	}
	if o.Parallel <= 0 {
		o.Parallel = 32
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Client == nil {
		o.Client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2, IdleConnTimeout: 90 * time.Second,
			DialContext: (&net.Dialer{Timeout: o.Timeout}).DialContext}}
	}
}

// Scraper scrapes replicas and remembers what each last said. Until Run starts its background
// loop it scrapes when asked (reusing an outcome for FreshFor); once running, answers come from
// memory and the loop keeps every endpoint someone asked about fresh at its cadence.
type Scraper struct {
	opts Options
	mu   sync.Mutex
	eps  map[string]*endpoint
	// background is set while Run's loop scrapes endpoints on their cadence.
	background bool
	sem        chan struct{}
}

// endpoint is one metrics URL's memory: the pages within the TTFT window (newest last), the
// last attempt and its error, and the scrape in flight, if any.
type endpoint struct {
	// owner is the UID of the pod the memory is of ("" when unknown). Pod IPs are reused (at
	// once on some networks; the AWS VPC CNI after a 30 s cool-down): asked about another pod
	// on the same URL, the endpoint starts afresh, so a replica that exports nothing never
	// counts as sampled on what the IP's previous pod said within MaxAge.
	owner string
	pages []Reading
	// first is when its first page was taken (pages are trimmed to the window; this is not).
	first       time.Time
	lastAttempt time.Time
	lastErr     error
	inflight    chan struct{}
	// every is how often the background loop scrapes it: the shortest cadence asked for
	// within the last wantedFor; wantedAt is when it was last asked for.
	every    time.Duration
	wantedAt time.Time
	// memo holds, per model, what was derived from the pages up to the one taken at memoAt.
	memo   map[string]derivedSample
	memoAt time.Time
}

// Cadence bounds: the background loop reads an endpoint every third of its ScaledObject's
// pollingInterval, but not more often than MinInterval nor less often than MaxInterval.
const (
	MinInterval = time.Second
	MaxInterval = 10 * time.Second
)

// Cadence is how often the replicas of a ScaledObject polled every pollingInterval are read.
func Cadence(pollingInterval time.Duration) time.Duration {
	if pollingInterval <= 0 {
		return MaxInterval
	}
	return min(MaxInterval, max(MinInterval, pollingInterval/3))
}

// New returns a Scraper.
func New(opts Options) *Scraper {
	opts.defaults()
	return &Scraper{opts: opts, eps: map[string]*endpoint{}, sem: make(chan struct{}, opts.Parallel)}
}

// Run scrapes in the background until ctx ends: every tick it starts a scrape of each endpoint
// asked about recently whose cadence is due, at most Parallel at once over all endpoints, so
// a slow or hung replica holds one slot for up to Timeout and never an answer. Endpoints not
// asked about for a while (their pods went away, their ScaledObject was deleted) stop being
// scraped.
func (s *Scraper) Run(ctx context.Context, tick time.Duration) {
	s.mu.Lock()
	s.background = true
	s.mu.Unlock()
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		s.scrapeDue(ctx)
		select {
		case <-ctx.Done():
			s.mu.Lock()
			s.background = false
			s.mu.Unlock()
			return
		case <-t.C:
		}
	}
}

// wantedFor is how long an endpoint is kept fresh after the last question about it.
const wantedFor = 2 * time.Minute

// scrapeDue starts the scrapes that are due, without waiting for them.
func (s *Scraper) scrapeDue(ctx context.Context) {
	now := s.opts.Clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for url, ep := range s.eps {
		if ep.inflight != nil || ep.wantedAt.IsZero() || now.Sub(ep.wantedAt) > wantedFor {
			continue
		}
		if !ep.lastAttempt.IsZero() && now.Sub(ep.lastAttempt) < ep.every {
			continue
		}
		select {
		case s.sem <- struct{}{}:
		default:
			return // every slot busy: the rest wait for the next tick
		}
		done := make(chan struct{})
		ep.inflight = done
		go func() {
			defer func() { <-s.sem }()
			s.finish(ep, done, s.scrapeNow(ctx, url))
		}()
	}
}

type scrapeOutcome struct {
	page Reading
	err  error
}

func (s *Scraper) scrapeNow(ctx context.Context, url string) scrapeOutcome {
	page, err := s.scrape(ctx, url)
	return scrapeOutcome{page, err}
}

// finish records a scrape's outcome on its endpoint and wakes those waiting for it.
func (s *Scraper) finish(ep *endpoint, done chan struct{}, o scrapeOutcome) {
	s.mu.Lock()
	ep.inflight = nil
	ep.lastAttempt = s.opts.Clock.Now()
	ep.lastErr = o.err
	if o.err == nil {
		ep.pages = trim(append(ep.pages, o.page), o.page.At.Add(-s.opts.TTFTWindow))
		if ep.first.IsZero() {
			ep.first = o.page.At
		}
	}
	s.mu.Unlock()
	close(done)
}

// Result is what one replica contributed to an observation.
type Result struct {
	Pod string
	// Sample is the replica's latest usable sample; Fresh says it is within MaxAge.
	Sample scaler.Sample
	Fresh  bool
	// Err is the latest scrape's error, if it failed (the sample may still be fresh).
	Err error
	// TTFT and ITL are the histograms of first tokens and of inter-token latencies within the
	// window (empty when unknown).
	TTFT, ITL scaler.Histogram
	// PreemptionsPerMinute is the replica's preemption rate over the window; Windowed says the
	// replica has a window yet (two pages).
	PreemptionsPerMinute float64
	Windowed             bool
	// TokensPerSecond is the replica's prompt plus generated tokens per second over the window
	// (when Windowed).
	TokensPerSecond float64
	// Window is the replica's window for the SLO signal's capacity model; nil when the replica
	// has no window yet or its pages do not count finished requests.
	Window *scaler.ReplicaWindow
}

// Observe reads the ready pods of a scale target and folds their samples into an observation;
// every is the cadence to keep them fresh at (Cadence of the ScaledObject's pollingInterval).
// With Run's loop going it answers from memory — waiting only for an endpoint never read
// before — and otherwise scrapes in parallel, reusing recent outcomes. Pods not ready (or
// without an IP yet) are starting or stalled (scaler.SplitReplicas).
func (s *Scraper) Observe(ctx context.Context, t *scaler.Trigger, pods []scaler.Pod, every time.Duration) (scaler.Observation, []Result) {
	now := s.opts.Clock.Now()
	o := scaler.Observation{TTFTP95: math.NaN(), ITLP95: math.NaN(), PreemptionsPerMinute: math.NaN(), Arrivals: math.NaN()}
	withIP := make([]scaler.Pod, len(pods))
	for i, p := range pods {
		p.Ready = p.Ready && p.IP != ""
		withIP[i] = p
	}
	split := scaler.SplitReplicas(withIP, now, t.StartupTimeout)
	ready := split.Ready
	o.Starting, o.Stalled = split.Starting, split.Stalled
	o.Startup = scaler.RecentStartup(ready, now)
	o.Ready = len(ready)
	results := make([]Result, len(ready))
	var wg sync.WaitGroup
	for i, p := range ready {
		if s.inMemory(t, p) { // answered from memory: no goroutine, no wait
			results[i] = s.replica(ctx, t, p, every)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The scraper's one limit, shared with the background loop and every other call:
			// Parallel scrapes at once over the whole process, first reads included.
			select {
			case s.sem <- struct{}{}:
			case <-ctx.Done():
				results[i] = Result{Pod: p.Name, Err: ctx.Err()}
				return
			}
			defer func() { <-s.sem }()
			results[i] = s.replica(ctx, t, p, every)
		}()
	}
	wg.Wait()
	var ttft, itl scaler.Histogram
	for _, r := range results {
		if !r.Fresh {
			continue
		}
		o.Sampled++
		o.Waiting += r.Sample.Waiting
		o.Running += r.Sample.Running
		if r.Sample.HasKV {
			o.KVSampled++
			o.KVUsage += r.Sample.KVUsage
		}
		if r.Sample.HasKVTokens {
			o.KVTokensSampled++
			o.KVTokens += r.Sample.KVTokens
		}
		if q, ok := r.Sample.QueuedPromptTokens(); ok {
			o.PromptSampled++
			o.QueuedPromptTokens += q
		}
		if t.TargetTTFT > 0 {
			ttft.Add(r.TTFT)
		}
		if t.TargetITL > 0 {
			itl.Add(r.ITL)
		}
		if w := r.Window; w != nil && t.SLO.TTFT > 0 && w.Span > 0 {
			o.Windows = append(o.Windows, *w)
		}
		if r.Windowed {
			if math.IsNaN(o.PreemptionsPerMinute) {
				o.PreemptionsPerMinute = 0
			}
			o.PreemptionsPerMinute += r.PreemptionsPerMinute
			o.TokensPerSecond += r.TokensPerSecond
			o.TokensSampled++
		}
		o.OldestSample = max(o.OldestSample, now.Sub(r.Sample.At))
	}
	o.TTFTP95 = ttft.Quantile(0.95)
	o.ITLP95 = itl.Quantile(0.95)
	if len(o.Windows) > 0 {
		o.Arrivals, o.ArrivalsSampled = scaler.WindowArrivals(o.Windows)
	}
	return o, results
}

// replica returns one pod's result, scraping it unless a recent outcome can be reused.
func (s *Scraper) replica(ctx context.Context, t *scaler.Trigger, p scaler.Pod, every time.Duration) Result {
	url := endpointURL(t, p)
	pages, err := s.pages(ctx, url, p.UID, every)
	res := Result{Pod: p.Name, Err: err}
	if len(pages) == 0 {
		return res
	}
	latest := pages[len(pages)-1]
	since := joinedAt(p, s.firstPage(url), latest.At, s.opts.TTFTWindow, t.StartupTimeout)
	d, ok := s.derived(url, t.Model, latest.At)
	if !ok || !d.since.Equal(since) {
		d = derive(pages, t.Model, s.opts.TTFTWindow, since)
		s.remember(url, t.Model, latest.At, d)
	}
	if d.err != nil {
		res.Err = d.err
		return res
	}
	res.Sample, res.TTFT, res.ITL = d.sample, d.ttft, d.itl
	res.PreemptionsPerMinute, res.Windowed, res.TokensPerSecond, res.Window = d.preemptPerMin, d.windowed, d.tokensPerSec, d.window
	res.Fresh = s.opts.Clock.Since(latest.At) <= s.opts.MaxAge
	return res
}

// derivedSample is what one model's series of an endpoint's pages say: the latest sample and
// the latency histograms within the window. It changes only with a new page, so it is kept
// until one arrives: answering from memory costs a lookup per replica, not a re-derivation.
type derivedSample struct {
	sample        scaler.Sample
	ttft, itl     scaler.Histogram
	preemptPerMin float64
	tokensPerSec  float64
	windowed      bool
	window        *scaler.ReplicaWindow
	// since is the zero baseline the window starts from (joinedAt), zero when none.
	since time.Time
	err   error
}

// derive derives a model's sample and window from an endpoint's pages; since, when not zero,
// is when the replica's counters were at zero inside the window (joinedAt): the window starts
// there rather than at a page.
func derive(pages []Reading, model string, window time.Duration, since time.Time) derivedSample {
	latest := pages[len(pages)-1]
	sample, err := latest.Sample(model)
	if err != nil {
		return derivedSample{err: err}
	}
	d := derivedSample{sample: sample, since: since}
	old, ok := scaler.Sample{At: since, HasFinished: sample.HasFinished}, !since.IsZero()
	if !ok {
		if base, found := baseline(pages, latest.At.Add(-window)); found {
			old, err = base.Sample(model)
			old.At, ok = base.At, err == nil
		}
	}
	if !ok {
		return d
	}
	d.ttft, d.itl = sample.TTFT.Sub(old.TTFT), sample.ITL.Sub(old.ITL)
	if span := latest.At.Sub(old.At); span > 0 {
		d.preemptPerMin = counterDelta(sample.Preemptions, old.Preemptions) / span.Seconds() * 60
		d.tokensPerSec = counterDelta(sample.Tokens, old.Tokens) / span.Seconds()
		d.windowed = true
		d.window = replicaWindow(sample, old, span, d.ttft, d.itl)
		if d.window != nil {
			d.window.Recent, d.window.RecentArrived = recentInterval(pages, model, sample, old)
		}
		if d.window != nil && !since.IsZero() {
			d.window.Joined = true
			// Held through its window: from its first page on. The zero baseline had no chance
			// to queue, and read as "no queue throughout" it hid a joining replica at its limit
			// from the capacity model (16 % more GPU-hours on a day without bursts).
			if first, err := pages[0].Sample(model); err == nil {
				d.window.Waiting = min(sample.Waiting, first.Waiting)
			}
		}
	}
	return d
}

// joinedAt is when replica p's counters were at zero inside the window that ends at latest:
// its Ready time, when its containers all started within startupTimeout before it (a first
// start or a restart: the process and its counters are new — a readiness that flapped later
// has counters from before), the scraper's first page of it (first) came after it — so no
// page was missed — and it became ready within the window. Zero when that cannot be said. A replica gets requests only once ready,
// so its window from then holds every request it has had; a window from its first page missed
// those before the first scrape, and a fleet that took on replicas in a burst measured less
// demand than came.
func joinedAt(p scaler.Pod, first, latest time.Time, window, startupTimeout time.Duration) time.Time {
	if startupTimeout <= 0 {
		startupTimeout = scaler.DefaultStartupTimeout
	}
	switch {
	case p.ReadyAt.IsZero(), p.StartedAt.IsZero(), first.IsZero(), first.Before(p.ReadyAt), !latest.After(p.ReadyAt):
		return time.Time{}
	case latest.Sub(p.ReadyAt) > window, p.ReadyAt.Before(p.StartedAt), p.ReadyAt.Sub(p.StartedAt) > startupTimeout:
		return time.Time{}
	}
	return p.ReadyAt
}

// firstPage is when the endpoint's first page was taken (zero before one).
func (s *Scraper) firstPage(url string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ep := s.eps[url]; ep != nil {
		return ep.first
	}
	return time.Time{}
}

// replicaWindow is the window from old to sample for the SLO signal; nil when the pages do
// not count finished requests.
func replicaWindow(sample, old scaler.Sample, span time.Duration, ttft, itl scaler.Histogram) *scaler.ReplicaWindow {
	if !sample.HasFinished || !old.HasFinished {
		return nil
	}
	return &scaler.ReplicaWindow{Span: span, Finished: counterDelta(sample.Finished, old.Finished), TTFT: ttft, ITL: itl,
		TPOT: sample.TPOT.Sub(old.TPOT), Waiting: min(sample.Waiting, old.Waiting), End: sample.At, Arrived: arrived(sample, old)}
}

// arrived is the requests that arrived at a replica from old to sample: those finished and
// aborted, and the growth of those running and waiting.
func arrived(sample, old scaler.Sample) float64 {
	return max(0, counterDelta(sample.Finished, old.Finished)+counterDelta(sample.Aborted, old.Aborted)+sample.Waiting+sample.Running-old.Waiting-old.Running)
}

// recentInterval is the last scaler.RecentWindow of the window from old to sample — from the
// newest page at or before its start, or old where no page inside the window is that old (a
// replica that joined 8 s before its first page counts from its Ready time, not from that
// page) — and the requests that arrived in it (ReplicaWindow.Recent).
func recentInterval(pages []Reading, model string, sample, old scaler.Sample) (time.Duration, float64) {
	prev := old
	from := sample.At.Add(-scaler.RecentWindow)
	if base, found := baseline(pages, from); found && base.At.After(old.At) && !base.At.After(from) {
		if p, err := base.Sample(model); err == nil && p.HasFinished {
			p.At = base.At
			prev = p
		}
	}
	return sample.At.Sub(prev.At), arrived(sample, prev)
}

// counterDelta is a counter's growth from old to now; after a reset (it went down) the
// counter counts from zero, as Prometheus's rate() takes it.
func counterDelta(now, old float64) float64 {
	if now < old {
		return now
	}
	return now - old
}

// derived returns what was derived for model from the endpoint's pages up to the one taken at.
func (s *Scraper) derived(url, model string, at time.Time) (derivedSample, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ep := s.eps[url]
	if ep == nil || !ep.memoAt.Equal(at) {
		return derivedSample{}, false
	}
	d, ok := ep.memo[model]
	return d, ok
}

func (s *Scraper) remember(url, model string, at time.Time, d derivedSample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ep := s.eps[url]
	if ep == nil {
		return
	}
	if !ep.memoAt.Equal(at) {
		ep.memo, ep.memoAt = map[string]derivedSample{}, at
	}
	ep.memo[model] = d
}

// baseline is the newest page at or before from, or else the oldest page that is not the
// newest: the start of the TTFT window.
func baseline(pages []Reading, from time.Time) (Reading, bool) {
	if len(pages) < 2 {
		return Reading{}, false
	}
	best := pages[0]
	for _, p := range pages[:len(pages)-1] {
		if !p.At.After(from) {
			best = p
		}
	}
	return best, true
}

// inMemory reports whether p's endpoint is answered from memory: the background loop runs and
// has read it before.
func (s *Scraper) inMemory(t *scaler.Trigger, p scaler.Pod) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ep := s.eps[endpointURL(t, p)]
	return s.background && ep != nil && !ep.lastAttempt.IsZero() && !ep.ownedByAnother(p.UID)
}

func endpointURL(t *scaler.Trigger, p scaler.Pod) string {
	return "http://" + net.JoinHostPort(p.IP, strconv.Itoa(t.MetricsPort)) + t.MetricsPath
}

// ownedByAnother reports whether the endpoint's memory is of a pod other than uid (both known).
func (ep *endpoint) ownedByAnother(uid string) bool {
	return uid != "" && ep.owner != "" && ep.owner != uid
}

// pages returns the pages within the window of the endpoint at url as pod owner serves it. In
// the background it answers from memory once the endpoint has been attempted; otherwise it
// scrapes first unless the last attempt is within FreshFor. Concurrent callers share one
// scrape. Memory of another pod on url is dropped first: a scrape in flight for it finishes
// into the dropped memory.
func (s *Scraper) pages(ctx context.Context, url, owner string, every time.Duration) ([]Reading, error) {
	for {
		s.mu.Lock()
		ep := s.eps[url]
		if ep == nil || ep.ownedByAnother(owner) {
			ep = &endpoint{}
			s.eps[url] = ep
		}
		if owner != "" {
			ep.owner = owner
		}
		now := s.opts.Clock.Now()
		if every <= 0 {
			every = MaxInterval
		}
		if ep.wantedAt.IsZero() || now.Sub(ep.wantedAt) > wantedFor || every < ep.every {
			ep.every = every
		}
		ep.wantedAt = now
		if !ep.lastAttempt.IsZero() && (s.background || now.Sub(ep.lastAttempt) < s.opts.FreshFor) {
			pages, err := ep.pages, ep.lastErr
			s.mu.Unlock()
			return pages, err
		}
		if wait := ep.inflight; wait != nil {
			s.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		ep.inflight = done
		s.mu.Unlock()

		o := s.scrapeNow(ctx, url)
		s.finish(ep, done, o)
		s.mu.Lock()
		pages := ep.pages
		s.mu.Unlock()
		return pages, o.err
	}
}

// trim drops pages older than from, keeping the newest one at or before it as the window's
// baseline.
func trim(pages []Reading, from time.Time) []Reading {
	keep := 0
	for i, p := range pages {
		if !p.At.After(from) {
			keep = i
		}
	}
	return append([]Reading(nil), pages[keep:]...)
}

// Forget drops endpoints not attempted for a while (pods that went away).
func (s *Scraper) Forget(olderThan time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opts.Clock.Now()
	for url, ep := range s.eps {
		if ep.inflight == nil && now.Sub(ep.lastAttempt) > olderThan {
			delete(s.eps, url)
		}
	}
}

// scrape reads and parses one page within the timeout.
func (s *Scraper) scrape(ctx context.Context, url string) (Reading, error) {
	start := s.opts.Clock.Now()
	page, reason, err := s.fetch(ctx, url)
	if s.opts.Observe != nil {
		s.opts.Observe(s.opts.Clock.Since(start), reason)
	}
	if err != nil {
		return Reading{}, fmt.Errorf("scraping %s: %w", url, err)
	}
	return page, nil
}

// Error reasons reported to Options.Observe and in berth_scaler_scrape_errors_total.
const (
	ReasonTimeout    = "timeout"
	ReasonConnection = "connection"
	ReasonHTTPStatus = "http_status"
	ReasonParse      = "parse"
	ReasonNoSeries   = "no_series"
)

// Reasons are every error reason a scrape reports.
var Reasons = []string{ReasonTimeout, ReasonConnection, ReasonHTTPStatus, ReasonParse, ReasonNoSeries}

func (s *Scraper) fetch(ctx context.Context, url string) (Reading, string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Reading{}, ReasonConnection, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := s.opts.Client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return Reading{}, ReasonTimeout, fmt.Errorf("no answer within %s: %w", s.opts.Timeout, err)
		}
		return Reading{}, ReasonConnection, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return Reading{}, ReasonHTTPStatus, fmt.Errorf("HTTP %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPageBytes+1))
	if err != nil {
		if ctx.Err() != nil {
			return Reading{}, ReasonTimeout, fmt.Errorf("reading the page within %s: %w", s.opts.Timeout, err)
		}
		return Reading{}, ReasonConnection, fmt.Errorf("reading the page: %w", err)
	}
	if len(body) > maxPageBytes {
		return Reading{}, ReasonParse, fmt.Errorf("page larger than %d bytes", maxPageBytes)
	}
	page, err := ParsePage(body, s.opts.Clock.Now())
	if err != nil {
		return Reading{}, ReasonParse, err
	}
	if len(page.ByModel) == 0 {
		return Reading{}, ReasonNoSeries, fmt.Errorf("%w: the page has neither %s nor %s (is metricsPort/metricsPath the inference server's?)", ErrNoSeries, VLLMWaiting, SGLangWaiting)
	}
	return page, "", nil
}
