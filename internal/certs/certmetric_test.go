package certs

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestCertificateExpiryMetric(t *testing.T) {
	dir := t.TempDir()
	notAfter := time.Now().Add(48 * time.Hour).Truncate(time.Second)
	ca, err := Issue(CA("test", time.Now(), notAfter), nil)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := Issue(Serving("berth-webhook", []string{"127.0.0.1"}, time.Now(), notAfter), ca)
	if err != nil {
		t.Fatal(err)
	}
	cert := kp.CertPEM
	WatchServingCertificate(dir)
	if got := collect(t); got != nil {
		t.Fatalf("metric present without a certificate: %v", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), cert, 0o600); err != nil {
		t.Fatal(err)
	}
	got := collect(t)
	if got == nil || int64(*got) != notAfter.Unix() {
		t.Fatalf("expiry = %v, want %d", got, notAfter.Unix())
	}
}

func collect(t *testing.T) *float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	certCollector{}.Collect(ch)
	close(ch)
	m, ok := <-ch
	if !ok {
		return nil
	}
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	v := out.GetGauge().GetValue()
	return &v
}
