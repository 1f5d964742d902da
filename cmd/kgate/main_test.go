package main

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/kgate/kgate/configs"
	"github.com/kgate/kgate/coordinator"
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

// A configured initial rebalance delay of 0 means none: the coordinator gets a negative delay (its 0
// is its 3 s default), which it applies as no delay at all.
func TestInitialRebalanceDelayZeroIsNone(t *testing.T) {
	groups := configs.Default().Groups
	groups.InitialRebalanceDelay = 0
	if got := coordinator.New(groupsConfig(groups)).Config().InitialRebalanceDelay; got != 0 {
		t.Fatalf("configured 0: the coordinator waits %v", got)
	}
	groups.InitialRebalanceDelay = 2 * time.Second
	if got := coordinator.New(groupsConfig(groups)).Config().InitialRebalanceDelay; got != 2*time.Second {
		t.Fatalf("configured 2s: the coordinator waits %v", got)
	}
}
