package agent

import (
	"errors"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// healthy gives every device of a mock server healthy answers to the health readings the
// mocks leave unset, and returns the devices for fault injection.
func healthy(s *server.Server) []*server.Device {
	var out []*server.Device
	for _, d := range s.Devices {
		dev := d.(*server.Device)
		dev.GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) { return 0, nvml.SUCCESS }
		dev.GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_DISABLED, nvml.SUCCESS }
		dev.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.SUCCESS }
		dev.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return nvml.ClocksThrottleReasonGpuIdle, nvml.SUCCESS }
		dev.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
		out = append(out, dev)
	}
	return out
}

func TestInventoryOnMockServers(t *testing.T) {
	tests := []struct {
		name    string
		server  *server.Server
		product string
		minMiB  uint64
	}{
		{"dgx-h100", dgxh100.New(), "H100", 80000},
		{"dgx-h200", dgxh200.New(), "H200", 140000},
		{"dgx-a100", dgxa100.New(), "A100", 40000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			healthy(tt.server)
			rep, err := Once(tt.server, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			inv := rep.Inventory
			if len(inv.GPUs) != 8 || inv.DriverVersion == "" || inv.CUDAVersion == "" {
				t.Fatalf("inventory = %+v", inv)
			}
			seen := map[string]bool{}
			for i, g := range inv.GPUs {
				if g.Index != i || !strings.Contains(g.Name, tt.product) || g.MemoryMiB < tt.minMiB || g.UUID == "" || seen[g.UUID] {
					t.Errorf("GPU %d = %+v", i, g)
				}
				seen[g.UUID] = true
			}
			if rep.Hardware == nil || rep.Hardware.Status != corev1.ConditionTrue || rep.Hardware.Reason != berthv1alpha1.ReasonGPUsHealthy ||
				rep.Degraded.Status != corev1.ConditionFalse {
				t.Errorf("healthy DGX reported %+v, degraded %+v", rep.Hardware, rep.Degraded)
			}
			labels := Labels(inv)
			if labels[berthv1alpha1.GPUCountLabel] != "8" || !strings.Contains(labels[berthv1alpha1.GPUProductLabel], tt.product) || strings.Contains(labels[berthv1alpha1.GPUProductLabel], " ") {
				t.Errorf("labels = %v", labels)
			}
		})
	}
}

