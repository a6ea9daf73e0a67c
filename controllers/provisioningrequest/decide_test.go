package provisioningrequest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	autoscalingv1 "k8s.io/autoscaler/cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/scheduling"
	"github.com/berth-dev/berth/test/builders"
)

var t0 = time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)

var tm = timing{booking: DefaultBookingTime, expiration: DefaultExpiration, provisioning: 10 * time.Minute}

// request is a ProvisioningRequest of class created at t0 with conds.
func request(class string, conds ...metav1.Condition) *autoscalingv1.ProvisioningRequest {
	return &autoscalingv1.ProvisioningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "job-a-prov-1", Namespace: "team-a", UID: "uid-pr", CreationTimestamp: metav1.NewTime(t0)},
		Spec:       autoscalingv1.ProvisioningRequestSpec{ProvisioningClassName: class, PodSets: []autoscalingv1.PodSet{{PodTemplateRef: autoscalingv1.Reference{Name: "ppt"}, Count: 2}}},
		Status:     autoscalingv1.ProvisioningRequestStatus{Conditions: conds},
	}
}

func condAt(typ string, status metav1.ConditionStatus, reason string, at time.Time) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, LastTransitionTime: metav1.NewTime(at)}
}

var accepted = condAt(autoscalingv1.Accepted, metav1.ConditionTrue, ReasonAccepted, t0)

func gpuPods(n int) []*corev1.Pod {
	var out []*corev1.Pod
	for i := range n {
		out = append(out, builders.Pod("p-"+string(rune('a'+i)), "team-a").GPU(8).Obj())
	}
	return out
}

// seatAt is a seat created at created, bound to node ("" unbound), pinned when pinned.
func seatAt(name string, created time.Time, node string, pinned bool) *corev1.Pod {
	s := builders.Pod(name, "berth-system").Node(node).Obj()
	s.CreationTimestamp = metav1.NewTime(created)
	s.Annotations = map[string]string{}
	if pinned {
		s.Annotations[berthv1alpha1.PinnedNodeAnnotation] = "n1"
	}
	return s
}

func consumer(name, node string, gates ...string) *corev1.Pod {
	p := builders.Pod(name, "team-a").Node(node).Obj()
	p.Annotations = map[string]string{autoscalingv1.ProvisioningRequestPodAnnotationKey: "job-a-prov-1"}
	for _, g := range gates {
		p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: g})
	}
	return p
}

var fits = scheduling.Result{Assignments: []scheduling.Assignment{{Pod: "p-a", Node: "n1"}, {Pod: "p-b", Node: "n2"}}}
var noFit = scheduling.Result{Reason: "0 of 2 pods fit"}

func allReady(string) bool { return true }

