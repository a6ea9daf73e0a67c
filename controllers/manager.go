package controllers

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	berthv1alpha1 "github.com/berth-dev/berth/api/v1alpha1"
)

// ManagerOptions configure the controller manager.
type ManagerOptions struct {
	Options
	// MetricsAddress serves /metrics; "0" disables it.
	MetricsAddress string
	// HealthProbeAddress serves /healthz and /readyz; "" or "0" disables them.
	HealthProbeAddress string
	// LeaderElection makes only one replica reconcile at a time.
	LeaderElection bool
	// LeaderElectionNamespace holds the Lease; the pod's namespace when empty.
	LeaderElectionNamespace string
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
	// Karpenter's types, read and patched when Karpenter is installed (NodePools, NodeClaims).
	karpenterGV := schema.GroupVersion{Group: "karpenter.sh", Version: "v1"}
	s.AddKnownTypes(karpenterGV, &karpv1.NodePool{}, &karpv1.NodePoolList{}, &karpv1.NodeClaim{}, &karpv1.NodeClaimList{})
	metav1.AddToGroupVersion(s, karpenterGV)
	return s, nil
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
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: o.MetricsAddress},
		HealthProbeBindAddress:  o.HealthProbeAddress,
		LeaderElection:          o.LeaderElection,
		LeaderElectionID:        LeaderElectionID,
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		// Admission needs every pod on every node (capacity in use), so pods are cached
		// cluster-wide, without managed fields to keep the cache small.
		Cache:         cache.Options{DefaultTransform: cache.TransformStripManagedFields()},
		WebhookServer: o.webhookServer(),
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	if err := Setup(mgr, o.Options); err != nil {
		return nil, err
	}
	if err := o.setupWebhook(mgr, cfg); err != nil {
		return nil, err
	}
	if o.HealthProbeAddress != "" {
		if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
			return nil, fmt.Errorf("adding health check: %w", err)
		}
		if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
			return nil, fmt.Errorf("adding readiness check: %w", err)
		}
	}
	return mgr, nil
}
