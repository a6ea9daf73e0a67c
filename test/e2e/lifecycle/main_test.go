// Package lifecycle_test checks gang admission off the happy path, end to end: berth's
// controller (its own process) with the pod-gate webhook, on the full rig with kube-scheduler,
// kube-controller-manager (the Job controller, the garbage collector), kwok (pods that run for
// a while: sim.berth.dev/run-time), Karpenter's kwok provider with GPU instance types, and the
// real JobSet controller. Ranks fail, Jobs run in waves, every pod is deleted at once, a JobSet
// restarts, a queue holds pods past the schedule timeout, plain pods race members for freed
// GPUs, seats carry hugepages and stay out of tenant quotas.
package lifecycle_test

import (
	"context"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/rigtest"
)

// instanceTypes is the rig's GPU instance-types file, relative to this package.
const instanceTypes = "../../testdata/gpu-instance-types.json"

// strandedAfter is the controller's --stranded-after here: short, so the race test recovers
// within the test's time; production's default is 30 s.
const strandedAfter = 5 * time.Second

// berth runs `berth controller` as a process.
var berth *rigtest.BerthProcess

func TestMain(m *testing.M) {
	rigtest.Main(m, rig.Options{}, func(ctx context.Context, r *rig.Rig) error {
		if err := rigtest.StartKarpenterCluster(ctx, r, rig.KwokOptions{NodeReadyDelay: 2 * time.Second}, instanceTypes); err != nil {
			return err
		}
		if err := r.StartJobSet(ctx); err != nil {
			return err
		}
		var err error
		if berth, err = rigtest.NewBerthProcess(ctx, r); err != nil {
			return err
		}
		berth.Args = []string{"--stranded-after=" + strandedAfter.String()}
		return berth.Start(ctx)
	})
}
