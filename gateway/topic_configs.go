package gateway

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

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

// topicConfigDefs lists Apache Kafka's topic-level configs (LogConfig of Kafka 3.x and 4.x, its
// internal ones aside: the 3.x names 4.0 dropped included, as 3.x brokers accept them). A name not listed
// is INVALID_CONFIG in CreateTopics, as on Apache Kafka. Values are checked as Apache checks them, except
// where kgate refuses what it cannot do: cleanup.policy=compact and remote.storage.enable=true (Apache
// refuses the latter too on a broker without tiered storage). Configs not enforced are stored and
// reported with Apache's defaults, for tools that set or read them (3.x's where 4.0 changed one:
// message.timestamp.after.max.ms, an hour on 4.0, which kgate does not enforce either way).
var topicConfigDefs = map[string]topicConfigDef{
	"cleanup.policy":                          {def: constant("delete"), validate: oneOf("delete")},
	"compression.type":                        {def: constant("producer"), validate: oneOf("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")},
	"compression.gzip.level":                  {def: constant("-1"), validate: gzipLevel},
	"compression.lz4.level":                   {def: constant("9"), validate: intRange(1, 17)},
	"compression.zstd.level":                  {def: constant("3"), validate: intRange(-131072, 22)},
	"max.message.bytes":                       {def: func(c *Config) string { return strconv.Itoa(int(c.MaxMessageBytes)) }, validate: intRange(0, 1<<31-1), enforced: true},
	"message.timestamp.type":                  {def: constant("CreateTime"), validate: oneOf("CreateTime", "LogAppendTime"), enforced: true},
	"retention.ms":                            {def: func(c *Config) string { return strconv.FormatInt(c.DefaultRetentionMs, 10) }, validate: intRange(-1, maxInt64), enforced: true},
	"retention.bytes":                         {def: func(c *Config) string { return strconv.FormatInt(c.DefaultRetentionBytes, 10) }, validate: intRange(-1, maxInt64)},
	"segment.bytes":                           {def: constant("1073741824"), validate: intRange(14, 1<<31-1)},
	"segment.ms":                              {def: constant("604800000"), validate: intRange(1, maxInt64)},
	"segment.jitter.ms":                       {def: constant("0"), validate: intRange(0, maxInt64)},
	"segment.index.bytes":                     {def: constant("10485760"), validate: intRange(4, 1<<31-1)},
	"index.interval.bytes":                    {def: constant("4096"), validate: intRange(0, 1<<31-1)},
	"preallocate":                             {def: constant("false"), validate: oneOf("true", "false")},
	"file.delete.delay.ms":                    {def: constant("60000"), validate: intRange(0, maxInt64)},
	"min.insync.replicas":                     {def: constant("1"), validate: intRange(1, 1<<31-1)},
	"unclean.leader.election.enable":          {def: constant("false"), validate: oneOf("true", "false")},
	"leader.replication.throttled.replicas":   {def: constant(""), validate: throttledReplicas},
	"follower.replication.throttled.replicas": {def: constant(""), validate: throttledReplicas},
	"message.timestamp.difference.max.ms":     {def: constant(strconv.FormatInt(maxInt64, 10)), validate: intRange(0, maxInt64)},
	"message.timestamp.before.max.ms":         {def: constant(strconv.FormatInt(maxInt64, 10)), validate: intRange(0, maxInt64)},
	"message.timestamp.after.max.ms":          {def: constant(strconv.FormatInt(maxInt64, 10)), validate: intRange(0, maxInt64)},
	"message.format.version":                  {def: constant("3.0-IV1"), validate: messageFormatVersion},
	"message.downconversion.enable":           {def: constant("true"), validate: oneOf("true", "false")},
	"delete.retention.ms":                     {def: constant("86400000"), validate: intRange(0, maxInt64)},
	"min.compaction.lag.ms":                   {def: constant("0"), validate: intRange(0, maxInt64)},
	"max.compaction.lag.ms":                   {def: constant(strconv.FormatInt(maxInt64, 10)), validate: intRange(1, maxInt64)},
	"min.cleanable.dirty.ratio":               {def: constant("0.5"), validate: floatRange(0, 1)},
	"flush.messages":                          {def: constant(strconv.FormatInt(maxInt64, 10)), validate: intRange(1, maxInt64)},
	"flush.ms":                                {def: constant(strconv.FormatInt(maxInt64, 10)), validate: intRange(0, maxInt64)},
	"remote.storage.enable":                   {def: constant("false"), validate: oneOf("false")},
	"remote.log.copy.disable":                 {def: constant("false"), validate: oneOf("true", "false")},
	"remote.log.delete.on.disable":            {def: constant("false"), validate: oneOf("true", "false")},
	"local.retention.ms":                      {def: constant("-2"), validate: intRange(-2, maxInt64)},
	"local.retention.bytes":                   {def: constant("-2"), validate: intRange(-2, maxInt64)},
}

func floatRange(lo, hi float64) func(string) error {
	return func(v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f >= lo && f <= hi) { // NaN fails both comparisons
			return fmt.Errorf("must be a number in [%g, %g]", lo, hi)
		}
		return nil
	}
}

// gzipLevel is Apache's check of compression.gzip.level: Deflater's levels, or -1 for its default.
func gzipLevel(v string) error {
	if v != "-1" && intRange(1, 9)(v) != nil {
		return fmt.Errorf("must be -1 or an integer in [1, 9]")
	}
	return nil
}

// throttledReplicas is Apache's check of the *.replication.throttled.replicas lists: '*', or
// comma-separated partition:broker pairs.
func throttledReplicas(v string) error {
	if strings.TrimSpace(v) == "*" {
		return nil
	}
	digits := func(s string) bool {
		return s != "" && strings.Trim(s, "0123456789") == ""
	}
	for _, r := range strings.Split(v, ",") {
		r = strings.TrimSpace(r)
		if p, b, ok := strings.Cut(r, ":"); r != "" && (!ok || !digits(p) || !digits(b)) {
			return fmt.Errorf("must be '*' or a list of [partitionId]:[brokerId] pairs")
		}
	}
	return nil
}

var messageFormatVersionRE = regexp.MustCompile(`^[0-9]+(\.[0-9]+){1,2}(-IV[0-9]+)?$`)

// messageFormatVersion roughly checks a (deprecated, 3.x-only) message.format.version, which Apache
// checks against its list of versions (0.8.0 to 3.x, with or without -IVn).
func messageFormatVersion(v string) error {
	if !messageFormatVersionRE.MatchString(v) {
		return fmt.Errorf("must be a Kafka version such as 2.8 or 3.0-IV1")
	}
	return nil
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
	// The check across configs of Apache's LogConfig.validateValues, unset ones at their defaults.
	minLag, maxLag := int64(0), maxInt64
	if v, ok := configs["min.compaction.lag.ms"]; ok {
		minLag, _ = strconv.ParseInt(v, 10, 64)
	}
	if v, ok := configs["max.compaction.lag.ms"]; ok {
		maxLag, _ = strconv.ParseInt(v, 10, 64)
	}
	if minLag > maxLag {
		return "min.compaction.lag.ms", fmt.Errorf("must not exceed max.compaction.lag.ms (%d)", maxLag)
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
