package admission

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	bmetrics "github.com/berth-dev/berth/internal/metrics"
)

var (
	// placements counts placement attempts by result: admitted, no_fit, unsupported, timeout.
	placements = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: bmetrics.Namespace, Subsystem: "podgroup", Name: "placement_attempts_total",
		Help: "Gang placement attempts by result (admitted, no_fit, unsupported, timeout).",
	}, []string{bmetrics.LabelResult})

	// admissionLatency is the time from a gang's last member being created to all its gates
	// removed (stage=released) and to all its members bound (stage=bound).
	admissionLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: bmetrics.Namespace, Subsystem: "podgroup", Name: "admission_latency_seconds",
		Help:    "Seconds from a gang's last member being created until all gates were removed (stage=released) or all members were bound (stage=bound).",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
	}, []string{bmetrics.LabelStage})

	// gangs counts PodGroups by phase, as of the last admission cycle.
	gangs = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "podgroup", Name: "gangs",
		Help: "PodGroups by phase, as of the last admission cycle.",
	}, []string{bmetrics.LabelPhase})

	// cycleDuration is how long one admission cycle takes.
	provisioningAttempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: bmetrics.Namespace, Subsystem: "podgroup", Name: "provisioning_attempts_total",
		Help: "Capacity requests for gangs that did not fit existing nodes, by the gang's namespace, the NodePool it asks of (spec.nodePool, empty for any) and result (started, provisioned, timeout, withdrawn: the gang fell short of members while it ran).",
	}, []string{bmetrics.LabelNamespace, bmetrics.LabelNodePool, bmetrics.LabelResult})
	provisioningDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: bmetrics.Namespace, Subsystem: "podgroup", Name: "provisioning_duration_seconds",
		Help:    "Seconds from a gang's capacity request (seats created) to every seat on a Ready node and the gang admitted.",
		Buckets: prometheus.ExponentialBuckets(5, 2, 10),
	})
	oldestWaiting = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "podgroup", Name: "oldest_waiting_seconds",
		Help: "Age of the oldest gang in a waiting phase (Pending, Provisioning), from its creation; 0 when none waits.",
	}, []string{bmetrics.LabelPhase})
	partiallyRunning = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "podgroup", Name: "partially_running_gangs",
		Help: "Gangs whose admitted generation runs in part (some members running, others of it neither running nor succeeded), admitted more than " + partialGrace.String() + " ago: GPUs held by members that wait for their peers.",
	})
	generations = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: bmetrics.Namespace, Subsystem: "podgroup", Name: "generations_total",
		Help: "Gangs admitted whole again after their previous generation ended (a workload restart, a Job's next wave).",
	})
	strandedMembers = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: bmetrics.Namespace, Subsystem: "podgroup", Name: "stranded_members_total",
		Help: "Released members kube-scheduler could not bind where they were pinned (their node gone, or its room taken), replaced by berth.",
	})
	seatsCreated = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: bmetrics.Namespace, Subsystem: "podgroup", Name: "seats_created_total",
		Help: "Seat pods created to hold capacity for gang members.",
	})
	markedNodes = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "podgroup", Name: "do_not_disrupt_nodes",
		Help: "Nodes carrying berth's karpenter.sh/do-not-disrupt mark (scheduling.berth.dev/do-not-disrupt-by: berth), as the last admission cycle read them: nodes a gang's running capacity request counts on, kept from Karpenter's consolidation and drift until the attempt ends. Marks left with no gang provisioning (berth uninstalled mid-attempt) are removed as runbooks/emergency.md §4 says.",
	})
	fenced = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: bmetrics.Namespace, Subsystem: "podgroup", Name: "fenced_total",
		Help: "Promises and releases this replica did not make because it no longer held the leader Lease for long enough (see LeaseFence).",
	})
	admissionErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: bmetrics.Namespace, Subsystem: "podgroup", Name: "admission_errors_total",
		Help: "Steps of gang admission that failed (an API write refused or failing), by the gang's namespace and PodGroup (both empty: the cluster-wide clean-ups). Each failing gang backs off alone; the others go on.",
	}, gangLabels)
	lastCycle = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "podgroup", Name: "admission_last_cycle_timestamp_seconds",
		Help: "Unix time at which this replica last finished an admission cycle (0: none yet; only the leader runs cycles, at least every resync, 30 s by default). The per-gang \"seconds\" gauges are as of that time: a cycle that no longer finishes freezes them, and the alerts add the time since.",
	})
	cycleDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: bmetrics.Namespace, Subsystem: "podgroup", Name: "admission_cycle_duration_seconds",
		Help:    "Seconds one gang admission cycle takes (snapshot, placement and releases).",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
	})
)

func init() {
	ctrlmetrics.Registry.MustRegister(Collectors()...)
}

// resultLabel maps a Scheduled condition reason to a placement result label.
func resultLabel(reason string) string {
	if reason == berthv1alpha1.ReasonUnsupported {
		return ResultUnsupported
	}
	return ResultNoFit
}