// TestFaultsFlipTheRightCondition: faults that need a new node turn AcceleratedHardwareReady
// False with a reason Karpenter's AWS repair policies match (NvidiaXID<n>Error); everything
// that recovers in place — throttling above all — turns only berth's GPUDegraded True, so
// Karpenter never replaces a node for it.
func TestFaultsFlipTheRightCondition(t *testing.T) {
	tests := []struct {
		name   string
		inject func(d *server.Device)
		// fatal is the AcceleratedHardwareReady=False reason ("": stays True).
		fatal string
		// degraded is the GPUDegraded=True reason ("": stays False).
		degraded string
		detail   string
	}{
		{"ECC double-bit errors", func(d *server.Device) {
			d.GetTotalEccErrorsFunc = func(typ nvml.MemoryErrorType, _ nvml.EccCounterType) (uint64, nvml.Return) {
				if typ == nvml.MEMORY_ERROR_TYPE_UNCORRECTED {
					return 2, nvml.SUCCESS
				}
				return 0, nvml.SUCCESS
			}
		}, "NvidiaXID48Error", "", "GPU 3: ecc_double_bit (2 uncorrectable ECC errors since boot)"},
		{"row remapping failed", func(d *server.Device) {
			d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 1, false, true, nvml.SUCCESS }
		}, "NvidiaXID64Error", "", "GPU 3: row_remap_failed"},
		{"GPU fell off the bus", func(d *server.Device) {
			d.GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) {
				return 0, nvml.ERROR_GPU_IS_LOST
			}
		}, "NvidiaXID79Error", "", "GPU 3: fell_off_bus"},
		{"thermal throttling", func(d *server.Device) {
			d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return nvml.ClocksThrottleReasonHwThermalSlowdown, nvml.SUCCESS }
		}, "", "ThermalThrottle", "GPU 3: thermal_throttle"},
		{"software thermal slowdown", func(d *server.Device) {
			d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return nvml.ClocksThrottleReasonSwThermalSlowdown, nvml.SUCCESS }
		}, "", "ThermalThrottle", "GPU 3: thermal_throttle"},
		{"power brake", func(d *server.Device) {
			d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return nvml.ClocksThrottleReasonHwPowerBrakeSlowdown, nvml.SUCCESS }
		}, "", "PowerBrake", "GPU 3: power_brake"},
		{"retired pages pending", func(d *server.Device) {
			d.GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_ENABLED, nvml.SUCCESS }
		}, "", "RetiredPagesPending", "GPU 3: retired_pages_pending"},
		{"row remapping pending", func(d *server.Device) {
			d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 1, 0, true, false, nvml.SUCCESS }
		}, "", "RowRemapPending", "GPU 3: row_remap_pending"},
		{"software power cap is normal", func(d *server.Device) {
			d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return nvml.ClocksThrottleReasonSwPowerCap, nvml.SUCCESS }
		}, "", "", ""},
		{"readings a GPU does not support are skipped", func(d *server.Device) {
			d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.ERROR_NOT_SUPPORTED }
		}, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := dgxh100.New()
			devs := healthy(s)
			tt.inject(devs[3])
			rep, err := Once(s, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			hw := rep.Hardware
			if hw == nil {
				t.Fatal("AcceleratedHardwareReady not reported on a node with GPUs")
			}
			switch {
			case tt.fatal == "" && hw.Status != corev1.ConditionTrue:
				t.Errorf("AcceleratedHardwareReady %s/%s: %s; want True (this fault needs no new node)", hw.Status, hw.Reason, hw.Message)
			case tt.fatal != "" && (hw.Status != corev1.ConditionFalse || hw.Reason != tt.fatal || !strings.Contains(hw.Message, tt.detail)):
				t.Errorf("AcceleratedHardwareReady %s/%s: %q; want False/%s naming %q", hw.Status, hw.Reason, hw.Message, tt.fatal, tt.detail)
			}
			if tt.fatal != "" && !matchesRepairPolicy(hw.Reason) {
				t.Errorf("reason %s is not one Karpenter's AWS repair policies match; it would wait for the 30-minute fallback", hw.Reason)
			}
			dg := rep.Degraded
			switch {
			case tt.degraded == "" && dg.Status != corev1.ConditionFalse:
				t.Errorf("GPUDegraded %s/%s: %s; want False", dg.Status, dg.Reason, dg.Message)
			case tt.degraded != "" && (dg.Status != corev1.ConditionTrue || dg.Reason != tt.degraded || !strings.Contains(dg.Message, tt.detail)):
				t.Errorf("GPUDegraded %s/%s: %q; want True/%s naming %q", dg.Status, dg.Reason, dg.Message, tt.degraded, tt.detail)
			}
		})
	}
}

// awsRepairReasons are the reason patterns of the reason-specific AcceleratedHardwareReady
// repair policies of karpenter-provider-aws v1.15.0 (pkg/cloudprovider, RepairPolicies: the
// reboot-clearable and the replace families, both 10 minutes). Any other reason waits for the
// 30-minute fallback. (Not read from the package: it would pull the whole AWS SDK into the
// agent's tests; docs/agent.md cites the same source.)
var awsRepairReasons = []string{
	`.*XID(46|48|54|62|63|95|109|110|136|140|143|155|156|158).*`,
	`.*XID(64|74|79|119|120).*`,
}

// matchesRepairPolicy reports whether a reason-specific AWS repair policy matches reason.
func matchesRepairPolicy(reason string) bool {
	for _, re := range awsRepairReasons {
		if regexp.MustCompile(re).MatchString(reason) {
			return true
		}
	}
	return false
}

func TestDeviceCountMismatch(t *testing.T) {
	s := dgxh100.New()
	healthy(s)
	r, err := Open(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		expected int
		fatal    bool
	}{{0, false}, {8, false}, {4, false}, {9, true}} {
		faults, err := r.Probe(&xidLog{}, time.Now(), 0, tt.expected)
		if err != nil {
			t.Fatal(err)
		}
		st := Evaluate(State{}, faults, time.Now(), DefaultHysteresis)
		hw, _ := HardwareCondition(st, Inventory{GPUs: make([]GPU, 8)})
		if got := hw.Status == corev1.ConditionFalse; got != tt.fatal {
			t.Errorf("expected %d GPUs, NVML sees 8: AcceleratedHardwareReady %s/%s, want False=%v", tt.expected, hw.Status, hw.Reason, tt.fatal)
		}
		if tt.fatal && (hw.Reason != berthv1alpha1.ReasonNvidiaDeviceCountMismatch || hw.Message != "device_count_mismatch (NVML sees 8 of the instance type's 9 GPUs)") {
			t.Errorf("mismatch reported as %s: %q", hw.Reason, hw.Message)
		}
	}
}

