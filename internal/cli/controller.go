package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/berth-dev/berth/controllers"
)

type controllerFlags struct {
	kubeconfig         string
	metricsAddress     string
	healthProbeAddress string
	leaderElect        bool
	leaderElectionNS   string
	development        bool
}

func newControllerCommand() *cobra.Command {
	var f controllerFlags
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run berth's controllers (PodGroup gang admission and status)",
		Long: `Run berth's controllers against a cluster.

The controller reconciles PodGroups (scheduling.berth.dev/v1alpha1): it counts each gang's
member pods (pods labelled scheduling.berth.dev/pod-group=<name>) and keeps the PodGroup's
phase, member counts and conditions current. Only pods carrying that label are cached.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runController(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file; empty uses $KUBECONFIG, in-cluster config or ~/.kube/config")
	fl.StringVar(&f.metricsAddress, "metrics-bind-address", ":8080", "address of the Prometheus /metrics endpoint; 0 disables it")
	fl.StringVar(&f.healthProbeAddress, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz endpoints")
	fl.BoolVar(&f.leaderElect, "leader-elect", true, "elect a leader so only one replica reconciles at a time")
	fl.StringVar(&f.leaderElectionNS, "leader-election-namespace", "", "namespace of the leader-election Lease; empty uses the pod's namespace")
	fl.BoolVar(&f.development, "development", false, "human-readable console logs instead of JSON")
	return cmd
}

func loadConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := ctrl.GetConfig()
		if err != nil {
			return nil, fmt.Errorf("loading kubeconfig: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig %s: %w", kubeconfig, err)
	}
	return cfg, nil
}

func runController(cmd *cobra.Command, f controllerFlags) error {
	ctrl.SetLogger(zap.New(zap.UseDevMode(f.development)))
	cfg, err := loadConfig(f.kubeconfig)
	if err != nil {
		return err
	}
	mgr, err := controllers.NewManager(cfg, controllers.ManagerOptions{
		MetricsAddress:          f.metricsAddress,
		HealthProbeAddress:      f.healthProbeAddress,
		LeaderElection:          f.leaderElect,
		LeaderElectionNamespace: f.leaderElectionNS,
	})
	if err != nil {
		return err
	}
	if err := mgr.Start(cmd.Context()); err != nil {
		return fmt.Errorf("running manager: %w", err)
	}
	return nil
}
