package admission

import (
	"context"
	"k8s.io/utils/clock"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/scheduling"
	"github.com/berth-dev/berth/test/builders"
)

func TestSeatPod(t *testing.T) {
	base := func() *berthv1alpha1.PodGroup {
		g := builders.PodGroup("ddp", "ml").MinMember(2).Obj()
		g.UID = types.UID("uid-1")
		return g
	}
	member := builders.Pod("ddp-0", "ml").Member("ddp").GPU(2).Request(corev1.ResourceCPU, "4").
		NodeSelector("karpenter.k8s.aws/instance-family", "p5").InitContainer("init", "8", false).Obj()
	member.Spec.Tolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}}
	reservation := corev1.NodeSelectorRequirement{Key: berthv1alpha1.ReservationLabelPrefix + "uid-1", Operator: corev1.NodeSelectorOpDoesNotExist}

	tests := []struct {
		name    string
		group   func() *berthv1alpha1.PodGroup
		member  *corev1.Pod
		sf      scheduling.Shortfall
		volumes scheduling.VolumeTopology
		check   func(t *testing.T, seat *corev1.Pod)
	}{
		{
			name:  "copies the member's effective requests, selectors and tolerations",
			group: base, member: member,
			check: func(t *testing.T, seat *corev1.Pod) {
				t.Helper()
				req := seat.Spec.Containers[0].Resources.Requests
				if got := req[corev1.ResourceCPU]; got.Cmp(resource.MustParse("8")) != 0 {
					t.Errorf("cpu request = %s, want 8 (the init container's, the larger)", got.String())
				}
				if got := req["nvidia.com/gpu"]; got.Value() != 2 {
					t.Errorf("gpu request = %s, want 2", got.String())
				}
				lim := seat.Spec.Containers[0].Resources.Limits
				if got := lim["nvidia.com/gpu"]; got.Value() != 2 {
					t.Errorf("gpu limit = %s, want 2 (extended resources need limits)", got.String())
				}
				if _, ok := lim[corev1.ResourceCPU]; ok {
					t.Errorf("cpu limit set: %v", lim)
				}
				if seat.Spec.NodeSelector["karpenter.k8s.aws/instance-family"] != "p5" {
					t.Errorf("nodeSelector = %v", seat.Spec.NodeSelector)
				}
				if diff := cmp.Diff(member.Spec.Tolerations, seat.Spec.Tolerations); diff != "" {
					t.Errorf("tolerations (-member +seat):\n%s", diff)
				}
				if seat.Spec.PriorityClassName != berthv1alpha1.SeatPriorityClassName || seat.Annotations["karpenter.sh/do-not-disrupt"] != "true" {
					t.Errorf("priority class %q, annotations %v", seat.Spec.PriorityClassName, seat.Annotations)
				}
				if seat.Labels[berthv1alpha1.SeatOfLabel] != "uid-1" || seat.Labels[berthv1alpha1.PodGroupLabel] != "" {
					t.Errorf("labels %v: want the seat label and no member label (no gate)", seat.Labels)
				}
				if len(seat.OwnerReferences) != 0 || seat.Annotations[berthv1alpha1.SeatForGroupAnnotation] != "ml/ddp" {
					t.Errorf("owner references %+v, group annotation %q: want none (another namespace) and ml/ddp",
						seat.OwnerReferences, seat.Annotations[berthv1alpha1.SeatForGroupAnnotation])
				}
				terms := seat.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
				if len(terms) != 1 || len(terms[0].MatchExpressions) != 1 || terms[0].MatchExpressions[0].Key != reservation.Key {
					t.Errorf("node affinity %+v: want only the reservation term", terms)
				}
				if seat.Spec.Affinity.PodAffinity != nil {
					t.Error("pod affinity without a topology key")
				}
			},
		},
		{
			name: "nodePool and topology: NodePool selector, domain, affinity among seats",
			group: func() *berthv1alpha1.PodGroup {
				g := base()
				g.Spec.NodePool = "gpu-h100"
				g.Spec.Topology = &berthv1alpha1.TopologySpec{RequiredKey: corev1.LabelTopologyZone}
				return g
			},
			member: member,
			sf:     scheduling.Shortfall{Domain: "us-west-2a"},
			check: func(t *testing.T, seat *corev1.Pod) {
				t.Helper()
				if seat.Spec.NodeSelector["karpenter.sh/nodepool"] != "gpu-h100" {
					t.Errorf("nodeSelector = %v", seat.Spec.NodeSelector)
				}
				terms := seat.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
				want := []corev1.NodeSelectorRequirement{reservation, {Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"us-west-2a"}}}
				if diff := cmp.Diff(want, terms[0].MatchExpressions); diff != "" {
					t.Errorf("node affinity (-want +got):\n%s", diff)
				}
				pa := seat.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution
				if len(pa) != 1 || pa[0].TopologyKey != corev1.LabelTopologyZone || pa[0].LabelSelector.MatchLabels[berthv1alpha1.SeatOfLabel] != "uid-1" {
					t.Errorf("pod affinity %+v", pa)
				}
			},
		},
		{
			name: "topology, no member placed: the hinted domain preferred first, nothing required",
			group: func() *berthv1alpha1.PodGroup {
				g := base()
				g.Spec.Topology = &berthv1alpha1.TopologySpec{RequiredKey: corev1.LabelTopologyZone}
				return g
			},
			member: func() *corev1.Pod {
				m := member.DeepCopy()
				m.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{
					{Weight: 100, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "capacity", Operator: corev1.NodeSelectorOpIn, Values: []string{"spot"}}}}},
				}}}
				return m
			}(),
			sf: scheduling.Shortfall{Hint: "us-west-2c"},
			check: func(t *testing.T, seat *corev1.Pod) {
				t.Helper()
				terms := seat.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
				if diff := cmp.Diff([]corev1.NodeSelectorRequirement{reservation}, terms[0].MatchExpressions); diff != "" {
					t.Errorf("required node affinity (-want +got):\n%s", diff)
				}
				pref := seat.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution
				spot := corev1.NodeSelectorRequirement{Key: "capacity", Operator: corev1.NodeSelectorOpIn, Values: []string{"spot"}}
				hinted := corev1.NodeSelectorRequirement{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"us-west-2c"}}
				if len(pref) != 2 || pref[0].Weight != 100 || !cmp.Equal(pref[0].Preference.MatchExpressions, []corev1.NodeSelectorRequirement{spot, hinted}) ||
					!cmp.Equal(pref[1].Preference.MatchExpressions, []corev1.NodeSelectorRequirement{spot}) {
					t.Errorf("preferred node affinity %+v: want the member's heaviest preference with the hinted zone first, the member's own after it", pref)
				}
				if seat.Spec.Affinity.PodAffinity == nil {
					t.Error("no pod affinity among the seats")
				}
			},
		},
		{
			name:  "one member per node: seats spread the same way",
			group: base,
			member: builders.Pod("ddp-0", "ml").Member("ddp").GPU(8).
				PodAntiAffinity(corev1.LabelHostname, berthv1alpha1.PodGroupLabel, "ddp").Obj(),
			check: func(t *testing.T, seat *corev1.Pod) {
				t.Helper()
				anti := seat.Spec.Affinity.PodAntiAffinity
				if anti == nil || len(anti.RequiredDuringSchedulingIgnoredDuringExecution) != 1 ||
					anti.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey != corev1.LabelHostname {
					t.Errorf("anti-affinity %+v", anti)
				}
			},
		},
		{
			name:  "host ports and volume topology: seats land where the member could",
			group: base,
			member: builders.Pod("ddp-0", "ml").Member("ddp").GPU(8).HostNetwork(29500).
				NodeAffinityIn(corev1.LabelInstanceTypeStable, "p5.48xlarge", "p5e.48xlarge").Obj(),
			volumes: scheduling.VolumeTopology{Required: []corev1.NodeSelector{{NodeSelectorTerms: []corev1.NodeSelectorTerm{
				{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"us-west-2a"}}}},
				{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"us-west-2b"}}}},
			}}}},
			check: func(t *testing.T, seat *corev1.Pod) {
				t.Helper()
				want := []corev1.ContainerPort{{ContainerPort: 29500, HostPort: 29500, Protocol: corev1.ProtocolTCP}}
				if diff := cmp.Diff(want, seat.Spec.Containers[0].Ports); diff != "" {
					t.Errorf("seat ports (-want +got):\n%s", diff)
				}
				if seat.Spec.HostNetwork {
					t.Error("the seat runs in the host network; its ports are enough")
				}
				terms := seat.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
				if len(terms) != 2 {
					t.Fatalf("node affinity %+v: want the member's term ANDed with each volume zone", terms)
				}
				for i, z := range []string{"us-west-2a", "us-west-2b"} {
					ex := terms[i].MatchExpressions
					if len(ex) != 3 || ex[0].Key != corev1.LabelInstanceTypeStable || ex[1].Key != reservation.Key || ex[2].Values[0] != z {
						t.Errorf("term %d = %+v", i, ex)
					}
				}
			},
		},
		{
			name:  "a member's required pod-affinity keys: the seat's node must have them (the release term's kubernetes.io/os)",
			group: base,
			member: func() *corev1.Pod {
				m := builders.Pod("ddp-0", "ml").Member("ddp").GPU(8).Obj()
				m.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
					berthv1alpha1.ReleaseTerm("ddp")}}}
				return m
			}(),
			check: func(t *testing.T, seat *corev1.Pod) {
				t.Helper()
				want := corev1.NodeSelectorRequirement{Key: corev1.LabelOSStable, Operator: corev1.NodeSelectorOpExists}
				for _, term := range seat.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
					if !slices.ContainsFunc(term.MatchExpressions, func(r corev1.NodeSelectorRequirement) bool { return r.Key == want.Key && r.Operator == want.Operator }) {
						t.Errorf("seat term %+v lacks %v: it may land where its member cannot follow", term, want)
					}
				}
			},
		},
		{
			name:  "anti-affinity against other pods is not copied",
			group: base,
			member: builders.Pod("ddp-0", "ml").Member("ddp").GPU(8).
				PodAntiAffinity(corev1.LabelHostname, "app", "noisy").Obj(),
			check: func(t *testing.T, seat *corev1.Pod) {
				t.Helper()
				if seat.Spec.Affinity.PodAntiAffinity != nil {
					t.Errorf("anti-affinity %+v", seat.Spec.Affinity.PodAntiAffinity)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := tt.group()
			seat := seatPod(g, tt.member, tt.volumes, seatIdentity{namespace: "berth-system", name: seatName(g, 1, 0), image: DefaultSeatImage}, tt.sf)
			if seat.Name != "ddp-uid-1-seat-1-0" || seat.Namespace != "berth-system" {
				t.Errorf("seat %s/%s", seat.Namespace, seat.Name)
			}
			tt.check(t, seat)
		})
	}
}

