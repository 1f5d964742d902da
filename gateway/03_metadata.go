package gateway

// Metadata v0-v12.
//
// Brokers are the live gateways; partition leadership is spread over them deterministically (every
// gateway gives the same answer for the same membership view) and every gateway serves any partition,
// so a stale leader view never fails a request. Replicas and ISR name the leader only: replication is
// Redis's business. Leader epochs are -1 so clients skip leader-epoch validation.
//
// Topics: null (v1+) or empty (v0) asks for all. An unknown topic is created when the request allows
// it (always below v4; allow_auto_topic_creation from v4) and topics.autocreate is on, with the
// configured default partitions; otherwise UNKNOWN_TOPIC_OR_PARTITION. An illegal name (the empty one
// too) -> INVALID_TOPIC_EXCEPTION. A name colliding with an existing topic on '.'/'_' is not created:
// UNKNOWN_TOPIC_OR_PARTITION, as from Apache's KRaft brokers, whose controller refuses the creation
// (ZooKeeper-mode brokers answered INVALID_TOPIC_EXCEPTION). v10+ carries topic IDs; v12 can ask by
// topic ID (UNKNOWN_TOPIC_ID), an entry with neither a name nor an ID -> INVALID_REQUEST; at v10-v11
// a null name or a topic ID refuses the whole request (INVALID_REQUEST on every topic), as on Apache.
// Authorized operations are not computed (reported as "not requested").

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/redisstore"
)

func (c *conn) metadata(ctx context.Context, req *kmsg.MetadataRequest) (kmsg.Response, error) {
	g := c.g
	if req.Version >= 10 && req.Version <= 11 {
		for _, rt := range req.Topics {
			if rt.Topic == nil || rt.TopicID != [16]byte{} {
				return metadataRefused(req, kerr.InvalidRequest.Code), nil
			}
		}
	}
	resp := kmsg.NewPtrMetadataResponse()
	live := g.nodes.brokers() // one view for the brokers and the leaders
	for _, n := range live {
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID, b.Host, b.Port = n.ID, n.Host, n.Port
		resp.Brokers = append(resp.Brokers, b)
	}
	clusterID := g.cfg.ClusterID
	resp.ClusterID = &clusterID
	resp.ControllerID = g.controllerID()

	all := req.Topics == nil || (req.Version == 0 && len(req.Topics) == 0)
	if all {
		topics, err := g.topics.all(ctx)
		if err != nil {
			return nil, err // without the registry there is no honest answer; the client reconnects
		}
		for _, name := range redisstore.TopicNames(topics) {
			resp.Topics = append(resp.Topics, g.topicMetadata(live, topics[name], 0))
		}
		return resp, nil
	}
	autoCreate := g.cfg.AutoCreateTopics && (req.Version < 4 || req.AllowAutoTopicCreation)
	for _, rt := range req.Topics {
		var (
			t   redisstore.Topic
			err error
		)
		switch {
		case req.Version >= 12 && rt.TopicID != [16]byte{}:
			t, err = g.topics.byTopicID(ctx, rt.TopicID)
			if errors.Is(err, redisstore.ErrUnknownTopic) {
				mt := kmsg.NewMetadataResponseTopic()
				mt.TopicID, mt.ErrorCode = rt.TopicID, kerr.UnknownTopicID.Code
				resp.Topics = append(resp.Topics, mt)
				continue
			}
		case rt.Topic == nil: // v12: neither a name nor an ID
			mt := kmsg.NewMetadataResponseTopic()
			mt.ErrorCode = kerr.InvalidRequest.Code
			resp.Topics = append(resp.Topics, mt)
			continue
		default:
			name := *rt.Topic
			if validTopicName(name) != nil {
				mt := kmsg.NewMetadataResponseTopic()
				mt.Topic, mt.ErrorCode = rt.Topic, kerr.InvalidTopicException.Code
				resp.Topics = append(resp.Topics, mt)
				continue
			}
			t, err = g.topics.get(ctx, name)
			if errors.Is(err, redisstore.ErrUnknownTopic) && autoCreate {
				t, err = g.autoCreateTopic(ctx, name)
			}
			t.Name = name
		}
		if err != nil {
			mt := kmsg.NewMetadataResponseTopic()
			mt.Topic, mt.TopicID, mt.ErrorCode = rt.Topic, rt.TopicID, errCode(err)
			resp.Topics = append(resp.Topics, mt)
			continue
		}
		resp.Topics = append(resp.Topics, g.topicMetadata(live, t, 0))
	}
	return resp, nil
}

