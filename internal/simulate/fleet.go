package simulate

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/berth-dev/berth/internal/gpu"
	"github.com/berth-dev/berth/internal/vllmsim"
)

// Consolidation is the NodePool's consolidation policy for the fleet's nodes.
type Consolidation string

const (
	// WhenEmpty removes a node once it has been empty for ConsolidateAfter.
	WhenEmpty Consolidation = "WhenEmpty"
	// WhenEmptyOrUnderutilized also moves replicas off a partly used node whose replicas fit
	// on the others' free GPUs, evicting them: their requests are lost and they load their
	// model again elsewhere.
	WhenEmptyOrUnderutilized Consolidation = "WhenEmptyOrUnderutilized"
)

// Routing is how requests are spread over the serving replicas.
type Routing string

const (
	// RoundRobin is a Service's: each request goes to the next serving replica in turn.
	RoundRobin Routing = "round-robin"
	// LeastOutstanding is an endpoint picker's (a gateway's): each request goes to the serving
	// replica with the fewest requests running and waiting, the oldest replica on a tie.
	LeastOutstanding Routing = "least-outstanding"
)

// Fleet describes the serving fleet and the cluster under it: the engine every replica runs,
// the nodes Karpenter launches for it, and the time each step of a scale-up takes.
type Fleet struct {
	// Engine is the vLLM engine model of one replica (a vllmsim profile).
	Engine vllmsim.Config
	// Family is the GPU family the NodePool allows and Sizes its instance types Karpenter may
	// launch (every size with GPUs when empty). GPUsPerReplica and ReplicaCPU are what one
	// replica requests (GPUs for its tensor parallelism, cores). Karpenter packs the replicas
	// pending together onto as few nodes as one size holds and launches the cheapest size that
	// fits each node's replicas — a batch of four L4 replicas gets one g6.12xlarge, not four
	// g6.2xlarge — as its scheduler does.
	Family         gpu.Family
	Sizes          []gpu.Size
	GPUsPerReplica int
	ReplicaCPU     float64
	// Spot bills the nodes at the family's spot discount.
	Spot bool
	// NodeLaunch is from Karpenter's NodeClaim to a Ready node; ProvisionDelay from a pod
	// becoming pending to Karpenter's NodeClaim (its batching window).
	NodeLaunch, ProvisionDelay time.Duration
	// ImagePull is what pulling the serving image takes, once per node: the first pod that
	// starts on a node without the image waits for the pull, and so does a pod that starts
	// while it runs; a later pod on that node does not, even after the first is gone. ModelLoad
	// is from the image on the node to serving (weights, CUDA graphs), paid by every pod. A
	// zero ImagePull makes ModelLoad the whole start.
	ImagePull, ModelLoad time.Duration
	// DrainTimeout is the pods' terminationGracePeriodSeconds: a serving pod scaled down or
	// evicted gets SIGTERM, takes no new request and finishes the ones it holds for up to this
	// long, as vLLM does; what it still holds then is lost. Zero: lost at once.
	DrainTimeout time.Duration
	// Routing is how requests reach the serving replicas (empty: RoundRobin).
	Routing Routing
	// Consolidation and ConsolidateAfter are the NodePool's disruption settings; Guard is
	// berth's guard: serving replicas are do-not-disrupt, so only empty nodes go.
	Consolidation    Consolidation
	ConsolidateAfter time.Duration
	Guard            bool
	// Min and Max bound the replicas (the ScaledObject's or the HPA's).
	Min, Max int
	// WarmUp is the start of the trace that is replayed but not measured: the fleet starts at
	// Min replicas, which a real day's traffic would not find at its start. Requests arriving
	// before it and node time before it are left out of the results.
	WarmUp time.Duration
	// Tick is the simulation step: arrivals keep their exact times, the engine model is exact
	// between steps, and controllers act on step boundaries.
	Tick time.Duration
	// SLO is what a request must get to count as served well.
	SLO SLO
}

// SLO is the service-level objective every request is held to.
type SLO struct {
	// TTFT is the time to first token a request must get within; ITL the mean time between
	// its output tokens (time per output token).
	TTFT, ITL time.Duration
	// Timeout is how long a client waits for the first token before it gives up.
	Timeout time.Duration
}

// DefaultSLO is a chat SLO: first token within 2 s, 150 ms per output token on average (faster
// than people read), and clients that give up after 60 s without a token.
var DefaultSLO = SLO{TTFT: 2 * time.Second, ITL: 150 * time.Millisecond, Timeout: time.Minute}

// L4Fleet is an L4 fleet serving Llama-3.1-8B: replicas of one L4 and 4 cores (as the rig's
// vLLM Deployment asks) on any g6 size Karpenter picks, the vllmsim L4 profile, the family's
// launch time, a 30 s image pull on a fresh node and a 60 s model load (together
// vllmsim.DefaultModelLoad), a 60 s drain, round-robin routing, 1 to 16 replicas, WhenEmpty
// after 30 s, the first 30 minutes a warm-up.
func L4Fleet() (Fleet, error) {
	engine, err := vllmsim.Profile(vllmsim.ProfileL4Llama8B)
	if err != nil {
		return Fleet{}, err
	}
	fam, ok := gpu.ByGPU("l4")
	if !ok {
		return Fleet{}, errors.New("the GPU catalogue has no L4 family")
	}
	return Fleet{Engine: engine, Family: fam, GPUsPerReplica: 1, ReplicaCPU: 4,
		NodeLaunch: fam.LaunchTime, ProvisionDelay: 2 * time.Second, ImagePull: l4ImagePull, ModelLoad: vllmsim.DefaultModelLoad - l4ImagePull,
		DrainTimeout: DefaultDrainTimeout, Routing: RoundRobin,
		Consolidation: WhenEmpty, ConsolidateAfter: 30 * time.Second, Min: 1, Max: 16, Tick: time.Second, SLO: DefaultSLO,
		WarmUp: DefaultWarmUp}, nil
}

