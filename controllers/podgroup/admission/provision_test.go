package admission

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/scheduling"
	"github.com/berth-dev/berth/test/builders"
)

// TestNodeClaimsListedOncePerCycle: the NodeClaims behind admitted gangs' nodes are matched on
// provider ID or node name, from one list per cycle however many gangs it admits (each
// admission listed every NodeClaim in the cluster, uncached, before).
func TestNodeClaimsListedOncePerCycle(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	karpenter := schema.GroupVersion{Group: "karpenter.sh", Version: "v1"}
	scheme.AddKnownTypes(karpenter, &karpv1.NodeClaim{}, &karpv1.NodeClaimList{})
	metav1.AddToGroupVersion(scheme, karpenter)
	byProvider := &karpv1.NodeClaim{}
	byProvider.Name, byProvider.Status.ProviderID = "nc-a", "aws:///us-east-1a/i-a"
	byNode := &karpv1.NodeClaim{}
	byNode.Name, byNode.Status.NodeName = "nc-b", "n-b"
	other := &karpv1.NodeClaim{}
	other.Name, other.Status.NodeName = "nc-c", "n-c"
	lists := 0
	c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme).WithObjects(byProvider, byNode, other).Build(), interceptor.Funcs{
		List: func(ctx context.Context, cl client.WithWatch, l client.ObjectList, opts ...client.ListOption) error {
			lists++
			return cl.List(ctx, l, opts...)
		},
	})
	r := New(c, c, nil, nil, Options{})
	a := builders.Node("n-a").Obj()
	a.Spec.ProviderID = "aws:///us-east-1a/i-a"
	nodes := []*corev1.Node{a, builders.Node("n-b").Obj(), builders.Node("n-c").Obj()}
	cy := &cycle{nodes: nodes, snap: scheduling.NewSnapshot(nodes, nil, nil)}
	ctx := context.Background()
	if got := r.nodeClaimsOf(ctx, cy, []string{"n-a", "n-b"}); len(got) != 2 || got[0] != "nc-a" || got[1] != "nc-b" {
		t.Errorf("NodeClaims of n-a, n-b = %v, want [nc-a nc-b]", got)
	}
	if got := r.nodeClaimsOf(ctx, cy, []string{"n-c"}); len(got) != 1 || got[0] != "nc-c" {
		t.Errorf("NodeClaims of n-c = %v, want [nc-c]", got)
	}
	if lists != 1 {
		t.Errorf("%d NodeClaim lists in one cycle, want 1", lists)
	}
}

// TestAttemptCountsThisCyclesAdmissions: a gang admitted earlier in the cycle takes the only
// free node; the gang after it, which does not fit, asks for capacity for both its members. The
// shortfall is judged on the snapshot that counts booting nodes, which was built from the
// cycle's start and left out what the cycle had promised since: it asked for one seat, its other
// member "placed" on the node just given away, and the attempt could never complete.
func TestAttemptCountsThisCyclesAdmissions(t *testing.T) {
	older := metav1.NewTime(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC))
	a := builders.PodGroup("a", "ml").MinMember(1).Obj()
	a.UID, a.CreationTimestamp = "uid-a", older
	b := builders.PodGroup("b", "ml").MinMember(2).Obj()
	b.UID, b.CreationTimestamp = "uid-b", metav1.NewTime(older.Add(time.Minute))
	objs := []client.Object{builders.Node("n1").GPU(8).Allocatable(corev1.ResourceCPU, "96").Obj(), a, b}
	objs = append(objs, builders.Pod("a-0", "ml").Member("a").Gated().GPU(8).WithReleaseTerm("a").Obj())
	objs = append(objs, gatedMembers("b", 2)...)
	r, base := provisioningHarness(t, objs...)
	cycleOnce(t, r)
	var got berthv1alpha1.PodGroup
	if err := base.Get(context.Background(), client.ObjectKeyFromObject(a), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Status.Assignments) != 1 {
		t.Fatalf("gang a not admitted: %+v", got.Status)
	}
	if err := base.Get(context.Background(), client.ObjectKeyFromObject(b), &got); err != nil {
		t.Fatal(err)
	}
	if p := got.Status.Provisioning; p == nil || p.Seats != 2 {
		t.Errorf("gang b's attempt = %+v, want seats for both members (the free node went to gang a)", p)
	}
}

