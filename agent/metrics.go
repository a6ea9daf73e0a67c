package agent

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	bmetrics "github.com/berth-dev/berth/internal/metrics"
)

// Label names of agent metrics (bounded: GPU index on one node, a fixed set of fault kinds,
// critical Xid numbers).
const (
	labelGPU   = "gpu"
	labelFault = "fault"
	labelXID   = "xid"
)

var (
	nvmlUp = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "agent", Name: "nvml_up",
		Help: "1 when NVML initialised and answers, 0 when it is unavailable.",
	})
	gpus = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "agent", Name: "gpus",
		Help: "GPUs NVML reports on this node.",
	})
	gpuHealthy = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "agent", Name: "gpu_healthy",
		Help: "1 when the GPU shows no fault in the last probe, else 0.",
	}, []string{labelGPU})
	gpuFaults = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "agent", Name: "gpu_faults",
		Help: "Faults per GPU and kind in the last probe.",
	}, []string{labelGPU, labelFault})
	xidEvents = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: bmetrics.Namespace, Subsystem: "agent", Name: "xid_events_total",
		Help: "Critical Xid events per GPU and Xid number.",
	}, []string{labelGPU, labelXID})
	nodeReady = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "agent", Name: "accelerated_hardware_ready",
		Help: "0 while the agent has seen a fatal GPU fault on this node (AcceleratedHardwareReady=False, or would be where another component writes it), else 1.",
	})
	gpuDegraded = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "agent", Name: "gpu_degraded",
		Help: "1 while the node's GPUDegraded condition is True (throttling, pending retirement or remap, non-fatal Xids, NVML trouble), else 0.",
	})
	hardwareWriter = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "agent", Name: "writes_accelerated_hardware_ready",
		Help: "1 while berth's agent writes AcceleratedHardwareReady, 0 while another component (the EKS node monitoring agent) does.",
	})
	xidWatchUp = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "agent", Name: "xid_watch_up",
		Help: "1 while the agent waits for NVML's Xid events, 0 while the watch is down (it restarts with a backoff; meanwhile Xids are not seen).",
	})
	xidWatchRestarts = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: bmetrics.Namespace, Subsystem: "agent", Name: "xid_watch_restarts_total",
		Help: "Times the Xid event watch ended on an NVML error and was started again.",
	})
	probeErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: bmetrics.Namespace, Subsystem: "agent", Name: "probe_errors_total",
		Help: "Health probes or node updates that failed.",
	})
	lastProbe = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: bmetrics.Namespace, Subsystem: "agent", Name: "last_probe_timestamp_seconds",
		Help: "Unix time at which the agent's health loop last finished a probe (failed or not), or idled without NVML: the heartbeat of a loop that may hang in a driver call.",
	})
)

// Collectors are the agent's metrics, for registration.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{lastProbe, nvmlUp, gpus, gpuHealthy, gpuFaults, xidEvents, xidWatchUp, xidWatchRestarts, nodeReady, gpuDegraded, hardwareWriter, probeErrors}
}

func gpuLabel(i int) string { return strconv.Itoa(i) }

func xidLabel(x uint64) string { return strconv.FormatUint(x, 10) }

// allFaultKinds are the fault label values, so a fault that clears reads 0.
var allFaultKinds = []string{FaultXID, FaultECCDoubleBit, FaultRetiredPagesPending, FaultRowRemapPending, FaultRowRemapFailed, FaultThermalThrottle, FaultPowerBrake, FaultFellOffBus, FaultDeviceCount}

// recordWriter records who writes AcceleratedHardwareReady ("": berth).
func recordWriter(other string) {
	if other == "" {
		hardwareWriter.Set(1)
	} else {
		hardwareWriter.Set(0)
	}
}

// recordProbe updates the per-GPU metrics from one probe.
func recordProbe(inv Inventory, faults []Fault, st State) {
	gpus.Set(float64(len(inv.GPUs)))
	perGPU := map[int]map[string]float64{}
	for _, f := range faults {
		if perGPU[f.GPU] == nil {
			perGPU[f.GPU] = map[string]float64{}
		}
		perGPU[f.GPU][f.Kind]++
	}
	for _, g := range inv.GPUs {
		ok := 1.0
		if len(perGPU[g.Index]) > 0 {
			ok = 0
		}
		gpuHealthy.WithLabelValues(gpuLabel(g.Index)).Set(ok)
		for _, kind := range allFaultKinds {
			gpuFaults.WithLabelValues(gpuLabel(g.Index), kind).Set(perGPU[g.Index][kind])
		}
	}
	nodeReady.Set(boolGauge(len(st.Fatal) == 0))
	gpuDegraded.Set(boolGauge(len(st.Degraded) > 0 || st.Recovering))
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
