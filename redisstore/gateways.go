package redisstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// GatewayInfo is one gateway's registration in <ns>:gateways.
type GatewayInfo struct {
	NodeID     int32  `json:"nodeId"`
	Instance   string `json:"instance"` // random per process: tells a restart from a second process
	Advertised string `json:"advertised"`
	Admin      string `json:"admin"`
	Started    int64  `json:"started"`   // epoch ms
	Heartbeat  int64  `json:"heartbeat"` // epoch ms by Redis's clock; 0 after a clean shutdown
	// ShardedAppends: the gateway hears append notices on the sharded channels (SubscribeShardedAppends).
	// Registrations of older gateways lack it: those hear only the global channel.
	ShardedAppends bool `json:"shardedAppends,omitempty"`
}

// registerScript claims or refreshes a node id. KEYS: gateways hash. ARGV: node id, registration JSON
// (heartbeat filled in here from Redis's clock), node timeout ms, instance. Returns 1, or 0 when another
// live instance holds the id.
var registerScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur then
  local inst = string.match(cur, '"instance":"([^"]*)"')
  local hb = tonumber(string.match(cur, '"heartbeat":(%d+)')) or 0
  if inst ~= ARGV[4] and now - hb < tonumber(ARGV[3]) then return 0 end
end
local reg = string.gsub(ARGV[2], '"heartbeat":%d+', '"heartbeat":' .. string.format('%d', now), 1)
redis.call('HSET', KEYS[1], ARGV[1], reg)
return 1
`)

// RegisterGateway claims info.NodeID (first call) or refreshes its heartbeat. ErrNodeIDInUse when a
// different live process holds the id.
func (s *Store) RegisterGateway(ctx context.Context, info GatewayInfo, nodeTimeout time.Duration) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	info.Heartbeat = 1 // placeholder the script replaces with Redis's clock
	buf, err := json.Marshal(info)
	if err != nil {
		return err
	}
	ok, err := registerScript.Run(ctx, s.rdb, []string{s.keys.gateways()},
		strconv.Itoa(int(info.NodeID)), buf, nodeTimeout.Milliseconds(), info.Instance).Int64()
	if err != nil {
		return err
	}
	if ok == 0 {
		return ErrNodeIDInUse
	}
	return nil
}

// DeregisterGateway marks info's registration down (heartbeat 0) so peers fail over at once; the entry
// stays, keeping the registered set (and so group placement) stable across restarts.
func (s *Store) DeregisterGateway(ctx context.Context, info GatewayInfo) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	info.Heartbeat = 0
	buf, err := json.Marshal(info)
	if err != nil {
		return err
	}
	cur, err := s.rdb.HGet(ctx, s.keys.gateways(), strconv.Itoa(int(info.NodeID))).Result()
	if err != nil || !strings.Contains(cur, `"instance":"`+info.Instance+`"`) {
		return err // another process holds the id now: leave its entry alone
	}
	return s.rdb.HSet(ctx, s.keys.gateways(), strconv.Itoa(int(info.NodeID)), buf).Err()
}

// gatewaysScript reads the registrations and Redis's clock on the node that holds them. KEYS: gateways
// hash. Returns {seconds, microseconds, field, value, ...}. (A pipelined TIME has no key and may run on
// another node of a Redis Cluster, whose clock need not agree with the one that stamped the heartbeats.)
var gatewaysScript = redis.NewScript(`
local t = redis.call('TIME')
local out = {t[1], t[2]}
for _, v in ipairs(redis.call('HGETALL', KEYS[1])) do out[#out + 1] = v end
return out
`)

// Gateways returns every registration and Redis's current time (epoch ms) to judge heartbeats by.
func (s *Store) Gateways(ctx context.Context) ([]GatewayInfo, int64, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	vals, err := gatewaysScript.Run(ctx, s.rdb, []string{s.keys.gateways()}).StringSlice()
	if err != nil {
		return nil, 0, err
	}
	if len(vals) < 2 {
		return nil, 0, fmt.Errorf("redisstore: gateways: unexpected reply %q", vals)
	}
	sec, err1 := strconv.ParseInt(vals[0], 10, 64)
	usec, err2 := strconv.ParseInt(vals[1], 10, 64)
	if err1 != nil || err2 != nil {
		return nil, 0, fmt.Errorf("redisstore: gateways: bad TIME %q %q", vals[0], vals[1])
	}
	out := make([]GatewayInfo, 0, (len(vals)-2)/2)
	for i := 3; i < len(vals); i += 2 {
		var gi GatewayInfo
		if json.Unmarshal([]byte(vals[i]), &gi) == nil {
			out = append(out, gi)
		}
	}
	return out, sec*1000 + usec/1000, nil
}

// RefreshTopology makes a Redis Cluster client reload its slot map in the background (a no-op for a
// standalone server). go-redis reloads it on MOVED/ASK/READONLY replies and otherwise only every 60 s:
// after a master dies and its replica is promoted, commands for the dead master's slots fail with
// "connection refused" and never see a MOVED, and the durable append path,
// which writes on a connection pinned to the slot's master, would keep picking the dead node. The
// membership loop calls this every heartbeat interval, which bounds that window.
func (s *Store) RefreshTopology(ctx context.Context) {
	if c, ok := s.rdb.(*redis.ClusterClient); ok {
		c.ReloadState(ctx)
	}
}

func (k keys) appends() string { return k.ns + ":appends" }

// PublishAppends tells every gateway that these partitions grew (wakes their long-polling fetches), on
// the global channel, which every gateway subscribes to (PublishShardedAppends: on a cluster, the
// sharded channels, which older gateways do not).
func (s *Store) PublishAppends(ctx context.Context, parts []string) error {
	if len(parts) == 0 {
		return nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return s.rdb.Publish(ctx, s.keys.appends(), strings.Join(parts, "\n")).Err()
}

// AppendMessage encodes one partition for PublishAppends.
func AppendMessage(topic string, partition int32) string {
	return topic + "\x00" + strconv.Itoa(int(partition))
}

// SubscribeAppends calls fn for each partition other gateways report grown, until ctx is done, and
// subscribed each time the subscription is made, the first time included (the client library makes it
// again on its own after losing it): what was published before never comes.
func (s *Store) SubscribeAppends(ctx context.Context, fn func(topic string, partition int32), subscribed func()) error {
	ps := s.rdb.Subscribe(ctx, s.keys.appends())
	defer ps.Close()
	ch := ps.ChannelWithSubscriptions()
	for {
		select {
		case <-ctx.Done():
			return nil
		case m, ok := <-ch:
			if !ok {
				return nil
			}
			msg, isMsg := m.(*redis.Message)
			if !isMsg {
				if sub, ok := m.(*redis.Subscription); ok && sub.Kind == "subscribe" {
					subscribed()
				}
				continue
			}
			eachNotice(msg.Payload, fn)
		}
	}
}
