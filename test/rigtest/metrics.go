package rigtest

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"time"
)

// metricsClient scrapes components' secure metrics, whose certificates are self-signed.
var metricsClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed metrics certificates, as the chart's monitors scrape them

// GetMetrics GETs a metrics URL with a bearer token ("" for none) as a scraper would, and
// returns the status code and body.
func GetMetrics(ctx context.Context, url, token string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := metricsClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}
