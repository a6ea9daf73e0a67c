package restart_test

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/rigtest"
)

// TestControllerSecureMetrics: `berth controller --metrics-secure` (the chart's default) serves
// /metrics over HTTPS to the metrics reader's token only (controller-runtime's authentication
// and authorization filter), as its own ServiceAccount.
func TestControllerSecureMetrics(t *testing.T) {
	ctx := context.Background()
	r := rigtest.Current()
	wasRunning := berth.Running != ""
	if wasRunning {
		if err := berth.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	port, err := rig.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	saved := berth.Args
	berth.Args = append(slices.Clone(saved), "--metrics-bind-address=127.0.0.1:"+strconv.Itoa(port), "--metrics-secure")
	t.Cleanup(func() {
		_ = berth.Stop()
		berth.Args = saved
		if wasRunning {
			if err := berth.Start(ctx); err != nil {
				t.Error(err)
			}
		}
	})
	if err := berth.Start(ctx); err != nil {
		t.Fatal(err)
	}
	reader, err := rigtest.ComponentToken(ctx, r, "metrics-reader")
	if err != nil {
		t.Fatal(err)
	}
	other, err := rigtest.ComponentToken(ctx, r, "scaler")
	if err != nil {
		t.Fatal(err)
	}
	url := "https://127.0.0.1:" + strconv.Itoa(port) + "/metrics"
	rigtest.Eventually(t, 30*time.Second, 200*time.Millisecond, "the metrics reader gets the controller's metrics", func(ctx context.Context) (bool, string, error) {
		code, body, err := rigtest.GetMetrics(ctx, url, reader)
		if err != nil {
			return false, err.Error(), nil
		}
		return code == http.StatusOK && strings.Contains(body, `component="controller"`), strconv.Itoa(code), nil
	})
	if code, _, err := rigtest.GetMetrics(ctx, url, ""); err != nil || code != http.StatusUnauthorized {
		t.Errorf("no token: %d (%v), want 401", code, err)
	}
	if code, _, err := rigtest.GetMetrics(ctx, url, other); err != nil || code != http.StatusForbidden {
		t.Errorf("the scaler's token: %d (%v), want 403", code, err)
	}
}
