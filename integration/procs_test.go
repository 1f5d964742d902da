package integration

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Helpers that run kgate as real processes (cmd/kgate built once per test run), for the scale-out
// tests: kill -9 means kill -9.

// kgateBuild holds the binary shared by the tests running at one time; the last user removes it.
var kgateBuild struct {
	mu    sync.Mutex
	users int
	dir   string
	path  string
}

// kgateBinary builds cmd/kgate once for the tests running now and returns its path.
func kgateBinary(t *testing.T) string {
	t.Helper()
	kgateBuild.mu.Lock()
	defer kgateBuild.mu.Unlock()
	if kgateBuild.path == "" {
		dir, err := os.MkdirTemp("", "kgate-it-bin-")
		if err != nil {
			t.Fatalf("temp dir for the kgate binary: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		bin := filepath.Join(dir, "kgate")
		out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../cmd/kgate").CombinedOutput()
		if err != nil {
			os.RemoveAll(dir)
			t.Fatalf("go build ../cmd/kgate: %v\n%s", err, out)
		}
		kgateBuild.dir, kgateBuild.path = dir, bin
	}
	kgateBuild.users++
	t.Cleanup(func() {
		kgateBuild.mu.Lock()
		defer kgateBuild.mu.Unlock()
		if kgateBuild.users--; kgateBuild.users == 0 {
			os.RemoveAll(kgateBuild.dir)
			kgateBuild.dir, kgateBuild.path = "", ""
		}
	})
	return kgateBuild.path
}

// The membership timing of every kgate process the tests start.
const (
	procHeartbeat   = 200 * time.Millisecond
	procNodeTimeout = 1500 * time.Millisecond
)

// procConfig is what differs between the kgate processes of a test.
type procConfig struct {
	nodeID    int32
	redis     []string // seeds
	cluster   bool
	namespace string
	env       []string // extra KGATE_*=value settings
	// kafka and admin are the listen addresses; empty: 127.0.0.1:0. A restart passes the old ones:
	// a broker that comes back keeps its address (clients map node ids to addresses through Metadata
	// and franz-go keeps a stale mapping until its next metadata refresh).
	kafka, admin string
}

// kgateProc is one running kgate process.
type kgateProc struct {
	ID       int32
	Kafka    string // bound Kafka listener, host:port
	AdminURL string // http://host:port of the admin API
	log      string // stdout+stderr of the process
	cmd      *exec.Cmd
	done     chan struct{} // closed when the process has exited
	waitErr  error         // set before done is closed
	serving  chan servingLine
}

// servingLine is the start-up log line "kgate serving" with the bound addresses.
type servingLine struct {
	Message string `json:"message"`
	Kafka   string `json:"kafka"`
	Admin   string `json:"admin"`
}

// lineWatcher copies the process output to its log file and reports the "kgate serving" line.
type lineWatcher struct {
	f       *os.File
	partial []byte
	found   bool
	serving chan<- servingLine
}

func (w *lineWatcher) Write(b []byte) (int, error) {
	n, err := w.f.Write(b)
	if w.found {
		return n, err
	}
	w.partial = append(w.partial, b...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		line := w.partial[:i]
		w.partial = w.partial[i+1:]
		var sl servingLine
		if json.Unmarshal(line, &sl) == nil && sl.Message == "kgate serving" {
			w.found = true
			w.serving <- sl
			w.partial = nil
			break
		}
	}
	return n, err
}

var procSeq atomic.Int64

// launchKgate starts a kgate process without waiting for it to serve. It is killed at cleanup, and
// the tail of its log is printed when the test failed.
func launchKgate(t *testing.T, pc procConfig) *kgateProc {
	t.Helper()
	bin := kgateBinary(t)
	// The log dir is removed after the process is killed (cleanups run last-in first-out), unless
	// KGATE_TEST_LOG_DIR names a directory to keep the logs in.
	logDir := os.Getenv("KGATE_TEST_LOG_DIR")
	if logDir == "" {
		logDir = t.TempDir()
	}
	logName := fmt.Sprintf("%s-%d-%d.log", sanitize(t.Name()), pc.nodeID, procSeq.Add(1))
	p := &kgateProc{ID: pc.nodeID, log: filepath.Join(logDir, logName),
		done: make(chan struct{}), serving: make(chan servingLine, 1)}
	f, err := os.Create(p.log)
	if err != nil {
		t.Fatalf("kgate log: %v", err)
	}
	env := make([]string, 0, len(os.Environ())+16)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KGATE_") { // the developer's own settings must not leak in
			env = append(env, kv)
		}
	}
	env = append(env,
		fmt.Sprintf("KGATE_NODE_ID=%d", pc.nodeID),
		"KGATE_KAFKA_LISTEN="+cmp.Or(pc.kafka, "127.0.0.1:0"),
		"KGATE_ADMIN_LISTEN="+cmp.Or(pc.admin, "127.0.0.1:0"),
		"KGATE_LOG_LEVEL=info",
		"KGATE_LOG_FORMAT=json",
		"KGATE_REDIS_ADDRS="+strings.Join(pc.redis, ","),
		fmt.Sprintf("KGATE_REDIS_CLUSTER=%t", pc.cluster),
		"KGATE_REDIS_NAMESPACE="+pc.namespace,
		"KGATE_CLUSTER_HEARTBEAT_INTERVAL="+procHeartbeat.String(),
		"KGATE_CLUSTER_NODE_TIMEOUT="+procNodeTimeout.String(),
		"KGATE_GROUPS_INITIAL_REBALANCE_DELAY=100ms",
		"KGATE_GROUPS_MIN_SESSION_TIMEOUT=1s",
	)
	env = append(env, pc.env...)
	cmd := exec.Command(bin)
	cmd.Env = env
	w := &lineWatcher{f: f, serving: p.serving}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = procAttr() // dies with the test binary, even on a panic or timeout
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start kgate: %v", err)
	}
	p.cmd = cmd
	go func() {
		p.waitErr = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("--- tail of kgate node %d log (%s) ---\n%s", p.ID, filepath.Base(p.log), p.tail(40))
		}
	})
	return p
}