// TestAttemptDoesNotCountItsOwnRoom: 7 GPUs free and a gang of 8 — the attempt asks for one
// seat. The room the gang can already use is kept from the gangs after it; kept before the
// gang's own request was judged, the gang counted it as taken and asked for 8.
func TestAttemptDoesNotCountItsOwnRoom(t *testing.T) {
	g := builders.PodGroup("ddp", "ml").MinMember(8).Obj()
	g.UID = "uid-ddp"
	filler := builders.Pod("filler", "ml").GPU(1).Obj()
	filler.Spec.NodeName = "n1"
	filler.Status.Phase = corev1.PodRunning
	objs := []client.Object{builders.Node("n1").GPU(8).Allocatable(corev1.ResourceCPU, "96").Obj(), g, filler}
	for i := range 8 {
		objs = append(objs, builders.Pod(fmt.Sprintf("ddp-%d", i), "ml").Member("ddp").Gated().GPU(1).WithReleaseTerm("ddp").Obj())
	}
	r, base := provisioningHarness(t, objs...)
	// The first cycle reserves the node for the 7 that fit; the seats wait for the label to be
	// seen (a kube-scheduler that had not seen it could put the seat on that very room).
	cycleOnce(t, r)
	var n1 corev1.Node
	if err := base.Get(context.Background(), client.ObjectKey{Name: "n1"}, &n1); err != nil {
		t.Fatal(err)
	}
	if _, ok := n1.Labels[reserveKey(g)]; !ok {
		t.Errorf("n1 labels %v, want the gang's reservation", n1.Labels)
	}
	var seats corev1.PodList
	if err := base.List(context.Background(), &seats, client.HasLabels{berthv1alpha1.SeatOfLabel}); err != nil {
		t.Fatal(err)
	}
	if len(seats.Items) != 0 {
		t.Errorf("%d seats created with the reservation label not yet seen, want none", len(seats.Items))
	}
	cycleOnce(t, r)
	var got berthv1alpha1.PodGroup
	if err := base.Get(context.Background(), client.ObjectKeyFromObject(g), &got); err != nil {
		t.Fatal(err)
	}
	if p := got.Status.Provisioning; p == nil || p.Seats != 1 {
		t.Errorf("attempt = %+v, want one seat for the one member without a place", p)
	}
}

// TestRestartedGangSaysWhatItWaitsFor: a gang restarted whole (every member failed or deleted,
// none recreated yet) says it waits for its workload to recreate the members, and why a Job
// may take minutes; before, its Scheduled condition still said Admitted.
func TestRestartedGangSaysWhatItWaitsFor(t *testing.T) {
	g := builders.PodGroup("r8", "ml").MinMember(2).OnMemberLoss(berthv1alpha1.MemberLossRestartGang).Obj()
	g.UID = "uid-r8"
	g.Status.Assignments = []berthv1alpha1.MemberAssignment{{Pod: "r8-0", Node: "n1", UID: "uid-0"}, {Pod: "r8-1", Node: "n1", UID: "uid-1"}}
	g.Status.Conditions = []metav1.Condition{{Type: berthv1alpha1.ConditionScheduled, Status: metav1.ConditionTrue, Reason: berthv1alpha1.ReasonAdmitted, Message: "admitted"}}
	failed := builders.Pod("r8-0", "ml").Member("r8").GPU(1).ControlledBy("batch/v1", "Job", "r8").Phase(corev1.PodFailed).Obj()
	failed.UID, failed.Spec.NodeName = "uid-0", "n1"
	r, base, _, _, _ := budgetHarness(t, builders.Node("n1").GPU(8).Allocatable(corev1.ResourceCPU, "96").Obj(), g, failed)
	cycleOnce(t, r)
	var got berthv1alpha1.PodGroup
	if err := base.Get(context.Background(), client.ObjectKeyFromObject(g), &got); err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(got.Status.Conditions, berthv1alpha1.ConditionScheduled)
	if c == nil || c.Reason != berthv1alpha1.ReasonWaitingForMembers || !strings.Contains(c.Message, "r8-0, r8-1") || !strings.Contains(c.Message, "backoffLimitPerIndex") {
		t.Errorf("Scheduled = %+v, want WaitingForMembers naming both members and the Job's backoff", c)
	}
}

