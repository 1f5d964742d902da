package gateway

import (
	"context"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/redisstore"
)

// metadataConn is a connection to a gateway over a fresh embedded store that lists itself as its only
// broker (as it does once serving).
func metadataConn(t *testing.T, cfg Config) (context.Context, *conn, *redisstore.Store) {
	ctx, g, store := embeddedGateway(t, cfg)
	g.nodes = newMembership(cfg.NodeID, "127.0.0.1:9092")
	return ctx, &conn{g: g}, store
}

// metadataTopic is one topic of a Metadata request: a name (nil: null) and a topic ID.
type metadataTopic struct {
	name *string
	id   [16]byte
}

// metadataV asks for topics at version v, allowing auto-creation, and returns the topics answered.
func metadataV(t *testing.T, ctx context.Context, c *conn, v int16, topics ...metadataTopic) []kmsg.MetadataResponseTopic {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	req.Version, req.AllowAutoTopicCreation = v, true
	for _, tp := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic, rt.TopicID = tp.name, tp.id
		req.Topics = append(req.Topics, rt)
	}
	resp, err := c.metadata(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	got := resp.(*kmsg.MetadataResponse).Topics
	if len(got) != len(topics) {
		t.Fatalf("v%d: %d topics answered, want %d", v, len(got), len(topics))
	}
	return got
}

// TestMetadataAutoCreateCollision: auto-creation refuses a name that collides with an existing topic
// on '.'/'_', as CreateTopics does; the client gets UNKNOWN_TOPIC_OR_PARTITION, as from Apache's
// KRaft brokers (whose controller refuses the creation). Other names are still created.
func TestMetadataAutoCreateCollision(t *testing.T) {
	ctx, c, store := metadataConn(t, Config{AutoCreateTopics: true})
	if err := store.CreateTopic(ctx, redisstore.Topic{Name: "a.b", ID: [16]byte{1}, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	for _, v := range []int16{1, 9, 12} {
		got := metadataV(t, ctx, c, v, metadataTopic{name: kmsg.StringPtr("a_b")}, metadataTopic{name: kmsg.StringPtr("a.b")})
		if got[0].ErrorCode != kerr.UnknownTopicOrPartition.Code || got[1].ErrorCode != 0 {
			t.Errorf("v%d: errors %d (a_b), %d (a.b); want UNKNOWN_TOPIC_OR_PARTITION and none", v, got[0].ErrorCode, got[1].ErrorCode)
		}
	}
	if _, err := store.Topic(ctx, "a_b"); !errors.Is(err, redisstore.ErrUnknownTopic) {
		t.Fatalf("a_b was created next to a.b (%v)", err)
	}
	if got := metadataV(t, ctx, c, 9, metadataTopic{name: kmsg.StringPtr("a_c")}); got[0].ErrorCode != 0 {
		t.Fatalf("a_c: error %d, want it auto-created", got[0].ErrorCode)
	}
}

// TestMetadataEmptyAndNullNames: the empty name is an illegal name at every version
// (INVALID_TOPIC_EXCEPTION, which pre-2.8 clients know), never a look-up by the zero topic ID (which
// a topic registered without an ID has, and whose error UNKNOWN_TOPIC_ID they do not know). Topic IDs
// are looked up from v12 only; at v10-v11 a null name or a topic ID refuses the request
// (INVALID_REQUEST on every topic), and at v12 an entry with neither a name nor an ID is
// INVALID_REQUEST, as on Apache.
func TestMetadataEmptyAndNullNames(t *testing.T) {
	ctx, c, store := metadataConn(t, Config{AutoCreateTopics: true})
	id := [16]byte{'i', 'd'}
	for _, tp := range []redisstore.Topic{{Name: "no-id", Partitions: 1}, {Name: "with-id", ID: id, Partitions: 1}} {
		if err := store.CreateTopic(ctx, tp); err != nil {
			t.Fatal(err)
		}
	}
	empty, named := metadataTopic{name: kmsg.StringPtr("")}, metadataTopic{name: kmsg.StringPtr("with-id")}
	for _, v := range []int16{0, 1, 4, 9, 10, 11, 12} {
		if got := metadataV(t, ctx, c, v, empty); got[0].ErrorCode != kerr.InvalidTopicException.Code {
			t.Errorf("v%d empty name: error %d, want INVALID_TOPIC_EXCEPTION", v, got[0].ErrorCode)
		}
	}
	for _, v := range []int16{10, 11} {
		for _, odd := range []metadataTopic{{}, {id: id}, {name: kmsg.StringPtr("with-id"), id: id}} {
			for i, mt := range metadataV(t, ctx, c, v, named, odd) {
				if mt.ErrorCode != kerr.InvalidRequest.Code || len(mt.Partitions) != 0 {
					t.Errorf("v%d with %+v: topic %d error %d, want INVALID_REQUEST", v, odd, i, mt.ErrorCode)
				}
			}
		}
	}
	got := metadataV(t, ctx, c, 12, metadataTopic{}, metadataTopic{id: id}, metadataTopic{name: kmsg.StringPtr("no-id"), id: id})
	if got[0].ErrorCode != kerr.InvalidRequest.Code {
		t.Errorf("v12 neither name nor ID: error %d, want INVALID_REQUEST", got[0].ErrorCode)
	}
	for _, mt := range got[1:] {
		if mt.ErrorCode != 0 || mt.Topic == nil || *mt.Topic != "with-id" {
			t.Errorf("v12 by topic ID: error %d, topic %v; want with-id", mt.ErrorCode, mt.Topic)
		}
	}
}

// TestMetadataFencedAloneListsItself: a gateway fenced with no live peer (its registration's Redis
// master away) still serves produce and fetch on the other masters, and its leaders fall back to it:
// Metadata and DescribeCluster list it as the broker, not an empty broker list with leaders nobody can
// reach.
func TestMetadataFencedAloneListsItself(t *testing.T) {
	ctx, c, store := metadataConn(t, Config{NodeID: 4})
	if err := store.CreateTopic(ctx, redisstore.Topic{Name: "fenced", ID: [16]byte{4}, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	c.g.nodes.setSelfAlive(false)
	req := kmsg.NewPtrMetadataRequest()
	req.Version = 12
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr("fenced")
	req.Topics = append(req.Topics, rt)
	resp, err := c.metadata(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	m := resp.(*kmsg.MetadataResponse)
	if len(m.Brokers) != 1 || m.Brokers[0].NodeID != 4 || m.Topics[0].Partitions[0].Leader != 4 {
		t.Fatalf("brokers %+v, leader %d; want this gateway (4) as both", m.Brokers, m.Topics[0].Partitions[0].Leader)
	}
	dc, err := c.describeCluster(ctx, kmsg.NewPtrDescribeClusterRequest())
	if err != nil {
		t.Fatal(err)
	}
	if b := dc.(*kmsg.DescribeClusterResponse).Brokers; len(b) != 1 || b[0].NodeID != 4 {
		t.Fatalf("DescribeCluster brokers %+v, want this gateway", b)
	}
}
