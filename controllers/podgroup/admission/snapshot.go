package admission

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/scheduling"
)

// gpuUnhealthyPrefix starts the unavailability reason of nodes with unhealthy GPUs.
const gpuUnhealthyPrefix = "GPU unhealthy: "

// DefaultNodeReadyBudget is how long a new node that is not Ready yet counts as capacity on its
// way (a GPU node takes minutes from launch to Ready) rather than as a broken node.
const DefaultNodeReadyBudget = 10 * time.Minute

// comingUp reports whether a node is not Ready yet but younger than budget: still booting.
func comingUp(n *corev1.Node, now time.Time, budget time.Duration) bool {
	if n.DeletionTimestamp != nil || now.Sub(n.CreationTimestamp.Time) > budget {
		return false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return false
		}
	}
	return true
}

// withoutBooting drops nodes that are coming up from an unavailability map: for deciding what
// capacity is missing, capacity that is already on its way is not.
func withoutBooting(unavailable map[string]string, nodes []*corev1.Node, now time.Time, budget time.Duration) map[string]string {
	out := make(map[string]string, len(unavailable))
	for k, v := range unavailable {
		out[k] = v
	}
	for _, n := range nodes {
		if out[n.Name] == "not Ready" && comingUp(n, now, budget) {
			delete(out, n.Name)
		}
	}
	return out
}

// unavailableNodes says which nodes may not take new members, and why.
func unavailableNodes(nodes []*corev1.Node) map[string]string {
	out := map[string]string{}
	for _, n := range nodes {
		ready := false
		for _, c := range n.Status.Conditions {
			switch {
			case c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue:
				ready = true
			case string(c.Type) == berthv1alpha1.NodeConditionAcceleratedHardwareReady && c.Status == corev1.ConditionFalse:
				out[n.Name] = gpuUnhealthyPrefix + c.Reason
			}
		}
		if !ready && out[n.Name] == "" {
			out[n.Name] = "not Ready"
		}
	}
	return out
}

// requestCache keeps each pod version's requests across cycles: computing them for every pod in
// the cluster was a quarter of a cycle at 10,000 pods, and a pod's requests only change with a
// new version of it. Entries of versions a cycle did not see are dropped.
//
// Entries are found by UID alone — one string, hashed on the map's fast path — and hold the
// resourceVersion they were computed for: keyed by UID and resourceVersion together, hashing and
// comparing the pair was a third of a cycle at 10,000 pods. (Keyed by the pod object itself, the
// cache kept every replaced version of every pod alive until the next cycle: +40 MiB peak at
// 10,000 pods.) A pod without a UID or resourceVersion is computed when looked up.
type requestCache struct {
	entries map[types.UID]*requestEntry
	cycle   uint64
	// layout is the resource order of every cycle's snapshots, in which the entries keep their
	// requests converted once.
	layout *scheduling.Layout
}

type requestEntry struct {
	resourceVersion string
	req             *scheduling.Requests
	seen            uint64
}

// update makes the cache hold the versions of pods, computing the requests of new ones, and
// forgets the others.
func (c *requestCache) update(pods []*corev1.Pod) {
	if c.entries == nil {
		c.entries = make(map[types.UID]*requestEntry, len(pods))
		c.layout = scheduling.NewLayout()
	}
	c.cycle++
	for _, p := range pods {
		if p.UID == "" || p.ResourceVersion == "" {
			continue // no identity to keep it under: computed when looked up
		}
		e, ok := c.entries[p.UID]
		switch {
		case !ok:
			c.entries[p.UID] = &requestEntry{resourceVersion: p.ResourceVersion, req: scheduling.NewRequests(p), seen: c.cycle}
		case e.resourceVersion != p.ResourceVersion:
			e.resourceVersion, e.req, e.seen = p.ResourceVersion, scheduling.NewRequests(p), c.cycle
		default:
			e.seen = c.cycle
		}
	}
	for k, e := range c.entries {
		if e.seen != c.cycle {
			delete(c.entries, k)
		}
	}
}

// lookup is a pod version's requests, or nil when the cache does not hold it.
func (c *requestCache) lookup(p *corev1.Pod) *scheduling.Requests {
	if p.UID == "" || p.ResourceVersion == "" {
		return nil
	}
	if e, ok := c.entries[p.UID]; ok && e.resourceVersion == p.ResourceVersion {
		return e.req
	}
	return nil
}
