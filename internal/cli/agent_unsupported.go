//go:build !linux || !cgo

package cli

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

// runAgent explains that this build cannot read GPUs: NVML is a Linux C library, reached
// through cgo.
func runAgent(*cobra.Command, agentFlags) error {
	return fmt.Errorf("berth agent reads GPUs through NVML and runs only from a Linux build with cgo (the berth-agent image); this berth is built for %s/%s without it", runtime.GOOS, runtime.GOARCH)
}
