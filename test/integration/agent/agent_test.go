// Package agent_test checks that the GPU agent's condition and labels land on a real Node,
// leave what others own alone, and that restarting the agent changes nothing.
package agent_test

import (
	"context"
	"fmt"
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

func TestConditionAndLabelsLandAndRestartIsIdempotent(t *testing.T) {
	ctx := context.Background()
	node(t, "gpu-1", nil)
	inv := agent.Inventory{DriverVersion: "550.54.15", GPUs: []agent.GPU{{Index: 0, Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559}}}
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	publish := func(at time.Time, st agent.State) {
		t.Helper()
		p := &agent.Publisher{Client: rigtest.Current().Client, NodeName: "gpu-1", Now: func() time.Time { return at }}
		status, reason, msg := agent.NodeCondition(st, inv, agent.DefaultHysteresis)
		if err := p.Publish(ctx, status, reason, msg, agent.Labels(inv)); err != nil {
			t.Fatal(err)
		}
	}
	healthy := agent.Evaluate(agent.State{}, nil, t0, agent.DefaultHysteresis)
	publish(t0, healthy)
	n := get(t, "gpu-1")
	c := cond(n, corev1.NodeConditionType(berthv1alpha1.NodeConditionAcceleratedHardwareReady))
	if c == nil || c.Status != corev1.ConditionTrue || c.Reason != berthv1alpha1.ReasonGPUsHealthy {
		t.Fatalf("condition after first publish: %+v", c)
	}
	if n.Labels[berthv1alpha1.GPUProductLabel] != "NVIDIA-H100-80GB-HBM3" || n.Labels[berthv1alpha1.GPUCountLabel] != "1" || n.Labels["team"] != "ml" {
		t.Errorf("labels = %v", n.Labels)
	}
	if r := cond(n, corev1.NodeReady); r == nil || r.Reason != "KubeletReady" {
		t.Errorf("the kubelet's Ready condition was touched: %+v", r)
	}

	// A restarted agent publishing the same verdict changes nothing but the heartbeat.
	publish(t0.Add(time.Minute), healthy)
	n2 := get(t, "gpu-1")
	c2 := cond(n2, corev1.NodeConditionType(berthv1alpha1.NodeConditionAcceleratedHardwareReady))
	if len(n2.Status.Conditions) != 2 || !c2.LastTransitionTime.Equal(&c.LastTransitionTime) || c2.LastHeartbeatTime.Equal(&c.LastHeartbeatTime) {
		t.Errorf("after restart: conditions %d, transition %v→%v, heartbeat %v→%v", len(n2.Status.Conditions), c.LastTransitionTime, c2.LastTransitionTime, c.LastHeartbeatTime, c2.LastHeartbeatTime)
	}
	for k, v := range n.Labels {
		if n2.Labels[k] != v {
			t.Errorf("label %s changed %q→%q on restart", k, v, n2.Labels[k])
		}
	}

	// A fault flips it; the message names the GPU and the fault.
	faulty := agent.Evaluate(healthy, []agent.Fault{{GPU: 0, Kind: agent.FaultXID, Detail: "Xid 79"}}, t0.Add(2*time.Minute), agent.DefaultHysteresis)
	publish(t0.Add(2*time.Minute), faulty)
	c3 := cond(get(t, "gpu-1"), corev1.NodeConditionType(berthv1alpha1.NodeConditionAcceleratedHardwareReady))
	if c3.Status != corev1.ConditionFalse || c3.Reason != "XidCriticalError" || c3.Message != "GPU 0: xid (Xid 79)" || c3.LastTransitionTime.Equal(&c.LastTransitionTime) {
		t.Errorf("after fault: %+v", c3)
	}
}

func TestGFDLabelsWin(t *testing.T) {
	node(t, "gpu-gfd", map[string]string{berthv1alpha1.GFDProductLabel: "NVIDIA-H100-80GB-HBM3"})
	p := &agent.Publisher{Client: rigtest.Current().Client, NodeName: "gpu-gfd", Now: time.Now}
	inv := agent.Inventory{GPUs: []agent.GPU{{Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559}}}
	if err := p.Publish(context.Background(), corev1.ConditionTrue, berthv1alpha1.ReasonGPUsHealthy, "ok", agent.Labels(inv)); err != nil {
		t.Fatal(err)
	}
	n := get(t, "gpu-gfd")
	if _, ok := n.Labels[berthv1alpha1.GPUProductLabel]; ok {
		t.Errorf("agent labelled a node GFD already labels: %v", n.Labels)
	}
	if n.Labels[berthv1alpha1.GFDProductLabel] == "" {
		t.Error("GFD's label was removed")
	}
}

// TestRunLoopReportsInjectedFault: the agent loop on a mock DGX H100 publishes True, then False
// naming the GPU once a double-bit ECC error is injected.
func TestRunLoopReportsInjectedFault(t *testing.T) {
	node(t, "gpu-loop", nil)
	s := dgxh100.New()
	var broken atomic.Bool // flips GPU 6 to report an uncorrectable ECC error
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
		dev.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return 0, nvml.SUCCESS }
		dev.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
	}
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: func(uint32) (nvml.EventData, nvml.Return) {
				time.Sleep(10 * time.Millisecond)
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			},
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	pub := &agent.Publisher{Client: rigtest.Current().Client, NodeName: "gpu-loop", Now: time.Now}
	go func() { done <- agent.Run(ctx, s, pub, agent.Options{Interval: 50 * time.Millisecond}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent.Run: %v", err)
		}
	}()
	wait := func(status corev1.ConditionStatus, reason string) {
		t.Helper()
		rigtest.Eventually(t, 20*time.Second, 50*time.Millisecond, fmt.Sprintf("condition %s/%s", status, reason), func(ctx context.Context) (bool, string, error) {
			c := cond(get(t, "gpu-loop"), corev1.NodeConditionType(berthv1alpha1.NodeConditionAcceleratedHardwareReady))
			if c == nil {
				return false, "no condition", nil
			}
			return c.Status == status && c.Reason == reason, fmt.Sprintf("%s/%s %s", c.Status, c.Reason, c.Message), nil
		})
	}
	wait(corev1.ConditionTrue, berthv1alpha1.ReasonGPUsHealthy)
	broken.Store(true)
	wait(corev1.ConditionFalse, "EccDoubleBitErrors")
	if c := cond(get(t, "gpu-loop"), corev1.NodeConditionType(berthv1alpha1.NodeConditionAcceleratedHardwareReady)); c.Message != "GPU 6: ecc_double_bit (1 uncorrectable ECC errors since boot)" {
		t.Errorf("message = %q", c.Message)
	}
}

// TestWithoutNVML: with no NVML the agent reports NVMLUnavailable on its node and idles, or
// exits with an error naming NVML when told to.
func TestWithoutNVML(t *testing.T) {
	node(t, "gpu-nonvml", nil)
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	pub := &agent.Publisher{Client: rigtest.Current().Client, NodeName: "gpu-nonvml", Now: time.Now}
	if err := agent.Run(context.Background(), lib, pub, agent.Options{ExitWithoutNVML: true}); !agent.IsNoNVML(err) {
		t.Fatalf("Run with ExitWithoutNVML = %v, want ErrNoNVML", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx, lib, pub, agent.Options{}) }()
	rigtest.Eventually(t, 10*time.Second, 50*time.Millisecond, "NVMLUnavailable reported", func(ctx context.Context) (bool, string, error) {
		c := cond(get(t, "gpu-nonvml"), corev1.NodeConditionType(berthv1alpha1.NodeConditionAcceleratedHardwareReady))
		return c != nil && c.Status == corev1.ConditionFalse && c.Reason == berthv1alpha1.ReasonNVMLUnavailable, fmt.Sprintf("%+v", c), nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("idling agent returned %v on stop", err)
	}
}
