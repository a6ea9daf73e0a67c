// Package scalertest holds test helpers for the scaler: fake inference-server metrics
// endpoints on their own loopback IPs (as pods have on the rig) whose pages a test sets.
package scalertest

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/berth-dev/berth/scaler"
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
func Fleet(t testing.TB, n int) ([]*Replica, int, []scaler.Pod) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	var reps []*Replica
	var pods []scaler.Pod
	for i := range n {
		r := &Replica{IP: fmt.Sprintf("127.0.%d.%d", 100+i/200, 2+i%200), handler: Page(0, 0, 0)}
		ln, err := net.Listen("tcp", net.JoinHostPort(r.IP, strconv.Itoa(port)))
		if err != nil {
			t.Skipf("cannot listen on %s (loopback 127.0.0.0/8 needed): %v", r.IP, err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			r.hits.Add(1)
			r.mu.Lock()
			h := r.handler
			r.mu.Unlock()
			h(w, req)
		})}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		reps = append(reps, r)
		pods = append(pods, scaler.Pod{Name: fmt.Sprintf("vllm-%d", i), IP: r.IP, Ready: true})
	}
	return reps, port, pods
}
