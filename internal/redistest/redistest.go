// Package redistest starts real redis-server processes on 127.0.0.1 for tests: a standalone server and
// a 3-master Redis Cluster. Start them once per test package (TestMain) and share them; each test uses
// its own key namespace.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Server is one running redis-server.
type Server struct {
	Addr string
	cmd  *exec.Cmd
	dir  string
	done chan struct{} // closed when the process has exited
	stop sync.Once
}

// Stop kills the server and removes its directory. It is safe to call more than once.
func (s *Server) Stop() {
	if s == nil || s.cmd == nil {
		return
	}
	s.Kill()
	s.stop.Do(func() { _ = os.RemoveAll(s.dir) })
}

// Kill stops the server abruptly without removing its files (failover tests).
func (s *Server) Kill() {
	if s == nil || s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Available reports whether redis-server is on PATH.
func Available() bool {
	_, err := exec.LookPath("redis-server")
	return err == nil
}

// Start runs a redis-server on a free loopback port with persistence off and extra args appended.
// A port taken by someone else between choosing and binding it is retried with another one.
func Start(extra ...string) (*Server, error) {
	return startRetry(ServerBinary(), false, extra...)
}

// ServerBinary is the server the tests run: redis-server, or KGATE_TEST_SERVER (valkey-server, say)
// to run a suite against another server.
func ServerBinary() string {
	if b := os.Getenv("KGATE_TEST_SERVER"); b != "" {
		return b
	}
	return "redis-server"
}

// StartBinary is Start with another server binary that takes redis-server's arguments (valkey-server,
// say: a server of another lineage and version, speaking the same protocol).
func StartBinary(binary string, extra ...string) (*Server, error) {
	return startRetry(binary, false, extra...)
}

func startRetry(binary string, cluster bool, extra ...string) (*Server, error) {
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		args := extra
		if cluster {
			// The cluster bus defaults to port+10000, which does not exist for ephemeral ports above
			// 55535 and may be taken by anyone: give it a free port of its own.
			bus, err := freePort()
			if err != nil {
				return nil, err
			}
			args = append([]string{"--cluster-port", strconv.Itoa(bus)}, extra...)
		}
		s, err := startOn(binary, port, args...)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if !errors.Is(err, errExited) {
			return nil, err
		}
	}
	return nil, lastErr
}

var errExited = errors.New("redistest: redis-server exited")

