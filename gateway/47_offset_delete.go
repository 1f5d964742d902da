package gateway

// OffsetDelete v0.
//
// Deletes committed offsets of partitions. Unknown group (not in the coordinator, no offsets in Redis)
// -> GROUP_ID_NOT_FOUND; a non-empty group of another protocol type -> NON_EMPTY_GROUP; for a
// non-empty "consumer" group, partitions of topics it subscribes to -> GROUP_SUBSCRIBED_TO_TOPIC and
// the others are deleted, as Apache does.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/redisstore"
)

func (c *conn) offsetDelete(ctx context.Context, req *kmsg.OffsetDeleteRequest) (kmsg.Response, error) {
	g := c.g
	resp := kmsg.NewPtrOffsetDeleteResponse()
	if code := g.notCoordinator(req.Group); code != 0 {
		resp.ErrorCode = code
		return resp, nil
	}
	defer g.writes.delete(req.Group)()
	info, live := g.coord.Describe(ctx, req.Group)
	if live && info.State == "Dead" {
		live = false
	}
	if !live {
		exists, err := g.store.GroupExists(ctx, req.Group)
		if err != nil {
			resp.ErrorCode = groupErrCode(err)
			return resp, nil
		}
		if !exists {
			resp.ErrorCode = kerr.GroupIDNotFound.Code
			return resp, nil
		}
	}
	nonEmpty := live && info.State != "Empty"
	if nonEmpty && info.ProtocolType != "consumer" {
		resp.ErrorCode = kerr.NonEmptyGroup.Code
		return resp, nil
	}
	var del []redisstore.OffsetCommit
	for _, rt := range req.Topics {
		st := kmsg.NewOffsetDeleteResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewOffsetDeleteResponseTopicPartition()
			sp.Partition = rp.Partition
			if nonEmpty && info.IsSubscribed(rt.Topic) {
				sp.ErrorCode = kerr.GroupSubscribedToTopic.Code
			} else {
				del = append(del, redisstore.OffsetCommit{Topic: rt.Topic, Partition: rp.Partition})
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	if err := g.store.DeleteOffsets(ctx, req.Group, del); err != nil {
		resp.ErrorCode = groupErrCode(err)
	}
	return resp, nil
}