// TestAttemptKeepsASeatWhoseNodeTurnedReady: a running attempt with 2 seats, one seat's node
// Ready before the seat is bound there. The node reads as room for a member, so only one member
// lacks room — and the attempt still keeps both seats: shrinking to what was missing deleted
// the seat holding the node the gang asked for.
func TestAttemptKeepsASeatWhoseNodeTurnedReady(t *testing.T) {
	g := builders.PodGroup("ddp", "ml").MinMember(2).Obj()
	g.UID = "uid-ddp"
	started := metav1.NewTime(time.Date(2026, 1, 1, 11, 59, 50, 0, time.UTC))
	g.Status.WaitingSince = &started
	g.Status.Provisioning = &berthv1alpha1.ProvisioningStatus{Attempt: 1, Seats: 2, StartedAt: &started}
	objs := []client.Object{builders.Node("n1").GPU(8).Allocatable(corev1.ResourceCPU, "96").Obj(), g}
	for i := range 2 {
		objs = append(objs, builders.Pod(fmt.Sprintf("ddp-%d", i), "ml").Member("ddp").Gated().GPU(8).WithReleaseTerm("ddp").Obj())
		objs = append(objs, builders.Pod(seatName(g, 1, i), "berth-system").Label(berthv1alpha1.SeatOfLabel, string(g.UID)).GPU(8).Obj())
	}
	r, base := provisioningHarness(t, objs...)
	cycleOnce(t, r)
	var seats corev1.PodList
	if err := base.List(context.Background(), &seats, client.InNamespace("berth-system")); err != nil {
		t.Fatal(err)
	}
	if len(seats.Items) != 2 {
		t.Errorf("%d seats after the cycle, want the attempt's 2", len(seats.Items))
	}
}

func TestDecideAttempt(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: now.Add(d)} }
	for _, tc := range []struct {
		name     string
		p        *berthv1alpha1.ProvisioningStatus
		want     attemptStep
		wantWait time.Duration
	}{
		{"never asked: start", nil, attemptStart, 0},
		{"running: keep it whole", &berthv1alpha1.ProvisioningStatus{Attempt: 1, StartedAt: at(-time.Minute)}, attemptKeep, 0},
		{"running past the timeout: withdraw", &berthv1alpha1.ProvisioningStatus{Attempt: 1, StartedAt: at(-10 * time.Minute)}, attemptWithdraw, 0},
		{"failed, backing off: nothing asked", &berthv1alpha1.ProvisioningStatus{Attempt: 2, StartedAt: at(-time.Hour), FinishedAt: at(-time.Minute), RetryAt: at(30 * time.Second)}, attemptBackOff, 30 * time.Second},
		{"failed, backoff over: the next attempt", &berthv1alpha1.ProvisioningStatus{Attempt: 2, StartedAt: at(-time.Hour), FinishedAt: at(-time.Minute), RetryAt: at(0)}, attemptStart, 0},
		{"succeeded before (a new generation): a new attempt", &berthv1alpha1.ProvisioningStatus{Attempt: 1, StartedAt: at(-time.Hour), FinishedAt: at(-time.Minute)}, attemptStart, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, wait := decideAttempt(now, tc.p, 10*time.Minute); got != tc.want || wait != tc.wantWait {
				t.Errorf("decideAttempt = %v, %v; want %v, %v", got, wait, tc.want, tc.wantWait)
			}
		})
	}
}