func startOn(binary string, port int, extra ...string) (*Server, error) {
	dir, err := os.MkdirTemp("", "kgate-redis-")
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--protected-mode", "no",
	}, extra...)
	logPath := filepath.Join(dir, "stdout.log")
	logf, err := os.Create(logPath)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr() // the server dies with the test binary, even on a panic or timeout
	err = cmd.Start()
	logf.Close() // the child has its own descriptor
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("redistest: start %s: %w", binary, err)
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, dir: dir,
		done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if reply, err := command(s.Addr, "PING"); err == nil && reply == "+PONG" {
			// Someone else's server may hold the port (ours then fails to bind): make sure ours answered.
			if lines, err := commandLines(s.Addr, 5, "CONFIG", "GET", "dir"); err == nil && sameDir(lines[4], dir) {
				return s, nil
			}
			s.Stop()
			return nil, fmt.Errorf("%w: port %d answered by another server", errExited, port)
		}
		select {
		case <-s.done:
			out, _ := os.ReadFile(logPath)
			s.Stop()
			return nil, fmt.Errorf("%w on port %d: %s", errExited, port, lastLines(string(out), 5))
		default:
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("redistest: redis-server on %s did not answer", s.Addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sameDir compares the working directory a server reports (symlinks resolved) with the one we gave it.
func sameDir(reported, dir string) bool {
	if reported == dir {
		return true
	}
	real, err := filepath.EvalSymlinks(dir)
	return err == nil && reported == real
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// command sends one command and returns the first reply line.
func command(addr string, args ...string) (string, error) {
	lines, err := commandLines(addr, 1, args...)
	if err != nil {
		return "", err
	}
	return lines[0], nil
}

// commandLines sends one command and returns the first n reply lines, trimmed.
func commandLines(addr string, n int, args ...string) ([]string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return nil, err
	}
	r := bufio.NewReader(c)
	lines := make([]string, 0, n)
	for range n {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		lines = append(lines, strings.TrimSpace(line))
	}
	return lines, nil
}

// Cluster is a local Redis Cluster of masters (and optional replicas).
type Cluster struct {
	Masters  []*Server
	Replicas []*Server
}

// Addrs returns every node address (seeds for a cluster client).
func (c *Cluster) Addrs() []string {
	var out []string
	for _, s := range c.Masters {
		out = append(out, s.Addr)
	}
	for _, s := range c.Replicas {
		out = append(out, s.Addr)
	}
	return out
}

// Stop stops every node.
func (c *Cluster) Stop() {
	for _, s := range append(c.Masters, c.Replicas...) {
		s.Stop()
	}
}

var clusterSeq atomic.Int32

// StartCluster starts masters nodes with replicasPer replicas each, assigns the 16384 slots evenly and
// waits until the cluster reports ok.
func StartCluster(ctx context.Context, masters, replicasPer int) (*Cluster, error) {
	c := &Cluster{}
	fail := func(err error) (*Cluster, error) { c.Stop(); return nil, err }
	node := func() (*Server, error) {
		return startRetry(ServerBinary(), true, "--cluster-enabled", "yes", "--cluster-config-file",
			fmt.Sprintf("nodes-%d.conf", clusterSeq.Add(1)), "--cluster-node-timeout", "2000")
	}
	for i := 0; i < masters; i++ {
		s, err := node()
		if err != nil {
			return fail(err)
		}
		c.Masters = append(c.Masters, s)
	}
	for i := 0; i < masters*replicasPer; i++ {
		s, err := node()
		if err != nil {
			return fail(err)
		}
		c.Replicas = append(c.Replicas, s)
	}
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicasPer), "--cluster-yes")
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(cctx, "redis-cli", args...).CombinedOutput(); err != nil {
		return fail(fmt.Errorf("redistest: cluster create: %v: %s", err, out))
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range append(c.Masters, c.Replicas...) {
		for {
			info, err := clusterInfo(s.Addr)
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				return fail(fmt.Errorf("redistest: cluster not ok on %s: %s", s.Addr, info))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c, nil
}

// StartPartialCluster is StartCluster of masters without replicas whose every master goes on serving
// its own slots while another is down (cluster-require-full-coverage no), as a cluster configured for
// partial outages does.
func StartPartialCluster(ctx context.Context, masters int) (*Cluster, error) {
	c, err := StartCluster(ctx, masters, 0)
	if err != nil {
		return nil, err
	}
	if err := c.servePartial(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) servePartial(ctx context.Context) error {
	for _, s := range c.Masters {
		out, err := exec.CommandContext(ctx, "redis-cli", "-h", "127.0.0.1", "-p", strings.Split(s.Addr, ":")[1],
			"config", "set", "cluster-require-full-coverage", "no").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "OK") {
			return fmt.Errorf("redistest: full coverage off on %s: %v: %s", s.Addr, err, out)
		}
	}
	return nil
}

// ErrorCount is how many error replies of the given prefix (NOPERM, OOM, ...) the servers at addrs have
// given since they started (INFO errorstats), summed.
func ErrorCount(ctx context.Context, addrs []string, prefix string) (int64, error) {
	var n int64
	for _, addr := range addrs {
		out, err := exec.CommandContext(ctx, "redis-cli", "-h", "127.0.0.1", "-p", strings.Split(addr, ":")[1],
			"info", "errorstats").CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("redistest: errorstats of %s: %v: %s", addr, err, out)
		}
		key := "errorstat_" + prefix + ":count="
		if i := strings.Index(string(out), key); i >= 0 {
			var v int64
			fmt.Sscanf(string(out[i+len(key):]), "%d", &v)
			n += v
		}
	}
	return n, nil
}

// SetUser sets ACL user on every server at addrs (ACL SETUSER user rules...).
func SetUser(ctx context.Context, addrs []string, user string, rules ...string) error {
	for _, addr := range addrs {
		args := append([]string{"-h", "127.0.0.1", "-p", strings.Split(addr, ":")[1], "acl", "setuser", user}, rules...)
		out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "OK") {
			return fmt.Errorf("redistest: ACL SETUSER %s on %s: %v: %s", user, addr, err, out)
		}
	}
	return nil
}

// DeleteUser removes ACL user from every server at addrs, as a test's cleanup: a server gone already
// is no error.
func DeleteUser(addrs []string, user string) {
	for _, addr := range addrs {
		_ = exec.Command("redis-cli", "-h", "127.0.0.1", "-p", strings.Split(addr, ":")[1], "acl", "deluser", user).Run()
	}
}

func clusterInfo(addr string) (string, error) {
	out, err := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", strings.Split(addr, ":")[1], "cluster", "info").CombinedOutput()
	return string(out), err
}
