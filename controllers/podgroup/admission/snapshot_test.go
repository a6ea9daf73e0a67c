package admission

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/berth-dev/berth/scheduling"
	"github.com/berth-dev/berth/test/builders"
)

// TestRequestsKeptOnlyUnderAnIdentity: pods without a UID share no cached requests. Kept under
// their resourceVersion alone (a client that sets no UID gives every object one version), a
// CPU-only pod took a GPU pod's requests and a node with GPUs free read full.
func TestRequestsKeptOnlyUnderAnIdentity(t *testing.T) {
	gpu := builders.Pod("w", "team").GPU(1).Obj()
	cpu := builders.Pod("s", "team").Obj()
	gpu.ResourceVersion, cpu.ResourceVersion = "999", "999"
	var c requestCache
	c.update([]*corev1.Pod{gpu, cpu})
	for _, p := range []*corev1.Pod{gpu, cpu} {
		if req := c.lookup(p); req != nil {
			t.Errorf("pod %s without a UID: cached requests %v, want none (computed on lookup)", p.Name, req)
		}
	}
	gpu.UID, cpu.UID = "uid-w", "uid-s"
	c.update([]*corev1.Pod{gpu, cpu})
	gpus := func(req *scheduling.Requests) int64 {
		q := req.List()["nvidia.com/gpu"]
		return q.Value()
	}
	if req := c.lookup(cpu); req == nil || gpus(req) != 0 {
		t.Errorf("CPU-only pod's cached requests = %v, want its own (no GPU)", req)
	}
	if req := c.lookup(gpu); req == nil || gpus(req) != 1 {
		t.Errorf("GPU pod's cached requests = %v, want 1 GPU", req)
	}
}
