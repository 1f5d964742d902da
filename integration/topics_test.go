package integration

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/redisstore"
)

// Topic administration through kadm (and raw kmsg where a version or field must be pinned).

// TestCreateTopicsValidation: validate_only creates nothing, and each invalid request gets its own
// Kafka error: TOPIC_ALREADY_EXISTS, INVALID_TOPIC_EXCEPTION, INVALID_CONFIG, INVALID_PARTITIONS,
// INVALID_REPLICATION_FACTOR; any replication factor from 1 is accepted and reported as 1.
func TestCreateTopicsValidation(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 30*time.Second)
		adm := newAdmin(t, g)

		vr, err := adm.ValidateCreateTopics(ctx, 3, 1, nil, "validated")
		if err != nil || vr["validated"].Err != nil || vr["validated"].NumPartitions != 3 {
			t.Fatalf("validate-only create: %v, %+v", err, vr["validated"])
		}
		if _, err := g.Store.Topic(ctx, "validated"); !errors.Is(err, redisstore.ErrUnknownTopic) {
			t.Fatalf("validate-only create registered the topic: %v", err)
		}

		cr := mustCreateTopics(t, ctx, adm, 2, nil, "exists")
		if cr["exists"].NumPartitions != 2 || cr["exists"].ID == (kadm.TopicID{}) {
			t.Fatalf("create: %+v", cr["exists"])
		}
		if tp, err := g.Store.Topic(ctx, "exists"); err != nil || tp.Partitions != 2 || tp.ID != [16]byte(cr["exists"].ID) {
			t.Fatalf("registry after create: %+v, %v", tp, err)
		}
		// -1 partitions and replication factor: the broker defaults (1, and replication reported as 1).
		dr, err := adm.CreateTopics(ctx, -1, -1, nil, "defaults", "exi_sts.x", strings.Repeat("n", 249))
		if err != nil || dr.Error() != nil {
			t.Fatalf("create with defaults: %v, %v", err, dr.Error())
		}
		if d := dr["defaults"]; d.NumPartitions != 1 || d.ReplicationFactor != 1 {
			t.Fatalf("create with defaults: %d partitions, replication factor %d", d.NumPartitions, d.ReplicationFactor)
		}
		// Any replication factor from 1 is accepted and reported as 1 (replication is Redis's); 0 is not.
		if r, err := adm.CreateTopics(ctx, 1, 3, nil, "replicated"); err != nil || r["replicated"].Err != nil || r["replicated"].ReplicationFactor != 1 {
			t.Fatalf("create with replication factor 3: %v, %+v; want it created with 1", err, r["replicated"])
		}
		if r, err := adm.CreateTopics(ctx, 1, 0, nil, "unreplicated"); err != nil || r["unreplicated"].Err != kerr.InvalidReplicationFactor {
			t.Fatalf("create with replication factor 0: %v, %+v; want INVALID_REPLICATION_FACTOR", err, r["unreplicated"])
		}
		ten := "10"
		for _, c := range []struct {
			name       string
			topic      string
			partitions int32
			configs    map[string]*string
			want       error
		}{
			{"existing topic", "exists", 1, nil, kerr.TopicAlreadyExists},
			{"existing topic, validate only", "exists", 1, nil, kerr.TopicAlreadyExists},
			{"illegal name", "bad name!", 1, nil, kerr.InvalidTopicException},
			{"unknown config", "cfg-unknown", 1, map[string]*string{"no.such.config": &ten}, kerr.InvalidConfig},
			{"bad config value", "cfg-bad", 1, map[string]*string{"retention.ms": kadm.StringPtr("soon")}, kerr.InvalidConfig},
			{"null config value", "cfg-null", 1, map[string]*string{"retention.ms": nil}, kerr.InvalidConfig},
			{"zero partitions", "zero", 0, nil, kerr.InvalidPartitions},
			{"name of 250 characters", strings.Repeat("n", 250), 1, nil, kerr.InvalidTopicException},
			{"name colliding on '.' and '_' with exi_sts.x", "exi.sts_x", 1, nil, kerr.InvalidTopicException},
			{"name '..'", "..", 1, nil, kerr.InvalidTopicException},
		} {
			create := adm.CreateTopics
			if c.name == "existing topic, validate only" {
				create = adm.ValidateCreateTopics
			}
			resp, err := create(ctx, c.partitions, 1, c.configs, c.topic)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if got := resp[c.topic].Err; got != c.want {
				t.Errorf("%s: %v, want %v", c.name, got, c.want)
			}
			if c.want != kerr.TopicAlreadyExists {
				if _, err := g.Store.Topic(ctx, c.topic); !errors.Is(err, redisstore.ErrUnknownTopic) {
					t.Errorf("%s: the topic was registered anyway (%v)", c.name, err)
				}
			}
		}
		// A partition count and a replica assignment together: INVALID_REQUEST, as Apache answers.
		req := kmsg.NewPtrCreateTopicsRequest()
		req.TimeoutMillis = 5000
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "both", 2, -1
		ra := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
		ra.Partition, ra.Replicas = 0, []int32{0}
		rt.ReplicaAssignment = append(rt.ReplicaAssignment, ra)
		req.Topics = append(req.Topics, rt)
		cresp := roundTrip[*kmsg.CreateTopicsResponse](dialRaw(t, g.Addr), 7, req)
		if len(cresp.Topics) != 1 || cresp.Topics[0].ErrorCode != kerr.InvalidRequest.Code {
			t.Fatalf("count and assignment together: %+v, want INVALID_REQUEST", cresp.Topics)
		}
	})
}

