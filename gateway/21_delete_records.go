package gateway

// DeleteRecords v0-v2.
//
// Moves a partition's log start offset to the requested offset (-1: the high watermark) and trims the
// stream below it (XTRIM MINID). An offset beyond the high watermark -> OFFSET_OUT_OF_RANGE; a
// request below the current log start offset changes nothing and answers the current one. A topic
// deleted through another gateway while this one's topic view still lists it answers
// UNKNOWN_TOPIC_OR_PARTITION (its partitions' meta hashes are gone), as Fetch does. The
// request's timeout_ms bounds the whole request: the partitions are trimmed one after the other, and
// with Redis stalled each would otherwise wait out a command timeout of its own.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
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
				del := g.store.DeleteRecords
				if rp.Partition < topic.PartitionMeta {
					// A topic deleted through another gateway, still in this one's view, is unknown,
					// not an empty partition.
					del = g.store.DeleteKnownRecords
				}
				lw, err := del(ctx, rt.Topic, rp.Partition, rp.Offset)
				if err != nil {
					sp.ErrorCode = errCode(err)
					break
				}
				sp.LowWatermark = lw
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}
