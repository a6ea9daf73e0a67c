package admission

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/berth-dev/berth/scheduling"
	"github.com/berth-dev/berth/test/builders"
)

// TestRequestsKeptPerVersion: each version of a pod keeps its own requests, under its UID.
// Kept under resourceVersion alone (a client that sets no UID gives every object one version), a
// CPU-only pod once took a GPU pod's requests and a node with GPUs free read full: pods without a
// UID are computed when looked up. A new version of a pod is computed afresh, and versions a
// cycle no longer sees are dropped.
func TestRequestsKeptPerVersion(t *testing.T) {
	gpu := builders.Pod("w", "team").GPU(1).Obj()
	cpu := builders.Pod("s", "team").Obj()
	gpu.ResourceVersion, cpu.ResourceVersion = "999", "999"
	gpus := func(req *scheduling.Requests) int64 {
		q := req.List()["nvidia.com/gpu"]
		return q.Value()
	}
	var c requestCache
	c.update([]*corev1.Pod{gpu, cpu})
	for _, p := range []*corev1.Pod{gpu, cpu} {
		if req := c.lookup(p); req != nil {
			t.Errorf("pod %s without a UID: cached requests %v, want none (computed on lookup)", p.Name, req)
		}
	}
	gpu.UID, cpu.UID = "uid-w", "uid-s"
	c.update([]*corev1.Pod{gpu, cpu})
	if req := c.lookup(cpu); req == nil || gpus(req) != 0 {
		t.Errorf("CPU-only pod's cached requests = %v, want its own (no GPU)", req)
	}
	if req := c.lookup(gpu); req == nil || gpus(req) != 1 {
		t.Errorf("GPU pod's cached requests = %v, want 1 GPU", req)
	}
	// The next version of the GPU pod asks for 2 GPUs.
	next := builders.Pod("w", "team").GPU(2).Obj()
	next.UID, next.ResourceVersion = gpu.UID, "1000"
	if req := c.lookup(next); req != nil {
		t.Errorf("a version the cache never saw: cached requests %v, want none (computed on lookup)", req)
	}
	c.update([]*corev1.Pod{next, cpu})
	if req := c.lookup(next); req == nil || gpus(req) != 2 {
		t.Errorf("new version's cached requests = %v, want 2 GPUs", req)
	}
	if req := c.lookup(gpu); req != nil {
		t.Errorf("a version the last cycle did not see is still served: %v", req)
	}
	c.update([]*corev1.Pod{next})
	if len(c.entries) != 1 {
		t.Errorf("cache holds %d entries, want 1 (one per pod the cycle saw)", len(c.entries))
	}
}
