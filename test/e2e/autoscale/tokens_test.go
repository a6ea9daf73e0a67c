package autoscale_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/vllmsim"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestTokenLoadSizesAnL4Fleet: vllm-sim runs each replica as an L4 serving Llama-3.1-8B token
// by token (step times from the batch, chunked prefill, lengths drawn like Azure's chat trace),
// every replica loads its model before it serves, and the ScaledObject sizes the fleet on
// prompt plus generated tokens per second. A request averages about 1,500 tokens with the
// profile's lengths, so 1.2 requests/s is about 1,800 tokens/s: three replicas at the 600
// target (an L4 replica sustains about 1,500 tokens/s at 16 concurrent requests; overloaded,
// preemption thrash takes it below 1,000). berth's token signal asks for them, the HPA adds
// them, Karpenter launches their nodes, and the new replicas serve only after their model load.
func TestTokenLoadSizesAnL4Fleet(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	const app = "llama-l4"
	const modelLoad = 15 * time.Second
	created := time.Now()
	ns, sim, _ := ownFleet(t, "inference-tokens", app, modelLoad, "--profile="+vllmsim.ProfileL4Llama8B, "--pattern=poisson", "--seed=3")
	so := vllmsim.ScaledObject(ns, app, vllmsim.ScaledObjectOptions{ScalerAddress: scalerProc.GRPCAddress,
		Min: 1, Max: 5, PollingInterval: 5, CooldownPeriod: 10, ScaleDownWindow: 10, MetricsPort: metricsPort,
		Metadata: map[string]string{"targetTokensPerSecond": "600"}})
	if err := c.Create(ctx, so); err != nil {
		t.Fatal(err)
	}
	rigtest.Eventually(t, 3*time.Minute, time.Second, "the first replica serves after its model load", func(ctx context.Context) (bool, string, error) {
		ready, total, err := replicasOf(ctx, c, ns, app)
		return ready == 1, fmt.Sprintf("%d/%d ready; %s", ready, total, scaledObjectState(ctx, c, ns, app)), err
	})
	if waited := time.Since(created); waited < modelLoad {
		t.Errorf("the first replica was Ready %s after its Deployment, before its %s model load", waited, modelLoad)
	}
	if err := sim.SetLoad(ctx, 1.2, string(vllmsim.PatternPoisson), 3); err != nil {
		t.Fatal(err)
	}
	tokensAsked := func(ctx context.Context) string {
		var keep []string
		for _, l := range strings.Split(scalerSeries(ctx, "berth_scaler_signal_value", "berth_scaler_desired_replicas"), "; ") {
			if strings.Contains(l, `scaled_object="`+app+`"`) {
				keep = append(keep, l)
			}
		}
		return strings.Join(keep, "; ")
	}
	// The token rate is the counters' growth over the scaler's one-minute window, so it ramps
	// up over that minute; each step then waits for its replicas' node and model load.
	rigtest.Eventually(t, 8*time.Minute, 2*time.Second, "the token load grows the fleet", func(ctx context.Context) (bool, string, error) {
		ready, total, err := replicasOf(ctx, c, ns, app)
		st, _ := sim.Status(ctx)
		return ready >= 3, fmt.Sprintf("%d/%d ready; sim %+v; scaler: %s", ready, total, st, tokensAsked(ctx)), err
	})
	if s := tokensAsked(ctx); !strings.Contains(s, `signal="tokens"`) {
		t.Errorf("the scaler reports no token signal for %s: %s", app, s)
	}
	h, err := sim.TTFT(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("L4 fleet at 1.2 requests/s: %d first tokens, mean TTFT %.2f s; %s", h.Count, h.Sum/float64(max(h.Count, 1)), tokensAsked(ctx))
	if err := sim.SetRate(ctx, 0); err != nil {
		t.Fatal(err)
	}
}
