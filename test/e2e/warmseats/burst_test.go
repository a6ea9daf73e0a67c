package warmseats_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/internal/vllmsim"
	"github.com/berth-dev/berth/test/rigtest"
)

// The fleet: each replica serves 5 sequences of 2 s (2.5 requests/s at most) and loads its
// model for modelLoad once it is on a node; berth sizes it on a 2 s TTFT SLO and holds two warm
// seats. The steady rate needs one replica; the burst needs three, more than the fleet holds at
// the burst whether berth has ordered a second replica for the steady rate or not (it knows a
// replica carries what it has seen one carry, so a steady rate's jitter may order a second):
// a burst that the replicas already there carry would measure nothing.
const (
	app         = "llama"
	metricsPort = 8000
	modelLoad   = 60 * time.Second
	maxSeqs     = 5
	steadyRate  = 2.0
	burstRate   = 6.0 // 3×: more than two replicas carry (2 × 5 / 2 s)
	drain       = 60 * time.Second
)

// TestWarmSeatsAnswerABurst: a fleet at one replica holds two warm seats — seat pods that kept
// two L4 nodes up. A 3× burst: berth asks for more replicas, kube-scheduler preempts the seats
// for them, and the first new replica serves after its model load alone, not after a node
// launch as well; the keeper creates the seats again and Karpenter launches their nodes. When
// the burst ends the fleet shrinks and the replicas scaled away drain: no request is lost.
func TestWarmSeatsAnswerABurst(t *testing.T) {
	ctx := context.Background()
	r := rigtest.Current()
	c := r.Client
	ns := rigtest.Namespace(t, "warm")
	sim, err := rigtest.StartVLLMSim(ctx, r, berthBin, ns, "app="+app, metricsPort,
		"--max-num-seqs="+strconv.Itoa(maxSeqs), "--service-time=2s", "--kv-blocks=1000", "--kv-blocks-per-seq=110",
		"--rate="+strconv.FormatFloat(steadyRate, 'f', -1, 64), "--drain-timeout="+drain.String())
	if err != nil {
		t.Fatal(err)
	}
	dep := vllmsim.Deployment(ns, app, rig.GPUNodePoolName("l4"), metricsPort, nil)
	vllmsim.SetModelLoad(dep, modelLoad)
	dep.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(int64(drain.Seconds()))
	if err := c.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	so := vllmsim.ScaledObject(ns, app, vllmsim.ScaledObjectOptions{ScalerAddress: scalerProc.GRPCAddress,
		Min: 1, Max: 6, PollingInterval: 5, CooldownPeriod: 30, ScaleDownWindow: 30, MetricsPort: metricsPort,
		// No burst headroom: the seats are the floor's (minWarmSeats). The test runs a quarter of
		// an hour, less than a fleet needs to learn a headroom from its history — with one, the
		// SLO signal would grow the fleet but shrink it no further than its largest forecast
		// needs all along — the burst's (held learning, TestDecideSLO) — and neither the seat
		// path nor the drain would be seen.
		Metadata: map[string]string{"ttftSLOSeconds": "2", "coldStartSeconds": "80", "headroomQuantile": "0", "warmSeats": "2", "minWarmSeats": "2"}})
	if err := c.Create(ctx, so); err != nil {
		t.Fatal(err)
	}
	state := func(ctx context.Context) string {
		st, _ := sim.Status(ctx)
		ready, total, _ := replicas(ctx, c, ns)
		seats, seatsReady, _ := warmSeats(ctx, c, ns)
		return fmt.Sprintf("replicas %d/%d ready, warm seats %d/%d ready; vllm-sim %+v", ready, total, seatsReady, seats, st)
	}
	// Two seats on two nodes, the image pulled; the fleet at its one replica has learned what a
	// replica carries at the SLO.
	seatsAsked := time.Now()
	rigtest.Eventually(t, 6*time.Minute, 2*time.Second, "two warm seats ready and one replica serving", func(ctx context.Context) (bool, string, error) {
		ready, _, err := replicas(ctx, c, ns)
		if err != nil {
			return false, "", err
		}
		_, seatsReady, err := warmSeats(ctx, c, ns)
		return ready >= 1 && seatsReady == 2, state(ctx), err
	})
	t.Logf("warm seats ready %.0f s after the ScaledObject (node launch %s)", time.Since(seatsAsked).Seconds(), nodeReadyDelay)
	time.Sleep(90 * time.Second) // a minute and a half of windows at the steady load
	before, err := sim.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Every replica there is at the burst, starting ones included: the one measured is a replica
	// created for the burst (one the fleet ordered before it would make the figure meaningless).
	existing, err := fleetPods(ctx, c, ns, false)
	if err != nil {
		t.Fatal(err)
	}
	if carried := float64(len(existing)*maxSeqs) / 2; carried >= burstRate {
		t.Fatalf("%d replicas at the steady rate carry %.1f requests/s: the burst of %.1f would need no new one", len(existing), carried, burstRate)
	}
	burst := time.Now()
	if err := sim.SetRate(ctx, burstRate); err != nil {
		t.Fatal(err)
	}
	var firstServing time.Duration
	lastTrace := time.Time{}
	rigtest.Eventually(t, 5*time.Minute, time.Second, "a new replica serves the burst", func(ctx context.Context) (bool, string, error) {
		if time.Since(lastTrace) >= 5*time.Second { // what the scaler saw, for a slow answer's why
			lastTrace = time.Now()
			t.Logf("burst +%3.0f s: %s; scaler: %s", time.Since(burst).Seconds(), state(ctx), scalerGauges(ctx, scalerProc.MetricsURL, ns))
		}
		now, err := fleetPods(ctx, c, ns, true)
		for name := range now {
			if !existing[name] && firstServing == 0 {
				firstServing = time.Since(burst)
			}
		}
		return firstServing > 0, state(ctx), err
	})
	t.Logf("burst → first new replica serving: %.1f s (model load %s, a node launch %s)", firstServing.Seconds(), modelLoad, nodeReadyDelay)
	// A cold start is a node launch and a model load; a warm seat leaves the model load and the
	// time to see the burst (the one-minute window's rate passes what the fleet carries).
	if firstServing > modelLoad+time.Minute || firstServing >= modelLoad+nodeReadyDelay {
		t.Errorf("the first new replica served %.0f s after the burst: more than its %s model load and a minute to see the burst — it did not take a warm seat", firstServing.Seconds(), modelLoad)
	}
	onSeatNodes(ctx, t, c, ns, burst)
	rigtest.Eventually(t, 3*time.Minute, 2*time.Second, "the keeper creates the taken seats again", func(ctx context.Context) (bool, string, error) {
		seats, _, err := warmSeats(ctx, c, ns)
		return seats == 2, state(ctx), err
	})
	// The burst ends: back to the steady rate, the fleet shrinks, the replicas scaled away
	// finish what they hold.
	if err := sim.SetRate(ctx, steadyRate); err != nil {
		t.Fatal(err)
	}
	rigtest.Eventually(t, 6*time.Minute, 2*time.Second, "the fleet shrinks after the burst and its replicas drain", func(ctx context.Context) (bool, string, error) {
		var d appsv1.Deployment
		if err := c.Get(ctx, client.ObjectKeyFromObject(dep), &d); err != nil {
			return false, "", err
		}
		st, err := sim.Status(ctx)
		return ptr.Deref(d.Spec.Replicas, 0) <= 2 && st.Draining == 0 && st.Replicas <= 2, state(ctx), err
	})
	after, err := sim.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("through the burst and the scale-down: %d requests arrived, %d lost", after.Arrived-before.Arrived, after.Lost-before.Lost)
	if after.Lost != before.Lost {
		t.Errorf("%d requests lost on scale-down, want 0 (replicas drain for %s)", after.Lost-before.Lost, drain)
	}
}

