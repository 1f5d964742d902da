package redisstore

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Append notices on a Redis Cluster can go over sharded pub/sub (Redis 7+): SPUBLISH stays on the shard
// that owns its channel's slot, where PUBLISH is relayed to every node of the cluster over the cluster
// bus. A gateway publishes each batch of notices as one message on one of AppendShards channels (its
// node id's, AppendShard), so a batch costs one master (and its replicas) whatever the number of
// partitions in it, as one PUBLISH did; every gateway subscribes to all of them. A channel per
// partition would keep a notice on the node that stored the records, but would make a batch one message
// per partition and need a subscription per partition, on every gateway.

// AppendShards is how many sharded channels carry append notices.
const AppendShards = 8

// AppendShard is the sharded channel (0 to AppendShards-1) the gateway of node id node publishes on.
func AppendShard(node int32) int { return int(uint32(node) % AppendShards) }

// shardedAppends is sharded channel i of append notices. Its hash tag holds the namespace, which
// spreads the channels of different namespaces over the cluster's slots.
func (k keys) shardedAppends(i int) string {
	return k.ns + ":appends:{" + k.ns + ":" + strconv.Itoa(i) + "}"
}

// ShardedAppendChannel names sharded channel i of append notices, for tests and operators.
func (s *Store) ShardedAppendChannel(i int) string { return s.keys.shardedAppends(i) }

// AppendChannel names the (global) pub/sub channel of append notices.
func (s *Store) AppendChannel() string { return s.keys.appends() }

// ShardedAppends reports whether append notices can go over sharded pub/sub: on a Redis Cluster.
func (s *Store) ShardedAppends() bool { return s.opts.Cluster && s.embedded == nil }

// errNotCluster: sharded pub/sub of append notices is used on a Redis Cluster only.
var errNotCluster = errors.New("redisstore: sharded append notices need a Redis Cluster")

