package simulate

import (
	"fmt"
	"math"
	"time"

	"github.com/berth-dev/berth/internal/vllmsim"
	"github.com/berth-dev/berth/scaler"
)

// Autoscaler sizes the fleet. Step is called every tick with what the cluster shows; it
// returns the replica count to set, or false to leave the Deployment as it is.
type Autoscaler interface {
	// Name is a short name for tables and plots.
	Name() string
	// Describe says what the policy is, for the report.
	Describe() string
	// Step decides at now.
	Step(now time.Duration, v View) (int, bool)
}

// View is what an autoscaler sees of the fleet at one step.
type View struct {
	// Spec is the Deployment's replicas.
	Spec int
	pods []*pod
	now  time.Duration
}

func (s *fleetSim) view() View { return View{Spec: s.spec, pods: s.pods, now: s.now} }

// due reports whether a controller running every period acts at now.
func due(now, period time.Duration) bool { return period <= 0 || now%period == 0 }

// latestAt is a pod's newest reading at or before at; false for none.
func (p *pod) latestAt(at time.Duration) (reading, bool) {
	for i := len(p.history) - 1; i >= 0; i-- {
		if p.history[i].at <= at {
			return p.history[i], true
		}
	}
	return reading{}, false
}

// window is a pod's newest reading and its baseline one window earlier, as berth's scraper
// takes them (scaler/pods: the newest page at or before the window's start, else the oldest
// that is not the newest; a replica that became ready inside the window from its counters at
// zero then, joined true); false without a window.
func (p *pod) window(d time.Duration) (latest, base reading, joined, ok bool) {
	if len(p.history) == 0 {
		return reading{}, reading{}, false, false
	}
	latest = p.history[len(p.history)-1]
	if p.replica != nil && latest.at > p.ready && latest.at-p.ready <= d && p.history[0].at >= p.ready {
		return latest, reading{at: p.ready}, true, true
	}
	if len(p.history) < 2 {
		return reading{}, reading{}, false, false
	}
	base = p.history[0]
	for _, r := range p.history[:len(p.history)-1] {
		if r.at <= latest.at-d {
			base = r
		}
	}
	return latest, base, false, true
}

// arrivedBetween is the requests that arrived from reading old to l: those finished and
// aborted, and the growth of those running and waiting.
func arrivedBetween(old, l reading) float64 {
	return l.finished - old.finished + l.aborted - old.aborted + float64(l.waiting+l.running-old.waiting-old.running)
}

// recentBase is the reading a window from base to latest starts its last scaler.RecentWindow
// at, as berth's scraper takes it: the newest reading inside the window at or before then,
// else base.
func recentBase(history []reading, base, latest reading) reading {
	recent := base
	for _, r := range history {
		if r.at > base.at && r.at < latest.at && r.at <= latest.at-scaler.RecentWindow {
			recent = r
		}
	}
	return recent
}

// Berth is berth's scaler: scaler.Policy.Decide on what the replicas report, through KEDA's
// external trigger and the HPA with the ScaledObject's behavior.
type Berth struct {
	// Metadata is the trigger's metadata, as in the ScaledObject.
	Metadata map[string]string
	// Behavior is the ScaledObject's HPA behavior; SyncPeriod the HPA's.
	Behavior   HPABehavior
	SyncPeriod time.Duration
	// TTFTWindow is the scraper's window for latencies and rates (one minute).
	TTFTWindow time.Duration
	// Forgets are the times, in order, the scaler restarts without a model store: its fleet
	// model is lost and learned again.
	Forgets []time.Duration

	trigger *scaler.Trigger
	policy  scaler.Policy
	hpa     hpa
	label   string

	// model is what the scaler has learned of the fleet (its SLO signal's capacity model);
	// forgot how many of Forgets have passed.
	model  scaler.FleetModel
	forgot int
	// seats is the warm seats the last decision asked for (the trigger's warmSeats:
	// scaler.Decision.WarmSeats).
	seats int
}

// Seats implements SeatKeeper.
func (b *Berth) Seats() int { return b.seats }

// BerthTrigger is the trigger of examples/vllm-scaledobject.yaml, what docs/scaler.md tells
// users to start from.
var BerthTrigger = map[string]string{
	"targetConcurrency": "192", "targetQueueDepth": "4", "targetKVCacheUsage": "0.8",
	"targetTTFTSeconds": "1", "startupTimeoutSeconds": "900",
}

// BerthBehavior is the HPA behavior of examples/vllm-scaledobject.yaml: up at once and exactly
// (tolerance 0, the default rate limits), down after 300 s one pod a minute.
var BerthBehavior = HPABehavior{
	Up:   HPARules{Policies: DefaultHPABehavior.Up.Policies},
	Down: HPARules{Window: 300 * time.Second, Policies: []HPAPolicy{{Value: 1, Period: time.Minute}}},
}

