package certs

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// CertManager keeps the webhook's serving certificate valid without cert-manager: it keeps a
// self-signed CA and serving certificate in a Secret (shared by every controller replica),
// writes them where the webhook server reads them, renews them when a third of their lifetime
// is left, and injects the CA into the webhook configuration.
type CertManager struct {
	Client client.Client
	// Namespace and SecretName locate the Secret holding ca.crt, tls.crt and tls.key.
	Namespace, SecretName string
	// Hosts are the DNS names and IPs the certificate is for (the webhook Service's names).
	Hosts []string
	// CertDir receives tls.crt and tls.key for the webhook server.
	CertDir string
	// WebhookConfiguration is the MutatingWebhookConfiguration whose caBundle is kept current.
	WebhookConfiguration string
	// Validity of a new certificate; one year when zero.
	Validity time.Duration
	// CheckInterval between renewal checks; one hour when zero.
	CheckInterval time.Duration
	Clock         clock.Clock
}

// Secret keys.
const (
	keyCACert = "ca.crt"
	keyCert   = "tls.crt"
	keyKey    = "tls.key"
)

// Ensure makes the certificate valid once: creates or renews the Secret as needed, writes the
// files and injects the CA. Safe to run from several replicas at once (the Secret is updated
// with optimistic locking; a loser re-reads the winner's certificate).
func (m *CertManager) Ensure(ctx context.Context) error {
	m.defaults()
	for attempt := 0; attempt < 3; attempt++ {
		var sec corev1.Secret
		err := m.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.SecretName}, &sec)
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("reading webhook certificate secret %s/%s: %w", m.Namespace, m.SecretName, err)
		}
		exists := err == nil
		if !exists || m.needsRenewal(sec.Data) {
			data, err := m.generate()
			if err != nil {
				return err
			}
			sec.Data = data
			sec.Type = corev1.SecretTypeTLS
			if exists {
				err = m.Client.Update(ctx, &sec)
			} else {
				sec.ObjectMeta = metav1.ObjectMeta{Namespace: m.Namespace, Name: m.SecretName}
				err = m.Client.Create(ctx, &sec)
			}
			if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
				continue // another replica renewed it first: use theirs
			}
			if err != nil {
				return fmt.Errorf("writing webhook certificate secret: %w", err)
			}
			log.FromContext(ctx).Info("issued webhook serving certificate", "secret", m.SecretName, "hosts", m.Hosts)
		}
		if err := m.writeFiles(sec.Data); err != nil {
			return err
		}
		return m.injectCA(ctx, sec.Data[keyCACert])
	}
	return errors.New("webhook certificate secret kept changing under us; will retry")
}

// Start runs Ensure now and then every CheckInterval until ctx ends (a manager.Runnable).
func (m *CertManager) Start(ctx context.Context) error {
	m.defaults()
	for {
		if err := m.Ensure(ctx); err != nil {
			log.FromContext(ctx).Error(err, "ensuring webhook certificate")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-m.Clock.After(m.CheckInterval):
		}
	}
}

// NeedLeaderElection is false: every replica serves the webhook and needs the files.
func (m *CertManager) NeedLeaderElection() bool { return false }

func (m *CertManager) defaults() {
	if m.Validity == 0 {
		m.Validity = 365 * 24 * time.Hour
	}
	if m.CheckInterval == 0 {
		m.CheckInterval = time.Hour
	}
	if m.Clock == nil {
		m.Clock = clock.RealClock{}
	}
}

// needsRenewal: missing or unparsable data, other hosts, or less than a third of the
// certificate's lifetime left.
func (m *CertManager) needsRenewal(data map[string][]byte) bool {
	cert, err := parseCert(data[keyCert])
	if err != nil || len(data[keyKey]) == 0 || len(data[keyCACert]) == 0 {
		return true
	}
	for _, h := range m.Hosts {
		if cert.VerifyHostname(h) != nil {
			return true
		}
	}
	lifetime := cert.NotAfter.Sub(cert.NotBefore)
	return m.Clock.Now().After(cert.NotAfter.Add(-lifetime / 3))
}

// CertificateExpiry is when the current serving certificate expires (zero when none).
func (m *CertManager) CertificateExpiry(ctx context.Context) (time.Time, error) {
	var sec corev1.Secret
	if err := m.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.SecretName}, &sec); err != nil {
		return time.Time{}, err
	}
	cert, err := parseCert(sec.Data[keyCert])
	if err != nil {
		return time.Time{}, err
	}
	return cert.NotAfter, nil
}

func parseCert(p []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(p)
	if block == nil {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

func (m *CertManager) generate() (map[string][]byte, error) {
	now := m.Clock.Now()
	from, until := now.Add(-time.Hour), now.Add(m.Validity)
	ca, err := Issue(CA("berth-webhook-ca", from, until), nil)
	if err != nil {
		return nil, fmt.Errorf("issuing webhook CA: %w", err)
	}
	serving, err := Issue(Serving(m.Hosts[0], m.Hosts, from, until), ca)
	if err != nil {
		return nil, fmt.Errorf("issuing webhook serving certificate: %w", err)
	}
	return map[string][]byte{keyCACert: ca.CertPEM, keyCert: serving.CertPEM, keyKey: serving.KeyPEM}, nil
}

func (m *CertManager) writeFiles(data map[string][]byte) error {
	if err := os.MkdirAll(m.CertDir, 0o700); err != nil {
		return fmt.Errorf("creating certificate folder: %w", err)
	}
	for _, k := range []string{keyCert, keyKey} {
		path := filepath.Join(m.CertDir, k)
		if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, data[k]) {
			continue
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, data[k], 0o600); err != nil {
			return fmt.Errorf("writing %s: %w", k, err)
		}
		if err := os.Rename(tmp, path); err != nil {
			return fmt.Errorf("writing %s: %w", k, err)
		}
	}
	return nil
}

func (m *CertManager) injectCA(ctx context.Context, ca []byte) error {
	if m.WebhookConfiguration == "" {
		return nil
	}
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	if err := m.Client.Get(ctx, client.ObjectKey{Name: m.WebhookConfiguration}, &cfg); err != nil {
		if apierrors.IsNotFound(err) {
			log.FromContext(ctx).Info("webhook configuration not installed yet; will inject the CA once it exists", "name", m.WebhookConfiguration)
			return nil
		}
		return fmt.Errorf("reading webhook configuration %s: %w", m.WebhookConfiguration, err)
	}
	stored := cfg.DeepCopy()
	changed := false
	for i := range cfg.Webhooks {
		if !bytes.Equal(cfg.Webhooks[i].ClientConfig.CABundle, ca) {
			cfg.Webhooks[i].ClientConfig.CABundle = ca
			changed = true
		}
	}
	if !changed {
		return nil
	}
	if err := m.Client.Patch(ctx, &cfg, client.MergeFromWithOptions(stored, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("injecting CA into %s: %w", m.WebhookConfiguration, err)
	}
	return nil
}
