package gateway

// DeleteRecords v0-v2.
//
// Moves a partition's log start offset to the requested offset (-1: the high watermark) and trims the
// stream below it (XTRIM MINID). An offset beyond the high watermark -> OFFSET_OUT_OF_RANGE; a
// request below the current log start offset changes nothing and answers the current one. A topic
// deleted through another gateway while this one's topic view still lists it answers
// UNKNOWN_TOPIC_OR_PARTITION (its partitions' meta hashes are gone), as Fetch does. A topic's
// partitions are trimmed in one round trip (one per master of a Redis Cluster, each master's at once
// with the others': a master down fails its own partitions alone). The request's timeout_ms bounds the
// whole request: with Redis stalled a partition would otherwise wait out a command timeout; those not
// trimmed by then answer NOT_LEADER_OR_FOLLOWER, which admin clients retry (a trim is idempotent).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/redisstore"
)

func (c *conn) deleteRecords(ctx context.Context, req *kmsg.DeleteRecordsRequest) (kmsg.Response, error) {
	g := c.g
	resp := kmsg.NewPtrDeleteRecordsResponse()
	ctx, cancel := requestDeadline(ctx, req.TimeoutMillis)
	defer cancel()
	for _, rt := range req.Topics {
		st := kmsg.NewDeleteRecordsResponseTopic()
		st.Topic = rt.Topic
		topic, terr := g.topics.get(ctx, rt.Topic)
		var (
			trims []redisstore.Trim
			slots []int
		)
		for _, rp := range rt.Partitions {
			sp := kmsg.NewDeleteRecordsResponseTopicPartition()
			sp.Partition, sp.LowWatermark = rp.Partition, -1
			switch {
			case terr != nil:
				sp.ErrorCode = errCode(terr)
			case rp.Partition < 0 || rp.Partition >= topic.Partitions:
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case rp.Offset < -1:
				sp.ErrorCode = kerr.OffsetOutOfRange.Code
			default:
				// A topic deleted through another gateway, still in this one's view, is unknown, not
				// an empty partition (Known).
				trims = append(trims, redisstore.Trim{Partition: rp.Partition, Before: rp.Offset, Known: rp.Partition < topic.PartitionMeta})
				slots = append(slots, len(st.Partitions))
			}
			st.Partitions = append(st.Partitions, sp)
		}
		if len(trims) > 0 {
			for j, r := range g.store.DeleteRecordsOf(ctx, rt.Topic, trims) {
				sp := &st.Partitions[slots[j]]
				if sp.ErrorCode = errCode(r.Err); r.Err == nil {
					sp.LowWatermark = r.Start
				}
			}
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}