// NewBerth returns berth's scaler with the trigger metadata md (validated as the scaler does).
func NewBerth(name string, md map[string]string, b HPABehavior, sync time.Duration, minR, maxR int) (*Berth, error) {
	t, err := scaler.ParseTrigger(md)
	if err != nil {
		return nil, fmt.Errorf("berth trigger: %w", err)
	}
	return &Berth{Metadata: md, Behavior: b, SyncPeriod: sync, TTFTWindow: time.Minute, trigger: t,
		policy: scaler.DefaultPolicy, hpa: hpa{behavior: b, min: minR, max: maxR}, label: name}, nil
}

// Name implements Autoscaler.
func (b *Berth) Name() string { return b.label }

// Describe implements Autoscaler.
func (b *Berth) Describe() string {
	d := fmt.Sprintf("berth's scaler (scaler.Policy.Decide) with trigger %v, through KEDA and the HPA every %s", b.Metadata, b.SyncPeriod)
	if len(b.Forgets) > 0 {
		d += fmt.Sprintf("; restarted without its fleet model at %v", b.Forgets)
	}
	return d
}

// Step implements Autoscaler: at each HPA sync, the replicas berth's values make the HPA
// compute (each signal's count, within the behavior's tolerance), then the behavior.
func (b *Berth) Step(now time.Duration, v View) (int, bool) {
	if !due(now, b.SyncPeriod) {
		return 0, false
	}
	o := b.observe(v)
	if b.forgot < len(b.Forgets) && now >= b.Forgets[b.forgot] {
		for b.forgot < len(b.Forgets) && now >= b.Forgets[b.forgot] {
			b.forgot++
		}
		b.model = scaler.FleetModel{}
	}
	if b.trigger.SLO.TTFT > 0 {
		b.model.Learn(o, b.trigger.SLO, epoch.Add(now))
		o.Model = &b.model
	}
	d, err := b.policy.Decide(o, b.trigger)
	if err != nil {
		return 0, false // no fresh data: KEDA's fallback keeps the fleet (never scale on missing data)
	}
	// Warm seats hold the SLO signal's headroom instead of serving replicas (the policy asks
	// for that many fewer); a held decision keeps the seats there are.
	if d.SeatsHeld {
		b.seats = max(b.seats, d.WarmSeats)
	} else {
		b.seats = d.WarmSeats
	}
	rec := 0
	for _, sd := range d.Signals {
		n := sd.Desired
		if v.Spec > 0 && withinTolerance(float64(n)/float64(v.Spec), b.Behavior) {
			n = v.Spec
		}
		rec = max(rec, n)
	}
	return b.hpa.normalize(now, v.Spec, rec), true
}

// observe builds the scaler's Observation from the pods, as scaler/pods does from their pages.
func (b *Berth) observe(v View) scaler.Observation {
	o := scaler.Observation{TTFTP95: math.NaN(), ITLP95: math.NaN(), PreemptionsPerMinute: math.NaN(), FollowReplicas: math.NaN(), Arrivals: math.NaN()}
	var ttft, itl scaler.Histogram
	var preempt float64
	windowed := 0
	for _, p := range v.pods {
		if p.replica == nil {
			if v.now-p.created < b.trigger.StartupTimeout {
				o.Starting++
			} else {
				if o.Stalled == nil {
					o.Stalled = map[scaler.StallReason]int{}
				}
				o.Stalled[scaler.StallStartupTimeout]++
			}
			continue
		}
		o.Ready++
		if v.now-p.ready <= scaler.StartupMemory {
			o.Startup = max(o.Startup, p.ready-p.created)
		}
		latest, ok := p.latestAt(v.now)
		if !ok {
			continue
		}
		cfg := p.replica.Config()
		o.Sampled++
		o.Waiting += float64(latest.waiting)
		o.Running += float64(latest.running)
		o.KVUsage += latest.kvUsage
		o.KVSampled++
		o.KVTokens += latest.kvUsage * float64(cfg.KVBlocksTotal*cfg.Tokens.BlockSize*cfg.Engines)
		o.KVTokensSampled++
		if latest.prompts > 0 || latest.waiting == 0 {
			o.PromptSampled++
			if latest.prompts > 0 {
				o.QueuedPromptTokens += float64(latest.waiting) * latest.promptSum / latest.prompts
			}
		}
		if l, base, joined, ok := p.window(b.TTFTWindow); ok {
			w := scaler.ReplicaWindow{Span: l.at - base.at, Finished: l.finished - base.finished, Joined: joined,
				TTFT: promHist(l.ttft).Sub(promHist(base.ttft)), ITL: promHist(l.itl).Sub(promHist(base.itl)),
				TPOT: promHist(l.tpot).Sub(promHist(base.tpot)), Waiting: float64(min(l.waiting, base.waiting))}
			if joined { // held through its window: from its first reading on (the zero baseline had no chance to queue)
				w.Waiting = float64(min(l.waiting, p.history[0].waiting))
			}
			w.Arrived = arrivedBetween(base, l)
			w.End = epoch.Add(l.at)
			recent := recentBase(p.history, base, l)
			w.Recent, w.RecentArrived = l.at-recent.at, arrivedBetween(recent, l)
			ttft.Add(w.TTFT)
			itl.Add(w.ITL)
			if span := w.Span.Seconds(); span > 0 {
				if b.trigger.SLO.TTFT > 0 {
					o.Windows = append(o.Windows, w)
				}
				preempt += (l.preemptions - base.preemptions) / span * 60
				o.TokensPerSecond += (l.tokens - base.tokens) / span
				o.TokensSampled++
				windowed++
			}
		}
	}
	o.TTFTP95, o.ITLP95 = ttft.Quantile(0.95), itl.Quantile(0.95)
	if windowed > 0 {
		o.PreemptionsPerMinute = preempt
	}
	if len(o.Windows) > 0 {
		o.Arrivals, o.ArrivalsSampled = scaler.WindowArrivals(o.Windows) // as the scaler's scrape reads them
	}
	return o
}

