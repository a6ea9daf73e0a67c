package promsource

import (
	"context"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/berth-dev/berth/scaler"
)

// TestPrivateCA: an HTTPS Prometheus behind a private CA is read once the scaler trusts that CA
// (--prometheus-ca-file), and refused with a certificate error before — never silently
// trusted.
func TestPrivateCA(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/api/v1/query") {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1700000000,"7"]}]}}`))
	}))
	defer srv.Close()
	trigger := &scaler.Trigger{Source: scaler.SourcePods, DemandQuery: "sum(router_queue)", Prometheus: scaler.PrometheusConfig{Address: srv.URL}}

	_, err := New(Options{}).Demand(context.Background(), trigger)
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without the CA: %v, want a certificate error", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	got, err := New(Options{RootCAs: pool}).Demand(context.Background(), trigger)
	if err != nil || got != 7 {
		t.Errorf("with the CA: %v, %v; want 7", got, err)
	}
}
