package admission

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	bmetrics "github.com/berth-dev/berth/internal/metrics"
	"github.com/berth-dev/berth/scheduling"
)

// Per-gang series: what on-call needs to route an alert to the team (namespace) and the gang
// (podgroup). A gang has series only while the state they describe lasts, so their number is
// the number of gangs in that state, not every gang ever seen.
var (
	gangLabels = []string{bmetrics.LabelNamespace, bmetrics.LabelPodGroup}

	gangWaiting = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "podgroup", Name: "waiting_seconds",
		Help: "Seconds since a gang that is not admitted (phase Pending or Provisioning) was created, per PodGroup and phase.",
	}, append(gangLabels[:2:2], bmetrics.LabelPhase))
	gangScheduleWait = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "podgroup", Name: "schedule_wait_seconds",
		Help: "Seconds a gang's schedule-timeout clock has run (status.waitingSince: every member exists and none is held by another scheduler), per PodGroup; the gang times out when it reaches berth_podgroup_schedule_timeout_seconds.",
	}, gangLabels)
	gangScheduleTimeout = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "podgroup", Name: "schedule_timeout_seconds",
		Help: "The scheduleTimeoutSeconds of each gang whose schedule-timeout clock runs, per PodGroup.",
	}, gangLabels)
	gangTimeouts = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "podgroup", Name: "schedule_timeouts",
		Help: "Schedule timeouts of a gang's current wait (status.scheduleTimeouts; 1 for a gang that failed on its timeout), per PodGroup, while there are any.",
	}, gangLabels)
	gangPartial = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "podgroup", Name: "partially_running",
		Help: "1 for each admitted gang with some members running and fewer running or succeeded than its generation needs, more than 2 minutes after admission, per PodGroup.",
	}, gangLabels)
	gangProvisioning = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "podgroup", Name: "provisioning_seconds",
		Help: "Seconds a gang's capacity request in flight (its seats) has run, per PodGroup and the NodePool it asks of (spec.nodePool, empty for any).",
	}, append(gangLabels[:2:2], bmetrics.LabelNodePool))
	gangProvisioningTimeout = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "podgroup", Name: "provisioning_timeout_seconds",
		Help: "The provisioningTimeoutSeconds of each gang with a capacity request in flight, per PodGroup and NodePool: berth withdraws the seats when the request reaches it.",
	}, append(gangLabels[:2:2], bmetrics.LabelNodePool))
	gangSeats = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "podgroup", Name: "seats",
		Help: "Seat pods holding capacity for a gang, per PodGroup, while there are any.",
	}, gangLabels)
	seatOnlyNodeAge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "podgroup", Name: "seat_only_node_oldest_seconds",
		Help: "Age of the oldest node whose only pods (DaemonSets aside) are berth's seats, per NodePool: capacity launched for a gang that no member uses yet, billed while it waits.",
	}, []string{bmetrics.LabelNodePool})

	perGang = []*gaugeSeries{
		{vec: gangWaiting}, {vec: gangScheduleWait}, {vec: gangScheduleTimeout}, {vec: gangTimeouts}, {vec: gangPartial},
		{vec: gangProvisioning}, {vec: gangProvisioningTimeout}, {vec: gangSeats}, {vec: seatOnlyNodeAge},
	}
	perGangMu sync.Mutex
	// perGangByVec finds a vector's gaugeSeries.
	perGangByVec = func() map[*prometheus.GaugeVec]*gaugeSeries {
		m := make(map[*prometheus.GaugeVec]*gaugeSeries, len(perGang))
		for _, gs := range perGang {
			m[gs.vec] = gs
		}
		return m
	}()
)

// gaugeSeries sets a gauge vector's series for one cycle and deletes, at flush, those the cycle
// did not set. It never resets the vector: a scrape between a reset and the new values would see
// no series and restart every alert's `for` clock. Its two sets of series are kept and cleared
// between cycles rather than made anew (they were a per-gang garbage of every cycle).
type gaugeSeries struct {
	vec        *prometheus.GaugeVec
	last, next map[seriesKey]struct{}
}

// seriesKey is one series' label values (the per-gang vectors have at most three labels).
type seriesKey struct {
	n      int
	values [3]string
}

func (k seriesKey) labels() []string { return k.values[:k.n] }

func (s *gaugeSeries) set(v float64, labels ...string) {
	if s.next == nil {
		s.next = map[seriesKey]struct{}{}
	}
	var k seriesKey
	k.n = copy(k.values[:], labels) // TestPerGangSeriesFitTheirKey: no vector has more labels
	s.next[k] = struct{}{}
	s.vec.WithLabelValues(labels...).Set(v)
}

func (s *gaugeSeries) flush() {
	for k := range s.last {
		if _, ok := s.next[k]; !ok {
			s.vec.DeleteLabelValues(k.labels()...)
		}
	}
	clear(s.last)
	s.last, s.next = s.next, s.last
}

// gangState is what the per-gang series read of one PodGroup.
type gangState struct {
	group   *berthv1alpha1.PodGroup
	members []*corev1.Pod
	seats   []*corev1.Pod
}

