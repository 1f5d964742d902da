package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/redisstore"
)

// miniredisGateway is a gateway (not serving) over a store on a miniredis holding the topic t with one
// partition; closing the miniredis makes Redis unreachable.
func miniredisGateway(t *testing.T) (context.Context, *conn, *miniredis.Miniredis) {
	t.Helper()
	m := startMiniredis(t)
	store := openStoreAt(t, m.Addr(), redisstore.Options{DialTimeout: 200 * time.Millisecond, CommandTimeout: 2 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	createTopic(t, store, "t", 1)
	return ctx, &conn{g: New(Config{}, store, zerolog.Nop())}, m
}

func createPartitionsReq(topic string, count int32) *kmsg.CreatePartitionsRequest {
	req := kmsg.NewPtrCreatePartitionsRequest()
	rt := kmsg.NewCreatePartitionsRequestTopic()
	rt.Topic, rt.Count = topic, count
	req.Topics = append(req.Topics, rt)
	return req
}

// TestCreatePartitionsRedisDown: with Redis unreachable, CreatePartitions answers REQUEST_TIMED_OUT,
// as CreateTopics and DeleteTopics do, whether the registry read or the change itself fails (connection
// refused, not a timeout: the code said NOT_LEADER_OR_FOLLOWER then); the store's own refusals keep
// their codes.
func TestCreatePartitionsRedisDown(t *testing.T) {
	ctx, c, m := miniredisGateway(t)
	answer := func(topic string, count int32) int16 {
		t.Helper()
		r, err := c.createPartitions(ctx, createPartitionsReq(topic, count))
		if err != nil {
			t.Fatal(err)
		}
		return r.(*kmsg.CreatePartitionsResponse).Topics[0].ErrorCode
	}
	if code := answer("missing", 2); code != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("unknown topic: error %d, want UNKNOWN_TOPIC_OR_PARTITION", code)
	}
	if code := answer("t", 2); code != 0 {
		t.Fatalf("grow to 2: error %d", code)
	}
	// The registry view is read now, so the next request's read is served from it (for a second) and
	// only the change goes to Redis.
	if _, err := c.g.topics.get(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	m.Close()
	if code := answer("t", 3); code != kerr.RequestTimedOut.Code {
		t.Errorf("change with Redis down: error %d, want REQUEST_TIMED_OUT", code)
	}
	// The failed change invalidated the view: this one's registry read fails.
	if code := answer("t", 3); code != kerr.RequestTimedOut.Code {
		t.Errorf("registry read with Redis down: error %d, want REQUEST_TIMED_OUT", code)
	}
}
