package scalertargets_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/test/rigtest"
)

// TestSecureMetrics: `berth scaler --metrics-secure` (the chart's default) serves /metrics over
// HTTPS only, to a bearer token the API server authenticates and authorizes for get on /metrics
// (config/rbac/metrics-reader.yaml): no token is refused (401), another component's token too
// (403), an unknown one too, the metrics reader's gets the metrics, and plain HTTP gets nothing.
func TestSecureMetrics(t *testing.T) {
	ctx := context.Background()
	r := rigtest.Current()
	bin, err := rigtest.BuildBerth(r)
	if err != nil {
		t.Fatal(err)
	}
	s, err := rigtest.StartScaler(ctx, r, bin, "--metrics-secure")
	if err != nil {
		t.Fatal(err)
	}
	reader, err := rigtest.ComponentToken(ctx, r, "metrics-reader")
	if err != nil {
		t.Fatal(err)
	}
	other, err := rigtest.ComponentToken(ctx, r, "agent")
	if err != nil {
		t.Fatal(err)
	}
	get := func(url, token string) (int, string, error) { return rigtest.GetMetrics(ctx, url, token) }
	rigtest.Eventually(t, 30*time.Second, 200*time.Millisecond, "the metrics reader gets the metrics", func(context.Context) (bool, string, error) {
		code, body, err := get(s.MetricsURL, reader)
		if err != nil {
			return false, err.Error(), nil
		}
		return code == http.StatusOK && strings.Contains(body, `berth_build_info{commit=`), body[:min(len(body), 200)], nil
	})
	for _, tc := range []struct {
		name, token string
		want        int
	}{{"no token", "", http.StatusUnauthorized}, {"another component's token", other, http.StatusForbidden},
		// controller-runtime's filter answers a token the TokenReview cannot parse with 500.
		{"a token the API server does not know", "not-a-token", 0}} {
		code, body, err := get(s.MetricsURL, tc.token)
		if err != nil || (tc.want != 0 && code != tc.want) || code == http.StatusOK {
			t.Errorf("%s: %d %q (%v), want %d", tc.name, code, body, err, tc.want)
		}
	}
	if code, _, err := get(strings.Replace(s.MetricsURL, "https://", "http://", 1), reader); err == nil && code == http.StatusOK {
		t.Error("metrics served over plain HTTP")
	}
}
