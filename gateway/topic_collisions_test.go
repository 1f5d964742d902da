package gateway

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/redisstore"
)

// TestMetadataCollisionsReadTheCachedRegistry: auto-creation checks a name for '.'/'_' collisions
// against the topic cache, so a Metadata request naming many unknown colliding names (each refused,
// each retried by its client every backoff) reads the registry about once, as lookups of unknown
// names do, not once per name.
func TestMetadataCollisionsReadTheCachedRegistry(t *testing.T) {
	ctx, c, store := metadataConn(t, Config{AutoCreateTopics: true})
	const n = 100
	var asked []metadataTopic
	for i := range n {
		if err := store.CreateTopic(ctx, redisstore.Topic{Name: fmt.Sprintf("t.%d", i), Partitions: 1}); err != nil {
			t.Fatal(err)
		}
		asked = append(asked, metadataTopic{name: kmsg.StringPtr(fmt.Sprintf("t_%d", i))})
	}
	reloads := func() int {
		tc := c.g.topics
		tc.load.Lock()
		defer tc.load.Unlock()
		return tc.reloads
	}
	before := reloads()
	for i, mt := range metadataV(t, ctx, c, 9, asked...) {
		if mt.ErrorCode != kerr.UnknownTopicOrPartition.Code {
			t.Fatalf("t_%d: error %d, want UNKNOWN_TOPIC_OR_PARTITION (collides with t.%d)", i, mt.ErrorCode, i)
		}
	}
	if got := reloads() - before; got > 5 { // 1, or a few on a machine that paused for missReloadGap
		t.Fatalf("a Metadata request naming %d colliding topics read the registry %d times", n, got)
	}
}

// TestCollisionsSeeTopicsCreatedHere: a topic created through this gateway, by auto-creation or by
// CreateTopics, is in the collision check of the very next auto-creation (the cache is invalidated),
// with no wait for the cache to expire.
func TestCollisionsSeeTopicsCreatedHere(t *testing.T) {
	ctx, c, _ := metadataConn(t, Config{AutoCreateTopics: true})
	if got := metadataV(t, ctx, c, 9, metadataTopic{name: kmsg.StringPtr("auto.made")}); got[0].ErrorCode != 0 {
		t.Fatalf("auto.made: error %d, want it auto-created", got[0].ErrorCode)
	}
	if got := metadataV(t, ctx, c, 9, metadataTopic{name: kmsg.StringPtr("auto_made")}); got[0].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("auto_made right after auto.made was auto-created: error %d, want UNKNOWN_TOPIC_OR_PARTITION", got[0].ErrorCode)
	}

	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "admin.made", 1, 1
	req.Topics = append(req.Topics, rt)
	resp, err := c.createTopics(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode; code != 0 {
		t.Fatalf("CreateTopics admin.made: error %d", code)
	}
	if got := metadataV(t, ctx, c, 9, metadataTopic{name: kmsg.StringPtr("admin_made")}); got[0].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("admin_made right after CreateTopics made admin.made: error %d, want UNKNOWN_TOPIC_OR_PARTITION", got[0].ErrorCode)
	}
}

// beforeTopicWrite runs do once, right before the first command that writes topic's registry entry
// (the command carrying its JSON), through whatever gateway's store it is added to.
type beforeTopicWrite struct {
	topic string
	do    func()
	once  sync.Once
}

func (h *beforeTopicWrite) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *beforeTopicWrite) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *beforeTopicWrite) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		named, entry := false, false
		for _, a := range cmd.Args() {
			s, _ := a.(string)
			if b, ok := a.([]byte); ok {
				s = string(b)
			}
			named = named || s == h.topic
			entry = entry || strings.HasPrefix(s, `{"id":`)
		}
		if named && entry {
			h.once.Do(h.do)
		}
		return next(ctx, cmd)
	}
}

