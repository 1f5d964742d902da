package gateway

// ListOffsets v0-v8.
//
// Timestamp -2 (earliest) and -4 (earliest local, KIP-405, v8; without tiered storage the same)
// answer the log start offset, -1 (latest) the high watermark, -3 (max timestamp, KIP-734) the offset
// of the record with the largest timestamp. Any other timestamp T answers the first offset whose
// record timestamp is >= T, with Apache semantics when producer timestamps are not monotonic (a
// per-partition time index of running-max timestamps in Redis), or offset -1 / timestamp -1 when no
// record qualifies. v0 answers OldStyleOffsets. As on Apache, -3 below v7, -4 below v8 and any other
// negative timestamp answer UNSUPPORTED_VERSION, and a partition listed more than once in a request
// answers INVALID_REQUEST, every time it is listed.
//
// Deviations: isolation_level is ignored (no transactions: the last stable offset is the high
// watermark); leader epochs are -1.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/redisstore"
)

func (c *conn) listOffsets(ctx context.Context, req *kmsg.ListOffsetsRequest) (kmsg.Response, error) {
	g := c.g
	resp := kmsg.NewPtrListOffsetsResponse()
	repeated := repeatedListOffsetsPartitions(req)
	for _, rt := range req.Topics {
		st := kmsg.NewListOffsetsResponseTopic()
		st.Topic = rt.Topic
		topic, terr := g.topics.get(ctx, rt.Topic)
		// The topic's earliest and latest lookups are one Redis round trip (one per master of a Redis
		// Cluster), not one per partition (a lag tool asks for every partition of every topic), and
		// its timestamp lookups usually two for up to 64 partitions (LookUpTimes). A topic deleted
		// through another gateway, while this one's view still lists it, is unknown rather than
		// empty: those round trips check that its partitions still exist. On a Redis Cluster a
		// master down fails its own partitions alone.
		var (
			ends  []int32
			slots []int
			asked []int64 // each one's timestamp
			times []redisstore.TimeLookup
			tslot []int
		)
		for _, rp := range rt.Partitions {
			sp := kmsg.NewListOffsetsResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.Timestamp, sp.Offset, sp.LeaderEpoch = -1, -1, -1
			switch {
			case terr != nil:
				sp.ErrorCode = errCode(terr)
			case repeated[partKey{rt.Topic, rp.Partition}]:
				sp.ErrorCode = kerr.InvalidRequest.Code
			case rp.Timestamp == -3 && req.Version < 7, rp.Timestamp == -4 && req.Version < 8, rp.Timestamp < -4:
				sp.ErrorCode = kerr.UnsupportedVersion.Code
			case rp.Partition < 0 || rp.Partition >= topic.Partitions:
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case rp.Timestamp == -1 || rp.Timestamp == -2 || rp.Timestamp == -4:
				ends = append(ends, rp.Partition)
				slots = append(slots, len(st.Partitions))
				asked = append(asked, rp.Timestamp)
			default:
				times = append(times, redisstore.TimeLookup{Partition: rp.Partition, Timestamp: rp.Timestamp, Known: rp.Partition < topic.PartitionMeta})
				tslot = append(tslot, len(st.Partitions))
			}
			st.Partitions = append(st.Partitions, sp)
		}
		if len(times) > 0 {
			for j, a := range g.store.LookUpTimes(ctx, rt.Topic, times) {
				sp := &st.Partitions[tslot[j]]
				if sp.ErrorCode = errCode(a.Err); a.Err == nil && a.Found {
					sp.Offset, sp.Timestamp = a.Offset, a.Timestamp
				}
			}
		}
		if len(ends) > 0 {
			offs, errs := g.store.KnownPartitionOffsets(ctx, rt.Topic, ends, topic.PartitionMeta)
			for j, i := range slots {
				sp := &st.Partitions[i]
				switch lookup := asked[j]; {
				case errs[j] != nil:
					sp.ErrorCode = errCode(errs[j]) // UNKNOWN_TOPIC_OR_PARTITION when its topic is gone
					sp.Offset, sp.Timestamp = -1, -1
				case lookup == -1:
					sp.Offset = offs[j].End
				case lookup == -2 || lookup == -4:
					sp.Offset = offs[j].Start
				}
			}
		}
		if req.Version == 0 {
			for i := range st.Partitions {
				if sp := &st.Partitions[i]; sp.ErrorCode == 0 && sp.Offset >= 0 {
					sp.OldStyleOffsets = []int64{sp.Offset}
				}
			}
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}

// repeatedListOffsetsPartitions is the partitions a ListOffsets request lists more than once (nil when
// none).
func repeatedListOffsetsPartitions(req *kmsg.ListOffsetsRequest) map[partKey]bool {
	n := 0
	for _, rt := range req.Topics {
		n += len(rt.Partitions)
	}
	if n < 2 {
		return nil
	}
	seen := make(map[partKey]bool, n)
	var repeated map[partKey]bool
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			k := partKey{rt.Topic, rp.Partition}
			if seen[k] {
				if repeated == nil {
					repeated = map[partKey]bool{}
				}
				repeated[k] = true
			}
			seen[k] = true
		}
	}
	return repeated
}
