package gateway

// OffsetCommit v0-v9.
//
// The coordinator validates the committer (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID,
// REBALANCE_IN_PROGRESS; a simple commit with generation -1 and no member only while the group has no
// members, as Apache). Each accepted partition is then stored by redisstore.CommitOffsets: canonical
// hash + timestamp sidecar + metadata in one script on the group's slot, and the Redis consumer group on
// the partition's stream moved to the committed offset with every pending entry below it acked.
// A Redis failure answers COORDINATOR_NOT_AVAILABLE for the partitions (never success). The script
// stores nothing once another gateway claimed the group since this one did (before its validation):
// the partitions are answered NOT_COORDINATOR and the group leaves this gateway's memory
// (Gateway.disowned), so a commit this gateway validated before the group moved cannot overwrite the
// new coordinator's.
//
// Unknown topic or partition -> UNKNOWN_TOPIC_OR_PARTITION, answered before the coordinator is asked,
// as on Apache; metadata over 4096 bytes -> OFFSET_METADATA_TOO_LARGE. retention_time_ms (v2-v4) is ignored: offsets live until deleted.
//
// Deviation: a commit of generation >= 0 to a group the coordinator does not know is
// ILLEGAL_GENERATION at every version; Apache answers GROUP_ID_NOT_FOUND from v9 on. Membership is in
// memory, so after a coordinator restart every group is unknown, and ILLEGAL_GENERATION makes a
// classic consumer rejoin; franz-go, which sends v9, rejoins after a failed commit only on that or
// UNKNOWN_MEMBER_ID.

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/redisstore"
)

func (c *conn) offsetCommit(ctx context.Context, req *kmsg.OffsetCommitRequest) (kmsg.Response, error) {
	g := c.g
	resp := kmsg.NewPtrOffsetCommitResponse()
	// Unknown topics and partitions first, as Apache answers them before the coordinator is asked: a
	// commit naming nothing that exists is not validated, and does not count as the member's heartbeat.
	known := 0
	for _, rt := range req.Topics {
		st := kmsg.NewOffsetCommitResponseTopic()
		st.Topic = rt.Topic
		topic, terr := g.topics.get(ctx, rt.Topic)
		for _, rp := range rt.Partitions {
			sp := kmsg.NewOffsetCommitResponseTopicPartition()
			sp.Partition = rp.Partition
			switch {
			case terr != nil:
				sp.ErrorCode = groupErrCode(terr)
			case rp.Partition < 0 || rp.Partition >= topic.Partitions:
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			default:
				known++
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	if known == 0 {
		return resp, nil
	}
	code := g.notCoordinator(req.Group)
	defer g.writes.commit(req.Group)() // from the validation to the last write
	var token string
	if code == 0 {
		// Claimed before the validation: a write validated here is refused once another gateway
		// claimed the group after this one (Gateway.claimGroup).
		var err error
		token, err = g.claimGroup(ctx, req.Group)
		code = groupErrCode(err)
	}
	if code == 0 {
		gen := req.Generation
		if req.Version == 0 {
			gen = -1
		}
		code = g.coord.ValidateCommit(ctx, req.Group, req.MemberID, req.InstanceID, gen)
	}
	type slot struct{ t, p int }
	var (
		commits []redisstore.OffsetCommit
		slots   []slot
	)
	for ti, rt := range req.Topics {
		for pi, rp := range rt.Partitions {
			sp := &resp.Topics[ti].Partitions[pi]
			switch {
			case sp.ErrorCode != 0: // unknown, above
			case code != 0:
				sp.ErrorCode = code
			case rp.Metadata != nil && commitMetadataTooLarge(*rp.Metadata):
				sp.ErrorCode = kerr.OffsetMetadataTooLarge.Code
			case rp.Offset < 0:
				sp.ErrorCode = kerr.InvalidCommitOffsetSize.Code
			default:
				md := ""
				if rp.Metadata != nil {
					md = *rp.Metadata
				}
				commits = append(commits, redisstore.OffsetCommit{Topic: rt.Topic, Partition: rp.Partition, Offset: rp.Offset, Metadata: md})
				slots = append(slots, slot{ti, pi})
			}
		}
	}
	if len(commits) > 0 {
		errs := g.store.CommitOffsets(ctx, req.Group, token, commits, time.Now())
		stored := 0
		for i, err := range errs {
			if err != nil {
				resp.Topics[slots[i].t].Partitions[slots[i].p].ErrorCode = groupErrCode(err)
				if !isDisowned(err) {
					c.log.Warn().Err(err).Str("group", req.Group).Msg("offset commit failed")
				}
				continue
			}
			stored++
		}
		if isDisowned(errs[0]) { // refused as a whole
			g.disowned(ctx, req.Group, token)
		}
		if stored > 0 {
			offsetsCommitted(req.Group, stored)
		}
	}
	return resp, nil
}