// l4ImagePull is the vLLM image's pull on a fresh g6 node: the part of
// vllmsim.DefaultModelLoad a warm node skips.
const l4ImagePull = 30 * time.Second

// DefaultDrainTimeout is the preset fleets' drain: twice Kubernetes' default
// terminationGracePeriodSeconds (30 s), time for the generations in flight to finish.
const DefaultDrainTimeout = time.Minute

// Validate reports what keeps f from describing a fleet.
func (f Fleet) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	if err := f.Engine.Validate(); err != nil {
		errs = append(errs, err)
	}
	check(f.Engine.Tokens != nil, "the engine must run the token model (a vllmsim profile): the simulator replays each request's lengths")
	check(f.GPUsPerReplica >= 1 && f.ReplicaCPU >= 0 && f.maxSlots() > 0, "a replica (%d GPUs, %.1f cores) fits no instance type of %s", f.GPUsPerReplica, f.ReplicaCPU, f.Family.Name)
	check(f.NodeLaunch >= 0 && f.ProvisionDelay >= 0 && f.ImagePull >= 0 && f.ModelLoad >= 0 && f.DrainTimeout >= 0 && f.ConsolidateAfter >= 0, "delays must not be negative")
	check(f.Routing == "" || f.Routing == RoundRobin || f.Routing == LeastOutstanding, "routing must be %s or %s, got %q", RoundRobin, LeastOutstanding, f.Routing)
	check(f.Min >= 1 && f.Max >= f.Min, "replicas must be 1 ≤ min ≤ max, got %d and %d", f.Min, f.Max)
	check(f.Tick > 0 && f.Tick <= time.Second && time.Second%f.Tick == 0, "tick must divide a second (every controller period is whole seconds), got %s", f.Tick)
	check(f.WarmUp >= 0, "warm-up must not be negative, got %s", f.WarmUp)
	check(f.Consolidation == WhenEmpty || f.Consolidation == WhenEmptyOrUnderutilized, "consolidation must be %s or %s, got %q", WhenEmpty, WhenEmptyOrUnderutilized, f.Consolidation)
	check(f.SLO.TTFT > 0 && f.SLO.ITL > 0 && f.SLO.Timeout >= f.SLO.TTFT, "the SLO needs positive TTFT and ITL targets and a timeout at least the TTFT target")
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid fleet: %w", err)
	}
	return nil
}

// routing is f's routing, RoundRobin when unset.
func (f Fleet) routing() Routing {
	if f.Routing == "" {
		return RoundRobin
	}
	return f.Routing
}

// SizesWithGPUs is the family's sizes with exactly gpus GPUs: what a nodeSelector on
// karpenter.k8s.aws/instance-gpu-count leaves Karpenter.
func SizesWithGPUs(f gpu.Family, gpus int) ([]gpu.Size, error) {
	var out []gpu.Size
	var have []string
	for _, s := range f.Sizes {
		if s.GPUs == int64(gpus) {
			out = append(out, s)
		}
		have = append(have, fmt.Sprint(s.GPUs))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s has no size with %d GPUs (its sizes have %s)", f.Name, gpus, strings.Join(have, ", "))
	}
	return out, nil
}

// sizes are the instance types Karpenter may launch.
func (f Fleet) sizes() []gpu.Size {
	if len(f.Sizes) > 0 {
		return f.Sizes
	}
	var out []gpu.Size
	for _, s := range f.Family.Sizes {
		if s.GPUs > 0 {
			out = append(out, s)
		}
	}
	return out
}

// slots is how many replicas a node of size holds: its GPUs and its allocatable cores.
func (f Fleet) slots(size gpu.Size) int {
	n := int(size.GPUs) / max(f.GPUsPerReplica, 1)
	if f.ReplicaCPU > 0 {
		n = min(n, int((float64(size.VCPU)-kubeReservedCPU(size.VCPU))/f.ReplicaCPU+1e-9))
	}
	return n
}

// maxSlots is the most replicas one node can hold.
func (f Fleet) maxSlots() int {
	n := 0
	for _, s := range f.sizes() {
		n = max(n, f.slots(s))
	}
	return n
}

// cheapestFor is the cheapest size that holds n replicas (false: none does).
func (f Fleet) cheapestFor(n int) (gpu.Size, bool) {
	var best gpu.Size
	found := false
	for _, s := range f.sizes() {
		if f.slots(s) >= n && (!found || s.OnDemandUSD < best.OnDemandUSD) {
			best, found = s, true
		}
	}
	return best, found
}

// kubeReservedCPU is the CPU the EKS AMI reserves for the kubelet on a node with vcpu cores
// (what Karpenter subtracts too): 6 % of the first core, 1 % of the second, 0.5 % of the
// next two, 0.25 % of the rest.
func kubeReservedCPU(vcpu int64) float64 {
	v := float64(vcpu)
	return 0.06*min(v, 1) + 0.01*min(max(v-1, 0), 1) + 0.005*min(max(v-2, 0), 2) + 0.0025*max(v-4, 0)
}

// pricePerHour is a node's price.
func (f Fleet) pricePerHour(size gpu.Size) float64 {
	if f.Spot {
		return size.OnDemandUSD * f.Family.SpotDiscount
	}
	return size.OnDemandUSD
}

// DefaultWarmUp is the warm-up of the preset fleets: long enough for a fleet that starts at
// one replica to reach the trace's load through a few cold starts.
const DefaultWarmUp = 30 * time.Minute

// never marks a time that has not come.
const never = time.Duration(math.MaxInt64)
