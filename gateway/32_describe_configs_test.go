package gateway

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/coordinator"
	"github.com/kgate/kgate/redisstore"
)

// The broker's group settings are reported as the coordinator applies them: an unset initial
// rebalance delay is the 3 s default, a negative one (kgate's "none", a configured 0) is 0.
func TestBrokerConfigsReportGroupSettingsInEffect(t *testing.T) {
	for _, c := range []struct {
		delay time.Duration
		want  string
	}{{0, "3000"}, {-1, "0"}, {250 * time.Millisecond, "250"}} {
		_, g, _ := embeddedGateway(t, Config{Groups: coordinator.Config{InitialRebalanceDelay: c.delay}})
		got := map[string]string{}
		for _, kv := range g.brokerConfigs() {
			got[kv[0]] = kv[1]
		}
		if got["group.initial.rebalance.delay.ms"] != c.want || got["group.min.session.timeout.ms"] != "6000" {
			t.Errorf("delay %v: initial rebalance delay %q, min session timeout %q; want %s and 6000",
				c.delay, got["group.initial.rebalance.delay.ms"], got["group.min.session.timeout.ms"], c.want)
		}
	}
}

func describeConfigsReq(typ kmsg.ConfigResourceType, name string, names []string) *kmsg.DescribeConfigsRequest {
	req := kmsg.NewPtrDescribeConfigsRequest()
	rr := kmsg.NewDescribeConfigsRequestResource()
	rr.ResourceType, rr.ResourceName, rr.ConfigNames = typ, name, names
	req.Resources = append(req.Resources, rr)
	return req
}

// TestDescribeConfigsEmptyNamesMeansAll: a resource asking for no config names in particular, with a
// null list or an empty one, gets every config, as on Apache; a list names the ones it gets.
func TestDescribeConfigsEmptyNamesMeansAll(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{})
	c := &conn{g: g}
	if err := store.CreateTopic(ctx, redisstore.Topic{Name: "t", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		typ  kmsg.ConfigResourceType
		name string
		all  int
	}{
		{kmsg.ConfigResourceTypeTopic, "t", len(topicConfigDefs)},
		{kmsg.ConfigResourceTypeBroker, "", len(g.brokerConfigs())},
	} {
		for _, tc := range []struct {
			names []string
			want  int
		}{{nil, r.all}, {[]string{}, r.all}, {[]string{"retention.ms", "log.retention.ms", "no.such.config"}, 1}} {
			resp, err := c.describeConfigs(ctx, describeConfigsReq(r.typ, r.name, tc.names))
			if err != nil {
				t.Fatal(err)
			}
			res := resp.(*kmsg.DescribeConfigsResponse).Resources[0]
			if res.ErrorCode != 0 || len(res.Configs) != tc.want {
				t.Errorf("%v %q, names %#v: error %d, %d configs, want %d", r.typ, r.name, tc.names, res.ErrorCode, len(res.Configs), tc.want)
			}
		}
	}
}

// TestDescribeConfigsRedisDown: a topic's configs with Redis unreachable are REQUEST_TIMED_OUT, as
// CreateTopics and DeleteTopics answer (connection refused, not a timeout: the code said
// NOT_LEADER_OR_FOLLOWER then); an unknown topic stays UNKNOWN_TOPIC_OR_PARTITION.
func TestDescribeConfigsRedisDown(t *testing.T) {
	ctx, c, m := miniredisGateway(t)
	code := func(topic string) int16 {
		t.Helper()
		resp, err := c.describeConfigs(ctx, describeConfigsReq(kmsg.ConfigResourceTypeTopic, topic, nil))
		if err != nil {
			t.Fatal(err)
		}
		return resp.(*kmsg.DescribeConfigsResponse).Resources[0].ErrorCode
	}
	if got := code("missing"); got != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("unknown topic: error %d, want UNKNOWN_TOPIC_OR_PARTITION", got)
	}
	m.Close()
	c.g.topics.invalidate() // the next read goes to Redis
	if got := code("t"); got != kerr.RequestTimedOut.Code {
		t.Errorf("Redis down: error %d, want REQUEST_TIMED_OUT", got)
	}
}
