// Package autoscale_test checks berth's KEDA external scaler end to end with real parts: the
// KEDA operator and metrics adapter (built from KEDA's module), the HPA controller in
// kube-controller-manager reading external.metrics.k8s.io through the aggregation layer,
// `berth scaler` as its own process scraping pods on their kwok loopback IPs, vLLM's metrics
// served there by `berth dev vllm-sim`, and Karpenter's kwok provider launching GPU nodes for
// the replicas the HPA adds.
package autoscale_test

import (
	"context"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/rigtest"
)

const instanceTypes = "../../testdata/gpu-instance-types.json"

var (
	scalerProc *rigtest.Scaler
	sim        *rigtest.VLLMSim
	berthBin   string
)

// Namespace, selector and port of the vLLM Deployment under test.
const (
	namespace   = "inference"
	appLabel    = "llama"
	metricsPort = 8000
)

func TestMain(m *testing.M) {
	rigtest.Main(m, rig.Options{}, func(ctx context.Context, r *rig.Rig) error {
		bin, s, err := rigtest.StartAutoscalingRig(ctx, r, rig.KwokOptions{NodeReadyDelay: 2 * time.Second}, instanceTypes, "--stream-interval=500ms",
			"--model-namespace="+rig.BerthNamespace)
		if err != nil {
			return err
		}
		berthBin, scalerProc = bin, s
		// One replica serves 8 sequences for 2 s each: 4 requests/s; a full batch uses 88% of
		// the KV cache.
		sim, err = rigtest.StartVLLMSim(ctx, r, bin, namespace, "app="+appLabel, metricsPort,
			"--max-num-seqs=8", "--service-time=2s", "--kv-blocks=1000", "--kv-blocks-per-seq=110")
		return err
	})
}
