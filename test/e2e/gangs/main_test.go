// Package gangs_test checks whole-gang provisioning end to end: berth's controller (its own
// process, as in production) with the pod-gate webhook, on the full rig with kube-scheduler,
// kube-controller-manager, kwok and Karpenter's kwok provider with GPU instance types; and
// ProvisioningRequests of class best-effort-atomic-scale-up served with that capacity.
package gangs_test

import (
	"context"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/rigtest"
)

// instanceTypes is the rig's GPU instance-types file, relative to this package.
const instanceTypes = "../../testdata/gpu-instance-types.json"

// berth runs `berth controller` as a process (the restart test kills and restarts it).
var berth *rigtest.BerthProcess

func TestMain(m *testing.M) {
	rigtest.Main(m, rig.Options{}, func(ctx context.Context, r *rig.Rig) error {
		if err := rigtest.StartKarpenterCluster(ctx, r, rig.KwokOptions{NodeReadyDelay: 2 * time.Second}, instanceTypes); err != nil {
			return err
		}
		// Before the controller starts: it serves ProvisioningRequests where their API is served.
		if err := rigtest.InstallProvisioningRequestCRD(ctx, r); err != nil {
			return err
		}
		var err error
		if berth, err = rigtest.NewBerthProcess(ctx, r); err != nil {
			return err
		}
		return berth.Start(ctx)
	})
}
