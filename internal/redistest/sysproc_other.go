//go:build !linux

package redistest

import (
	"errors"
	"syscall"
)

// sysProcAttr: only Linux can tie the server's life to the test binary's.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// Pause is only implemented on Linux.
func (s *Server) Pause() error { return errors.ErrUnsupported }

// Resume is only implemented on Linux.
func (s *Server) Resume() error { return errors.ErrUnsupported }
