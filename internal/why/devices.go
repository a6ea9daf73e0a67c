package why

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
)

// memberDevices says, for each of p's resource claims (DRA), what it claims and where that
// stands: not made yet from its template, missing, waiting to be allocated, or allocated to
// devices on a node. claims are the namespace's ResourceClaims by name.
func memberDevices(p *corev1.Pod, claims map[string]*resourcev1.ResourceClaim) []string {
	var out []string
	for _, pc := range p.Spec.ResourceClaims {
		name := ""
		switch {
		case pc.ResourceClaimName != nil:
			name = *pc.ResourceClaimName
		case pc.ResourceClaimTemplateName != nil:
			for _, st := range p.Status.ResourceClaimStatuses {
				if st.Name == pc.Name && st.ResourceClaimName != nil {
					name = *st.ResourceClaimName
				}
			}
			if name == "" {
				out = append(out, fmt.Sprintf("%s: to be made from ResourceClaimTemplate %s (kube-controller-manager makes it for the pod)", pc.Name, *pc.ResourceClaimTemplateName))
				continue
			}
		default:
			continue
		}
		c, ok := claims[name]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s: ResourceClaim %s does not exist", pc.Name, name))
		case c.Status.Allocation == nil:
			out = append(out, fmt.Sprintf("%s: ResourceClaim %s, %s, not allocated yet (kube-scheduler allocates it when it binds the member)", pc.Name, name, requested(c)))
		default:
			out = append(out, fmt.Sprintf("%s: ResourceClaim %s, %s", pc.Name, name, allocated(c.Status.Allocation)))
		}
	}
	return out
}

// requested says what a claim asks for ("8 of gpu.nvidia.com").
func requested(c *resourcev1.ResourceClaim) string {
	var parts []string
	for _, r := range c.Spec.Devices.Requests {
		switch {
		case r.Exactly != nil && r.Exactly.AllocationMode == resourcev1.DeviceAllocationModeAll:
			parts = append(parts, "all of "+r.Exactly.DeviceClassName)
		case r.Exactly != nil:
			parts = append(parts, fmt.Sprintf("%d of %s", max(r.Exactly.Count, 1), r.Exactly.DeviceClassName))
		case len(r.FirstAvailable) > 0:
			parts = append(parts, "one of "+fmt.Sprint(len(r.FirstAvailable))+" alternatives")
		}
	}
	if len(parts) == 0 {
		return "no devices"
	}
	return "asking for " + strings.Join(parts, " and ")
}

// allocated says where an allocation's devices are ("8 devices of gpu.nvidia.com on node gpu-3").
func allocated(a *resourcev1.AllocationResult) string {
	drivers := map[string]int{}
	for _, r := range a.Devices.Results {
		drivers[r.Driver]++
	}
	names := make([]string, 0, len(drivers))
	for d := range drivers {
		names = append(names, d)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, d := range names {
		parts[i] = fmt.Sprintf("%d device(s) of %s", drivers[d], d)
	}
	where := ""
	if sel := a.NodeSelector; sel != nil {
		for _, t := range sel.NodeSelectorTerms {
			for _, f := range t.MatchFields {
				if f.Key == "metadata.name" && len(f.Values) == 1 {
					where = " on node " + f.Values[0]
				}
			}
		}
	}
	return "allocated: " + strings.Join(parts, ", ") + where
}
