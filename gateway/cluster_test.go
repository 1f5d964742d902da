package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/internal/redistest"
	"github.com/kgate/kgate/redisstore"
)

// TestPublishAppendWhenQueueFull: an append notification that finds the publisher's queue full is
// not dropped: it is published with a later batch, so other gateways' long-polls still wake.
func TestPublishAppendWhenQueueFull(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{})
	ctx, cancel := context.WithCancel(ctx)
	g.multi.Store(true)
	for len(g.appends) < cap(g.appends) {
		g.appends <- redisstore.AppendMessage("fill", 0)
	}
	g.publishAppend("late", 3)

	var (
		mu  sync.Mutex
		got = map[partKey]bool{}
	)
	subscribed := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		_ = store.SubscribeAppends(ctx, func(topic string, p int32) {
			mu.Lock()
			got[partKey{topic, p}] = true
			mu.Unlock()
		}, func() {})
	})
	// The subscription is live once a probe message comes through.
	wg.Go(func() {
		for ctx.Err() == nil {
			_ = store.PublishAppends(ctx, []string{redisstore.AppendMessage("probe", 0)})
			mu.Lock()
			ok := got[partKey{"probe", 0}]
			mu.Unlock()
			if ok {
				close(subscribed)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	select {
	case <-subscribed:
	case <-ctx.Done():
		t.Fatal("subscription never live")
	}
	wg.Go(func() { g.runAppendPublisher(ctx) })
	for ctx.Err() == nil {
		mu.Lock()
		ok := got[partKey{"late", 3}]
		mu.Unlock()
		if ok {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the notification that found the queue full was never published")
}

// groupOn returns a group that the set of gateways ids (sorted) places on ids[idx].
func groupOn(ids []int32, idx int) string {
	for i := 0; ; i++ {
		if g := "group-" + strconv.Itoa(i); int(fnv32a(g)%uint32(len(ids))) == idx {
			return g
		}
	}
}

// TestFenceBeforePeersTakeOver: a gateway cut off from Redis stops coordinating its groups before
// Redis, and so any peer, considers it down, however long a Redis command may block (here
// redis.command_timeout is far above the node timeout); with Redis back it coordinates them again.
func TestFenceBeforePeersTakeOver(t *testing.T) {
	m := startMiniredis(t)
	p := redistest.StartProxy(t, m.Addr())
	store := openStoreAt(t, p.Addr(), redisstore.Options{CommandTimeout: 30 * time.Second, DialTimeout: time.Second})
	peers := openStoreAt(t, m.Addr(), redisstore.Options{}) // Redis as node 2 sees it
	const hb, nodeTimeout = 100 * time.Millisecond, 400 * time.Millisecond

	// Node 2, a live peer heartbeating directly.
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		stop()
		wg.Wait()
	})
	peer := redisstore.GatewayInfo{NodeID: 2, Instance: "peer", Advertised: "127.0.0.1:1"}
	if err := peers.RegisterGateway(ctx, peer, nodeTimeout); err != nil {
		t.Fatal(err)
	}
	wg.Go(func() {
		for ctx.Err() == nil {
			_ = peers.RegisterGateway(ctx, peer, nodeTimeout)
			time.Sleep(hb / 2)
		}
	})

	g, _ := serveOn(t, store, Config{NodeID: 1, HeartbeatInterval: hb, NodeTimeout: nodeTimeout})
	group := groupOn([]int32{1, 2}, 0)
	waitFor(t, 10*time.Second, "node 1 to coordinate "+group, func() bool { return g.notCoordinator(group) == 0 })

	p.Freeze(true)
	// Sampled as a peer decides: node 1's heartbeat older than the node timeout by Redis's clock. Each
	// check of node 1 follows the read that found it down, so it must already have stopped.
	down := 0
	waitFor(t, 10*time.Second, "Redis to consider node 1 down", func() bool {
		regs, now, err := peers.Gateways(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range regs {
			if r.NodeID != 1 || now-r.Heartbeat < nodeTimeout.Milliseconds() {
				continue
			}
			if code := g.notCoordinator(group); code == 0 {
				t.Fatalf("Redis shows node 1's heartbeat %d ms old (node timeout %v), so peers take %s over, but node 1 still coordinates it",
					now-r.Heartbeat, nodeTimeout, group)
			}
			down++
		}
		return down >= 20 // and for a while after
	})

	p.Freeze(false)
	waitFor(t, 10*time.Second, "node 1 to coordinate "+group+" again", func() bool { return g.notCoordinator(group) == 0 })
}

// TestTopologyRefreshWhileGatewaysKeyUnreachable: the Redis Cluster slot map is reloaded every
// heartbeat interval even while the master holding the gateways key does not answer (the membership
// loop waits on it), so a replica promoted meanwhile is found.
func TestTopologyRefreshWhileGatewaysKeyUnreachable(t *testing.T) {
	m := startMiniredis(t)
	p := redistest.StartProxy(t, m.Addr())
	// Each heartbeat now waits a whole command timeout (the lease is longer): a refresh made in turn
	// with the heartbeats would come once per such wait (twice that with the old code).
	store := openStoreAt(t, p.Addr(), redisstore.Options{Cluster: true, CommandTimeout: 3 * time.Second, DialTimeout: time.Second})
	serveOn(t, store, Config{HeartbeatInterval: 50 * time.Millisecond, NodeTimeout: 20 * time.Second})

	p.Stall("kgate:gateways")
	select {
	case <-p.Stalled():
	case <-time.After(10 * time.Second):
		t.Fatal("no command for the gateways key")
	}
	// A reload already under way when the stall began may still finish (go-redis runs at most one
	// more after it); later ones come from refreshes made while the membership loop waits.
	base := p.SlotsAnswered()
	waitFor(t, 4*time.Second, "slot map reloads while the gateways key does not answer", func() bool {
		return p.SlotsAnswered() >= base+5
	})
}

// TestRegisterWaitsOutCrashedPredecessor: a gateway restarted after a crash waits for its
// predecessor's registration to expire, up to a node timeout, even when that is longer than 10 s.
func TestRegisterWaitsOutCrashedPredecessor(t *testing.T) {
	m := startMiniredis(t)
	store := openStoreAt(t, m.Addr(), redisstore.Options{})
	const nodeTimeout = 12 * time.Second
	// The predecessor's last heartbeat, stamped so that it expires 10.5 s from now.
	last := time.Now().Add(10*time.Second + 500*time.Millisecond - nodeTimeout)
	b, err := json.Marshal(redisstore.GatewayInfo{NodeID: 0, Instance: "crashed", Advertised: "127.0.0.1:1", Heartbeat: last.UnixMilli()})
	if err != nil {
		t.Fatal(err)
	}
	m.HSet("kgate:gateways", "0", string(b))

	g := New(Config{Listen: "127.0.0.1:0", NodeTimeout: nodeTimeout, HeartbeatInterval: 200 * time.Millisecond}, store, zerolog.Nop())
	if err := g.Listen(context.Background()); err != nil {
		t.Fatalf("restart after a crash: %v", err)
	}
	g.ln.Close()
}

// TestListenCanceledWhileWaitingForNodeID: the caller's context (SIGTERM) ends the wait for a node id
// still in use.
func TestListenCanceledWhileWaitingForNodeID(t *testing.T) {
	m := startMiniredis(t)
	store := openStoreAt(t, m.Addr(), redisstore.Options{})
	const nodeTimeout = time.Minute
	other := redisstore.GatewayInfo{NodeID: 0, Instance: "other", Advertised: "127.0.0.1:1"}
	if err := store.RegisterGateway(context.Background(), other, nodeTimeout); err != nil {
		t.Fatal(err)
	}
	// Cancelled once it waits: when it logs that its first attempt was refused.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waiting := logWatch{match: "node id in use", fn: cancel}
	g := New(Config{Listen: "127.0.0.1:0", NodeTimeout: nodeTimeout, HeartbeatInterval: 50 * time.Millisecond}, store, zerolog.New(&waiting))
	done := make(chan error, 1)
	go func() { done <- g.Listen(ctx) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || !errors.Is(err, redisstore.ErrNodeIDInUse) {
			t.Fatalf("Listen canceled while the node id is in use: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Listen did not return when its context was canceled")
	}
}

// logWatch is a log writer that calls fn at the first line containing match.
type logWatch struct {
	match string
	fn    func()
	once  sync.Once
}

func (w *logWatch) Write(p []byte) (int, error) {
	if strings.Contains(string(p), w.match) {
		w.once.Do(w.fn)
	}
	return len(p), nil
}

// TestAppendWakeUpRetried: a PUBLISH of append notifications that fails (Redis unreachable for a
// moment) is sent again once Redis answers, even when no append follows; before, it waited for this
// gateway's next append, and the other gateways' long-polls for those records waited out max_wait.
func TestAppendWakeUpRetried(t *testing.T) {
	m := startMiniredis(t)
	p := redistest.StartProxy(t, m.Addr())
	store := openStoreAt(t, p.Addr(), redisstore.Options{CommandTimeout: 300 * time.Millisecond, DialTimeout: 300 * time.Millisecond})
	// A static peer makes this gateway publish its appends (more than one live gateway).
	publishFailed := make(chan struct{})
	failedLog := logWatch{match: "publish appends", fn: func() { close(publishFailed) }}
	g := New(Config{Listen: "127.0.0.1:0", NodeID: 1, Peers: []Peer{{ID: 2, Addr: "127.0.0.1:1"}}}, store, zerolog.New(&failedLog))
	startServing(t, g)
	waitFor(t, 10*time.Second, "the gateway to publish appends", g.multi.Load)

	sub := openStoreAt(t, m.Addr(), redisstore.Options{Namespace: store.Namespace()})
	got := make(chan string, 16)
	ctx, cancel := context.WithCancel(t.Context())
	subscribed := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = sub.SubscribeAppends(ctx, func(topic string, partition int32) { got <- topic }, func() {
			select {
			case subscribed <- struct{}{}:
			default:
			}
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	// A notice published before the subscription is made never comes: a fixed sleep here let a slow
	// machine fail the test.
	select {
	case <-subscribed:
	case <-time.After(10 * time.Second):
		t.Fatal("the subscription to append notices was not made within 10 s")
	}

	p.Freeze(true)
	g.publishAppend("woken", 0)
	// Unfrozen once the PUBLISH has timed out (300 ms) and been kept for later, not after a fixed
	// sleep: too short on a slow machine, the first PUBLISH got through and the retry went untested.
	select {
	case <-publishFailed:
	case <-time.After(10 * time.Second):
		t.Fatal("the PUBLISH to a frozen Redis did not fail within 10 s")
	}
	p.Freeze(false)
	select {
	case topic := <-got:
		if topic != "woken" {
			t.Fatalf("notification for %q, want woken", topic)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the failed notification was not sent again once Redis answered")
	}
}

// TestStaleViewStopsHeartbeats: a gateway whose view of the registry is stale coordinates nothing, and
// so stops renewing its registration: its peers then take its groups over after a node timeout
// instead of sending their clients to it for as long as its heartbeats got through.
func TestStaleViewStopsHeartbeats(t *testing.T) {
	ctx, _, store := embeddedGateway(t, Config{})
	// Intervals long enough that the membership loop does not run during the test.
	g, _ := serveOn(t, store, Config{NodeID: 1, HeartbeatInterval: time.Hour, NodeTimeout: 2 * time.Hour})
	beat := func() int64 {
		t.Helper()
		regs, _, err := store.Gateways(ctx)
		if err != nil || len(regs) != 1 {
			t.Fatalf("registrations %+v, %v", regs, err)
		}
		return regs[0].Heartbeat
	}
	first := beat()
	time.Sleep(5 * time.Millisecond)
	g.heartbeat(ctx)
	fresh := beat()
	if fresh <= first {
		t.Fatalf("a fresh view's heartbeat did not renew the registration (%d, then %d)", first, fresh)
	}
	g.nodes.mu.Lock()
	g.nodes.viewedAt = time.Now().Add(-3 * time.Hour)
	g.nodes.mu.Unlock()
	time.Sleep(5 * time.Millisecond)
	g.heartbeat(ctx)
	if b := beat(); b != fresh {
		t.Fatalf("a stale view's heartbeat renewed the registration (%d, then %d)", fresh, b)
	}
}

// TestResubscribeWakesLongPolls: when the subscription to other gateways' appends is made again after
// it was lost, the notifications published meanwhile never come; every waiting fetch then reads
// again, instead of waiting out its max_wait with records in Redis.
func TestResubscribeWakesLongPolls(t *testing.T) {
	srv := redisServer(t)
	store := openStoreAt(t, srv.Addr, redisstore.Options{})
	ctx := t.Context()
	g, _ := serveOn(t, store, Config{})
	createTopic(t, store, "resub", 1)
	subscribers := func() int {
		list, _ := store.Client().Do(ctx, "CLIENT", "LIST", "TYPE", "pubsub").Text()
		return strings.Count(list, "id=")
	}
	waitFor(t, 10*time.Second, "the gateway's subscription", func() bool { return subscribers() > 0 })
	req := fetchRequest("resub", 0, 0, 1<<20, 1<<20)
	req.MaxWaitMillis = 10_000
	waiting := make(chan struct{})
	var once sync.Once
	fetchWaits = func(keys []partKey) {
		if len(keys) == 1 && keys[0].topic == "resub" {
			once.Do(func() { close(waiting) })
		}
	}
	t.Cleanup(func() { fetchWaits = nil })
	answered := make(chan int, 1)
	start := time.Now()
	go func() {
		resp, err := fetchConn(t, g).fetch(ctx, req)
		if err != nil {
			answered <- -1
			return
		}
		answered <- len(resp.(*kmsg.FetchResponse).Topics[0].Partitions[0].RecordBatches)
	}()
	select { // the fetch has read nothing and waits
	case <-waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("the fetch never began waiting")
	}
	// Records appended elsewhere, their wake-up lost with the subscription.
	appendValues(t, ctx, store, "resub", 0, 3, 10)
	if err := store.Client().Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-answered:
		if took := time.Since(start); n <= 0 || took > 5*time.Second {
			t.Fatalf("answered after %v with %d record bytes", took, n)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the fetch did not answer")
	}
}

// failFirstGatewaysRead fails the first read of the gateway registry (the registry script, EVALSHA or
// EVAL with the gateways key alone), as a transient Redis error would.
type failFirstGatewaysRead struct{ done *atomic.Bool }

func (failFirstGatewaysRead) DialHook(next redis.DialHook) redis.DialHook { return next }
func (failFirstGatewaysRead) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h failFirstGatewaysRead) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		a := cmd.Args()
		if len(a) == 4 && (a[0] == "evalsha" || a[0] == "eval") && fmt.Sprint(a[3]) == "kgate:gateways" &&
			h.done.CompareAndSwap(false, true) {
			err := errors.New("injected: registry read failed")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// TestJoinHoldAfterFailedFirstRead: a gateway joining a live peer holds off coordinating for two
// intervals from its first view of the registry, also when the read at its registration failed and
// that first view comes at the membership loop's next refresh (it claimed its groups at once then,
// while the peer, not having seen it yet, still coordinated them).
func TestJoinHoldAfterFailedFirstRead(t *testing.T) {
	for _, failFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("firstReadFails=%v", failFirst), func(t *testing.T) {
			ctx := context.Background()
			m := startMiniredis(t)
			store := openStoreAt(t, m.Addr(), redisstore.Options{})
			const hb, nodeTimeout = 500 * time.Millisecond, 3 * time.Second
			peer := redisstore.GatewayInfo{NodeID: 2, Instance: "peer", Advertised: "127.0.0.1:1"}
			if err := store.RegisterGateway(ctx, peer, nodeTimeout); err != nil {
				t.Fatal(err)
			}
			var injected atomic.Bool
			if failFirst {
				store.Client().AddHook(failFirstGatewaysRead{&injected})
			}
			g := New(Config{Listen: "127.0.0.1:0", NodeID: 1, HeartbeatInterval: hb, NodeTimeout: nodeTimeout}, store, zerolog.Nop())
			if err := g.Listen(ctx); err != nil {
				t.Fatal(err)
			}
			defer g.ln.Close()
			if failFirst && !injected.Load() {
				t.Fatal("the registry read was not failed")
			}
			group := groupOn([]int32{1, 2}, 0) // node 1's under the set {1, 2}
			if g.nodes.isCoordinator(group) {
				t.Fatalf("right after registration node 1 claims %s", group)
			}
			g.refreshMembership(ctx) // the membership loop's first refresh, one interval later
			if len(g.nodes.alive()) != 2 {
				t.Fatalf("view: %+v", g.nodes.all())
			}
			if g.nodes.isCoordinator(group) {
				t.Fatalf("node 1 claims %s at its first view of the registry, without the join hold", group)
			}
		})
	}
}
