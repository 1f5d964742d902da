package integration

import "syscall"

// procAttr makes the kernel kill a kgate process when the test binary exits, so a panicking or
// timed-out test leaves no gateway behind.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
