package scheduling

import (
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// Volumes. Placement does no I/O, so the caller resolves each pod's PersistentVolumeClaims
// (and generic ephemeral volumes) into a VolumeTopology, and placement treats it like node
// affinity: a member goes only on nodes every required selector matches.

// VolumeTopology is where a pod's volumes let it run.
type VolumeTopology struct {
	// Required are node selectors a node must each match: a bound PersistentVolume's node
	// affinity (an EBS volume's zone), or the allowedTopologies of a WaitForFirstConsumer
	// StorageClass for a claim not bound yet. Volumes without topology (EFS, FSx for Lustre,
	// NFS) add none.
	Required []corev1.NodeSelector
	// Blocked, when not empty, says why the pod cannot be placed anywhere yet, for a human: a
	// claim that does not exist yet, or one waiting to be bound by its provisioner.
	Blocked string
}

// VolumeKey is the key of a pod in the map SetVolumes takes: namespace/name.
func VolumeKey(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

// SetVolumes gives the snapshot the volume topology of the pods that have any, by VolumeKey.
// Pods not in the map have no volume constraints.
func (s *Snapshot) SetVolumes(v map[string]VolumeTopology) {
	s.volumes = v
	s.filterCache = nil
}

// volumesOf is p's volume topology.
func (s *Snapshot) volumesOf(p *corev1.Pod) VolumeTopology {
	return s.volumes[VolumeKey(p)]
}

// blocked names the first member whose volumes or resource claims keep it from being placed at
// all, with why.
func (s *Snapshot) blocked(members []*corev1.Pod) (*corev1.Pod, string) {
	for _, m := range members {
		if why := s.volumesOf(m).Blocked; why != "" {
			return m, why
		}
		if why := s.draBlocked(m); why != "" {
			return m, why
		}
	}
	return nil, ""
}

// volumeSelectors compiles a volume topology's selectors for matching nodes.
func volumeSelectors(vt VolumeTopology) []*nodeaffinity.LazyErrorNodeSelector {
	out := make([]*nodeaffinity.LazyErrorNodeSelector, 0, len(vt.Required))
	for i := range vt.Required {
		out = append(out, nodeaffinity.NewLazyErrorNodeSelector(&vt.Required[i]))
	}
	return out
}

// volumesMatch reports whether node n satisfies every selector.
func volumesMatch(sels []*nodeaffinity.LazyErrorNodeSelector, n *corev1.Node) bool {
	for _, sel := range sels {
		if ok, err := sel.Match(n); err != nil || !ok {
			return false
		}
	}
	return true
}

// volumesKey is a member's volume topology for its class key.
func volumesKey(vt VolumeTopology) string {
	if len(vt.Required) == 0 {
		return ""
	}
	data, _ := json.Marshal(vt.Required)
	return string(data)
}