// TestDeleteTopics deletes by name (kadm) and by topic ID (DeleteTopics v6): the registry entry and the
// partition's Redis keys go, a recreated topic starts empty, unknown names and IDs get their errors,
// and a name or ID given twice in one request deletes once.
func TestDeleteTopics(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 30*time.Second)
		adm := newAdmin(t, g)
		rdb := g.Store.Client()
		cr := mustCreateTopics(t, ctx, adm, 1, nil, "del-name", "del-id")
		p := newClient(t, g)
		for _, topic := range []string{"del-name", "del-id"} {
			if err := p.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("x")}).FirstErr(); err != nil {
				t.Fatalf("produce to %s: %v", topic, err)
			}
		}
		gone := func(topic string) {
			t.Helper()
			if _, err := g.Store.Topic(ctx, topic); !errors.Is(err, redisstore.ErrUnknownTopic) {
				t.Fatalf("%s still registered: %v", topic, err)
			}
			for _, kind := range []string{"stream", "meta", "tindex", "producers"} {
				key := g.Namespace + ":" + kind + ":{" + topic + ":0}"
				if n, err := rdb.Exists(ctx, key).Result(); err != nil || n != 0 {
					t.Fatalf("%s survived the delete (%d, %v)", key, n, err)
				}
			}
		}

		dr, err := adm.DeleteTopics(ctx, "del-name")
		if err != nil || dr["del-name"].Err != nil {
			t.Fatalf("delete by name: %v, %v", err, dr["del-name"].Err)
		}
		gone("del-name")
		if dr, err = adm.DeleteTopics(ctx, "del-name"); err != nil || dr["del-name"].Err != kerr.UnknownTopicOrPartition {
			t.Fatalf("delete a deleted topic: %v, %v; want UNKNOWN_TOPIC_OR_PARTITION", err, dr["del-name"].Err)
		}

		c := dialRaw(t, g.Addr)
		byID := func(id [16]byte) kmsg.DeleteTopicsResponseTopic {
			t.Helper()
			req := kmsg.NewPtrDeleteTopicsRequest()
			req.TimeoutMillis = 5000
			rt := kmsg.NewDeleteTopicsRequestTopic()
			rt.TopicID = id
			req.Topics = append(req.Topics, rt)
			resp := roundTrip[*kmsg.DeleteTopicsResponse](c, 6, req)
			if len(resp.Topics) != 1 {
				t.Fatalf("delete by id: %d topics in the response", len(resp.Topics))
			}
			return resp.Topics[0]
		}
		id := [16]byte(cr["del-id"].ID)
		if st := byID(id); st.ErrorCode != 0 || st.Topic == nil || *st.Topic != "del-id" || st.TopicID != id {
			t.Fatalf("delete by id: error %d topic %v id %x", st.ErrorCode, st.Topic, st.TopicID)
		}
		gone("del-id")
		if st := byID(id); st.ErrorCode != kerr.UnknownTopicID.Code {
			t.Fatalf("delete by a deleted id: error %d, want UNKNOWN_TOPIC_ID", st.ErrorCode)
		}

		// Recreated under the same name: a new ID and no old records.
		cr2 := mustCreateTopics(t, ctx, adm, 1, nil, "del-id")
		if cr2["del-id"].ID == cr["del-id"].ID {
			t.Fatalf("recreated topic kept its old ID")
		}
		lo, err := adm.ListEndOffsets(ctx, "del-id")
		if o, _ := lo.Lookup("del-id", 0); err != nil || o.Err != nil || o.Offset != 0 {
			t.Fatalf("end offset of the recreated topic: %d, %v, %v", o.Offset, err, o.Err)
		}

		// A name or an ID given twice in one request is not refused (Apache: INVALID_REQUEST): the first
		// deletes, the second answers as for an unknown topic.
		twice := mustCreateTopics(t, ctx, adm, 1, nil, "del-twice-name", "del-twice-id")
		name, twiceID := "del-twice-name", [16]byte(twice["del-twice-id"].ID)
		req := kmsg.NewPtrDeleteTopicsRequest()
		req.TimeoutMillis = 5000
		for _, tg := range []kmsg.DeleteTopicsRequestTopic{{Topic: &name}, {Topic: &name}, {TopicID: twiceID}, {TopicID: twiceID}} {
			req.Topics = append(req.Topics, tg)
		}
		var codes []int16
		for _, st := range roundTrip[*kmsg.DeleteTopicsResponse](c, 6, req).Topics {
			codes = append(codes, st.ErrorCode)
		}
		if want := []int16{0, kerr.UnknownTopicOrPartition.Code, 0, kerr.UnknownTopicID.Code}; !slices.Equal(codes, want) {
			t.Fatalf("delete of a name and an ID each given twice: codes %v, want %v", codes, want)
		}
		gone("del-twice-name")
		gone("del-twice-id")
	})
}

