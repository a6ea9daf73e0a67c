package promsource

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/berth-dev/berth/scaler"
)

// TestSigV4: with prometheusAwsRegion every query to Amazon Managed Service for Prometheus is
// signed for service aps in that region with the scaler's credentials (a session token too, as
// IRSA and Pod Identity hand out), over the body actually sent — the server re-derives the
// signature from what it received and compares. Without the region nothing is signed; failing
// credentials fail the evaluation (never an unsigned request).
func TestSigV4(t *testing.T) {
	now := time.Date(2026, 12, 4, 8, 30, 0, 0, time.UTC)
	creds := credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "secret", "session-token")
	var mu sync.Mutex
	var problems []string
	var signed int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		body, _ := io.ReadAll(r.Body)
		auth := r.Header.Get("Authorization")
		if auth == "" {
			problems = append(problems, "unsigned "+r.Method+" "+r.URL.Path)
		} else {
			signed++
			if want := "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261204/us-west-2/aps/aws4_request"; !strings.HasPrefix(auth, want) {
				problems = append(problems, "Authorization "+auth+", want "+want+"…")
			}
			if r.Header.Get("X-Amz-Security-Token") != "session-token" {
				problems = append(problems, "no session token")
			}
			// Re-sign what arrived, with the headers the signature names (the transport adds
			// unsigned ones, such as Accept-Encoding): it matches only if it covered this body
			// and every header it names was sent.
			again, _ := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), bytes.NewReader(body))
			_, names, _ := strings.Cut(auth, "SignedHeaders=")
			names, _, _ = strings.Cut(names, ",")
			for name := range strings.SplitSeq(names, ";") {
				if k := http.CanonicalHeaderKey(name); k != "Host" && k != "X-Amz-Date" && k != "X-Amz-Security-Token" && k != "Content-Length" {
					if v, ok := r.Header[k]; ok {
						again.Header[k] = v
					} else {
						problems = append(problems, "signed header "+k+" was not sent")
					}
				}
			}
			sum := sha256.Sum256(body)
			c, _ := creds.Retrieve(context.Background())
			if err := v4.NewSigner().SignHTTP(context.Background(), c, again, hex.EncodeToString(sum[:]), "aps", "us-west-2", now); err != nil {
				problems = append(problems, err.Error())
			} else if got := again.Header.Get("Authorization"); got != auth {
				problems = append(problems, "signature does not match the request received:\n  sent "+auth+"\n  want "+got)
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1700000000,"3"]}]}}`))
	}))
	defer srv.Close()
	trigger := func(region string) *scaler.Trigger {
		return &scaler.Trigger{Source: scaler.SourcePods, DemandQuery: `sum(router_queue{model="a b"})`,
			Prometheus: scaler.PrometheusConfig{Address: srv.URL + "/workspaces/ws-1", AWSRegion: region}}
	}
	src := New(Options{AWSCredentials: creds, Clock: clocktesting.NewFakePassiveClock(now)})
	if got, err := src.Demand(context.Background(), trigger("us-west-2")); err != nil || got != 3 {
		t.Fatalf("signed query: %v, %v; want 3", got, err)
	}
	mu.Lock()
	if signed == 0 || len(problems) > 0 {
		t.Errorf("%d signed requests; problems: %v", signed, problems)
	}
	problems, signed = nil, 0
	mu.Unlock()

	if _, err := New(Options{AWSCredentials: creds}).Demand(context.Background(), trigger("")); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if signed != 0 || len(problems) != 1 {
		t.Errorf("without a region: %d signed, problems %v; want one unsigned request", signed, problems)
	}
	problems = nil
	mu.Unlock()

	failing := aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{}, io.ErrUnexpectedEOF
	})
	_, err := New(Options{AWSCredentials: failing}).Demand(context.Background(), trigger("us-west-2"))
	if err == nil || !strings.Contains(err.Error(), "AWS credentials") {
		t.Errorf("failing credentials: %v, want an error naming them", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 || signed > 0 {
		t.Errorf("failing credentials still reached the server: %v", problems)
	}
}