// promHist is a vllmsim histogram as the scaler reads it from /metrics: cumulative counts
// with the +Inf bucket last.
func promHist(h vllmsim.Histogram) scaler.Histogram {
	out := scaler.Histogram{Bounds: append(append(make([]float64, 0, len(h.Bounds)+1), h.Bounds...), math.Inf(1)),
		Counts: make([]float64, 0, len(h.Buckets)+1)}
	for _, c := range h.Buckets {
		out.Counts = append(out.Counts, float64(c))
	}
	out.Counts = append(out.Counts, float64(h.Count))
	return out
}

// DutyCycle is the HPA on the GPU's duty cycle (DCGM_FI_DEV_GPU_UTIL through a Prometheus
// adapter, as a pods metric): the fraction of time a kernel ran, which a continuous-batching
// engine keeps near 100 % from its first request to its last.
type DutyCycle struct {
	// Target is the average utilisation per pod, in percent.
	Target float64
	// Scrape is Prometheus' scrape interval; Window the adapter query's averaging window.
	Scrape, Window, SyncPeriod time.Duration
	hpa                        hpa
}

// NewDutyCycle is the HPA on duty cycle with the defaults GPU autoscaling guides use: target
// 80 %, a 15 s scrape, a one-minute average, the HPA's default behavior.
func NewDutyCycle(minR, maxR int) *DutyCycle {
	return &DutyCycle{Target: 80, Scrape: 15 * time.Second, Window: time.Minute, SyncPeriod: 15 * time.Second,
		hpa: hpa{behavior: DefaultHPABehavior, min: minR, max: maxR}}
}

// Name implements Autoscaler.
func (*DutyCycle) Name() string { return "hpa-duty-cycle" }

// Describe implements Autoscaler.
func (d *DutyCycle) Describe() string {
	return fmt.Sprintf("HPA on DCGM_FI_DEV_GPU_UTIL (avg over %s, scraped every %s), target %.0f %% per pod, default behavior", d.Window, d.Scrape, d.Target)
}

// Step implements Autoscaler with the HPA's pods-metric arithmetic (calcPlainMetricReplicas):
// the usage ratio over the pods that report the metric; pods not serving yet are Pending (the
// model still loading) and the HPA ignores them.
func (d *DutyCycle) Step(now time.Duration, v View) (int, bool) {
	if !due(now, d.SyncPeriod) {
		return 0, false
	}
	asOf := now - now%d.Scrape
	var sum float64
	reported := 0
	for _, p := range v.pods {
		if p.replica == nil {
			continue
		}
		l, okL := p.latestAt(asOf)
		b, okB := p.latestAt(asOf - d.Window)
		if !okL || !okB || l.at == b.at {
			continue
		}
		sum += math.Min(100, 100*(l.busy-b.busy)/(l.at-b.at).Seconds())
		reported++
	}
	if reported == 0 {
		return 0, false
	}
	ratio := sum / float64(reported) / d.Target
	if withinTolerance(ratio, d.hpa.behavior) {
		return d.hpa.normalize(now, v.Spec, v.Spec), true
	}
	return d.hpa.normalize(now, v.Spec, int(math.Ceil(ratio*float64(reported)))), true
}

