// Package version reports the build of the berth binary, set at link time by the Makefile.
package version

import (
	"fmt"
	"runtime"
)

// Set with -ldflags "-X github.com/berth-dev/berth/internal/version.Version=..." by the Makefile.
var (
	// Version is the release or `git describe` of the build.
	Version = "dev"
	// Commit is the git commit of the build.
	Commit = "unknown"
)

// String is a one-line description of the build.
func String() string {
	return fmt.Sprintf("berth %s (commit %s, %s, %s/%s)", Version, Commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