func TestProvisioningBackoff(t *testing.T) {
	for failures, want := range map[int32]time.Duration{1: 30 * time.Second, 2: time.Minute, 3: 2 * time.Minute, 6: 10 * time.Minute, 40: 10 * time.Minute} {
		if got := provisioningBackoff(failures); got != want {
			t.Errorf("backoff after %d failures in a row = %s, want %s", failures, got, want)
		}
	}
}

func TestSeatsByGroup(t *testing.T) {
	seat := func(name, uid string) *corev1.Pod {
		return builders.Pod(name, "ml").Label(berthv1alpha1.SeatOfLabel, uid).Obj()
	}
	got := seatsByGroup([]*corev1.Pod{seat("b", "u1"), seat("a", "u1"), seat("c", "u2"), builders.Pod("m", "ml").Obj(), builders.Pod("d", "ml").Label(berthv1alpha1.SeatOfLabel, "u1").Deleting().Obj()})
	names := map[types.UID][]string{}
	for uid, ss := range got {
		for _, s := range ss {
			names[uid] = append(names[uid], s.Name)
		}
	}
	if diff := cmp.Diff(map[types.UID][]string{"u1": {"a", "b"}, "u2": {"c"}}, names); diff != "" {
		t.Errorf("seats by group (-want +got):\n%s", diff)
	}
}

