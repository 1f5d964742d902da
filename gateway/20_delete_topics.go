package gateway

// DeleteTopics v0-v6.
//
// By name (v0-v5) or by name or topic ID (v6). Removes the partition streams and their side keys, then
// the registry entry, so a topic recreated under the same name starts empty. Unknown name ->
// UNKNOWN_TOPIC_OR_PARTITION, unknown ID -> UNKNOWN_TOPIC_ID. Committed offsets of groups on the topic
// stay until the groups are deleted (as on Apache, where they expire with offsets.retention).

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/redisstore"
)

func (c *conn) deleteTopics(ctx context.Context, req *kmsg.DeleteTopicsRequest) (kmsg.Response, error) {
	g := c.g
	resp := kmsg.NewPtrDeleteTopicsResponse()
	type target struct {
		name *string
		id   [16]byte
	}
	var targets []target
	if req.Version >= 6 {
		for _, t := range req.Topics {
			targets = append(targets, target{t.Topic, t.TopicID})
		}
	} else {
		for i := range req.TopicNames {
			targets = append(targets, target{name: &req.TopicNames[i]})
		}
	}
	for _, tg := range targets {
		st := kmsg.NewDeleteTopicsResponseTopic()
		st.Topic, st.TopicID = tg.name, tg.id
		var name string
		if tg.name != nil && *tg.name != "" {
			name = *tg.name
		} else {
			t, err := g.topics.byTopicID(ctx, tg.id)
			if err != nil {
				st.ErrorCode = kerr.UnknownTopicID.Code
				if !errors.Is(err, redisstore.ErrUnknownTopic) {
					st.ErrorCode = kerr.RequestTimedOut.Code
				}
				resp.Topics = append(resp.Topics, st)
				continue
			}
			name = t.Name
			st.Topic = &name
		}
		if t, err := g.topics.get(ctx, name); err == nil {
			st.TopicID = t.ID
		}
		err := g.deleteTopic(ctx, name)
		switch {
		case errors.Is(err, redisstore.ErrUnknownTopic):
			st.ErrorCode = kerr.UnknownTopicOrPartition.Code
		case err != nil:
			st.ErrorCode = kerr.RequestTimedOut.Code
		default:
			g.log.Info().Str("topic", name).Msg("topic deleted")
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}

// deleteTopic removes a topic from Redis and forgets what this gateway keeps of it (its registry view,
// whose next load also drops its fetch sizing, and its tail cache), for both the Kafka API and the
// admin API.
func (g *Gateway) deleteTopic(ctx context.Context, name string) error {
	err := g.store.DeleteTopic(ctx, name)
	g.topics.invalidate()
	g.tail.forget(name)
	return err
}
