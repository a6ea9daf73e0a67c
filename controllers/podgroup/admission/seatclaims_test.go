package admission

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/scheduling"
	"github.com/berth-dev/berth/test/builders"
)

// TestSeatCarriesItsMembersClaims: a seat refers to its own copies of the member's claim
// templates (same claim names), a claim the member names is not carried, and each copy has the
// template's spec, berth's labels and the seat as owner; a missing template is an error.
func TestSeatCarriesItsMembersClaims(t *testing.T) {
	g := builders.PodGroup("train", "ml").MinMember(1).Obj()
	g.UID = "uid-train"
	m := builders.Pod("train-0", "ml").Member("train").ClaimFromTemplate("gpus", "eight").SharedClaim("fabric", "domain").
		ClaimFromTemplate("nics", "two").Obj()
	seat := seatPod(g, m, scheduling.VolumeTopology{}, seatIdentity{namespace: "berth-system", name: "train-seat-1-0", image: "pause"}, scheduling.Shortfall{})
	want := []corev1.PodResourceClaim{
		{Name: "gpus", ResourceClaimTemplateName: ptrTo("train-seat-1-0-claim-0")},
		{Name: "nics", ResourceClaimTemplateName: ptrTo("train-seat-1-0-claim-2")},
	}
	if len(seat.Spec.ResourceClaims) != len(want) {
		t.Fatalf("seat claims %+v, want %+v", seat.Spec.ResourceClaims, want)
	}
	for i, w := range want {
		if got := seat.Spec.ResourceClaims[i]; got.Name != w.Name || *got.ResourceClaimTemplateName != *w.ResourceClaimTemplateName || got.ResourceClaimName != nil {
			t.Errorf("seat claim %d = %+v, want %+v", i, got, w)
		}
	}
	seat.UID = types.UID("uid-seat")
	eight := builders.ClaimTemplate("eight", "ml", 8, `device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"`)
	eight.Spec.ObjectMeta = metav1.ObjectMeta{Labels: map[string]string{"team": "ml"}}
	res := &scheduling.DynamicResources{Templates: []*resourceapi.ResourceClaimTemplate{eight, builders.ClaimTemplate("two", "ml", 2, "")}}
	ts, err := seatTemplates(g, seat, m, templateIndex(res))
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 2 || ts[0].Name != "train-seat-1-0-claim-0" || ts[1].Name != "train-seat-1-0-claim-2" {
		t.Fatalf("template copies %v, want claim-0 and claim-2", ts)
	}
	c := ts[0]
	if c.Namespace != "berth-system" || c.Labels[berthv1alpha1.SeatOfLabel] != "uid-train" || c.Labels[berthv1alpha1.ManagedByLabel] != berthv1alpha1.ManagedByBerth {
		t.Errorf("copy %s/%s labels %v: want berth's namespace, seat-of and managed-by", c.Namespace, c.Name, c.Labels)
	}
	if len(c.OwnerReferences) != 1 || c.OwnerReferences[0].UID != "uid-seat" || c.OwnerReferences[0].Kind != "Pod" {
		t.Errorf("copy owners %+v, want the seat", c.OwnerReferences)
	}
	if c.Spec.Spec.Devices.Requests[0].Exactly.Count != 8 || c.Spec.Labels["team"] != "ml" {
		t.Errorf("copy spec %+v, want the template's", c.Spec)
	}
	c.Spec.Labels["team"] = "changed"
	if eight.Spec.Labels["team"] != "ml" {
		t.Error("the copy shares the template's maps")
	}
	if _, err := seatTemplates(g, seat, m, templateIndex(&scheduling.DynamicResources{Templates: []*resourceapi.ResourceClaimTemplate{eight}})); err == nil {
		t.Error("a missing template: no error")
	}
}

func ptrTo(s string) *string { return &s }
