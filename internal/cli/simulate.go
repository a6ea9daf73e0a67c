package cli

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-dev/berth/internal/simulate"
	"github.com/berth-dev/berth/internal/vllmsim"
	"github.com/berth-dev/berth/scaler"
)

type simulateFlags struct {
	trace, jobs, out, writeTrace, writeJobs string
	fleet                                   string
	synthetic                               simulate.Synthetic
	syntheticJobs                           simulate.SyntheticJobs
	trigger                                 map[string]string
	min, max                                int
	warmUp                                  time.Duration
	warmUpSet                               bool
	nodeGPUs                                int
	slo                                     simulate.SLO
	noInference, noTraining, noConsolidate  bool
	limitGPUs                               int
	drainTimeout, imagePull, modelLoad      time.Duration
	imagePullSet, modelLoadSet              bool
	routing, lengths, lengthsFrom           string
	frontier, oracle, burstBlind            bool
	kedaThreshold, kubeAITarget             float64
	warmSeats, minWarmSeats                 int
	policies                                []string
	scalerRestarts                          []time.Duration
	scalerForgets                           bool
}

func newSimulateCommand() *cobra.Command {
	f := simulateFlags{synthetic: simulate.DefaultSynthetic, syntheticJobs: simulate.DefaultSyntheticJobs, slo: simulate.DefaultSLO,
		routing: string(simulate.RoundRobin), lengths: string(simulate.LengthsTrace)}
	cmd := &cobra.Command{
		Use:   "simulate",
		Short: "Replay request and training-job traces through berth's decisions and today's setups; report SLOs, GPU-hours and dollars",
		Long: `Replay traces offline, on a simulated clock, through berth's own decision code — the scaler's
replica policy, gang placement and whole-gang provisioning — and through what platforms run
today: an HPA on the GPU duty cycle, a KEDA prometheus trigger on vllm:num_requests_waiting,
KubeAI-style concurrency, kube-scheduler with Karpenter alone, and gang scheduling without whole
provisioning. Replicas run vllm-sim's token-level vLLM engine model; nodes take their GPU
family's launch time and replicas their model load; costs come from berth's GPU catalogue.

Requests come from --trace (the Azure LLM inference trace format:
TIMESTAMP,ContextTokens,GeneratedTokens) or, without it, from a synthetic day (--duration,
--rate, --diurnal, --burst-*, --seed) whose requests take their (prompt, output) lengths from
rows of a real trace (--lengths): --lengths-from, or the one embedded in berth, the Azure LLM
inference trace 2023's conversation hour (CC-BY-4.0, © Microsoft: "Azure LLM inference trace
2023, Microsoft, https://github.com/Azure/AzurePublicDataset"). Jobs come from --jobs
(arrival_seconds,members,gpus_per_member,duration_seconds) or a synthetic day of them.

Clients give up after --timeout without a first token and the engine aborts their requests;
replicas scaled down or evicted drain for --drain-timeout; requests are routed --routing; a
pod on a fresh node waits for --image-pull before its --model-load.

The report (report.md and PNG plots) goes to --out; docs/economics.md explains the model.

  berth simulate --out /tmp/sim                       # a synthetic day of both
  berth simulate --trace AzureLLMInferenceTrace_conv.csv --no-training --out /tmp/azure`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runSimulate(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.trace, "trace", "", "request trace in the Azure LLM inference trace format (default: synthetic)")
	fl.StringVar(&f.jobs, "jobs", "", "training-job trace: arrival_seconds,members,gpus_per_member,duration_seconds (default: synthetic)")
	fl.StringVar(&f.out, "out", "berth-simulate", "folder the report and its plots are written to")
	fl.StringVar(&f.writeTrace, "write-trace", "", "also write the request trace replayed (synthetic or read) to this file")
	fl.StringVar(&f.writeJobs, "write-jobs", "", "also write the job trace replayed to this file")
	fl.StringVar(&f.fleet, "fleet", "l4", "serving fleet: l4 (Llama-3.1-8B, 1 L4 and 4 cores per replica on g6 nodes) or h100 (Llama-3.3-70B FP8, 2 H100s per replica on p5.48xlarge)")
	fl.StringToStringVar(&f.trigger, "trigger", nil, "berth's ScaledObject trigger metadata (default: the SLO itself, ttftSLOSeconds and itlSLOSeconds from --slo-ttft and --slo-itl), e.g. targetConcurrency=8,targetTTFTSeconds=3")
	fl.IntVar(&f.warmSeats, "warm-seats", 0, "berth's trigger warmSeats: hold up to this many of its burst-headroom replicas as warm seats (nodes up, the serving image pulled, no replica) instead of serving replicas; a scale-up's replica takes one and pays only --model-load")
	fl.IntVar(&f.minWarmSeats, "min-warm-seats", 0, "berth's trigger minWarmSeats: the warm seats held whatever the headroom (at most --warm-seats)")
	fl.BoolVar(&f.frontier, "frontier", true, "also replay the requests through fixed fleets of every size up to --max (the static-N frontier every policy is judged against at its GPU-hours)")
	fl.BoolVar(&f.oracle, "oracle", true, "also replay the requests through the clairvoyant oracle (knows every arrival and the cold start: for every 5 minutes the smallest fixed fleet that met the SLO there, ordered one cold start ahead)")
	fl.BoolVar(&f.burstBlind, "burst-blind", false, "also replay the burst-blind limit (synthetic days with bursts; needs --oracle): the oracle planned on the same day without its bursts, times a standing headroom of 1 to 3, replayed on the day with them — the least a policy pays that meets a burst with what it held before it (a second frontier: about doubles the run's time)")
	fl.Float64Var(&f.kedaThreshold, "keda-threshold", simulate.TunedKEDAThreshold, "the KEDA baseline's vllm:num_requests_waiting threshold per replica (default: tuned on the synthetic day of seed 1, docs/economics.md)")
	fl.StringSliceVar(&f.policies, "policies", nil, "autoscalers to replay, of "+strings.Join(simulate.PolicyNames(), ", ")+" (default: all; --frontier and --oracle have their own switches)")
	fl.Float64Var(&f.kubeAITarget, "kubeai-target", simulate.TunedKubeAITarget, "the KubeAI baseline's requests in flight per replica (default: tuned on the synthetic day of seed 1, docs/economics.md)")
	fl.IntVar(&f.min, "min", 1, "minimum replicas of every policy")
	fl.IntVar(&f.nodeGPUs, "node-gpus", 0, "only launch instance sizes with this many GPUs (a nodeSelector on karpenter.k8s.aws/instance-gpu-count); 0: any size, Karpenter packs a scale-up's replicas onto the cheapest size that holds them")
	fl.DurationVar(&f.warmUp, "warm-up", simulate.DefaultWarmUp, "the start of the request trace replayed but not measured (the fleet starts at --min); unset, a tenth of a short trace but at least three cold starts of the fleet (one to see the load, one to meet it, one to settle) and at most half of it")
	fl.IntVar(&f.max, "max", 64, "maximum replicas of every policy")
	fl.DurationVar(&f.slo.TTFT, "slo-ttft", f.slo.TTFT, "SLO: time to first token")
	fl.DurationVar(&f.slo.ITL, "slo-itl", f.slo.ITL, "SLO: mean time per output token of a request")
	fl.DurationVar(&f.slo.Timeout, "timeout", f.slo.Timeout, "clients give up after this long without a first token; the engine aborts their requests")
	fl.DurationVar(&f.drainTimeout, "drain-timeout", simulate.DefaultDrainTimeout, "terminationGracePeriodSeconds: a serving replica scaled down or evicted takes no new request and finishes its own for up to this long (0: they are lost at once)")
	fl.StringVar(&f.routing, "routing", f.routing, "how requests reach the replicas: round-robin (a Service) or least-outstanding (an endpoint picker: the replica with the fewest requests running and waiting)")
	fl.DurationVar(&f.imagePull, "image-pull", 0, "serving image pull, once per node: the first pod on a node waits for it, later ones do not (default: the --fleet preset's)")
	fl.DurationVar(&f.modelLoad, "model-load", 0, "model load after the image (weights, CUDA graphs), paid by every pod (default: the --fleet preset's)")
	fl.DurationVar(&f.synthetic.Duration, "duration", f.synthetic.Duration, "synthetic requests and jobs: how long")
	fl.Float64Var(&f.synthetic.MeanRate, "rate", f.synthetic.MeanRate, "synthetic requests: mean arrivals per second")
	fl.Float64Var(&f.synthetic.Diurnal, "diurnal", f.synthetic.Diurnal, "synthetic requests: daily swing 0–1 (peak (1+d)× and trough (1−d)× the mean)")
	fl.DurationVar(&f.synthetic.Period, "period", f.synthetic.Period, "synthetic requests: length of a day")
	fl.DurationVar(&f.synthetic.PeakAt, "peak-at", f.synthetic.PeakAt, "synthetic requests: when in the day the rate peaks")
	fl.DurationVar(&f.synthetic.BurstEvery, "burst-every", f.synthetic.BurstEvery, "synthetic requests: mean time between bursts (0: none)")
	fl.DurationVar(&f.synthetic.BurstLength, "burst-length", f.synthetic.BurstLength, "synthetic requests: burst length")
	fl.Float64Var(&f.synthetic.BurstFactor, "burst-factor", f.synthetic.BurstFactor, "synthetic requests: rate multiplier in a burst")
	fl.Uint64Var(&f.synthetic.Seed, "seed", f.synthetic.Seed, "seed of the synthetic traces")
	fl.StringVar(&f.lengths, "lengths", f.lengths, "synthetic requests: trace (each request's prompt and output lengths, together, from a random row of the Azure conversation trace or --lengths-from) or lognormal (each independently log-normal around the Azure trace's medians, a heavier tail than the trace's)")
	fl.StringVar(&f.lengthsFrom, "lengths-from", "", "synthetic requests, --lengths trace: the trace whose rows the lengths come from, in --trace's format (default: the embedded Azure conversation trace)")
	fl.Float64Var(&f.syntheticJobs.PerHour, "jobs-per-hour", f.syntheticJobs.PerHour, "synthetic jobs: mean arrivals per hour")
	fl.IntVar(&f.limitGPUs, "limit-gpus", 64, "training NodePool's GPU limit")
	fl.DurationSliceVar(&f.scalerRestarts, "scaler-restarts", nil, "berth's scaler restarts at these times of the request replay (an upgrade, a drained node), e.g. 8h,16h; with its models kept (--model-namespace, the chart's default) a restart changes nothing")
	fl.BoolVar(&f.scalerForgets, "scaler-forgets", false, "with --scaler-restarts: each restart loses the fleet model (what the scaler runs without --model-namespace): the capacity and the demand's history are learned again")
	fl.BoolVar(&f.noInference, "no-inference", false, "skip the request replay")
	fl.BoolVar(&f.noTraining, "no-training", false, "skip the training-job replay")
	fl.BoolVar(&f.noConsolidate, "no-consolidation", false, "skip the consolidation comparison (berth on H100 nodes with and without its guard)")
	return cmd
}

func runSimulate(cmd *cobra.Command, f simulateFlags) error {
	f.warmUpSet = cmd.Flags().Changed("warm-up")
	f.imagePullSet, f.modelLoadSet = cmd.Flags().Changed("image-pull"), cmd.Flags().Changed("model-load")
	o, err := simulateOptions(f)
	if err != nil {
		return err
	}
	start := time.Now()
	rep, err := simulate.Run(o)
	if err != nil {
		return err
	}
	if err := rep.Write(f.out); err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "simulated in %s; report: %s\n", time.Since(start).Round(time.Millisecond), filepath.Join(f.out, "report.md"))
	for _, g := range rep.Goals() {
		met := "not met"
		if g.Met {
			met = "met"
		}
		fmt.Fprintf(out, "  %-55s %-12s %-40s %s\n", g.Name, g.Want, g.Got, met)
	}
	return nil
}