func TestAttemptStatuses(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	first, msg := nextAttempt(nil, 3, now, "no node has 8 GPUs free")
	if first.Attempt != 1 || first.Seats != 3 || !first.StartedAt.Time.Equal(now) || !first.Active() ||
		msg != "attempt 1: requested capacity for 3 member(s) with no place (no node has 8 GPUs free)" {
		t.Fatalf("first attempt: %+v, %q", first, msg)
	}
	failed, msg, backoff := failedAttempt(first, now.Add(10*time.Minute), 10*time.Minute, "2 of 3 seats got no node")
	if failed.Active() || backoff != provisioningBackoffBase || !failed.RetryAt.Time.Equal(now.Add(10*time.Minute+backoff)) || first.FinishedAt != nil ||
		!strings.HasPrefix(msg, "attempt 1 failed: capacity for 3 member(s) was not Ready within 10m0s: 2 of 3 seats got no node") {
		t.Fatalf("failed attempt: %+v, %q, %v (the running one must not change: %+v)", failed, msg, backoff, first)
	}
	second, _ := nextAttempt(failed, 2, now.Add(time.Hour), "")
	if second.Attempt != 2 || second.Seats != 2 || second.LastFailure != failed.LastFailure || second.RetryAt != nil || !second.Active() {
		t.Errorf("second attempt: %+v; want attempt 2 keeping the last failure", second)
	}
	if second.Failures != 1 {
		t.Errorf("second attempt: %d failures in a row, want the first's 1 carried", second.Failures)
	}
	if f, _, b := failedAttempt(second, now.Add(time.Hour+10*time.Minute), 10*time.Minute, ""); b != 2*provisioningBackoffBase || f.Failures != 2 {
		t.Errorf("second failure in a row: backoff %v, %d failures; want %v, 2", b, f.Failures, 2*provisioningBackoffBase)
	}
	if _, _, b := failedAttempt(&berthv1alpha1.ProvisioningStatus{Attempt: 9, Failures: 8, Seats: 1, StartedAt: &metav1.Time{Time: now}}, now, time.Minute, ""); b != provisioningBackoffMax {
		t.Errorf("the 9th failure in a row: backoff %v, want the cap %v", b, provisioningBackoffMax)
	}
	// The backoff counts failures, not attempts: attempts that got their capacity, or were
	// withdrawn because the gang fell short of members, do not lengthen the next failure's wait.
	if _, _, b := failedAttempt(&berthv1alpha1.ProvisioningStatus{Attempt: 9, Seats: 1, StartedAt: &metav1.Time{Time: now}}, now, time.Minute, ""); b != provisioningBackoffBase {
		t.Errorf("the 9th attempt, the first to fail: backoff %v, want %v", b, provisioningBackoffBase)
	}
	st := &berthv1alpha1.PodGroupStatus{Provisioning: &berthv1alpha1.ProvisioningStatus{Attempt: 4, Failures: 3, Seats: 1, StartedAt: &metav1.Time{Time: now}}}
	finishProvisioning(st, &berthv1alpha1.PodGroup{}, metav1.NewTime(now.Add(time.Minute)), nil)
	if st.Provisioning.Failures != 0 || st.Provisioning.Active() {
		t.Errorf("an attempt that got its capacity: %+v; want it finished with no failures in a row", st.Provisioning)
	}
	// Admitted during its backoff (room freed elsewhere): the run of failures ends as well.
	retry := metav1.NewTime(now.Add(5 * time.Minute))
	backingOff := &berthv1alpha1.ProvisioningStatus{Attempt: 4, Failures: 3, Seats: 1, StartedAt: &metav1.Time{Time: now}, FinishedAt: &metav1.Time{Time: now}, RetryAt: &retry}
	st = &berthv1alpha1.PodGroupStatus{Provisioning: backingOff}
	finishProvisioning(st, &berthv1alpha1.PodGroup{}, metav1.NewTime(now.Add(time.Minute)), nil)
	if st.Provisioning.Failures != 0 || st.Provisioning.RetryAt != nil || backingOff.Failures != 3 {
		t.Errorf("admitted while backing off: %+v (the status read: %+v); want no failures in a row, the read status untouched", st.Provisioning, backingOff)
	}
}

// TestAttemptGrowsWhenItsRoomIsTaken: a running attempt holds one seat, counting on a free node
// for its other member — and another workload took that node (its pending seat scheduled
// there, or admitted there). The attempt asks for a second seat at once, instead of waiting out
// its timeout for room that will not come back; it never asks for more seats than members.
func TestAttemptGrowsWhenItsRoomIsTaken(t *testing.T) {
	g := builders.PodGroup("ddp", "ml").MinMember(2).Obj()
	g.UID = "uid-ddp"
	started := metav1.NewTime(time.Date(2026, 1, 1, 11, 59, 50, 0, time.UTC))
	g.Status.WaitingSince = &started
	g.Status.Provisioning = &berthv1alpha1.ProvisioningStatus{Attempt: 1, Seats: 1, StartedAt: &started}
	thief := builders.Pod("other", "ml").GPU(8).Obj()
	thief.Spec.NodeName, thief.Status.Phase = "n1", corev1.PodRunning
	objs := []client.Object{builders.Node("n1").GPU(8).Allocatable(corev1.ResourceCPU, "96").Label(reserveKey(g), "true").Obj(), g, thief,
		builders.Pod(seatName(g, 1, 0), "berth-system").Label(berthv1alpha1.SeatOfLabel, string(g.UID)).GPU(8).Obj()}
	objs = append(objs, gatedMembers("ddp", 2)...)
	r, base := provisioningHarness(t, objs...)
	for range 3 { // and it stays at two
		cycleOnce(t, r)
	}
	seats, got := attemptOf(t, base, g)
	if seats != 2 || got == nil || got.Seats != 2 || got.Attempt != 1 {
		t.Errorf("%d seats, attempt %+v; want attempt 1 grown to 2 seats", seats, got)
	}
}

