package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/berth-dev/berth/controllers"
	"github.com/berth-dev/berth/controllers/nodepool/guard"
	"github.com/berth-dev/berth/controllers/podgroup/admission"
	"github.com/berth-dev/berth/controllers/podgroup/gate"
	bmetrics "github.com/berth-dev/berth/internal/metrics"
)

type controllerFlags struct {
	kubeconfig         string
	metrics            metricsFlags
	healthProbeAddress string
	profilingAddress   string
	leaderElect        bool
	leaderElectionNS   string
	log                logFlags
	webhookHost        string
	webhookPort        int
	webhookCertDir     string
	webhookSelfSigned  bool
	webhookSecret      string
	webhookNamespace   string
	webhookHosts       []string
	adapters           []string
	gangProvisioning   bool
	seatImage          string
	seatNamespace      string
	consolidationGuard string
	admissionResync    time.Duration
	strandedAfter      time.Duration
	nodeReadyBudget    time.Duration
	lease              controllers.LeaseTimings
	kubeAPIQPS         float32
	kubeAPIBurst       int
}

func newControllerCommand() *cobra.Command {
	var f controllerFlags
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run berth's controllers (PodGroup gang admission and status)",
		Long: `Run berth's controllers against a cluster.

The controller admits gangs. Member pods (labelled scheduling.berth.dev/pod-group=<name>, or
labelled for an enabled adapter) get a scheduling gate from the pod-gate webhook it serves;
once every member of a PodGroup (scheduling.berth.dev/v1alpha1) fits, it pins each member to
its node and releases them together. It keeps PodGroup phase, member counts, conditions and
Events current, and by default issues and rotates its own webhook certificate.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runController(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file; empty uses $KUBECONFIG, in-cluster config or ~/.kube/config")
	f.metrics.bind(fl, "metrics-bind-address", ":8080")
	fl.StringVar(&f.healthProbeAddress, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz endpoints")
	fl.StringVar(&f.profilingAddress, "profiling-bind-address", "", "address of Go's profiling endpoints (/debug/pprof/) for diagnosing memory and CPU; off when empty (keep it on loopback: they have no authentication)")
	fl.BoolVar(&f.leaderElect, "leader-elect", true, "elect a leader so only one replica reconciles at a time")
	fl.StringVar(&f.leaderElectionNS, "leader-election-namespace", "", "namespace of the leader-election Lease; empty uses the pod's namespace")
	fl.DurationVar(&f.lease.LeaseDuration, "leader-elect-lease-duration", controllers.DefaultLeaseTimings.LeaseDuration, "how long the leader Lease holds without renewal before another replica may take over")
	fl.DurationVar(&f.lease.RenewDeadline, "leader-elect-renew-deadline", controllers.DefaultLeaseTimings.RenewDeadline, "how long the leader keeps trying to renew its Lease before it stops leading (shorter than the lease duration)")
	fl.DurationVar(&f.lease.RetryPeriod, "leader-elect-retry-period", controllers.DefaultLeaseTimings.RetryPeriod, "how often replicas try to acquire or renew the Lease")
	fl.Float32Var(&f.kubeAPIQPS, "kube-api-qps", 100, "steady queries per second to the API server (a gang's release is a burst of patches)")
	fl.IntVar(&f.kubeAPIBurst, "kube-api-burst", 200, "queries the controller may send in a burst above --kube-api-qps")
	f.log.bind(fl)
	fl.StringVar(&f.webhookHost, "webhook-host", "", "address the pod-gate webhook listens on (all when empty)")
	fl.IntVar(&f.webhookPort, "webhook-port", 9443, "port of the pod-gate webhook; 0 disables it (gang members are then not gated)")
	fl.StringVar(&f.webhookCertDir, "webhook-cert-dir", filepath.Join(os.TempDir(), "berth-webhook-certs"), "folder with the webhook's tls.crt and tls.key")
	fl.BoolVar(&f.webhookSelfSigned, "webhook-self-signed", true, "issue, rotate and inject the webhook certificate itself (false: cert-manager provides --webhook-cert-dir)")
	fl.StringVar(&f.webhookSecret, "webhook-secret", "berth-webhook-cert", "Secret holding the self-signed webhook certificate")
	fl.StringVar(&f.webhookNamespace, "webhook-secret-namespace", envOr("POD_NAMESPACE", "berth-system"), "namespace of --webhook-secret")
	fl.StringSliceVar(&f.webhookHosts, "webhook-hosts", []string{"berth-webhook.berth-system.svc"}, "DNS names the webhook certificate is for (IPs are not supported: use localhost for a loopback webhook)")
	fl.StringSliceVar(&f.adapters, "adapters", nil, "foreign gang sources treated as berth gangs, off unless listed: lws (each LeaderWorkerSet group one gang), coscheduling, volcano, kai, kueue")
	fl.BoolVar(&f.gangProvisioning, "gang-provisioning", true, "get capacity for gangs that do not fit from Karpenter in one batch (seat pods); off when Karpenter is not installed")
	fl.StringVar(&f.consolidationGuard, "consolidation-guard", string(guard.ModeEnforce), "what the consolidation guard does with GPU NodePools that let Karpenter consolidate underutilized nodes, unless the NodePool's scheduling.berth.dev/consolidation-guard annotation says otherwise: enforce (add a budget blocking Underutilized), when-empty (switch to WhenEmpty), audit (report only), off")
	fl.DurationVar(&f.admissionResync, "admission-resync", admission.DefaultResync, "longest gang admission waits for an event before it looks again (a safety net; deadlines are kept exactly)")
	fl.DurationVar(&f.strandedAfter, "stranded-after", admission.DefaultStrandedAfter, "how long kube-scheduler may report a released gang member unschedulable on its node before berth replaces it")
	fl.DurationVar(&f.nodeReadyBudget, "node-ready-budget", admission.DefaultNodeReadyBudget, "how long a new node that is not Ready yet counts as capacity on its way")
	fl.StringVar(&f.seatNamespace, "seat-namespace", envOr("POD_NAMESPACE", admission.DefaultSeatNamespace), "namespace of seat pods (berth's own: seats never count against a tenant's ResourceQuota)")
	fl.StringVar(&f.seatImage, "seat-image", admission.DefaultSeatImage, "container image of seat pods (any image that starts and sleeps; mirror it for air-gapped clusters)")
	return cmd
}

// parseAdapters turns --adapters into sources in gate.Adapters' order (a pod two sources claim
// belongs to the first), rejecting unknown names.
func parseAdapters(names []string) ([]gate.Source, error) {
	want := map[string]bool{}
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n == "" || n == "none" {
			continue
		}
		if _, ok := gate.AdapterSources[n]; !ok {
			known := make([]string, 0, len(gate.AdapterSources))
			for _, s := range gate.Adapters() {
				known = append(known, s.Name)
			}
			return nil, fmt.Errorf("--adapters: unknown source %q (known: %s)", n, strings.Join(known, ", "))
		}
		want[n] = true
	}
	var out []gate.Source
	for _, s := range gate.Adapters() {
		if want[s.Name] {
			out = append(out, s)
		}
	}
	return out, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
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
	if err := f.log.setup(); err != nil {
		return err
	}
	cfg, err := loadConfig(f.kubeconfig)
	if err != nil {
		return err
	}
	adapters, err := parseAdapters(f.adapters)
	if err != nil {
		return err
	}
	guard, err := guard.ParseMode(f.consolidationGuard)
	if err != nil {
		return fmt.Errorf("--consolidation-guard: %w", err)
	}
	if f.kubeAPIQPS <= 0 || f.kubeAPIBurst < int(f.kubeAPIQPS) {
		return fmt.Errorf("--kube-api-qps %v and --kube-api-burst %d: the rate must be positive and the burst at least the rate", f.kubeAPIQPS, f.kubeAPIBurst)
	}
	cfg.QPS, cfg.Burst = f.kubeAPIQPS, f.kubeAPIBurst
	if err := registerOnce(ctrlmetrics.Registry, bmetrics.BuildInfo("controller")); err != nil {
		return err
	}
	mgr, err := controllers.NewManager(cfg, controllers.ManagerOptions{
		Options: controllers.Options{
			Provisioning:       admission.ProvisioningOptions{Enabled: f.gangProvisioning, SeatImage: f.seatImage, SeatNamespace: f.seatNamespace},
			ConsolidationGuard: guard,
			AdmissionResync:    f.admissionResync,
			StrandedAfter:      f.strandedAfter,
			NodeReadyBudget:    f.nodeReadyBudget,
		},
		MetricsAddress:          f.metrics.address,
		MetricsSecure:           f.metrics.secure,
		HealthProbeAddress:      f.healthProbeAddress,
		ProfilingAddress:        f.profilingAddress,
		LeaderElection:          f.leaderElect,
		LeaderElectionNamespace: f.leaderElectionNS,
		Lease:                   f.lease,
		Webhook: controllers.WebhookOptions{
			Host: f.webhookHost, Port: f.webhookPort, CertDir: f.webhookCertDir, Adapters: adapters,
			ManageCertificate: f.webhookSelfSigned, SecretNamespace: f.webhookNamespace, SecretName: f.webhookSecret,
			Hosts: f.webhookHosts,
		},
	})
	if err != nil {
		return err
	}
	if err := mgr.Start(cmd.Context()); err != nil {
		return fmt.Errorf("running manager: %w", err)
	}
	return nil
}

// registerOnce registers a collector, accepting one already registered (a second controller
// started in the same process, as tests do).
func registerOnce(reg prometheus.Registerer, c prometheus.Collector) error {
	var already prometheus.AlreadyRegisteredError
	if err := reg.Register(c); err != nil && !errors.As(err, &already) {
		return fmt.Errorf("registering %T: %w", c, err)
	}
	return nil
}