func TestWithoutBooting(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	node := func(name string, age time.Duration, ready bool) *corev1.Node {
		n := builders.Node(name).Obj()
		n.CreationTimestamp = metav1.NewTime(now.Add(-age))
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
		if ready {
			n.Status.Conditions[0].Status = corev1.ConditionTrue
		}
		return n
	}
	nodes := []*corev1.Node{node("booting", time.Minute, false), node("broken", time.Hour, false), node("ready", time.Minute, true)}
	got := withoutBooting(unavailableNodes(nodes), nodes, now, DefaultNodeReadyBudget)
	if diff := cmp.Diff(map[string]string{"broken": "not Ready"}, got); diff != "" {
		t.Errorf("unavailable (-want +got):\n%s", diff)
	}
}

func TestRecordGangHealth(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	gang := func(name string, phase berthv1alpha1.PodGroupPhase, age, admitted time.Duration, assigned ...string) *berthv1alpha1.PodGroup {
		g := builders.PodGroup(name, "ml").MinMember(2).Obj()
		g.CreationTimestamp = metav1.NewTime(now.Add(-age))
		g.Status.Phase = phase
		if admitted > 0 {
			g.Status.AdmittedAt = &metav1.Time{Time: now.Add(-admitted)}
		}
		for _, p := range assigned {
			g.Status.Assignments = append(g.Status.Assignments, berthv1alpha1.MemberAssignment{Pod: p, Node: "n"})
		}
		return g
	}
	lastWave := gang("last", berthv1alpha1.PodGroupRunning, time.Hour, 10*time.Minute, "l4", "l5")
	lastWave.Spec.MinMember = 4
	running := func(name, group string) *corev1.Pod {
		return builders.Pod(name, "ml").Member(group).Phase(corev1.PodRunning).Obj()
	}
	gs := []*berthv1alpha1.PodGroup{
		gang("old", berthv1alpha1.PodGroupPending, 20*time.Minute, 0),
		gang("new", "", time.Minute, 0),
		gang("prov", berthv1alpha1.PodGroupProvisioning, 5*time.Minute, 0),
		gang("half", berthv1alpha1.PodGroupAdmitted, time.Hour, 10*time.Minute, "h0", "h1"),
		gang("starting", berthv1alpha1.PodGroupAdmitted, time.Hour, 30*time.Second, "s0", "s1"),
		gang("whole", berthv1alpha1.PodGroupRunning, time.Hour, time.Hour, "w0", "w1"),
		// A Job's wave where one member finished and the other still runs: not partial.
		gang("finishing", berthv1alpha1.PodGroupRunning, time.Hour, time.Hour, "f0", "f1"),
		// A Job's last wave, smaller than minMember, running whole: not partial.
		lastWave,
		// A lost member replaced (its assignment stays beside the replacement's): not partial.
		gang("replaced", berthv1alpha1.PodGroupRunning, time.Hour, time.Hour, "r0", "r1-old", "r1-new"),
	}
	members := map[string][]*corev1.Pod{
		"ml/half":      {running("h0", "half"), builders.Pod("h1", "ml").Member("half").Obj()},
		"ml/starting":  {running("s0", "starting")},
		"ml/whole":     {running("w0", "whole"), running("w1", "whole")},
		"ml/finishing": {running("f0", "finishing"), builders.Pod("f1", "ml").Member("finishing").Phase(corev1.PodSucceeded).Obj()},
		"ml/last":      {builders.Pod("l0", "ml").Member("last").Phase(corev1.PodSucceeded).Obj(), running("l4", "last"), running("l5", "last")},
		"ml/replaced":  {running("r0", "replaced"), running("r1-new", "replaced")},
	}
	recordGangHealth(gs, members, now)
	if got := testGauge(t, oldestWaiting.WithLabelValues("Pending")); got != 1200 {
		t.Errorf("oldest Pending = %v, want 1200", got)
	}
	if got := testGauge(t, oldestWaiting.WithLabelValues("Provisioning")); got != 300 {
		t.Errorf("oldest Provisioning = %v, want 300", got)
	}
	if got := testGauge(t, partiallyRunning); got != 1 {
		t.Errorf("partially running = %v, want 1 (half; starting is within the grace; finishing, last and replaced are whole)", got)
	}
}

