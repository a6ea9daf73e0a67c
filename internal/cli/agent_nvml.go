//go:build linux && cgo

package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-dev/berth/agent"
	bmetrics "github.com/berth-dev/berth/internal/metrics"
)

func runAgent(cmd *cobra.Command, f agentFlags) error {
	lib := nvml.New()
	if f.once {
		rep, err := agent.Once(lib, time.Now())
		if err != nil {
			return fmt.Errorf("NVML: %w", err)
		}
		return rep.Print(cmd.OutOrStdout(), f.jsonOutput)
	}
	if err := f.log.setup(); err != nil {
		return err
	}
	if f.nodeName == "" {
		return errors.New("--node-name (or $NODE_NAME) is required")
	}
	cfg, err := loadConfig(f.kubeconfig)
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(agent.Collectors()...)
	reg.MustRegister(bmetrics.BuildInfo("agent"))
	ctx := cmd.Context()
	if f.metrics.address != "0" {
		if err := serveMetrics(ctx, f.metrics, reg, cfg); err != nil {
			return err
		}
	}
	live := agent.NewLiveness(time.Now())
	if f.healthAddress != "0" {
		maxAge := agent.MaxLoopAge(f.interval)
		if err := serveHealth(ctx, f.healthAddress, func() error { return live.Check(time.Now(), maxAge) }); err != nil {
			return err
		}
	}
	pub := &agent.Publisher{Client: c, NodeName: f.nodeName, Now: time.Now}
	return agent.Run(ctrl.LoggerInto(ctx, ctrl.Log.WithName("agent")), lib, pub, agent.Options{
		Interval: f.interval, XIDHold: f.xidHold, ExitWithoutNVML: f.exitWithoutNVML, Liveness: live,
	})
}
