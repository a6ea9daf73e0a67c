package admission

import (
	"fmt"
	"os"
)

// FaultEnv names a fault-injection point at which the controller process exits at once, for
// the restart-safety tests: "mid-release" (half of a gang's members pinned and ungated, the
// others still gated), "after-ungate" (every member pinned and ungated, barrier still up),
// "mid-seats" (half of a gang's seats created) or "mid-recreate" (a stranded bare member
// deleted, not created again yet). Never set in production.
const FaultEnv = "BERTH_FAULT_EXIT_AT"

// faultPoint exits the process when FaultEnv names this point.
func faultPoint(name string) {
	if os.Getenv(FaultEnv) == name {
		fmt.Fprintf(os.Stderr, "berth: fault injection: exiting at %s\n", name)
		os.Exit(3)
	}
}

// faultArmed reports whether FaultEnv names this point.
func faultArmed(name string) bool { return os.Getenv(FaultEnv) == name }
