package gateway

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/redisstore"
)

// TestDeleteGroupOrderedWithCommits: a DeleteGroups racing a commit of the same group runs wholly
// before or wholly after it, as under Apache's group lock. Interleaved, the commit's Redis consumer
// group outlived the deleted offsets (or the offsets outlived the group's listing). After each race the
// group's offsets, its Redis consumer group and its listing agree.
func TestDeleteGroupOrderedWithCommits(t *testing.T) {
	ctx, _, store := embeddedGateway(t, Config{})
	g, _ := serveOn(t, store, Config{})
	if err := store.CreateTopic(ctx, redisstore.Topic{Name: "raced", Partitions: 1, Created: time.Now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	const group = "racing"
	c := fetchConn(t, g)
	commit := func(offset int64) {
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Version, req.Group, req.Generation = 8, group, -1
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = "raced"
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = 0, offset
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := c.offsetCommit(ctx, req)
		if err != nil {
			t.Error(err)
			return
		}
		if code := resp.(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode; code != 0 {
			t.Errorf("commit: error %d", code)
		}
	}
	redisGroup := func() bool {
		gs, _ := store.Client().XInfoGroups(ctx, store.StreamKey("raced", 0)).Result()
		return slices.ContainsFunc(gs, func(x redis.XInfoGroup) bool { return x.Name == group })
	}
	inconsistent := 0
	for i := range 300 {
		commit(int64(i)) // the group exists, so the deletion below has something to delete
		var wg sync.WaitGroup
		wg.Go(func() { commit(int64(i)) })
		wg.Go(func() {
			if code := g.deleteGroup(ctx, group); code != 0 {
				t.Errorf("delete: error %d", code)
			}
		})
		wg.Wait()
		offsets, err := store.GroupExists(ctx, group)
		if err != nil {
			t.Fatal(err)
		}
		listed, err := store.Groups(context.WithoutCancel(ctx))
		if err != nil {
			t.Fatal(err)
		}
		if rg, l := redisGroup(), slices.Contains(listed, group); rg != offsets || l != offsets {
			inconsistent++
			if inconsistent <= 3 {
				t.Errorf("race %d: offsets %v, Redis consumer group %v, listed %v; want all alike", i, offsets, rg, l)
			}
		}
	}
	if inconsistent > 0 {
		t.Fatalf("%d of 300 races left the group inconsistent", inconsistent)
	}
}