func TestDecide(t *testing.T) {
	provisioned := condAt(autoscalingv1.Provisioned, metav1.ConditionTrue, ReasonCapacityIsProvisioned, t0.Add(time.Minute))
	notFound := condAt(autoscalingv1.Provisioned, metav1.ConditionFalse, ReasonCapacityIsNotFound, t0.Add(time.Minute))
	boundSeats := []*corev1.Pod{seatAt("s0", t0, "n1", false), seatAt("s1", t0, "n2", false)}
	for _, tc := range []struct {
		name string
		o    observation
		// want: the conditions set (type=status/reason), seats created (pinned ones' nodes), seats removed, requeue.
		wantConds   []string
		wantCreate  []string
		wantRemove  int
		wantRequeue time.Duration
		wantEvent   string
		wantReclaim bool
	}{
		{name: "check-capacity, fits: accepted, seats pinned to the nodes with room",
			o:         observation{pr: request(autoscalingv1.ProvisioningClassCheckCapacity), now: t0, pods: gpuPods(2), fit: fits, ready: allReady},
			wantConds: []string{"Accepted=True/Accepted"}, wantCreate: []string{"n1", "n2"}, wantRequeue: time.Second},
		{name: "check-capacity, does not fit: CapacityIsNotFound, retried after a minute",
			o:         observation{pr: request(autoscalingv1.ProvisioningClassCheckCapacity, accepted), now: t0, pods: gpuPods(2), fit: noFit, ready: allReady},
			wantConds: []string{"Provisioned=False/CapacityIsNotFound"}, wantRequeue: time.Minute},
		{name: "check-capacity with noRetry, does not fit: Failed",
			o: observation{pr: func() *autoscalingv1.ProvisioningRequest {
				pr := request(autoscalingv1.ProvisioningClassCheckCapacity, accepted)
				pr.Spec.Parameters = map[string]autoscalingv1.Parameter{"noRetry": "true"}
				return pr
			}(), now: t0, pods: gpuPods(2), fit: noFit, ready: allReady},
			wantConds: []string{"Failed=True/CapacityIsNotFound"}},
		{name: "not found before, backoff not over: waits",
			o: observation{pr: func() *autoscalingv1.ProvisioningRequest {
				pr := request(autoscalingv1.ProvisioningClassCheckCapacity, accepted, notFound)
				pr.Status.ProvisioningClassDetails = map[string]autoscalingv1.Detail{berthv1alpha1.ProvisioningAttemptsDetail: "2"}
				return pr
			}(), now: t0.Add(2 * time.Minute), pods: gpuPods(2), fit: fits, ready: allReady},
			wantRequeue: time.Minute},
		{name: "best-effort-atomic, does not fit: a seat for every pod, unpinned, in one batch",
			o:          observation{pr: request(autoscalingv1.ProvisioningClassBestEffortAtomicScaleUp, accepted), now: t0, pods: gpuPods(2), fit: noFit, ready: allReady},
			wantCreate: []string{"", ""}, wantRequeue: time.Second, wantEvent: "CapacityRequested"},
		{name: "best-effort-atomic, seats on Ready nodes: Provisioned CapacityIsProvisioned",
			o:         observation{pr: request(autoscalingv1.ProvisioningClassBestEffortAtomicScaleUp, accepted), now: t0.Add(3 * time.Minute), pods: gpuPods(2), seats: boundSeats, ready: allReady},
			wantConds: []string{"Provisioned=True/CapacityIsProvisioned"}, wantRequeue: DefaultBookingTime, wantEvent: "CapacityBooked"},
		{name: "check-capacity, pinned seats bound: Provisioned CapacityIsFound",
			o: observation{pr: request(autoscalingv1.ProvisioningClassCheckCapacity, accepted), now: t0.Add(time.Second), pods: gpuPods(2),
				seats: []*corev1.Pod{seatAt("s0", t0, "n1", true), seatAt("s1", t0, "n1", true)}, ready: allReady},
			wantConds: []string{"Provisioned=True/CapacityIsFound"}, wantRequeue: DefaultBookingTime, wantEvent: "CapacityBooked"},
		{name: "seats bound to a node not Ready yet: waits",
			o: observation{pr: request(autoscalingv1.ProvisioningClassBestEffortAtomicScaleUp, accepted), now: t0.Add(3 * time.Minute), pods: gpuPods(2), seats: boundSeats,
				ready: func(n string) bool { return n == "n1" }},
			wantRequeue: 5 * time.Second},
		{name: "a seat missing mid-attempt (preempted, deleted, a failed Create): created again",
			o: observation{pr: request(autoscalingv1.ProvisioningClassBestEffortAtomicScaleUp, accepted), now: t0.Add(3 * time.Minute), pods: gpuPods(2),
				seats: boundSeats[:1], ready: allReady},
			wantCreate: []string{""}, wantRequeue: 5 * time.Second},
		{name: "a dead seat (rejected by the kubelet) on a Ready node: no room; it goes and comes back",
			o: observation{pr: request(autoscalingv1.ProvisioningClassBestEffortAtomicScaleUp, accepted), now: t0.Add(3 * time.Minute), pods: gpuPods(2),
				seats: boundSeats[:1], dead: []*corev1.Pod{boundSeats[1]}, ready: allReady},
			wantCreate: []string{""}, wantRemove: 1, wantRequeue: 5 * time.Second},
		{name: "every seat died mid-attempt: the attempt ended (reclaimed, backoff), not a new batch at once",
			o: observation{pr: request(autoscalingv1.ProvisioningClassBestEffortAtomicScaleUp, accepted), now: t0.Add(3 * time.Minute), pods: gpuPods(2),
				dead: boundSeats, fit: noFit, ready: allReady},
			wantConds: []string{"Provisioned=False/CapacityIsNotFound"}, wantRemove: 2, wantRequeue: time.Minute, wantEvent: "CapacityNotProvisioned", wantReclaim: true},
		{name: "booked past the booking time with a consumer on its way: no node reclaimed under it",
			o: observation{pr: request(autoscalingv1.ProvisioningClassBestEffortAtomicScaleUp, accepted, provisioned), now: t0.Add(11 * time.Minute), pods: gpuPods(2),
				seats: boundSeats, consuming: []*corev1.Pod{consumer("c0", "")}, ready: allReady},
			wantConds: []string{"BookingExpired=True/CapacityReservationTimeExpired"}, wantRemove: 2, wantEvent: "BookingReleased"},
		{name: "booked, a seat died: reported, the dead one goes",
			o: observation{pr: request(autoscalingv1.ProvisioningClassBestEffortAtomicScaleUp, accepted, provisioned), now: t0.Add(2 * time.Minute), pods: gpuPods(2),
				seats: boundSeats[:1], dead: []*corev1.Pod{boundSeats[1]}, ready: allReady},
			wantRemove: 1, wantRequeue: 9 * time.Minute, wantEvent: "BookedCapacityLost"},
		{name: "a pinned seat missing: not created again (its room is gone; the bind timeout ends the attempt)",
			o: observation{pr: request(autoscalingv1.ProvisioningClassCheckCapacity, accepted), now: t0.Add(time.Second), pods: gpuPods(2),
				seats: []*corev1.Pod{seatAt("s0", t0, "n1", true)}, ready: allReady},
			wantRequeue: 5 * time.Second},
		{name: "attempt out of time: seats go, CapacityIsNotFound, backoff",
			o: observation{pr: request(autoscalingv1.ProvisioningClassBestEffortAtomicScaleUp, accepted), now: t0.Add(11 * time.Minute), pods: gpuPods(2),
				seats: []*corev1.Pod{seatAt("s0", t0, "n1", false), seatAt("s1", t0, "", false)}, ready: allReady},
			wantConds: []string{"Provisioned=False/CapacityIsNotFound"}, wantRemove: 2, wantRequeue: time.Minute, wantEvent: "CapacityNotProvisioned", wantReclaim: true},
		{name: "booked, one consumer arrived: one seat gives way",
			o: observation{pr: request(autoscalingv1.ProvisioningClassBestEffortAtomicScaleUp, accepted, provisioned), now: t0.Add(2 * time.Minute), pods: gpuPods(2),
				seats: boundSeats, consuming: []*corev1.Pod{consumer("c0", "")}, ready: allReady},
			wantRemove: 1, wantRequeue: 9 * time.Minute},
		{name: "booked, consumer still gated by Kueue: nothing gives way",
			o: observation{pr: request(autoscalingv1.ProvisioningClassBestEffortAtomicScaleUp, accepted, provisioned), now: t0.Add(2 * time.Minute), pods: gpuPods(2),
				seats: boundSeats, consuming: []*corev1.Pod{consumer("c0", "", "kueue.x-k8s.io/admission")}, ready: allReady},
			wantRequeue: 9 * time.Minute},
		{name: "booked, consumer gated by berth's gang gate: a seat gives way (the gang needs the room to be admitted)",
			o: observation{pr: request(autoscalingv1.ProvisioningClassBestEffortAtomicScaleUp, accepted, provisioned), now: t0.Add(2 * time.Minute), pods: gpuPods(2),
				seats: boundSeats, consuming: []*corev1.Pod{consumer("c0", "", berthv1alpha1.SchedulingGate)}, ready: allReady},
			wantRemove: 1, wantRequeue: 9 * time.Minute},
		{name: "booked, every consumer bound: CapacityBookingConsumed",
			o: observation{pr: request(autoscalingv1.ProvisioningClassBestEffortAtomicScaleUp, accepted, provisioned), now: t0.Add(2 * time.Minute), pods: gpuPods(2),
				consuming: []*corev1.Pod{consumer("c0", "n1"), consumer("c1", "n2")}, ready: allReady},
			wantConds: []string{"BookingExpired=True/CapacityBookingConsumed"}, wantEvent: "BookingReleased", wantReclaim: true},
		{name: "booked past the booking time: CapacityReservationTimeExpired, seats go",
			o: observation{pr: request(autoscalingv1.ProvisioningClassBestEffortAtomicScaleUp, accepted, provisioned), now: t0.Add(11 * time.Minute), pods: gpuPods(2),
				seats: boundSeats, ready: allReady},
			wantConds: []string{"BookingExpired=True/CapacityReservationTimeExpired"}, wantRemove: 2, wantEvent: "BookingReleased", wantReclaim: true},
		{name: "booked, a seat lost before its pod arrived: reported, not revoked",
			o: observation{pr: request(autoscalingv1.ProvisioningClassBestEffortAtomicScaleUp, accepted, provisioned), now: t0.Add(2 * time.Minute), pods: gpuPods(2),
				seats: boundSeats[:1], ready: allReady},
			wantRequeue: 9 * time.Minute, wantEvent: "BookedCapacityLost"},
		{name: "missing PodTemplate: Failed FailedToCreatePods",
			o:         observation{pr: request(autoscalingv1.ProvisioningClassCheckCapacity, accepted), now: t0, podsErr: errors.New("PodTemplate team-a/ppt not found"), ready: allReady},
			wantConds: []string{"Failed=True/FailedToCreatePods"}, wantReclaim: true},
		{name: "unprovisioned for a week: Failed Expired",
			o:         observation{pr: request(autoscalingv1.ProvisioningClassBestEffortAtomicScaleUp, accepted, notFound), now: t0.Add(DefaultExpiration), pods: gpuPods(2), fit: noFit, ready: allReady},
			wantConds: []string{"Failed=True/Expired"}, wantReclaim: true},
		{name: "failed: its seats go, nothing else",
			o: observation{pr: request(autoscalingv1.ProvisioningClassBestEffortAtomicScaleUp, accepted, condAt(autoscalingv1.Failed, metav1.ConditionTrue, ReasonExpired, t0)),
				now: t0, pods: gpuPods(2), seats: boundSeats, ready: allReady},
			wantRemove: 2, wantReclaim: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := decide(tc.o, tm)
			var conds []string
			for _, c := range p.conditions {
				conds = append(conds, c.Type+"="+string(c.Status)+"/"+c.Reason)
			}
			if !equal(conds, tc.wantConds) {
				t.Errorf("conditions %v, want %v", conds, tc.wantConds)
			}
			var create []string
			for _, s := range p.create {
				create = append(create, s.node)
			}
			if !equal(create, tc.wantCreate) {
				t.Errorf("seats created (pinned nodes) %q, want %q", create, tc.wantCreate)
			}
			if len(p.remove) != tc.wantRemove {
				t.Errorf("%d seats removed, want %d", len(p.remove), tc.wantRemove)
			}
			if p.requeue != tc.wantRequeue {
				t.Errorf("requeue %s, want %s", p.requeue, tc.wantRequeue)
			}
			if p.reclaim != tc.wantReclaim {
				t.Errorf("reclaim %v, want %v", p.reclaim, tc.wantReclaim)
			}
			if p.eventReason != tc.wantEvent {
				t.Errorf("event %q, want %q", p.eventReason, tc.wantEvent)
			}
		})
	}
}

