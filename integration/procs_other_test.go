//go:build !linux

package integration

import "syscall"

// procAttr: only Linux can tie a child's life to the test binary's.
func procAttr() *syscall.SysProcAttr { return nil }
