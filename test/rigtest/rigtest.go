// Package rigtest starts a rig for a test package: in TestMain with Main, shared by the
// package's tests, and stopped when they finish, fail, panic or are interrupted. When tests
// fail the rig's component logs are kept and their tails printed.
package rigtest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/rig"
	"github.com/berth-dev/berth/test/testenv"
)

// Main starts a rig with opts, calls setup with it (to start more components), runs the
// package's tests, stops the rig and exits. Tests reach the rig through Current.
func Main(m *testing.M, opts rig.Options, setup func(context.Context, *rig.Rig) error) {
	os.Exit(run(m, opts, setup))
}

var (
	current *rig.Rig
	// deferred runs after the tests and before the rig stops (see Defer).
	deferred []func()
)

// KeepEnv, set to anything, keeps the rig's work folder (its logs among it) after tests that
// pass too; a failing package always keeps it.
const KeepEnv = "BERTH_RIG_KEEP"

// Defer registers f to run after the package's tests, before the rig stops: stop in-process
// controllers there so they do not hold the apiserver's watches open while it shuts down.
func Defer(f func()) { deferred = append(deferred, f) }

// Current is the rig started by Main.
func Current() *rig.Rig { return current }

func run(m *testing.M, opts rig.Options, setup func(context.Context, *rig.Rig) error) int {
	flag.Parse()
	if opts.ToolsDir == "" {
		opts.ToolsDir = os.Getenv(rig.ToolsDirEnv)
	}
	if opts.ToolsDir == "" {
		msg := fmt.Sprintf("rig tests need %s (the folder printed by hack/build-tools.sh; `make test` sets it)", rig.ToolsDirEnv)
		if testenv.Required() {
			fmt.Fprintln(os.Stderr, "FAIL:", msg)
			return 1
		}
		fmt.Fprintln(os.Stderr, "SKIP:", msg)
		return 0
	}
	opts.HandleSignals = true
	if opts.Logf == nil && testing.Verbose() {
		opts.Logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	r, err := rig.Start(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: starting rig:", err)
		return 1
	}
	current = r
	code := 1
	defer func() {
		for i := len(deferred) - 1; i >= 0; i-- {
			deferred[i]()
		}
		_ = r.Stop()
		if code != 0 {
			dumpLogs(r)
			return
		}
		if os.Getenv(KeepEnv) != "" {
			fmt.Fprintf(os.Stderr, "rig work folder kept in %s (%s)\n", r.WorkDir(), KeepEnv)
			return
		}
		_ = os.RemoveAll(r.WorkDir())
	}()
	if setup != nil {
		if err := setup(ctx, r); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: setting up rig:", err)
			return code
		}
	}
	fmt.Fprintf(os.Stderr, "rig up in %s (work folder %s)\n", time.Since(start).Round(time.Millisecond), r.WorkDir())
	code = m.Run()
	return code
}

// dumpLogs prints where the logs are and the last lines of each.
func dumpLogs(r *rig.Rig) {
	fmt.Fprintf(os.Stderr, "rig logs kept in %s\n", r.LogDir())
	files, _ := filepath.Glob(filepath.Join(r.LogDir(), "*.log"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		fmt.Fprintf(os.Stderr, "--- last lines of %s\n%s\n", filepath.Base(f), strings.Join(lines, "\n"))
	}
}