// TestBookedHoldsTheRoomUntilItsPodBinds: a seat on a node that gives way to an arrived pod no
// gate holds leaves its room held for that pod (a copy under the seat's UID, on the seat's
// node) until the pod binds; the hold is carried across looks, let go once the pod is bound
// and when the booking ends. A pod berth's gang gate holds gets none (its gang's admission
// places it), nor does one that arrived for an unbound seat (no room to hold).
func TestBookedHoldsTheRoomUntilItsPodBinds(t *testing.T) {
	provisioned := condAt(autoscalingv1.Provisioned, metav1.ConditionTrue, ReasonCapacityIsProvisioned, t0.Add(time.Minute))
	pr := request(autoscalingv1.ProvisioningClassBestEffortAtomicScaleUp, accepted, provisioned)
	tm := timing{booking: DefaultBookingTime, expiration: DefaultExpiration, provisioning: DefaultProvisioningTimeout}
	seats := []*corev1.Pod{seatAt("s0", t0, "n1", false), seatAt("s1", t0, "n2", false)}
	seats[0].UID, seats[1].UID = "uid-s0", "uid-s1"
	now := t0.Add(2 * time.Minute)
	held := func(p plan) []string {
		var out []string
		for _, h := range p.hold {
			out = append(out, fmt.Sprintf("%s@%s/%s", h.Pod.Name, h.Node, h.Pod.UID))
		}
		return out
	}

	// c0 arrives: s0 gives way, its room held for c0.
	o := observation{pr: pr, now: now, pods: gpuPods(2), seats: seats, consuming: []*corev1.Pod{consumer("c0", "")}, ready: allReady}
	p := decide(o, tm)
	if d := cmp.Diff([]string{"c0@n1/uid-s0"}, held(p)); d != "" || !p.setHold || len(p.remove) != 1 || !p.holdUntil.Equal(now.Add(consumerBindWait)) {
		t.Fatalf("c0 arrived: hold (-want +got):\n%s set %v until %s, removed %d", d, p.setHold, p.holdUntil, len(p.remove))
	}
	if p.hold[0].Pod == o.consuming[0] {
		t.Error("the hold shares the cache's pod")
	}
	// The next look: s0 gone, c0 still waiting: the hold stays; c1 arrives and s1 gives way.
	o.seats, o.held = seats[1:], p.hold
	o.consuming = []*corev1.Pod{consumer("c0", ""), consumer("c1", "")}
	p = decide(o, tm)
	if d := cmp.Diff([]string{"c0@n1/uid-s0", "c1@n2/uid-s1"}, held(p)); d != "" {
		t.Fatalf("c1 arrived (-want +got):\n%s", d)
	}
	// c0 binds: its hold goes, c1's stays.
	o.seats, o.held = nil, p.hold
	o.consuming = []*corev1.Pod{consumer("c0", "n1"), consumer("c1", "")}
	p = decide(o, tm)
	if d := cmp.Diff([]string{"c1@n2/uid-s1"}, held(p)); d != "" || !p.setHold {
		t.Fatalf("c0 bound (-want +got):\n%s", d)
	}
	// Both bound: the booking is consumed and the hold let go.
	o.held = p.hold
	o.consuming = []*corev1.Pod{consumer("c0", "n1"), consumer("c1", "n2")}
	if p = decide(o, tm); !p.setHold || len(p.hold) != 0 {
		t.Fatalf("booking consumed: set %v hold %v, want the hold let go", p.setHold, held(p))
	}
	// The booking time passes with c1 still waiting: let go too.
	o.now, o.consuming = t0.Add(11*time.Minute), []*corev1.Pod{consumer("c0", "n1"), consumer("c1", "")}
	if p = decide(o, tm); !p.setHold || len(p.hold) != 0 {
		t.Fatalf("booking expired: set %v hold %v, want the hold let go", p.setHold, held(p))
	}
	// A berth gang's member, gated or released by admission (pinned): no hold — its gang's
	// admission places it, and the ledger counts a released member already.
	pinned := consumer("g1", "")
	pinned.Annotations[berthv1alpha1.PinnedNodeAnnotation] = "n1"
	for _, m := range []*corev1.Pod{consumer("g0", "", berthv1alpha1.SchedulingGate), pinned} {
		o = observation{pr: pr, now: now, pods: gpuPods(2), seats: seats, ready: allReady, consuming: []*corev1.Pod{m}}
		if p = decide(o, tm); len(p.hold) != 0 || len(p.remove) != 1 {
			t.Fatalf("gang member %s: hold %v, removed %d; want no hold, one seat given way", m.Name, held(p), len(p.remove))
		}
	}
	// A pod that arrived for an unbound seat: no room to hold.
	unbound := seatAt("s2", t0, "", false)
	o = observation{pr: pr, now: now, pods: gpuPods(2), seats: []*corev1.Pod{seats[0], unbound}, ready: allReady,
		consuming: []*corev1.Pod{consumer("c0", "")}}
	if p = decide(o, tm); len(p.hold) != 0 || p.remove[0].Name != "s2" {
		t.Fatalf("the unbound seat gave way: hold %v; want none", held(p))
	}
}

