package doctor

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/scheduling"
)

// DRA check names.
const (
	CheckGPUAdvertisedTwice       = "gpu-advertised-twice"
	CheckDeviceClassUnsatisfiable = "deviceclass-unsatisfiable"
	KindResourceSlice             = "ResourceSlice"
	KindDeviceClass               = "DeviceClass"
	nvidiaDeviceResource          = corev1.ResourceName(berthv1alpha1.GPUResource)
	nvidiaDRADriver               = "gpu.nvidia.com"
)

// gpuAdvertisedTwice finds nodes whose GPUs both NVIDIA's device plugin (nvidia.com/gpu in the
// node's allocatable) and its DRA driver (a gpu.nvidia.com ResourceSlice for the node) hand
// out: the kubelet and the scheduler count them apart, so one GPU can go to a pod through each.
func gpuAdvertisedTwice(s Snapshot) []Finding {
	dra := map[string]int{}
	for _, sl := range s.ResourceSlices {
		if sl.Spec.Driver == nvidiaDRADriver && sl.Spec.NodeName != nil {
			dra[*sl.Spec.NodeName] += len(sl.Spec.Devices)
		}
	}
	var out []Finding
	for _, n := range s.Nodes {
		q, ok := n.Status.Allocatable[nvidiaDeviceResource]
		if !ok || q.IsZero() || dra[n.Name] == 0 {
			continue
		}
		out = append(out, Finding{Check: CheckGPUAdvertisedTwice, Object: obj("Node", "", n.Name),
			Problem: fmt.Sprintf("the node offers %s nvidia.com/gpu through the device plugin and %d devices through the %s DRA driver: the same GPUs counted twice, so a pod of each kind can be given one GPU", q.String(), dra[n.Name], nvidiaDRADriver),
			Fix:     "run one of them on a node: disable the device plugin where the DRA driver runs (the GPU Operator's devicePlugin.enabled=false for that node pool), or the DRA driver's gpus where the plugin runs"})
	}
	return out
}

// deviceClassUnsatisfiable finds DeviceClasses that claims or templates ask for and no device
// of any node can satisfy — judged by the structured allocator kube-scheduler runs, one device
// of the class on each node with nothing allocated — while some driver publishes devices (a
// cluster whose nodes are all still to come says nothing). A class that does not exist is one
// too.
func deviceClassUnsatisfiable(s Snapshot) []Finding {
	if len(s.ResourceSlices) == 0 || len(s.DeviceClassRequests) == 0 {
		return nil
	}
	classes := map[string]*resourcev1.DeviceClass{}
	for i := range s.DeviceClasses {
		classes[s.DeviceClasses[i].Name] = &s.DeviceClasses[i]
	}
	slices := make([]*resourcev1.ResourceSlice, len(s.ResourceSlices))
	nodeSlices := sets.New[string]()
	anyNode := false
	for i := range s.ResourceSlices {
		slices[i] = &s.ResourceSlices[i]
		if n := slices[i].Spec.NodeName; n != nil && *n != "" {
			nodeSlices.Insert(*n)
		} else {
			anyNode = true
		}
	}
	names := make([]string, 0, len(s.DeviceClassRequests))
	for c := range s.DeviceClassRequests {
		names = append(names, c)
	}
	sort.Strings(names)
	var out []Finding
	for _, name := range names {
		by := s.DeviceClassRequests[name]
		if _, ok := classes[name]; !ok {
			out = append(out, Finding{Check: CheckDeviceClassUnsatisfiable, Object: obj(KindDeviceClass, "", name),
				Problem: fmt.Sprintf("%s ask for DeviceClass %s, which does not exist: their pods can never be scheduled", firstFew(by), name),
				Fix:     "install the DRA driver that provides the class, or correct deviceClassName"})
			continue
		}
		ok, err := satisfiable(name, classes, slices, s.Nodes, nodeSlices, anyNode)
		switch {
		case err != nil:
			out = append(out, Finding{Check: CheckDeviceClassUnsatisfiable, Object: obj(KindDeviceClass, "", name),
				Problem: fmt.Sprintf("DeviceClass %s, asked for by %s, cannot be evaluated: %v", name, firstFew(by), err),
				Fix:     "correct the class's CEL selectors"})
		case !ok:
			out = append(out, Finding{Check: CheckDeviceClassUnsatisfiable, Object: obj(KindDeviceClass, "", name),
				Problem: fmt.Sprintf("no device of any node matches DeviceClass %s, asked for by %s: their pods wait until a node with such a device exists", name, firstFew(by)),
				Fix:     "check the class's selectors against the devices drivers publish (kubectl get resourceslices -o yaml); if Karpenter should launch such nodes, set IGNORE_DRA_REQUESTS=false and let the NodePool offer instance types that have them"})
		}
	}
	return out
}

// satisfiable reports whether one device of class fits on some node, with nothing allocated.
func satisfiable(class string, classes map[string]*resourcev1.DeviceClass, slices []*resourcev1.ResourceSlice, nodes []corev1.Node, nodeSlices sets.Set[string], anyNode bool) (bool, error) {
	claim := &resourcev1.ResourceClaim{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
		Name: "one", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1},
	}}}}}
	claim.Name, claim.Namespace, claim.UID = "berth-doctor", "default", "berth-doctor"
	al, err := structured.NewAllocator(context.Background(), scheduling.DRAFeatures, structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID]()},
		scheduling.DeviceClassLister(classes), slices, cel.NewCache(10, cel.Features{}))
	if err != nil {
		return false, err
	}
	for i := range nodes {
		n := &nodes[i]
		if !anyNode && !nodeSlices.Has(n.Name) {
			continue
		}
		res, err := al.Allocate(context.Background(), n, []*resourcev1.ResourceClaim{claim})
		if err != nil {
			return false, err
		}
		if res != nil {
			return true, nil
		}
	}
	return false, nil
}

// requestedClasses adds to into the DeviceClasses a claim spec asks for, for the object named by.
func requestedClasses(into map[string][]string, spec resourcev1.ResourceClaimSpec, by string) {
	for _, r := range spec.Devices.Requests {
		if r.Exactly != nil {
			into[r.Exactly.DeviceClassName] = appendOnce(into[r.Exactly.DeviceClassName], by)
		}
		for _, sub := range r.FirstAvailable {
			into[sub.DeviceClassName] = appendOnce(into[sub.DeviceClassName], by)
		}
	}
}

func appendOnce(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}
