// Package kueue_test checks berth as Karpenter's capacity layer for Kueue, end to end: the real
// Kueue controller manager (its webhooks, certificate management and ProvisioningRequest
// admission check) with berth's controller as its own process, on the full rig with
// kube-scheduler, kube-controller-manager, kwok and Karpenter's kwok provider. The queues are
// exactly config/samples/kueue/queues.yaml, the setup docs/kueue.md tells platform teams to copy.
package kueue_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/berth-dev/berth/controllers/podgroup/gate"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/rigtest"
)

// Paths relative to this package.
const (
	instanceTypes = "../../testdata/gpu-instance-types.json"
	queuesFile    = "../../../config/samples/kueue/queues.yaml"
	jobFile       = "../../../config/samples/kueue/job.yaml"
)

func TestMain(m *testing.M) {
	rigtest.Main(m, rig.Options{}, func(ctx context.Context, r *rig.Rig) error {
		if err := rigtest.StartKarpenterCluster(ctx, r, rig.KwokOptions{NodeReadyDelay: 2 * time.Second}, instanceTypes); err != nil {
			return err
		}
		// Kueue first: it installs the ProvisioningRequest CRD, which berth serves where it is
		// served when it starts.
		if err := r.StartKueue(ctx); err != nil {
			return err
		}
		berth, err := rigtest.NewBerthProcess(ctx, r, gate.SourceKueue)
		if err != nil {
			return err
		}
		if err := berth.Start(ctx); err != nil {
			return err
		}
		if err := rigtest.WaitWebhookGates(ctx, r.Client); err != nil {
			return err
		}
		return applyFile(ctx, r, queuesFile)
	})
}

// applyFile applies every object of a YAML file in order.
func applyFile(ctx context.Context, r *rig.Rig, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	objs, err := rig.DecodeManifests(data)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for _, o := range objs {
		if err := r.Apply(ctx, o); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	return nil
}