// TestAttemptDoesNotGrowOnBootingRoom: an attempt sized counting a booting node as room (a gang
// of 3: one member on a Ready node, one on the booting node, one seat) keeps its one seat cycle
// after cycle — the booting node is capacity on its way, not room lost.
func TestAttemptDoesNotGrowOnBootingRoom(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC) // the harness's clock
	g := builders.PodGroup("ddp", "ml").MinMember(3).Obj()
	g.UID = "uid-ddp"
	started := metav1.NewTime(now.Add(-10 * time.Second))
	g.Status.WaitingSince = &started
	g.Status.Provisioning = &berthv1alpha1.ProvisioningStatus{Attempt: 1, Seats: 1, StartedAt: &started}
	booting := bootingNode(builders.Node("n2").GPU(8).Allocatable(corev1.ResourceCPU, "96").Obj(), now.Add(-time.Minute))
	objs := []client.Object{builders.Node("n1").GPU(8).Allocatable(corev1.ResourceCPU, "96").Label(reserveKey(g), "true").Obj(), booting, g,
		builders.Pod(seatName(g, 1, 0), "berth-system").Label(berthv1alpha1.SeatOfLabel, string(g.UID)).GPU(8).Obj()}
	objs = append(objs, gatedMembers("ddp", 3)...)
	r, base := provisioningHarness(t, objs...)
	for range 3 {
		cycleOnce(t, r)
	}
	seats, got := attemptOf(t, base, g)
	if seats != 1 || got == nil || got.Seats != 1 {
		t.Errorf("%d seats, attempt %+v; want the attempt's one seat", seats, got)
	}
}

// TestGrownSeatTakesTheUncoveredMembersShape: a leader (8 GPUs) and a worker (4 GPUs); the
// attempt's one seat is the worker's, the leader counted on a free node another workload then
// took. The seat the attempt grows is shaped for the leader, not a second worker's.
func TestGrownSeatTakesTheUncoveredMembersShape(t *testing.T) {
	g := builders.PodGroup("grp", "ml").MinMember(2).Obj()
	g.UID = "uid-grp"
	started := metav1.NewTime(time.Date(2026, 1, 1, 11, 59, 50, 0, time.UTC))
	g.Status.WaitingSince = &started
	g.Status.Provisioning = &berthv1alpha1.ProvisioningStatus{Attempt: 1, Seats: 1, StartedAt: &started}
	thief := builders.Pod("other", "ml").GPU(8).Obj()
	thief.Spec.NodeName, thief.Status.Phase = "n1", corev1.PodRunning
	seat := builders.Pod(seatName(g, 1, 0), "berth-system").Label(berthv1alpha1.SeatOfLabel, string(g.UID)).GPU(4).Obj()
	seat.Annotations = map[string]string{berthv1alpha1.SeatForMemberAnnotation: "grp-1"}
	objs := []client.Object{builders.Node("n1").GPU(8).Allocatable(corev1.ResourceCPU, "96").Label(reserveKey(g), "true").Obj(), g, thief, seat,
		builders.Pod("grp-0", "ml").Member("grp").Gated().GPU(8).WithReleaseTerm("grp").Obj(),
		builders.Pod("grp-1", "ml").Member("grp").Gated().GPU(4).WithReleaseTerm("grp").Obj()}
	r, base := provisioningHarness(t, objs...)
	cycleOnce(t, r)
	var grown corev1.Pod
	if err := base.Get(context.Background(), client.ObjectKey{Namespace: "berth-system", Name: seatName(g, 1, 1)}, &grown); err != nil {
		t.Fatalf("no grown seat: %v", err)
	}
	gpus := grown.Spec.Containers[0].Resources.Requests[berthv1alpha1.GPUResource]
	if grown.Annotations[berthv1alpha1.SeatForMemberAnnotation] != "grp-0" || gpus.Value() != 8 {
		t.Errorf("grown seat for %q with %s GPUs, want the leader grp-0's 8", grown.Annotations[berthv1alpha1.SeatForMemberAnnotation], gpus.String())
	}
}

