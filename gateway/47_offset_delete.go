package gateway

// OffsetDelete v0.
//
// Deletes committed offsets of partitions. Unknown group (not in the coordinator, no offsets in Redis)
// -> GROUP_ID_NOT_FOUND; a non-empty group of another protocol type -> NON_EMPTY_GROUP; for a
// non-empty "consumer" group, partitions of topics it subscribes to -> GROUP_SUBSCRIBED_TO_TOPIC and
// the others are deleted, as Apache does. A partition of no known topic -> UNKNOWN_TOPIC_OR_PARTITION,
// unless the group has an offset there (a deleted topic's, which kgate keeps), which is deleted. The
// coordinator closing, or the group moving meanwhile -> COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR:
// a group whose members cannot be told is not taken for one without members. A deletion that finds the
// group claimed by another gateway since this one checked it (redisstore/owner.go) deletes nothing and
// answers NOT_COORDINATOR.

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
	// Which partitions exist is settled before the group's writes are held: a lookup can wait out a
	// Redis timeout, and the group's commits wait behind the hold.
	unknown, code := g.unknownPartitions(ctx, req)
	if code != 0 {
		resp.ErrorCode = code
		return resp, nil
	}
	defer g.writes.delete(req.Group)()
	token, err := g.claimGroup(ctx, req.Group) // before the check, as a commit's (claimGroup)
	if err != nil {
		resp.ErrorCode = groupErrCode(err)
		return resp, nil
	}
	info, live, code := g.describeGroup(ctx, req.Group)
	if code != 0 {
		resp.ErrorCode = code
		return resp, nil
	}
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
			switch {
			case unknown[partKey{rt.Topic, rp.Partition}]:
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case nonEmpty && info.IsSubscribed(rt.Topic):
				sp.ErrorCode = kerr.GroupSubscribedToTopic.Code
			default:
				del = append(del, redisstore.OffsetCommit{Topic: rt.Topic, Partition: rp.Partition})
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	if err := g.store.DeleteOffsets(ctx, req.Group, token, del); err != nil {
		if isDisowned(err) {
			g.disowned(ctx, req.Group, token)
		}
		resp.ErrorCode = groupErrCode(err)
	}
	return resp, nil
}

// unknownPartitions are the partitions of req that are no known topic's and where the group has no
// offset, answered UNKNOWN_TOPIC_OR_PARTITION as on Apache; an offset of a deleted topic's partition,
// which kgate keeps (Apache drops them with the topic), is deleted like any other. code is the
// request's error when the topics or offsets cannot be read.
func (g *Gateway) unknownPartitions(ctx context.Context, req *kmsg.OffsetDeleteRequest) (unknown map[partKey]bool, code int16) {
	var committed map[partKey]bool // read once, when a partition is not a known topic's
	for _, rt := range req.Topics {
		topic, terr := g.topics.get(ctx, rt.Topic)
		if terr != nil && terr != redisstore.ErrUnknownTopic {
			return nil, groupErrCode(terr)
		}
		for _, rp := range rt.Partitions {
			if terr == nil && rp.Partition >= 0 && rp.Partition < topic.Partitions {
				continue
			}
			if committed == nil {
				cs, err := g.store.CommittedOffsets(ctx, req.Group)
				if err != nil {
					return nil, groupErrCode(err)
				}
				committed = map[partKey]bool{}
				for _, c := range cs {
					committed[partKey{c.Topic, c.Partition}] = true
				}
			}
			if k := (partKey{rt.Topic, rp.Partition}); !committed[k] {
				if unknown == nil {
					unknown = map[partKey]bool{}
				}
				unknown[k] = true
			}
		}
	}
	return unknown, 0
}
