package vllmsim

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestReadAzureTrace(t *testing.T) {
	in := "TIMESTAMP,ContextTokens,GeneratedTokens\n" +
		"2023-11-16 18:15:47.1805900,1000,20\n" +
		"2023-11-16 18:15:46.6805900,374,44\n"
	reqs, err := ReadAzureTrace(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []TraceRequest{{0, 374, 44}, {500 * time.Millisecond, 1000, 20}}
	if len(reqs) != 2 || reqs[0] != want[0] || reqs[1] != want[1] {
		t.Errorf("got %+v, want %+v (sorted, timed from the first)", reqs, want)
	}
	var buf bytes.Buffer
	if err := WriteAzureTrace(&buf, reqs); err != nil {
		t.Fatal(err)
	}
	back, err := ReadAzureTrace(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if back[1] != reqs[1] {
		t.Errorf("round trip: %+v, want %+v", back[1], reqs[1])
	}
	for _, bad := range []struct{ in, want string }{
		{"a,b,c\n1,2,3\n", "TIMESTAMP,ContextTokens,GeneratedTokens"},
		{"TIMESTAMP,ContextTokens,GeneratedTokens\n1.5,0,3\nyesterday,4,5\n", "line 2: ContextTokens"},
		{"TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,4,5\n", "line 2: timestamp"},
		{"TIMESTAMP,ContextTokens,GeneratedTokens\n", "no request"},
	} {
		if _, err := ReadAzureTrace(strings.NewReader(bad.in)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v, want an error naming %q", bad.in, err, bad.want)
		}
	}
}

// firstTokens records first tokens and completions.
type firstTokens struct {
	ttft     []time.Duration
	outputs  []int
	finished int
}

func (f *firstTokens) FirstToken(arrived, at time.Time) { f.ttft = append(f.ttft, at.Sub(arrived)) }
func (f *firstTokens) Finished(_, _, _ time.Time, output int) {
	f.finished++
	f.outputs = append(f.outputs, output)
}

func TestReplayDeliversEachRequestWithItsLengths(t *testing.T) {
	cfg, err := Profile(ProfileL4Llama8B)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r, err := NewReplica(cfg, start)
	if err != nil {
		t.Fatal(err)
	}
	obs := &firstTokens{}
	r.SetObserver(obs)
	g, err := NewLoadGenerator(0)
	if err != nil {
		t.Fatal(err)
	}
	g.Replay([]TraceRequest{{At: 2 * time.Second, Prompt: 100, Output: 7}, {At: 500 * time.Millisecond, Prompt: 3000, Output: 3}}, start)
	g.Step(start, []Receiver{r})
	for now := start; now.Before(start.Add(20 * time.Second)); now = now.Add(100 * time.Millisecond) {
		g.Step(now, []Receiver{r})
		r.Step(now)
	}
	if st, _ := g.ReplayStatus(); st.Emitted != 2 || st.Requests != 2 {
		t.Errorf("replay status %+v, want both emitted", st)
	}
	if obs.finished != 2 || len(obs.ttft) != 2 {
		t.Fatalf("%d finished, %d first tokens: want 2 of each", obs.finished, len(obs.ttft))
	}
	// The 3,000-token prompt arrived first and needs two prefill chunks; the short one, after.
	if obs.outputs[0] != 3 && obs.outputs[1] != 3 {
		t.Errorf("outputs %v: the trace's lengths were not used", obs.outputs)
	}
	if obs.ttft[0] < 200*time.Millisecond {
		t.Errorf("a 3,000-token prompt on an L4 prefilled in %s", obs.ttft[0])
	}
	var busy float64
	for _, e := range r.Snapshot() {
		busy += e.BusySeconds
	}
	if busy <= 0 || busy > 20 {
		t.Errorf("busy %.2f s over 20 s", busy)
	}
}

func TestAdminReplay(t *testing.T) {
	f, err := NewFleet(FleetOptions{Config: Config{}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(f.AdminHandler())
	defer srv.Close()
	get := func() int {
		resp, err := http.Get(srv.URL + "/replay")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := get(); c != http.StatusNotFound {
		t.Errorf("GET /replay before one: %d, want 404", c)
	}
	put := func(body string) int {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/replay", strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := put("TIMESTAMP,ContextTokens,GeneratedTokens\nsoon,1,1\n"); c != http.StatusBadRequest {
		t.Errorf("malformed trace: %d, want 400", c)
	}
	if c := put("TIMESTAMP,ContextTokens,GeneratedTokens\n0,10,5\n1.5,20,5\n"); c != http.StatusOK {
		t.Errorf("trace: %d, want 200", c)
	}
	if c := get(); c != http.StatusOK {
		t.Errorf("GET /replay: %d, want 200", c)
	}
}

func TestAPromptLongerThanTheModelIsRejected(t *testing.T) {
	cfg, err := Profile(ProfileL4Llama8B)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReplica(cfg, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if r.SubmitRequest(time.Unix(0, 0), cfg.Tokens.MaxModelLen, 10) {
		t.Error("a prompt of max-model-len tokens was accepted; vLLM answers 400")
	}
	if !r.SubmitRequest(time.Unix(0, 0), cfg.Tokens.MaxModelLen-1, 10) {
		t.Error("a prompt one token under max-model-len was rejected")
	}
	n := 0
	r.Unfinished(func(time.Time, bool) { n++ })
	if n != 1 {
		t.Errorf("%d requests held, want the one accepted", n)
	}
}
