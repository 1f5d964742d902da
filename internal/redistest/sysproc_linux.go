package redistest

import "syscall"

// sysProcAttr makes the kernel kill redis-server when the process that started it exits, so a test
// binary that panics, times out or is killed leaves no server behind. (Pdeathsig follows the starting
// OS thread; Go test binaries do not retire threads that started children.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// Pause stops the server process (SIGSTOP) without closing its connections: it neither answers nor
// acknowledges replication until Resume. Tests use it to stall a replica.
func (s *Server) Pause() error { return s.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() error { return s.cmd.Process.Signal(syscall.SIGCONT) }
