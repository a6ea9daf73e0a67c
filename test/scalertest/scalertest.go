// Package scalertest holds test helpers for the scaler: fake inference-server metrics
// endpoints on their own loopback IPs (as pods have on the rig) whose pages a test sets.
package scalertest

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/scaler"
	"github.com/berth-dev/berth/test/testenv"
)

// Replica is one fake metrics endpoint.
type Replica struct {
	// IP is the replica's loopback address.
	IP      string
	mu      sync.Mutex
	handler http.HandlerFunc
	hits    atomic.Int32
}

// Set replaces what the endpoint answers.
func (r *Replica) Set(h http.HandlerFunc) { r.mu.Lock(); r.handler = h; r.mu.Unlock() }

// Hits is how many requests the endpoint got.
func (r *Replica) Hits() int { return int(r.hits.Load()) }

// Page answers a vLLM metrics page with these gauges for model "m" on engine 0.
func Page(waiting, running, kv float64) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n# TYPE vllm:num_requests_waiting gauge\n"+
			"vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} %v\n"+
			"# HELP vllm:num_requests_running Number of requests in model execution batches.\n# TYPE vllm:num_requests_running gauge\n"+
			"vllm:num_requests_running{engine=\"0\",model_name=\"m\"} %v\n"+
			"# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n# TYPE vllm:kv_cache_usage_perc gauge\n"+
			"vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} %v\n", waiting, running, kv)
	}
}

// Fleet starts n replicas on distinct loopback IPs sharing one port, answering Page(0, 0, 0),
// and returns them, the port, and the ready pods they stand for. They stop with the test.
// Test packages run in parallel and use the same addresses, so the port is one the first
// address had free, and a port another package holds on a later address is given up for
// another. Under `make test` an address that cannot be listened on fails the test.
func Fleet(tb testing.TB, n int) ([]*Replica, int, []scaler.Pod) {
	tb.Helper()
	for range 20 {
		reps, port, pods, err := listenFleet(tb, n)
		if err == nil {
			return reps, port, pods
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			testenv.SkipOrFail(tb, "cannot listen on the loopback range 127.0.100.0/22 (Linux has it): %v", err)
		}
	}
	tb.Fatalf("no port was free on all of %d loopback addresses in 20 tries", n)
	return nil, 0, nil
}

// listenFleet listens on n replica addresses with one port, or closes what it opened and
// returns the error.
func listenFleet(tb testing.TB, n int) ([]*Replica, int, []scaler.Pod, error) {
	tb.Helper()
	var (
		reps      []*Replica
		pods      []scaler.Pod
		listeners []net.Listener
		port      int
	)
	for i := range n {
		r := &Replica{IP: fmt.Sprintf("127.0.%d.%d", 100+i/200, 2+i%200), handler: Page(0, 0, 0)}
		ln, err := net.Listen("tcp", net.JoinHostPort(r.IP, strconv.Itoa(port)))
		if err != nil {
			for _, l := range listeners {
				_ = l.Close()
			}
			return nil, 0, nil, fmt.Errorf("listening on %s:%d: %w", r.IP, port, err)
		}
		if i == 0 {
			port = ln.Addr().(*net.TCPAddr).Port
		}
		listeners = append(listeners, ln)
		reps = append(reps, r)
		pods = append(pods, scaler.Pod{Name: fmt.Sprintf("vllm-%d", i), IP: r.IP, Ready: true})
	}
	for i, r := range reps {
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			r.hits.Add(1)
			r.mu.Lock()
			h := r.handler
			r.mu.Unlock()
			h(w, req)
		}), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(listeners[i]) }()
		tb.Cleanup(func() { _ = srv.Close() })
	}
	return reps, port, pods, nil
}