func TestFatalReasonPrefersReplacement(t *testing.T) {
	got := fatalReason([]Fault{{XID: 48, Fatal: true}, {XID: 74, Fatal: true}, {Kind: FaultDeviceCount, Fatal: true}})
	if got != "NvidiaXID74Error" {
		t.Errorf("reason %s, want NvidiaXID74Error (NVLink: replace) over Xid 48 (reboot)", got)
	}
	if got := fatalReason([]Fault{{Kind: FaultDeviceCount, Fatal: true}}); got != berthv1alpha1.ReasonNvidiaDeviceCountMismatch {
		t.Errorf("reason %s", got)
	}
}

// fakeEvents is an NVML event set fed by the test.
type fakeEvents struct {
	mu  sync.Mutex
	q   []nvml.EventData
	set *mock.EventSet
}

func newFakeEvents() *fakeEvents {
	f := &fakeEvents{}
	f.set = &mock.EventSet{
		WaitFunc: func(uint32) (nvml.EventData, nvml.Return) {
			f.mu.Lock()
			defer f.mu.Unlock()
			if len(f.q) == 0 {
				time.Sleep(5 * time.Millisecond)
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
			ev := f.q[0]
			f.q = f.q[1:]
			return ev, nvml.SUCCESS
		},
		FreeFunc: func() nvml.Return { return nvml.SUCCESS },
	}
	return f
}

func (f *fakeEvents) push(ev nvml.EventData) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.q = append(f.q, ev)
}

