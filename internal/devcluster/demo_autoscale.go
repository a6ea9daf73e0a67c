package devcluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/internal/vllmsim"
)

// Scene 5: inference autoscaling. A vLLM Deployment (one L4 GPU per replica; the dev cluster's
// vLLM emulator serves vLLM's metrics on each pod's IP) gets a KEDA ScaledObject whose
// external-push trigger points at berth's scaler. The demo ramps the emulator's request rate up
// and down and prints, every few seconds, what berth reads and decides (queue depth, KV-cache
// usage, desired replicas), what the HPA does (replicas) and what Karpenter does (L4 nodes).
const (
	inferenceName = "llama-serve"
	inferencePool = "l4"
	// perReplicaRate is what one emulated replica serves: 8 sequences of 2 s.
	perReplicaRate = 4.0
	autoscaleMax   = 4
	// autoscaleStep bounds each phase of the ramp.
	autoscaleStep = 3 * time.Minute
	// autoscaleTimeout bounds scene 5: the first replica, the ramp and the scale-down's node.
	autoscaleTimeout = time.Minute + 3*autoscaleStep + 2*time.Minute
)

// autoscaleScene runs scene 5.
func autoscaleScene(ctx context.Context, d *demo) error {
	c, p := d.c, d.p
	if err := waitForKEDA(ctx, d); err != nil {
		return err
	}
	var eps corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: EndpointsConfigMap}, &eps); err != nil {
		return fmt.Errorf("reading the dev cluster's endpoints (ConfigMap kube-system/%s; restart with 'berth dev down && berth dev up'): %w", EndpointsConfigMap, err)
	}
	dep := vllmsim.Deployment(DemoNamespace, inferenceName, rig.GPUNodePoolName(inferencePool), VLLMSimPort, map[string]string{berthv1alpha1.VLLMSimLabel: "true"})
	// The scene shows the scaler following the load; a realistic model load would only add
	// 90 s of waiting to each step of it.
	vllmsim.SetModelLoad(dep, 0)
	w := &autoscaleWatch{c: c, p: p, metricsURL: eps.Data["scaler-metrics"], loadURL: eps.Data["vllm-sim-admin"],
		scaledObject: inferenceName, pods: dep.Spec.Selector.MatchLabels, product: inferencePool, groupSize: 1, nodes: map[string]bool{}}
	if err := c.Create(ctx, dep); err != nil {
		return fmt.Errorf("creating Deployment %s: %w", inferenceName, err)
	}
	p.say("created Deployment %s/%s (1 replica, 1 L4 GPU each; one replica serves %.0f requests/s)", DemoNamespace, inferenceName, perReplicaRate)
	if err := w.until(ctx, time.Minute, func(s autoscaleSnap) bool { return s.ready == 1 }); err != nil {
		return fmt.Errorf("first replica: %w", err)
	}
	// The HPA may scale down after 15 s (default 5 min) so the demo stays short.
	so := vllmsim.ScaledObject(DemoNamespace, inferenceName, vllmsim.ScaledObjectOptions{ScalerAddress: eps.Data["scaler-grpc"],
		Min: 1, Max: autoscaleMax, PollingInterval: 5, CooldownPeriod: 30, ScaleDownWindow: 15, MetricsPort: VLLMSimPort,
		TargetQueueDepth: "4", TargetKVCache: "0.8"})
	if err := c.Create(ctx, so); err != nil {
		return fmt.Errorf("creating ScaledObject %s: %w", inferenceName, err)
	}
	p.say("created ScaledObject %s: external-push trigger → berth scaler at %s, targetQueueDepth 4, targetKVCacheUsage 0.8, 1–%d replicas",
		inferenceName, eps.Data["scaler-grpc"], autoscaleMax)
	if err := w.ramp(ctx, autoscaleStep, []rampPhase{
		{2, "load: 2 requests/s — one replica copes", func(s autoscaleSnap) bool { return s.elapsed > 20*time.Second }},
		{12, "load: 12 requests/s — 3 replicas' worth", func(s autoscaleSnap) bool { return s.ready >= autoscaleMax && s.queue >= 0 && s.queue < 4 }},
		{0, "load stops", func(s autoscaleSnap) bool { return s.total == 1 }},
	}); err != nil {
		return err
	}
	p.say("the Deployment followed its load: up to %d replicas on %d L4 nodes Karpenter launched, back to 1", w.peakReplicas, w.peakNodes)
	// Karpenter removes the node the scale-down emptied after the pool's consolidateAfter (30 s).
	err := w.until(ctx, 90*time.Second, func(autoscaleSnap) bool { return len(w.nodes) <= 1 })
	if errors.Is(err, errTimedOut) {
		p.say("the emptied L4 node is still there; Karpenter consolidates it after the pool's consolidateAfter")
		return nil
	}
	return err
}

