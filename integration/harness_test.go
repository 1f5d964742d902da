package integration

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kgate/kgate/coordinator"
	"github.com/kgate/kgate/gateway"
	"github.com/kgate/kgate/internal/redistest"
	"github.com/kgate/kgate/redisstore"
)

// The Redis servers every test shares; each test uses its own key namespace.
var (
	standalone *redistest.Server
	cluster    *redistest.Cluster
)

func TestMain(m *testing.M) {
	if os.Getenv("KGATE_SKIP_REDIS") == "1" {
		fmt.Println("integration: KGATE_SKIP_REDIS=1, skipping")
		os.Exit(0)
	}
	var err error
	if standalone, err = redistest.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "integration: redis-server:", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	cluster, err = redistest.StartCluster(ctx, 3, 0)
	cancel()
	if err != nil {
		standalone.Stop()
		fmt.Fprintln(os.Stderr, "integration: redis cluster:", err)
		os.Exit(1)
	}
	code := m.Run()
	standalone.Stop()
	cluster.Stop()
	os.Exit(code)
}

// backend is one Redis deployment the tests run against.
type backend struct {
	name    string
	addrs   []string
	cluster bool
}

func backends() []backend {
	return []backend{
		{name: "standalone", addrs: []string{standalone.Addr}},
		{name: "cluster", addrs: cluster.Addrs(), cluster: true},
	}
}

// forEachBackend runs fn as a parallel subtest per backend.
func forEachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	t.Helper()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			fn(t, b)
		})
	}
}

var nsSeq atomic.Int64

// testGateway is a gateway serving on 127.0.0.1 for one test.
type testGateway struct {
	*gateway.Gateway
	Addr      string
	AdminURL  string
	Store     *redisstore.Store
	Namespace string
	stop      func()
}

// Stop shuts the gateway down and waits for it (also registered as cleanup).
func (g *testGateway) Stop() { g.stop() }

// gatewayOpts tweaks a test gateway.
type gatewayOpts struct {
	namespace string // share a namespace between gateways
	mutate    func(*gateway.Config)
	store     func(*redisstore.Options) // tweaks the options of the gateway's store
}

// startPeer starts another gateway, node id node, on of's namespace: the same topics, groups and
// offsets, as a second gateway in front of one Redis.
func startPeer(t *testing.T, b backend, of *testGateway, node int32) *testGateway {
	t.Helper()
	return startGateway(t, b, gatewayOpts{namespace: of.Namespace, mutate: func(c *gateway.Config) { c.NodeID = node }})
}

// startGateway starts a gateway on a fresh namespace of backend b, stopped at test cleanup.
func startGateway(t *testing.T, b backend, opts ...gatewayOpts) *testGateway {
	t.Helper()
	var o gatewayOpts
	if len(opts) > 0 {
		o = opts[0]
	}
	ns := o.namespace
	if ns == "" {
		ns = fmt.Sprintf("it%d-%s", nsSeq.Add(1), sanitize(t.Name()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	so := redisstore.Options{Addrs: b.addrs, Cluster: b.cluster, Namespace: ns}
	if o.store != nil {
		o.store(&so)
	}
	store, err := redisstore.Open(ctx, so)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	cfg := gateway.Config{
		Listen:            "127.0.0.1:0",
		AdminListen:       "127.0.0.1:0",
		AutoCreateTopics:  true,
		DefaultPartitions: 1,
		Groups: coordinator.Config{
			InitialRebalanceDelay: 100 * time.Millisecond,
			MinSessionTimeout:     time.Second,
			MaxSessionTimeout:     5 * time.Minute,
		},
	}
	if o.mutate != nil {
		o.mutate(&cfg)
	}
	return serveGateway(t, store, cfg)
}

// serveGateway runs a gateway on store until test cleanup (the store is closed with it).
func serveGateway(t *testing.T, store *redisstore.Store, cfg gateway.Config) *testGateway {
	t.Helper()
	log := zerolog.New(io.Discard)
	if os.Getenv("KGATE_TEST_LOG") != "" {
		log = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).Level(zerolog.DebugLevel).With().Str("test", t.Name()).Logger()
	}
	g := gateway.New(cfg, store, log)
	if err := g.Listen(context.Background()); err != nil {
		store.Close()
		t.Fatalf("listen: %v", err)
	}
	sctx, scancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(sctx) }()
	<-g.Ready()
	tg := &testGateway{Gateway: g, Addr: g.Addr().String(), Store: store, Namespace: store.Namespace()}
	if a := g.AdminAddr(); a != nil {
		tg.AdminURL = "http://" + a.String()
	}
	var stopped atomic.Bool
	tg.stop = func() {
		if stopped.Swap(true) {
			return
		}
		scancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Errorf("gateway did not stop within 15s")
		}
		store.Close()
	}
	t.Cleanup(tg.stop)
	return tg
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, s)
}