// TestXIDs: a fatal Xid seen by the event loop turns AcceleratedHardwareReady False and keeps
// it False (latched) long after the Xid is old; a non-fatal Xid only degrades the GPU, and
// GPUDegraded clears once the hysteresis is satisfied.
func TestXIDs(t *testing.T) {
	s := dgxh100.New()
	devs := healthy(s)
	events := newFakeEvents()
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return events.set, nvml.SUCCESS }
	r, err := Open(s)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := r.Inventory()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	xids := &xidLog{}
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- r.WatchXIDs(xids, clock, stop) }()
	defer func() {
		close(stop)
		if err := <-done; err != nil {
			t.Errorf("WatchXIDs: %v", err)
		}
	}()
	h := Hysteresis{HealthyProbes: 3, HealthyFor: 2 * time.Minute}
	hold := 10 * time.Minute
	probe := func(st State) State {
		faults, err := r.Probe(xids, clock(), hold, 8)
		if err != nil {
			t.Fatal(err)
		}
		return Evaluate(st, faults, clock(), h)
	}
	seen := func(gpu int) {
		deadline := time.Now().Add(5 * time.Second)
		for len(xids.recent(gpu, clock(), hold)) == 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	st := probe(State{})
	if !st.Healthy() {
		t.Fatalf("healthy node reported faults: %+v", st)
	}

	// A non-fatal Xid (94, contained ECC): degraded, never a repair.
	events.push(nvml.EventData{Device: devs[2], EventType: nvml.EventTypeXidCriticalError, EventData: 94})
	events.push(nvml.EventData{Device: devs[2], EventType: nvml.EventTypeXidCriticalError, EventData: 13}) // not watched
	seen(2)
	st = probe(st)
	hw, _ := HardwareCondition(st, inv)
	dg := DegradedCondition(st, inv, h)
	if hw.Status != corev1.ConditionTrue || dg.Status != corev1.ConditionTrue || dg.Reason != berthv1alpha1.ReasonXidError || dg.Message != "GPU 2: xid (Xid 94)" {
		t.Fatalf("after Xid 94: hardware %+v, degraded %+v", hw, dg)
	}

	// A fatal Xid (79, fell off the bus).
	events.push(nvml.EventData{Device: devs[5], EventType: nvml.EventTypeXidCriticalError, EventData: 79})
	seen(5)
	st = probe(st)
	hw, _ = HardwareCondition(st, inv)
	if hw.Status != corev1.ConditionFalse || hw.Reason != "NvidiaXID79Error" || hw.Message != "GPU 5: xid (Xid 79)" {
		t.Fatalf("after Xid 79: %+v", hw)
	}
	if !matchesRepairPolicy(hw.Reason) {
		t.Errorf("reason %s is not matched by Karpenter's AWS repair policies", hw.Reason)
	}

	// Both Xids age out; clean probes follow every minute.
	advance(hold)
	var degraded, hardware []corev1.ConditionStatus
	for range 4 {
		st = probe(st)
		hw, _ := HardwareCondition(st, inv)
		hardware = append(hardware, hw.Status)
		degraded = append(degraded, DegradedCondition(st, inv, h).Status)
		advance(time.Minute)
	}
	f, tr := corev1.ConditionFalse, corev1.ConditionTrue
	if diff := cmp.Diff([]corev1.ConditionStatus{tr, tr, f, f}, degraded); diff != "" {
		t.Errorf("GPUDegraded over clean probes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]corev1.ConditionStatus{f, f, f, f}, hardware); diff != "" {
		t.Errorf("AcceleratedHardwareReady over clean probes (-want +got; a fatal fault is latched):\n%s", diff)
	}
}

func TestEvaluateHysteresis(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := Hysteresis{HealthyProbes: 3, HealthyFor: 2 * time.Minute}
	fault := []Fault{{GPU: 0, Kind: FaultThermalThrottle}}
	type step struct {
		at      time.Duration
		faults  []Fault
		healthy bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"first clean probe is healthy", []step{{0, nil, true}}},
		{"first fault flips at once", []step{{0, nil, true}, {time.Second, fault, false}}},
		{"three clean probes, but too soon", []step{{0, fault, false}, {10 * time.Second, nil, false}, {20 * time.Second, nil, false}, {30 * time.Second, nil, false}}},
		{"three clean probes over two minutes", []step{{0, fault, false}, {time.Minute, nil, false}, {2 * time.Minute, nil, false}, {3 * time.Minute, nil, true}}},
		{"a fault in between restarts the count", []step{{0, fault, false}, {time.Minute, nil, false}, {2 * time.Minute, fault, false}, {3 * time.Minute, nil, false}, {4 * time.Minute, nil, false}, {5 * time.Minute, nil, true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var st State
			for i, s := range tt.steps {
				st = Evaluate(st, s.faults, t0.Add(s.at), h)
				if st.Healthy() != s.healthy {
					t.Fatalf("step %d: healthy = %v, want %v (state %+v)", i, st.Healthy(), s.healthy, st)
				}
			}
		})
	}
}

func TestOpenWithoutNVML(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	if _, err := Open(lib); !IsNoNVML(err) || !strings.Contains(err.Error(), "NVML") {
		t.Errorf("Open without the library: %v, want ErrNoNVML naming NVML", err)
	}
	panicky := &mock.Interface{InitFunc: func() nvml.Return { panic("libnvidia-ml.so.1: cannot open shared object file") }}
	if _, err := Open(panicky); !IsNoNVML(err) {
		t.Errorf("Open with a panicking loader: %v, want ErrNoNVML", err)
	}
}

func TestLabelValue(t *testing.T) {
	for in, want := range map[string]string{
		"NVIDIA H100 80GB HBM3": "NVIDIA-H100-80GB-HBM3",
		"NVIDIA A100-SXM4-40GB": "NVIDIA-A100-SXM4-40GB",
		" weird (name) ":        "weird--name",
	} {
		if got := labelValue(in); got != want {
			t.Errorf("labelValue(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestXIDWatchRestarts: an NVML event error (a driver reload, a GPU reset) ends the Xid watch;
// it is started again after a backoff that doubles, instead of leaving the agent blind to
// Xids for the rest of its life, and berth_agent_xid_watch_up says when it is down.
func TestXIDWatchRestarts(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	stop := make(chan struct{})
	runs := make(chan int, 10)
	n := 0
	watch := func() error {
		n++
		runs <- n
		if n < 3 {
			return errors.New("waiting for NVML events: Unknown Error")
		}
		<-stop
		return nil
	}
	done := make(chan struct{})
	go func() { superviseXIDWatch(watch, clk, stop, logr.Discard()); close(done) }()
	for want, backoff := range []time.Duration{time.Second, 2 * time.Second} {
		if got := <-runs; got != want+1 {
			t.Fatalf("run %d, want %d", got, want+1)
		}
		// The watch is down until the backoff passes.
		for !clk.HasWaiters() {
			time.Sleep(time.Millisecond)
		}
		if v := testutil.ToFloat64(xidWatchUp); v != 0 {
			t.Errorf("xid_watch_up %v while the watch is down", v)
		}
		clk.Step(backoff)
	}
	if got := <-runs; got != 3 {
		t.Fatalf("run %d, want 3", got)
	}
	if v := testutil.ToFloat64(xidWatchUp); v != 1 {
		t.Errorf("xid_watch_up %v while the watch runs", v)
	}
	close(stop)
	<-done
}