// simulateOptions reads the traces (or generates them) and builds the run.
func simulateOptions(f simulateFlags) (simulate.Options, error) {
	var o simulate.Options
	var errs []error
	fleet, trigger, err := flagFleet(f)
	if err != nil {
		return o, err
	}
	o.Fleet, o.Trigger, o.Behavior, o.SyncPeriod = fleet, trigger, simulate.BerthBehavior, 15*time.Second
	o.Frontier, o.Oracle, o.KEDAThreshold, o.KubeAITarget = f.frontier, f.oracle, f.kedaThreshold, f.kubeAITarget
	o.Policies = f.policies
	if f.kedaThreshold <= 0 || f.kubeAITarget <= 0 {
		return o, fmt.Errorf("--keda-threshold %v and --kubeai-target %v: both must be positive", f.kedaThreshold, f.kubeAITarget)
	}
	for _, d := range f.scalerRestarts {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("--scaler-restarts %s: a restart's time must be positive", d))
		}
	}
	if f.scalerForgets && len(f.scalerRestarts) == 0 {
		errs = append(errs, errors.New("--scaler-forgets needs --scaler-restarts"))
	}
	o.ScalerRestarts, o.ScalerForgets = f.scalerRestarts, f.scalerForgets
	if !f.noInference {
		if f.trace != "" {
			o.Requests, err = readTrace(f.trace)
			o.RequestSource = fmt.Sprintf("%s (%d requests)", filepath.Base(f.trace), len(o.Requests))
		} else {
			o.Requests, o.Bursts, o.RequestSource, err = syntheticRequests(f)
		}
		errs = append(errs, err)
		if f.burstBlind {
			o.BurstFree, err = burstFreeRequests(f)
			errs = append(errs, err)
		}
		if n := len(o.Requests); n > 0 && !f.warmUpSet {
			o.Fleet.WarmUp = simulate.TraceWarmUp(o.Fleet, o.Requests[n-1].At)
		}
		if err == nil && f.writeTrace != "" {
			errs = append(errs, writeFile(f.writeTrace, func(w *os.File) error { return vllmsim.WriteAzureTrace(w, o.Requests) }))
		}
		if !f.noConsolidate {
			h, err := simulate.H100Fleet()
			errs = append(errs, err)
			h.Max, h.SLO, h.WarmUp = min(f.max, 16), f.slo, o.Fleet.WarmUp
			h.DrainTimeout, h.Routing = fleet.DrainTimeout, fleet.Routing
			o.ConsolidationFleet, o.ConsolidationTrigger = &h, simulate.SLOTrigger(f.slo)
		}
	}
	if !f.noTraining {
		o.Cluster, err = simulate.P5Cluster()
		errs = append(errs, err)
		o.Cluster.LimitGPUs = f.limitGPUs
		if f.jobs != "" {
			o.Jobs, err = readJobs(f.jobs)
			o.JobSource = fmt.Sprintf("%s (%d jobs)", filepath.Base(f.jobs), len(o.Jobs))
		} else {
			sj := f.syntheticJobs
			sj.Duration, sj.Seed = f.synthetic.Duration, f.synthetic.Seed
			o.Jobs, err = sj.Generate()
			o.JobSource = fmt.Sprintf("synthetic, %d jobs over %s (%.1f an hour; shapes %s; compute median %s, σ %.1f)",
				len(o.Jobs), sj.Duration, sj.PerHour, shapes(sj.Sizes), sj.DurationMedian, sj.DurationSigma)
		}
		errs = append(errs, err)
		if err == nil && f.writeJobs != "" {
			errs = append(errs, writeFile(f.writeJobs, func(w *os.File) error { return simulate.WriteJobs(w, o.Jobs) }))
		}
	}
	if f.noInference && f.noTraining {
		errs = append(errs, errors.New("--no-inference and --no-training leave nothing to simulate"))
	}
	return o, errors.Join(errs...)
}

