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
		Help: "1 while the node's AcceleratedHardwareReady condition is True.",
	})
	probeErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: bmetrics.Namespace, Subsystem: "agent", Name: "probe_errors_total",
		Help: "Health probes or node updates that failed.",
	})
)

// Collectors are the agent's metrics, for registration.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{nvmlUp, gpus, gpuHealthy, gpuFaults, xidEvents, nodeReady, probeErrors}
}

func gpuLabel(i int) string { return strconv.Itoa(i) }

func xidLabel(x uint64) string { return strconv.FormatUint(x, 10) }

// recordProbe updates the per-GPU metrics from one probe.
func recordProbe(inv Inventory, faults []Fault, healthy bool) {
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
		for kind := range faultReasons {
			gpuFaults.WithLabelValues(gpuLabel(g.Index), kind).Set(perGPU[g.Index][kind])
		}
	}
	if healthy {
		nodeReady.Set(1)
	} else {
		nodeReady.Set(0)
	}
}