// TestCreatePartitions grows a topic (the new partition is usable; replica assignments are ignored) and
// refuses to shrink it.
func TestCreatePartitions(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 30*time.Second)
		adm := newAdmin(t, g)
		mustCreateTopics(t, ctx, adm, 2, nil, "grow")

		vr, err := adm.ValidateCreatePartitions(ctx, 5, "grow")
		if err != nil || vr["grow"].Err != nil {
			t.Fatalf("validate add partitions: %v, %v", err, vr["grow"].Err)
		}
		if tp, _ := g.Store.Topic(ctx, "grow"); tp.Partitions != 2 {
			t.Fatalf("validate-only grew the topic to %d", tp.Partitions)
		}
		r, err := adm.CreatePartitions(ctx, 2, "grow")
		if err != nil || r["grow"].Err != nil {
			t.Fatalf("add 2 partitions: %v, %v", err, r["grow"].Err)
		}
		md, err := adm.Metadata(ctx, "grow")
		if err != nil || len(md.Topics["grow"].Partitions) != 4 {
			t.Fatalf("metadata after growing: %v, %d partitions", err, len(md.Topics["grow"].Partitions))
		}
		p := newClient(t, g, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		rec := &kgo.Record{Topic: "grow", Partition: 3, Value: []byte("new partition")}
		if err := p.ProduceSync(ctx, rec).FirstErr(); err != nil || rec.Offset != 0 {
			t.Fatalf("produce to the new partition: offset %d, %v", rec.Offset, err)
		}
		for _, set := range []int{2, 4} {
			r, err = adm.UpdatePartitions(ctx, set, "grow")
			if err != nil || r["grow"].Err != kerr.InvalidPartitions {
				t.Fatalf("set partitions to %d of 4: %v, %v; want INVALID_PARTITIONS", set, err, r["grow"].Err)
			}
		}
		if r, err = adm.UpdatePartitions(ctx, 5, "missing"); err != nil || r["missing"].Err != kerr.UnknownTopicOrPartition {
			t.Fatalf("grow a missing topic: %v, %v", err, r["missing"].Err)
		}
		// Replica assignments are ignored: the growth takes the count, whatever brokers they name.
		req := kmsg.NewPtrCreatePartitionsRequest()
		req.TimeoutMillis = 5000
		rt := kmsg.NewCreatePartitionsRequestTopic()
		rt.Topic, rt.Count = "grow", 5
		rt.Assignment = []kmsg.CreatePartitionsRequestTopicAssignment{{Replicas: []int32{7, 8, 9}}}
		req.Topics = append(req.Topics, rt)
		if cr := roundTrip[*kmsg.CreatePartitionsResponse](dialRaw(t, g.Addr), 3, req); len(cr.Topics) != 1 || cr.Topics[0].ErrorCode != 0 {
			t.Fatalf("grow to 5 with a replica assignment: %+v, want no error", cr.Topics)
		}
		if tp, err := g.Store.Topic(ctx, "grow"); err != nil || tp.Partitions != 5 {
			t.Fatalf("topic after growing with an assignment: %+v, %v; want 5 partitions", tp, err)
		}
	})
}

