// Package nativegangs_test runs Kubernetes' native gang scheduling (feature gate GenericWorkload:
// scheduling.k8s.io/v1beta1 Workload and PodGroup, kube-scheduler's gang cycle) on the full rig
// with Karpenter's kwok provider and berth's controller as its own process: what upstream does
// alone, and the whole-gang capacity berth adds.
package nativegangs_test

import (
	"context"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/rigtest"
)

const instanceTypes = "../../testdata/gpu-instance-types.json"

// berth runs `berth controller` as a process (stopped while a test looks at upstream alone).
var berth *rigtest.BerthProcess

func TestMain(m *testing.M) {
	rigtest.Main(m, rig.Options{GenericWorkload: true}, func(ctx context.Context, r *rig.Rig) error {
		if err := rigtest.StartKarpenterCluster(ctx, r, rig.KwokOptions{NodeReadyDelay: 2 * time.Second}, instanceTypes); err != nil {
			return err
		}
		var err error
		if berth, err = rigtest.NewBerthProcess(ctx, r); err != nil {
			return err
		}
		return berth.Start(ctx)
	})
}