func testGauge(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

func TestSweepReservations(t *testing.T) {
	provisioning := builders.PodGroup("prov", "ml").MinMember(2).Obj()
	provisioning.UID = "uid-prov"
	provisioning.Status.Phase = berthv1alpha1.PodGroupProvisioning
	provisioning.Status.Provisioning = &berthv1alpha1.ProvisioningStatus{Attempt: 1, Seats: 1, StartedAt: &metav1.Time{Time: time.Now()}}
	admitted := provisioning.DeepCopy()
	admitted.Name, admitted.UID = "adm", "uid-adm"
	admitted.Status.Phase = berthv1alpha1.PodGroupAdmitted
	admitted.Status.Provisioning.FinishedAt = &metav1.Time{Time: time.Now()} // the attempt ended with the admission
	// About to start its attempt: the labels are written a cycle before the seats and the
	// attempt's record (a sweep in between let the seat onto the reserved room).
	starting := builders.PodGroup("start", "ml").MinMember(2).Obj()
	starting.UID = "uid-start"
	backingOff := provisioning.DeepCopy()
	backingOff.Name, backingOff.UID = "backoff", "uid-backoff"
	backingOff.Status.Provisioning.FinishedAt = &metav1.Time{Time: time.Now()}
	backingOff.Status.Provisioning.RetryAt = &metav1.Time{Time: time.Now().Add(time.Hour)}
	node := builders.Node("n1").Obj()
	for _, uid := range []string{"uid-prov", "uid-adm", "uid-gone", "uid-start", "uid-backoff"} {
		node.Labels[berthv1alpha1.ReservationLabelPrefix+uid] = "true"
	}
	c := fake.NewClientBuilder().WithObjects(node).Build()
	r := New(c, c, clock.RealClock{}, nil, Options{})
	cy := &cycle{now: time.Now(), nodes: []*corev1.Node{node}, groups: []*berthv1alpha1.PodGroup{provisioning, admitted, starting, backingOff}}
	if err := r.sweepReservations(context.Background(), cy); err != nil {
		t.Fatal(err)
	}
	var got corev1.Node
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(node), &got); err != nil {
		t.Fatal(err)
	}
	var kept []string
	for k := range got.Labels {
		if strings.HasPrefix(k, berthv1alpha1.ReservationLabelPrefix) {
			kept = append(kept, k)
		}
	}
	slices.Sort(kept)
	if diff := cmp.Diff([]string{berthv1alpha1.ReservationLabelPrefix + "uid-prov", berthv1alpha1.ReservationLabelPrefix + "uid-start"}, kept); diff != "" {
		t.Errorf("reservations left (-want +got):\n%s", diff)
	}
}

