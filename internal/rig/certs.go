package rig

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/berth-dev/berth/internal/certs"
)

// keyPair is a certificate with its key.
type keyPair = certs.KeyPair

// rigPKI holds the rig's certificates, written under dir.
type rigPKI struct {
	dir         string
	ca          *keyPair // signs the apiserver's serving cert and client certs
	frontProxy  *keyPair // the aggregation layer's request-header CA
	serving     *keyPair
	admin       *keyPair // system:masters client
	proxyClient *keyPair // front-proxy-client, used by the apiserver toward aggregated APIs
	saKeyPEM    []byte
	saPubPEM    []byte
}

// newPKI creates every certificate and key the control plane needs and writes them to dir.
func newPKI(dir string) (*rigPKI, error) {
	p := &rigPKI{dir: dir}
	var err error
	now := time.Now()
	year, decade := now.Add(365*24*time.Hour), now.Add(10*365*24*time.Hour)
	if p.ca, err = certs.Issue(certs.CA("berth-rig-ca", time.Time{}, decade), nil); err != nil {
		return nil, err
	}
	if p.frontProxy, err = certs.Issue(certs.CA("berth-rig-front-proxy-ca", time.Time{}, decade), nil); err != nil {
		return nil, err
	}
	hosts := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "127.0.0.1", "10.96.0.1"}
	if p.serving, err = certs.Issue(certs.Serving("kube-apiserver", hosts, time.Time{}, year), p.ca); err != nil {
		return nil, err
	}
	if p.admin, err = certs.Issue(certs.Client("berth-rig-admin", year, "system:masters"), p.ca); err != nil {
		return nil, err
	}
	if p.proxyClient, err = certs.Issue(certs.Client("front-proxy-client", year), p.frontProxy); err != nil {
		return nil, err
	}
	sa, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating service-account key: %w", err)
	}
	saDER, err := x509.MarshalECPrivateKey(sa)
	if err != nil {
		return nil, fmt.Errorf("encoding service-account key: %w", err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("encoding service-account public key: %w", err)
	}
	p.saKeyPEM = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saDER})
	p.saPubPEM = pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})

	files := map[string][]byte{
		"ca.crt": p.ca.CertPEM, "ca.key": p.ca.KeyPEM,
		"front-proxy-ca.crt": p.frontProxy.CertPEM, "front-proxy-ca.key": p.frontProxy.KeyPEM,
		"apiserver.crt": p.serving.CertPEM, "apiserver.key": p.serving.KeyPEM,
		"admin.crt": p.admin.CertPEM, "admin.key": p.admin.KeyPEM,
		"front-proxy-client.crt": p.proxyClient.CertPEM, "front-proxy-client.key": p.proxyClient.KeyPEM,
		"sa.key": p.saKeyPEM, "sa.pub": p.saPubPEM,
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating pki folder: %w", err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, fmt.Errorf("writing %s: %w", name, err)
		}
	}
	return p, nil
}

// path is the file path of a PKI file written by newPKI.
func (p *rigPKI) path(name string) string { return filepath.Join(p.dir, name) }
