package gateway

import (
	"fmt"
	"testing"

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
