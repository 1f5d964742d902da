package gateway

// DescribeConfigs v0-v4.
//
// Topic resources (type 2) report every topic config kgate knows with its effective value; source
// DYNAMIC_TOPIC_CONFIG for a topic override, DEFAULT_CONFIG otherwise. With include_synonyms (v1+) an
// override lists itself, then the default; a config not overridden lists the default. From v3 each
// carries Apache's config type, and a line of documentation with include_documentation. Broker resources (type 4) report the broker-level defaults
// kgate applies. Unknown topic -> UNKNOWN_TOPIC_OR_PARTITION; other resource types -> INVALID_REQUEST.
// Requested config names filter the list; none (a null or an empty list) asks for all, as on Apache.
// Redis failures -> REQUEST_TIMED_OUT (adminErrCode).

import (
	"context"
	"sort"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func sortedConfigNames() []string {
	names := make([]string, 0, len(topicConfigDefs))
	for n := range topicConfigDefs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func (c *conn) describeConfigs(ctx context.Context, req *kmsg.DescribeConfigsRequest) (kmsg.Response, error) {
	g := c.g
	resp := kmsg.NewPtrDescribeConfigsResponse()
	for _, rr := range req.Resources {
		res := kmsg.NewDescribeConfigsResponseResource()
		res.ResourceType, res.ResourceName = rr.ResourceType, rr.ResourceName
		want := func(name string) bool {
			if len(rr.ConfigNames) == 0 { // null or empty: all, as on Apache
				return true
			}
			for _, n := range rr.ConfigNames {
				if n == name {
					return true
				}
			}
			return false
		}
		add := func(name, value string, source int8, readOnly bool, def string, typ kmsg.ConfigType, doc string) {
			if !want(name) {
				return
			}
			cfg := kmsg.NewDescribeConfigsResponseResourceConfig()
			v := value
			cfg.Name, cfg.Value, cfg.ReadOnly = name, &v, readOnly
			cfg.Source = kmsg.ConfigSource(source)
			cfg.IsDefault = source == 5
			if req.IncludeSynonyms && req.Version >= 1 {
				synonym := func(value string, source kmsg.ConfigSource) {
					syn := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
					syn.Name, syn.Value, syn.Source = name, &value, source
					cfg.ConfigSynonyms = append(cfg.ConfigSynonyms, syn)
				}
				// As Apache orders them: the value in effect first, then what it overrides.
				if cfg.Source == kmsg.ConfigSourceDynamicTopicConfig {
					synonym(value, cfg.Source)
				}
				synonym(def, kmsg.ConfigSourceDefaultConfig)
			}
			if req.Version >= 3 {
				cfg.ConfigType = typ
				if req.IncludeDocumentation && doc != "" {
					cfg.Documentation = &doc
				}
			}
			res.Configs = append(res.Configs, cfg)
		}
		switch kmsg.ConfigResourceType(rr.ResourceType) {
		case kmsg.ConfigResourceTypeTopic:
			t, err := g.topics.get(ctx, rr.ResourceName)
			if err != nil {
				res.ErrorCode = adminErrCode(err)
				break
			}
			for _, name := range sortedConfigNames() {
				v, override := g.topicConfig(t, name)
				src := int8(5)
				if override {
					src = 1
				}
				d := topicConfigDefs[name]
				add(name, v, src, false, d.def(&g.cfg), d.typ, d.doc)
			}
		case kmsg.ConfigResourceTypeBroker:
			if rr.ResourceName != "" && rr.ResourceName != strconv.Itoa(int(g.cfg.NodeID)) {
				res.ErrorCode = kerr.InvalidRequest.Code
				break
			}
			for _, kv := range g.brokerConfigs() {
				add(kv[0], kv[1], 4, true, kv[1], kmsg.ConfigTypeUnknown, "") // STATIC_BROKER_CONFIG
			}
		default:
			res.ErrorCode = kerr.InvalidRequest.Code
		}
		resp.Resources = append(resp.Resources, res)
	}
	return resp, nil
}

// brokerConfigs are the broker-level settings a client or tool may ask about.
func (g *Gateway) brokerConfigs() [][2]string {
	groups := g.coord.Config() // what the coordinator applies, defaults filled in
	return [][2]string{
		{"auto.create.topics.enable", strconv.FormatBool(g.cfg.AutoCreateTopics)},
		{"broker.id", strconv.Itoa(int(g.cfg.NodeID))},
		{"fetch.max.bytes", strconv.Itoa(int(g.cfg.FetchMaxBytes))},
		{"group.initial.rebalance.delay.ms", strconv.FormatInt(groups.InitialRebalanceDelay.Milliseconds(), 10)},
		{"group.max.session.timeout.ms", strconv.FormatInt(groups.MaxSessionTimeout.Milliseconds(), 10)},
		{"group.min.session.timeout.ms", strconv.FormatInt(groups.MinSessionTimeout.Milliseconds(), 10)},
		{"log.retention.bytes", strconv.FormatInt(g.cfg.DefaultRetentionBytes, 10)},
		{"log.retention.ms", strconv.FormatInt(g.cfg.DefaultRetentionMs, 10)},
		{"message.max.bytes", strconv.Itoa(int(g.cfg.MaxMessageBytes))},
		{"num.partitions", strconv.Itoa(int(g.cfg.DefaultPartitions))},
		{"socket.request.max.bytes", strconv.Itoa(int(g.cfg.MaxFrameBytes))},
	}
}
