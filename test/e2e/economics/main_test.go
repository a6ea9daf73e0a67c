// Package economics_test holds berth simulate's fidelity check: a 20-minute request trace
// replayed on the rig — the real KEDA operator and metrics adapter, the HPA in
// kube-controller-manager, `berth scaler`, Karpenter's kwok provider launching L4 nodes that
// take a while to become Ready, and `berth dev vllm-sim` running the L4 engine model with a
// model load before each replica serves — and through the simulator, which must agree on the
// GPU-hours and the p95 time to first token.
package economics_test

import (
	"context"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/rigtest"
)

const instanceTypes = "../../testdata/gpu-instance-types.json"

// nodeReadyDelay is how long the rig's kwok nodes take from launch to Ready.
const nodeReadyDelay = 30 * time.Second

var (
	scalerProc *rigtest.Scaler
	berthBin   string
)

func TestMain(m *testing.M) {
	rigtest.Main(m, rig.Options{}, func(ctx context.Context, r *rig.Rig) error {
		var err error
		berthBin, scalerProc, err = rigtest.StartAutoscalingRig(ctx, r, rig.KwokOptions{NodeReadyDelay: nodeReadyDelay}, instanceTypes, "--stream-interval=500ms")
		return err
	})
}