// flagFleet is the serving fleet and berth's trigger for it the flags describe.
func flagFleet(f simulateFlags) (simulate.Fleet, map[string]string, error) {
	fleet, err := fleetPreset(f.fleet)
	if err != nil {
		return fleet, nil, err
	}
	trigger := simulate.SLOTrigger(f.slo)
	if len(f.trigger) > 0 {
		trigger = maps.Clone(f.trigger)
	}
	if f.warmSeats != 0 || f.minWarmSeats != 0 { // the trigger's own checks name the key
		trigger[scaler.KeyWarmSeats], trigger[scaler.KeyMinWarmSeats] = strconv.Itoa(f.warmSeats), strconv.Itoa(f.minWarmSeats)
	}
	fleet.Min, fleet.Max, fleet.SLO, fleet.WarmUp = f.min, f.max, f.slo, f.warmUp
	if f.nodeGPUs > 0 {
		if fleet.Sizes, err = simulate.SizesWithGPUs(fleet.Family, f.nodeGPUs); err != nil {
			return fleet, nil, fmt.Errorf("--node-gpus: %w", err)
		}
	}
	switch r := simulate.Routing(f.routing); r {
	case simulate.RoundRobin, simulate.LeastOutstanding:
		fleet.Routing = r
	default:
		return fleet, nil, fmt.Errorf("--routing %q: want %s or %s", f.routing, simulate.RoundRobin, simulate.LeastOutstanding)
	}
	fleet.DrainTimeout = f.drainTimeout
	if f.imagePullSet {
		fleet.ImagePull = f.imagePull
	}
	if f.modelLoadSet {
		fleet.ModelLoad = f.modelLoad
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--drain-timeout", fleet.DrainTimeout}, {"--image-pull", fleet.ImagePull}, {"--model-load", fleet.ModelLoad}} {
		if d.v < 0 {
			return fleet, nil, fmt.Errorf("%s %s: must not be negative", d.flag, d.v)
		}
	}
	return fleet, trigger, nil
}

