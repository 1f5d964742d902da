package redisstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kgate/kgate/internal/redistest"
)

// TestOpenClusterNodeAsStandalone: a Redis Cluster node opened as a single server is refused, naming
// it. It used to open, and then only the keys of that node's slots worked: a gateway answered /readyz
// and created topics while appends to partitions of other slots were refused (MOVED) for good.
func TestOpenClusterNodeAsStandalone(t *testing.T) {
	if cluster == nil {
		t.Skip("KGATE_SKIP_REDIS=1")
	}
	node := cluster.Addrs()[0]
	s, err := Open(t.Context(), Options{Addrs: []string{node}, Namespace: testNamespace(t)})
	if err == nil {
		s.Close()
		t.Fatalf("Open of cluster node %s without Cluster succeeded", node)
	}
	if !errors.Is(err, ErrClusterNode) {
		t.Fatalf("Open: %v, want ErrClusterNode", err)
	}
	if got := err.Error(); !strings.Contains(got, node) {
		t.Errorf("error %q does not name %s", got, node)
	}
	// The same node as a cluster seed, and a standalone server, open.
	openStore(t, Options{Addrs: []string{node}, Cluster: true})
	openStore(t, Options{Addrs: []string{standalone.Addr}})
}

// TestOpenEndsWithItsContext: Open gives up when its context ends, even while the server holds its
// reply back (the client library reads until its own deadline, here a minute past the dial's).
func TestOpenEndsWithItsContext(t *testing.T) {
	silent := redistest.StartSilent(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		s, err := Open(ctx, Options{Addrs: []string{silent.Addr}, DialTimeout: time.Minute, CommandTimeout: time.Minute})
		if err == nil {
			s.Close()
		}
		done <- err
	}()
	select {
	case <-silent.Accepted:
	case err := <-done:
		t.Fatalf("Open returned before connecting: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Open: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Open still running 10 s after its context ended")
	}
}
