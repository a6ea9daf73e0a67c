// Package dra_test checks GPUs requested through Dynamic Resource Allocation end to end on the
// rig's DRA mode: kube-scheduler with its DynamicResources plugin, Karpenter's kwok provider
// whose GPU instance types carry the devices their nodes publish (NVIDIA's, as Karpenter's AWS
// provider declares them) and that sizes claims against them (--ignore-dra-requests=false),
// and the rig publishing those devices as gpu.nvidia.com ResourceSlices once the nodes are up
// (rig.StartDRADriver); berth's controller (its own process, with its pod-gate webhook) admits
// and provisions gangs whose members claim GPUs — berth's PodGroups, and Kubernetes' native
// ones (GenericWorkload, with DRAWorkloadResourceClaims: claims a whole gang shares).
package dra_test

import (
	"context"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/rigtest"
)

// instanceTypes is the rig's GPU instance-types file, relative to this package.
const instanceTypes = "../../testdata/gpu-instance-types.json"

// berth runs `berth controller` as a process, with its pod-gate webhook.
var berth *rigtest.BerthProcess

func TestMain(m *testing.M) {
	rigtest.Main(m, rig.Options{GenericWorkload: true, DRAWorkloadResourceClaims: true}, func(ctx context.Context, r *rig.Rig) error {
		if err := rigtest.StartCluster(ctx, r, rig.KwokOptions{NodeReadyDelay: 2 * time.Second}); err != nil {
			return err
		}
		if err := r.StartDRADriver(ctx, instanceTypes); err != nil {
			return err
		}
		if err := r.StartKarpenter(ctx, rig.KarpenterOptions{InstanceTypesFile: instanceTypes, DRA: true}); err != nil {
			return err
		}
		if err := r.InstallDevNodePools(ctx); err != nil {
			return err
		}
		var err error
		if berth, err = rigtest.NewBerthProcess(ctx, r); err != nil {
			return err
		}
		return berth.Start(ctx)
	})
}
