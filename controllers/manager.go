package controllers

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	autoscalingv1 "k8s.io/autoscaler/cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
	"github.com/berth-dev/berth/controllers/podgroup/admission"
)

// ManagerOptions configure the controller manager.
type ManagerOptions struct {
	Options
	// MetricsAddress serves /metrics; "0" disables it.
	MetricsAddress string
	// MetricsSecure serves /metrics over HTTPS to callers the API server authenticates and
	// authorizes for get on /metrics (controller-runtime's filter).
	MetricsSecure bool
	// HealthProbeAddress serves /healthz and /readyz; "" or "0" disables them.
	HealthProbeAddress string
	// ProfilingAddress serves Go's profiles (/debug/pprof/) for diagnosing memory and CPU;
	// "" disables them (the default: they are not for every caller).
	ProfilingAddress string
	// LeaderElection makes only one replica reconcile at a time.
	LeaderElection bool
	// LeaderElectionNamespace holds the Lease; the pod's namespace when empty.
	LeaderElectionNamespace string
	// Lease timings (LeaderElectionTimings); zero fields take client-go's defaults.
	Lease LeaseTimings
	// Webhook configures the pod-gate admission webhook; disabled when Port is 0.
	Webhook WebhookOptions
}

// LeaderElectionID names the Lease replicas of the controller compete for.
const LeaderElectionID = "berth-controller.scheduling.berth.dev"

// NewScheme has every type berth's controllers read and write.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("adding core types: %w", err)
	}
	if err := berthv1alpha1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("adding berth types: %w", err)
	}
	if err := autoscalingv1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("adding ProvisioningRequest types: %w", err)
	}
	// Karpenter's types, read and patched when Karpenter is installed (NodePools, NodeClaims).
	karpenterGV := schema.GroupVersion{Group: "karpenter.sh", Version: "v1"}
	s.AddKnownTypes(karpenterGV, &karpv1.NodePool{}, &karpv1.NodePoolList{}, &karpv1.NodeClaim{}, &karpv1.NodeClaimList{})
	metav1.AddToGroupVersion(s, karpenterGV)
	return s, nil
}

// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// metricsOptions serve /metrics, over HTTPS behind authentication and authorization when
// MetricsSecure.
func (o ManagerOptions) metricsOptions() metricsserver.Options {
	opts := metricsserver.Options{BindAddress: o.MetricsAddress}
	if o.MetricsSecure {
		opts.SecureServing, opts.FilterProvider = true, filters.WithAuthenticationAndAuthorization
	}
	return opts
}

// NewManager builds a controller-runtime manager with every berth controller and the pod-gate
// webhook registered, and health checks installed.
func NewManager(cfg *rest.Config, o ManagerOptions) (ctrl.Manager, error) {
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}
	if o.MetricsAddress == "" {
		o.MetricsAddress = "0"
	}
	if o.HealthProbeAddress == "0" {
		o.HealthProbeAddress = ""
	}
	rot := o.rotator()
	timings, err := o.Lease.withDefaults()
	if err != nil {
		return nil, err
	}
	lease, lock, err := o.leaderLock(cfg, timings.RenewDeadline)
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                              scheme,
		Metrics:                             o.metricsOptions(),
		HealthProbeBindAddress:              o.HealthProbeAddress,
		PprofBindAddress:                    o.ProfilingAddress,
		LeaderElection:                      o.LeaderElection,
		LeaderElectionID:                    LeaderElectionID,
		LeaderElectionNamespace:             o.LeaderElectionNamespace,
		LeaderElectionResourceLockInterface: lock,
		LeaseDuration:                       &timings.LeaseDuration,
		RenewDeadline:                       &timings.RenewDeadline,
		RetryPeriod:                         &timings.RetryPeriod,
		// Admission needs every pod on every node (capacity in use), so pods are cached
		// cluster-wide, slimmed to what the controllers read (slimPod); other objects
		// without managed fields.
		Cache: cache.Options{DefaultTransform: cache.TransformStripManagedFields(),
			ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Transform: slimPod}}},
		WebhookServer: o.webhookServer(rot),
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	if lock != nil {
		// Promises and releases are fenced on the Lease: a replica that lost it (or whose
		// renewals are failing) stops promising before another can lead.
		o.Fence = admission.LeaseFence{Reader: mgr.GetAPIReader(), Lease: lease, Identity: lock.Identity()}
	}
	if err := Setup(mgr, o.Options); err != nil {
		return nil, err
	}
	if err := o.setupWebhook(mgr, cfg, rot); err != nil {
		return nil, err
	}
	if o.HealthProbeAddress != "" {
		if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
			return nil, fmt.Errorf("adding health check: %w", err)
		}
		if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
			return nil, fmt.Errorf("adding readiness check: %w", err)
		}
		if o.Webhook.Port != 0 {
			// Ready only once the webhook server serves (with its certificate loaded): the
			// Service sends the API server's calls to ready pods only, and with failurePolicy
			// Fail a replica that is up but not serving would refuse gang members.
			if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
				return nil, fmt.Errorf("adding the webhook readiness check: %w", err)
			}
			if rot != nil {
				// And only once its certificate is issued, its CA injected, and served here.
				if err := mgr.AddReadyzCheck("webhook-certificate", rot.ReadyCheck); err != nil {
					return nil, fmt.Errorf("adding the webhook certificate readiness check: %w", err)
				}
			}
		}
	}
	if lock != nil {
		return releasingManager{Manager: mgr, lock: lock, timeout: timings.RenewDeadline}, nil
	}
	return mgr, nil
}

