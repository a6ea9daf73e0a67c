package scheduling_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/berth-dev/berth/scheduling"
	"github.com/berth-dev/berth/test/builders"
)

// mixedNode is node "mixed" publishing 8 H100s and one L4 as two slices of one pool, as read
// from the API server (UIDs and versions), and classes "l4" (selects the L4 by product) and
// "broken" (a selector that fails to evaluate on every device).
func mixedNode() ([]*corev1.Node, scheduling.DynamicResources) {
	h := builders.GPUSlice("mixed", 8, "NVIDIA H100 80GB HBM3", "80Gi")
	l := builders.GPUSlice("mixed", 1, "NVIDIA L4", "24Gi")
	l.Name += "-l4"
	l.Spec.Devices[0].Name = "l4-0"
	for i, sl := range []*resourceapi.ResourceSlice{h, l} {
		sl.Spec.Pool.ResourceSliceCount = 2
		sl.UID, sl.ResourceVersion = []types.UID{"h-uid", "l-uid"}[i], "1"
	}
	class := func(name, expr string) *resourceapi.DeviceClass {
		return &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name + "-uid"), ResourceVersion: "1"},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}}}}
	}
	template := func(name, cls string, n int) *resourceapi.ResourceClaimTemplate {
		t := builders.ClaimTemplate(name, "ml", n, "")
		t.Spec.Spec.Devices.Requests[0].Exactly.DeviceClassName = cls
		return t
	}
	return []*corev1.Node{builders.Node("mixed").Obj()}, scheduling.DynamicResources{
		Slices: []*resourceapi.ResourceSlice{h, l},
		Classes: []*resourceapi.DeviceClass{
			class("l4", `device.attributes["gpu.nvidia.com"].productName == "NVIDIA L4"`),
			class("broken", `device.attributes["gpu.nvidia.com"].noSuchAttribute == "x"`),
		},
		Templates: []*resourceapi.ResourceClaimTemplate{template("l4x1", "l4", 1), template("l4x2", "l4", 2), template("broken", "broken", 1)},
	}
}

// TestDRAClassSelectsTheDevicesOffered: a class's selectors decide which devices a claim of
// it can have, whether the allocator judges them or placement cut the devices offered to
// those they select — a cut that ignored them would give the L4 class H100s.
func TestDRAClassSelectsTheDevicesOffered(t *testing.T) {
	tests := []struct {
		name, template string
		members        int
		fits           bool
		reason         string
	}{
		{name: "one L4 asked, one there", template: "l4x1", members: 1, fits: true},
		{name: "two L4s asked, one there beside eight free H100s", template: "l4x2", members: 1},
		{name: "two members of one L4 each, one L4 there", template: "l4x1", members: 2, reason: "1 of 2 members fit"},
		{name: "a class selector that fails to evaluate is reported, not skipped", template: "broken", members: 1, reason: "CEL runtime error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nodes, res := mixedNode()
			res.Selections = scheduling.NewSelectionCache()
			for range 2 { // the second snapshot reads what the first cached
				s := draSnapshot(t, nodes, nil, res)
				r := scheduling.Place(s, scheduling.Gang{Members: members(tc.members, draMember(tc.template))})
				if r.Fits() != tc.fits {
					t.Fatalf("fits = %v, want %v (reason %q)", r.Fits(), tc.fits, r.Reason)
				}
				if !strings.Contains(r.Reason, tc.reason) {
					t.Fatalf("reason %q, want it to contain %q", r.Reason, tc.reason)
				}
			}
		})
	}
}

// TestSelectionCacheFollowsVersions: what a class selects is cached by the slice's and the
// class's versions, so a slice republished with other devices is judged again.
func TestSelectionCacheFollowsVersions(t *testing.T) {
	nodes, res := mixedNode()
	res.Selections = scheduling.NewSelectionCache()
	gang := scheduling.Gang{Members: members(1, draMember("l4x1"))}
	if r := scheduling.Place(draSnapshot(t, nodes, nil, res), gang); !r.Fits() {
		t.Fatalf("before: %s", r.Reason)
	}
	// The driver republishes: the L4's slice now holds an H100.
	l := res.Slices[1].DeepCopy()
	l.ResourceVersion = "2"
	l.Spec.Devices[0].Attributes["productName"] = resourceapi.DeviceAttribute{StringValue: new("NVIDIA H100 80GB HBM3")}
	res.Slices[1] = l
	if r := scheduling.Place(draSnapshot(t, nodes, nil, res), gang); r.Fits() {
		t.Fatalf("after the L4 is gone an L4 claim still fits on %v", r.Nodes())
	}
}

// TestDRAInvalidPoolStaysInvalid: a pool that names a device twice is one the allocator refuses
// (kube-scheduler places nothing on it); offering the allocator only the devices a class selects
// must not drop the duplicate and make the pool look valid.
func TestDRAInvalidPoolStaysInvalid(t *testing.T) {
	nodes, res := mixedNode()
	l := res.Slices[1]
	l.Spec.Devices = append(l.Spec.Devices, *l.Spec.Devices[0].DeepCopy()) // "l4-0" twice
	h100 := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "h100", UID: "h100-uid", ResourceVersion: "1"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: `device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"`}}}}}
	res.Classes = append(res.Classes, h100)
	tmpl := builders.ClaimTemplate("h100x1", "ml", 1, "")
	tmpl.Spec.Spec.Devices.Requests[0].Exactly.DeviceClassName = "h100"
	res.Templates = append(res.Templates, tmpl)
	res.Selections = scheduling.NewSelectionCache()
	r := scheduling.Place(draSnapshot(t, nodes, nil, res), scheduling.Gang{Members: members(1, draMember("h100x1"))})
	if r.Fits() {
		t.Fatalf("fits on %v: the node's only pool is invalid (a device named twice)", r.Nodes())
	}
}