func (g *Gateway) topicMetadata(live []gatewayNode, t redisstore.Topic, code int16) kmsg.MetadataResponseTopic {
	mt := kmsg.NewMetadataResponseTopic()
	name := t.Name
	mt.Topic, mt.TopicID, mt.ErrorCode = &name, t.ID, code
	for p := int32(0); p < t.Partitions; p++ {
		mp := kmsg.NewMetadataResponseTopicPartition()
		mp.Partition = p
		leader := g.nodes.leaderIn(live, t.Name, p).ID
		mp.Leader, mp.LeaderEpoch = leader, -1
		mp.Replicas, mp.ISR = []int32{leader}, []int32{leader}
		mt.Partitions = append(mt.Partitions, mp)
	}
	return mt
}

// controllerID names the lowest live gateway, so every gateway reports the same controller.
func (g *Gateway) controllerID() int32 {
	if live := g.nodes.alive(); len(live) > 0 {
		return live[0].ID
	}
	return g.cfg.NodeID
}

// metadataRefused answers every requested topic with code, as Apache answers a Metadata request it
// refuses as a whole.
func metadataRefused(req *kmsg.MetadataRequest, code int16) *kmsg.MetadataResponse {
	resp := kmsg.NewPtrMetadataResponse()
	for _, rt := range req.Topics {
		mt := kmsg.NewMetadataResponseTopic()
		name := "" // the response has no null name
		if rt.Topic != nil {
			name = *rt.Topic
		}
		mt.Topic, mt.TopicID, mt.ErrorCode = &name, rt.TopicID, code
		resp.Topics = append(resp.Topics, mt)
	}
	return resp
}

// autoCreateTopic creates name, which the topic cache does not hold, with the configured defaults;
// losing a race to another gateway is fine. A name colliding with a cached topic on '.'/'_' is not
// created (redisstore.ErrUnknownTopic).
func (g *Gateway) autoCreateTopic(ctx context.Context, name string) (redisstore.Topic, error) {
	if name == clusterMetadataTopic {
		return redisstore.Topic{}, redisstore.ErrUnknownTopic // never created, as on Apache
	}
	collides, err := g.topics.collides(ctx, name)
	if err != nil {
		return redisstore.Topic{}, err
	}
	if collides {
		g.log.Info().Str("topic", name).Msg("topic not auto-created: its name collides with an existing topic on '.' and '_'")
		return redisstore.Topic{}, redisstore.ErrUnknownTopic
	}
	t := g.newTopic(name, g.cfg.DefaultPartitions, nil)
	err = g.store.CreateTopic(ctx, t)
	g.topics.changed(err)
	switch {
	case errors.Is(err, redisstore.ErrTopicExists): // created meanwhile, through any gateway
	case errors.Is(err, redisstore.ErrTopicCollides): // a colliding name created meanwhile
		g.log.Info().Str("topic", name).Msg("topic not auto-created: its name collides with an existing topic on '.' and '_'")
		return redisstore.Topic{}, redisstore.ErrUnknownTopic
	case err != nil:
		return redisstore.Topic{}, err
	default:
		g.log.Info().Str("topic", name).Int32("partitions", t.Partitions).Msg("topic auto-created")
	}
	return g.topics.get(ctx, name)
}