// TestGrownSeatKeepsTheAttemptsHint: a gang that must share one zone, no member placed; its
// attempt's first seat was hinted to z2. When the attempt grows, the new seat prefers z2 too,
// though the nodes the members could use now point at z1: the seats must meet in one zone.
func TestGrownSeatKeepsTheAttemptsHint(t *testing.T) {
	g := builders.PodGroup("ddp", "ml").MinMember(2).Obj()
	g.UID = "uid-ddp"
	g.Spec.Topology = &berthv1alpha1.TopologySpec{RequiredKey: corev1.LabelTopologyZone}
	started := metav1.NewTime(time.Date(2026, 1, 1, 11, 59, 50, 0, time.UTC))
	g.Status.WaitingSince = &started
	g.Status.Provisioning = &berthv1alpha1.ProvisioningStatus{Attempt: 1, Seats: 1, StartedAt: &started}
	thief := builders.Pod("other", "ml").GPU(8).Obj()
	thief.Spec.NodeName, thief.Status.Phase = "n1", corev1.PodRunning
	seat := builders.Pod(seatName(g, 1, 0), "berth-system").Label(berthv1alpha1.SeatOfLabel, string(g.UID)).GPU(8).Obj()
	seat.Spec.Affinity = &corev1.Affinity{}
	preferDomain(seat.Spec.Affinity, corev1.LabelTopologyZone, "z2")
	objs := []client.Object{builders.Node("n1").GPU(8).Zone("z1").Allocatable(corev1.ResourceCPU, "96").Label(reserveKey(g), "true").Obj(), g, thief, seat}
	objs = append(objs, gatedMembers("ddp", 2)...)
	r, base := provisioningHarness(t, objs...)
	cycleOnce(t, r)
	var grown corev1.Pod
	if err := base.Get(context.Background(), client.ObjectKey{Namespace: "berth-system", Name: seatName(g, 1, 1)}, &grown); err != nil {
		t.Fatalf("no grown seat: %v", err)
	}
	if got := seatHint([]*corev1.Pod{&grown}, g.Spec.Topology); got != "z2" {
		t.Errorf("grown seat prefers %q (affinity %+v), want the attempt's z2", got, grown.Spec.Affinity)
	}
}

// attemptOf is how many seats exist (berth's namespace) and gang g's provisioning status.
func attemptOf(t *testing.T, base client.Client, g *berthv1alpha1.PodGroup) (int, *berthv1alpha1.ProvisioningStatus) {
	t.Helper()
	var seats corev1.PodList
	if err := base.List(context.Background(), &seats, client.InNamespace("berth-system")); err != nil {
		t.Fatal(err)
	}
	var got berthv1alpha1.PodGroup
	if err := base.Get(context.Background(), client.ObjectKeyFromObject(g), &got); err != nil {
		t.Fatal(err)
	}
	return len(seats.Items), got.Status.Provisioning
}

// gatedMembers are n gated members of gang g in namespace ml, 8 GPUs each, with their release
// term: a gang as the webhook leaves it.
func gatedMembers(g string, n int) []client.Object {
	out := make([]client.Object, n)
	for i := range n {
		out[i] = builders.Pod(fmt.Sprintf("%s-%d", g, i), "ml").Member(g).Gated().GPU(8).WithReleaseTerm(g).Obj()
	}
	return out
}

// provisioningHarness is budgetHarness with gang provisioning on: the reconciler and the
// client behind it.
func provisioningHarness(t *testing.T, objs ...client.Object) (*Reconciler, client.Client) {
	t.Helper()
	r, base, _, _, _ := budgetHarness(t, objs...)
	r.opts.Provisioning = ProvisioningOptions{Enabled: true}
	return r, base
}
