//go:build !linux

package rig

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
)

// childAttributes is never used off Linux: CheckPlatform refuses to start a rig.
func childAttributes() *syscall.SysProcAttr { return nil }

// signalGroup is never used off Linux: CheckPlatform refuses to start a rig.
func signalGroup(int, syscall.Signal) {}

// lockExclusive is never used off Linux: CheckPlatform refuses to start a rig.
func lockExclusive(*os.File) error { return CheckPlatform() }

// CheckPlatform refuses to run the rig off Linux: its components are Linux binaries, and only
// Linux kills them with the process that started them (PR_SET_PDEATHSIG).
func CheckPlatform() error {
	return fmt.Errorf("the local cluster (berth dev, the test rig) runs only on Linux; this is %s/%s: use a Linux machine or VM", runtime.GOOS, runtime.GOARCH)
}
