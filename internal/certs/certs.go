package certs

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Secret keys of a serving pair and its CA certificate.
const (
	keyCACert = "ca.crt"
	keyCert   = "tls.crt"
	keyKey    = "tls.key"
)

func parseCert(p []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(p)
	if block == nil {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

// writePair writes tls.crt and tls.key of data into dir, each atomically and only when it
// changed.
func writePair(dir string, data map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating certificate folder: %w", err)
	}
	for _, k := range []string{keyCert, keyKey} {
		path := filepath.Join(dir, k)
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
