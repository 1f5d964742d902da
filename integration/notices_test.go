package integration

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/gateway"
	"github.com/kgate/kgate/internal/redistest"
	"github.com/kgate/kgate/redisstore"
)

// Append notices between gateways on a Redis Cluster: sharded pub/sub once every live gateway hears
// it, the global channel while one (of an older version) does not.

// noticeWatch counts the append notice messages of a namespace on the global channel (what a gateway of
// an older version hears) and on one sharded channel, by partition.
type noticeWatch struct {
	mu     sync.Mutex
	counts map[string]int // "global topic/partition" or "sharded topic/partition"
}

func (w *noticeWatch) count(kind, part string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.counts[kind+" "+part]
}

// watchNotices subscribes to st's global notice channel and to its sharded channel shard, until t ends.
func watchNotices(t *testing.T, addrs []string, st *redisstore.Store, shard int) *noticeWatch {
	t.Helper()
	w := &noticeWatch{counts: map[string]int{}}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	var wg sync.WaitGroup
	t.Cleanup(func() { c.Close(); wg.Wait() })
	for _, kind := range []string{"global", "sharded"} {
		var ps *redis.PubSub
		if kind == "global" {
			ps = c.Subscribe(t.Context(), st.AppendChannel())
		} else {
			ps = c.SSubscribe(t.Context(), st.ShardedAppendChannel(shard))
		}
		t.Cleanup(func() { ps.Close() })
		if _, err := ps.Receive(t.Context()); err != nil { // the subscription's confirmation
			t.Fatalf("%s subscription: %v", kind, err)
		}
		ch := ps.Channel()
		wg.Go(func() { // ends when ps is closed
			for m := range ch {
				w.mu.Lock()
				for _, line := range strings.Split(m.Payload, "\n") {
					w.counts[kind+" "+strings.Replace(line, "\x00", "/", 1)]++
				}
				w.mu.Unlock()
			}
		})
	}
	return w
}

