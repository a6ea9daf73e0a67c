package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestRotatorServesTheSecretsPair: until the Secret holds a serving pair, handshakes are refused
// and the replica is not ready; each version of the pair is served at once and written to the
// certificate folder.
func TestRotatorServesTheSecretsPair(t *testing.T) {
	dir := t.TempDir()
	r := NewRotator("berth-system", "cert", []string{"berth-webhook.berth-system.svc"}, dir, "cfg")
	cfg := &tls.Config{}
	r.TLSOpts()(cfg)
	if _, err := cfg.GetCertificate(nil); err == nil {
		t.Fatal("a certificate was served before the Secret had one")
	}
	if r.ReadyCheck(nil) == nil {
		t.Fatal("ready before anything was issued")
	}
	if err := r.load(map[string][]byte{}); err == nil {
		t.Fatal("an empty Secret loaded")
	}
	now := time.Now()
	ca, err := Issue(CA("ca", now.Add(-time.Hour), now.Add(time.Hour)), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, host := range []string{"first.example", "second.example"} {
		leaf, err := Issue(Serving(host, []string{host}, now.Add(-time.Hour), now.Add(time.Hour)), ca)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.load(map[string][]byte{keyCACert: ca.CertPEM, keyCert: leaf.CertPEM, keyKey: leaf.KeyPEM}); err != nil {
			t.Fatal(err)
		}
		got, err := cfg.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		x, err := x509.ParseCertificate(got.Certificate[0])
		if err != nil || x.Subject.CommonName != host {
			t.Fatalf("version %d: served %v (%v), want %s", i, x.Subject, err, host)
		}
		onDisk, err := os.ReadFile(filepath.Join(dir, keyCert))
		if err != nil || string(onDisk) != string(leaf.CertPEM) {
			t.Fatalf("version %d: tls.crt on disk is not the Secret's (%v)", i, err)
		}
	}
	if r.ReadyCheck(nil) == nil {
		t.Fatal("ready before cert-controller said the CA is injected")
	}
	close(r.ready)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := r.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
}
