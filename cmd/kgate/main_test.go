package main

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestSecondSignalKills: the first SIGTERM starts the graceful shutdown (signalContext is done); a
// second one ends the process, however long that shutdown takes. The test runs itself as the child
// that receives the signals.
func TestSecondSignalKills(t *testing.T) {
	if os.Getenv("KGATE_TEST_SIGNAL_CHILD") == "1" {
		ctx, stop := signalContext()
		defer stop()
		self := os.Getpid()
		_ = syscall.Kill(self, syscall.SIGTERM)
		<-ctx.Done()
		// A hung shutdown: signal again until one ends the process; signals still swallowed at the
		// deadline let it exit with 0.
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			_ = syscall.Kill(self, syscall.SIGTERM)
		}
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSecondSignalKills$")
	cmd.Env = append(os.Environ(), "KGATE_TEST_SIGNAL_CHILD=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child: %v, want killed by SIGTERM (a second signal was swallowed); output:\n%s", err, out)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Fatalf("child: %v, want killed by SIGTERM; output:\n%s", err, out)
	}
}
