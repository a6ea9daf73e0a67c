// Package testenv says what a test may skip. Under `make test` (BERTH_REQUIRE_RIG=1) nothing a
// test needs may be missing — the rig's tools, loopback addresses, promtool, Prometheus — so a
// missing prerequisite fails the test instead of skipping it silently.
package testenv

import (
	"os"
	"testing"
)

// RequireEnv, when "1", turns every missing prerequisite into a failure. `make test` sets it,
// so CI never silently skips a test.
const RequireEnv = "BERTH_REQUIRE_RIG"

// Required reports whether every prerequisite is required (RequireEnv=1).
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// SkipOrFail skips t for a missing prerequisite, or fails it when prerequisites are required.
func SkipOrFail(tb testing.TB, format string, args ...any) {
	tb.Helper()
	if Required() {
		tb.Fatalf(RequireEnv+"=1 requires it: "+format, args...)
	}
	tb.Skipf(format, args...)
}