// PublishShardedAppends is PublishAppends over the sharded channel of the gateway of node id from. Only
// gateways that subscribe to the sharded channels (SubscribeShardedAppends) hear it.
func (s *Store) PublishShardedAppends(ctx context.Context, from int32, parts []string) error {
	if len(parts) == 0 {
		return nil
	}
	if !s.ShardedAppends() {
		return errNotCluster
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return s.rdb.SPublish(ctx, s.keys.shardedAppends(AppendShard(from)), strings.Join(parts, "\n")).Err()
}

// SubscribeShardedAppends is SubscribeAppends for the sharded channels: it calls fn for each partition
// reported grown on any of them until ctx is done, and subscribed each time one of them is subscribed
// (what was published on it before never comes). hearing is told whether every channel is subscribed:
// true once all of them are, false (with the error) when one of them then is lost or, before that, when
// the first attempt to subscribe one fails; it is called once per change, never concurrently. The
// callbacks run on goroutines of the store's, one per channel; a panic in one ends the call, which
// panics with it.
func (s *Store) SubscribeShardedAppends(ctx context.Context, fn func(topic string, partition int32), subscribed func(), hearing func(all bool, err error)) error {
	c, ok := s.rdb.(*redis.ClusterClient)
	if !ok || !s.ShardedAppends() {
		return errNotCluster
	}
	// A panic on a channel's goroutine (the callbacks run there) ends the others and reaches the
	// caller, whose loop recovers it and subscribes again.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var fo fanOut
	defer fo.Wait()
	st := shardsState{hearing: hearing}
	for i := range AppendShards {
		fo.Go(func() {
			defer func() {
				if p := recover(); p != nil {
					cancel()
					panic(p)
				}
			}()
			followShard(ctx, c, s.keys.shardedAppends(i), fn, func() {
				subscribed()
				st.set(i, true, nil)
			}, func(err error) { st.set(i, false, err) })
		})
	}
	fo.Wait()
	return nil
}

// shardsState follows which sharded channels are subscribed and tells hearing when all of them are, or
// no longer are.
type shardsState struct {
	mu       sync.Mutex
	hearing  func(all bool, err error)
	up       [AppendShards]bool
	reported int // 0: nothing yet; 1: all subscribed; -1: not all
}

// set records channel i subscribed or not (err: why not).
func (st *shardsState) set(i int, up bool, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.up[i] = up
	all := !slices.Contains(st.up[:], false)
	switch {
	case all && st.reported != 1:
		st.reported = 1
		st.hearing(true, nil)
	case !all && st.reported != -1 && (err != nil || st.reported == 1):
		if err == nil {
			err = errShardLost
		}
		st.reported = -1
		st.hearing(false, err)
	}
}

// errShardLost: the server ended a sharded subscription (the slot left that node: moved, or the node became a replica).
var errShardLost = errors.New("redisstore: sharded subscription ended by the server (its slot left that node)")

// shardRetryMax bounds the wait before a lost sharded subscription is made again.
const shardRetryMax = time.Second

// followShard keeps channel ch subscribed on the master of its slot until ctx ends. go-redis dials a
// sharded subscription on the master its slot map names and stays on that node: when the slot moves
// away, the server ends the subscription (a sunsubscribe nobody asked for) and the library does not
// subscribe again; when the library reconnects by itself to a node that no longer owns the slot, the
// answer is MOVED, which it does not follow. Either ends the subscription here, and a new one is made
// after the client's slot map is reloaded.
func followShard(ctx context.Context, c *redis.ClusterClient, ch string, fn func(string, int32), subscribed func(), down func(error)) {
	var wait time.Duration
	for ctx.Err() == nil {
		ps := c.SSubscribe(ctx, ch)
		made, err := receiveShard(ctx, ps, fn, subscribed)
		_ = ps.Close()
		if ctx.Err() != nil {
			return
		}
		down(err)
		c.ReloadState(ctx)
		if made {
			wait = 0
		}
		wait = min(max(2*wait, 50*time.Millisecond), shardRetryMax)
		if shardRefused(err) {
			// A cluster of Redis before 7 or an ACL without SSUBSCRIBE: this gateway never advertises
			// hearing the sharded channels, so nobody publishes there; tried again now and then only.
			wait = probeRetryInterval
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// shardQuiet is how long a sharded subscription may stay silent before it is pinged; one more such
// wait without an answer ends it (a node gone without closing the connection).
const shardQuiet = 2 * time.Second

// shardRefused reports whether err is the server refusing SSUBSCRIBE itself, not a redirection or a
// failure of the node.
func shardRefused(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.HasPrefix(msg, "ERR unknown command") || strings.HasPrefix(msg, "NOPERM")
}

// receiveShard reads ps until ctx ends or the subscription is lost (the error that ended it, if any), and
// reports whether the channel was subscribed meanwhile.
func receiveShard(ctx context.Context, ps *redis.PubSub, fn func(string, int32), subscribed func()) (made bool, err error) {
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() }) // ends a read in progress
	defer stop()
	pinged := false
	for {
		var m any
		m, err = ps.ReceiveTimeout(ctx, shardQuiet)
		if err != nil {
			var ne net.Error
			if ctx.Err() != nil || !errors.As(err, &ne) || !ne.Timeout() || pinged {
				return made, err // a MOVED, a closed connection, or a ping left unanswered
			}
			if err = ps.Ping(ctx); err != nil {
				return made, err
			}
			pinged = true
			continue
		}
		pinged = false
		switch m := m.(type) {
		case *redis.Subscription:
			switch m.Kind {
			case "ssubscribe":
				made = true
				subscribed()
			case "sunsubscribe": // the slot left this node
				return made, nil
			}
		case *redis.Message:
			eachNotice(m.Payload, fn)
		}
	}
}

// eachNotice calls fn for each partition a message of append notices names.
func eachNotice(payload string, fn func(string, int32)) {
	for _, line := range strings.Split(payload, "\n") {
		topic, p, found := strings.Cut(line, "\x00")
		if !found {
			continue
		}
		if n, err := strconv.Atoi(p); err == nil {
			fn(topic, int32(n))
		}
	}
}
