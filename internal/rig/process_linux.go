package rig

import "syscall"

// childAttributes puts a component in its own process group and has the kernel kill it when
// the thread that started it dies (PR_SET_PDEATHSIG), so nothing outlives the rig's process.
func childAttributes() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// signalGroup sends sig to every process of the group pgid.
func signalGroup(pgid int, sig syscall.Signal) { _ = syscall.Kill(-pgid, sig) }

// CheckPlatform reports whether the rig can run here: it can on Linux.
func CheckPlatform() error { return nil }
