package simulate

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/berth-dev/berth/internal/vllmsim"
)

// OracleAttainment is the attainment of the attainable requests the oracle's
// plan sizes each stretch for (NewOracle).
const OracleAttainment = 0.999

// The baselines' settings as a competent user would run them, chosen with this simulator on
// the synthetic day of seed 1 — the setting with the best SLO attainment (docs/economics.md has
// the sweep) — and judged on other seeds and the real trace.
const (
	// TunedKEDAThreshold is the KEDA baseline's waiting requests per replica (1, 2, 3 and 5
	// tried: 77.98, 75.66, 75.79 and 73.12 % attainment).
	TunedKEDAThreshold = 1
	// TunedKubeAITarget is the KubeAI baseline's requests in flight per replica (4, 6, 8 and 12
	// tried: 99.72, 96.34, 93.53 and 91.88 % attainment); an L4 replica saturates at about 16.
	TunedKubeAITarget = 4
)

// SLOTrigger is berth's trigger for an SLO: the SLO itself, nothing per replica to guess.
func SLOTrigger(slo SLO) map[string]string {
	md := map[string]string{"ttftSLOSeconds": strconv.FormatFloat(slo.TTFT.Seconds(), 'f', -1, 64)}
	if slo.ITL > 0 {
		md["itlSLOSeconds"] = strconv.FormatFloat(slo.ITL.Seconds(), 'f', -1, 64)
	}
	return md
}

// ColdStart is how long a scale-up onto a new node takes before the replica serves: Karpenter's
// batching window, the node's launch, the image pull and the model load.
func (f Fleet) ColdStart() time.Duration {
	return f.ProvisionDelay + f.NodeLaunch + f.ImagePull + f.ModelLoad
}

// TraceWarmUp is the warm-up of a trace that lasts span on f: a tenth of it, but at least three
// cold starts (an autoscaler that starts at Min needs one to see the load, one for its
// replicas to arrive, one to settle), at most half of it and at most DefaultWarmUp.
func TraceWarmUp(f Fleet, span time.Duration) time.Duration {
	return min(DefaultWarmUp, span/2, max(span/10, 3*f.ColdStart()))
}

// Static is a fixed fleet of N replicas: what a platform team runs without an autoscaler.
type Static struct{ N int }

// Name implements Autoscaler.
func (s Static) Name() string { return fmt.Sprintf("static-%d", s.N) }

// Describe implements Autoscaler.
func (s Static) Describe() string { return fmt.Sprintf("a fixed fleet of %d replicas", s.N) }

// Step implements Autoscaler.
func (s Static) Step(_ time.Duration, v View) (int, bool) { return s.N, v.Spec != s.N }

// FrontierPoint is one fixed fleet's outcome: a point of the static-N frontier.
type FrontierPoint struct {
	N                   int
	GPUHours            float64
	Violations          int
	AttainableViolation int
	Attainment          float64
	// Attainable is the measured requests that could meet the SLO at all.
	Attainable int
	// Series is the fleet's run over time (what the oracle plans from).
	Series []Point
}

// Frontier is the static-N frontier: SLO-violating requests against GPU-hours for fixed
// fleets, by size (and so by GPU-hours, which never fall as a fleet grows). A policy is judged
// against it at equal GPU-hours (At).
type Frontier []FrontierPoint

// frontierSizes are the fleet sizes a frontier is measured at between lo and hi: every size
// up to 16, then steps of about an eighth, so a sweep to 64 costs 28 runs.
func frontierSizes(lo, hi int) []int {
	var out []int
	for n := max(lo, 1); n <= hi; n += max(1, n/8) {
		out = append(out, n)
	}
	if len(out) > 0 && out[len(out)-1] != hi {
		out = append(out, hi)
	}
	return out
}