// autoscaleWatch prints the scene's state whenever it changes.
type autoscaleWatch struct {
	c                   client.Client
	p                   *printer
	metricsURL, loadURL string
	scaledObject        string
	pods                client.MatchingLabels
	// product is the GPU product of the replicas' NodePool (rig.GPUNodePoolName); groupSize the
	// pods of one replica (a LeaderWorkerSet group's: a replica is ready when all of it is).
	product                 string
	groupSize               int
	last                    string
	lastShape               [3]int
	lastAt                  time.Time
	nodes                   map[string]bool
	peakReplicas, peakNodes int
}

// autoscaleSnap is one look at the scene.
type autoscaleSnap struct {
	queue, kv, desired float64
	ready, total       int
	elapsed            time.Duration
}

// rampPhase is one step of a scene's load ramp: the emulator's rate, what the demo says, and
// when the step is done.
type rampPhase struct {
	rate float64
	say  string
	done func(autoscaleSnap) bool
}

// ramp plays phases in order, each within step.
func (w *autoscaleWatch) ramp(ctx context.Context, step time.Duration, phases []rampPhase) error {
	for _, phase := range phases {
		if err := w.setRate(ctx, phase.rate); err != nil {
			return err
		}
		w.p.say("%s", phase.say)
		if err := w.until(ctx, step, phase.done); err != nil {
			return err
		}
	}
	return nil
}

// setRate sets the request rate of the vLLM emulator's load generator.
func (w *autoscaleWatch) setRate(ctx context.Context, rate float64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, w.loadURL+"?rate="+url.QueryEscape(strconv.FormatFloat(rate, 'f', -1, 64)), nil)
	if err != nil {
		return fmt.Errorf("setting the emulator's load: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("setting the emulator's load: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("setting the emulator's load: %s", resp.Status)
	}
	return nil
}

// until looks every second, printing changes, until done; it fails (errTimedOut) after timeout.
func (w *autoscaleWatch) until(ctx context.Context, timeout time.Duration, done func(autoscaleSnap) bool) error {
	start := time.Now()
	var s autoscaleSnap
	err := poll(ctx, time.Second, timeout, func(ctx context.Context) (bool, error) {
		var err error
		s, err = w.look(ctx)
		s.elapsed = time.Since(start)
		return err == nil && done(s), err
	})
	if err != nil {
		return fmt.Errorf("not reached (replicas %d/%d, queue %.0f, berth desired %.0f): %w", s.ready, s.total, s.queue, s.desired, err)
	}
	return nil
}

// look reads pods, nodes and the scaler's view, and prints what changed.
func (w *autoscaleWatch) look(ctx context.Context) (autoscaleSnap, error) {
	var s autoscaleSnap
	pods, err := demoPods(ctx, w.c, w.pods)
	if err != nil {
		return s, err
	}
	s.ready, s.total = replicasOf(pods, w.groupSize)
	gpu := strings.ToUpper(w.product)
	var nodes corev1.NodeList
	if err := w.c.List(ctx, &nodes, client.MatchingLabels{karpv1.NodePoolLabelKey: rig.GPUNodePoolName(w.product)}); err != nil {
		return s, fmt.Errorf("listing nodes: %w", err)
	}
	now := map[string]bool{}
	for _, n := range nodes.Items {
		now[n.Name] = true
		if !w.nodes[n.Name] {
			w.p.say("Karpenter launched %s node %s (%s)", gpu, n.Name, n.Labels[corev1.LabelInstanceTypeStable])
		}
	}
	for name := range w.nodes {
		if !now[name] {
			w.p.say("%s node %s removed (empty, consolidated)", gpu, name)
		}
	}
	w.nodes = now
	if s.queue, s.kv, s.desired, err = w.scalerView(ctx); err != nil {
		w.p.change("scaler", err.Error(), "  (berth's scaler metrics unreadable: %v)", err)
	}
	w.peakReplicas, w.peakNodes = max(w.peakReplicas, s.total), max(w.peakNodes, len(now))
	kv := "—"
	if s.ready > 0 && s.kv >= 0 {
		kv = fmt.Sprintf("%.0f%%", 100*s.kv/float64(s.ready))
	}
	unit := "replicas"
	if w.groupSize > 1 {
		unit = "groups"
	}
	line := fmt.Sprintf("queue %3.0f waiting | KV cache %4s per replica | berth desired %.0f | %s %d ready / %d | %s nodes %d",
		s.queue, kv, s.desired, unit, s.ready, s.total, gpu, len(now))
	// A line when replicas or nodes change, else at most every 5 s while the signals move.
	shape := [3]int{s.ready, s.total, len(now)}
	if line != w.last && (shape != w.lastShape || time.Since(w.lastAt) >= 5*time.Second) {
		w.p.say("%s", line)
		w.last, w.lastShape, w.lastAt = line, shape, time.Now()
	}
	return s, nil
}

