package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/internal/redistest"
	"github.com/kgate/kgate/redisstore"
)

// The topic cache reads the registry once for a burst of misses, and once for many lookups waiting on
// an expired view; a topic created through this gateway (invalidate) is found at once, one created
// elsewhere within missReloadGap.
func TestTopicCacheReloadsOnceForMany(t *testing.T) {
	ctx, _, store := embeddedGateway(t, Config{})
	created := func(name string) {
		t.Helper()
		createTopic(t, store, name, 1)
	}
	created("known")
	c := newTopicCache(store, zerolog.Nop())
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
	createTopic(t, store, "t", 1)
	c := newTopicCache(store, zerolog.Nop())
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
	createTopic(t, store, "t", 1)
	c := newTopicCache(store, zerolog.Nop())
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

// A lookup whose own context ended fails alone: its reload's failure is not Redis's, and is not
// shared with the lookups after it.
func TestTopicCacheCancelledLookupNotShared(t *testing.T) {
	ctx, _, store := embeddedGateway(t, Config{})
	createTopic(t, store, "t", 1)
	c := newTopicCache(store, zerolog.Nop())
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.get(gone, "t"); err == nil {
		t.Fatal("lookup with an ended context succeeded")
	}
	if _, err := c.get(ctx, "t"); err != nil {
		t.Fatalf("lookup right after another's context ended: %v", err)
	}
	if _, err := c.all(ctx); err != nil {
		t.Fatalf("all: %v", err)
	}
}

// A create through this gateway invalidates the view while a reload that began before it is still
// reading the registry: that reload's view, without the new topic, does not count as fresh, and the
// new topic is found at once.
func TestTopicCacheInvalidateDuringReload(t *testing.T) {
	m := startMiniredis(t)
	p := redistest.StartProxy(t, m.Addr())
	store := openStoreAt(t, p.Addr(), redisstore.Options{})
	direct := openStoreAt(t, m.Addr(), redisstore.Options{Namespace: store.Namespace()})
	ctx := t.Context()
	c := newTopicCache(store, zerolog.Nop())
	p.Hold()
	reloaded := make(chan error, 1)
	go func() {
		_, err := c.all(ctx) // a reload, held in the proxy
		reloaded <- err
	}()
	time.Sleep(20 * time.Millisecond) // the reload has begun; the lookup below comes within missReloadGap of it
	if err := direct.CreateTopic(ctx, redisstore.Topic{Name: "made-here", Partitions: 1, Created: time.Now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	c.invalidate() // as CreateTopics does once the topic is registered
	p.Release()
	if err := <-reloaded; err != nil {
		t.Fatal(err)
	}
	if _, err := c.get(ctx, "made-here"); err != nil {
		t.Fatalf("topic created through this gateway, right after: %v", err)
	}
}

// Many requests for the whole registry at once (Metadata for all topics from many clients) share
// reloads: each needs one that began after it asked, not one of its own.
func TestTopicCacheAllSharesReloads(t *testing.T) {
	m := startMiniredis(t)
	p := redistest.StartProxy(t, m.Addr())
	store := openStoreAt(t, p.Addr(), redisstore.Options{})
	ctx := t.Context()
	c := newTopicCache(store, zerolog.Nop())
	p.Hold() // the first reload waits until every request has asked
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if _, err := c.all(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	// Released once every request has asked, not after a fixed sleep: one a loaded machine started late
	// asked after the second reload had begun, and needed a third.
	waitFor(t, 10*time.Second, "every request asking for a reload", func() bool { return lookupsInReload() == 20 })
	p.Release()
	wg.Wait()
	c.load.Lock()
	defer c.load.Unlock()
	if c.reloads > 2 { // the one held, and one that began after the others asked
		t.Fatalf("20 requests for all topics read the registry %d times", c.reloads)
	}
}

// lookupsInReload counts the goroutines in topicCache.refreshSince: lookups that have taken their time
// and run or wait for a reload.
func lookupsInReload() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return bytes.Count(buf, []byte("gateway.(*topicCache).refreshSince("))
}

// On Redis Cluster the topic registry is one hash on one master. While that master is away (here its
// key stalls, as a failing master does, and the other keys answer), a gateway goes on serving the
// topics it last read: a fetch of a partition elsewhere is answered, a lookup waits for the reload no
// more than staleWait, not a command timeout, and a name the view lacks is a retriable Redis error,
// not unknown. A view older than maxStaleView is no longer served.
func TestTopicCacheServesLastViewWhileRegistryAway(t *testing.T) {
	m := startMiniredis(t)
	p := redistest.StartProxy(t, m.Addr())
	// Well above staleWait: the fetch's and the lookups' bounds below are fractions of it, which a loaded
	// machine's scheduling must not use up (at 300 ms they left 250 ms and 150 ms).
	const cmdTimeout = time.Second
	store := openStoreAt(t, p.Addr(), redisstore.Options{CommandTimeout: cmdTimeout, DialTimeout: time.Second})
	g, _ := serveOn(t, store, Config{})
	ctx := t.Context()
	createTopic(t, store, "t", 1)
	appendValues(t, ctx, store, "t", 0, 3, 10)
	c := fetchConn(t, g)
	if sp := fetchOne(t, ctx, c, fetchRequest("t", 0, 0, 1<<20, 1<<20)); sp.ErrorCode != 0 || countRecords(sp.RecordBatches) != 3 {
		t.Fatalf("before: error %d, %d records", sp.ErrorCode, countRecords(sp.RecordBatches))
	}
	p.Stall("kgate:topics")
	time.Sleep(topicCacheTTL + 50*time.Millisecond) // the view is stale: a lookup reloads
	start := time.Now()
	sp := fetchOne(t, ctx, c, fetchRequest("t", 0, 0, 1<<20, 1<<20))
	if sp.ErrorCode != 0 || countRecords(sp.RecordBatches) != 3 {
		t.Fatalf("registry away: error %d, %d records; want the 3 records from the last view", sp.ErrorCode, countRecords(sp.RecordBatches))
	}
	select {
	case <-p.Stalled():
	default:
		t.Fatal("the lookup never tried to reload the registry")
	}
	if took := time.Since(start); took >= cmdTimeout {
		t.Fatalf("fetch answered after %v, the command timeout %v", took, cmdTimeout)
	}
	// While the reload waits on Redis, and within staleRetry of its failure, lookups do not wait.
	start = time.Now()
	for range 20 {
		if _, err := g.topics.get(ctx, "t"); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); took > cmdTimeout/2 {
		t.Fatalf("20 lookups served from the last view took %v", took)
	}
	if _, err := g.topics.get(ctx, "never-created"); err == nil || errors.Is(err, redisstore.ErrUnknownTopic) {
		t.Fatalf("a name the last view lacks: %v, want the Redis failure", err)
	}
	// An admin request that fails meanwhile (its registry write cannot get through either) leaves the
	// view served: it threw the view away, and every fetch failed after it.
	cp := kmsg.NewPtrCreatePartitionsRequest()
	cp.TimeoutMillis = 1000
	cpt := kmsg.NewCreatePartitionsRequestTopic()
	cpt.Topic, cpt.Count = "t", 2
	cp.Topics = append(cp.Topics, cpt)
	resp, err := c.createPartitions(ctx, cp)
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.(*kmsg.CreatePartitionsResponse).Topics[0].ErrorCode; code == 0 {
		t.Fatal("CreatePartitions succeeded with the registry away")
	}
	time.Sleep(staleRetry) // the next lookup tries Redis again, and goes on with the view
	if sp := fetchOne(t, ctx, c, fetchRequest("t", 0, 0, 1<<20, 1<<20)); sp.ErrorCode != 0 || countRecords(sp.RecordBatches) != 3 {
		t.Fatalf("after a failed CreatePartitions: error %d, %d records; want the last view still served", sp.ErrorCode, countRecords(sp.RecordBatches))
	}
	g.topics.mu.Lock()
	g.topics.loaded = time.Now().Add(-maxStaleView)
	g.topics.mu.Unlock()
	if _, err := g.topics.get(ctx, "t"); err == nil {
		t.Fatal("a view older than maxStaleView was served")
	}
}

// Misses within missReloadGap of the end of the last reload are answered unknown without another: from
// its beginning, a reload slower than the gap (a slow Redis, a large registry) left every miss after
// it reloading the whole registry, one after the other (20 unknown names took 3 s and 21 reloads).
func TestTopicCacheSlowReloadSharesMisses(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{})
	createTopic(t, store, "known", 1)
	c := g.topics
	if _, err := c.get(ctx, "known"); err != nil {
		t.Fatal(err)
	}
	c.load.Lock()
	c.mu.Lock()
	c.loaded = c.loaded.Add(-150 * time.Millisecond) // as if that reload had taken 150 ms
	reloads := c.reloads
	c.mu.Unlock()
	c.load.Unlock()
	for i := range 20 {
		if _, err := c.get(ctx, fmt.Sprintf("unknown-%d", i)); !errors.Is(err, redisstore.ErrUnknownTopic) {
			t.Fatalf("unknown name %d: %v", i, err)
		}
	}
	c.load.Lock()
	defer c.load.Unlock()
	if n := c.reloads - reloads; n > 0 {
		t.Fatalf("20 misses right after a slow reload reloaded %d times", n)
	}
}

// A panic in a background reload of a stale view (a registry the parsing trips on) fails that reload
// as an unreachable Redis would, where it ended the process: the lookup goes on with the view, and the
// next reload waits staleRetry.
func TestTopicCacheReloadPanicServesView(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{})
	createTopic(t, store, "known", 1)
	c := g.topics
	if _, err := c.get(ctx, "known"); err != nil {
		t.Fatal(err)
	}
	store.Client().AddHook(panicOn("hgetall"))
	c.mu.Lock()
	c.loaded = time.Now().Add(-topicCacheTTL) // stale, still servable
	c.mu.Unlock()
	before := testutil.ToFloat64(mPanics.WithLabelValues("topic_reload"))
	for i := range 3 {
		if tp, err := c.get(ctx, "known"); err != nil || tp.Name != "known" {
			t.Fatalf("lookup %d after a panicking reload: %+v, %v; want the view's topic", i, tp, err)
		}
	}
	c.bg.Wait()
	if got := testutil.ToFloat64(mPanics.WithLabelValues("topic_reload")) - before; got != 1 {
		t.Errorf("kgate_panics_recovered_total{where=topic_reload} grew by %v, want 1 (one reload within staleRetry)", got)
	}
}