// leaderLock builds the leader-election Lease lock with an identity of this process's own
// (hostname and a UUID, as controller-runtime would make), so admission can fence its promises
// on the Lease (admission.LeaseFence). nil without leader election.
func (o ManagerOptions) leaderLock(cfg *rest.Config, renewDeadline time.Duration) (types.NamespacedName, resourcelock.Interface, error) {
	if !o.LeaderElection {
		return types.NamespacedName{}, nil, nil
	}
	ns := o.LeaderElectionNamespace
	if ns == "" {
		data, err := os.ReadFile(inClusterNamespaceFile)
		if err != nil {
			return types.NamespacedName{}, nil, fmt.Errorf("leader election needs a namespace for its Lease: not running in a pod (%w); set the leader-election namespace", err)
		}
		ns = strings.TrimSpace(string(data))
	}
	host, err := os.Hostname()
	if err != nil {
		return types.NamespacedName{}, nil, fmt.Errorf("naming this replica for leader election: %w", err)
	}
	id := host + "_" + string(uuid.NewUUID())
	lock, err := resourcelock.NewFromKubeconfig(resourcelock.LeasesResourceLock, ns, LeaderElectionID,
		resourcelock.ResourceLockConfig{Identity: id}, cfg, renewDeadline)
	if err != nil {
		return types.NamespacedName{}, nil, fmt.Errorf("creating the leader-election lock: %w", err)
	}
	return types.NamespacedName{Namespace: ns, Name: LeaderElectionID}, lock, nil
}

// inClusterNamespaceFile holds the namespace of the pod the process runs in.
const inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// LeaseTimings are the leader election's timings: how long a Lease holds without renewal, how
// long the leader keeps trying to renew before it gives up leading, and how often it tries.
// Longer timings ride out a slow API server; shorter ones fail over sooner.
type LeaseTimings struct {
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// DefaultLeaseTimings are client-go's (and controller-runtime's) defaults.
var DefaultLeaseTimings = LeaseTimings{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}

// withDefaults fills zero timings with the defaults and checks what leader election and the
// admission fence need: RenewDeadline below LeaseDuration (a leader gives up before another may
// take over), above 1.2 × RetryPeriod (client-go's jitter), and a Lease long enough that a
// renewed one leaves the fence its margin (admission.DefaultFenceMargin) between two renewals.
func (t LeaseTimings) withDefaults() (LeaseTimings, error) {
	if t.LeaseDuration == 0 {
		t.LeaseDuration = DefaultLeaseTimings.LeaseDuration
	}
	if t.RenewDeadline == 0 {
		t.RenewDeadline = DefaultLeaseTimings.RenewDeadline
	}
	if t.RetryPeriod == 0 {
		t.RetryPeriod = DefaultLeaseTimings.RetryPeriod
	}
	var errs []error
	if t.LeaseDuration <= t.RenewDeadline {
		errs = append(errs, fmt.Errorf("the lease duration (%s) must be longer than the renew deadline (%s)", t.LeaseDuration, t.RenewDeadline))
	}
	if float64(t.RenewDeadline) <= 1.2*float64(t.RetryPeriod) {
		errs = append(errs, fmt.Errorf("the renew deadline (%s) must be longer than 1.2 × the retry period (%s)", t.RenewDeadline, t.RetryPeriod))
	}
	if t.LeaseDuration-t.RetryPeriod < 2*admission.DefaultFenceMargin {
		errs = append(errs, fmt.Errorf("the lease duration (%s) must exceed the retry period (%s) by at least %s, so that a renewed Lease leaves admission its %s fence margin", t.LeaseDuration, t.RetryPeriod, 2*admission.DefaultFenceMargin, admission.DefaultFenceMargin))
	}
	if err := errors.Join(errs...); err != nil {
		return t, fmt.Errorf("leader election: %w", err)
	}
	return t, nil
}
