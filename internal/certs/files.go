package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"
)

// ServingFiles are a server's certificate files on disk (the scaler's: its serving certificate
// and, for mutual TLS, the CA that signs KEDA's client certificates, the TriggerAuthentication's
// tlsClientCert), re-read when they change.
type ServingFiles struct {
	CertFile, KeyFile string
	// ClientCAFile, when set, makes the server require and verify client certificates.
	ClientCAFile string
}

// Enabled says whether TLS is configured.
func (f ServingFiles) Enabled() bool {
	return f.CertFile != "" || f.KeyFile != "" || f.ClientCAFile != ""
}

// Config builds a TLS config that re-reads the files when they change on disk (a rotated
// Secret or cert-manager renewal takes effect at the next handshake, no restart).
func (f ServingFiles) Config() (*tls.Config, error) {
	if f.CertFile == "" || f.KeyFile == "" {
		return nil, errors.New("TLS needs both --tls-cert-file and --tls-key-file")
	}
	r := &reloader{files: f}
	if err := r.load(); err != nil {
		return nil, err
	}
	base := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		if err := r.maybeReload(); err != nil {
			return nil, err
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		c := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}, Certificates: []tls.Certificate{r.cert}}
		if r.clientCAs != nil {
			c.ClientCAs = r.clientCAs
			c.ClientAuth = tls.RequireAndVerifyClientCert
		}
		return c, nil
	}
	return base, nil
}

// reloader holds the certificate and client CAs loaded last, and when the files were checked.
type reloader struct {
	files     ServingFiles
	mu        sync.Mutex
	cert      tls.Certificate
	clientCAs *x509.CertPool
	stamp     string
	checked   time.Time
}

// fingerprint is the files' paths, modification times and sizes.
func (r *reloader) fingerprint() string {
	s := ""
	for _, p := range []string{r.files.CertFile, r.files.KeyFile, r.files.ClientCAFile} {
		if p == "" {
			continue
		}
		if st, err := os.Stat(p); err == nil {
			s += fmt.Sprintf("%s:%d:%d;", p, st.ModTime().UnixNano(), st.Size())
		}
	}
	return s
}

// load reads the files.
func (r *reloader) load() error {
	cert, err := tls.LoadX509KeyPair(r.files.CertFile, r.files.KeyFile)
	if err != nil {
		return fmt.Errorf("loading the scaler's TLS certificate: %w", err)
	}
	var pool *x509.CertPool
	if r.files.ClientCAFile != "" {
		pem, err := os.ReadFile(r.files.ClientCAFile)
		if err != nil {
			return fmt.Errorf("reading the client CA: %w", err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("client CA %s holds no PEM certificate", r.files.ClientCAFile)
		}
	}
	r.mu.Lock()
	r.cert, r.clientCAs, r.stamp = cert, pool, r.fingerprint()
	r.mu.Unlock()
	return nil
}

// maybeReload re-reads the files when their size or time changed, at most once a second; a
// failed reload keeps serving the previous certificate.
func (r *reloader) maybeReload() error {
	r.mu.Lock()
	if time.Since(r.checked) < time.Second {
		r.mu.Unlock()
		return nil
	}
	r.checked = time.Now()
	changed := r.fingerprint() != r.stamp
	r.mu.Unlock()
	if changed {
		if err := r.load(); err != nil {
			// Mid-rotation (one file written, not the other) or broken: keep serving the
			// certificate loaded last, and say why.
			log.Log.WithName("certs").Error(err, "reloading the serving certificate failed; serving the previous one", "certFile", r.files.CertFile)
		}
	}
	return nil
}
