package cli

import (
	"os"
	"time"

	"github.com/spf13/cobra"
)

type agentFlags struct {
	kubeconfig      string
	nodeName        string
	interval        time.Duration
	xidHold         time.Duration
	once            bool
	jsonOutput      bool
	exitWithoutNVML bool
	metrics         metricsFlags
	healthAddress   string
	log             logFlags
}

func newAgentCommand() *cobra.Command {
	var f agentFlags
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Report GPU inventory and health of this node (NVML) to Kubernetes",
		Long: `Run berth's node GPU agent (a DaemonSet on GPU nodes).

It reads GPU inventory and health through NVML — critical Xid events, uncorrectable ECC
errors, pending page retirement and row remapping, thermal throttling and power brake, GPUs
that fall off the bus — and publishes the node condition AcceleratedHardwareReady (False on
the first fault, True again after clean probes; Karpenter's node repair and berth's gang
admission act on it), GPU labels where GPU feature discovery set none, and berth_agent_*
metrics.

--once prints the inventory and health once and exits (non-zero when NVML is absent).

The agent needs NVML, so it runs only from a Linux build with cgo (the berth-agent image);
other builds of berth say so and exit.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runAgent(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file; empty uses $KUBECONFIG or in-cluster config")
	fl.StringVar(&f.nodeName, "node-name", os.Getenv("NODE_NAME"), "the node to report on (default $NODE_NAME, from the downward API)")
	fl.DurationVar(&f.interval, "interval", 30*time.Second, "time between health probes")
	fl.DurationVar(&f.xidHold, "xid-hold", 10*time.Minute, "how long a critical Xid keeps its GPU faulty")
	fl.BoolVar(&f.once, "once", false, "print inventory and health once and exit")
	fl.BoolVar(&f.jsonOutput, "json", false, "with --once: print JSON")
	fl.BoolVar(&f.exitWithoutNVML, "exit-without-nvml", false, "exit with an error when NVML is absent instead of reporting NVMLUnavailable and idling")
	f.metrics.bind(fl, "metrics-bind-address", ":9400")
	fl.StringVar(&f.healthAddress, "health-probe-bind-address", ":9401", "address of the liveness endpoint /healthz (plain HTTP, for the kubelet): it fails when the health loop has made no progress for 3 intervals and a minute (a hung NVML call); 0 disables it")
	f.log.bind(fl)
	return cmd
}
