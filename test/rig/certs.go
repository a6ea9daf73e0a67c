package rig

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// keyPair is a certificate with its private key.
type keyPair struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	keyPEM  []byte
}

// pki holds the rig's certificates, written under dir.
type pki struct {
	dir         string
	ca          *keyPair // signs the apiserver's serving cert and client certs
	frontProxy  *keyPair // the aggregation layer's request-header CA
	serving     *keyPair
	admin       *keyPair // system:masters client
	proxyClient *keyPair // front-proxy-client, used by the apiserver toward aggregated APIs
	saKeyPEM    []byte
	saPubPEM    []byte
}

func newKeyPair(tmpl *x509.Certificate, parent *keyPair) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, fmt.Errorf("generating serial: %w", err)
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	if tmpl.NotAfter.IsZero() {
		tmpl.NotAfter = time.Now().Add(365 * 24 * time.Hour)
	}
	signer, signerKey := tmpl, key
	if parent != nil {
		signer, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		return nil, fmt.Errorf("signing certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding key: %w", err)
	}
	return &keyPair{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

func caTemplate(cn string) *x509.Certificate {
	return &x509.Certificate{
		Subject:               pkix.Name{CommonName: cn},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
	}
}

func clientTemplate(cn string, orgs ...string) *x509.Certificate {
	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn, Organization: orgs},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
}

// newPKI creates every certificate and key the control plane needs and writes them to dir.
func newPKI(dir string) (*pki, error) {
	p := &pki{dir: dir}
	var err error
	if p.ca, err = newKeyPair(caTemplate("berth-rig-ca"), nil); err != nil {
		return nil, err
	}
	if p.frontProxy, err = newKeyPair(caTemplate("berth-rig-front-proxy-ca"), nil); err != nil {
		return nil, err
	}
	serving := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")},
	}
	if p.serving, err = newKeyPair(serving, p.ca); err != nil {
		return nil, err
	}
	if p.admin, err = newKeyPair(clientTemplate("berth-rig-admin", "system:masters"), p.ca); err != nil {
		return nil, err
	}
	if p.proxyClient, err = newKeyPair(clientTemplate("front-proxy-client"), p.frontProxy); err != nil {
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
		"ca.crt": p.ca.certPEM, "ca.key": p.ca.keyPEM,
		"front-proxy-ca.crt": p.frontProxy.certPEM, "front-proxy-ca.key": p.frontProxy.keyPEM,
		"apiserver.crt": p.serving.certPEM, "apiserver.key": p.serving.keyPEM,
		"admin.crt": p.admin.certPEM, "admin.key": p.admin.keyPEM,
		"front-proxy-client.crt": p.proxyClient.certPEM, "front-proxy-client.key": p.proxyClient.keyPEM,
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
func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }
