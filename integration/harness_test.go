package integration

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
	store, err := redisstore.Open(ctx, redisstore.Options{Addrs: b.addrs, Cluster: b.cluster, Namespace: ns})
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
	log := zerolog.New(io.Discard)
	if os.Getenv("KGATE_TEST_LOG") != "" {
		log = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).Level(zerolog.DebugLevel).With().Str("test", t.Name()).Logger()
	}
	g := gateway.New(cfg, store, log)
	if err := g.Listen(); err != nil {
		store.Close()
		t.Fatalf("listen: %v", err)
	}
	sctx, scancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(sctx) }()
	<-g.Ready()
	tg := &testGateway{Gateway: g, Addr: g.Addr().String(), Store: store, Namespace: ns}
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
