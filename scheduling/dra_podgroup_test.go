package scheduling_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/berth-dev/berth/scheduling"
	"github.com/berth-dev/berth/test/builders"
)

// TestDRANativePodGroupClaims: a pod's claim that matches its native PodGroup's
// spec.resourceClaims is the group's one claim (resourceclaim.BindTo), shared by every member:
// placed once, its devices counted once, the members where its devices are.
func TestDRANativePodGroupClaims(t *testing.T) {
	member := func(name string) *builders.PodBuilder {
		return builders.Pod(name, "ml").Member("g").InNativeGroup("train").ClaimFromTemplate("shared", "any4")
	}
	made := builders.NativeGroupWithClaim("train", "ml", 3, "shared", "any4")
	made.Status.ResourceClaimStatuses = []schedulingv1beta1.PodGroupResourceClaimStatus{{Name: "shared", ResourceClaimName: ptr.To("train-shared-x1")}}
	tests := []struct {
		name      string
		h         int
		groups    []*schedulingv1beta1.PodGroup
		claims    []*resourceapi.ResourceClaim
		members   []*corev1.Pod
		want      map[string]int
		devices   int
		placeable int
		reason    string
	}{{
		name: "three members share the group's four GPUs on one node", h: 2,
		groups:  []*schedulingv1beta1.PodGroup{builders.NativeGroupWithClaim("train", "ml", 3, "shared", "any4")},
		members: members(3, member),
		want:    map[string]int{"h-0": 3}, devices: 4,
	}, {
		name: "without its PodGroup each claim is the pod's own: twelve GPUs, two nodes", h: 2,
		members: members(3, member),
		want:    map[string]int{"h-0": 2, "h-1": 1}, devices: 12,
	}, {
		name: "a pod claim that differs from the group's (another template) is the pod's own", h: 2,
		groups:  []*schedulingv1beta1.PodGroup{builders.NativeGroupWithClaim("train", "ml", 2, "shared", "h100x8")},
		members: members(2, member),
		want:    map[string]int{"h-0": 2}, devices: 8,
	}, {
		name: "the group's claim, made and allocated, decides the node", h: 3,
		groups:  []*schedulingv1beta1.PodGroup{made},
		claims:  []*resourceapi.ResourceClaim{builders.AllocatedClaim("train-shared-x1", "ml", "h-2", 0, 1, 2, 3)},
		members: members(3, member),
		want:    map[string]int{"h-2": 3}, devices: 0, // allocated already
	}, {
		name: "the group's claim recorded but gone", h: 1,
		groups:  []*schedulingv1beta1.PodGroup{made},
		members: members(2, member),
		reason:  "waits for ResourceClaim ml/train-shared-x1 (PodGroup train's claim \"shared\"), which does not exist",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nodes, res := draCluster(tc.h, 0)
			res.PodGroups, res.Claims = tc.groups, tc.claims
			s := draSnapshot(t, nodes, nil, res)
			before := s.DevicesTaken()
			r := scheduling.Place(s, scheduling.Gang{Members: tc.members})
			if tc.want == nil {
				if r.Fits() {
					t.Fatalf("fits on %v, want %q", r.Nodes(), tc.reason)
				}
				if !strings.Contains(r.Reason, tc.reason) {
					t.Fatalf("reason %q, want %q", r.Reason, tc.reason)
				}
				return
			}
			if !r.Fits() {
				t.Fatalf("does not fit: %s", r.Reason)
			}
			got := map[string]int{}
			for _, a := range r.Assignments {
				got[a.Node]++
			}
			// Which of equal nodes placement picks is its own business: compare the spread.
			if !slices.Equal(spread(got), spread(tc.want)) || len(tc.want) == 1 && !maps.Equal(got, tc.want) {
				t.Fatalf("members per node %v, want %v", got, tc.want)
			}
			if err := s.Assume(tc.members, r); err != nil {
				t.Fatal(err)
			}
			if d := s.DevicesTaken() - before; d != tc.devices {
				t.Fatalf("devices taken by the gang: %d, want %d", d, tc.devices)
			}
		})
	}
}

// spread is how many members each node got, sorted.
func spread(perNode map[string]int) []int {
	return slices.Sorted(maps.Values(perNode))
}
