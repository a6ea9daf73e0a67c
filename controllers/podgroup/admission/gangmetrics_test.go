package admission

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/scheduling"
	"github.com/berth-dev/berth/test/builders"
)

// series reads every series of a gauge vector as "label=value,..." → value.
func series(t *testing.T, vec *prometheus.GaugeVec) map[string]float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 64)
	vec.Collect(ch)
	close(ch)
	out := map[string]float64{}
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		key := ""
		for _, l := range d.GetLabel() {
			key += l.GetName() + "=" + l.GetValue() + ","
		}
		out[key] = d.GetGauge().GetValue()
	}
	return out
}

// TestGangSeries: each gang has the series of the state it is in, labelled with its namespace
// and name (the NodePool it asks of where capacity is concerned), and loses them at the next
// cycle once it leaves that state.
func TestGangSeries(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: now.Add(-d)} }
	waiting := builders.PodGroup("wait", "team-a").MinMember(2).ScheduleTimeout(900).Obj()
	waiting.CreationTimestamp = *at(10 * time.Minute)
	waiting.Status.WaitingSince = at(8 * time.Minute)
	retrying := builders.PodGroup("retry", "team-a").MinMember(2).Obj()
	retrying.CreationTimestamp = *at(time.Hour)
	retrying.Status.ScheduleTimeouts, retrying.Status.ScheduleRetryAt = 2, &metav1.Time{Time: now.Add(time.Minute)}
	failed := builders.PodGroup("failed", "team-b").MinMember(2).Obj()
	failed.Status.Phase = berthv1alpha1.PodGroupFailed
	failed.Status.Conditions = []metav1.Condition{{Type: berthv1alpha1.ConditionScheduled, Status: metav1.ConditionFalse, Reason: berthv1alpha1.ReasonScheduleTimeout}}
	prov := builders.PodGroup("prov", "team-b").MinMember(2).NodePool("h100").Obj()
	prov.CreationTimestamp = *at(12 * time.Minute)
	prov.Status.Phase = berthv1alpha1.PodGroupProvisioning
	prov.Status.Provisioning = &berthv1alpha1.ProvisioningStatus{Attempt: 1, Seats: 2, StartedAt: at(11 * time.Minute)}
	prov.UID = "prov-uid"
	seats := []*corev1.Pod{
		builders.Pod("seat-0", "berth-system").Label(berthv1alpha1.SeatOfLabel, "prov-uid").Node("gpu-1").Obj(),
		builders.Pod("seat-1", "berth-system").Label(berthv1alpha1.SeatOfLabel, "prov-uid").Node("gpu-2").Obj(),
	}
	agent := builders.Pod("agent-x", "berth-system").Node("gpu-1").Obj()
	agent.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "agent", APIVersion: "apps/v1", Controller: ptr.To(true)}}
	user := builders.Pod("user", "team-c").Node("gpu-2").Obj()
	gpu1 := builders.Node("gpu-1").Label(karpv1.NodePoolLabelKey, "h100").Obj()
	gpu1.CreationTimestamp = *at(9 * time.Minute)
	gpu2 := builders.Node("gpu-2").Label(karpv1.NodePoolLabelKey, "h100").Obj()
	gpu2.CreationTimestamp = *at(20 * time.Minute)
	onNodes := []scheduling.PodOnNode{{Pod: seats[0], Node: "gpu-1"}, {Pod: seats[1], Node: "gpu-2"}, {Pod: agent, Node: "gpu-1"}, {Pod: user, Node: "gpu-2"}}
	groups := []*berthv1alpha1.PodGroup{waiting, retrying, failed, prov}
	recordGangSeries(gangStates(groups, nil, map[types.UID][]*corev1.Pod{"prov-uid": seats}), onNodes, []*corev1.Node{gpu1, gpu2}, now)

	for _, tc := range []struct {
		vec  *prometheus.GaugeVec
		want map[string]float64
	}{
		{gangWaiting, map[string]float64{
			"namespace=team-a,phase=Pending,podgroup=wait,": 600, "namespace=team-a,phase=Pending,podgroup=retry,": 3600,
			"namespace=team-b,phase=Provisioning,podgroup=prov,": 720}},
		{gangScheduleWait, map[string]float64{"namespace=team-a,podgroup=wait,": 480}},
		{gangScheduleTimeout, map[string]float64{"namespace=team-a,podgroup=wait,": 900}},
		{gangTimeouts, map[string]float64{"namespace=team-a,podgroup=retry,": 2, "namespace=team-b,podgroup=failed,": 1}},
		{gangProvisioning, map[string]float64{"namespace=team-b,nodepool=h100,podgroup=prov,": 660}},
		{gangProvisioningTimeout, map[string]float64{"namespace=team-b,nodepool=h100,podgroup=prov,": 600}},
		{gangSeats, map[string]float64{"namespace=team-b,podgroup=prov,": 2}},
		// gpu-1 holds a seat and a DaemonSet pod: seat-only; gpu-2 also runs a user's pod.
		{seatOnlyNodeAge, map[string]float64{"nodepool=h100,": 540}},
	} {
		if diff := cmp.Diff(tc.want, series(t, tc.vec)); diff != "" {
			t.Errorf("series (-want +got):\n%s", diff)
		}
	}

	// The next cycle: the waiting gang was admitted, the rest are gone. Their series go too.
	admitted := waiting.DeepCopy()
	admitted.Status.Phase, admitted.Status.WaitingSince = berthv1alpha1.PodGroupAdmitted, nil
	admitted.Status.Assignments = []berthv1alpha1.MemberAssignment{{Pod: "m0", Node: "n"}}
	recordGangSeries(gangStates([]*berthv1alpha1.PodGroup{admitted}, nil, nil), nil, nil, now)
	for _, s := range perGang {
		if got := series(t, s.vec); len(got) != 0 {
			t.Errorf("series left after the gangs left their state: %v", got)
		}
	}
}

// TestPerGangSeriesFitTheirKey: a gaugeSeries remembers a series by at most len(seriesKey.values)
// label values; a vector with more would be remembered by its first ones only and its series
// deleted under the wrong labels.
func TestPerGangSeriesFitTheirKey(t *testing.T) {
	for _, gs := range perGang {
		ch := make(chan *prometheus.Desc, 1)
		gs.vec.Describe(ch)
		d := (<-ch).String()
		_, labels, ok := strings.Cut(d, "variableLabels: {")
		if !ok {
			t.Fatalf("cannot read the labels of %s", d)
		}
		labels, _, _ = strings.Cut(labels, "}")
		if n := len(strings.Split(labels, ",")); n > len(seriesKey{}.values) {
			t.Errorf("%s has %d labels; seriesKey holds %d", d, n, len(seriesKey{}.values))
		}
	}
}
