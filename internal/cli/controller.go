package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
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

// newScheme has the types berth's controllers read and write.
func newScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("adding core types: %w", err)
	}
	if err := berthv1alpha1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("adding berth types: %w", err)
	}
	return s, nil
}

func runController(cmd *cobra.Command, f controllerFlags) error {
	ctrl.SetLogger(zap.New(zap.UseDevMode(f.development)))
	cfg, err := loadConfig(f.kubeconfig)
	if err != nil {
		return err
	}
	scheme, err := newScheme()
	if err != nil {
		return err
	}
	members, err := labels.NewRequirement(berthv1alpha1.PodGroupLabel, selection.Exists, nil)
	if err != nil {
		return fmt.Errorf("building member selector: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: f.metricsAddress},
		HealthProbeBindAddress:  f.healthProbeAddress,
		LeaderElection:          f.leaderElect,
		LeaderElectionID:        "berth-controller.scheduling.berth.dev",
		LeaderElectionNamespace: f.leaderElectionNS,
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			// Only gang members are cached; every other pod in the cluster is irrelevant here.
			&corev1.Pod{}: {Label: labels.NewSelector().Add(*members)},
		}},
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	if err := controllers.Setup(mgr, controllers.Options{}); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("adding health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("adding readiness check: %w", err)
	}
	if err := mgr.Start(cmd.Context()); err != nil {
		return fmt.Errorf("running manager: %w", err)
	}
	return nil
}
