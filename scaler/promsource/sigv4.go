package promsource

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"net/http"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"k8s.io/utils/clock"
)

// ampService is the SigV4 service name of Amazon Managed Service for Prometheus.
const ampService = "aps"

// sigv4RoundTripper signs each request with AWS SigV4 for region (Amazon Managed Service for
// Prometheus), with credentials retrieved — and refreshed before they expire — from creds.
type sigv4RoundTripper struct {
	next   http.RoundTripper
	creds  aws.CredentialsProvider
	region string
	signer *v4.Signer
	clock  clock.PassiveClock
}

func (s sigv4RoundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	// The signature covers the body: the Prometheus client POSTs queries as a form.
	var body []byte
	if r.Body != nil {
		var err error
		body, err = io.ReadAll(r.Body)
		if err != nil {
			return nil, fmt.Errorf("reading the request body to sign it: %w", err)
		}
		if err := r.Body.Close(); err != nil {
			return nil, fmt.Errorf("reading the request body to sign it: %w", err)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	sum := sha256.Sum256(body)
	creds, err := s.creds.Retrieve(r.Context())
	if err != nil {
		return nil, fmt.Errorf("AWS credentials to sign requests to Prometheus (region %s): %w", s.region, err)
	}
	// A header without values is never sent (the Prometheus client marks its POSTs idempotent
	// with Idempotency-Key: nil, for net/http's retries): signed, it would name a header the
	// server never receives and the signature would not verify. Signed without them, kept after.
	unsent := map[string][]string{}
	for k, v := range r.Header {
		if len(v) == 0 {
			unsent[k] = v
			delete(r.Header, k)
		}
	}
	if err := s.signer.SignHTTP(r.Context(), creds, r, hex.EncodeToString(sum[:]), ampService, s.region, s.clock.Now().UTC()); err != nil {
		return nil, fmt.Errorf("signing the request to Prometheus with SigV4 (region %s): %w", s.region, err)
	}
	maps.Copy(r.Header, unsent)
	return s.next.RoundTrip(r)
}

// defaultAWSCredentials is the AWS SDK's default credential chain (environment, IRSA's web
// identity token, EKS Pod Identity, the instance role), loaded on first use, once per process.
var defaultAWSCredentials = sync.OnceValues(func() (aws.CredentialsProvider, error) {
	cfg, err := awsconfig.LoadDefaultConfig(context.Background())
	if err != nil {
		return nil, fmt.Errorf("loading AWS credentials (IRSA, EKS Pod Identity or the environment) to sign requests to Prometheus: %w", err)
	}
	return cfg.Credentials, nil
})
