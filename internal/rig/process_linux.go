package rig

import (
	"errors"
	"os"
	"syscall"
)

// childAttributes puts a component in its own process group and has the kernel kill it when
// the thread that started it dies (PR_SET_PDEATHSIG), so nothing outlives the rig's process.
func childAttributes() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// signalGroup sends sig to every process of the group pgid.
func signalGroup(pgid int, sig syscall.Signal) { _ = syscall.Kill(-pgid, sig) }

// lockExclusive takes an exclusive lock on f without waiting; errRangeTaken when another
// process holds it. Closing f releases it, also when the process dies.
func lockExclusive(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return errRangeTaken
	}
	return err
}

// CheckPlatform reports whether the rig can run here: it can on Linux.
func CheckPlatform() error { return nil }