// burstFreeRequests is the synthetic day the flags describe without its bursts, for
// --burst-blind.
func burstFreeRequests(f simulateFlags) ([]vllmsim.TraceRequest, error) {
	switch {
	case f.trace != "":
		return nil, errors.New("--burst-blind plans on the same day without its bursts: a synthetic day's (a trace's bursts are not known); leave out --trace")
	case f.synthetic.BurstEvery <= 0:
		return nil, errors.New("--burst-blind needs a day with bursts: --burst-every must be positive")
	case !f.oracle:
		return nil, errors.New("--burst-blind needs --oracle (it is the oracle's plan of the day without bursts)")
	}
	f.synthetic.BurstEvery = 0
	reqs, _, _, err := syntheticRequests(f)
	return reqs, err
}

// syntheticRequests draws the synthetic request trace the flags describe and says what it is.
func syntheticRequests(f simulateFlags) ([]vllmsim.TraceRequest, []time.Duration, string, error) {
	s := f.synthetic
	s.Lengths = simulate.Lengths(f.lengths)
	lengths := "lengths from the Azure LLM inference trace 2023 (conversation), CC-BY-4.0 © Microsoft"
	switch {
	case s.Lengths != simulate.LengthsTrace && s.Lengths != simulate.LengthsLogNormal:
		return nil, nil, "", fmt.Errorf("--lengths %q: want %s or %s", f.lengths, simulate.LengthsTrace, simulate.LengthsLogNormal)
	case f.lengthsFrom != "" && s.Lengths != simulate.LengthsTrace:
		return nil, nil, "", fmt.Errorf("--lengths-from needs --lengths %s, got %s", simulate.LengthsTrace, s.Lengths)
	case f.lengthsFrom != "":
		var err error
		if s.LengthTrace, err = readWith(f.lengthsFrom, "--lengths-from", vllmsim.ReadAzureTrace); err != nil {
			return nil, nil, "", err
		}
		lengths = "lengths from " + filepath.Base(f.lengthsFrom)
	case s.Lengths == simulate.LengthsLogNormal:
		lengths = fmt.Sprintf("log-normal lengths, medians %d and %d tokens", s.PromptMedian, s.OutputMedian)
	}
	reqs, bursts, err := s.GenerateWithBursts()
	return reqs, bursts, fmt.Sprintf("synthetic, %d requests over %s (mean %.2f/s, diurnal %.2f, bursts %.0f× for %s every %s, %s, seed %d)",
		len(reqs), s.Duration, s.MeanRate, s.Diurnal, s.BurstFactor, s.BurstLength, s.BurstEvery, lengths, s.Seed), err
}