// KEDAWaiting is a KEDA prometheus trigger on sum(vllm:num_requests_waiting) with an
// AverageValue threshold, what vLLM's and KEDA's guides show.
type KEDAWaiting struct {
	Threshold          float64
	Scrape, SyncPeriod time.Duration
	hpa                hpa
}

// NewKEDAWaiting is the guides' trigger: threshold 5 waiting requests per replica, a 15 s
// scrape, the HPA's default behavior.
func NewKEDAWaiting(minR, maxR int) *KEDAWaiting {
	return &KEDAWaiting{Threshold: 5, Scrape: 15 * time.Second, SyncPeriod: 15 * time.Second,
		hpa: hpa{behavior: DefaultHPABehavior, min: minR, max: maxR}}
}

// Name implements Autoscaler.
func (*KEDAWaiting) Name() string { return "keda-waiting" }

// Describe implements Autoscaler.
func (k *KEDAWaiting) Describe() string {
	return fmt.Sprintf("KEDA prometheus trigger on sum(vllm:num_requests_waiting), threshold %.0f (scraped every %s), default HPA behavior", k.Threshold, k.Scrape)
}

// Step implements Autoscaler.
func (k *KEDAWaiting) Step(now time.Duration, v View) (int, bool) {
	if !due(now, k.SyncPeriod) {
		return 0, false
	}
	asOf := now - now%k.Scrape
	total, seen := 0.0, false
	for _, p := range v.pods {
		if l, ok := p.latestAt(asOf); ok && p.replica != nil {
			total += float64(l.waiting)
			seen = true
		}
	}
	if !seen {
		return 0, false
	}
	return k.hpa.normalize(now, v.Spec, averageValue(total, k.Threshold, v.Spec, k.hpa.behavior)), true
}

// KubeAI is KubeAI's model autoscaler: every Interval it reads the requests in flight (running
// and queued) and sets ceil(average over TimeWindow / TargetRequests) replicas, lowering them
// only after ScaleDownDelay of lower counts.
type KubeAI struct {
	TargetRequests                   float64
	Interval, TimeWindow, ScaleDelay time.Duration
	min, max                         int
	samples                          []timedCount
	lowerSince                       time.Duration
}

// NewKubeAI is KubeAI with its defaults: 100 requests per replica, every 10 s, a 10-minute
// moving average, 30 s scale-down delay.
func NewKubeAI(minR, maxR int) *KubeAI {
	return &KubeAI{TargetRequests: 100, Interval: 10 * time.Second, TimeWindow: 10 * time.Minute, ScaleDelay: 30 * time.Second,
		min: minR, max: maxR, lowerSince: never}
}

// Name implements Autoscaler.
func (*KubeAI) Name() string { return "kubeai-concurrency" }

// Describe implements Autoscaler.
func (k *KubeAI) Describe() string {
	return fmt.Sprintf("KubeAI-style: ceil(mean requests in flight over %s / %.0f) every %s, scale-down after %s", k.TimeWindow, k.TargetRequests, k.Interval, k.ScaleDelay)
}

// Step implements Autoscaler.
func (k *KubeAI) Step(now time.Duration, v View) (int, bool) {
	if !due(now, k.Interval) {
		return 0, false
	}
	active := 0
	for _, p := range v.pods {
		if l, ok := p.latestAt(now); ok && p.replica != nil {
			active += l.waiting + l.running
		}
	}
	k.samples = append(k.samples, timedCount{now, active})
	for len(k.samples) > 0 && now-k.samples[0].at >= k.TimeWindow {
		k.samples = k.samples[1:]
	}
	sum := 0
	for _, s := range k.samples {
		sum += s.n
	}
	want := int(math.Ceil(float64(sum)/float64(len(k.samples))/k.TargetRequests - 1e-9))
	want = min(max(want, k.min), k.max)
	if want >= v.Spec {
		k.lowerSince = never
		return want, want != v.Spec
	}
	if k.lowerSince == never {
		k.lowerSince = now
	}
	if now-k.lowerSince < k.ScaleDelay {
		return 0, false
	}
	k.lowerSince = never
	return want, true
}

// L4Trigger is berth's trigger for an L4 serving Llama-3.1-8B with chat-length requests, chosen
// with this simulator (docs/economics.md): an L4 replica saturates at about 0.65 requests/s of
// the Azure conversation lengths, some 16 in flight, so 8 in flight per replica keeps it at
// half that, with 4 waiting and a TTFT SLO of 3 s — above the p95 an idle L4 gives those long
// prompts (about 1.5 s of prefill): a lower target could never be met and would pin the fleet
// at its maximum.
var L4Trigger = map[string]string{
	"targetConcurrency": "8", "targetQueueDepth": "4", "targetTTFTSeconds": "3", "startupTimeoutSeconds": "600",
}
