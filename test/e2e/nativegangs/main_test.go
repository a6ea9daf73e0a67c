// Package nativegangs_test runs Kubernetes' native gang scheduling (feature gate GenericWorkload:
// scheduling.k8s.io/v1beta1 Workload and PodGroup, kube-scheduler's gang cycle) on the full rig
// with Karpenter's kwok provider, to check what berth adds to it.
package nativegangs_test

import (
	"context"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/rigtest"
)

const instanceTypes = "../../testdata/gpu-instance-types.json"

func TestMain(m *testing.M) {
	rigtest.Main(m, rig.Options{GenericWorkload: true}, func(ctx context.Context, r *rig.Rig) error {
		return rigtest.StartKarpenterCluster(ctx, r, rig.KwokOptions{NodeReadyDelay: 2 * time.Second}, instanceTypes)
	})
}
