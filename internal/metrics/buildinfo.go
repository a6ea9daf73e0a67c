package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/berth-dev/berth/internal/version"
)

// LabelComponent names a berth component: controller, scaler, agent.
const LabelComponent = "component"

// BuildInfo is berth_build_info for one component: 1, labelled with the component, version and
// commit. Every component serves it, so its absence is how an alert tells that a component is
// not running (or not scraped) at all.
func BuildInfo(component string) prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Subsystem: "build", Name: "info",
		Help: "1 for each running berth component, labelled with its component (controller, scaler, agent), version and commit.",
	}, []string{LabelComponent, "version", "commit"})
	g.WithLabelValues(component, version.Version, version.Commit).Set(1)
	return g
}
