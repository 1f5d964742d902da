package gateway

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/rs/zerolog"

	"github.com/kgate/kgate/redisstore"
)

// startMiniredis starts a miniredis on 127.0.0.1, closed at cleanup.
func startMiniredis(t *testing.T) *miniredis.Miniredis {
	t.Helper()
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// openStoreAt opens a store on the Redis at addr, closed at cleanup.
func openStoreAt(t *testing.T, addr string, o redisstore.Options) *redisstore.Store {
	t.Helper()
	o.Addrs = []string{addr}
	s, err := redisstore.Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// serveOn serves a gateway with cfg (on 127.0.0.1:0 unless cfg.Listen says otherwise) over store and
// returns it once it serves; stop begins its shutdown and returns once Serve has (startServing).
func serveOn(t *testing.T, store *redisstore.Store, cfg Config) (g *Gateway, stop context.CancelFunc) {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	g = New(cfg, store, zerolog.Nop())
	return g, startServing(t, g)
}

// startServing runs g.Serve (which listens unless g already does) until the returned cancel (or the
// test's end), which waits for Serve.
func startServing(t testing.TB, g *Gateway) context.CancelFunc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx) }()
	select {
	case <-g.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("Serve: %v", err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitFor polls cond until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
	}
}

// createTopic registers a topic of partitions partitions in store, failing the test otherwise.
func createTopic(t *testing.T, store *redisstore.Store, name string, partitions int32) {
	t.Helper()
	if err := store.CreateTopic(t.Context(), redisstore.Topic{Name: name, Partitions: partitions, Created: time.Now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
}
