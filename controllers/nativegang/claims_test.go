package nativegang

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	kevents "k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/events"
	"github.com/berth-dev/berth/internal/seat"
	"github.com/berth-dev/berth/test/builders"
)

// TestPlanClaims: what the seats of a native gang carry for its members' device claims — each
// member's own claims on its own seat, the gang's shared claim once (on the first seat that
// names it) with the other seats kept to that seat's node — and when no seat can carry them.
func TestPlanClaims(t *testing.T) {
	member := func(name string) *builders.PodBuilder {
		return builders.Pod(name, "ml").InNativeGroup("train")
	}
	allocated := builders.AllocatedClaim("train-shared-x1", "ml", "n1", 0, 1)
	tests := []struct {
		name    string
		group   *schedulingv1beta1.PodGroup
		members []*corev1.Pod
		objs    []client.Object
		carry   map[string][]string
		join    map[string][]string
		blocked string
	}{{
		name:  "own claims on own seats; the gang's claim once, the other seats on its node",
		group: builders.NativeGroupWithClaim("train", "ml", 2, "shared", "two"),
		members: []*corev1.Pod{
			member("m0").ClaimFromTemplate("shared", "two").ClaimFromTemplate("own", "one").Obj(),
			member("m1").ClaimFromTemplate("shared", "two").ClaimFromTemplate("own", "one").Obj(),
		},
		carry: map[string][]string{"m0": {"shared", "own"}, "m1": {"own"}},
		join:  map[string][]string{"m1": {"m0"}},
	}, {
		name:    "a claim that matches no claim of the gang is the member's own",
		group:   builders.NativeGroupWithClaim("train", "ml", 2, "shared", "one"),
		members: []*corev1.Pod{member("m0").ClaimFromTemplate("shared", "two").Obj(), member("m1").ClaimFromTemplate("shared", "two").Obj()},
		carry:   map[string][]string{"m0": {"shared"}, "m1": {"shared"}},
		join:    map[string][]string{},
	}, {
		name:    "a member that names a claim other pods may share",
		group:   builders.NativeGroupWithClaim("train", "ml", 1, "shared", "two"),
		members: []*corev1.Pod{member("m0").SharedClaim("data", "dataset-gpus").Obj()},
		blocked: "member m0 names ResourceClaim dataset-gpus, which is not the gang's",
	}, {
		name: "the gang's claim allocated already",
		group: func() *schedulingv1beta1.PodGroup {
			g := builders.NativeGroupWithClaim("train", "ml", 1, "shared", "two")
			g.Status.ResourceClaimStatuses = []schedulingv1beta1.PodGroupResourceClaimStatus{{Name: "shared", ResourceClaimName: ptr.To(allocated.Name)}}
			return g
		}(),
		members: []*corev1.Pod{member("m0").ClaimFromTemplate("shared", "two").Obj()},
		objs:    []client.Object{allocated},
		blocked: `the gang's claim "shared" (ResourceClaim train-shared-x1) is allocated already`,
	}, {
		name:    "a template that does not exist",
		group:   builders.NativeGroupWithClaim("train", "ml", 1, "shared", "two"),
		members: []*corev1.Pod{member("m0").ClaimFromTemplate("own", "missing").Obj()},
		blocked: "waits for ResourceClaimTemplate ml/missing, which does not exist",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			scheme := testScheme(t)
			objs := append([]client.Object{builders.ClaimTemplate("one", "ml", 1, ""), builders.ClaimTemplate("two", "ml", 2, "")}, tc.objs...)
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
			r := New(c, c, nil, nil, Options{})
			p, err := r.planClaims(context.Background(), tc.group, tc.members)
			if err != nil {
				t.Fatal(err)
			}
			if tc.blocked != "" || p.blocked != "" {
				if tc.blocked == "" || !strings.Contains(p.blocked, tc.blocked) {
					t.Fatalf("blocked %q, want %q", p.blocked, tc.blocked)
				}
				return
			}
			got := map[string][]string{}
			for m, cs := range p.carry {
				for _, c := range cs {
					got[m] = append(got[m], c.name)
				}
			}
			if !equalLists(got, tc.carry) || !equalLists(p.join, tc.join) {
				t.Fatalf("carry %v join %v, want %v and %v", got, p.join, tc.carry, tc.join)
			}
		})
	}
}

