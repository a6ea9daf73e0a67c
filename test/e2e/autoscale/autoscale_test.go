package autoscale_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/internal/vllmsim"
	"github.com/berth-dev/berth/test/rigtest"
)

func TestLoadScalesVLLMUpAndDown(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	// What a user writes, with an HPA that may scale down after 10 s (default 5 min) to keep the
	// test short.
	startAtMinimum(t, vllmsim.ScaledObjectOptions{ScalerAddress: scalerProc.GRPCAddress,
		Min: 1, Max: 5, PollingInterval: 5, CooldownPeriod: 10, ScaleDownWindow: 10, MetricsPort: metricsPort,
		TargetQueueDepth: "4", TargetKVCache: "0.8"}, "berth-queue-depth")

	// Load: 14 requests/s, against 4/s per replica. The queue grows; the HPA adds replicas;
	// Karpenter launches GPU nodes for them; vllm-sim serves each new pod as it runs.
	if err := sim.SetRate(ctx, 14); err != nil {
		t.Fatal(err)
	}
	rigtest.Eventually(t, 5*time.Minute, 2*time.Second, "replicas rise to absorb the load", func(ctx context.Context) (bool, string, error) {
		ready, total, err := replicas(ctx, c)
		return ready >= 4, fmt.Sprintf("%d/%d ready; scaler: %s", ready, total, scalerState(ctx)), err
	})
	onKarpenterNodes(ctx, t, c)

	// Load stops: the queue drains, sequences finish, replicas fall back to minReplicaCount.
	if err := sim.SetRate(ctx, 0); err != nil {
		t.Fatal(err)
	}
	rigtest.Eventually(t, 4*time.Minute, 2*time.Second, "replicas fall back to the minimum", func(ctx context.Context) (bool, string, error) {
		_, total, err := replicas(ctx, c)
		return total == 1, fmt.Sprintf("%d replicas; scaler: %s", total, scalerState(ctx)), err
	})
}

// TestKVCacheOnlySettlesExactly: a trigger with only targetKVCacheUsage, on a fleet whose total
// KV usage is steady, settles at exactly ceil(ΣKV / target) replicas — not one more (the
// off-by-one KEDA's rounding caused) and not one less — and stays there.
func TestKVCacheOnlySettlesExactly(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	// 0.8 is a target where the value berth sent before (the milli product plus half a milli)
	// is rounded up by KEDA's %.3f: 2 replicas came out as 3 (1.6005 → "1.601").
	const target = 0.8
	startAtMinimum(t, vllmsim.ScaledObjectOptions{ScalerAddress: scalerProc.GRPCAddress,
		Min: 1, Max: 6, PollingInterval: 5, CooldownPeriod: 10, ScaleDownWindow: 10, MetricsPort: metricsPort,
		TargetKVCache: "0.8"}, "berth-kv-cache-usage")
	// Each running sequence holds 110 of a replica's 1000 KV blocks for 2 s, so once no request
	// queues the fleet's total KV usage is rate × 2 s × 0.11 whatever the replica count. At
	// 5.5/s that is 1.21 — 2 replicas — and it stays inside 2's band, (0.8, 1.6], with the
	// ±2 sequences (±0.22) the replicas' unsynchronised pages add to the sum, and above the
	// 0.64 under which 2 would shrink (the scale-down headroom): a band a sequence or two wide
	// (as at 0.425) let that noise push the fleet to one more replica, which the headroom kept.
	wantFor := func(st vllmsim.LoadStatus) int { return int(math.Ceil(float64(st.Running)*0.11/target - 1e-9)) }
	const rate = 5.5
	if err := sim.SetRate(ctx, rate); err != nil {
		t.Fatal(err)
	}
	want := int(math.Ceil(rate * 2 * 0.11 / target))
	rigtest.Eventually(t, 4*time.Minute, 2*time.Second, fmt.Sprintf("%g requests/s: %d replicas ready, the backlog drained", rate, want), func(ctx context.Context) (bool, string, error) {
		ready, total, err := replicas(ctx, c)
		st, serr := sim.Status(ctx)
		return ready == want && total == want && serr == nil && st.Waiting == 0, fmt.Sprintf("%d/%d ready, %+v; scaler: %s", ready, total, st, scalerState(ctx)), err
	})
	// Settled: for 30 s the Deployment stays at ceil(ΣKV/target) for the ΣKV the fleet holds.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		st, err := sim.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var d appsv1.Deployment
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: appLabel}, &d); err != nil {
			t.Fatal(err)
		}
		if got, want := int(ptr.Deref(d.Spec.Replicas, 0)), wantFor(st); st.Waiting > 0 || got != want {
			t.Fatalf("ΣKV %.2f (%d running, %d waiting): Deployment at %d replicas, want ceil(ΣKV/%.2f) = %d; scaler: %s",
				float64(st.Running)*0.11, st.Running, st.Waiting, got, target, want, scalerState(ctx))
		}
		time.Sleep(2 * time.Second)
	}
	if err := sim.SetRate(ctx, 0); err != nil {
		t.Fatal(err)
	}
}