// TestSeatNamesPerGang: two teams' gangs of one name (in two namespaces, so two UIDs) get seats
// of their own in berth's one namespace — the second used to find the first's seats by name,
// create none and launch no batch.
func TestSeatNamesPerGang(t *testing.T) {
	a := builders.PodGroup("train", "team-a").MinMember(2).Obj()
	b := builders.PodGroup("train", "team-b").MinMember(2).Obj()
	a.UID, b.UID = "0b5c6f7e-0000-4000-8000-00000000000a", "0b5c6f7e-0000-4000-8000-00000000000b"
	if seatName(a, 1, 0) == seatName(b, 1, 0) {
		t.Errorf("gangs %s/%s and %s/%s share seat name %s", a.Namespace, a.Name, b.Namespace, b.Name, seatName(a, 1, 0))
	}
	long := builders.PodGroup(strings.Repeat("x", 253), "ml").Obj()
	long.UID = a.UID
	if n := seatName(long, 12, 31); len(n) > 253 {
		t.Errorf("seat name of %d characters, want at most 253", len(n))
	}
}

// TestPreferDomain: the hint joins the member's heaviest preference in a first term of weight
// 100; a member that prefers a value of the key itself gets no hint.
func TestPreferDomain(t *testing.T) {
	zone := corev1.LabelTopologyZone
	pref := func(w int32, key, v string) corev1.PreferredSchedulingTerm {
		return corev1.PreferredSchedulingTerm{Weight: w, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpIn, Values: []string{v}}}}}
	}
	for _, tc := range []struct {
		name string
		own  []corev1.PreferredSchedulingTerm
		want [][]string // each term's keys, in order
	}{
		{"no preference of its own", nil, [][]string{{zone}}},
		{"the heaviest joins the hint", []corev1.PreferredSchedulingTerm{pref(10, "a", "x"), pref(50, "b", "y")}, [][]string{{"b", zone}, {"a"}, {"b"}}},
		{"a tie: the first", []corev1.PreferredSchedulingTerm{pref(50, "a", "x"), pref(50, "b", "y")}, [][]string{{"a", zone}, {"a"}, {"b"}}},
		{"the member prefers a zone itself", []corev1.PreferredSchedulingTerm{pref(60, zone, "us-west-2a")}, [][]string{{zone}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			aff := &corev1.Affinity{}
			if tc.own != nil {
				aff.NodeAffinity = &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: tc.own}
			}
			preferDomain(aff, zone, "us-west-2c")
			var got [][]string
			for _, p := range aff.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
				var keys []string
				for _, e := range p.Preference.MatchExpressions {
					keys = append(keys, e.Key)
				}
				got = append(got, keys)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("preferred terms' keys (-want +got):\n%s", diff)
			}
			if first := aff.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0]; len(tc.own) == 0 || tc.own[0].Preference.MatchExpressions[0].Key != zone {
				if first.Weight != 100 {
					t.Errorf("the hint's term weighs %d, want 100", first.Weight)
				}
			}
		})
	}
}
