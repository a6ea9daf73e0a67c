// Package warmseats_test checks berth's warm seats end to end with real parts: the KEDA
// operator and metrics adapter, the HPA in kube-controller-manager, `berth scaler
// --warm-seats` as the chart runs it (its own ServiceAccount bound to config/rbac's scaler and
// warm-seat roles), Karpenter's kwok provider launching L4 nodes that take an L4's launch time
// to turn Ready, kube-scheduler preempting a seat for a replica, and `berth dev vllm-sim`
// serving each replica after a model load and draining replicas scaled away.
package warmseats_test

import (
	"context"
	"testing"
	"time"

	"github.com/berth-dev/berth/controllers/podgroup/admission"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/rigtest"
)

const instanceTypes = "../../testdata/gpu-instance-types.json"

// nodeReadyDelay is how long a new node takes from launch to Ready: an L4's (the catalogue's
// g6 launch time; berth simulate's l4 fleet).
const nodeReadyDelay = 110 * time.Second

var (
	scalerProc *rigtest.Scaler
	berthBin   string
)

func TestMain(m *testing.M) {
	rigtest.Main(m, rig.Options{}, func(ctx context.Context, r *rig.Rig) error {
		var err error
		berthBin, scalerProc, err = rigtest.StartAutoscalingRig(ctx, r, rig.KwokOptions{NodeReadyDelay: nodeReadyDelay}, instanceTypes,
			"--stream-interval=500ms", "--warm-seats", "--warm-seat-pull=image-volume")
		if err != nil {
			return err
		}
		// The chart ships the seat PriorityClass (the controller installs it too); this rig runs
		// no controller.
		return r.Client.Create(ctx, admission.SeatPriorityClass())
	})
}
