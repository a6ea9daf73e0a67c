package certs

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Rotator keeps the pod-gate webhook's serving certificate without cert-manager, with
// open-policy-agent/cert-controller: a CA that lives ten years in a Secret every controller
// replica shares, a serving certificate it signs, renewed 90 days before it expires (the CA
// stays, so a replica still serving the previous certificate is trusted under the same bundle),
// and the CA bundle injected into the webhook configuration — which is watched, so a bundle
// reset by GitOps or by hand is injected again within seconds. Every replica serves the
// certificate it reads from the Secret through a watch (not a Secret volume, which the kubelet
// refreshes only about once a minute), so a renewal reaches every replica at once.
type Rotator struct {
	// Namespace and SecretName locate the Secret holding ca.crt, ca.key, tls.crt and tls.key.
	Namespace, SecretName string
	// Hosts are the DNS names the certificate is for; the first is its common name. IP
	// addresses are not supported (cert-controller issues DNS names only): address a webhook on
	// loopback as localhost.
	Hosts []string
	// CertDir receives tls.crt and tls.key as they are in the Secret (cert-controller waits for
	// them before it says ready; the expiry metric reads them).
	CertDir string
	// WebhookConfiguration is the MutatingWebhookConfiguration whose caBundle is kept.
	WebhookConfiguration string

	ready   chan struct{}
	mu      sync.RWMutex
	serving *tls.Certificate
}

// NewRotator returns a Rotator; Add starts it with a manager.
func NewRotator(namespace, secret string, hosts []string, certDir, webhookConfiguration string) *Rotator {
	return &Rotator{Namespace: namespace, SecretName: secret, Hosts: hosts, CertDir: certDir,
		WebhookConfiguration: webhookConfiguration, ready: make(chan struct{})}
}

// Add makes sure the Secret exists (cert-controller only ever updates it) and adds the rotation,
// the CA injection and this replica's serving of the Secret to the manager. None of them needs
// the leader: every replica serves the webhook, and the Secret's optimistic locking settles
// replicas that renew at once.
func (r *Rotator) Add(ctx context.Context, mgr manager.Manager, direct client.Client) error {
	if len(r.Hosts) == 0 {
		return errors.New("the webhook certificate needs at least one host name")
	}
	for _, h := range r.Hosts {
		if net.ParseIP(h) != nil {
			return fmt.Errorf("webhook certificate host %q is an IP address: cert-controller issues DNS names only (use localhost for a loopback webhook)", h)
		}
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: r.SecretName}}
	if err := direct.Create(ctx, sec); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the webhook certificate Secret %s/%s: %w", r.Namespace, r.SecretName, err)
	}
	if err := rotator.AddRotator(mgr, &rotator.CertRotator{
		SecretKey:             types.NamespacedName{Namespace: r.Namespace, Name: r.SecretName},
		CertDir:               r.CertDir,
		CAName:                "berth-webhook-ca",
		CAOrganization:        "berth",
		DNSName:               r.Hosts[0],
		ExtraDNSNames:         r.Hosts[1:],
		IsReady:               r.ready,
		Webhooks:              []rotator.WebhookInfo{{Name: r.WebhookConfiguration, Type: rotator.Mutating}},
		FieldOwner:            "berth-controller",
		RequireLeaderElection: false,
		EnableReadinessCheck:  true,
		ControllerName:        "webhook-cert-rotator",
	}); err != nil {
		return fmt.Errorf("adding the webhook certificate rotator: %w", err)
	}
	return r.serve(mgr)
}

// serve follows the Secret with a cache of its own (this one Secret, whatever the manager
// caches) and loads each version of the serving pair.
func (r *Rotator) serve(mgr manager.Manager) error {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		ByObject: map[client.Object]cache.ByObject{&corev1.Secret{}: {
			Namespaces: map[string]cache.Config{r.Namespace: {}},
			Field:      fields.OneTermEqualSelector("metadata.name", r.SecretName),
		}},
	})
	if err != nil {
		return fmt.Errorf("creating the webhook certificate cache: %w", err)
	}
	inf, err := c.GetInformer(context.Background(), &corev1.Secret{})
	if err != nil {
		return fmt.Errorf("watching the webhook certificate Secret: %w", err)
	}
	logger := mgr.GetLogger().WithName("webhook-cert")
	load := func(obj any) {
		if s, ok := obj.(*corev1.Secret); ok {
			if err := r.load(s.Data); err != nil {
				logger.Info("webhook certificate Secret not usable yet", "secret", r.SecretName, "reason", err.Error())
			}
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: load, UpdateFunc: func(_, obj any) { load(obj) },
	}); err != nil {
		return fmt.Errorf("watching the webhook certificate Secret: %w", err)
	}
	// A bare cache added to a manager starts only on the leader; every replica serves the
	// webhook, so a standby must read the Secret too, or it never becomes ready.
	if err := mgr.Add(everyReplica{c}); err != nil {
		return fmt.Errorf("adding the webhook certificate cache: %w", err)
	}
	return nil
}

// everyReplica runs a cache on every replica, leader or not.
type everyReplica struct{ cache.Cache }

// NeedLeaderElection is false: the cache runs before and without leadership.
func (everyReplica) NeedLeaderElection() bool { return false }

// load serves the pair in data and writes it to CertDir.
func (r *Rotator) load(data map[string][]byte) error {
	if len(data[keyCert]) == 0 || len(data[keyKey]) == 0 {
		return errors.New("no serving certificate in it")
	}
	pair, err := tls.X509KeyPair(data[keyCert], data[keyKey])
	if err != nil {
		return fmt.Errorf("parsing the serving certificate: %w", err)
	}
	r.mu.Lock()
	r.serving = &pair
	r.mu.Unlock()
	return writePair(r.CertDir, data)
}

// TLSOpts makes a webhook server serve the certificate from the Secret (no files needed at
// start: the server is up before the first certificate is issued, and refuses handshakes until
// then).
func (r *Rotator) TLSOpts() func(*tls.Config) {
	return func(c *tls.Config) {
		c.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			r.mu.RLock()
			defer r.mu.RUnlock()
			if r.serving == nil {
				return nil, errors.New("no webhook serving certificate yet")
			}
			return r.serving, nil
		}
	}
}

// ReadyCheck is a readiness check: ready once cert-controller has the certificate in the Secret
// and its CA in the webhook configuration, and this replica serves it.
func (r *Rotator) ReadyCheck(*http.Request) error {
	select {
	case <-r.ready:
	default:
		return errors.New("webhook certificate not issued and injected yet")
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.serving == nil {
		return errors.New("webhook certificate not loaded yet")
	}
	return nil
}

// WaitReady blocks until ReadyCheck passes or ctx ends (for tests and tools).
func (r *Rotator) WaitReady(ctx context.Context) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		if r.ReadyCheck(nil) == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the webhook certificate: %w", ctx.Err())
		case <-t.C:
		}
	}
}