// TestDescribeConfigs: retention.ms reports the broker default with source DEFAULT_CONFIG, an override
// with DYNAMIC_TOPIC_CONFIG; broker configs report the gateway's defaults.
func TestDescribeConfigs(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 30*time.Second)
		adm := newAdmin(t, g)
		mustCreateTopics(t, ctx, adm, 1, nil, "cfg-default")
		mustCreateTopics(t, ctx, adm, 1, map[string]*string{"retention.ms": kadm.StringPtr("3600000")}, "cfg-override")

		rcs, err := adm.DescribeTopicConfigs(ctx, "cfg-default", "cfg-override", "cfg-missing")
		if err != nil {
			t.Fatalf("describe topic configs: %v", err)
		}
		find := func(rc kadm.ResourceConfig, name string) kadm.Config {
			t.Helper()
			for _, c := range rc.Configs {
				if c.Key == name {
					return c
				}
			}
			t.Fatalf("%s: no config %s in %+v", rc.Name, name, rc.Configs)
			return kadm.Config{}
		}
		for _, c := range []struct {
			topic, value string
			source       kmsg.ConfigSource
		}{
			{"cfg-default", "604800000", kmsg.ConfigSourceDefaultConfig},
			{"cfg-override", "3600000", kmsg.ConfigSourceDynamicTopicConfig},
		} {
			rc, err := rcs.On(c.topic, nil)
			if err != nil || rc.Err != nil {
				t.Fatalf("%s: %v, %v", c.topic, err, rc.Err)
			}
			cfg := find(rc, "retention.ms")
			if cfg.MaybeValue() != c.value || cfg.Source != c.source {
				t.Errorf("%s retention.ms = %q source %v, want %q %v", c.topic, cfg.MaybeValue(), cfg.Source, c.value, c.source)
			}
			if cfg := find(rc, "cleanup.policy"); cfg.MaybeValue() != "delete" {
				t.Errorf("%s cleanup.policy = %q", c.topic, cfg.MaybeValue())
			}
		}
		if rc, err := rcs.On("cfg-missing", nil); err != nil || rc.Err != kerr.UnknownTopicOrPartition {
			t.Errorf("describe a missing topic: %v, %v; want UNKNOWN_TOPIC_OR_PARTITION", err, rc.Err)
		}

		for _, brokers := range [][]int32{nil, {0}} {
			bcs, err := adm.DescribeBrokerConfigs(ctx, brokers...)
			if err != nil || len(bcs) != 1 || bcs[0].Err != nil {
				t.Fatalf("describe broker configs %v: %v, %+v", brokers, err, bcs)
			}
			want := map[string]string{"log.retention.ms": "604800000", "num.partitions": "1", "auto.create.topics.enable": "true",
				"fetch.max.bytes": "8388608"}
			for _, c := range bcs[0].Configs {
				if v, ok := want[c.Key]; ok {
					if c.MaybeValue() != v {
						t.Errorf("broker config %s = %q, want %q", c.Key, c.MaybeValue(), v)
					}
					delete(want, c.Key)
				}
			}
			if len(want) > 0 {
				t.Errorf("broker configs %v lack %v", brokers, want)
			}
		}
	})
}

