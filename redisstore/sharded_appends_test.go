package redisstore

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kgate/kgate/internal/redistest"
)

// noticeLog is what a SubscribeShardedAppends call received.
type noticeLog struct {
	mu         sync.Mutex
	got        map[string]int // "topic/partition" -> how many times
	subscribed int
	hearing    []bool // what hearing was told, in order
	errs       []error
	listening  chan struct{}
}

// subscribeSharded runs s.SubscribeShardedAppends until t ends.
func subscribeSharded(t *testing.T, s *Store) *noticeLog {
	t.Helper()
	l := &noticeLog{got: map[string]int{}, listening: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- s.SubscribeShardedAppends(ctx, func(topic string, p int32) {
			l.mu.Lock()
			l.got[fmt.Sprintf("%s/%d", topic, p)]++
			l.mu.Unlock()
		}, func() {
			l.mu.Lock()
			l.subscribed++
			l.mu.Unlock()
		}, func(all bool, err error) {
			l.mu.Lock()
			l.hearing, l.errs = append(l.hearing, all), append(l.errs, err)
			first := all && !slices.Contains(l.hearing[:len(l.hearing)-1], true)
			l.mu.Unlock()
			if first {
				close(l.listening)
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("SubscribeShardedAppends: %v", err)
		}
	})
	select {
	case <-l.listening:
	case <-time.After(10 * time.Second):
		t.Fatal("the sharded channels were not all subscribed within 10 s")
	}
	return l
}

func (l *noticeLog) count(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.got[key]
}

// heard is what hearing was told, in order, with the errors.
func (l *noticeLog) heard() ([]bool, []error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.hearing), slices.Clone(l.errs)
}

func (l *noticeLog) subscriptions() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.subscribed
}

// shardSubscribers is PUBSUB SHARDNUMSUB of ch on the node at addr.
func shardSubscribers(t *testing.T, addr, ch string) int64 {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	n, err := c.PubSubShardNumSub(t.Context(), ch).Result()
	if err != nil {
		t.Fatalf("PUBSUB SHARDNUMSUB on %s: %v", addr, err)
	}
	return n[ch]
}

// TestShardedAppendNotices: on a cluster, a notice published on the sharded channel of any node id
// reaches a gateway subscribed to the sharded channels, whose subscription to each channel is on the
// master of its slot; elsewhere there are no sharded channels.
func TestShardedAppendNotices(t *testing.T) {
	sub := openStore(t, backendOptions(t, "cluster"))
	o := backendOptions(t, "cluster")
	o.Namespace = sub.Namespace()
	pub := openStore(t, o)
	l := subscribeSharded(t, sub)
	if n := l.subscriptions(); n != AppendShards {
		t.Fatalf("%d subscriptions made, want %d (one per sharded channel)", n, AppendShards)
	}
	cc := sub.Client().(*redis.ClusterClient)
	for i := range AppendShards {
		ch := sub.ShardedAppendChannel(i)
		master, err := cc.MasterForKey(t.Context(), ch)
		if err != nil {
			t.Fatal(err)
		}
		if n := shardSubscribers(t, master.Options().Addr, ch); n != 1 {
			t.Fatalf("PUBSUB SHARDNUMSUB %s on the master of its slot: %d, want 1", ch, n)
		}
	}
	for node := range int32(2 * AppendShards) {
		if err := pub.PublishShardedAppends(t.Context(), node, []string{AppendMessage("t", node), AppendMessage("u", node)}); err != nil {
			t.Fatalf("PublishShardedAppends(node %d): %v", node, err)
		}
	}
	checkFor(t, 5*time.Second, func() error {
		for node := range 2 * AppendShards {
			for _, topic := range []string{"t", "u"} {
				if n := l.count(fmt.Sprintf("%s/%d", topic, node)); n != 1 {
					return fmt.Errorf("notice %s/%d received %d times, want once", topic, node, n)
				}
			}
		}
		return nil
	})

	for _, s := range []*Store{openStore(t, backendOptions(t, "standalone")), openEmbedded(t)} {
		if s.ShardedAppends() {
			t.Fatalf("%s: ShardedAppends true off a cluster", s.Client())
		}
		if err := s.PublishShardedAppends(t.Context(), 0, []string{AppendMessage("t", 0)}); err == nil {
			t.Fatalf("%s: PublishShardedAppends succeeded off a cluster", s.Client())
		}
	}
}