// MeasureFrontier replays trace through fixed fleets of every size frontierSizes gives from
// lo to hi (in parallel, one run per core), stopping at the first size that meets the SLO for
// every attainable request. Fleets start warm at their size.
func MeasureFrontier(f Fleet, trace []vllmsim.TraceRequest, lo, hi int) (Frontier, error) {
	sizes := frontierSizes(lo, hi)
	out := make([]*FrontierPoint, len(sizes))
	errs := make([]error, len(sizes))
	var mu sync.Mutex
	next, done := 0, len(sizes) // the next size to run; the smallest with no attainable violation
	var wg sync.WaitGroup
	for range max(1, runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				stop := i >= len(sizes) || i > done
				mu.Unlock()
				if stop {
					return
				}
				errs[i] = frontierPoint(f, trace, sizes[i], &out[i])
				if out[i] != nil && out[i].AttainableViolation == 0 {
					mu.Lock()
					done = min(done, i)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	var fr Frontier
	for i, p := range out {
		if p != nil && i <= done { // a larger fleet run alongside the first to meet the SLO adds nothing
			fr = append(fr, *p)
		}
	}
	return fr, errors.Join(errs...)
}

// frontierPoint replays trace through a fixed fleet of n replicas into *out.
func frontierPoint(f Fleet, trace []vllmsim.TraceRequest, n int, out **FrontierPoint) error {
	f.Min, f.Max = n, n
	res, err := RunInference(f, trace, Static{N: n})
	if err != nil {
		return fmt.Errorf("static fleet of %d: %w", n, err)
	}
	*out = &FrontierPoint{N: n, GPUHours: res.GPUHours, Violations: res.Violations(),
		AttainableViolation: res.AttainableViolations(), Attainment: res.Attainment(), Attainable: res.Requests - res.Unattainable, Series: res.Series}
	return nil
}

// At is the frontier's attainable violations at gpuHours, interpolated linearly between the
// two fixed fleets around it; ok is false outside the frontier's span (then the nearest end
// is returned).
func (fr Frontier) At(gpuHours float64) (violations float64, ok bool) {
	if len(fr) == 0 {
		return math.NaN(), false
	}
	if gpuHours <= fr[0].GPUHours {
		return float64(fr[0].AttainableViolation), gpuHours == fr[0].GPUHours
	}
	for i := 1; i < len(fr); i++ {
		a, b := fr[i-1], fr[i]
		if gpuHours <= b.GPUHours {
			x := (gpuHours - a.GPUHours) / (b.GPUHours - a.GPUHours)
			return float64(a.AttainableViolation) + x*float64(b.AttainableViolation-a.AttainableViolation), true
		}
	}
	return float64(fr[len(fr)-1].AttainableViolation), false
}

// Oracle is the clairvoyant limit: it knows, for every stretch of the trace, the smallest fixed
// fleet that met the SLO through it (from the static-N frontier's own replays) and the cold
// start, and holds at each moment the largest of those sizes over the next cold start — a
// scale-up it orders lands when its stretch begins, a replica goes as soon as nothing within
// reach needs it. A fixed fleet is one of its choices, so it is never worse than the frontier's
// fleet that meets the SLO, and it pays for the peak only while the peak lasts.
type Oracle struct {
	// Schedule is the fleet each stretch needs, in order; Stretch their length.
	Schedule []int
	Stretch  time.Duration
	// ColdStart is how far ahead it orders; Sync how often it acts.
	ColdStart, Sync time.Duration
}

// OracleStretch is the shortest stretch of the trace the oracle sizes for as a whole.
const OracleStretch = 5 * time.Minute

// NewOracle plans the oracle on f from the frontier fr (which must carry each fleet's series):
// for each stretch the smallest fleet whose attainable requests arriving in it met the SLO
// for OracleAttainment of them (the largest measured where none did). The warm-up takes the
// first measured stretch's fleet.
func NewOracle(f Fleet, fr Frontier) (*Oracle, error) {
	bySize := fr
	if len(bySize) == 0 || len(bySize[0].Series) < 2 {
		return nil, errors.New("the oracle needs the static-N frontier's series")
	}
	width := bySize[0].Series[1].At - bySize[0].Series[0].At
	per := max(1, int((OracleStretch+width-1)/width))
	o := &Oracle{Stretch: time.Duration(per) * width, ColdStart: f.ColdStart(), Sync: 15 * time.Second}
	first := -1
	for start := 0; start < len(bySize[0].Series); start += per {
		n := bySize[len(bySize)-1].N
		measured := false
		for _, p := range bySize {
			attainable, good := 0, 0
			for _, pt := range p.Series[min(start, len(p.Series)):min(start+per, len(p.Series))] {
				attainable, good = attainable+pt.Attainable, good+pt.Good
			}
			measured = measured || attainable > 0
			if attainable == 0 || float64(good) >= OracleAttainment*float64(attainable) {
				n = p.N
				break
			}
		}
		if measured && first < 0 {
			first = len(o.Schedule)
		}
		o.Schedule = append(o.Schedule, n)
	}
	if first < 0 {
		return nil, errors.New("the frontier measured no request")
	}
	for i := range first {
		o.Schedule[i] = o.Schedule[first]
	}
	return o, nil
}

// Name implements Autoscaler.
func (*Oracle) Name() string { return "oracle" }

// Describe implements Autoscaler.
func (o *Oracle) Describe() string {
	return fmt.Sprintf("clairvoyant: for every %s the smallest fixed fleet that met the SLO for %.1f %% of its attainable requests (from the frontier's replays), ordered %s ahead",
		o.Stretch, 100*OracleAttainment, o.ColdStart)
}

// Step implements Autoscaler.
func (o *Oracle) Step(now time.Duration, _ View) (int, bool) {
	if !due(now, o.Sync) {
		return 0, false
	}
	want := 1
	for i := int(now / o.Stretch); i <= int((now+o.ColdStart)/o.Stretch) && i < len(o.Schedule); i++ {
		want = max(want, o.Schedule[i])
	}
	if i := len(o.Schedule) - 1; int(now/o.Stretch) > i {
		want = o.Schedule[i]
	}
	return want, true
}

// BurstBlind is the limit of a policy that cannot foresee a burst, as Oracle is the limit of
// one that can: the oracle's plan of the same day drawn without its bursts (the day's shape —
// its swing and its noise — known one cold start ahead), times a standing Headroom that is all
// it has against the bursts it does not see, replayed on the day with them. berth sees no
// burst coming either: where a burst is shorter than a cold start, what it meets the burst
// with is mostly what it held before it, and this is the least that holding costs.
type BurstBlind struct {
	// Plan is the oracle planned on the day without bursts.
	Plan *Oracle
	// Headroom multiplies the plan's fleet.
	Headroom float64
}

// BurstBlindHeadrooms are the standing headrooms a report replays the burst-blind limit at.
var BurstBlindHeadrooms = []float64{1, 1.5, 2, 2.5, 3}

// Name implements Autoscaler.
func (b *BurstBlind) Name() string {
	return "burst-blind oracle ×" + strconv.FormatFloat(b.Headroom, 'f', -1, 64)
}

// Describe implements Autoscaler.
func (b *BurstBlind) Describe() string {
	return fmt.Sprintf("the oracle's plan of the same day without bursts (%s), ×%s", b.Plan.Describe(), strconv.FormatFloat(b.Headroom, 'f', -1, 64))
}

// Step implements Autoscaler.
func (b *BurstBlind) Step(now time.Duration, v View) (int, bool) {
	want, ok := b.Plan.Step(now, v)
	if !ok {
		return 0, false
	}
	return int(math.Ceil(b.Headroom*float64(want) - 1e-9)), true
}

// GPUHoursFor is the least GPU-hours the burst-blind runs rs reach violations (attainable) at,
// interpolated linearly between the two runs around it in cost; ok is false when no run
// reached it (then the costliest run's GPU-hours are returned) or there is none.
func GPUHoursFor(rs []*InferenceResult, violations float64) (gpuHours float64, ok bool) {
	if len(rs) == 0 {
		return math.NaN(), false
	}
	sorted := slices.Clone(rs)
	slices.SortFunc(sorted, func(a, b *InferenceResult) int { return cmp.Compare(a.GPUHours, b.GPUHours) })
	for i, r := range sorted {
		v := float64(r.AttainableViolations())
		if v > violations {
			continue
		}
		if i == 0 {
			return r.GPUHours, true
		}
		p := sorted[i-1] // cheaper, and above violations: pv > violations ≥ v
		pv := float64(p.AttainableViolations())
		x := (pv - violations) / (pv - v)
		return p.GPUHours + x*(r.GPUHours-p.GPUHours), true
	}
	return sorted[len(sorted)-1].GPUHours, false
}
