package gateway

// DeleteTopics v0-v6.
//
// By name (v0-v5) or, from v6, by name or by topic ID: an entry naming both, or neither, ->
// INVALID_REQUEST, as on Apache. Removes the partition streams and their side keys, then the registry
// entry, so a topic recreated under the same name starts empty. Unknown name ->
// UNKNOWN_TOPIC_OR_PARTITION (the empty name too: Apache does not validate names here), unknown ID ->
// UNKNOWN_TOPIC_ID. A delete by ID removes the topic only while it still has that ID: the ID goes to a
// name through this gateway's registry view, up to a second old, and the topic may have been deleted
// and created again meanwhile. Every group's committed offsets on the topic go with it, as on Apache,
// so a topic created again under the name does not start its consumers from the old topic's offsets.

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/redisstore"
)

func (c *conn) deleteTopics(ctx context.Context, req *kmsg.DeleteTopicsRequest) (kmsg.Response, error) {
	g := c.g
	ctx, cancel := requestDeadline(ctx, req.TimeoutMillis)
	defer cancel()
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
		byID := tg.id != [16]byte{}
		if (tg.name != nil) == byID {
			msg := "neither a topic name nor a topic ID was given"
			if byID {
				msg = "both a topic name and a topic ID were given"
			}
			st.ErrorCode, st.ErrorMessage = kerr.InvalidRequest.Code, &msg
			resp.Topics = append(resp.Topics, st)
			continue
		}
		var name string
		if byID {
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
		} else {
			name = *tg.name
			if t, err := g.topics.get(ctx, name); err == nil {
				st.TopicID = t.ID
			}
		}
		err := g.deleteTopic(ctx, name, tg.id)
		switch {
		case errors.Is(err, redisstore.ErrUnknownTopic) && byID:
			st.Topic, st.ErrorCode = nil, kerr.UnknownTopicID.Code // the ID is gone, whatever the name holds now
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
// admin API. A zero id deletes whatever topic has the name; any other only the topic with that ID
// (redisstore.ErrUnknownTopic when the name holds another).
func (g *Gateway) deleteTopic(ctx context.Context, name string, id [16]byte) error {
	var err error
	if id == ([16]byte{}) {
		err = g.store.DeleteTopic(ctx, name)
	} else {
		err = g.store.DeleteTopicID(ctx, name, id)
	}
	g.topics.changed(err)
	g.tail.forget(name)
	if err == nil {
		forgetTopicMetrics(name)
	}
	return err
}
