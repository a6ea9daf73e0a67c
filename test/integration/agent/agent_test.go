// Package agent_test checks that the GPU agent's condition and labels land on a real Node,
// leave what others own alone, and that restarting the agent changes nothing.
package agent_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-dev/berth/agent"
	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/builders"
	"github.com/berth-dev/berth/test/rigtest"
)

func TestMain(m *testing.M) { rigtest.Main(m, rig.Options{}, nil) }

// node creates a node with a condition and a label that belong to someone else.
func node(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	c := rigtest.Current().Client
	n := builders.Node(name).Label("team", "ml").Obj()
	for k, v := range labels {
		n.Labels[k] = v
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if err := c.Create(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), n) })
}

func get(t *testing.T, name string) *corev1.Node {
	t.Helper()
	var n corev1.Node
	if err := rigtest.Current().Client.Get(context.Background(), client.ObjectKey{Name: name}, &n); err != nil {
		t.Fatal(err)
	}
	return &n
}

func cond(n *corev1.Node, typ corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == typ {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// publisher publishes to node name at a fixed time.
func publisher(t *testing.T, name string, at time.Time) *agent.Publisher {
	t.Helper()
	return &agent.Publisher{Client: agentClient(t), NodeName: name, Now: func() time.Time { return at }}
}

// agentClient acts as the agent's ServiceAccount, bound to exactly config/rbac/agent.yaml: a
// verb the agent needs and the chart does not grant fails here.
func agentClient(t *testing.T) client.Client {
	t.Helper()
	c, err := rigtest.ComponentClient(context.Background(), rigtest.Current(), "agent")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// publish reads the node and publishes the report for st.
func publish(t *testing.T, p *agent.Publisher, st agent.State, inv agent.Inventory) string {
	t.Helper()
	ctx := context.Background()
	n, err := p.Node(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rep := agent.Report{Degraded: agent.DegradedCondition(st, inv, agent.DefaultHysteresis), Labels: agent.Labels(inv), Fatal: len(st.Fatal) > 0}
	if hw, ok := agent.HardwareCondition(st, inv); ok {
		rep.Hardware = &hw
	}
	other, err := p.Publish(ctx, n, rep)
	if err != nil {
		t.Fatal(err)
	}
	return other
}

var (
	hardware = corev1.NodeConditionType(berthv1alpha1.NodeConditionAcceleratedHardwareReady)
	degraded = corev1.NodeConditionType(berthv1alpha1.NodeConditionGPUDegraded)
	h100     = agent.Inventory{DriverVersion: "550.54.15", GPUs: []agent.GPU{{Index: 0, Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559}}}
	xid79    = agent.Fault{GPU: 0, Kind: agent.FaultXID, Detail: "Xid 79", Fatal: true, XID: 79}
)

func TestConditionAndLabelsLandAndRestartIsIdempotent(t *testing.T) {
	node(t, "gpu-1", nil)
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	healthy := agent.Evaluate(agent.State{}, nil, t0, agent.DefaultHysteresis)
	publish(t, publisher(t, "gpu-1", t0), healthy, h100)
	n := get(t, "gpu-1")
	c := cond(n, hardware)
	if c == nil || c.Status != corev1.ConditionTrue || c.Reason != berthv1alpha1.ReasonGPUsHealthy {
		t.Fatalf("condition after first publish: %+v", c)
	}
	if d := cond(n, degraded); d == nil || d.Status != corev1.ConditionFalse {
		t.Fatalf("GPUDegraded after first publish: %+v", d)
	}
	if n.Labels[berthv1alpha1.GPUProductLabel] != "NVIDIA-H100-80GB-HBM3" || n.Labels[berthv1alpha1.GPUCountLabel] != "1" || n.Labels["team"] != "ml" {
		t.Errorf("labels = %v", n.Labels)
	}
	if r := cond(n, corev1.NodeReady); r == nil || r.Reason != "KubeletReady" {
		t.Errorf("the kubelet's Ready condition was touched: %+v", r)
	}

	// A restarted agent publishing the same verdict changes nothing but the heartbeat.
	publish(t, publisher(t, "gpu-1", t0.Add(time.Minute)), healthy, h100)
	n2 := get(t, "gpu-1")
	c2 := cond(n2, hardware)
	if len(n2.Status.Conditions) != 3 || !c2.LastTransitionTime.Equal(&c.LastTransitionTime) || c2.LastHeartbeatTime.Equal(&c.LastHeartbeatTime) {
		t.Errorf("after restart: conditions %d, transition %v→%v, heartbeat %v→%v", len(n2.Status.Conditions), c.LastTransitionTime, c2.LastTransitionTime, c.LastHeartbeatTime, c2.LastHeartbeatTime)
	}
	for k, v := range n.Labels {
		if n2.Labels[k] != v {
			t.Errorf("label %s changed %q→%q on restart", k, v, n2.Labels[k])
		}
	}

	// A fatal fault flips it with the reason Karpenter's repair policy matches; a later message
	// change keeps lastTransitionTime (Karpenter's toleration counts from it).
	faulty := agent.Evaluate(healthy, []agent.Fault{xid79}, t0.Add(2*time.Minute), agent.DefaultHysteresis)
	publish(t, publisher(t, "gpu-1", t0.Add(2*time.Minute)), faulty, h100)
	c3 := cond(get(t, "gpu-1"), hardware)
	if c3.Status != corev1.ConditionFalse || c3.Reason != "NvidiaXID79Error" || c3.Message != "GPU 0: xid (Xid 79)" || c3.LastTransitionTime.Equal(&c.LastTransitionTime) {
		t.Errorf("after fault: %+v", c3)
	}
	worse := agent.Evaluate(faulty, []agent.Fault{{GPU: 0, Kind: agent.FaultECCDoubleBit, Detail: "3 errors", Fatal: true, XID: 48}}, t0.Add(3*time.Minute), agent.DefaultHysteresis)
	publish(t, publisher(t, "gpu-1", t0.Add(3*time.Minute)), worse, h100)
	c4 := cond(get(t, "gpu-1"), hardware)
	if c4.Status != corev1.ConditionFalse || !c4.LastTransitionTime.Equal(&c3.LastTransitionTime) || c4.Message == c3.Message {
		t.Errorf("a second fault moved lastTransitionTime or kept the message: %+v", c4)
	}
}

// TestAnotherWriterKeepsAcceleratedHardwareReady: where another component (the EKS node
// monitoring agent) writes AcceleratedHardwareReady, berth leaves it alone — even with a fatal
// fault to report — and says so; its own GPUDegraded condition is still written.
func TestAnotherWriterKeepsAcceleratedHardwareReady(t *testing.T) {
	ctx := context.Background()
	node(t, "gpu-eks", nil)
	c := rigtest.Current().Client
	n := get(t, "gpu-eks")
	now := metav1.Now()
	n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: hardware, Status: corev1.ConditionTrue, Reason: "NvidiaGPUIsReady",
		Message: "no GPU issues", LastHeartbeatTime: now, LastTransitionTime: now})
	if err := c.Status().Update(ctx, n, client.FieldOwner("eks-node-monitoring-agent")); err != nil {
		t.Fatal(err)
	}
	faulty := agent.Evaluate(agent.State{}, []agent.Fault{xid79, {GPU: 1, Kind: agent.FaultThermalThrottle, Detail: "hot"}}, time.Now(), agent.DefaultHysteresis)
	if other := publish(t, publisher(t, "gpu-eks", time.Now()), faulty, h100); other != "eks-node-monitoring-agent" {
		t.Errorf("Publish says the other writer is %q, want eks-node-monitoring-agent", other)
	}
	got := get(t, "gpu-eks")
	if h := cond(got, hardware); h == nil || h.Status != corev1.ConditionTrue || h.Reason != "NvidiaGPUIsReady" {
		t.Errorf("berth changed the other writer's AcceleratedHardwareReady: %+v", h)
	}
	if d := cond(got, degraded); d == nil || d.Status != corev1.ConditionTrue || d.Reason != berthv1alpha1.ReasonThermalThrottle {
		t.Errorf("GPUDegraded = %+v, want True/ThermalThrottle", d)
	}
	for _, mf := range got.ManagedFields {
		if mf.Manager == agent.FieldManager && strings.Contains(mf.FieldsV1.GetRawString(), string(hardware)) {
			t.Errorf("berth's agent co-owns AcceleratedHardwareReady: %s", mf.FieldsV1.GetRawString())
		}
	}
}

// TestFatalFaultSurvivesAgentRestart: a fatal fault is latched for the boot it was seen on: a
// restarted agent (NVML does not replay Xid events) keeps the node marked; after a reboot (a
// new boot ID) it looks afresh.
func TestFatalFaultSurvivesAgentRestart(t *testing.T) {
	ctx := context.Background()
	node(t, "gpu-latch", nil)
	c := rigtest.Current().Client
	n := get(t, "gpu-latch")
	n.Status.NodeInfo.BootID = "boot-1"
	if err := c.Status().Update(ctx, n); err != nil {
		t.Fatal(err)
	}
	faulty := agent.Evaluate(agent.State{}, []agent.Fault{xid79}, time.Now(), agent.DefaultHysteresis)
	publish(t, publisher(t, "gpu-latch", time.Now()), faulty, h100)
	f := agent.RestoredFatal(get(t, "gpu-latch"))
	if f == nil || f.XID != 79 || !f.Fatal {
		t.Fatalf("restored fault %+v, want the latched Xid 79", f)
	}
	restarted := agent.Evaluate(agent.State{Fatal: []agent.Fault{*f}}, nil, time.Now(), agent.DefaultHysteresis)
	if hw, _ := agent.HardwareCondition(restarted, h100); hw.Status != corev1.ConditionFalse || hw.Reason != "NvidiaXID79Error" {
		t.Errorf("a restarted agent reports %+v", hw)
	}
	n = get(t, "gpu-latch")
	n.Status.NodeInfo.BootID = "boot-2"
	if err := c.Status().Update(ctx, n); err != nil {
		t.Fatal(err)
	}
	if f := agent.RestoredFatal(get(t, "gpu-latch")); f != nil {
		t.Errorf("after a reboot the old fault is restored: %+v", f)
	}
}

func TestGFDLabelsWin(t *testing.T) {
	node(t, "gpu-gfd", map[string]string{berthv1alpha1.GFDProductLabel: "NVIDIA-H100-80GB-HBM3"})
	inv := agent.Inventory{GPUs: []agent.GPU{{Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559}}}
	publish(t, publisher(t, "gpu-gfd", time.Now()), agent.State{}, inv)
	n := get(t, "gpu-gfd")
	if _, ok := n.Labels[berthv1alpha1.GPUProductLabel]; ok {
		t.Errorf("agent labelled a node GFD already labels: %v", n.Labels)
	}
	if n.Labels[berthv1alpha1.GFDProductLabel] == "" {
		t.Error("GFD's label was removed")
	}
}

// TestRunLoopReportsInjectedFaults: the agent loop on a mock DGX H100 publishes True; thermal
// throttling on GPU 2 turns only GPUDegraded True; a double-bit ECC error on GPU 6 turns
// AcceleratedHardwareReady False as Xid 48, which Karpenter's repair policy matches.
func TestRunLoopReportsInjectedFaults(t *testing.T) {
	node(t, "gpu-loop", map[string]string{"karpenter.k8s.aws/instance-gpu-count": "8"})
	s := dgxh100.New()
	var broken, hot atomic.Bool
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		dev.GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) {
			if i == 6 && broken.Load() {
				return 1, nvml.SUCCESS
			}
			return 0, nvml.SUCCESS
		}
		dev.GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_DISABLED, nvml.SUCCESS }
		dev.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.SUCCESS }
		dev.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) {
			if i == 2 && hot.Load() {
				return nvml.ClocksThrottleReasonHwThermalSlowdown, nvml.SUCCESS
			}
			return 0, nvml.SUCCESS
		}
		dev.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
	}
	quietEvents(s)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	pub := &agent.Publisher{Client: agentClient(t), NodeName: "gpu-loop", Now: time.Now}
	go func() { done <- agent.Run(ctx, s, pub, agent.Options{Interval: 50 * time.Millisecond}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent.Run: %v", err)
		}
	}()
	wait := func(typ corev1.NodeConditionType, status corev1.ConditionStatus, reason string) *corev1.NodeCondition {
		t.Helper()
		var c *corev1.NodeCondition
		rigtest.Eventually(t, 20*time.Second, 50*time.Millisecond, fmt.Sprintf("%s %s/%s", typ, status, reason), func(ctx context.Context) (bool, string, error) {
			if c = cond(get(t, "gpu-loop"), typ); c == nil {
				return false, "no condition", nil
			}
			return c.Status == status && c.Reason == reason, fmt.Sprintf("%s/%s %s", c.Status, c.Reason, c.Message), nil
		})
		return c
	}
	wait(hardware, corev1.ConditionTrue, berthv1alpha1.ReasonGPUsHealthy)
	hot.Store(true)
	wait(degraded, corev1.ConditionTrue, berthv1alpha1.ReasonThermalThrottle)
	if c := cond(get(t, "gpu-loop"), hardware); c.Status != corev1.ConditionTrue {
		t.Errorf("throttling set AcceleratedHardwareReady %s/%s", c.Status, c.Reason)
	}
	broken.Store(true)
	if c := wait(hardware, corev1.ConditionFalse, "NvidiaXID48Error"); c.Message != "GPU 6: ecc_double_bit (1 uncorrectable ECC errors since boot)" {
		t.Errorf("message = %q", c.Message)
	}
}

