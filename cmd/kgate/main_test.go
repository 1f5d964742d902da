package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kgate/kgate/configs"
	"github.com/kgate/kgate/coordinator"
	"github.com/kgate/kgate/internal/redistest"
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

// runChild runs main in a child process (this test binary, re-run for the test named by run) with
// args and the environment env, and returns its stdout, its stderr and its exit code.
func runChild(t *testing.T, run string, args []string, env ...string) (stdout, stderr string, code int) {
	t.Helper()
	if os.Getenv("KGATE_TEST_MAIN_CHILD") == "1" {
		panic("runChild called in the child")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+run+"$")
	cmd.Env = append(childEnv(), "KGATE_TEST_MAIN_CHILD=1", "KGATE_TEST_MAIN_ARGS="+strings.Join(args, "\x1f"))
	cmd.Env = append(cmd.Env, env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Exited():
		code = ee.ExitCode()
	default:
		t.Fatalf("child: %v; stderr:\n%s", err, errOut.String())
	}
	return out.String(), errOut.String(), code
}

// childEnv is the test's environment without the developer's KGATE_* settings.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KGATE_") {
			env = append(env, kv)
		}
	}
	return env
}

// maybeRunMain runs main with the arguments runChild passed when this process is the child.
func maybeRunMain() {
	if os.Getenv("KGATE_TEST_MAIN_CHILD") != "1" {
		return
	}
	os.Args = append([]string{"kgate"}, strings.Split(os.Getenv("KGATE_TEST_MAIN_ARGS"), "\x1f")...)
	main()
	os.Exit(0)
}

// closedPort returns a 127.0.0.1 address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// jsonLines returns the log lines of out, each decoded, failing on one that is not a JSON object (a
// log.format json consumer cannot parse it).
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Errorf("log line is not JSON (log.format json): %q", line)
			continue
		}
		lines = append(lines, m)
	}
	return lines
}

// TestStartRedisUnreachable: a Redis refusing connections at start ends kgate with exit code 1 and
// one error line naming the address, and every line it wrote is JSON, the Redis client library's
// own messages included.
func TestStartRedisUnreachable(t *testing.T) {
	maybeRunMain()
	redis := closedPort(t)
	stdout, stderr, code := runChild(t, "TestStartRedisUnreachable",
		[]string{"--redis.addrs", redis, "--kafka.listen", "127.0.0.1:0", "--admin.listen="})
	if code != 1 {
		t.Errorf("exit code %d, want 1; stderr:\n%s", code, stderr)
	}
	if stdout != "" {
		t.Errorf("stdout %q, want nothing (the log goes to stderr)", stdout)
	}
	lines := jsonLines(t, stderr)
	if len(lines) == 0 || lines[len(lines)-1]["level"] != "error" ||
		!strings.Contains(fmt.Sprint(lines[len(lines)-1]["error"]), redis) {
		t.Errorf("last log line is not an error naming %s; stderr:\n%s", redis, stderr)
	}
}

// TestSignalDuringStartStops: a SIGTERM while kgate is still starting (here: waiting for a Redis that
// accepted the connection and never answers) stops it at once, as a requested stop: exit code 0, no
// error line. It used to wait out the Redis timeouts (dial + command: a minute here) and then exit 1.
func TestSignalDuringStartStops(t *testing.T) {
	maybeRunMain()
	silent := redistest.StartSilent(t)
	args := []string{"--redis.addrs", silent.Addr, "--redis.dial_timeout", "1m", "--redis.command_timeout", "1m",
		"--kafka.listen", "127.0.0.1:0", "--admin.listen="}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSignalDuringStartStops$")
	cmd.Env = append(childEnv(), "KGATE_TEST_MAIN_CHILD=1", "KGATE_TEST_MAIN_ARGS="+strings.Join(args, "\x1f"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-silent.Accepted:
	case err := <-exited:
		t.Fatalf("kgate exited before connecting to Redis: %v; stderr:\n%s", err, stderr.String())
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatal("kgate did not connect to Redis within 10 s")
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-exited:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-exited
		t.Fatalf("kgate still starting 10 s after SIGTERM; stderr:\n%s", stderr.String())
	}
	if err != nil {
		t.Errorf("kgate stopped during start: %v, want exit code 0; stderr:\n%s", err, stderr.String())
	}
	for _, line := range jsonLines(t, stderr.String()) {
		if line["level"] == "error" {
			t.Errorf("error logged for a requested stop: %v", line)
		}
	}
}

// TestConsoleLogWithoutTerminal: log.format console writes no colour escapes where stderr is no
// terminal (a file, a pipe to a log collector), where they would be stored as text.
func TestConsoleLogWithoutTerminal(t *testing.T) {
	maybeRunMain()
	_, stderr, code := runChild(t, "TestConsoleLogWithoutTerminal",
		[]string{"--log.format", "console", "--redis.addrs", closedPort(t), "--kafka.listen", "127.0.0.1:0", "--admin.listen="})
	if code != 1 || !strings.Contains(stderr, "kgate stopped") {
		t.Fatalf("exit code %d, want 1 with the error logged; stderr:\n%s", code, stderr)
	}
	if strings.Contains(stderr, "\x1b[") {
		t.Errorf("colour escapes written to a pipe:\n%q", stderr)
	}
}
