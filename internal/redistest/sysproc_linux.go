package redistest

import "syscall"

// sysProcAttr makes the kernel kill redis-server when the process that started it exits, so a test
// binary that panics, times out or is killed leaves no server behind. (Pdeathsig follows the starting
// OS thread; Go test binaries do not retire threads that started children.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