// metadataReq asks for one topic by name, allowing auto-creation or not (v4+).
func metadataReq(topic string, autoCreate bool) *kmsg.MetadataRequest {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	req.AllowAutoTopicCreation = autoCreate
	return req
}

// TestMetadataAutoCreateAndTopicIDs: Metadata creates an unknown topic only when the request allows it,
// topic IDs (v10+) are stable across calls and match CreateTopics', and Produce never creates a topic.
// A partition's leader epoch is -1 and its replicas and ISR are its leader alone.
func TestMetadataAutoCreateAndTopicIDs(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 30*time.Second)
		c := dialRaw(t, g.Addr)

		resp := roundTrip[*kmsg.MetadataResponse](c, 9, metadataReq("auto", false))
		if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != kerr.UnknownTopicOrPartition.Code {
			t.Fatalf("metadata v9 without auto-create: %+v", resp.Topics)
		}
		if _, err := g.Store.Topic(ctx, "auto"); !errors.Is(err, redisstore.ErrUnknownTopic) {
			t.Fatalf("metadata without auto-create registered the topic: %v", err)
		}
		resp = roundTrip[*kmsg.MetadataResponse](c, 9, metadataReq("auto", true))
		if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 || len(resp.Topics[0].Partitions) != 1 {
			t.Fatalf("metadata v9 with auto-create: %+v", resp.Topics)
		}
		if tp, err := g.Store.Topic(ctx, "auto"); err != nil || tp.Partitions != 1 {
			t.Fatalf("auto-created topic in the registry: %+v, %v", tp, err)
		}
		if r := roundTrip[*kmsg.MetadataResponse](c, 9, metadataReq("bad name!", true)); len(r.Topics) != 1 || r.Topics[0].ErrorCode != kerr.InvalidTopicException.Code {
			t.Fatalf("metadata with auto-create of an illegal name: %+v", r.Topics)
		}
		if len(resp.Brokers) == 0 || resp.Brokers[0].Port == 0 || resp.Topics[0].Partitions[0].Leader != resp.Brokers[0].NodeID {
			t.Fatalf("metadata brokers %+v, leader %d", resp.Brokers, resp.Topics[0].Partitions[0].Leader)
		}
		// No leader epochs (-1): clients then skip KIP-320's epoch checks, as librdkafka expects.
		if e := resp.Topics[0].Partitions[0].LeaderEpoch; e != -1 {
			t.Fatalf("metadata leader epoch %d, want -1", e)
		}
		// Replication is Redis's: the replicas and the ISR name the leader only.
		if mp := resp.Topics[0].Partitions[0]; !slices.Equal(mp.Replicas, []int32{mp.Leader}) || !slices.Equal(mp.ISR, []int32{mp.Leader}) {
			t.Fatalf("metadata replicas %v, ISR %v; want the leader (%d) alone", mp.Replicas, mp.ISR, mp.Leader)
		}

		cr := mustCreateTopics(t, ctx, newAdmin(t, g), 3, nil, "ids")
		var ids [][16]byte
		for _, v := range []int16{10, 12, 12} {
			r := roundTrip[*kmsg.MetadataResponse](c, v, metadataReq("ids", false))
			if len(r.Topics) != 1 || r.Topics[0].ErrorCode != 0 {
				t.Fatalf("metadata v%d: %+v", v, r.Topics)
			}
			ids = append(ids, r.Topics[0].TopicID)
		}
		for i, id := range ids {
			if id == ([16]byte{}) || id != [16]byte(cr["ids"].ID) {
				t.Fatalf("metadata call %d: topic id %x, CreateTopics said %x", i, id, cr["ids"].ID)
			}
		}
		// v12 by topic ID only.
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.TopicID = ids[0]
		req.Topics = append(req.Topics, rt)
		r := roundTrip[*kmsg.MetadataResponse](c, 12, req)
		if len(r.Topics) != 1 || r.Topics[0].ErrorCode != 0 || r.Topics[0].Topic == nil || *r.Topics[0].Topic != "ids" {
			t.Fatalf("metadata v12 by topic id: %+v", r.Topics)
		}

		// Produce to a missing topic: UNKNOWN_TOPIC_OR_PARTITION, and no topic appears.
		pr := roundTrip[*kmsg.ProduceResponse](c, 9, produceReq("no-such-topic", 0, -1, rawBatch(t, -1, -1, -1, time.Now().UnixMilli(), "v")))
		if sp := producePart(t, pr); sp.ErrorCode != kerr.UnknownTopicOrPartition.Code {
			t.Fatalf("produce to a missing topic: error %d, want UNKNOWN_TOPIC_OR_PARTITION", sp.ErrorCode)
		}
		if _, err := g.Store.Topic(ctx, "no-such-topic"); !errors.Is(err, redisstore.ErrUnknownTopic) {
			t.Fatalf("produce created the topic: %v", err)
		}
		// And to a partition the topic does not have.
		pr = roundTrip[*kmsg.ProduceResponse](c, 9, produceReq("ids", 3, -1, rawBatch(t, -1, -1, -1, time.Now().UnixMilli(), "v")))
		if sp := producePart(t, pr); sp.ErrorCode != kerr.UnknownTopicOrPartition.Code {
			t.Fatalf("produce to partition 3 of 3: error %d, want UNKNOWN_TOPIC_OR_PARTITION", sp.ErrorCode)
		}
	})
}