// startKgate starts a kgate process and waits until it serves.
func startKgate(t *testing.T, pc procConfig) *kgateProc {
	t.Helper()
	p := launchKgate(t, pc)
	select {
	case sl := <-p.serving:
		p.Kafka, p.AdminURL = sl.Kafka, "http://"+sl.Admin
	case <-p.done:
		t.Fatalf("kgate node %d exited before serving (%v):\n%s", pc.nodeID, p.waitErr, p.tail(20))
	case <-time.After(30 * time.Second):
		t.Fatalf("kgate node %d did not log \"kgate serving\" within 30s:\n%s", pc.nodeID, p.tail(20))
	}
	return p
}

// Kill sends SIGKILL and waits for the process to be gone. Safe to call more than once.
func (p *kgateProc) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Running reports whether the process has not exited.
func (p *kgateProc) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// waitExit waits up to d for the process to exit and returns its exit code (-1 on a signal).
func (p *kgateProc) waitExit(d time.Duration) (code int, exited bool) {
	select {
	case <-p.done:
	case <-time.After(d):
		return 0, false
	}
	var ee *exec.ExitError
	if errors.As(p.waitErr, &ee) {
		return ee.ExitCode(), true
	}
	if p.waitErr != nil {
		return -1, true
	}
	return 0, true
}

// output returns the whole log so far.
func (p *kgateProc) output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// tail returns the last n lines of the log, leaving out connection open/close lines.
func (p *kgateProc) tail(n int) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(p.output(), "\n"), "\n") {
		if !strings.Contains(l, `"message":"connection opened"`) && !strings.Contains(l, `"message":"connection closed"`) {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// procClusterView is the part of GET /api/v1/cluster the scale-out tests read.
type procClusterView struct {
	Self     int32 `json:"self"`
	Gateways []struct {
		NodeID     int32  `json:"nodeId"`
		Advertised string `json:"advertised"`
		Alive      bool   `json:"alive"`
	} `json:"gateways"`
}

// alive returns the node ids the view reports alive.
func (v procClusterView) alive() []int32 {
	var out []int32
	for _, g := range v.Gateways {
		if g.Alive {
			out = append(out, g.NodeID)
		}
	}
	return out
}

var procHTTP = &http.Client{Timeout: 5 * time.Second}

// clusterView reads GET /api/v1/cluster from p.
func (p *kgateProc) clusterView(ctx context.Context) (procClusterView, error) {
	var v procClusterView
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.AdminURL+"/api/v1/cluster", nil)
	if err != nil {
		return v, err
	}
	resp, err := procHTTP.Do(req)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("GET /api/v1/cluster: %s", resp.Status)
	}
	return v, json.NewDecoder(resp.Body).Decode(&v)
}

// procAddrs returns the Kafka addresses of ps (seed brokers).
func procAddrs(ps ...*kgateProc) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Kafka
	}
	return out
}

// startKgates starts one process per node id in parallel and waits until every one serves.
func startKgates(t *testing.T, base procConfig, ids ...int32) []*kgateProc {
	t.Helper()
	ps := make([]*kgateProc, len(ids))
	for i, id := range ids {
		pc := base
		pc.nodeID = id
		ps[i] = launchKgate(t, pc)
	}
	for _, p := range ps {
		select {
		case sl := <-p.serving:
			p.Kafka, p.AdminURL = sl.Kafka, "http://"+sl.Admin
		case <-p.done:
			t.Fatalf("kgate node %d exited before serving (%v):\n%s", p.ID, p.waitErr, p.tail(20))
		case <-time.After(30 * time.Second):
			t.Fatalf("kgate node %d did not log \"kgate serving\" within 30s:\n%s", p.ID, p.tail(20))
		}
	}
	return ps
}

// waitAllSeeAlive polls every process's cluster view until each reports exactly want alive, and
// returns how long that took.
func waitAllSeeAlive(t *testing.T, d time.Duration, want []int32, ps ...*kgateProc) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	for {
		ok := true
		for _, p := range ps {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			v, err := p.clusterView(ctx)
			cancel()
			if err != nil {
				ok, last = false, fmt.Sprintf("node %d: %v", p.ID, err)
				break
			}
			if got := v.alive(); fmt.Sprint(got) != fmt.Sprint(want) {
				ok, last = false, fmt.Sprintf("node %d sees alive %v", p.ID, got)
				break
			}
		}
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > d {
			t.Fatalf("cluster views did not converge on alive=%v within %v: %s", want, d, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
