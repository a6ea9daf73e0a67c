package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// TLSFiles are the scaler's serving certificate and, for mutual TLS, the CA that signs KEDA's
// client certificates (the TriggerAuthentication's tlsClientCert).
type TLSFiles struct {
	CertFile, KeyFile string
	// ClientCAFile, when set, makes the server require and verify client certificates.
	ClientCAFile string
}

// Enabled says whether TLS is configured.
func (f TLSFiles) Enabled() bool { return f.CertFile != "" || f.KeyFile != "" || f.ClientCAFile != "" }

// Config builds a TLS config that re-reads the files when they change on disk (a rotated
// Secret or cert-manager renewal takes effect at the next handshake, no restart).
func (f TLSFiles) Config() (*tls.Config, error) {
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

type reloader struct {
	files     TLSFiles
	mu        sync.Mutex
	cert      tls.Certificate
	clientCAs *x509.CertPool
	stamp     string
	checked   time.Time
}

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
		_ = r.load()
	}
	return nil
}