// TestBookingReleasesUnboundSeatsFirst: a seat not bound yet holds nothing; it goes first.
func TestBookingReleasesUnboundSeatsFirst(t *testing.T) {
	seats := []*corev1.Pod{seatAt("s0", t0, "n1", false), seatAt("s1", t0, "", false)}
	if got := releaseOrder(seats); got[0].Name != "s1" {
		t.Errorf("released first: %s, want the unbound s1", got[0].Name)
	}
}

func TestRetryBackoff(t *testing.T) {
	want := []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 10 * time.Minute, 10 * time.Minute}
	for i, w := range want {
		if got := retryBackoff(i + 1); got != w {
			t.Errorf("after %d failures: %s, want %s", i+1, got, w)
		}
	}
}

// TestSeatPinnedSeatsNameTheirNode: a seat on existing capacity names its node (Karpenter
// provisions nothing for it) and keeps the pod's own node affinity.
func TestSeatPinnedSeatsNameTheirNode(t *testing.T) {
	pr := request(autoscalingv1.ProvisioningClassCheckCapacity)
	pod := builders.Pod("p", "team-a").GPU(8).NodeAffinityIn("karpenter.k8s.aws/instance-family", "p5").Obj()
	s := seatPod(pr, seatSpec{pod: pod, index: 3, node: "n1"}, "berth-system", "pause")
	if s.Namespace != "berth-system" || s.Labels[berthv1alpha1.SeatForProvisioningRequestLabel] != "uid-pr" || s.Annotations[berthv1alpha1.SeatForProvisioningRequestAnnotation] != "team-a/job-a-prov-1" {
		t.Errorf("seat identity: %s/%s %v %v", s.Namespace, s.Name, s.Labels, s.Annotations)
	}
	term := s.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0]
	if len(term.MatchExpressions) != 1 || len(term.MatchFields) != 1 || term.MatchFields[0].Values[0] != "n1" {
		t.Errorf("pinned seat's term: %+v", term)
	}
	free := seatPod(pr, seatSpec{pod: pod, index: 4}, "berth-system", "pause")
	if _, ok := free.Annotations[berthv1alpha1.PinnedNodeAnnotation]; ok || len(free.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields) != 0 {
		t.Error("a seat for Karpenter names a node")
	}
	if free.Spec.Containers[0].Resources.Limits.Name(berthv1alpha1.GPUResource, "").Value() != 8 {
		t.Errorf("seat limits %v", free.Spec.Containers[0].Resources.Limits)
	}
	if pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields != nil {
		t.Error("seatPod modified the pod it stands for")
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