// TestCreateTopicsCollisionAcrossGateways: two gateways creating names that differ only in '.' and
// '_' at the same moment do not both succeed: the one whose registration comes second is refused
// INVALID_TOPIC_EXCEPTION with Apache's message, though its own check of the registry (read before
// the other registered) found no collision.
func TestCreateTopicsCollisionAcrossGateways(t *testing.T) {
	ctx := t.Context()
	m := startMiniredis(t)
	storeA := openStoreAt(t, m.Addr(), redisstore.Options{})
	storeB := openStoreAt(t, m.Addr(), redisstore.Options{})
	a := &conn{g: New(Config{}, storeA, zerolog.Nop())}
	b := &conn{g: New(Config{}, storeB, zerolog.Nop())}
	create := func(c *conn, name string) kmsg.CreateTopicsResponseTopic {
		resp, err := c.createTopics(ctx, createTopicReq(name, nil))
		if err != nil {
			t.Fatal(err)
		}
		return resp.(*kmsg.CreateTopicsResponse).Topics[0]
	}
	storeA.Client().AddHook(&beforeTopicWrite{topic: "orders.v1", do: func() {
		if st := create(b, "orders_v1"); st.ErrorCode != 0 {
			t.Errorf("orders_v1 through gateway B: error %d %v", st.ErrorCode, *st.ErrorMessage)
		}
	}})
	st := create(a, "orders.v1")
	all, err := storeA.Topics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := all["orders.v1"]; ok {
		t.Fatalf("orders.v1 registered beside orders_v1 (error %d)", st.ErrorCode)
	}
	want := "Topic 'orders.v1' collides with existing topic: orders_v1"
	if st.ErrorCode != kerr.InvalidTopicException.Code || st.ErrorMessage == nil || *st.ErrorMessage != want {
		t.Fatalf("orders.v1 through gateway A: error %d, message %v; want INVALID_TOPIC_EXCEPTION, %q", st.ErrorCode, st.ErrorMessage, want)
	}
}

// afterTopicWrite runs do once, right after the first command that wrote topic's registry entry (the
// command carrying its JSON) has been answered.
type afterTopicWrite struct{ beforeTopicWrite }

func (h *afterTopicWrite) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	before := h.beforeTopicWrite.ProcessHook(func(context.Context, redis.Cmder) error { return nil })
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil {
			_ = before(ctx, cmd) // runs do on the entry's first write
		}
		return err
	}
}

// TestCreateTopicDeletedAtOnceLeavesNothing: a topic deleted through another gateway right after its
// registration, while a third gateway's registry view (up to a second old) still holds it, takes no
// append through that view, and the topic created again under its name starts empty. The view was
// read before the topic was marked as having its partitions' meta (pmeta), so the append created the
// partition as for a topic of an earlier version, and the records went to the topic created again.
func TestCreateTopicDeletedAtOnceLeavesNothing(t *testing.T) {
	ctx := t.Context()
	m := startMiniredis(t)
	creator := openStoreAt(t, m.Addr(), redisstore.Options{})
	deleter := openStoreAt(t, m.Addr(), redisstore.Options{})
	stale := New(Config{}, openStoreAt(t, m.Addr(), redisstore.Options{}), zerolog.Nop())
	creator.Client().AddHook(&afterTopicWrite{beforeTopicWrite{topic: "brief", do: func() {
		holdTopicView(t, ctx, stale)
		if err := deleter.DeleteTopic(ctx, "brief"); err != nil {
			t.Error(err)
		}
	}}})
	a := &conn{g: New(Config{}, creator, zerolog.Nop())}
	if resp, err := a.createTopics(ctx, createTopicReq("brief", nil)); err != nil {
		t.Fatal(err)
	} else if code := resp.(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode; code != 0 {
		t.Fatalf("create: error %d", code)
	}
	if _, err := stale.topics.get(ctx, "brief"); err != nil {
		t.Fatalf("the stale view lacks the topic: %v", err)
	}

	j := (&conn{g: stale, log: zerolog.Nop()}).prepareProduce(ctx, produceRequest(t, "brief", []byte("late")))
	j.begin()
	resp, err := j.complete(stale.store.Append(ctx, j.batches))
	j.finish()
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode; code != kerr.UnknownTopicOrPartition.Code {
		t.Errorf("produce through the stale view: error %d, want UNKNOWN_TOPIC_OR_PARTITION", code)
	}
	createTopic(t, deleter, "brief", 1)
	offs, err := deleter.PartitionOffsets(ctx, "brief", []int32{0})
	if err != nil || offs[0].End != 0 {
		t.Fatalf("the topic created again: offsets %+v, %v; want it empty", offs, err)
	}
}
