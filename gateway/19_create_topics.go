package gateway

// CreateTopics v0-v7.
//
// Validates names (Apache's legal characters and length; a name colliding with an existing one on
// '.'/'_' is refused INVALID_TOPIC_EXCEPTION with Apache's message; the check and the registration
// are one step in Redis, so two gateways creating "a.b" and "a_b" at once do not both succeed), partition counts (-1 = topics.partitions) and configs (unknown
// names or bad values -> INVALID_CONFIG); validate_only checks without creating. Existing topic ->
// TOPIC_ALREADY_EXISTS. v5+ returns the partition count, replication factor and configs; v7 the ID.
//
// Manual replica assignments must name partitions 0 to n-1, each once (INVALID_REPLICA_ASSIGNMENT
// otherwise, as on Apache).
//
// Deviation: replication is Redis's, so any replication factor (-1 or >= 1) is accepted and reported
// as 1; the replicas of manual assignments are ignored (their partitions give the count).

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/redisstore"
)

// clusterMetadataTopic is the KRaft metadata log's name, which Apache refuses to create as a topic.
const clusterMetadataTopic = "__cluster_metadata"

func (c *conn) createTopics(ctx context.Context, req *kmsg.CreateTopicsRequest) (kmsg.Response, error) {
	g := c.g
	ctx, cancel := requestDeadline(ctx, req.TimeoutMillis)
	defer cancel()
	resp := kmsg.NewPtrCreateTopicsResponse()
	existing, collisions, err := g.topics.allWithCollisions(ctx)
	seen := map[string]int{}
	for _, rt := range req.Topics {
		seen[rt.Topic]++
	}
	for _, rt := range req.Topics {
		other, collides := collisions.collides(rt.Topic)
		st := kmsg.NewCreateTopicsResponseTopic()
		st.Topic = rt.Topic
		st.NumPartitions, st.ReplicationFactor = -1, -1
		msg := func(code int16, m string) {
			st.ErrorCode = code
			st.ErrorMessage = &m
		}
		partitions := rt.NumPartitions
		if partitions == -1 {
			partitions = g.cfg.DefaultPartitions
		}
		if len(rt.ReplicaAssignment) > 0 {
			partitions = int32(len(rt.ReplicaAssignment))
		}
		configs := map[string]string{}
		var nullConfig string
		for _, kv := range rt.Configs {
			if kv.Value == nil {
				nullConfig = kv.Name
				continue
			}
			configs[kv.Name] = *kv.Value
		}
		switch {
		case err != nil: // the registry could not be read: retriable, as when the create itself fails
			st.ErrorCode = kerr.RequestTimedOut.Code
		case seen[rt.Topic] > 1:
			msg(kerr.InvalidRequest.Code, "topic named more than once in the request")
		case validTopicName(rt.Topic) != nil:
			msg(kerr.InvalidTopicException.Code, "topic name is illegal: 1-249 characters of [a-zA-Z0-9._-], not '.' or '..'")
		case rt.Topic == clusterMetadataTopic:
			msg(kerr.InvalidRequest.Code, "Creation of internal topic "+clusterMetadataTopic+" is prohibited.")
		case existing[rt.Topic].Partitions > 0:
			msg(kerr.TopicAlreadyExists.Code, "topic '"+rt.Topic+"' already exists")
		case collides:
			msg(kerr.InvalidTopicException.Code, collisionMessage(rt.Topic, other))
		case len(rt.ReplicaAssignment) > 0 && (rt.NumPartitions != -1 || rt.ReplicationFactor != -1):
			msg(kerr.InvalidRequest.Code, "both a partition count or replication factor and a replica assignment were set")
		case len(rt.ReplicaAssignment) > 0 && !assignsEachPartitionOnce(rt.ReplicaAssignment):
			msg(kerr.InvalidReplicaAssignment.Code, "partitions should be a consecutive 0-based integer sequence, each assigned once")
		case partitions < 1:
			msg(kerr.InvalidPartitions.Code, "number of partitions must be at least 1 (or -1 for the default)")
		case partitions > maxTopicPartitions:
			msg(kerr.InvalidPartitions.Code, "number of partitions must be at most "+strconv.Itoa(maxTopicPartitions))
		case rt.ReplicationFactor == 0 || rt.ReplicationFactor < -1:
			msg(kerr.InvalidReplicationFactor.Code, "replication factor must be at least 1 (or -1 for the default)")
		case nullConfig != "":
			msg(kerr.InvalidConfig.Code, "null value not supported for topic config "+nullConfig)
		default:
			if name, verr := validateTopicConfigs(configs); verr != nil {
				msg(kerr.InvalidConfig.Code, name+": "+verr.Error())
				break
			}
			t := g.newTopic(rt.Topic, partitions, configs)
			if !req.ValidateOnly {
				if cerr := g.store.CreateTopic(ctx, t); cerr != nil {
					var ce *redisstore.CollisionError
					switch {
					case errors.Is(cerr, redisstore.ErrTopicExists):
						msg(kerr.TopicAlreadyExists.Code, "topic '"+rt.Topic+"' already exists")
					case errors.As(cerr, &ce):
						msg(kerr.InvalidTopicException.Code, collisionMessage(rt.Topic, ce.Other))
					default:
						st.ErrorCode = kerr.RequestTimedOut.Code
					}
					g.topics.changed(cerr)
					break
				}
				g.topics.invalidate()
				g.log.Info().Str("topic", rt.Topic).Int32("partitions", partitions).Msg("topic created")
			}
			// A later topic of the request colliding with this one on '.' and '_' is refused too.
			collisions[dotsAsUnderscores(rt.Topic)] = rt.Topic
			st.TopicID = t.ID
			st.NumPartitions, st.ReplicationFactor = partitions, 1
			for _, name := range sortedConfigNames() {
				v, override := g.topicConfig(t, name)
				cc := kmsg.NewCreateTopicsResponseTopicConfig()
				cc.Name, cc.Value = name, &v
				cc.Source = 5 // DEFAULT_CONFIG
				if override {
					cc.Source = 1 // DYNAMIC_TOPIC_CONFIG
				}
				st.Configs = append(st.Configs, cc)
			}
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}

// assignsEachPartitionOnce reports whether manual assignments name partitions 0 to len-1, each once.
func assignsEachPartitionOnce(as []kmsg.CreateTopicsRequestTopicReplicaAssignment) bool {
	seen := make([]bool, len(as))
	for _, a := range as {
		if a.Partition < 0 || int(a.Partition) >= len(as) || seen[a.Partition] {
			return false
		}
		seen[a.Partition] = true
	}
	return true
}

// newTopic builds a registry entry with a fresh topic ID.
func (g *Gateway) newTopic(name string, partitions int32, configs map[string]string) redisstore.Topic {
	return redisstore.Topic{Name: name, ID: uuid.New(), Partitions: partitions, Configs: configs,
		Created: time.Now().UnixMilli()}
}