// TestSeatsCarryTheirClaims: the seats built from a plan carry their claims from their own
// template copies, and a seat sharing the gang's claim keeps to the node of the seat carrying it.
func TestSeatsCarryTheirClaims(t *testing.T) {
	r := New(nil, nil, nil, nil, Options{})
	pg := builders.NativeGroupWithClaim("train", "ml", 2, "shared", "two")
	pg.UID = "0123456789ab"
	two := builders.ClaimTemplate("two", "ml", 2, "")
	p := claimPlan{carry: map[string][]seatClaim{"m0": {{"shared", &two.Spec}, {"own", &two.Spec}}, "m1": {{"own", &two.Spec}}},
		join: map[string][]string{"m1": {"m0"}}}
	index := map[string]int{"m0": 0, "m1": 1}
	s0 := r.seatPod(pg, builders.Pod("m0", "ml").Obj(), 0)
	withClaims(s0, pg, "m0", p, index)
	s1 := r.seatPod(pg, builders.Pod("m1", "ml").Obj(), 1)
	withClaims(s1, pg, "m1", p, index)
	if len(s0.Spec.ResourceClaims) != 2 || *s0.Spec.ResourceClaims[1].ResourceClaimTemplateName != seat.TemplateName(s0.Name, 1) || s0.Spec.ResourceClaims[0].Name != "shared" {
		t.Errorf("seat 0 claims %+v", s0.Spec.ResourceClaims)
	}
	if s0.Spec.Affinity != nil && s0.Spec.Affinity.PodAffinity != nil {
		t.Errorf("seat 0 carries the shared claim and follows no one: %+v", s0.Spec.Affinity.PodAffinity)
	}
	terms := s1.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if len(terms) != 1 || terms[0].TopologyKey != corev1.LabelHostname || terms[0].LabelSelector.MatchLabels[berthv1alpha1.NativeSeatIndexLabel] != "0" ||
		terms[0].LabelSelector.MatchLabels[berthv1alpha1.SeatForNativeGroupLabel] != "0123456789ab" || s0.Labels[berthv1alpha1.NativeSeatIndexLabel] != "0" {
		t.Errorf("seat 1 affinity %+v, seat 0 labels %v", terms, s0.Labels)
	}
	s0.UID = "seat-uid"
	copyOf := seat.TemplateCopy(s0, 0, &two.Spec, map[string]string{berthv1alpha1.SeatForNativeGroupLabel: string(pg.UID)})
	if copyOf.Namespace != s0.Namespace || copyOf.OwnerReferences[0].UID != "seat-uid" || copyOf.Spec.Spec.Devices.Requests[0].Exactly.Count != 2 {
		t.Errorf("template copy %+v", copyOf)
	}
}

func equalLists(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || strings.Join(v, ",") != strings.Join(w, ",") {
			return false
		}
	}
	return true
}

// TestNotRequestedSaidOnce: a gang whose claims no seat can carry says so once per reason, not
// on every reconcile; a new reason is said again.
func TestNotRequestedSaidOnce(t *testing.T) {
	fr := kevents.NewFakeRecorder(10)
	r := New(nil, nil, nil, events.NewRecorder(fr), Options{})
	pg := builders.NativeGroupWithClaim("train", "ml", 1, "shared", "two")
	pg.UID = "uid"
	blocked := func(note string) plan {
		return plan{warn: true, eventReason: events.ReasonCapacityNotRequested, eventNote: note}
	}
	for _, p := range []plan{blocked("a"), blocked("a"), blocked("a"), blocked("b")} {
		if err := r.act(context.Background(), pg, p, nil, nil, claimPlan{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(fr.Events); n != 2 {
		t.Fatalf("%d events recorded, want 2 (one per reason)", n)
	}
}
