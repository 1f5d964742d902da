package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/redisstore"
)

// holdTopicView loads g's registry view now and keeps it from expiring, as if every call of the test
// came within its second: the view then lags behind what the test changes in the store, as it does
// behind changes made through another gateway.
func holdTopicView(t *testing.T, ctx context.Context, g *Gateway) {
	t.Helper()
	if _, err := g.topics.all(ctx); err != nil {
		t.Fatal(err)
	}
	g.topics.mu.Lock()
	g.topics.loaded = time.Now().Add(time.Hour)
	g.topics.mu.Unlock()
}

// deleteTopicsV6 sends one DeleteTopics v6 entry and returns its result.
func deleteTopicsV6(t *testing.T, ctx context.Context, c *conn, name *string, id [16]byte) kmsg.DeleteTopicsResponseTopic {
	t.Helper()
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.Version = 6
	rt := kmsg.NewDeleteTopicsRequestTopic()
	rt.Topic, rt.TopicID = name, id
	req.Topics = append(req.Topics, rt)
	resp, err := c.deleteTopics(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	topics := resp.(*kmsg.DeleteTopicsResponse).Topics
	if len(topics) != 1 {
		t.Fatalf("%d topics in the response, want 1", len(topics))
	}
	return topics[0]
}

// TestDeleteTopicsByStaleTopicID: a topic deleted and created again under the same name through
// another gateway is not deleted by a DeleteTopics naming the old topic's ID, even while this
// gateway's registry view still maps that ID to the name (UNKNOWN_TOPIC_ID, as Apache answers for
// an ID that no longer exists). The new topic's own ID deletes it.
func TestDeleteTopicsByStaleTopicID(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{})
	c := &conn{g: g}
	oldID, newID := [16]byte{'o', 'l', 'd'}, [16]byte{'n', 'e', 'w'}
	if err := store.CreateTopic(ctx, redisstore.Topic{Name: "orders", ID: oldID, Partitions: 1, Created: 1}); err != nil {
		t.Fatal(err)
	}
	holdTopicView(t, ctx, g)
	if err := store.DeleteTopic(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if err := store.CreateTopic(ctx, redisstore.Topic{Name: "orders", ID: newID, Partitions: 1, Created: 2}); err != nil {
		t.Fatal(err)
	}
	batch := &redisstore.Batch{Topic: "orders", Records: []redisstore.Record{{Value: []byte("kept")}}, ProducerID: -1}
	if res := store.Append(ctx, []*redisstore.Batch{batch}); res[0].Err != nil {
		t.Fatal(res[0].Err)
	}

	st := deleteTopicsV6(t, ctx, c, nil, oldID)
	if st.ErrorCode != kerr.UnknownTopicID.Code || st.Topic != nil || st.TopicID != oldID {
		t.Fatalf("delete by the old ID: error %d, topic %v, id %x; want UNKNOWN_TOPIC_ID, no name, the old ID", st.ErrorCode, st.Topic, st.TopicID)
	}
	if tp, err := store.Topic(ctx, "orders"); err != nil || tp.ID != newID {
		t.Fatalf("after the delete by the old ID: %+v, %v; want the topic with the new ID", tp, err)
	}
	if offs, err := store.PartitionOffsets(ctx, "orders", []int32{0}); err != nil || offs[0].End != 1 {
		t.Fatalf("after the delete by the old ID: offsets %+v, %v; want the record kept", offs, err)
	}

	st = deleteTopicsV6(t, ctx, c, nil, newID)
	if st.ErrorCode != 0 || st.Topic == nil || *st.Topic != "orders" {
		t.Fatalf("delete by the new ID: error %d, topic %v", st.ErrorCode, st.Topic)
	}
	if _, err := store.Topic(ctx, "orders"); err == nil {
		t.Fatal("topic still registered after the delete by its ID")
	}
}

// TestDeleteTopicsNameAndID: a v6 entry with both a name and a topic ID, or neither, is refused with
// INVALID_REQUEST (as on Apache) and deletes nothing; the empty name is a name (v1 and v6:
// UNKNOWN_TOPIC_OR_PARTITION), never a look-up by the zero ID, which a topic registered without an ID
// has.
func TestDeleteTopicsNameAndID(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{})
	c := &conn{g: g}
	id := [16]byte{'i', 'd'}
	for _, tp := range []redisstore.Topic{{Name: "both", ID: id, Partitions: 1}, {Name: "no-id", Partitions: 1}} {
		if err := store.CreateTopic(ctx, tp); err != nil {
			t.Fatal(err)
		}
	}
	both, empty := "both", ""
	if st := deleteTopicsV6(t, ctx, c, &both, id); st.ErrorCode != kerr.InvalidRequest.Code {
		t.Errorf("name and ID: error %d, want INVALID_REQUEST", st.ErrorCode)
	}
	if st := deleteTopicsV6(t, ctx, c, nil, [16]byte{}); st.ErrorCode != kerr.InvalidRequest.Code {
		t.Errorf("neither name nor ID: error %d, want INVALID_REQUEST", st.ErrorCode)
	}
	if st := deleteTopicsV6(t, ctx, c, &empty, [16]byte{}); st.ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Errorf("v6 empty name: error %d, want UNKNOWN_TOPIC_OR_PARTITION", st.ErrorCode)
	}
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.Version = 1
	req.TopicNames = []string{""}
	resp, err := c.deleteTopics(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if st := resp.(*kmsg.DeleteTopicsResponse).Topics; len(st) != 1 || st[0].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Errorf("v1 empty name: %+v, want UNKNOWN_TOPIC_OR_PARTITION", st)
	}
	for _, name := range []string{"both", "no-id"} {
		if _, err := store.Topic(ctx, name); err != nil {
			t.Errorf("topic %s: %v, want it kept", name, err)
		}
	}
}

// TestDeleteTopicsRedisDown: with Redis unreachable, DeleteTopics answers REQUEST_TIMED_OUT, by name
// and by topic ID, as CreateTopics and CreatePartitions do (docs/COMPATIBILITY.md), and the topic stays.
func TestDeleteTopicsRedisDown(t *testing.T) {
	ctx, c, m := miniredisGateway(t)
	id := [16]byte{'d', 'r'}
	if err := c.g.store.CreateTopic(ctx, redisstore.Topic{Name: "d", ID: id, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	holdTopicView(t, ctx, c.g) // the view at hand: the deletion itself fails
	m.Close()
	name := "d"
	if st := deleteTopicsV6(t, ctx, c, &name, [16]byte{}); st.ErrorCode != kerr.RequestTimedOut.Code {
		t.Errorf("by name: error %d, want REQUEST_TIMED_OUT", st.ErrorCode)
	}
	if st := deleteTopicsV6(t, ctx, c, nil, id); st.ErrorCode != kerr.RequestTimedOut.Code {
		t.Errorf("by ID: error %d, want REQUEST_TIMED_OUT", st.ErrorCode)
	}
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.g.store.Topic(ctx, "d"); err != nil {
		t.Fatalf("topic d after the failed deletes: %v, want it kept", err)
	}
}