// replicas counts the fleet's ready and live pods.
func replicas(ctx context.Context, c client.Client, ns string) (ready, total int, err error) {
	return rigtest.CountPods(ctx, c, ns, map[string]string{"app": app})
}

// fleetPods are the names of the fleet's live pods (not being deleted): the ready ones with
// readyOnly.
func fleetPods(ctx context.Context, c client.Client, ns string, readyOnly bool) (map[string]bool, error) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"app": app}); err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		if !readyOnly {
			out[p.Name] = true
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				out[p.Name] = true
			}
		}
	}
	return out, nil
}

// warmSeats counts the fleet's warm seats and those ready.
func warmSeats(ctx context.Context, c client.Client, ns string) (seats, ready int, err error) {
	ready, seats, err = rigtest.CountPods(ctx, c, ns, map[string]string{berthv1alpha1.WarmSeatForLabel: app})
	return seats, ready, err
}

// onSeatNodes checks that the replicas created for the burst run on nodes that were up before
// it: the seats' nodes, not new ones.
func onSeatNodes(ctx context.Context, t *testing.T, c client.Client, ns string, burst time.Time) {
	t.Helper()
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"app": app}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.CreationTimestamp.Time.Before(burst) || p.Spec.NodeName == "" {
			continue
		}
		var n corev1.Node
		if err := c.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, &n); err != nil {
			t.Fatal(err)
		}
		if n.CreationTimestamp.After(burst) {
			t.Errorf("replica %s of the burst runs on node %s, launched %.0f s after the burst: not a warm seat's", p.Name, n.Name, n.CreationTimestamp.Sub(burst).Seconds())
		}
	}
}

// scalerGauges is the scaler's view of the fleet in ns from its metrics page: desired
// replicas, learned capacity, forecast demand, the SLO signal, and any hold.
func scalerGauges(ctx context.Context, url, ns string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err.Error()
	}
	var out []string
	for line := range strings.SplitSeq(string(body), "\n") {
		if !strings.Contains(line, `namespace="`+ns+`"`) {
			continue
		}
		for _, name := range []string{"desired_replicas", "replica_capacity_requests_per_second", "demand_forecast_requests_per_second", `signal_value{`, "berth_scaler_held{"} {
			if strings.Contains(line, name) && !strings.HasSuffix(line, " 0") {
				out = append(out, strings.TrimPrefix(line, "berth_scaler_"))
			}
		}
	}
	return strings.Join(out, "; ")
}
