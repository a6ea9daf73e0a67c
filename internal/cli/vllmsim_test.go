package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestVLLMSimFlags(t *testing.T) {
	cmd, _, err := NewRootCommand().Find([]string{"dev", "vllm-sim"})
	if err != nil || cmd.Name() != "vllm-sim" {
		t.Fatalf("berth dev vllm-sim: %v, %v", cmd, err)
	}
	for name, def := range map[string]string{
		"listen": "[127.0.0.1:8000]", "admin-address": "127.0.0.1:8099",
		"model": "meta-llama/Llama-3.1-8B-Instruct", "rate": "0", "max-num-seqs": "16",
		"kv-blocks": "1000", "kv-blocks-per-seq": "50", "service-time": "2s", "prefill-time": "100ms",
		"engines": "1", "legacy-kv-metric": "false", "kubeconfig": "", "namespace": "", "selector": "",
		"port": "8000",
	} {
		f := cmd.Flags().Lookup(name)
		if f == nil {
			t.Errorf("--%s missing", name)
			continue
		}
		if f.DefValue != def {
			t.Errorf("--%s defaults to %q, want %q", name, f.DefValue, def)
		}
	}
	// vllm-sim's own --kubeconfig (which cluster to read pods from) shadows dev's (where to write one).
	if u := cmd.Flags().Lookup("kubeconfig").Usage; !strings.Contains(u, "--selector") {
		t.Errorf("--kubeconfig is dev's, not vllm-sim's: %q", u)
	}
}

func TestVLLMSimRejectsBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // the error names the flag or setting at fault
	}{
		{[]string{"--port", "0"}, "--port must be between 1 and 65535"},
		{[]string{"--max-num-seqs", "-1"}, "max-num-seqs must be positive"},
		{[]string{"--rate", "-2"}, "rate must be a finite, non-negative number"},
		{[]string{"--kv-blocks", "10"}, "exceeds kv-blocks 10"},
		{[]string{"--profile", "a100-llama"}, `--profile: vLLM emulator profile "a100-llama": want one of`},
		{[]string{"--profile", "l4-llama-3.1-8b", "--service-time", "1s"}, "--service-time does not apply with --profile"},
		{[]string{"--profile", "l4-llama-3.1-8b", "--kv-blocks", "100"}, "max-model-len 8192 exceeds the KV cache (100 blocks"},
		{[]string{"--admin-address", "192.0.2.1:1"}, "--admin-address: listen tcp 192.0.2.1:1"},
		{[]string{"--listen", "192.0.2.1:1", "--admin-address", "127.0.0.1:0"}, "serving the vLLM emulator on 192.0.2.1:1"},
	} {
		root := NewRootCommand()
		root.SetArgs(append([]string{"dev", "vllm-sim"}, tc.args...))
		root.SetErr(io.Discard)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := root.ExecuteContext(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("vllm-sim %v: error %v, want one saying %q", tc.args, err, tc.want)
		}
	}
}

// TestVLLMSimServes runs the command on loopback, reads its log for the addresses it took,
// checks the replica and the control API, then stops it the way a signal does.
func TestVLLMSimServes(t *testing.T) {
	root := NewRootCommand()
	root.SetArgs([]string{"dev", "vllm-sim", "--state-dir", t.TempDir(),
		"--listen", "127.0.0.3:0", "--admin-address", "127.0.0.1:0", "--rate", "5", "--legacy-kv-metric"})
	pr, pw := io.Pipe()
	root.SetErr(pw)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx); _ = pw.Close() }()

	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		for sc := bufio.NewScanner(pr); sc.Scan(); {
			lines <- sc.Text()
		}
	}()
	find := func(re *regexp.Regexp) string {
		t.Helper()
		timeout := time.After(20 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("log ended before %s; command: %v", re, <-done)
				}
				if m := re.FindStringSubmatch(l); m != nil {
					return m[1]
				}
			case <-timeout:
				t.Fatalf("no log line matching %s", re)
			}
		}
	}
	admin := find(regexp.MustCompile(`control API on http://(\S+)/load`))
	replica := find(regexp.MustCompile(`serving the vLLM emulator on (127\.0\.0\.3:\d+)`))
	go func() { // keep the log flowing
		for range lines {
		}
	}()

	resp, err := http.Get("http://" + replica + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "vllm:gpu_cache_usage_perc{") {
		t.Errorf("--legacy-kv-metric: /metrics lacks vllm:gpu_cache_usage_perc:\n%s", body)
	}

	req, _ := http.NewRequest(http.MethodPut, "http://"+admin+"/load?rate=2.5", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Rate     float64 `json:"rate"`
		Replicas int     `json:"replicas"`
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || st.Rate != 2.5 || st.Replicas != 1 {
		t.Errorf("PUT /load?rate=2.5 = %+v (%v)", st, err)
	}

	cancel() // what SIGINT does through Execute's signal context
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("vllm-sim after cancel: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("vllm-sim did not stop")
	}
	if _, err := http.Get("http://" + replica + "/health"); err == nil {
		t.Error("replica still serves after shutdown")
	}
}
