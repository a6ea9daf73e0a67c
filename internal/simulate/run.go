package simulate

import (
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/internal/gpu"
	"github.com/berth-dev/berth/internal/vllmsim"
)

// BerthName is berth's name in reports.
const BerthName = "berth"

// Options is one simulation: a request trace through a fleet under berth and the baselines,
// optionally berth on a multi-replica-per-node fleet with and without its guard, and a
// training-job trace through a cluster under every training policy.
type Options struct {
	// Requests is the request trace; RequestSource says where it came from. Empty: no
	// inference part.
	Requests      []vllmsim.TraceRequest
	RequestSource string
	// Bursts is when the trace's bursts began, when known (a synthetic trace): the report
	// measures each burst to the first new replica serving.
	Bursts []time.Duration
	// Fleet is the serving fleet; Trigger berth's ScaledObject trigger metadata, Behavior its
	// HPA behavior and SyncPeriod the HPA's.
	Fleet      Fleet
	Trigger    map[string]string
	Behavior   HPABehavior
	SyncPeriod time.Duration
	// KEDAThreshold and KubeAITarget configure those baselines (0: their defaults).
	KEDAThreshold, KubeAITarget float64
	// Policies, when set, names the autoscalers replayed (PolicyNames); empty: all of them.
	// The frontier and the oracle have their own switches.
	Policies []string
	// Frontier also replays the requests through fixed fleets of every size up to Fleet.Max
	// (the static-N frontier); Oracle through the clairvoyant policy (Oracle), planned from
	// that frontier's replays (measured for it too).
	Frontier, Oracle bool
	// BurstFree, when set with Oracle, is the same day without its bursts: the oracle is
	// planned on it too, and that plan replayed on Requests at each of BurstBlindHeadrooms
	// (BurstBlind, the limit of a policy that cannot foresee a burst).
	BurstFree []vllmsim.TraceRequest
	// ConsolidationFleet, when set, also replays the requests through berth on that fleet
	// under WhenEmptyOrUnderutilized, without the guard and with it, with ConsolidationTrigger.
	ConsolidationFleet   *Fleet
	ConsolidationTrigger map[string]string
	// ScalerRestarts are the times berth's scaler restarts; with ScalerForgets each loses the
	// fleet model (a scaler without a model store). Without it a restart is not replayed at
	// all: the store gives back the model the scaler wrote at its stop, and a model read back
	// is the model (scaler's TestASnapshotIsTheModel), so the replay is that of a scaler never
	// restarted.
	ScalerRestarts []time.Duration
	ScalerForgets  bool
	// Jobs is the training-job trace and JobSource where it came from; Cluster the pool it
	// runs on. Empty: no training part.
	Jobs      []Job
	JobSource string
	Cluster   Cluster
}

// fleetBerth is berth's scaler on o's fleet, restarted as o says.
func fleetBerth(o Options) (*Berth, error) {
	berth, err := NewBerth(BerthName, o.Trigger, o.Behavior, o.SyncPeriod, o.Fleet.Min, o.Fleet.Max)
	if err != nil {
		return nil, err
	}
	if o.ScalerForgets {
		berth.Forgets = slices.Sorted(slices.Values(o.ScalerRestarts))
	}
	return berth, nil
}

// Run runs every part of o and returns the report.
func Run(o Options) (*Report, error) {
	r := &Report{Requests: o.RequestSource, Fleet: o.Fleet, Jobs: o.JobSource, Cluster: o.Cluster, Policies: map[string]string{}}
	var errs []error
	if len(o.Requests) > 0 {
		berth, err := fleetBerth(o)
		if err != nil {
			return nil, err
		}
		r.Bursts = o.Bursts
		keda, kubeai := NewKEDAWaiting(o.Fleet.Min, o.Fleet.Max), NewKubeAI(o.Fleet.Min, o.Fleet.Max)
		if o.KEDAThreshold > 0 {
			keda.Threshold = o.KEDAThreshold
		}
		if o.KubeAITarget > 0 {
			kubeai.TargetRequests = o.KubeAITarget
		}
		policies, err := pickPolicies(o.Policies, berth, NewDutyCycle(o.Fleet.Min, o.Fleet.Max), keda, kubeai)
		if err != nil {
			return nil, err
		}
		if o.Frontier || o.Oracle {
			fr, err := MeasureFrontier(o.Fleet, o.Requests, 1, o.Fleet.Max)
			if err != nil {
				errs = append(errs, fmt.Errorf("the static-N frontier: %w", err))
			}
			r.Frontier = fr
		}
		if o.Oracle {
			oracle, err := NewOracle(o.Fleet, r.Frontier)
			if err != nil {
				errs = append(errs, fmt.Errorf("the oracle: %w", err))
			} else {
				policies = append(policies, oracle)
			}
		}
		if o.Oracle && len(o.BurstFree) > 0 {
			blind, err := burstBlind(o.Fleet, o.Requests, o.BurstFree)
			errs = append(errs, err)
			r.BurstBlind = blind
		}
		results, err := runPolicies(o.Fleet, o.Requests, policies)
		errs = append(errs, err)
		for i, a := range policies {
			if results[i] != nil {
				r.Inference = append(r.Inference, results[i])
				r.Policies[a.Name()] = a.Describe()
			}
		}
	}
	if cf := o.ConsolidationFleet; cf != nil && len(o.Requests) > 0 {
		r.ConsolidationFleet = cf
		for _, guard := range []bool{false, true} {
			f := *cf
			f.Consolidation, f.Guard = WhenEmptyOrUnderutilized, guard
			name := BerthName + " without guard"
			if guard {
				name = BerthName + " with guard"
			}
			a, err := NewBerth(name, o.ConsolidationTrigger, o.Behavior, o.SyncPeriod, f.Min, f.Max)
			if err != nil {
				return nil, err
			}
			res, err := RunInference(f, o.Requests, a)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
				continue
			}
			r.Consolidation = append(r.Consolidation, res)
		}
	}
	if len(o.Jobs) > 0 {
		for _, p := range TrainingPolicies() {
			res, err := RunTraining(o.Cluster, o.Jobs, p)
			if err != nil {
				errs = append(errs, fmt.Errorf("training under %s: %w", p, err))
				continue
			}
			r.Training = append(r.Training, res)
		}
	}
	return r, errors.Join(errs...)
}