// fleetPreset is a named serving fleet and berth's trigger for it.
func fleetPreset(name string) (simulate.Fleet, error) {
	switch name {
	case "l4":
		return simulate.L4Fleet()
	case "h100":
		return simulate.H100Fleet()
	}
	return simulate.Fleet{}, fmt.Errorf("--fleet %q: want l4 or h100", name)
}

func shapes(ss []simulate.JobShape) string {
	var parts []string
	for _, s := range ss {
		parts = append(parts, fmt.Sprintf("%d×%d GPUs %.0f %%", s.Members, s.GPUsPerMember, 100*s.Weight))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

func readTrace(path string) ([]vllmsim.TraceRequest, error) {
	return readWith(path, "--trace", vllmsim.ReadAzureTrace)
}

func readJobs(path string) ([]simulate.Job, error) {
	return readWith(path, "--jobs", simulate.ReadJobs)
}

// readWith reads the file at path with read; errors name the flag and the file.
func readWith[T any](path, flag string, read func(io.Reader) (T, error)) (T, error) {
	var zero T
	f, err := os.Open(path)
	if err != nil {
		return zero, fmt.Errorf("%s: %w", flag, err)
	}
	v, err := read(f)
	if err = errors.Join(err, f.Close()); err != nil {
		return zero, fmt.Errorf("%s %s: %w", flag, path, err)
	}
	return v, nil
}

func writeFile(path string, write func(*os.File) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(write(f), f.Close())
}