// newClient returns a franz-go client for g, closed at cleanup.
func newClient(t *testing.T, g *testGateway, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	base := []kgo.Opt{kgo.SeedBrokers(g.Addr), kgo.RetryTimeout(20 * time.Second), kgo.RequestTimeoutOverhead(5 * time.Second)}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		t.Fatalf("kgo client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// newAdmin returns a kadm client for g.
func newAdmin(t *testing.T, g *testGateway) *kadm.Client {
	return kadm.NewClient(newClient(t, g))
}

// testCtx is a context bounded for one test step.
func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// blockedClients is how many clients the Redis behind rdb (one server) holds blocked: under CLIENT PAUSE
// WRITE, those that sent a write; INFO itself is no write.
func blockedClients(t *testing.T, ctx context.Context, rdb redis.UniversalClient) int {
	t.Helper()
	info, err := rdb.Info(ctx, "clients").Result()
	if err != nil {
		t.Fatalf("INFO clients: %v", err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "blocked_clients:"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("INFO clients: %q", line)
			}
			return n
		}
	}
	t.Fatalf("INFO clients has no blocked_clients:\n%s", info)
	return 0
}

// wireLog records, per client id, the (API key, version) pairs of the requests a client sent.
type wireLog struct {
	mu   sync.Mutex
	seen map[string]map[int16]map[int16]int // client id -> key -> version -> count
}

// versions returns the sorted versions of API key that clientID sent.
func (w *wireLog) versions(clientID string, key int16) []int16 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var vs []int16
	for v := range w.seen[clientID][key] {
		vs = append(vs, v)
	}
	slices.Sort(vs)
	return vs
}

// count returns how many requests of API key clientID sent, all versions together.
func (w *wireLog) count(clientID string, key int16) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, c := range w.seen[clientID][key] {
		n += c
	}
	return n
}

// String lists the API versions each client sent, one client a line: "client": key:vVERSION×COUNT ...
func (w *wireLog) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var lines []string
	for client, byKey := range w.seen {
		keys := slices.Sorted(maps.Keys(byKey))
		var parts []string
		for _, key := range keys {
			var vv []string
			for _, v := range slices.Sorted(maps.Keys(byKey[key])) {
				vv = append(vv, fmt.Sprintf("v%d×%d", v, byKey[key][v]))
			}
			parts = append(parts, fmt.Sprintf("%d:%s", key, strings.Join(vv, ",")))
		}
		lines = append(lines, fmt.Sprintf("%q: %s", client, strings.Join(parts, " ")))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// startRecordingGateway starts a gateway that advertises a loopback proxy in front of its listener, so
// every connection a client makes (bootstrap, coordinator, partition leaders) goes through the proxy,
// which records the API key, version and client id of each request. Clients must bootstrap to addr.
func startRecordingGateway(t *testing.T, b backend) (g *testGateway, addr string, wl *wireLog) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	addr = ln.Addr().String()
	g = startGateway(t, b, gatewayOpts{mutate: func(c *gateway.Config) { c.Advertised = addr }})
	wl = &wireLog{seen: map[string]map[int16]map[int16]int{}}
	var (
		mu    sync.Mutex
		conns = map[net.Conn]struct{}{}
		wg    sync.WaitGroup
	)
	track := func(cs ...net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if conns == nil {
			return false
		}
		for _, c := range cs {
			conns[c] = struct{}{}
		}
		return true
	}
	pipe := func(c net.Conn) {
		defer wg.Done()
		defer c.Close()
		s, err := net.DialTimeout("tcp", g.Addr, 5*time.Second)
		if err != nil {
			return
		}
		defer s.Close()
		if !track(c, s) {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			io.Copy(c, s)
			c.Close()
		}()
		var size [4]byte
		for {
			if _, err := io.ReadFull(c, size[:]); err != nil {
				return
			}
			n := binary.BigEndian.Uint32(size[:])
			if n < 8 || n > 100<<20 {
				return
			}
			body := make([]byte, n)
			if _, err := io.ReadFull(c, body); err != nil {
				return
			}
			key, ver := int16(binary.BigEndian.Uint16(body[0:])), int16(binary.BigEndian.Uint16(body[2:]))
			var client string
			if n >= 10 {
				if l := int16(binary.BigEndian.Uint16(body[8:])); l > 0 && int(l) <= len(body)-10 {
					client = string(body[10 : 10+int(l)])
				}
			}
			wl.mu.Lock()
			if wl.seen[client] == nil {
				wl.seen[client] = map[int16]map[int16]int{}
			}
			if wl.seen[client][key] == nil {
				wl.seen[client][key] = map[int16]int{}
			}
			wl.seen[client][key][ver]++
			wl.mu.Unlock()
			if _, err := s.Write(append(size[:], body...)); err != nil {
				return
			}
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go pipe(c)
		}
	}()
	t.Cleanup(func() { // runs before the gateway's own cleanup
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		conns = nil
		mu.Unlock()
		wg.Wait()
	})
	return g, addr, wl
}
