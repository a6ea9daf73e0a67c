// Package gangbench measures whole-gang provisioning against plain Karpenter + kube-scheduler
// on the rig, with kwok's node-ready delay set to what a GPU node takes (about 70 s): how long
// capacity takes, and how much GPU time members spend bound or running while their gang is
// incomplete. It has benchmarks only (`make bench`); the results are in docs/benchmarks.md.
package gangbench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/rigtest"
)

// DelayEnv overrides the node-ready delay (a Go duration; default 70s).
const DelayEnv = "BERTH_BENCH_NODE_READY_DELAY"

// instanceTypes is the rig's GPU instance-types file, relative to this package.
const instanceTypes = "../../testdata/gpu-instance-types.json"

// nodeReadyDelay is the kwok node-ready delay of this run.
var nodeReadyDelay = 70 * time.Second

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		os.Exit(m.Run()) // no benchmark asked for (plain `go test ./...`): no rig needed
	}
	if v := os.Getenv(DelayEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s=%q: %v\n", DelayEnv, v, err)
			os.Exit(2)
		}
		nodeReadyDelay = d
	}
	rigtest.Main(m, rig.Options{}, func(ctx context.Context, r *rig.Rig) error {
		if err := rigtest.StartCluster(ctx, r, rig.KwokOptions{NodeReadyDelay: nodeReadyDelay}); err != nil {
			return err
		}
		if err := r.StartKarpenter(ctx, rig.KarpenterOptions{InstanceTypesFile: instanceTypes}); err != nil {
			return err
		}
		if err := r.InstallDevNodePools(ctx); err != nil {
			return err
		}
		berth, err := rigtest.NewBerthProcess(ctx, r)
		if err != nil {
			return err
		}
		return berth.Start(ctx)
	})
}