// awaitNoticeKind produces to partition 0 of topic through prod until a notice of it comes on kind's
// channel: the gateway behind prod publishes there from then on.
func awaitNoticeKind(t *testing.T, prod *rawConn, w *noticeWatch, kind, topic string) {
	t.Helper()
	before := w.count(kind, topic+"/0")
	deadline := time.Now().Add(15 * time.Second)
	for {
		produceValues(t, prod, topic, "probe")
		for wait := time.Now().Add(200 * time.Millisecond); time.Now().Before(wait); time.Sleep(10 * time.Millisecond) {
			if w.count(kind, topic+"/0") > before {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no notice of %s on the %s channel within 15 s", topic, kind)
		}
	}
}

// longPollWoken has a fetch long-poll (10 s) at the end of partition 0 of topic through gateway to,
// appends one record through prod once the fetch waits (MONITOR on the partition's master shows its
// read), and returns how long after the append the fetch answered with it.
func longPollWoken(t *testing.T, ctx context.Context, to *testGateway, prod *rawConn, topic string) time.Duration {
	t.Helper()
	cons := dialRaw(t, to.Addr)
	hw := fetchPart(t, roundTrip[*kmsg.FetchResponse](cons, 12, fetchReq(topic, [16]byte{}, 0, 0, 1<<20))).HighWatermark
	metaKey := to.Namespace + ":meta:{" + topic + ":0}"
	master, err := to.Store.Client().(*redis.ClusterClient).MasterForKey(ctx, metaKey)
	if err != nil {
		t.Fatal(err)
	}
	mon := startMonitor(t, master.Options().Addr)
	req := fetchReq(topic, [16]byte{}, 0, hw, 1<<20)
	req.MaxWaitMillis, req.MinBytes = 10_000, 1
	req.SetVersion(12)
	corr := cons.send(req)
	mon.await(func(line string) bool { return isHMGET(line, metaKey) }) // read, found nothing, waits
	sent := time.Now()
	produceValues(t, prod, topic, "woken")
	resp := kmsg.NewPtrFetchResponse()
	resp.SetVersion(12)
	if got := cons.read(resp); got != corr {
		t.Fatalf("fetch response correlation id %d, want %d", got, corr)
	}
	took := time.Since(sent)
	if got, want := fetchedValues(t, fetchPart(t, resp)), fmt.Sprintf("%d:woken", hw); len(got) != 1 || got[0] != want {
		t.Fatalf("long-poll answered %v, want [%s]", got, want)
	}
	return took
}

// wakeBound is how soon a long-poll on one gateway must answer an append through another; its max wait
// is 10 s.
const wakeBound = 2 * time.Second

// clusterPair starts gateways A (node 0) and B (node 1) on one namespace of the shared cluster, and
// topic (one partition).
func clusterPair(t *testing.T, ctx context.Context, topic string) (a, b *testGateway) {
	t.Helper()
	be := backend{name: "cluster", addrs: cluster.Addrs(), cluster: true}
	a = startGateway(t, be)
	b = startPeer(t, be, a, 1)
	mustCreateTopics(t, ctx, newAdmin(t, a), 1, nil, topic)
	return a, b
}

// TestAppendWakeSharded: on a Redis Cluster two gateways of this version publish append notices over
// sharded pub/sub, and a fetch long-polling on B answers an append through A within wakeBound: the
// notice came on A's sharded channel, none on the global one, and every gateway subscribes to that
// channel on the master of its slot.
func TestAppendWakeSharded(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	a, b := clusterPair(t, ctx, "wake")
	w := watchNotices(t, cluster.Addrs(), a.Store, redisstore.AppendShard(0))
	prod := dialRaw(t, a.Addr)
	awaitNoticeKind(t, prod, w, "sharded", "wake")

	for attempt := 1; ; attempt++ {
		global, sharded := w.count("global", "wake/0"), w.count("sharded", "wake/0")
		excused := watchFallbackCauses(t, ctx, a.Store, 1) // B's node id
		if took := longPollWoken(t, ctx, b, prod, "wake"); took > wakeBound {
			t.Fatalf("the long-poll on B answered %v after the append through A, want within %v", took, wakeBound)
		}
		waitFor(t, 5*time.Second, "the notice on the sharded channel", func() bool {
			return w.count("sharded", "wake/0") > sharded || w.count("global", "wake/0") > global
		})
		cause := excused()
		n := w.count("global", "wake/0") - global
		if n == 0 {
			break
		}
		// A Redis hiccup (B's subscription lost for a moment, the cluster down for a moment) rightly
		// sends A's notices to the global channel: measured again, in a window without one.
		if cause == "" || attempt == 3 {
			t.Fatalf("%d notices on the global channel while every gateway hears the sharded ones (attempt %d; hiccup seen: %q)", n, attempt, cause)
		}
		t.Logf("a notice on the global channel after %s; measuring again", cause)
		awaitNoticeKind(t, prod, w, "sharded", "wake")
	}
	ch := a.Store.ShardedAppendChannel(redisstore.AppendShard(0))
	master, err := a.Store.Client().(*redis.ClusterClient).MasterForKey(ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	mc := redis.NewClient(&redis.Options{Addr: master.Options().Addr})
	defer mc.Close()
	// B hears the sharded channels (A publishes there), but A's own subscriptions may still be under way.
	var subs map[string]int64
	waitFor(t, 10*time.Second, "A, B and this test subscribed on the channel's master", func() bool {
		if subs, err = mc.PubSubShardNumSub(ctx, ch).Result(); err != nil {
			t.Fatalf("PUBSUB SHARDNUMSUB %s on its master: %v", ch, err)
		}
		return subs[ch] >= 3
	})
	if subs[ch] != 3 {
		t.Fatalf("PUBSUB SHARDNUMSUB %s on its master: %v; want 3 (A, B and this test)", ch, subs)
	}

	// Stopped, the gateways leave no sharded subscription behind: no goroutine, nothing on the server.
	a.Stop()
	b.Stop()
	for _, fn := range []string{"gateway.(*Gateway).runShardedAppendSubscriber", "redisstore.followShard", "redisstore.receiveShard"} {
		buf := make([]byte, 1<<20)
		if bytes.Contains(buf[:runtime.Stack(buf, true)], []byte(fn)) {
			t.Fatalf("%s still running once both gateways stopped", fn)
		}
	}
	waitFor(t, 5*time.Second, "the gateways' subscriptions gone from the channel's master", func() bool {
		if subs, err = mc.PubSubShardNumSub(ctx, ch).Result(); err != nil {
			t.Fatalf("PUBSUB SHARDNUMSUB %s on its master: %v", ch, err)
		}
		return subs[ch] == 1
	})
}

// watchFallbackCauses watches, until the returned call, for what rightly has a gateway publish its
// notices on the global channel though every gateway hears the sharded ones: the peer's registration
// withdrawing shardedAppends (a sharded subscription lost), or a cluster node refusing commands
// (CLUSTERDOWN: SPUBLISH names a slot, PUBLISH does not). The call returns what it saw ("" for nothing).
func watchFallbackCauses(t *testing.T, ctx context.Context, st *redisstore.Store, peer int32) func() string {
	t.Helper()
	downs := func() int64 {
		n, err := redistest.ErrorCount(ctx, cluster.Addrs(), "CLUSTERDOWN")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := downs()
	wctx, cancel := context.WithCancel(ctx)
	var withdrew atomic.Bool
	done := make(chan struct{})
	stop := func() { cancel(); <-done }
	t.Cleanup(stop) // should the test end first
	go func() {
		defer close(done)
		// The peer advertises a change at its next heartbeat and keeps it a heartbeat interval at least:
		// read this often, it is seen.
		for wctx.Err() == nil {
			regs, _, err := st.Gateways(wctx)
			for _, r := range regs {
				if err == nil && r.NodeID == peer && r.Heartbeat > 0 && !r.ShardedAppends {
					withdrew.Store(true)
				}
			}
			select {
			case <-wctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return func() string {
		stop()
		switch {
		case withdrew.Load():
			return "the peer withdrawing shardedAppends"
		case downs() != before:
			return "CLUSTERDOWN replies"
		}
		return ""
	}
}

// olderGateway keeps a registration of node id node without ShardedAppends live in st's namespace, as a
// gateway of an older version (which hears the global channel only), until the returned stop, which
// marks it down.
func olderGateway(t *testing.T, st *redisstore.Store, node int32, advertised string) (stop func()) {
	t.Helper()
	info := redisstore.GatewayInfo{NodeID: node, Instance: "older", Advertised: advertised}
	if err := st.RegisterGateway(t.Context(), info, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
				_ = st.RegisterGateway(ctx, info, 5*time.Second)
			}
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			if err := st.DeregisterGateway(context.Background(), info); err != nil {
				t.Errorf("deregister the older gateway: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// TestAppendWakeMixedFallsBack: with a live gateway that does not advertise hearing the sharded
// channels (an older version) in the set, A publishes on the global channel again, where the older
// gateway hears it, and B's long-poll still answers within wakeBound; once that gateway is gone, A
// goes back to sharded pub/sub.
func TestAppendWakeMixedFallsBack(t *testing.T) {
	ctx := testCtx(t, 90*time.Second)
	a, b := clusterPair(t, ctx, "mixed")
	w := watchNotices(t, cluster.Addrs(), a.Store, redisstore.AppendShard(0))
	prod := dialRaw(t, a.Addr)
	awaitNoticeKind(t, prod, w, "sharded", "mixed")

	stopOlder := olderGateway(t, a.Store, 2, a.Addr)
	awaitNoticeKind(t, prod, w, "global", "mixed")
	global, sharded := w.count("global", "mixed/0"), w.count("sharded", "mixed/0")
	if took := longPollWoken(t, ctx, b, prod, "mixed"); took > wakeBound {
		t.Fatalf("the long-poll on B answered %v after the append through A, want within %v", took, wakeBound)
	}
	waitFor(t, 5*time.Second, "the notice on the global channel (the older gateway's)", func() bool { return w.count("global", "mixed/0") > global })
	if n := w.count("sharded", "mixed/0"); n != sharded {
		t.Fatalf("%d notices on the sharded channel with an older gateway live", n-sharded)
	}

	stopOlder()
	awaitNoticeKind(t, prod, w, "sharded", "mixed")
}

// nodeCounters reads what a cluster node counted of pub/sub: PUBLISH and SPUBLISH commands it ran,
// PUBLISH and SPUBLISH messages it received over the cluster bus, and every command it processed.
func nodeCounters(t *testing.T, ctx context.Context, addr string) map[string]int64 {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	out := map[string]int64{}
	field := func(txt, name string) int64 {
		for _, line := range strings.Split(txt, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), name); ok {
				v, _, _ = strings.Cut(v, ",")
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		return 0
	}
	cmds, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	stats, err := c.Info(ctx, "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	bus, err := c.ClusterInfo(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	out["publish"] = field(cmds, "cmdstat_publish:calls=")
	out["spublish"] = field(cmds, "cmdstat_spublish:calls=")
	out["bus_publish_in"] = field(bus, "cluster_stats_messages_publish_received:")
	out["bus_publishshard_in"] = field(bus, "cluster_stats_messages_publishshard_received:")
	out["commands"] = field(stats, "total_commands_processed:")
	return out
}

// TestAppendNoticeCost measures what append notices cost the masters of a 3-master cluster of its
// own: n appends through A, with B live, once with an older gateway live (global PUBLISH) and once
// without (SPUBLISH). Each global PUBLISH is relayed to both other masters over the cluster bus; a
// sharded one is handled by the master of A's channel alone.
func TestAppendNoticeCost(t *testing.T) {
	ctx := testCtx(t, 180*time.Second)
	rc, err := redistest.StartCluster(ctx, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Stop)
	be := backend{name: "cluster", addrs: rc.Addrs(), cluster: true}
	a := startGateway(t, be)
	startPeer(t, be, a, 1)
	mustCreateTopics(t, ctx, newAdmin(t, a), 1, nil, "cost", "marker")
	w := watchNotices(t, rc.Addrs(), a.Store, redisstore.AppendShard(0))
	prod := dialRaw(t, a.Addr)
	const n = 200

	phase := func(kind string) []map[string]int64 {
		awaitNoticeKind(t, prod, w, kind, "cost")
		before := make([]map[string]int64, len(rc.Masters))
		for i, m := range rc.Masters {
			before[i] = nodeCounters(t, ctx, m.Addr)
		}
		for range n {
			produceValues(t, prod, "cost", "v")
		}
		// The publisher sends in order: once the marker's notice is in, so are the appends'.
		marks := w.count(kind, "marker/0")
		produceValues(t, prod, "marker", "m")
		waitFor(t, 10*time.Second, "the marker's notice", func() bool { return w.count(kind, "marker/0") > marks })
		delta := make([]map[string]int64, len(rc.Masters))
		read := func() {
			for i, m := range rc.Masters {
				delta[i] = nodeCounters(t, ctx, m.Addr)
				for k, v := range before[i] {
					delta[i][k] -= v
				}
			}
		}
		// The bus relays a PUBLISH to the other masters after the subscriber may have heard it: their
		// counters are read once the relays have landed (or the bound passes, and the check fails).
		deadline := time.Now().Add(5 * time.Second)
		for read(); kind == "global" && time.Now().Before(deadline); read() {
			var pub, relayed int64
			for _, d := range delta {
				pub, relayed = pub+d["publish"], relayed+d["bus_publish_in"]
			}
			if relayed >= 2*pub {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		for i, m := range rc.Masters {
			t.Logf("%s, %d appends: master %d (%s): %v", kind, n, i, m.Addr, delta[i])
		}
		return delta
	}
	sum := func(d []map[string]int64, k string) (s int64) {
		for _, m := range d {
			s += m[k]
		}
		return s
	}

	stopOlder := olderGateway(t, a.Store, 2, a.Addr)
	global := phase("global")
	stopOlder()
	sharded := phase("sharded")

	if p := sum(global, "publish"); p == 0 || sum(global, "bus_publish_in") != 2*p || sum(global, "spublish") != 0 {
		t.Fatalf("global phase: %d PUBLISH, %d relayed over the bus, %d SPUBLISH; want each PUBLISH relayed to both other masters, no SPUBLISH",
			p, sum(global, "bus_publish_in"), sum(global, "spublish"))
	}
	busy := 0
	for _, d := range sharded {
		if d["spublish"] > 0 {
			busy++
		}
	}
	if s := sum(sharded, "spublish"); s == 0 || busy != 1 || sum(sharded, "publish") != 0 || sum(sharded, "bus_publish_in")+sum(sharded, "bus_publishshard_in") != 0 {
		t.Fatalf("sharded phase: %d SPUBLISH on %d masters, %d PUBLISH, %d+%d relayed over the bus; want SPUBLISH on one master, nothing relayed",
			s, busy, sum(sharded, "publish"), sum(sharded, "bus_publish_in"), sum(sharded, "bus_publishshard_in"))
	}
	t.Logf("global: %d PUBLISH, %d bus messages, %d commands; sharded: %d SPUBLISH, %d bus messages, %d commands",
		sum(global, "publish"), sum(global, "bus_publish_in"), sum(global, "commands"),
		sum(sharded, "spublish"), sum(sharded, "bus_publishshard_in"), sum(sharded, "commands"))
}

// TestAppendWakeShardedSubscriptionLost: a gateway whose sharded subscriptions are lost and cannot be
// made again (here an ACL that stops letting it subscribe to the sharded channels; a master it cannot
// reach alike) withdraws shardedAppends from its registration, so its peers publish on the global
// channel, which it still hears: a long-poll on it answers an append through a peer within wakeBound
// instead of waiting out its max wait.
func TestAppendWakeShardedSubscriptionLost(t *testing.T) {
	ctx := testCtx(t, 90*time.Second)
	be := backend{name: "cluster", addrs: cluster.Addrs(), cluster: true}
	a := startGateway(t, be)
	user := "b-" + a.Namespace
	acl := func(rules ...string) {
		t.Helper()
		if err := redistest.SetUser(ctx, cluster.Addrs(), user, rules...); err != nil {
			t.Fatal(err)
		}
	}
	acl("on", ">pw", "~*", "&*", "+@all")
	t.Cleanup(func() { redistest.DeleteUser(cluster.Addrs(), user) })
	b := startGateway(t, be, gatewayOpts{namespace: a.Namespace,
		mutate: func(c *gateway.Config) { c.NodeID = 1 },
		store:  func(o *redisstore.Options) { o.Username, o.Password = user, "pw" }})
	mustCreateTopics(t, ctx, newAdmin(t, a), 1, nil, "deaf")
	w := watchNotices(t, cluster.Addrs(), a.Store, redisstore.AppendShard(0))
	prod := dialRaw(t, a.Addr)
	awaitNoticeKind(t, prod, w, "sharded", "deaf")

	// B may hear the global channel and nothing else: Redis disconnects its sharded subscribers, and
	// SSUBSCRIBE is refused from then on.
	acl("resetchannels", "&"+a.Store.AppendChannel())
	awaitNoticeKind(t, prod, w, "global", "deaf")
	if took := longPollWoken(t, ctx, b, prod, "deaf"); took > wakeBound {
		t.Fatalf("the long-poll on B answered %v after the append through A, want within %v", took, wakeBound)
	}
}

// TestAppendWakeShardedPublishFails: when a gateway's SPUBLISH fails (here an ACL without it; the master
// of its channel out of its reach alike) while its peers all hear the sharded channels, its notices go
// on the global channel, which every gateway hears, instead of being retried on the sharded one: a
// long-poll on a peer answers an append through it within wakeBound.
func TestAppendWakeShardedPublishFails(t *testing.T) {
	ctx := testCtx(t, 90*time.Second)
	be := backend{name: "cluster", addrs: cluster.Addrs(), cluster: true}
	user := fmt.Sprintf("nospublish-%d", time.Now().UnixNano())
	nopermSum := func() int64 {
		n, err := redistest.ErrorCount(ctx, cluster.Addrs(), "NOPERM")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	t.Cleanup(func() { redistest.DeleteUser(cluster.Addrs(), user) })
	if err := redistest.SetUser(ctx, cluster.Addrs(), user, "on", ">pw", "~*", "&*", "+@all", "-spublish"); err != nil {
		t.Fatal(err)
	}
	a := startGateway(t, be, gatewayOpts{store: func(o *redisstore.Options) { o.Username, o.Password = user, "pw" }})
	b := startPeer(t, be, a, 1)
	mustCreateTopics(t, ctx, newAdmin(t, a), 1, nil, "nopub")
	prod := dialRaw(t, a.Addr)
	// A publishes sharded once it has read B's registration: its SPUBLISH is refused from then on.
	before := nopermSum()
	deadline := time.Now().Add(15 * time.Second)
	for nopermSum() == before {
		if time.Now().After(deadline) {
			t.Fatal("A did not try SPUBLISH within 15 s")
		}
		produceValues(t, prod, "nopub", "probe")
		time.Sleep(100 * time.Millisecond)
	}
	if took := longPollWoken(t, ctx, b, prod, "nopub"); took > wakeBound {
		t.Fatalf("the long-poll on B answered %v after the append through A, want within %v", took, wakeBound)
	}
}
