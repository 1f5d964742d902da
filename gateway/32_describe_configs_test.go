package gateway

import (
	"slices"
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

// TestDescribeConfigsTypesDocsAndSynonyms: from v3 every topic config carries Apache's type and, when
// asked, a line of documentation; with synonyms asked (v1+) an override lists itself
// (DYNAMIC_TOPIC_CONFIG) before the default (DEFAULT_CONFIG), a config not overridden the default
// alone. Types were UNKNOWN, documentation null, and an override's synonyms named the default only.
func TestDescribeConfigsTypesDocsAndSynonyms(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{})
	c := &conn{g: g}
	if err := store.CreateTopic(ctx, redisstore.Topic{Name: "t", Partitions: 1, Configs: map[string]string{"retention.ms": "1000"}}); err != nil {
		t.Fatal(err)
	}
	describe := func(version int16, synonyms, docs bool) map[string]kmsg.DescribeConfigsResponseResourceConfig {
		t.Helper()
		req := describeConfigsReq(kmsg.ConfigResourceTypeTopic, "t", nil)
		req.Version, req.IncludeSynonyms, req.IncludeDocumentation = version, synonyms, docs
		resp, err := c.describeConfigs(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		res := resp.(*kmsg.DescribeConfigsResponse).Resources[0]
		if res.ErrorCode != 0 || len(res.Configs) != len(topicConfigDefs) {
			t.Fatalf("v%d: error %d, %d configs", version, res.ErrorCode, len(res.Configs))
		}
		byName := map[string]kmsg.DescribeConfigsResponseResourceConfig{}
		for _, cfg := range res.Configs {
			byName[cfg.Name] = cfg
		}
		return byName
	}

	configs := describe(3, true, true)
	for name, want := range map[string]kmsg.ConfigType{
		"retention.ms": kmsg.ConfigTypeLong, "max.message.bytes": kmsg.ConfigTypeInt, "preallocate": kmsg.ConfigTypeBoolean,
		"cleanup.policy": kmsg.ConfigTypeList, "compression.type": kmsg.ConfigTypeString, "min.cleanable.dirty.ratio": kmsg.ConfigTypeDouble,
	} {
		if got := configs[name].ConfigType; got != want {
			t.Errorf("%s: type %v, want %v", name, got, want)
		}
	}
	for name, cfg := range configs {
		if cfg.ConfigType == kmsg.ConfigTypeUnknown || cfg.Documentation == nil || *cfg.Documentation == "" {
			t.Errorf("%s: type %v, documentation %v; want a type and documentation", name, cfg.ConfigType, cfg.Documentation)
		}
	}
	type synonym struct {
		value  string
		source kmsg.ConfigSource
	}
	synonyms := func(cfg kmsg.DescribeConfigsResponseResourceConfig) []synonym {
		var got []synonym
		for _, s := range cfg.ConfigSynonyms {
			if s.Name != cfg.Name || s.Value == nil {
				t.Errorf("%s: synonym %+v", cfg.Name, s)
				continue
			}
			got = append(got, synonym{*s.Value, s.Source})
		}
		return got
	}
	retention, segment := configs["retention.ms"], configs["segment.ms"]
	if got, want := synonyms(retention), []synonym{{"1000", kmsg.ConfigSourceDynamicTopicConfig}, {"604800000", kmsg.ConfigSourceDefaultConfig}}; retention.Source != kmsg.ConfigSourceDynamicTopicConfig || !slices.Equal(got, want) {
		t.Errorf("overridden retention.ms: source %v, synonyms %+v; want %v and %+v", retention.Source, got, kmsg.ConfigSourceDynamicTopicConfig, want)
	}
	if got, want := synonyms(segment), []synonym{{"604800000", kmsg.ConfigSourceDefaultConfig}}; segment.Source != kmsg.ConfigSourceDefaultConfig || !slices.Equal(got, want) {
		t.Errorf("segment.ms: source %v, synonyms %+v; want %v and %+v", segment.Source, got, kmsg.ConfigSourceDefaultConfig, want)
	}

	// Documentation only when asked; neither field before v3; no synonyms unless asked.
	for _, cfg := range describe(3, false, false) {
		if cfg.Documentation != nil || cfg.ConfigType == kmsg.ConfigTypeUnknown || len(cfg.ConfigSynonyms) != 0 {
			t.Errorf("v3 without documentation or synonyms: %s has type %v, documentation %v, %d synonyms", cfg.Name, cfg.ConfigType, cfg.Documentation, len(cfg.ConfigSynonyms))
		}
	}
	for _, cfg := range describe(2, false, true) {
		if cfg.Documentation != nil || cfg.ConfigType != kmsg.ConfigTypeUnknown {
			t.Errorf("v2: %s has type %v, documentation %v", cfg.Name, cfg.ConfigType, cfg.Documentation)
		}
	}
}