// TestStalledReplicasDoNotFreezeScaleUp: replicas that will not become ready never hold a
// scale-up: one unschedulable with no node coming (Karpenter says so at once) and one that never
// gets scheduled at all (it stops holding after startupTimeoutSeconds). Before, either one
// counted as "starting" for good and no scale-up ever happened.
func TestStalledReplicasDoNotFreezeScaleUp(t *testing.T) {
	ctx := context.Background()
	c := rigtest.Current().Client
	startAtMinimum(t, vllmsim.ScaledObjectOptions{ScalerAddress: scalerProc.GRPCAddress,
		Min: 1, Max: 5, PollingInterval: 5, CooldownPeriod: 10, ScaleDownWindow: 10, MetricsPort: metricsPort,
		TargetQueueDepth: "4", StartupTimeout: "20"}, "berth-queue-depth")
	stray := func(name string, mutate func(*corev1.PodSpec)) {
		tmpl := vllmsim.Deployment(namespace, appLabel, rig.GPUNodePoolName("l4"), metricsPort, nil).Spec.Template
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: tmpl.Labels}, Spec: tmpl.Spec}
		mutate(&p.Spec)
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), p, client.GracePeriodSeconds(0)) })
	}
	// A GPU family no NodePool offers: kube-scheduler finds no node, Karpenter cannot launch one.
	stray("llama-stockout", func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{karpv1.NodePoolLabelKey: "no-such-pool"} })
	// A scheduler that does not exist: Pending with no word from anyone.
	stray("llama-unscheduled", func(s *corev1.PodSpec) { s.SchedulerName = "berth-test-nobody" })
	rigtest.Eventually(t, 2*time.Minute, time.Second, "the scaler calls both stray replicas stalled", func(ctx context.Context) (bool, string, error) {
		st := scalerSeries(ctx, "berth_scaler_stalled_replicas")
		return strings.Contains(st, `reason="unschedulable",scaled_object="llama"} 1`) && strings.Contains(st, `reason="startup_timeout",scaled_object="llama"} 1`), st, nil
	})
	if err := sim.SetRate(ctx, 14); err != nil {
		t.Fatal(err)
	}
	rigtest.Eventually(t, 5*time.Minute, 2*time.Second, "replicas rise past the stalled ones", func(ctx context.Context) (bool, string, error) {
		ready, total, err := replicas(ctx, c)
		return ready >= 4, fmt.Sprintf("%d/%d ready; scaler: %s", ready, total, scalerState(ctx)), err
	})
	if err := sim.SetRate(ctx, 0); err != nil {
		t.Fatal(err)
	}
	rigtest.Eventually(t, 4*time.Minute, 2*time.Second, "replicas fall back to the minimum", func(ctx context.Context) (bool, string, error) {
		ready, _, err := replicas(ctx, c)
		return ready == 1, fmt.Sprintf("%d ready; scaler: %s", ready, scalerState(ctx)), err
	})
}

// serving creates the inference namespace and the vLLM Deployment unless an earlier test did,
// and waits for a ready replica.
func serving(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	c := rigtest.Current().Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	dep := vllmsim.Deployment(namespace, appLabel, rig.GPUNodePoolName("l4"), metricsPort, nil)
	// These tests are about the replica counts the scaler asks for; the model load is checked
	// from zero (fromzero_test.go).
	vllmsim.SetModelLoad(dep, 0)
	if err := c.Create(ctx, dep); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	rigtest.Eventually(t, 3*time.Minute, time.Second, "a replica runs on a GPU node Karpenter launched", func(ctx context.Context) (bool, string, error) {
		ready, total, err := replicas(ctx, c)
		return ready >= 1, fmt.Sprintf("%d/%d ready", ready, total), err
	})
}

// applyScaledObject replaces the Deployment's ScaledObject with o and waits until the HPA KEDA
// keeps for it reads metric from berth.
func applyScaledObject(t testing.TB, o vllmsim.ScaledObjectOptions, metric string) {
	t.Helper()
	ctx := context.Background()
	c := rigtest.Current().Client
	so := vllmsim.ScaledObject(namespace, appLabel, o)
	// Replaced, not updated: an updated ScaledObject can be served with its old trigger for a
	// moment (KEDA rebuilds its scaler cache and the HPA's metric list asynchronously), which
	// would let one test's SLO act on the next test's fleet.
	if err := c.Delete(ctx, so.DeepCopy()); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	rigtest.Eventually(t, 2*time.Minute, time.Second, "the previous ScaledObject and its HPA are gone", func(ctx context.Context) (bool, string, error) {
		errSO := c.Get(ctx, client.ObjectKeyFromObject(so), so.DeepCopy())
		errHPA := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "keda-hpa-" + appLabel}, &autoscalingv2.HorizontalPodAutoscaler{})
		return apierrors.IsNotFound(errSO) && apierrors.IsNotFound(errHPA), fmt.Sprintf("ScaledObject: %v; HPA: %v", errSO, errHPA), nil
	})
	if err := c.Create(ctx, so); err != nil {
		t.Fatal(err)
	}
	rigtest.Eventually(t, 2*time.Minute, time.Second, "KEDA's HPA reads "+metric+" from berth", func(ctx context.Context) (bool, string, error) {
		var hpa autoscalingv2.HorizontalPodAutoscaler
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "keda-hpa-" + appLabel}, &hpa); err != nil {
			return false, fmt.Sprintf("%v; %s", err, scaledObjectState(ctx, c, namespace, appLabel)), nil
		}
		for _, m := range hpa.Status.CurrentMetrics {
			if m.External != nil && strings.Contains(m.External.Metric.Name, metric) {
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("conditions %v", hpa.Status.Conditions), nil
	})
}

