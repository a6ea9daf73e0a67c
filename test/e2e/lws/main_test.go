// Package lws_test checks multi-node inference end to end with real parts: LeaderWorkerSets
// run by the real LeaderWorkerSet controller (built from its module, its webhooks registered),
// each group adopted by berth's controller as one gang (its own process, the pod-gate webhook
// with the lws adapter), capacity from Karpenter's kwok provider in one batch per group, and
// the groups scaled by the real KEDA and HPA on what `berth scaler` reads from the group
// leaders, which `berth dev vllm-sim` serves.
package lws_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/berth-dev/berth/controllers/podgroup/gate"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/rigtest"
)

const instanceTypes = "../../testdata/gpu-instance-types.json"

// serving is the namespace the emulator serves the group leaders of; metricsPort their port.
const (
	serving     = "serving"
	metricsPort = 8000
)

var (
	scalerProc *rigtest.Scaler
	sim        *rigtest.VLLMSim
	berth      *rigtest.BerthProcess
)

func TestMain(m *testing.M) {
	rigtest.Main(m, rig.Options{}, func(ctx context.Context, r *rig.Rig) error {
		bin, s, err := rigtest.StartAutoscalingRig(ctx, r, rig.KwokOptions{NodeReadyDelay: 20 * time.Second}, instanceTypes, "--stream-interval=500ms")
		if err != nil {
			return err
		}
		scalerProc = s
		if err := r.StartLWS(ctx); err != nil {
			return err
		}
		if berth, err = rigtest.NewBerthProcess(ctx, r, gate.SourceLWS); err != nil {
			return err
		}
		if err := berth.Start(ctx); err != nil {
			return err
		}
		if err := rigtest.WaitWebhookGates(ctx, r.Client); err != nil {
			return err
		}
		if err := r.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: serving}}); err != nil {
			return err
		}
		// One group serves 4 sequences for 2 s each: 2 requests/s.
		sim, err = rigtest.StartVLLMSim(ctx, r, bin, serving, leaders, metricsPort,
			"--max-num-seqs=4", "--service-time=2s", "--kv-blocks=1000", "--kv-blocks-per-seq=200")
		return err
	})
}
