package gateway

import (
	"fmt"
	"maps"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/redisstore"
)

func TestDotCollisions(t *testing.T) {
	d := newDotCollisions(map[string]redisstore.Topic{"a.b": {}, "c_d": {}})
	for name, want := range map[string]bool{"a_b": true, "c.d": true, "a.b": false, "c_d": false, "ab": false, "a__b": false} {
		if _, got := d.collides(name); got != want {
			t.Errorf("collides(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestCreateTopicsCollisionCheckScales: the '.'/'_' collision check of a CreateTopics costs one
// look-up per requested name, not a comparison with every registered topic (a review measured 20,000
// names against 2,000 topics at 1.8 s). Allocations stand in for the work, which a clock would
// measure unreliably: with a comparison per pair, each of the 2,000 names below would allocate twice
// per registered topic (4,000 times).
func TestCreateTopicsCollisionCheckScales(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{})
	c := &conn{g: g}
	const registered, requested = 2000, 2000
	for i := range registered {
		if err := store.CreateTopic(ctx, redisstore.Topic{Name: fmt.Sprintf("t.%d", i), Partitions: 1}); err != nil {
			t.Fatal(err)
		}
	}
	req := kmsg.NewPtrCreateTopicsRequest()
	req.ValidateOnly = true
	for i := range requested {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = fmt.Sprintf("n.%d", i), 1, 1
		req.Topics = append(req.Topics, rt)
	}
	collider := kmsg.NewCreateTopicsRequestTopic()
	collider.Topic, collider.NumPartitions, collider.ReplicationFactor = "t_7", 1, 1
	req.Topics = append(req.Topics, collider)

	var resp *kmsg.CreateTopicsResponse
	allocs := testing.AllocsPerRun(1, func() {
		r, err := c.createTopics(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		resp = r.(*kmsg.CreateTopicsResponse)
	})
	for i, st := range resp.Topics {
		want := int16(0)
		if st.Topic == "t_7" {
			want = kerr.InvalidTopicException.Code
		}
		if st.ErrorCode != want {
			t.Fatalf("topic %d (%s): error %d, want %d", i, st.Topic, st.ErrorCode, want)
		}
	}
	if perName := allocs / requested; perName > 1000 {
		t.Fatalf("%.0f allocations per requested name, want at most 1000 (one look-up each)", perName)
	}
	t.Logf("%.0f allocations, %.0f per requested name", allocs, allocs/requested)
}

// apacheTopicConfigs are the topic-level configs of Apache Kafka 3.x and 4.x (LogConfig, internal ones
// aside), each with a value Apache accepts other than its default.
var apacheTopicConfigs = map[string]string{
	"cleanup.policy":                          "delete",
	"compression.type":                        "zstd",
	"compression.gzip.level":                  "9",
	"compression.lz4.level":                   "17",
	"compression.zstd.level":                  "-5",
	"delete.retention.ms":                     "1000",
	"file.delete.delay.ms":                    "1000",
	"flush.messages":                          "10",
	"flush.ms":                                "1000",
	"follower.replication.throttled.replicas": "0:1, 1:2",
	"index.interval.bytes":                    "8192",
	"leader.replication.throttled.replicas":   "*",
	"local.retention.bytes":                   "-1",
	"local.retention.ms":                      "1000",
	"max.compaction.lag.ms":                   "100000",
	"max.message.bytes":                       "2000000",
	"message.downconversion.enable":           "false",
	"message.format.version":                  "2.8",
	"message.timestamp.after.max.ms":          "3600000",
	"message.timestamp.before.max.ms":         "1000",
	"message.timestamp.difference.max.ms":     "1000",
	"message.timestamp.type":                  "LogAppendTime",
	"min.cleanable.dirty.ratio":               "0.25",
	"min.compaction.lag.ms":                   "1000",
	"min.insync.replicas":                     "2",
	"preallocate":                             "true",
	"remote.log.copy.disable":                 "true",
	"remote.log.delete.on.disable":            "true",
	"remote.storage.enable":                   "false",
	"retention.bytes":                         "1000000",
	"retention.ms":                            "3600000",
	"segment.bytes":                           "1048576",
	"segment.index.bytes":                     "4096",
	"segment.jitter.ms":                       "1000",
	"segment.ms":                              "3600000",
	"unclean.leader.election.enable":          "true",
}

func createTopicReq(name string, configs map[string]string) *kmsg.CreateTopicsRequest {
	req := kmsg.NewPtrCreateTopicsRequest()
	req.Version = 7
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, 1, 1
	for k, v := range configs {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = k, kmsg.StringPtr(v)
		rt.Configs = append(rt.Configs, c)
	}
	req.Topics = append(req.Topics, rt)
	return req
}

// TestCreateTopicsApacheTopicConfigs: CreateTopics accepts every topic config name Apache Kafka knows,
// stores it and reports it (in its answer and in DescribeConfigs) as a topic override; names Apache
// does not know, and values Apache refuses, are INVALID_CONFIG.
func TestCreateTopicsApacheTopicConfigs(t *testing.T) {
	ctx, g, _ := embeddedGateway(t, Config{})
	c := &conn{g: g}
	create := func(name string, configs map[string]string) kmsg.CreateTopicsResponseTopic {
		t.Helper()
		r, err := c.createTopics(ctx, createTopicReq(name, configs))
		if err != nil {
			t.Fatal(err)
		}
		return r.(*kmsg.CreateTopicsResponse).Topics[0]
	}
	st := create("all-configs", apacheTopicConfigs)
	if st.ErrorCode != 0 {
		t.Fatalf("create with every Apache topic config: error %d: %s", st.ErrorCode, *st.ErrorMessage)
	}
	got := map[string]kmsg.CreateTopicsResponseTopicConfig{}
	for _, cc := range st.Configs {
		got[cc.Name] = cc
	}
	// Reported as Apache reports a config's parsed value: a list's items joined by commas alone.
	reported := maps.Clone(apacheTopicConfigs)
	reported["follower.replication.throttled.replicas"] = "0:1,1:2"
	for name, want := range reported {
		if cc, ok := got[name]; !ok || cc.Value == nil || *cc.Value != want || cc.Source != 1 {
			t.Errorf("CreateTopics answer for %s: %+v, want %q from DYNAMIC_TOPIC_CONFIG", name, cc, want)
		}
	}

	dreq := kmsg.NewPtrDescribeConfigsRequest()
	rr := kmsg.NewDescribeConfigsRequestResource()
	rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, "all-configs"
	dreq.Resources = append(dreq.Resources, rr)
	r, err := c.describeConfigs(ctx, dreq)
	if err != nil {
		t.Fatal(err)
	}
	res := r.(*kmsg.DescribeConfigsResponse).Resources[0]
	described := map[string]string{}
	for _, cfg := range res.Configs {
		if cfg.Source == kmsg.ConfigSourceDynamicTopicConfig {
			described[cfg.Name] = *cfg.Value
		}
	}
	for name, want := range reported {
		if described[name] != want {
			t.Errorf("DescribeConfigs %s = %q, want the override %q", name, described[name], want)
		}
	}

	for _, bad := range []struct {
		what    string
		configs map[string]string
	}{
		{"a name Apache does not know", map[string]string{"segment.index.byte": "4096"}},
		{"a made-up name", map[string]string{"no.such.config": "1"}},
		{"segment.index.bytes below Apache's 4", map[string]string{"segment.index.bytes": "1"}},
		{"a negative message.timestamp.before.max.ms", map[string]string{"message.timestamp.before.max.ms": "-1"}},
		{"a dirty ratio above 1", map[string]string{"min.cleanable.dirty.ratio": "1.5"}},
		{"a gzip level of 0", map[string]string{"compression.gzip.level": "0"}},
		{"a malformed throttled replica list", map[string]string{"leader.replication.throttled.replicas": "0:1,x"}},
		{"tiered storage", map[string]string{"remote.storage.enable": "true"}},
		{"min.compaction.lag.ms above max.compaction.lag.ms", map[string]string{"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}},
	} {
		if st := create("bad-config", bad.configs); st.ErrorCode != kerr.InvalidConfig.Code {
			t.Errorf("%s: error %d, want INVALID_CONFIG", bad.what, st.ErrorCode)
		}
	}
	// Two configs kgate refused as unknown, alone (segment.index.bytes at Apache's minimum, 4).
	if st := create("two-configs", map[string]string{"segment.index.bytes": "4", "message.timestamp.before.max.ms": "1000"}); st.ErrorCode != 0 {
		t.Errorf("segment.index.bytes=4, message.timestamp.before.max.ms=1000: error %d", st.ErrorCode)
	}
}

// TestCreateTopicsConfigValuesCleaned: config values are parsed as Apache parses them (surrounding
// spaces dropped, a boolean's case ignored, a list's items trimmed), stored and reported clean, and
// enforced: " LogAppendTime" makes the topic stamp log append time. They were refused INVALID_CONFIG.
func TestCreateTopicsConfigValuesCleaned(t *testing.T) {
	srv := redisServer(t)
	store := openStoreAt(t, srv.Addr, redisstore.Options{})
	g := New(Config{}, store, zerolog.Nop())
	ctx, c := t.Context(), &conn{g: g}
	given := map[string]string{"retention.ms": " 60000 ", "preallocate": "TRUE", "cleanup.policy": " delete ",
		"message.timestamp.type": " LogAppendTime", "leader.replication.throttled.replicas": "0:1 , 0:2"}
	want := map[string]string{"retention.ms": "60000", "preallocate": "true", "cleanup.policy": "delete",
		"message.timestamp.type": "LogAppendTime", "leader.replication.throttled.replicas": "0:1,0:2"}
	r, err := c.createTopics(ctx, createTopicReq("cleaned", given))
	if err != nil {
		t.Fatal(err)
	}
	if st := r.(*kmsg.CreateTopicsResponse).Topics[0]; st.ErrorCode != 0 {
		t.Fatalf("create: error %d: %v", st.ErrorCode, st.ErrorMessage)
	}
	topic, err := store.Topic(ctx, "cleaned")
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range want {
		if topic.Configs[name] != v {
			t.Errorf("stored %s = %q, want %q", name, topic.Configs[name], v)
		}
	}
	if !g.logAppendTime(topic) {
		t.Error("message.timestamp.type \" LogAppendTime\" not enforced")
	}
	if st := func() kmsg.CreateTopicsResponseTopic {
		r, _ := c.createTopics(ctx, createTopicReq("still-bad", map[string]string{"preallocate": "yes"}))
		return r.(*kmsg.CreateTopicsResponse).Topics[0]
	}(); st.ErrorCode != kerr.InvalidConfig.Code {
		t.Errorf("preallocate=yes: error %d, want INVALID_CONFIG", st.ErrorCode)
	}
}

// TestCreateTopicsReplicaAssignmentPartitions: manual replica assignments must name partitions 0 to
// n-1, each once, as on Apache (INVALID_REPLICA_ASSIGNMENT otherwise); the partition count is theirs.
func TestCreateTopicsReplicaAssignmentPartitions(t *testing.T) {
	ctx, g, _ := embeddedGateway(t, Config{})
	c := &conn{g: g}
	for i, tc := range []struct {
		partitions []int32
		want       int16
	}{
		{[]int32{0, 5, 5}, kerr.InvalidReplicaAssignment.Code},
		{[]int32{0, 0}, kerr.InvalidReplicaAssignment.Code},
		{[]int32{1}, kerr.InvalidReplicaAssignment.Code},
		{[]int32{-1, 0}, kerr.InvalidReplicaAssignment.Code},
		{[]int32{0, 1, 3}, kerr.InvalidReplicaAssignment.Code},
		{[]int32{2, 0, 1}, 0},
	} {
		req := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = fmt.Sprintf("assigned-%d", i), -1, -1
		for _, p := range tc.partitions {
			a := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
			a.Partition, a.Replicas = p, []int32{0}
			rt.ReplicaAssignment = append(rt.ReplicaAssignment, a)
		}
		req.Topics = append(req.Topics, rt)
		r, err := c.createTopics(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		st := r.(*kmsg.CreateTopicsResponse).Topics[0]
		if st.ErrorCode != tc.want {
			t.Errorf("assignment of partitions %v: error %d, want %d", tc.partitions, st.ErrorCode, tc.want)
		}
		if tc.want == 0 && st.NumPartitions != int32(len(tc.partitions)) {
			t.Errorf("assignment of partitions %v: %d partitions", tc.partitions, st.NumPartitions)
		}
	}
}

// TestCreateTopicsClusterMetadataRefused: __cluster_metadata, the name of KRaft's metadata log, cannot
// be created, as on Apache: CreateTopics answers INVALID_REQUEST, and auto-creation leaves it unknown.
func TestCreateTopicsClusterMetadataRefused(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{})
	r, err := (&conn{g: g}).createTopics(ctx, createTopicReq("__cluster_metadata", nil))
	if err != nil {
		t.Fatal(err)
	}
	if st := r.(*kmsg.CreateTopicsResponse).Topics[0]; st.ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("error %d, want INVALID_REQUEST", st.ErrorCode)
	}
	if _, err := store.Topic(ctx, "__cluster_metadata"); err == nil {
		t.Fatal("created")
	}
	if _, err := g.autoCreateTopic(ctx, "__cluster_metadata"); err == nil {
		t.Fatal("auto-created")
	}
	if _, err := store.Topic(ctx, "__cluster_metadata"); err == nil {
		t.Fatal("created by auto-creation")
	}
}

// TestCreateTopicsCollisionWithinRequest: two topics of one request that differ only in '.' and '_'
// are not both created: the second is refused as colliding with the first, as with a registered
// topic (validate-only requests answer alike).
func TestCreateTopicsCollisionWithinRequest(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{})
	for _, validateOnly := range []bool{true, false} {
		req := kmsg.NewPtrCreateTopicsRequest()
		req.Version, req.ValidateOnly = 7, validateOnly
		for _, name := range []string{"orders.v1", "orders_v1"} {
			rt := kmsg.NewCreateTopicsRequestTopic()
			rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, 1, 1
			req.Topics = append(req.Topics, rt)
		}
		r, err := (&conn{g: g}).createTopics(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		sts := r.(*kmsg.CreateTopicsResponse).Topics
		if sts[0].ErrorCode != 0 || sts[1].ErrorCode != kerr.InvalidTopicException.Code {
			t.Fatalf("validate only %v: error codes %d and %d, want 0 and INVALID_TOPIC_EXCEPTION", validateOnly, sts[0].ErrorCode, sts[1].ErrorCode)
		}
	}
	all, err := store.Topics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, both := all["orders_v1"]; both {
		t.Fatal("orders_v1 created beside orders.v1")
	}
}

// TestCreateTopicsTimeoutBoundsRequest: with Redis stalled (and the topic view still cached), a
// CreateTopics of eight topics answers within about its timeout_ms, every topic with a retriable
// error, not after a command timeout for each topic in turn.
func TestCreateTopicsTimeoutBoundsRequest(t *testing.T) {
	const cmdTimeout = time.Second
	ctx, g, p := proxiedGateway(t, cmdTimeout, nil)
	req := kmsg.NewPtrCreateTopicsRequest()
	req.Version, req.TimeoutMillis = 7, 500
	for i := range 8 {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "stalled-"+strconv.Itoa(i), 1, 1
		req.Topics = append(req.Topics, rt)
	}
	p.Freeze(true)
	defer p.Freeze(false)
	start := time.Now()
	r, err := (&conn{g: g}).createTopics(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*cmdTimeout {
		t.Fatalf("answered after %v: timeout_ms 500, command timeout %v", took, cmdTimeout)
	}
	for _, st := range r.(*kmsg.CreateTopicsResponse).Topics {
		if st.ErrorCode != kerr.RequestTimedOut.Code {
			t.Fatalf("%s: error %d with Redis stalled, want REQUEST_TIMED_OUT", st.Topic, st.ErrorCode)
		}
	}
}