// recordGangSeries sets every per-gang series from one cycle's view and drops the series of
// gangs no longer in the state they describe.
func recordGangSeries(gangs []gangState, onNodes []scheduling.PodOnNode, nodes []*corev1.Node, now time.Time) {
	perGangMu.Lock()
	defer perGangMu.Unlock()
	s := perGangByVec
	for _, st := range gangs {
		g := st.group
		ns, name := g.Namespace, g.Name
		phase := g.Status.Phase
		if phase == "" {
			phase = berthv1alpha1.PodGroupPending
		}
		if phase == berthv1alpha1.PodGroupPending || phase == berthv1alpha1.PodGroupProvisioning {
			s[gangWaiting].set(now.Sub(g.CreationTimestamp.Time).Seconds(), ns, name, string(phase))
		}
		if g.Status.WaitingSince != nil && g.Status.ScheduleRetryAt == nil && len(g.Status.Assignments) == 0 {
			s[gangScheduleWait].set(now.Sub(g.Status.WaitingSince.Time).Seconds(), ns, name)
			s[gangScheduleTimeout].set(scheduleTimeoutOf(g).Seconds(), ns, name)
		}
		if n := timeoutsOf(g); n > 0 {
			s[gangTimeouts].set(float64(n), ns, name)
		}
		if partiallyRunningGang(g, st.members, now) {
			s[gangPartial].set(1, ns, name)
		}
		if p := g.Status.Provisioning; p.Active() {
			s[gangProvisioning].set(now.Sub(p.StartedAt.Time).Seconds(), ns, name, g.Spec.NodePool)
			s[gangProvisioningTimeout].set(provisioningTimeoutOf(g).Seconds(), ns, name, g.Spec.NodePool)
		}
		if len(st.seats) > 0 {
			s[gangSeats].set(float64(len(st.seats)), ns, name)
		}
	}
	for pool, age := range seatOnlyNodes(onNodes, nodes, now) {
		s[seatOnlyNodeAge].set(age.Seconds(), pool)
	}
	for _, gs := range perGang {
		gs.flush()
	}
}

// scheduleTimeoutOf is the gang's schedule timeout.
func scheduleTimeoutOf(g *berthv1alpha1.PodGroup) time.Duration {
	s := berthv1alpha1.DefaultScheduleTimeoutSeconds
	if g.Spec.ScheduleTimeoutSeconds != nil {
		s = *g.Spec.ScheduleTimeoutSeconds
	}
	return time.Duration(s) * time.Second
}

// timeoutsOf is the schedule timeouts of the gang's current wait, or 1 for a gang that failed on
// its timeout.
func timeoutsOf(g *berthv1alpha1.PodGroup) int32 {
	if g.Status.ScheduleTimeouts > 0 {
		return g.Status.ScheduleTimeouts
	}
	for _, c := range g.Status.Conditions {
		if c.Type == berthv1alpha1.ConditionScheduled && c.Reason == berthv1alpha1.ReasonScheduleTimeout && g.Status.Phase == berthv1alpha1.PodGroupFailed {
			return 1
		}
	}
	return 0
}

// seatOnlyNodes is, per NodePool, the age of the oldest node whose only pods are seats
// (DaemonSet pods aside).
func seatOnlyNodes(onNodes []scheduling.PodOnNode, nodes []*corev1.Node, now time.Time) map[string]time.Duration {
	// Seats are few: count the other pods only on nodes that have one (a count of every node's
	// pods was garbage of every cycle). A count of -1 marks a node with a pod other than seats.
	var seats map[string]int
	for _, pn := range onNodes {
		if pn.Pod.Labels[berthv1alpha1.SeatOfLabel] != "" {
			if seats == nil {
				seats = map[string]int{}
			}
			seats[pn.Node]++
		}
	}
	if len(seats) == 0 {
		return nil
	}
	for _, pn := range onNodes {
		if n, ok := seats[pn.Node]; ok && n > 0 && pn.Pod.Labels[berthv1alpha1.SeatOfLabel] == "" && !ownedByDaemonSet(pn.Pod) {
			seats[pn.Node] = -1
		}
	}
	out := map[string]time.Duration{}
	for _, n := range nodes {
		if seats[n.Name] <= 0 {
			continue
		}
		pool := n.Labels[karpv1.NodePoolLabelKey]
		out[pool] = max(out[pool], now.Sub(n.CreationTimestamp.Time))
	}
	return out
}

// ownedByDaemonSet reports whether a pod is a DaemonSet's.
func ownedByDaemonSet(p *corev1.Pod) bool {
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}

// gangStates pairs each PodGroup with its members and seats.
func gangStates(groups []*berthv1alpha1.PodGroup, members map[string][]*corev1.Pod, seats map[types.UID][]*corev1.Pod) []gangState {
	out := make([]gangState, len(groups))
	for i, g := range groups {
		out[i] = gangState{group: g, members: members[g.Namespace+"/"+g.Name], seats: seats[g.UID]}
	}
	return out
}
