package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
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

// syncBuffer is a bytes.Buffer the gateway's goroutines may log into while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// runServing runs run with cfg (its Kafka listener on port, its admin API off), logging through
// newLogger as cfg.Log says, until the listener takes a connection on 127.0.0.1; then it stops it and
// returns the JSON lines logged.
func runServing(t *testing.T, cfg configs.Config, port string) []map[string]any {
	t.Helper()
	cfg.Admin.Listen = ""
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, newLogger(cfg.Log, &out)) }()
	for deadline := time.Now().Add(10 * time.Second); ; {
		select {
		case err := <-done:
			t.Fatalf("kgate stopped before serving: %v; log:\n%s", err, out.String())
		default:
		}
		if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", port), time.Second); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("kgate not serving on port %s within 10 s; log:\n%s", port, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("kgate stopped: %v; log:\n%s", err, out.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("kgate still running 15 s after its context ended; log:\n%s", out.String())
	}
	return jsonLines(t, out.String())
}

// freePort returns a port nothing listens on, on 127.0.0.1.
func freePort(t *testing.T) string {
	t.Helper()
	_, port, _ := net.SplitHostPort(closedPort(t))
	return port
}

// linesWith returns the lines whose message contains text.
func linesWith(lines []map[string]any, text string) []map[string]any {
	var out []map[string]any
	for _, l := range lines {
		if strings.Contains(fmt.Sprint(l["message"]), text) {
			out = append(out, l)
		}
	}
	return out
}

// TestWarnLoopbackAdvertised: with Redis configured (gateways meant to be shared), a kafka.listen on
// every interface and no kafka.advertised tells clients 127.0.0.1; kgate says so at start, naming the
// keys, and says nothing when kafka.advertised is set or the listener is on one address, nor with the
// embedded store (one gateway tried out on one host).
func TestWarnLoopbackAdvertised(t *testing.T) {
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	const warning = "kafka.advertised is empty"
	tests := []struct {
		name       string
		host       string // of kafka.listen
		advertised bool
		redis      bool
		warn       bool
	}{
		{"any ipv4", "0.0.0.0", false, true, true},
		{"any ipv6", "::", false, true, true},
		{"empty host", "", false, true, true},
		{"advertised set", "0.0.0.0", true, true, false},
		{"loopback", "127.0.0.1", false, true, false},
		{"embedded", "0.0.0.0", false, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.host == "::" {
				if ln, err := net.Listen("tcp6", "[::1]:0"); err != nil {
					t.Skip("no IPv6 loopback")
				} else {
					ln.Close()
				}
			}
			port := freePort(t)
			cfg := configs.Default()
			cfg.Kafka.Listen = net.JoinHostPort(tt.host, port)
			if tt.advertised {
				cfg.Kafka.Advertised = "kgate.example:" + port
			}
			if tt.redis {
				cfg.Redis.Addrs = []string{srv.Addr}
				cfg.Redis.Namespace = "warn-" + strings.ReplaceAll(tt.name, " ", "-")
			}
			got := linesWith(runServing(t, cfg, port), warning)
			if !tt.warn {
				if len(got) != 0 {
					t.Fatalf("warned: %v", got)
				}
				return
			}
			if len(got) != 1 || got[0]["level"] != "warn" || got[0]["kafka.listen"] != cfg.Kafka.Listen ||
				!strings.Contains(fmt.Sprint(got[0]["message"]), "kafka.listen") {
				t.Fatalf("warnings %v, want one at warn naming kafka.listen and kafka.advertised, with kafka.listen %q", got, cfg.Kafka.Listen)
			}
		})
	}
}

// TestEmbeddedWarningWhateverLevel: the warning that the embedded store loses every record when kgate
// stops is logged, once, at warn, also with log.level error, which hid it.
func TestEmbeddedWarningWhateverLevel(t *testing.T) {
	for _, level := range []string{"info", "error"} {
		t.Run(level, func(t *testing.T) {
			port := freePort(t)
			cfg := configs.Default()
			cfg.Kafka.Listen = "127.0.0.1:" + port
			cfg.Log.Level = level
			lines := runServing(t, cfg, port)
			got := linesWith(lines, "embedded in-process store")
			if len(got) != 1 || got[0]["level"] != "warn" {
				t.Fatalf("embedded-store warnings %v, want one at warn; log: %v", got, lines)
			}
			if level == "error" && len(lines) != 1 {
				t.Fatalf("log.level error logged %d lines, want the warning alone: %v", len(lines), lines)
			}
		})
	}
}
