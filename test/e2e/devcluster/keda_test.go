package devcluster_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/devcluster"
	"github.com/berth-dev/berth/internal/rig"
)

// TestDevUpBeforeKEDAIsBuilt: what make demo does on a fresh machine — the dev cluster comes up
// while KEDA is still building (no KEDA binaries in the tools folder), says KEDA is pending,
// serves KEDA's CRDs, and starts KEDA once its binaries appear; the autoscale scene, started
// before that, waits for KEDA and then plays.
func TestDevUpBeforeKEDAIsBuilt(t *testing.T) {
	tools, dir, state, run := devSetup(t)
	// A tools folder like the real one but without KEDA's binaries (as while they build).
	partial := filepath.Join(dir, "tools")
	if err := os.MkdirAll(filepath.Join(partial, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(tools)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "bin" {
			if err := os.Symlink(filepath.Join(tools, e.Name()), filepath.Join(partial, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	keda := []string{rig.BinKEDAOperator, rig.BinKEDAAdapter}
	bins, err := os.ReadDir(filepath.Join(tools, "bin"))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bins {
		if !slices.Contains(keda, b.Name()) {
			if err := os.Symlink(filepath.Join(tools, "bin", b.Name()), filepath.Join(partial, "bin", b.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}

	if out, err := run("up", "--tools-dir", partial, "--kubeconfig", filepath.Join(dir, "kubeconfig")); err != nil {
		t.Fatalf("berth dev up without KEDA built: %v\n%s", err, out)
	}
	st, ok, err := devcluster.ReadState(state)
	if err != nil || !ok || !st.Ready {
		t.Fatalf("state after up: %+v ok=%v err=%v", st, ok, err)
	}
	if _, pending := st.Pending["keda"]; !pending {
		t.Errorf("state after up: KEDA not pending: %+v", st.Pending)
	}
	for _, c := range st.Components {
		if slices.Contains(keda, c.Name) {
			t.Errorf("%s runs without its binary", c.Name)
		}
	}
	if out, err := run("status"); err != nil || !strings.Contains(out, "keda:") || !strings.Contains(out, "not started") {
		t.Errorf("status while KEDA builds: err=%v\n%s", err, out)
	}

	// The autoscale scene starts now and waits; KEDA's binaries arrive a little later.
	type result struct {
		out string
		err error
	}
	scene := make(chan result, 1)
	go func() {
		out, err := run("demo", "--scene", "autoscale")
		scene <- result{out, err}
	}()
	time.Sleep(10 * time.Second)
	for _, b := range keda {
		if err := os.Symlink(filepath.Join(tools, "bin", b), filepath.Join(partial, "bin", b)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st, _, err = devcluster.ReadState(state)
		if err == nil && len(st.Pending) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("KEDA not started 2 minutes after its binaries appeared: pending %v (err %v)", st.Pending, err)
		}
		time.Sleep(time.Second)
	}
	var names []string
	for _, c := range st.Components {
		names = append(names, c.Name)
	}
	for _, b := range keda {
		if !slices.Contains(names, b) {
			t.Errorf("components %v lack %s once built", names, b)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	select {
	case r := <-scene:
		if r.err != nil {
			t.Fatalf("autoscale scene: %v\n%s", r.err, r.out)
		}
		for _, want := range []string{"waiting for KEDA", "KEDA is up", "the Deployment followed its load"} {
			if !strings.Contains(r.out, want) {
				t.Errorf("autoscale scene output lacks %q:\n%s", want, r.out)
			}
		}
	case <-ctx.Done():
		t.Fatal("the autoscale scene did not finish within 8 minutes of KEDA's start")
	}
}
