package gateway

// CreatePartitions v0-v3.
//
// Grows a topic's partition count (atomically in the registry; never shrinks). A count not above the
// current one -> INVALID_PARTITIONS; unknown topic -> UNKNOWN_TOPIC_OR_PARTITION; a topic named twice
// -> INVALID_REQUEST; validate_only checks without changing; Redis failures -> REQUEST_TIMED_OUT
// (adminErrCode). Replica assignments are ignored.

import (
	"context"
	"errors"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/redisstore"
)

func (c *conn) createPartitions(ctx context.Context, req *kmsg.CreatePartitionsRequest) (kmsg.Response, error) {
	g := c.g
	ctx, cancel := requestDeadline(ctx, req.TimeoutMillis)
	defer cancel()
	resp := kmsg.NewPtrCreatePartitionsResponse()
	seen := map[string]int{}
	for _, rt := range req.Topics {
		seen[rt.Topic]++
	}
	for _, rt := range req.Topics {
		st := kmsg.NewCreatePartitionsResponseTopic()
		st.Topic = rt.Topic
		msg := func(code int16, m string) { st.ErrorCode, st.ErrorMessage = code, &m }
		t, err := g.topics.get(ctx, rt.Topic)
		switch {
		case seen[rt.Topic] > 1:
			msg(kerr.InvalidRequest.Code, "topic named more than once")
		case err != nil:
			st.ErrorCode = adminErrCode(err)
		case rt.Count <= t.Partitions:
			msg(kerr.InvalidPartitions.Code, "partition count can only grow")
		case rt.Count > maxTopicPartitions:
			msg(kerr.InvalidPartitions.Code, "partition count must be at most "+strconv.Itoa(maxTopicPartitions))
		case req.ValidateOnly:
		default:
			err := g.store.SetPartitions(ctx, rt.Topic, rt.Count)
			g.topics.changed(err)
			switch {
			case errors.Is(err, redisstore.ErrInvalidPartitions):
				msg(kerr.InvalidPartitions.Code, "partition count can only grow")
			case err != nil:
				st.ErrorCode = adminErrCode(err)
			default:
				g.log.Info().Str("topic", rt.Topic).Int32("partitions", rt.Count).Msg("partitions added")
			}
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}