// TestShardedAppendsFollowSlot: when the slot of a sharded channel moves to another master, the
// server ends the subscription on the old one; it is made again on the new one and notices published
// there arrive.
func TestShardedAppendsFollowSlot(t *testing.T) {
	if standalone == nil {
		t.Skip("KGATE_SKIP_REDIS=1")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	rc, err := redistest.StartCluster(ctx, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Stop)
	sub := openStore(t, Options{Addrs: rc.Addrs(), Cluster: true})
	pub := openStore(t, Options{Addrs: rc.Addrs(), Cluster: true, Namespace: sub.Namespace()})
	l := subscribeSharded(t, sub)

	ch := sub.ShardedAppendChannel(0)
	cc := sub.Client().(*redis.ClusterClient)
	slot, err := cc.ClusterKeySlot(ctx, ch).Result()
	if err != nil {
		t.Fatal(err)
	}
	master, err := cc.MasterForKey(ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	from := master.Options().Addr
	var to string
	for _, m := range rc.Masters {
		if m.Addr != from {
			to = m.Addr
			break
		}
	}
	if n := shardSubscribers(t, from, ch); n != 1 {
		t.Fatalf("PUBSUB SHARDNUMSUB %s on %s before the move: %d, want 1", ch, from, n)
	}
	toClient := redis.NewClient(&redis.Options{Addr: to})
	defer toClient.Close()
	toID, err := toClient.ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	before := l.subscriptions()
	// The slot holds no key: assigning it to the new master everywhere moves it.
	for _, m := range append([]string{to, from}, rc.Addrs()...) {
		c := redis.NewClient(&redis.Options{Addr: m})
		err := c.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID).Err()
		c.Close()
		if err != nil {
			t.Fatalf("CLUSTER SETSLOT %d NODE %s on %s: %v", slot, toID, m, err)
		}
	}
	checkFor(t, 10*time.Second, func() error {
		if n := shardSubscribers(t, to, ch); n != 1 {
			return fmt.Errorf("PUBSUB SHARDNUMSUB %s on the slot's new master: %d, want 1", ch, n)
		}
		if l.subscriptions() == before {
			return fmt.Errorf("no new subscription reported")
		}
		if heard, errs := l.heard(); len(heard) < 3 || !slices.Equal(heard[:2], []bool{true, false}) || errs[1] == nil || !heard[len(heard)-1] {
			return fmt.Errorf("hearing told %v (%v), want true, false (with an error), ..., true", heard, errs)
		}
		return nil
	})
	if n := shardSubscribers(t, from, ch); n != 0 {
		t.Fatalf("PUBSUB SHARDNUMSUB %s on the slot's old master: %d, want 0", ch, n)
	}
	if err := pub.PublishShardedAppends(ctx, 0, []string{AppendMessage("moved", 0)}); err != nil {
		t.Fatal(err)
	}
	checkFor(t, 5*time.Second, func() error {
		if l.count("moved/0") != 1 {
			return fmt.Errorf("the notice published after the move did not arrive")
		}
		return nil
	})
}

// TestShardedAppendsRefusedBacksOff: a server that refuses SSUBSCRIBE (an ACL without it here; a
// cluster of Redis before 7 alike) is not asked again every second: each channel tries once in the
// first probeRetryInterval, and the subscription never counts as made.
func TestShardedAppendsRefusedBacksOff(t *testing.T) {
	o := backendOptions(t, "cluster")
	user := testNamespace(t)
	nopermSum := func() int64 {
		n, err := redistest.ErrorCount(t.Context(), o.Addrs, "NOPERM")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	t.Cleanup(func() { redistest.DeleteUser(o.Addrs, user) })
	if err := redistest.SetUser(t.Context(), o.Addrs, user, "on", ">pw", "~*", "&*", "+@all", "-ssubscribe"); err != nil {
		t.Fatal(err)
	}
	o.Username, o.Password = user, "pw"
	s := openStore(t, o)
	before := nopermSum()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	listening := make(chan struct{}, 1)
	refused := make(chan error, AppendShards) // what hearing was told with false
	go func() {
		defer close(done)
		_ = s.SubscribeShardedAppends(ctx, func(string, int32) {}, func() {}, func(all bool, err error) {
			if all {
				listening <- struct{}{}
			} else {
				select {
				case refused <- err:
				default: // more reports than channels: the check below fails on the second
				}
			}
		})
	}()
	defer func() { cancel(); <-done }()
	checkFor(t, 5*time.Second, func() error {
		if n := nopermSum() - before; n < AppendShards {
			return fmt.Errorf("%d SSUBSCRIBEs refused, want one per channel", n)
		}
		return nil
	})
	time.Sleep(3 * time.Second) // the window in which a retry every second or less would show
	if n := nopermSum() - before; n != AppendShards {
		t.Fatalf("%d SSUBSCRIBEs refused within 3 s, want %d (one per channel)", n, AppendShards)
	}
	select {
	case <-listening:
		t.Fatal("listening reported with SSUBSCRIBE refused")
	default:
	}
	select {
	case err := <-refused:
		if !strings.HasPrefix(err.Error(), "NOPERM") {
			t.Fatalf("hearing told false with %v, want the NOPERM refusal", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("hearing not told false with SSUBSCRIBE refused")
	}
	select {
	case err := <-refused:
		t.Fatalf("hearing told false again (%v) with nothing subscribed in between", err)
	default:
	}
}

// TestShardedAppendsFollowFailover: when the master of a sharded channel's slot dies and its replica
// takes over, the subscription is made again on the new master and notices published there arrive.
func TestShardedAppendsFollowFailover(t *testing.T) {
	if standalone == nil {
		t.Skip("KGATE_SKIP_REDIS=1")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	rc, err := redistest.StartCluster(ctx, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Stop)
	sub := openStore(t, Options{Addrs: rc.Addrs(), Cluster: true, DialTimeout: 500 * time.Millisecond})
	pub := openStore(t, Options{Addrs: rc.Addrs(), Cluster: true, Namespace: sub.Namespace(), DialTimeout: 500 * time.Millisecond})
	// The replicas attach after the cluster reports ok; one never in sync is not promoted.
	checkFor(t, 30*time.Second, func() error {
		for _, r := range rc.Replicas {
			c := redis.NewClient(&redis.Options{Addr: r.Addr})
			info, err := c.Info(ctx, "replication").Result()
			c.Close()
			if err != nil || !strings.Contains(info, "master_link_status:up") {
				return fmt.Errorf("replica %s not in sync: %v", r.Addr, err)
			}
		}
		return nil
	})
	l := subscribeSharded(t, sub)

	ch := sub.ShardedAppendChannel(0)
	master, err := sub.Client().(*redis.ClusterClient).MasterForKey(ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	before := l.subscriptions()
	for _, m := range rc.Masters {
		if m.Addr == master.Options().Addr {
			m.Kill()
		}
	}
	checkFor(t, 30*time.Second, func() error {
		pub.RefreshTopology(ctx)
		if err := pub.PublishShardedAppends(ctx, 0, []string{AppendMessage("failover", 0)}); err != nil {
			return fmt.Errorf("publish after the master died: %v", err)
		}
		if l.count("failover/0") == 0 {
			return fmt.Errorf("no notice through the promoted replica")
		}
		return nil
	})
	if l.subscriptions() == before {
		t.Fatal("a notice arrived without a new subscription")
	}
	checkFor(t, 5*time.Second, func() error {
		if heard, _ := l.heard(); len(heard) < 3 || !slices.Equal(heard[:2], []bool{true, false}) || !heard[len(heard)-1] {
			return fmt.Errorf("hearing told %v, want true, false, ..., true", heard)
		}
		return nil
	})
}

// TestShardedAppendsPanicReachesCaller: a panic in a callback, which runs on a goroutine of the
// store's, ends SubscribeShardedAppends with that panic on the caller's goroutine (whose loop recovers
// it) instead of ending the process.
func TestShardedAppendsPanicReachesCaller(t *testing.T) {
	sub := openStore(t, backendOptions(t, "cluster"))
	o := backendOptions(t, "cluster")
	o.Namespace = sub.Namespace()
	pub := openStore(t, o)
	listening := make(chan struct{})
	recovered := make(chan any, 1)
	go func() {
		defer func() { recovered <- recover() }()
		_ = sub.SubscribeShardedAppends(t.Context(), func(topic string, _ int32) {
			if topic == "boom" {
				panic("boom in a notice callback")
			}
		}, func() {}, func(all bool, _ error) {
			if all {
				close(listening)
			}
		})
	}()
	select {
	case <-listening:
	case <-time.After(10 * time.Second):
		t.Fatal("the sharded channels were not all subscribed within 10 s")
	}
	if err := pub.PublishShardedAppends(t.Context(), 3, []string{AppendMessage("boom", 0)}); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-recovered:
		if p == nil || !strings.Contains(fmt.Sprint(p), "boom in a notice callback") {
			t.Fatalf("SubscribeShardedAppends ended with %v, want the callback's panic", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("SubscribeShardedAppends went on after a callback panicked")
	}
}

// shardGoroutines counts the goroutines running the sharded subscription code (or go-redis's PubSub).
func shardGoroutines() (n int, dump string) {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "redisstore.followShard") || strings.Contains(g, "redisstore.receiveShard") ||
			strings.Contains(g, "redisstore.(*Store).SubscribeShardedAppends") || strings.Contains(g, "redis.(*PubSub)") {
			n++
			dump += g + "\n\n"
		}
	}
	return n, dump
}

// TestShardedAppendsStopLeavesNothing: once its context ends, SubscribeShardedAppends returns promptly,
// also while its channels are being subscribed again (their connections killed), and leaves no
// goroutine behind, nor a subscription on the servers.
func TestShardedAppendsStopLeavesNothing(t *testing.T) {
	s := openStore(t, backendOptions(t, "cluster"))
	if n, dump := shardGoroutines(); n != 0 {
		t.Fatalf("%d sharded subscription goroutines before the test:\n%s", n, dump)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	var mu sync.Mutex
	var heard []bool
	go func() {
		done <- s.SubscribeShardedAppends(ctx, func(string, int32) {}, func() {}, func(all bool, _ error) {
			mu.Lock()
			heard = append(heard, all)
			mu.Unlock()
		})
	}()
	heardNow := func() []bool { mu.Lock(); defer mu.Unlock(); return slices.Clone(heard) }
	var reports int
	checkFor(t, 10*time.Second, func() error {
		h := heardNow()
		if reports = len(h); reports == 0 || !h[reports-1] {
			return fmt.Errorf("hearing told %v, want true", h)
		}
		return nil
	})
	if n, _ := shardGoroutines(); n < AppendShards {
		t.Fatalf("%d sharded subscription goroutines while subscribed, want at least %d (the count sees them)", n, AppendShards)
	}
	for _, addr := range cluster.Addrs() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		err := c.ClientKillByFilter(t.Context(), "TYPE", "pubsub").Err()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	checkFor(t, 10*time.Second, func() error {
		if h := heardNow(); !slices.Contains(h[reports:], false) {
			return fmt.Errorf("hearing told %v, want false after the connections were killed", h)
		}
		return nil
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("SubscribeShardedAppends did not return within 5 s of its context's end")
	}
	checkFor(t, 5*time.Second, func() error {
		if n, dump := shardGoroutines(); n != 0 {
			return fmt.Errorf("%d sharded subscription goroutines after the call returned:\n%s", n, dump)
		}
		return nil
	})
	checkFor(t, 5*time.Second, func() error {
		for i := range AppendShards {
			ch := s.ShardedAppendChannel(i)
			for _, addr := range cluster.Addrs() {
				if n := shardSubscribers(t, addr, ch); n != 0 {
					return fmt.Errorf("PUBSUB SHARDNUMSUB %s on %s: %d after the call returned", ch, addr, n)
				}
			}
		}
		return nil
	})
}

// TestShardedAppendsNodePaused: a master that stops answering without closing its connections (paused)
// is noticed by the ping of a quiet subscription: hearing is told false within two quiet periods and a
// command timeout, true again once the master answers, and the call returns within a command timeout of
// its context's end while the master is paused.
func TestShardedAppendsNodePaused(t *testing.T) {
	if standalone == nil {
		t.Skip("KGATE_SKIP_REDIS=1")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	rc, err := redistest.StartCluster(ctx, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Stop)
	const cmdTimeout = time.Second
	sub := openStore(t, Options{Addrs: rc.Addrs(), Cluster: true, CommandTimeout: cmdTimeout, DialTimeout: 500 * time.Millisecond})
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	var mu sync.Mutex
	var heard []bool
	go func() {
		done <- sub.SubscribeShardedAppends(sctx, func(string, int32) {}, func() {}, func(all bool, _ error) {
			mu.Lock()
			heard = append(heard, all)
			mu.Unlock()
		})
	}()
	heardNow := func() []bool { mu.Lock(); defer mu.Unlock(); return slices.Clone(heard) }
	// awaitHeard waits until hearing's last report is want.
	awaitHeard := func(want bool, within time.Duration) {
		t.Helper()
		checkFor(t, within, func() error {
			if h := heardNow(); len(h) == 0 || h[len(h)-1] != want {
				return fmt.Errorf("hearing told %v, want %v last", h, want)
			}
			return nil
		})
	}
	awaitHeard(true, 10*time.Second)

	ch := sub.ShardedAppendChannel(0)
	master, err := sub.Client().(*redis.ClusterClient).MasterForKey(ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	var paused *redistest.Server
	for _, m := range rc.Masters {
		if m.Addr == master.Options().Addr {
			paused = m
		}
	}
	if err := paused.Pause(); err != nil {
		t.Skip("cannot pause a server here:", err)
	}
	pausedAt := time.Now()
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = paused.Resume()
		}
	}
	defer resume()
	awaitHeard(false, 2*shardQuiet+cmdTimeout+5*time.Second)
	t.Logf("loss of the paused master reported after %v", time.Since(pausedAt))
	resume()
	awaitHeard(true, 20*time.Second)

	// Stopped while that master is paused again: the call returns within about a command timeout.
	if err := paused.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed = false
	awaitHeard(false, 2*shardQuiet+cmdTimeout+5*time.Second)
	stopAt := time.Now()
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("returned %v after its context ended, a master paused", time.Since(stopAt))
	case <-time.After(cmdTimeout + 3*time.Second):
		t.Fatalf("SubscribeShardedAppends did not return within %v of its context's end", cmdTimeout+3*time.Second)
	}
}