// TestWithoutNVML: with no NVML the agent reports GPUDegraded=True (NVMLUnavailable) on its node
// and leaves AcceleratedHardwareReady alone (not seeing the GPUs says nothing about them), or
// exits with an error naming NVML when told to.
func TestWithoutNVML(t *testing.T) {
	node(t, "gpu-nonvml", nil)
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	pub := &agent.Publisher{Client: agentClient(t), NodeName: "gpu-nonvml", Now: time.Now}
	if err := agent.Run(context.Background(), lib, pub, agent.Options{ExitWithoutNVML: true}); !agent.IsNoNVML(err) {
		t.Fatalf("Run with ExitWithoutNVML = %v, want ErrNoNVML", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx, lib, pub, agent.Options{}) }()
	rigtest.Eventually(t, 10*time.Second, 50*time.Millisecond, "NVMLUnavailable reported", func(ctx context.Context) (bool, string, error) {
		c := cond(get(t, "gpu-nonvml"), degraded)
		return c != nil && c.Status == corev1.ConditionTrue && c.Reason == berthv1alpha1.ReasonNVMLUnavailable, fmt.Sprintf("%+v", c), nil
	})
	if c := cond(get(t, "gpu-nonvml"), hardware); c != nil {
		t.Errorf("AcceleratedHardwareReady written without NVML: %+v", c)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("idling agent returned %v on stop", err)
	}
}

