package seat

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestSeatLimits: the API rejects a pod requesting a resource it may not overcommit without an
// equal limit ("Limit must be set for non overcommitable resources"); a seat sets exactly those.
func TestSeatLimits(t *testing.T) {
	req := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("64Gi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"), "hugepages-2Mi": resource.MustParse("4Gi"),
		"hugepages-1Gi": resource.MustParse("2Gi"), "nvidia.com/gpu": resource.MustParse("8"),
		"vpc.amazonaws.com/efa": resource.MustParse("32"),
	}
	want := corev1.ResourceList{
		"hugepages-2Mi": resource.MustParse("4Gi"), "hugepages-1Gi": resource.MustParse("2Gi"),
		"nvidia.com/gpu": resource.MustParse("8"), "vpc.amazonaws.com/efa": resource.MustParse("32"),
	}
	if diff := cmp.Diff(want, Limits(req)); diff != "" {
		t.Errorf("seat limits (-want +got):\n%s", diff)
	}
}