// replicasOf counts the replicas among pods and those ready: each pod one, or with groupSize
// above 1 each LeaderWorkerSet group (its leader and the workers naming it), ready when all of
// its groupSize pods are.
func replicasOf(pods []corev1.Pod, groupSize int) (ready, total int) {
	isReady := func(p *corev1.Pod) bool {
		cond := podCondition(p, corev1.PodReady)
		return cond != nil && cond.Status == corev1.ConditionTrue
	}
	if groupSize <= 1 {
		for i := range pods {
			if isReady(&pods[i]) {
				ready++
			}
		}
		return ready, len(pods)
	}
	readyIn, in := map[string]int{}, map[string]int{}
	for i := range pods {
		lead := pods[i].Annotations[berthv1alpha1.LWSLeaderNameAnnotation]
		if lead == "" {
			lead = pods[i].Name
		}
		in[lead]++
		if isReady(&pods[i]) {
			readyIn[lead]++
		}
	}
	for lead := range in {
		if readyIn[lead] == groupSize {
			ready++
		}
	}
	return ready, len(in)
}

// scalerView reads the scaler's own series for the demo's ScaledObject: raw queue and KV
// signals and the replicas it asks for (-1 when not evaluated yet, or not readable).
func (w *autoscaleWatch) scalerView(ctx context.Context) (queue, kv, desired float64, err error) {
	queue, kv, desired = -1, -1, -1
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.metricsURL, nil)
	if err != nil {
		return queue, kv, desired, fmt.Errorf("reading %s: %w", w.metricsURL, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return queue, kv, desired, fmt.Errorf("reading %s: %w", w.metricsURL, err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return queue, kv, desired, fmt.Errorf("parsing %s: %w", w.metricsURL, err)
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["scaled_object"] != w.scaledObject || labels["namespace"] != DemoNamespace {
				continue
			}
			switch {
			case name == "berth_scaler_desired_replicas":
				desired = m.GetGauge().GetValue()
			case name == "berth_scaler_signal_value" && labels["signal"] == "queue":
				queue = m.GetGauge().GetValue()
			case name == "berth_scaler_signal_value" && labels["signal"] == "kv_cache":
				kv = m.GetGauge().GetValue()
			}
		}
	}
	return queue, kv, desired, nil
}

// kedaBuildWait bounds how long the autoscale scene waits for KEDA: make demo builds it in the
// background (~15 min cold on 2 cores) while the first scenes play.
const kedaBuildWait = 30 * time.Minute

// waitForKEDA waits until KEDA's metrics adapter serves external metrics (its APIService is
// Available), saying so while it waits: under make demo KEDA may still be building.
func waitForKEDA(ctx context.Context, d *demo) error {
	start := time.Now()
	said := time.Time{}
	for {
		api := &unstructured.Unstructured{}
		api.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiregistration.k8s.io", Version: "v1", Kind: "APIService"})
		err := d.c.Get(ctx, client.ObjectKey{Name: "v1beta1.external.metrics.k8s.io"}, api)
		if err == nil && apiServiceAvailable(api) {
			if !said.IsZero() {
				d.p.say("KEDA is up (waited %s)", time.Since(start).Round(time.Second))
			}
			return nil
		}
		if time.Since(start) > kedaBuildWait {
			return fmt.Errorf("KEDA did not come up within %s (make demo builds it in the background; 'berth dev status' says why it is pending)", kedaBuildWait)
		}
		if time.Since(said) >= 2*time.Minute {
			d.p.say("waiting for KEDA: it is still being built or starting ('berth dev status' shows it; waited %s)", time.Since(start).Round(time.Second))
			said = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Second):
		}
	}
}

// apiServiceAvailable reports whether an APIService's Available condition is True.
func apiServiceAvailable(api *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(api.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Available" && m["status"] == "True" {
			return true
		}
	}
	return false
}
