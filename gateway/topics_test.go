package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kgate/kgate/redisstore"
)

// The topic cache reads the registry once for a burst of misses, and once for many lookups waiting on
// an expired view; a topic created through this gateway (invalidate) is found at once, one created
// elsewhere within missReloadGap.
func TestTopicCacheReloadsOnceForMany(t *testing.T) {
	ctx, _, store := embeddedGateway(t, Config{})
	created := func(name string) {
		t.Helper()
		if err := store.CreateTopic(ctx, redisstore.Topic{Name: name, Partitions: 1, Created: time.Now().UnixMilli()}); err != nil {
			t.Fatal(err)
		}
	}
	created("known")
	c := newTopicCache(store)
	reloads := func() int {
		c.load.Lock()
		defer c.load.Unlock()
		return c.reloads
	}

	for i := range 1000 {
		if _, err := c.get(ctx, fmt.Sprintf("unknown-%d", i)); !errors.Is(err, redisstore.ErrUnknownTopic) {
			t.Fatalf("unknown-%d: %v", i, err)
		}
	}
	if n := reloads(); n > 5 { // 1, or a few on a machine that paused for missReloadGap
		t.Fatalf("1,000 unknown names read the registry %d times", n)
	}

	c.invalidate()
	before := reloads()
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if _, err := c.get(ctx, "known"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := reloads() - before; n < 1 || n > 2 {
		t.Fatalf("50 lookups on an expired view read the registry %d times, want 1 or 2", n)
	}

	created("made-here")
	c.invalidate()
	if _, err := c.get(ctx, "made-here"); err != nil {
		t.Fatalf("topic created through this gateway: %v", err)
	}
	created("made-elsewhere")
	time.Sleep(missReloadGap + 50*time.Millisecond)
	if _, err := c.get(ctx, "made-elsewhere"); err != nil {
		t.Fatalf("topic created elsewhere, after %v: %v", missReloadGap, err)
	}
}

// While Redis does not answer, lookups waiting on an expired view share the failure of one registry
// read: each answers within about one command timeout, not one more timeout per lookup before it.
func TestTopicCacheSharesAFailedReload(t *testing.T) {
	srv := redisServer(t)
	const cmdTimeout = 300 * time.Millisecond
	ctx := context.Background()
	store, err := redisstore.Open(ctx, redisstore.Options{Addrs: []string{srv.Addr}, CommandTimeout: cmdTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if err := store.CreateTopic(ctx, redisstore.Topic{Name: "t", Partitions: 1, Created: time.Now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	c := newTopicCache(store)
	if _, err := c.get(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Skip(err)
	}
	defer srv.Resume()
	c.invalidate()
	const n = 6
	took := make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			start := time.Now()
			_, err := c.get(ctx, "t") // request contexts have no deadline of their own
			took[i] = time.Since(start)
			if err == nil {
				t.Error("lookup succeeded with Redis paused")
			}
		})
	}
	wg.Wait()
	// Lookups that asked after the first read began share a second one: two timeouts, not six.
	if worst := slices.Max(took); worst > 2*cmdTimeout+time.Second {
		t.Fatalf("lookups answered after %v with a command timeout of %v", took, cmdTimeout)
	}
	// A request looks its topics up one after the other: those after the first failed lookup share its
	// failure too, and the request answers after one timeout, not one per topic.
	c.invalidate()
	start := time.Now()
	for i := range 6 {
		if _, err := c.get(ctx, fmt.Sprintf("topic-%d", i)); err == nil {
			t.Fatal("lookup succeeded with Redis paused")
		}
	}
	if took := time.Since(start); took > cmdTimeout+time.Second {
		t.Fatalf("six lookups in a row answered after %v with a command timeout of %v", took, cmdTimeout)
	}
}

// A read that finds its topic's partitions gone reloads the registry through invalidateStale, which
// does so at most once per missReloadGap: a topic half deleted (its partitions gone, its registry
// entry not yet) does not have every failing fetch read the whole registry.
func TestTopicCacheInvalidateStaleBounded(t *testing.T) {
	ctx, _, store := embeddedGateway(t, Config{})
	if err := store.CreateTopic(ctx, redisstore.Topic{Name: "t", Partitions: 1, Created: time.Now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	c := newTopicCache(store)
	reloads := func() int {
		c.load.Lock()
		defer c.load.Unlock()
		return c.reloads
	}
	if _, err := c.get(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	before := reloads()
	for range 200 {
		c.invalidateStale()
		if _, err := c.get(ctx, "t"); err != nil {
			t.Fatal(err)
		}
	}
	if n := reloads() - before; n > 3 { // 0, or a few on a machine that paused for missReloadGap
		t.Fatalf("200 failing reads in a row reloaded the registry %d times", n)
	}
	time.Sleep(missReloadGap + 20*time.Millisecond)
	before = reloads()
	c.invalidateStale()
	if _, err := c.get(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if n := reloads() - before; n != 1 {
		t.Fatalf("a view older than missReloadGap was reloaded %d times, want 1", n)
	}
}