// ownFleet is a fleet of its own for one test: a namespace named prefix-<random> (deleted when
// the test ends), a vllm-sim following app's pods there with simFlags, and app's one-replica
// Deployment whose replicas load their model for modelLoad.
func ownFleet(t *testing.T, prefix, app string, modelLoad time.Duration, simFlags ...string) (string, *rigtest.VLLMSim, *appsv1.Deployment) {
	t.Helper()
	ctx := context.Background()
	r := rigtest.Current()
	ns := rigtest.Namespace(t, prefix)
	sim, err := rigtest.StartVLLMSim(ctx, r, berthBin, ns, "app="+app, metricsPort, simFlags...)
	if err != nil {
		t.Fatal(err)
	}
	dep := vllmsim.Deployment(ns, app, rig.GPUNodePoolName("l4"), metricsPort, nil)
	vllmsim.SetModelLoad(dep, modelLoad)
	if err := r.Client.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	return ns, sim, dep
}

// scaledObjectState is the ScaledObject's status conditions, for failure messages: why KEDA
// has not built its HPA or scale loop.
func scaledObjectState(ctx context.Context, c client.Client, ns, name string) string {
	so := vllmsim.ScaledObject(ns, name, vllmsim.ScaledObjectOptions{})
	if err := c.Get(ctx, client.ObjectKeyFromObject(so), so); err != nil {
		return "ScaledObject: " + err.Error()
	}
	conds, _, _ := unstructured.NestedSlice(so.Object, "status", "conditions")
	return fmt.Sprintf("ScaledObject conditions %v", conds)
}

// replicas counts the Deployment's ready and live pods.
func replicas(ctx context.Context, c client.Client) (ready, total int, err error) {
	return replicasOf(ctx, c, namespace, appLabel)
}

// replicasOf counts the ready and live pods labelled app in ns.
func replicasOf(ctx context.Context, c client.Client, ns, app string) (ready, total int, err error) {
	return rigtest.CountPods(ctx, c, ns, map[string]string{"app": app})
}

// onKarpenterNodes checks that every replica runs on a node Karpenter launched and registered
// for the L4 NodePool (the rig has no other GPU nodes): the capacity the HPA's replicas needed
// came from Karpenter. Whether a new node was needed depends on what earlier tests left.
func onKarpenterNodes(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels{"app": appLabel}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" {
			continue
		}
		var n corev1.Node
		if err := c.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, &n); err != nil {
			t.Fatal(err)
		}
		if n.Labels[karpv1.NodePoolLabelKey] != rig.GPUNodePoolName("l4") || n.Labels[karpv1.NodeRegisteredLabelKey] != "true" {
			t.Errorf("replica %s runs on %s (labels %v), not on a node Karpenter launched for the L4 NodePool", p.Name, n.Name, n.Labels)
		}
	}
}

// startAtMinimum brings the Deployment under ScaledObject o with no load and waits until one
// replica runs and nothing else: each test starts from the same fleet whatever ran before it
// (make test shuffles the order).
func startAtMinimum(t testing.TB, o vllmsim.ScaledObjectOptions, metric string) {
	t.Helper()
	serving(t)
	if err := sim.SetRate(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	applyScaledObject(t, o, metric)
	c := rigtest.Current().Client
	rigtest.Eventually(t, 4*time.Minute, 2*time.Second, "the fleet starts at one replica", func(ctx context.Context) (bool, string, error) {
		ready, total, err := replicas(ctx, c)
		return ready == 1 && total == 1, fmt.Sprintf("%d/%d ready; scaler: %s", ready, total, scalerState(ctx)), err
	})
}

// scalerState is the scaler's own view (its berth_scaler_* series), for failure messages.
func scalerState(ctx context.Context) string {
	return scalerSeries(ctx, "berth_scaler_signal_value", "berth_scaler_desired_replicas", "berth_scaler_current_replicas",
		"berth_scaler_evaluation_errors_total", "berth_scaler_held{", "berth_scaler_stalled_replicas")
}

// scalerSeries is the scaler's series whose lines start with one of prefixes, joined by "; ".
func scalerSeries(ctx context.Context, prefixes ...string) string {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, scalerProc.MetricsURL, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var keep []string
	for _, l := range strings.Split(string(body), "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(l, p) {
				keep = append(keep, l)
				break
			}
		}
	}
	return strings.Join(keep, "; ")
}