// Values of the result label: berth_podgroup_placement_attempts_total takes the Result*
// placement values, berth_podgroup_provisioning_attempts_total the Provisioning* values.
const (
	ResultAdmitted          = "admitted"
	ResultNoFit             = "no_fit"
	ResultUnsupported       = "unsupported"
	ResultTimeout           = "timeout"
	ProvisioningStarted     = "started"
	ProvisioningProvisioned = "provisioned"
	ProvisioningTimeout     = "timeout"
	ProvisioningWithdrawn   = "withdrawn"
)

// PlacementResults and ProvisioningResults are every value of the two counters' result label
// (the alert tests check the rules' label values against them).
var (
	PlacementResults    = []string{ResultAdmitted, ResultNoFit, ResultUnsupported, ResultTimeout}
	ProvisioningResults = []string{ProvisioningStarted, ProvisioningProvisioned, ProvisioningTimeout, ProvisioningWithdrawn}
)

// lastCreated is when the newest of the members was created.
func lastCreated(members []*corev1.Pod) time.Time {
	var t time.Time
	for _, m := range members {
		if m.CreationTimestamp.After(t) {
			t = m.CreationTimestamp.Time
		}
	}
	return t
}

func observeReleased(members []*corev1.Pod, at time.Time) {
	admissionLatency.WithLabelValues("released").Observe(at.Sub(lastCreated(members)).Seconds())
}

// recordPhases sets the gangs gauge.
func recordPhases(gs []*berthv1alpha1.PodGroup) {
	counts := map[berthv1alpha1.PodGroupPhase]float64{}
	for _, g := range gs {
		p := g.Status.Phase
		if p == "" {
			p = berthv1alpha1.PodGroupPending
		}
		counts[p]++
	}
	for _, p := range []berthv1alpha1.PodGroupPhase{berthv1alpha1.PodGroupPending, berthv1alpha1.PodGroupProvisioning,
		berthv1alpha1.PodGroupAdmitted, berthv1alpha1.PodGroupRunning, berthv1alpha1.PodGroupSucceeded, berthv1alpha1.PodGroupFailed} {
		gangs.WithLabelValues(string(p)).Set(counts[p])
	}
}

// partialGrace is how long after admission a gang may have only some members running (they
// are being bound and started) before it counts as partially running.
const partialGrace = 2 * time.Minute

// recordGangHealth sets the oldest-waiting and partially-running gauges.
func recordGangHealth(gs []*berthv1alpha1.PodGroup, members map[string][]*corev1.Pod, now time.Time) {
	oldest := map[berthv1alpha1.PodGroupPhase]float64{berthv1alpha1.PodGroupPending: 0, berthv1alpha1.PodGroupProvisioning: 0}
	partial := 0
	for _, g := range gs {
		phase := g.Status.Phase
		if phase == "" {
			phase = berthv1alpha1.PodGroupPending
		}
		if age, ok := oldest[phase]; ok {
			oldest[phase] = max(age, now.Sub(g.CreationTimestamp.Time).Seconds())
			continue
		}
		if partiallyRunningGang(g, members[g.Namespace+"/"+g.Name], now) {
			partial++
		}
	}
	for p, age := range oldest {
		oldestWaiting.WithLabelValues(string(p)).Set(age)
	}
	partiallyRunning.Set(float64(partial))
}

// partiallyRunningGang reports whether some of an admitted gang's generation run while fewer
// than it needs run or finished well — minMember, or the generation's size when it is smaller (a
// Job's last wave) — past partialGrace after admission. A lost member's assignment stays beside
// its replacement's, so the generation's size counts both: a replaced member does not make a
// gang partial, a missing one does.
func partiallyRunningGang(g *berthv1alpha1.PodGroup, members []*corev1.Pod, now time.Time) bool {
	phase := g.Status.Phase
	if phase == berthv1alpha1.PodGroupSucceeded || phase == berthv1alpha1.PodGroupFailed ||
		g.Status.AdmittedAt == nil || now.Sub(g.Status.AdmittedAt.Time) < partialGrace {
		return false
	}
	gen := classify(members, g.Status.Assignments)
	running := 0
	for _, m := range gen.live {
		if m.Status.Phase == corev1.PodRunning {
			running++
		}
	}
	return running > 0 && running+gen.succeeded < min(int(g.Spec.MinMember), len(gen.assigned))
}

// Collectors are the package's metrics, as registered with controller-runtime's registry
// (docs/metrics.md is generated from them).
func Collectors() []prometheus.Collector {
	out := []prometheus.Collector{placements, admissionLatency, gangs, cycleDuration, lastCycle, admissionErrors, provisioningAttempts, provisioningDuration, seatsCreated, oldestWaiting, partiallyRunning, generations, strandedMembers, fenced, markedNodes}
	for _, s := range perGang {
		out = append(out, s.vec)
	}
	return out
}
