package vllmsim

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func newTestFleet(t *testing.T, opts FleetOptions) (*Fleet, *clocktesting.FakeClock) {
	t.Helper()
	fc := clocktesting.NewFakeClock(t0)
	opts.Clock = fc
	f, err := NewFleet(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := f.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return f, fc
}

func get(t *testing.T, url string) (int, string, error) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

func TestFleetServesAndStopsAddresses(t *testing.T) {
	f, _ := newTestFleet(t, FleetOptions{Rate: 10})
	// Port 0 picks a free port; 127.0.0.2 is loopback too on Linux, like the 127.1.x.y of fake pods.
	a, b := "127.0.0.1:0", "127.0.0.2:0"
	if err := f.SetAddresses(context.Background(), []string{b, a, a}); err != nil {
		t.Fatal(err)
	}
	if got := f.Addresses(); !slices.Equal(got, []string{a, b}) {
		t.Fatalf("Addresses() = %v", got)
	}
	boundA, _ := f.BoundAddr(a)
	boundB, _ := f.BoundAddr(b)
	for _, addr := range []string{boundA, boundB} {
		for _, path := range []string{"/health", "/metrics", "/v1/models"} {
			if code, body, err := get(t, "http://"+addr+path); err != nil || code != http.StatusOK {
				t.Errorf("GET %s%s: %d %v %.200s", addr, path, code, err, body)
			}
		}
	}

	f.Step(t0)
	f.Step(t0.Add(time.Second)) // 10 arrivals, 5 per replica
	ra, _ := f.Replica(a)
	rb, _ := f.Replica(b)
	for _, r := range []*Replica{ra, rb} {
		if running, waiting := r.Queue(); running != 5 || waiting != 0 {
			t.Errorf("replica: running %d waiting %d, want 5, 0", running, waiting)
		}
	}
	if _, body, _ := get(t, "http://"+boundB+"/metrics"); !strings.Contains(body, `vllm:num_requests_running{engine="0",model_name="`+DefaultModel+`"} 5`) {
		t.Errorf("metrics of %s lack running=5:\n%s", b, body)
	}
	if st := f.Status(); st != (LoadStatus{Rate: 10, Pattern: PatternSteady, Replicas: 2, Running: 10, Arrived: 10}) {
		t.Errorf("Status() = %+v", st)
	}

	// Removing b stops its server and loses its requests; new arrivals all go to a.
	if err := f.SetAddresses(context.Background(), []string{a}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := get(t, "http://"+boundB+"/health"); err == nil {
		t.Errorf("%s still answers after its removal", boundB)
	}
	if _, ok := f.Replica(b); ok {
		t.Error("removed replica still listed")
	}
	f.Step(t0.Add(1500 * time.Millisecond))
	if st := f.Status(); st != (LoadStatus{Rate: 10, Pattern: PatternSteady, Replicas: 1, Running: 10, Arrived: 15, Lost: 5}) {
		t.Errorf("Status() after removal = %+v", st)
	}
	if code, _, err := get(t, "http://"+boundA+"/health"); err != nil || code != http.StatusOK {
		t.Errorf("kept replica: %d %v", code, err)
	}
}

func TestFleetReportsAddressesItCannotServe(t *testing.T) {
	f, _ := newTestFleet(t, FleetOptions{})
	err := f.SetAddresses(context.Background(), []string{"127.0.0.1:0", "192.0.2.1:8000"})
	if err == nil || !strings.Contains(err.Error(), "192.0.2.1:8000") {
		t.Errorf("SetAddresses with an address not on this host: %v", err)
	}
	if got := f.Addresses(); !slices.Equal(got, []string{"127.0.0.1:0"}) {
		t.Errorf("Addresses() = %v, want the one that works", got)
	}
}

func TestFleetRunStepsOnTicker(t *testing.T) {
	f, fc := newTestFleet(t, FleetOptions{Rate: 10, Interval: 100 * time.Millisecond})
	if err := f.SetAddresses(context.Background(), []string{"127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for f.Status().Running < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("after 1s of fake time: %+v, want 10 running", f.Status())
		}
		if fc.HasWaiters() && fc.Now().Before(t0.Add(time.Second)) {
			fc.Step(100 * time.Millisecond)
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if st := f.Status(); st.Running != 10 || st.Waiting != 0 {
		t.Errorf("Status() = %+v", st)
	}
}

func TestAdminLoadEndpoint(t *testing.T) {
	f, _ := newTestFleet(t, FleetOptions{Rate: 1})
	srv := httptest.NewServer(f.AdminHandler())
	defer srv.Close()
	do := func(method, query string) (int, string) { return call(t, method, srv.URL+"/load"+query) }
	for _, tc := range []struct {
		method, query string
		wantCode      int
		wantBody      string
		wantRate      float64
	}{
		{http.MethodGet, "", 200, `"rate":1`, 1},
		{http.MethodPut, "?rate=12.5", 200, `"rate":12.5`, 12.5},
		{http.MethodPut, "?rate=0", 200, `"rate":0`, 0},
		{http.MethodPut, "?rate=abc", 400, `rate "abc" is not a number`, 0},
		{http.MethodPut, "?rate=-1", 400, "non-negative", 0},
		{http.MethodPut, "?rate=NaN", 400, "finite", 0},
		{http.MethodPut, "?rate=Inf", 400, "finite", 0},
		{http.MethodPut, "", 400, "needs exactly one query parameter rate", 0},
		{http.MethodPut, "?rate=1&rate=2", 400, "needs exactly one", 0},
		{http.MethodPost, "?rate=3", 405, "use GET, or PUT", 0},
		{http.MethodPut, "?rate=7", 200, `"rate":7`, 7},
	} {
		code, body := do(tc.method, tc.query)
		if code != tc.wantCode || !strings.Contains(body, tc.wantBody) {
			t.Errorf("%s /load%s = %d %q, want %d containing %q", tc.method, tc.query, code, body, tc.wantCode, tc.wantBody)
		}
		if got := f.Load().Rate(); got != tc.wantRate {
			t.Errorf("after %s /load%s: rate %v, want %v", tc.method, tc.query, got, tc.wantRate)
		}
	}
	_, body := do(http.MethodGet, "")
	var st LoadStatus
	if err := json.Unmarshal([]byte(body), &st); err != nil || st != (LoadStatus{Rate: 7, Pattern: PatternSteady}) {
		t.Errorf("GET /load = %s (%v)", body, err)
	}
	for _, key := range []string{`"rate"`, `"replicas"`, `"waiting"`, `"running"`} {
		if !strings.Contains(body, key) {
			t.Errorf("GET /load lacks %s: %s", key, body)
		}
	}
}

// TestEndpointPickerHoldsAtZero: with an InferencePool the fleet has an endpoint picker in
// front: with no replica it holds arrivals and says so on /metrics the way llm-d's picker does;
// the first replica gets them.
func TestEndpointPickerHoldsAtZero(t *testing.T) {
	f, _ := newTestFleet(t, FleetOptions{Rate: 10, InferencePool: "llama-pool"})
	srv := httptest.NewServer(f.AdminHandler())
	defer srv.Close()
	_, body, err := get(t, srv.URL+"/metrics")
	if err != nil || !strings.Contains(body, `llm_d_epp_ready_endpoints{name="llama-pool"} 0`) || strings.Contains(body, "flow_control_queue_size") {
		t.Fatalf("before anything queued: %v\n%s", err, body)
	}
	now := t0
	for range 11 { // 1 s at 10/s, no replica
		f.Step(now)
		now = now.Add(100 * time.Millisecond)
	}
	_, body, _ = get(t, srv.URL+"/metrics")
	want := `llm_d_epp_flow_control_queue_size{fairness_id="default",inference_pool="llama-pool",model_name="meta-llama/Llama-3.1-8B-Instruct",priority="0",target_model_name="meta-llama/Llama-3.1-8B-Instruct"} 10`
	if !strings.Contains(body, want) {
		t.Fatalf("after 1 s at zero replicas, /metrics lacks\n%s\ngot\n%s", want, body)
	}
	if err := f.SetAddresses(context.Background(), []string{"127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	f.Step(now)
	if st := f.Status(); st.Held != 0 || st.Running+st.Waiting != 11 { // the 10 held and the next arrival
		t.Errorf("after a replica appears: %+v, want the 10 held requests on it", st)
	}
	plain, _ := newTestFleet(t, FleetOptions{Rate: 10})
	psrv := httptest.NewServer(plain.AdminHandler())
	defer psrv.Close()
	if code, _, _ := get(t, psrv.URL+"/metrics"); code != http.StatusNotFound {
		t.Errorf("a fleet without a picker serves picker metrics (%d)", code)
	}
}

// TestAdminPatternAndLatency: PUT /load sets the arrival pattern with a seed; GET /latency
// keeps the first-token latencies of replicas that stopped serving.
func TestAdminPatternAndLatency(t *testing.T) {
	f, _ := newTestFleet(t, FleetOptions{Rate: 10})
	srv := httptest.NewServer(f.AdminHandler())
	defer srv.Close()
	put := func(q string) (int, string) { return call(t, http.MethodPut, srv.URL+"/load"+q) }
	if code, body := put("?rate=4&pattern=bursty&seed=9"); code != 200 || !strings.Contains(body, `"pattern":"bursty"`) {
		t.Errorf("PUT bursty: %d %s", code, body)
	}
	for q, want := range map[string]string{"?rate=4&pattern=wavy": "want one of steady", "?rate=4&seed=3": "seed needs pattern", "?rate=4&pattern=poisson&seed=x": "want one whole number"} {
		if code, body := put(q); code != 400 || !strings.Contains(body, want) {
			t.Errorf("PUT %s: %d %s, want 400 %q", q, code, body, want)
		}
	}
	f.Load().SetPattern(PatternSteady, 1)
	if err := f.Load().SetRate(10); err != nil {
		t.Fatal(err)
	}
	if err := f.SetAddresses(context.Background(), []string{"127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	now := t0
	for range 21 { // 2 s at 10/s
		f.Step(now)
		now = now.Add(100 * time.Millisecond)
	}
	if err := f.SetAddresses(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	_, body, err := get(t, srv.URL+"/latency")
	var got map[string]Histogram
	if err != nil || json.Unmarshal([]byte(body), &got) != nil || got["ttft"].Count != 16 { // 20 arrived, 16 (max_num_seqs) got a first token
		t.Errorf("GET /latency after the replica left = %s (%v); want its 16 first tokens", body, err)
	}
}

// call makes one request and returns its status code and body.
func call(t *testing.T, method, url string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestFleetDrainsRemovedReplicas: with a drain timeout, a replica whose pod went away takes no
// new request and finishes what it holds; one that cannot finish in time loses the rest.
func TestFleetDrainsRemovedReplicas(t *testing.T) {
	for _, tc := range []struct {
		name           string
		drain          time.Duration
		lost, draining int
	}{
		{"no drain: lost at once", 0, 5, 0},
		{"a drain longer than the requests: none lost", 10 * time.Second, 0, 0},
		{"a drain shorter than the requests: the rest lost", 500 * time.Millisecond, 5, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{ServiceTime: 2 * time.Second}
			f, fc := newTestFleet(t, FleetOptions{Rate: 10, DrainTimeout: tc.drain, Config: cfg})
			a, b := "127.0.0.1:0", "127.0.0.2:0"
			if err := f.SetAddresses(context.Background(), []string{a, b}); err != nil {
				t.Fatal(err)
			}
			f.Step(t0)
			f.Step(t0.Add(time.Second)) // 5 running on each, each for 2 s
			fc.SetTime(t0.Add(time.Second))
			if err := f.SetAddresses(context.Background(), []string{a}); err != nil {
				t.Fatal(err)
			}
			f.Step(t0.Add(1500 * time.Millisecond)) // 5 more arrive, all to a
			if st := f.Status(); tc.drain > time.Second && st.Draining != 1 {
				t.Errorf("while b drains: %+v, want one draining", st)
			}
			f.Step(t0.Add(4 * time.Second)) // b's requests are done by 3 s
			st := f.Status()
			if int(st.Lost) != tc.lost || st.Draining != tc.draining || st.Arrived != 40 {
				t.Errorf("Status() = %+v, want %d lost, %d draining, 40 arrived", st, tc.lost, tc.draining)
			}
		})
	}
}
