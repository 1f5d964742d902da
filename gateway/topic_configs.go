package gateway

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/kgate/kgate/redisstore"
)

// topicConfigDef is one topic-level config kgate accepts: its broker default and a validator.
type topicConfigDef struct {
	def      func(cfg *Config) string
	validate func(string) error
	// enforced says whether kgate acts on the value; the rest are stored and reported for tools.
	enforced bool
}

func intRange(lo, hi int64) func(string) error {
	return func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < lo || n > hi {
			return fmt.Errorf("must be an integer in [%d, %d]", lo, hi)
		}
		return nil
	}
}

func oneOf(opts ...string) func(string) error {
	return func(v string) error {
		for _, o := range opts {
			if v == o {
				return nil
			}
		}
		return fmt.Errorf("must be one of %v", opts)
	}
}

func constant(v string) func(*Config) string { return func(*Config) string { return v } }

const maxInt64 = int64(^uint64(0) >> 1)

// topicConfigDefs lists the topic configs kgate knows. An unknown name in CreateTopics is INVALID_CONFIG,
// as on Apache Kafka.
var topicConfigDefs = map[string]topicConfigDef{
	"cleanup.policy":                      {def: constant("delete"), validate: oneOf("delete")},
	"compression.type":                    {def: constant("producer"), validate: oneOf("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")},
	"max.message.bytes":                   {def: func(c *Config) string { return strconv.Itoa(int(c.MaxMessageBytes)) }, validate: intRange(0, 1<<31-1), enforced: true},
	"message.timestamp.type":              {def: constant("CreateTime"), validate: oneOf("CreateTime", "LogAppendTime"), enforced: true},
	"retention.ms":                        {def: func(c *Config) string { return strconv.FormatInt(c.DefaultRetentionMs, 10) }, validate: intRange(-1, maxInt64), enforced: true},
	"retention.bytes":                     {def: func(c *Config) string { return strconv.FormatInt(c.DefaultRetentionBytes, 10) }, validate: intRange(-1, maxInt64), enforced: true},
	"segment.bytes":                       {def: constant("1073741824"), validate: intRange(14, 1<<31-1)},
	"segment.ms":                          {def: constant("604800000"), validate: intRange(1, maxInt64)},
	"min.insync.replicas":                 {def: constant("1"), validate: intRange(1, 1<<31-1)},
	"unclean.leader.election.enable":      {def: constant("false"), validate: oneOf("true", "false")},
	"message.timestamp.difference.max.ms": {def: constant(strconv.FormatInt(maxInt64, 10)), validate: intRange(0, maxInt64)},
	"delete.retention.ms":                 {def: constant("86400000"), validate: intRange(0, maxInt64)},
	"flush.messages":                      {def: constant(strconv.FormatInt(maxInt64, 10)), validate: intRange(1, maxInt64)},
	"flush.ms":                            {def: constant(strconv.FormatInt(maxInt64, 10)), validate: intRange(0, maxInt64)},
}

// validateTopicConfigs checks names and values; it returns the offending name with its error.
func validateTopicConfigs(configs map[string]string) (string, error) {
	names := make([]string, 0, len(configs))
	for n := range configs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		d, ok := topicConfigDefs[n]
		if !ok {
			return n, fmt.Errorf("unknown topic config")
		}
		if err := d.validate(configs[n]); err != nil {
			return n, err
		}
	}
	return "", nil
}

// topicConfig returns the effective value of name for t and whether it is a topic override.
func (g *Gateway) topicConfig(t redisstore.Topic, name string) (string, bool) {
	if v, ok := t.Configs[name]; ok {
		return v, true
	}
	if d, ok := topicConfigDefs[name]; ok {
		return d.def(&g.cfg), false
	}
	return "", false
}

func (g *Gateway) maxMessageBytes(t redisstore.Topic) int {
	v, _ := g.topicConfig(t, "max.message.bytes")
	n, err := strconv.Atoi(v)
	if err != nil {
		return int(g.cfg.MaxMessageBytes)
	}
	return n
}

func (g *Gateway) logAppendTime(t redisstore.Topic) bool {
	v, _ := g.topicConfig(t, "message.timestamp.type")
	return v == "LogAppendTime"
}