// TestProduceToTopicDeletedElsewhere: a produce reaching a gateway whose registry view (up to a second
// old) still has a topic another gateway has just deleted is refused with UNKNOWN_TOPIC_OR_PARTITION
// and brings none of the topic's keys back, so the topic created again starts empty.
func TestProduceToTopicDeletedElsewhere(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		peer := startPeer(t, b, g, 2)
		ctx := testCtx(t, 30*time.Second)
		mustCreateTopics(t, ctx, newAdmin(t, g), 1, nil, "elsewhere")
		c := dialRaw(t, g.Addr)
		produceValues(t, c, "elsewhere", "before") // g's registry view now has the topic
		if err := peer.Store.DeleteTopic(ctx, "elsewhere"); err != nil {
			t.Fatal(err)
		}
		sp := producePart(t, roundTrip[*kmsg.ProduceResponse](c, 9,
			produceReq("elsewhere", 0, -1, rawBatch(t, -1, -1, -1, time.Now().UnixMilli(), "after"))))
		if sp.ErrorCode != kerr.UnknownTopicOrPartition.Code {
			t.Fatalf("produce to the deleted topic: error %d, want UNKNOWN_TOPIC_OR_PARTITION", sp.ErrorCode)
		}
		for _, kind := range []string{"stream", "meta"} {
			key := g.Namespace + ":" + kind + ":{elsewhere:0}"
			if n, err := g.Store.Client().Exists(ctx, key).Result(); err != nil || n != 0 {
				t.Fatalf("%s came back (%d, %v)", key, n, err)
			}
		}
		mustCreateTopics(t, ctx, newAdmin(t, peer), 1, nil, "elsewhere")
		offs, err := g.Store.PartitionOffsets(ctx, "elsewhere", []int32{0})
		if err != nil || offs[0].End != 0 {
			t.Fatalf("the topic created again: end %v, %v; want 0", offs, err)
		}
	})
}

// TestPartitionCountBounded: CreateTopics and CreatePartitions refuse more than 100,000 partitions per
// topic with INVALID_PARTITIONS (kgate's bound; every gateway loops over a topic's partitions).
func TestPartitionCountBounded(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 30*time.Second)
		adm := newAdmin(t, g)
		cr, err := adm.CreateTopics(ctx, 100_001, 1, nil, "huge")
		if err != nil || !errors.Is(cr["huge"].Err, kerr.InvalidPartitions) {
			t.Fatalf("create with 100,001 partitions: %v, %v; want INVALID_PARTITIONS", err, cr["huge"].Err)
		}
		mustCreateTopics(t, ctx, adm, 1, nil, "bounded")
		ur, err := adm.UpdatePartitions(ctx, 100_001, "bounded")
		if err != nil || !errors.Is(ur["bounded"].Err, kerr.InvalidPartitions) {
			t.Fatalf("grow to 100,001 partitions: %v, %v; want INVALID_PARTITIONS", err, ur["bounded"].Err)
		}
		if tp, err := g.Store.Topic(ctx, "bounded"); err != nil || tp.Partitions != 1 {
			t.Fatalf("topic after the refused growth: %+v, %v", tp, err)
		}
	})
}
