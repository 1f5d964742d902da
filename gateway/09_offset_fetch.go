package gateway

// OffsetFetch v0-v9 (v9's KIP-848 member id and epoch are ignored).
//
// Reads the committed offsets from Redis on every request (no in-memory cache), so a manual-assignment
// consumer on any gateway, or a group after a coordinator move, sees every commit. Null topics (v2+)
// returns every committed partition of the group; v8 batches several groups. A partition without a
// commit (or a group that does not exist) answers offset -1 with no error, as Apache does. Leader epochs
// are -1. require_stable (v7+) is accepted: without transactions no offset is ever pending.
// Only the coordinator answers (NOT_COORDINATOR elsewhere), as clients expect. A group-level error
// (v2+) comes with no partitions, as on Apache: Sarama reads a partition listed with offset -1 and no
// error of its own as "no commit", and would start that partition over from its initial offset.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/redisstore"
)

type offsetKey struct {
	topic     string
	partition int32
}

func (c *conn) offsetFetch(ctx context.Context, req *kmsg.OffsetFetchRequest) (kmsg.Response, error) {
	g := c.g
	resp := kmsg.NewPtrOffsetFetchResponse()
	if req.Version >= 8 {
		for _, rg := range req.Groups {
			gr := kmsg.NewOffsetFetchResponseGroup()
			gr.Group = rg.Group
			var topics []offsetFetchTopic
			if rg.Topics != nil {
				topics = make([]offsetFetchTopic, 0, len(rg.Topics))
				for _, t := range rg.Topics {
					topics = append(topics, offsetFetchTopic{t.Topic, t.Partitions})
				}
			}
			code, results := g.fetchOffsets(ctx, rg.Group, topics, rg.Topics == nil)
			gr.ErrorCode = code
			if code != 0 {
				results = nil
			}
			for _, r := range results {
				t := kmsg.NewOffsetFetchResponseGroupTopic()
				t.Topic = r.topic
				for _, p := range r.parts {
					pp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
					pp.Partition, pp.Offset, pp.LeaderEpoch, pp.Metadata, pp.ErrorCode = p.partition, p.offset, -1, &p.metadata, p.code
					t.Partitions = append(t.Partitions, pp)
				}
				gr.Topics = append(gr.Topics, t)
			}
			resp.Groups = append(resp.Groups, gr)
		}
		return resp, nil
	}
	var topics []offsetFetchTopic
	for _, t := range req.Topics {
		topics = append(topics, offsetFetchTopic{t.Topic, t.Partitions})
	}
	code, results := g.fetchOffsets(ctx, req.Group, topics, req.Topics == nil && req.Version >= 2)
	if req.Version >= 2 {
		resp.ErrorCode = code
		if code != 0 {
			results = nil
		}
	}
	for _, r := range results {
		t := kmsg.NewOffsetFetchResponseTopic()
		t.Topic = r.topic
		for _, p := range r.parts {
			pp := kmsg.NewOffsetFetchResponseTopicPartition()
			pp.Partition, pp.Offset, pp.LeaderEpoch, pp.Metadata, pp.ErrorCode = p.partition, p.offset, -1, &p.metadata, p.code
			if req.Version < 2 && code != 0 {
				pp.ErrorCode = code // v0-v1 have no top-level error
			}
			t.Partitions = append(t.Partitions, pp)
		}
		resp.Topics = append(resp.Topics, t)
	}
	return resp, nil
}

type offsetFetchTopic struct {
	topic      string
	partitions []int32
}

type fetchedPartition struct {
	partition int32
	offset    int64
	metadata  string
	code      int16
}

type fetchedTopic struct {
	topic string
	parts []fetchedPartition
}

// fetchOffsets answers one group: the requested partitions (or all committed ones) with their offsets.
func (g *Gateway) fetchOffsets(ctx context.Context, group string, topics []offsetFetchTopic, all bool) (int16, []fetchedTopic) {
	code := g.notCoordinator(group)
	var committed []redisstore.Committed
	if code == 0 {
		var err error
		committed, err = g.store.CommittedOffsets(ctx, group)
		if err != nil {
			code = groupErrCode(err)
		}
	}
	if all {
		var out []fetchedTopic
		for _, c := range committed {
			if len(out) == 0 || out[len(out)-1].topic != c.Topic {
				out = append(out, fetchedTopic{topic: c.Topic})
			}
			t := &out[len(out)-1]
			t.parts = append(t.parts, fetchedPartition{partition: c.Partition, offset: c.Offset, metadata: c.Metadata})
		}
		return code, out
	}
	byKey := make(map[offsetKey]redisstore.Committed, len(committed))
	for _, c := range committed {
		byKey[offsetKey{c.Topic, c.Partition}] = c
	}
	out := make([]fetchedTopic, 0, len(topics))
	for _, t := range topics {
		ft := fetchedTopic{topic: t.topic}
		for _, p := range t.partitions {
			fp := fetchedPartition{partition: p, offset: -1}
			if c, ok := byKey[offsetKey{t.topic, p}]; ok {
				fp.offset, fp.metadata = c.Offset, c.Metadata
			}
			ft.parts = append(ft.parts, fp)
		}
		out = append(out, ft)
	}
	return code, out
}