// TestHungProbeFailsLiveness: an NVML call that never returns (a wedged driver) stops the agent
// loop's heartbeat, so its liveness check fails and the kubelet restarts it; once the call
// returns, the loop beats again. The heartbeat is the berth_agent_last_probe_timestamp_seconds
// gauge BerthAgentStalled reads.
func TestHungProbeFailsLiveness(t *testing.T) {
	node(t, "gpu-hung", nil)
	s := dgxh100.New()
	var hang atomic.Bool
	entered, release := make(chan struct{}, 1), make(chan struct{})
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		dev.GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) {
			if i == 0 && hang.Load() {
				select {
				case entered <- struct{}{}:
				default:
				}
				<-release
			}
			return 0, nvml.SUCCESS
		}
		dev.GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_DISABLED, nvml.SUCCESS }
		dev.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.SUCCESS }
		dev.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return 0, nvml.SUCCESS }
		dev.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
	}
	quietEvents(s)
	live := agent.NewLiveness(time.Now())
	const maxAge = 500 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	pub := &agent.Publisher{Client: agentClient(t), NodeName: "gpu-hung", Now: time.Now}
	go func() {
		done <- agent.Run(ctx, s, pub, agent.Options{Interval: 50 * time.Millisecond, Liveness: live})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent.Run: %v", err)
		}
	}()
	// Alive first: the loop beats every probe.
	rigtest.Eventually(t, 20*time.Second, 50*time.Millisecond, "AcceleratedHardwareReady published", func(context.Context) (bool, string, error) {
		c := cond(get(t, "gpu-hung"), hardware)
		return c != nil, fmt.Sprintf("%+v", c), nil
	})
	if err := live.Check(time.Now(), maxAge); err != nil {
		t.Fatalf("a running loop fails its liveness check: %v", err)
	}
	hang.Store(true)
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the probe never reached the hanging NVML call")
	}
	time.Sleep(2 * maxAge)
	err := live.Check(time.Now(), maxAge)
	if err == nil || !strings.Contains(err.Error(), "hung") {
		t.Errorf("liveness with the probe hung for %v: %v, want an error saying it is hung", 2*maxAge, err)
	}
	hang.Store(false)
	close(release)
	rigtest.Eventually(t, 10*time.Second, 20*time.Millisecond, "the loop beats again", func(context.Context) (bool, string, error) {
		err := live.Check(time.Now(), maxAge)
		return err == nil, fmt.Sprint(err), nil
	})
}

// quietEvents gives a mock server an NVML event set that never delivers an event (every wait
// times out), so the agent's Xid watch runs without faults.
func quietEvents(s *server.Server) {
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: func(uint32) (nvml.EventData, nvml.Return) {
				time.Sleep(10 * time.Millisecond)
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			},
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
}