// H100Fleet is Llama-3.3-70B in FP8 on two H100s per replica (the vllmsim H100 profile), four
// replicas per p5.48xlarge, the family's launch time, a one-minute image pull on a fresh node
// and a 4-minute model load (70 GB of FP8 weights, CUDA graphs), a minute's drain,
// 1 to 16 replicas, Karpenter's default WhenEmptyOrUnderutilized after 5 minutes, the first 30
// minutes a warm-up.
func H100Fleet() (Fleet, error) {
	engine, err := vllmsim.Profile(vllmsim.ProfileH100Llama70B)
	if err != nil {
		return Fleet{}, err
	}
	fam, ok := gpu.ByGPU("h100")
	if !ok {
		return Fleet{}, errors.New("the GPU catalogue has no H100 family")
	}
	return Fleet{Engine: engine, Family: fam, GPUsPerReplica: 2, ReplicaCPU: 16,
		NodeLaunch: fam.LaunchTime, ProvisionDelay: 2 * time.Second, ImagePull: time.Minute, ModelLoad: 4 * time.Minute,
		DrainTimeout: DefaultDrainTimeout, Routing: RoundRobin,
		Consolidation: WhenEmptyOrUnderutilized, ConsolidateAfter: 5 * time.Minute, Min: 1, Max: 16, Tick: time.Second, SLO: DefaultSLO,
		WarmUp: DefaultWarmUp}, nil
}

// PolicyNames are the autoscalers Options.Policies may name, in report order.
func PolicyNames() []string {
	return []string{BerthName, "hpa-duty-cycle", "keda-waiting", "kubeai-concurrency"}
}

// pickPolicies is the autoscalers of all that names lists (all of them without names), in
// all's order; an unknown name is an error that lists the known ones.
func pickPolicies(names []string, all ...Autoscaler) ([]Autoscaler, error) {
	if len(names) == 0 {
		return all, nil
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var out []Autoscaler
	for _, a := range all {
		if want[a.Name()] {
			out = append(out, a)
			delete(want, a.Name())
		}
	}
	if len(want) > 0 {
		unknown := slices.Sorted(maps.Keys(want))
		return nil, fmt.Errorf("unknown policies %s (known: %s)", strings.Join(unknown, ", "), strings.Join(PolicyNames(), ", "))
	}
	return out, nil
}

// burstBlind measures the frontier of the burst-free day, plans the oracle on it and replays
// that plan on trace at every BurstBlindHeadrooms.
func burstBlind(f Fleet, trace, burstFree []vllmsim.TraceRequest) ([]*InferenceResult, error) {
	fr, err := MeasureFrontier(f, burstFree, 1, f.Max)
	if err != nil {
		return nil, fmt.Errorf("the burst-free day's frontier: %w", err)
	}
	plan, err := NewOracle(f, fr)
	if err != nil {
		return nil, fmt.Errorf("the burst-free day's oracle: %w", err)
	}
	var policies []Autoscaler
	for _, h := range BurstBlindHeadrooms {
		policies = append(policies, &BurstBlind{Plan: plan, Headroom: h})
	}
	rs, err := runPolicies(f, trace, policies)
	return slices.DeleteFunc(rs, func(r *InferenceResult) bool { return r == nil }), err
}

// runPolicies replays trace under each autoscaler, in parallel (one run per core; each run is
// deterministic and shares nothing), results in policies' order (nil where a run failed).
func runPolicies(f Fleet, trace []vllmsim.TraceRequest, policies []Autoscaler) ([]*InferenceResult, error) {
	out := make([]*InferenceResult, len(policies))
	errs := make([]error, len(policies))
	sem := make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))
	var wg sync.WaitGroup
	for i, a := range policies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			res, err := RunInference(f, trace, a)
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w", a.Name(), err)
				return
			}
			out[i] = res
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}
