package gateway

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/redisstore"
)

// topicConfigDef is one topic-level config kgate accepts: its broker default and a validator, and
// what DescribeConfigs v3+ reports about it: Apache's type and a line of documentation.
type topicConfigDef struct {
	def      func(cfg *Config) string
	validate func(string) error
	// enforced says whether kgate acts on the value; the rest are stored and reported for tools.
	enforced bool
	typ      kmsg.ConfigType
	doc      string
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
// message.timestamp.after.max.ms, an hour on 4.0: kgate, as 3.x, enforces it only where a topic sets
// it, timestampBounds).
var topicConfigDefs = map[string]topicConfigDef{
	"cleanup.policy":                          {def: constant("delete"), validate: oneOf("delete"), typ: kmsg.ConfigTypeList, doc: "How old records go: \"delete\" removes them by age or size (kgate refuses \"compact\")."},
	"compression.type":                        {def: constant("producer"), validate: oneOf("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"), typ: kmsg.ConfigTypeString, doc: "Codec the broker stores batches with; \"producer\" keeps the producer's (kgate stores records uncompressed)."},
	"compression.gzip.level":                  {def: constant("-1"), validate: gzipLevel, typ: kmsg.ConfigTypeInt, doc: "Gzip level used when compression.type is gzip."},
	"compression.lz4.level":                   {def: constant("9"), validate: intRange(1, 17), typ: kmsg.ConfigTypeInt, doc: "LZ4 level used when compression.type is lz4."},
	"compression.zstd.level":                  {def: constant("3"), validate: intRange(-131072, 22), typ: kmsg.ConfigTypeInt, doc: "Zstandard level used when compression.type is zstd."},
	"max.message.bytes":                       {def: func(c *Config) string { return strconv.Itoa(int(c.MaxMessageBytes)) }, validate: intRange(0, 1<<31-1), enforced: true, typ: kmsg.ConfigTypeInt, doc: "Largest record batch the topic accepts, in bytes."},
	"message.timestamp.type":                  {def: constant("CreateTime"), validate: oneOf("CreateTime", "LogAppendTime"), enforced: true, typ: kmsg.ConfigTypeString, doc: "Which time a record keeps: CreateTime (the producer's) or LogAppendTime (the broker's)."},
	"retention.ms":                            {def: func(c *Config) string { return strconv.FormatInt(c.DefaultRetentionMs, 10) }, validate: intRange(-1, maxInt64), enforced: true, typ: kmsg.ConfigTypeLong, doc: "How long records are kept before they may be deleted, in ms; -1 keeps them for ever."},
	"retention.bytes":                         {def: func(c *Config) string { return strconv.FormatInt(c.DefaultRetentionBytes, 10) }, validate: intRange(-1, maxInt64), typ: kmsg.ConfigTypeLong, doc: "Size a partition may grow to before its oldest records go; -1 for no limit (not enforced by kgate)."},
	"segment.bytes":                           {def: constant("1073741824"), validate: intRange(14, 1<<31-1), typ: kmsg.ConfigTypeInt, doc: "Size of one log segment file (kgate keeps no segment files)."},
	"segment.ms":                              {def: constant("604800000"), validate: intRange(1, maxInt64), typ: kmsg.ConfigTypeLong, doc: "Time after which a log segment is rolled even if not full (kgate keeps no segment files)."},
	"segment.jitter.ms":                       {def: constant("0"), validate: intRange(0, maxInt64), typ: kmsg.ConfigTypeLong, doc: "Random time taken off segment.ms so segments do not all roll at once."},
	"segment.index.bytes":                     {def: constant("10485760"), validate: intRange(4, 1<<31-1), typ: kmsg.ConfigTypeInt, doc: "Size of a segment's offset index (kgate keeps no segment files)."},
	"index.interval.bytes":                    {def: constant("4096"), validate: intRange(0, 1<<31-1), typ: kmsg.ConfigTypeInt, doc: "Bytes of records between two entries of the offset index."},
	"preallocate":                             {def: constant("false"), validate: oneOf("true", "false"), typ: kmsg.ConfigTypeBoolean, doc: "Whether segment files are allocated on disk in full when created."},
	"file.delete.delay.ms":                    {def: constant("60000"), validate: intRange(0, maxInt64), typ: kmsg.ConfigTypeLong, doc: "Wait before a deleted segment's file is removed from disk."},
	"min.insync.replicas":                     {def: constant("1"), validate: intRange(1, 1<<31-1), typ: kmsg.ConfigTypeInt, doc: "Replicas that must have a record before an acks=all produce succeeds (kgate's replication is Redis's)."},
	"unclean.leader.election.enable":          {def: constant("false"), validate: oneOf("true", "false"), typ: kmsg.ConfigTypeBoolean, doc: "Whether a replica out of sync may become leader, at the cost of losing records."},
	"leader.replication.throttled.replicas":   {def: constant(""), validate: throttledReplicas, typ: kmsg.ConfigTypeList, doc: "Replicas whose leader-side replication is throttled: partition:broker pairs, or *."},
	"follower.replication.throttled.replicas": {def: constant(""), validate: throttledReplicas, typ: kmsg.ConfigTypeList, doc: "Replicas whose follower-side replication is throttled: partition:broker pairs, or *."},
	"message.timestamp.difference.max.ms":     {def: constant(strconv.FormatInt(maxInt64, 10)), validate: intRange(0, maxInt64), enforced: true, typ: kmsg.ConfigTypeLong, doc: "Largest gap allowed between a CreateTime timestamp and the broker's clock (before 4.0)."},
	"message.timestamp.before.max.ms":         {def: constant(strconv.FormatInt(maxInt64, 10)), validate: intRange(0, maxInt64), enforced: true, typ: kmsg.ConfigTypeLong, doc: "How far in the past a CreateTime timestamp may be."},
	"message.timestamp.after.max.ms":          {def: constant(strconv.FormatInt(maxInt64, 10)), validate: intRange(0, maxInt64), enforced: true, typ: kmsg.ConfigTypeLong, doc: "How far in the future a CreateTime timestamp may be."},
	"message.format.version":                  {def: constant("3.0-IV1"), validate: messageFormatVersion, typ: kmsg.ConfigTypeString, doc: "Record format version the broker writes (before 4.0)."},
	"message.downconversion.enable":           {def: constant("true"), validate: oneOf("true", "false"), typ: kmsg.ConfigTypeBoolean, doc: "Whether records are converted for consumers that ask for an older format (before 4.0)."},
	"delete.retention.ms":                     {def: constant("86400000"), validate: intRange(0, maxInt64), typ: kmsg.ConfigTypeLong, doc: "How long deletion markers stay in a compacted topic."},
	"min.compaction.lag.ms":                   {def: constant("0"), validate: intRange(0, maxInt64), typ: kmsg.ConfigTypeLong, doc: "Least time a record stays uncompacted."},
	"max.compaction.lag.ms":                   {def: constant(strconv.FormatInt(maxInt64, 10)), validate: intRange(1, maxInt64), typ: kmsg.ConfigTypeLong, doc: "Most time a record may wait before it is eligible for compaction."},
	"min.cleanable.dirty.ratio":               {def: constant("0.5"), validate: floatRange(0, 1), typ: kmsg.ConfigTypeDouble, doc: "Share of a compacted log not yet cleaned that triggers a cleaning."},
	"flush.messages":                          {def: constant(strconv.FormatInt(maxInt64, 10)), validate: intRange(1, maxInt64), typ: kmsg.ConfigTypeLong, doc: "Records written between two forced flushes to disk."},
	"flush.ms":                                {def: constant(strconv.FormatInt(maxInt64, 10)), validate: intRange(0, maxInt64), typ: kmsg.ConfigTypeLong, doc: "Time between two forced flushes to disk."},
	"remote.storage.enable":                   {def: constant("false"), validate: oneOf("false"), typ: kmsg.ConfigTypeBoolean, doc: "Whether the topic uses tiered storage (kgate refuses true)."},
	"remote.log.copy.disable":                 {def: constant("false"), validate: oneOf("true", "false"), typ: kmsg.ConfigTypeBoolean, doc: "Whether copying segments to tiered storage is stopped."},
	"remote.log.delete.on.disable":            {def: constant("false"), validate: oneOf("true", "false"), typ: kmsg.ConfigTypeBoolean, doc: "Whether tiered data is deleted when tiered storage is turned off for the topic."},
	"local.retention.ms":                      {def: constant("-2"), validate: intRange(-2, maxInt64), typ: kmsg.ConfigTypeLong, doc: "How long records stay on local disk when tiered storage is on; -2 follows retention.ms."},
	"local.retention.bytes":                   {def: constant("-2"), validate: intRange(-2, maxInt64), typ: kmsg.ConfigTypeLong, doc: "Local size limit when tiered storage is on; -2 follows retention.bytes."},
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

// validateTopicConfigs checks names and values; it returns the offending name with its error. It first
// cleans each known config's value in place as Apache parses it (ConfigDef.parseType): surrounding
// spaces dropped, a boolean's case ignored, a list's items trimmed; the clean value is what is stored
// and reported, as Apache reports a config's parsed value.
func validateTopicConfigs(configs map[string]string) (string, error) {
	for n, v := range configs {
		if d, ok := topicConfigDefs[n]; ok {
			configs[n] = cleanConfigValue(d.typ, v)
		}
	}
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

// timestampBounds returns how far before and after the broker's clock a CreateTime record's
// timestamp may be on t, and whether either is bounded: message.timestamp.before.max.ms and
// message.timestamp.after.max.ms, each falling back to message.timestamp.difference.max.ms while it
// is at its default (Long.MAX_VALUE), as Apache 3.6-3.9 take them. Only a topic's own overrides bound
// anything: the gateway's defaults are Long.MAX_VALUE.
func timestampBounds(t redisstore.Topic) (before, after int64, bounded bool) {
	if len(t.Configs) == 0 {
		return maxInt64, maxInt64, false
	}
	get := func(name string) int64 {
		v, ok := t.Configs[name]
		if !ok {
			return maxInt64
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return maxInt64 // refused when the config was set: never here
		}
		return n
	}
	diff := get("message.timestamp.difference.max.ms")
	before, after = get("message.timestamp.before.max.ms"), get("message.timestamp.after.max.ms")
	if before == maxInt64 {
		before = diff
	}
	if after == maxInt64 {
		after = diff
	}
	return before, after, before != maxInt64 || after != maxInt64
}

func (g *Gateway) logAppendTime(t redisstore.Topic) bool {
	v, _ := g.topicConfig(t, "message.timestamp.type")
	return v == "LogAppendTime"
}

// cleanConfigValue is v as Apache parses a config of type typ before validating it.
func cleanConfigValue(typ kmsg.ConfigType, v string) string {
	v = strings.TrimSpace(v)
	switch typ {
	case kmsg.ConfigTypeBoolean:
		if strings.EqualFold(v, "true") || strings.EqualFold(v, "false") {
			return strings.ToLower(v)
		}
	case kmsg.ConfigTypeList:
		if v == "" {
			return v
		}
		items := strings.Split(v, ",")
		for i := range items {
			items[i] = strings.TrimSpace(items[i])
		}
		return strings.Join(items, ",")
	}
	return v
}
