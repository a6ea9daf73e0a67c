package agent

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Fault kinds, used in condition messages and metric labels (a bounded set).
const (
	FaultXID                 = "xid"
	FaultECCDoubleBit        = "ecc_double_bit"
	FaultRetiredPagesPending = "retired_pages_pending"
	FaultRowRemapPending     = "row_remap_pending"
	FaultRowRemapFailed      = "row_remap_failed"
	FaultThermalThrottle     = "thermal_throttle"
	FaultPowerBrake          = "power_brake"
	FaultFellOffBus          = "fell_off_bus"
	FaultDeviceCount         = "device_count_mismatch"
)

// Xids the agent watches for (NVIDIA's Xid catalogue), split by what they need.
//
// fatalXIDs need a new node (or at least a reboot that resets the GPU): 48 double-bit ECC,
// 64 row-remapper recording failure, 74 NVLink, 79 fell off the bus, 95 uncontained ECC,
// 119/120 GSP, 140 unrecovered ECC. Each is in a reason family Karpenter's AWS repair policy
// matches (NvidiaXID<n>Error: 48, 95, 140 reboot-clearable; 64, 74, 79, 119, 120 replace).
//
// degradedXIDs are worth knowing but recover in place: 63 row remapping pending a reset,
// 92 high single-bit ECC rate, 94 contained ECC (the affected application dies, the GPU lives).
var (
	fatalXIDs    = map[uint64]bool{48: true, 64: true, 74: true, 79: true, 95: true, 119: true, 120: true, 140: true}
	degradedXIDs = map[uint64]bool{63: true, 92: true, 94: true}
)

// Fault is one problem seen on one GPU (GPU -1: the node's GPUs as a whole).
type Fault struct {
	GPU    int    `json:"gpu"`
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
	// Fatal faults need a new node; the others degrade the GPU and recover in place.
	Fatal bool `json:"fatal"`
	// XID is the Xid the fault is, or is reported as (a double-bit ECC error is Xid 48, a
	// failed row remap Xid 64, a lost GPU Xid 79); 0 when none fits.
	XID uint64 `json:"xid,omitempty"`
}

func (f Fault) String() string {
	if f.GPU < 0 {
		return fmt.Sprintf("%s (%s)", f.Kind, f.Detail)
	}
	return fmt.Sprintf("GPU %d: %s (%s)", f.GPU, f.Kind, f.Detail)
}

// xidLog remembers watched Xid events per GPU, reported by the event loop, until they are
// older than hold (a fatal one is latched by Evaluate long before that).
type xidLog struct {
	mu     sync.Mutex
	events map[int]map[uint64]time.Time
}

func (l *xidLog) record(gpu int, xid uint64, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.events == nil {
		l.events = map[int]map[uint64]time.Time{}
	}
	if l.events[gpu] == nil {
		l.events[gpu] = map[uint64]time.Time{}
	}
	l.events[gpu][xid] = at
}

