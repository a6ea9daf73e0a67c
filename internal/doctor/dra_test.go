package doctor

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/berth-dev/berth/test/builders"
)

func TestDRAChecks(t *testing.T) {
	h100Class := func() resourcev1.DeviceClass {
		c := *builders.GPUClass()
		c.Name = "h100.example.com"
		c.Spec.Selectors = append(c.Spec.Selectors, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{
			Expression: `device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"`}})
		return c
	}()
	l4Slice := *builders.GPUSlice("l4-node", 1, "NVIDIA L4", "24Gi")
	l4Node := *builders.Node("l4-node").Obj()
	bothNode := *builders.Node("both").GPU(8).Obj()
	bothSlice := *builders.GPUSlice("both", 8, "NVIDIA L4", "24Gi")
	pluginNode := *builders.Node("plugin").GPU(8).Obj()
	tests := []struct {
		name string
		snap Snapshot
		want []string
	}{
		{"the device plugin and the DRA driver on one node", Snapshot{Nodes: []corev1.Node{bothNode, pluginNode, l4Node},
			ResourceSlices: []resourcev1.ResourceSlice{bothSlice, l4Slice}},
			[]string{"gpu-advertised-twice Node both"}},
		{"a class no device matches, one that does not exist, one that matches", Snapshot{Nodes: []corev1.Node{l4Node},
			ResourceSlices: []resourcev1.ResourceSlice{l4Slice}, DeviceClasses: []resourcev1.DeviceClass{*builders.GPUClass(), h100Class},
			DeviceClassRequests: map[string][]string{"h100.example.com": {"ResourceClaimTemplate ml/h100"}, "gpu.nvidia.com": {"ResourceClaimTemplate ml/any"}, "gone.example.com": {"ResourceClaim ml/x"}}},
			[]string{"deviceclass-unsatisfiable DeviceClass gone.example.com", "deviceclass-unsatisfiable DeviceClass h100.example.com"}},
		{"no devices published yet (nodes still to come): nothing to say", Snapshot{Nodes: []corev1.Node{pluginNode},
			DeviceClasses:       []resourcev1.DeviceClass{h100Class},
			DeviceClassRequests: map[string][]string{"h100.example.com": {"ResourceClaimTemplate ml/h100"}}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, findingsOf(t, tt.snap)); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
		})
	}
}