// recent lists the Xids seen on gpu within hold of now.
func (l *xidLog) recent(gpu int, now time.Time, hold time.Duration) []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []uint64
	for xid, at := range l.events[gpu] {
		if now.Sub(at) < hold {
			out = append(out, xid)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Probe reads every GPU's health once and returns the faults found. Readings a GPU does not
// support are skipped; a GPU that NVML reports as lost is a fault (it fell off the bus), and so
// is seeing fewer GPUs than expected (the instance type's GPU count; 0: unknown).
func (r *Reader) Probe(xids *xidLog, now time.Time, xidHold time.Duration, expected int) ([]Fault, error) {
	n, ret := r.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("counting GPUs: %s", nvml.ErrorString(ret))
	}
	var faults []Fault
	if expected > 0 && n < expected {
		faults = append(faults, Fault{GPU: -1, Kind: FaultDeviceCount, Fatal: true,
			Detail: fmt.Sprintf("NVML sees %d of the instance type's %d GPUs", n, expected)})
	}
	for i := range n {
		faults = append(faults, r.probeDevice(i, xids, now, xidHold)...)
	}
	return faults, nil
}

func (r *Reader) probeDevice(i int, xids *xidLog, now time.Time, xidHold time.Duration) []Fault {
	d, ret := r.lib.DeviceGetHandleByIndex(i)
	lostGPU := Fault{GPU: i, Kind: FaultFellOffBus, Detail: "NVML reports the GPU lost", Fatal: true, XID: 79}
	if ret == nvml.ERROR_GPU_IS_LOST {
		return []Fault{lostGPU}
	}
	if ret != nvml.SUCCESS {
		lostGPU.Detail = "no handle: " + nvml.ErrorString(ret)
		return []Fault{lostGPU}
	}
	var out []Fault
	lost := func(ret nvml.Return) bool {
		if ret == nvml.ERROR_GPU_IS_LOST {
			out = append(out, lostGPU)
			return true
		}
		return false
	}
	if n, ret := d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC); lost(ret) {
		return out
	} else if ret == nvml.SUCCESS && n > 0 {
		out = append(out, Fault{GPU: i, Kind: FaultECCDoubleBit, Detail: fmt.Sprintf("%d uncorrectable ECC errors since boot", n), Fatal: true, XID: 48})
	}
	if st, ret := d.GetRetiredPagesPendingStatus(); ret == nvml.SUCCESS && st == nvml.FEATURE_ENABLED {
		out = append(out, Fault{GPU: i, Kind: FaultRetiredPagesPending, Detail: "page retirement pending a reset"})
	}
	if _, _, pending, failed, ret := d.GetRemappedRows(); ret == nvml.SUCCESS {
		if failed {
			out = append(out, Fault{GPU: i, Kind: FaultRowRemapFailed, Detail: "row remapping failed", Fatal: true, XID: 64})
		} else if pending {
			out = append(out, Fault{GPU: i, Kind: FaultRowRemapPending, Detail: "row remapping pending a reset"})
		}
	}
	if reasons, ret := d.GetCurrentClocksEventReasons(); ret == nvml.SUCCESS {
		if reasons&(nvml.ClocksThrottleReasonHwThermalSlowdown|nvml.ClocksThrottleReasonSwThermalSlowdown) != 0 {
			out = append(out, Fault{GPU: i, Kind: FaultThermalThrottle, Detail: fmt.Sprintf("clocks throttled for temperature (reasons 0x%x)", reasons)})
		}
		if reasons&nvml.ClocksThrottleReasonHwPowerBrakeSlowdown != 0 {
			out = append(out, Fault{GPU: i, Kind: FaultPowerBrake, Detail: fmt.Sprintf("hardware power brake engaged (reasons 0x%x)", reasons)})
		}
	}
	for _, xid := range xids.recent(i, now, xidHold) {
		out = append(out, Fault{GPU: i, Kind: FaultXID, Detail: fmt.Sprintf("Xid %d", xid), Fatal: fatalXIDs[xid], XID: xid})
	}
	return out
}

// WatchXIDs registers for critical Xid events on every GPU and records the watched ones (fatal
// and degraded) in xids until stop is closed. GPUs that do not support events are skipped.
func (r *Reader) WatchXIDs(xids *xidLog, now func() time.Time, stop <-chan struct{}) error {
	set, ret := r.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("creating NVML event set: %s", nvml.ErrorString(ret))
	}
	defer func() { _ = set.Free() }() // nothing to do if freeing the set fails: the process goes on
	index := map[string]int{}
	n, ret := r.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("counting GPUs: %s", nvml.ErrorString(ret))
	}
	for i := range n {
		d, ret := r.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		if uuid, ret := d.GetUUID(); ret == nvml.SUCCESS {
			index[uuid] = i
		}
		_ = d.RegisterEvents(nvml.EventTypeXidCriticalError|nvml.EventTypeDoubleBitEccError, set)
	}
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		ev, ret := set.Wait(1000)
		if ret == nvml.ERROR_TIMEOUT {
			continue
		}
		if ret != nvml.SUCCESS {
			return fmt.Errorf("waiting for NVML events: %s", nvml.ErrorString(ret))
		}
		gpu := -1
		if ev.Device != nil {
			if uuid, ret := ev.Device.GetUUID(); ret == nvml.SUCCESS {
				if i, ok := index[uuid]; ok {
					gpu = i
				}
			}
		}
		if ev.EventType&nvml.EventTypeXidCriticalError != 0 && (fatalXIDs[ev.EventData] || degradedXIDs[ev.EventData]) && gpu >= 0 {
			xids.record(gpu, ev.EventData, now())
			xidEvents.WithLabelValues(gpuLabel(gpu), xidLabel(ev.EventData)).Inc()
		}
	}
}
