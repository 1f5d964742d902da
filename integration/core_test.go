package integration

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Issue 2 end to end with franz-go: produce with every codec, consume back exactly, the stream layout
// in Redis, ListOffsets and DeleteRecords.

// mustCreateTopics creates topics with kadm and fails the test on any error.
func mustCreateTopics(t *testing.T, ctx context.Context, adm *kadm.Client, partitions int32, configs map[string]*string, topics ...string) kadm.CreateTopicResponses {
	t.Helper()
	resp, err := adm.CreateTopics(ctx, partitions, 1, configs, topics...)
	if err != nil {
		t.Fatalf("create topics %v: %v", topics, err)
	}
	for _, name := range topics {
		r, ok := resp[name]
		if !ok || r.Err != nil {
			t.Fatalf("create topic %s: %v (%s)", name, r.Err, r.ErrMessage)
		}
	}
	return resp
}

// consumeRecords polls cl until it has n records, failing on a fetch error or at ctx's deadline.
func consumeRecords(t *testing.T, ctx context.Context, cl *kgo.Client, n int) []*kgo.Record {
	t.Helper()
	var got []*kgo.Record
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consume: %v after %d of %d records", err, len(got), n)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		got = append(got, fs.Records()...)
	}
	if len(got) != n {
		t.Fatalf("consumed %d records, want %d", len(got), n)
	}
	return got
}

// codecHook records the compression codec of every batch the producer wrote. franz-go calls it from
// a goroutine of its own, after the records' promises.
type codecHook struct {
	mu      sync.Mutex
	seen    map[uint8]int
	records int
}

func (h *codecHook) OnProduceBatchWritten(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.ProduceBatchMetrics) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seen == nil {
		h.seen = map[uint8]int{}
	}
	h.seen[m.CompressionType]++
	h.records += m.NumRecords
}

// counts returns the batches written per codec and the records they held.
func (h *codecHook) counts() (map[uint8]int, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[uint8]int{}
	for k, v := range h.seen {
		out[k] = v
	}
	return out, h.records
}

// codecRecord is record i of a codec test: it cycles through null and empty keys and values, duplicate
// and null-valued headers, and a large compressible value (so the producer really compresses).
func codecRecord(topic string, i, partitions int) *kgo.Record {
	r := &kgo.Record{Topic: topic, Partition: int32(i % partitions), Timestamp: time.UnixMilli(1_700_000_000_000 + int64(i)*7)}
	switch i % 4 {
	case 0: // null key, null value, no headers
	case 1:
		r.Key, r.Value = []byte{}, []byte{}
		r.Headers = []kgo.RecordHeader{{Key: "dup", Value: []byte("1")}, {Key: "dup", Value: []byte("2")}, {Key: "nil"}, {Key: "empty", Value: []byte{}}}
	case 2:
		r.Key = []byte(fmt.Sprintf("key-%d", i))
		r.Value = []byte(strings.Repeat(fmt.Sprintf("value %d compresses well; ", i), 80))
		r.Headers = []kgo.RecordHeader{{Key: "z", Value: []byte("last-first")}, {Key: "a", Value: []byte("first-last")}}
	case 3:
		r.Key = []byte(fmt.Sprintf("key-%d", i))
		r.Value = []byte{0, 1, 2, 0xff}
	}
	return r
}

func sameBytes(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }

func sameHeaders(a, b []kgo.RecordHeader) bool {
	return slices.EqualFunc(a, b, func(x, y kgo.RecordHeader) bool { return x.Key == y.Key && sameBytes(x.Value, y.Value) })
}

// TestProduceConsumeCodecs produces to a 4-partition topic per codec with franz-go's idempotent
// producer and reads everything back from the beginning: offsets exactly 0..n-1 per partition, null vs
// empty keys and values, header order and duplicates and timestamps all intact.
func TestProduceConsumeCodecs(t *testing.T) {
	codecs := []struct {
		name  string
		codec kgo.CompressionCodec
		id    uint8
	}{
		{"none", kgo.NoCompression(), 0},
		{"gzip", kgo.GzipCompression(), 1},
		{"snappy", kgo.SnappyCompression(), 2},
		{"lz4", kgo.Lz4Compression(), 3},
		{"zstd", kgo.ZstdCompression(), 4},
	}
	const partitions, perPartition = 4, 6
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 45*time.Second)
		adm := newAdmin(t, g)
		var topics []string
		for _, c := range codecs {
			topics = append(topics, "codec-"+c.name)
		}
		mustCreateTopics(t, ctx, adm, partitions, nil, topics...)

		want := map[string]map[int32][]*kgo.Record{}
		for _, c := range codecs {
			topic := "codec-" + c.name
			hook := &codecHook{}
			p := newClient(t, g, kgo.ProducerBatchCompression(c.codec), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.WithHooks(hook))
			var recs []*kgo.Record
			for i := 0; i < partitions*perPartition; i++ {
				recs = append(recs, codecRecord(topic, i, partitions))
			}
			res := p.ProduceSync(ctx, recs...)
			if err := res.FirstErr(); err != nil {
				t.Fatalf("%s: produce: %v", c.name, err)
			}
			want[topic] = map[int32][]*kgo.Record{}
			for _, r := range recs {
				if exp := int64(len(want[topic][r.Partition])); r.Offset != exp {
					t.Fatalf("%s: produced record on partition %d got offset %d, want %d", c.name, r.Partition, r.Offset, exp)
				}
				want[topic][r.Partition] = append(want[topic][r.Partition], r)
			}
			waitFor(t, 5*time.Second, "the produce hooks of every batch", func() bool {
				_, n := hook.counts()
				return n == len(recs)
			})
			seen, _ := hook.counts()
			if c.id == 0 && (len(seen) != 1 || seen[0] == 0) || c.id != 0 && seen[c.id] == 0 {
				t.Fatalf("%s: producer wrote batches with codecs %v, want codec %d", c.name, seen, c.id)
			}
			if !producerHasID(ctx, p) {
				t.Fatalf("%s: producer is not idempotent", c.name)
			}
		}

		cl := newClient(t, g, kgo.ConsumeTopics(topics...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchMaxWait(500*time.Millisecond))
		got := map[string]map[int32][]*kgo.Record{}
		for _, r := range consumeRecords(t, ctx, cl, len(codecs)*partitions*perPartition) {
			if got[r.Topic] == nil {
				got[r.Topic] = map[int32][]*kgo.Record{}
			}
			got[r.Topic][r.Partition] = append(got[r.Topic][r.Partition], r)
		}
		for topic, parts := range want {
			for p, exp := range parts {
				recs := got[topic][p]
				if len(recs) != len(exp) {
					t.Fatalf("%s/%d: consumed %d records, want %d", topic, p, len(recs), len(exp))
				}
				for i, r := range recs {
					e := exp[i]
					switch {
					case r.Offset != int64(i):
						t.Errorf("%s/%d: record %d has offset %d", topic, p, i, r.Offset)
					case !sameBytes(r.Key, e.Key):
						t.Errorf("%s/%d@%d: key %q (nil %v), want %q (nil %v)", topic, p, i, r.Key, r.Key == nil, e.Key, e.Key == nil)
					case !sameBytes(r.Value, e.Value):
						t.Errorf("%s/%d@%d: value %.20q (nil %v), want %.20q (nil %v)", topic, p, i, r.Value, r.Value == nil, e.Value, e.Value == nil)
					case !sameHeaders(r.Headers, e.Headers):
						t.Errorf("%s/%d@%d: headers %+v, want %+v", topic, p, i, r.Headers, e.Headers)
					case !r.Timestamp.Equal(e.Timestamp):
						t.Errorf("%s/%d@%d: timestamp %v, want %v", topic, p, i, r.Timestamp, e.Timestamp)
					}
				}
			}
		}
	})
}

// producerHasID reports whether the client got a producer ID (its idempotent producer is on).
func producerHasID(ctx context.Context, cl *kgo.Client) bool {
	id, _, err := cl.ProducerID(ctx)
	return err == nil && id >= 0
}

// TestRedisStreamLayout checks the documented contract from the Redis side: XRANGE on
// <ns>:stream:{topic:p} shows entry IDs 0-1..0-n with the fields ts, key, value and h:/hn: headers in
// record order, null keys and values absent.
func TestRedisStreamLayout(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 30*time.Second)
		mustCreateTopics(t, ctx, newAdmin(t, g), 2, nil, "layout")
		p := newClient(t, g, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		recs := []*kgo.Record{
			{Partition: 1, Timestamp: time.UnixMilli(1000), Key: []byte("k"), Value: []byte("v"),
				Headers: []kgo.RecordHeader{{Key: "h1", Value: []byte("a")}, {Key: "h1", Value: []byte("b")}, {Key: "h2"}}},
			{Partition: 1, Timestamp: time.UnixMilli(2000)},
			{Partition: 1, Timestamp: time.UnixMilli(3000), Key: []byte{}, Value: []byte{}},
		}
		for _, r := range recs {
			r.Topic = "layout"
		}
		if err := p.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		key := g.Namespace + ":stream:{layout:1}"
		raw, err := g.Store.Client().Do(ctx, "XRANGE", key, "-", "+").Slice()
		if err != nil {
			t.Fatalf("XRANGE %s: %v", key, err)
		}
		want := [][2]any{
			{"0-1", []string{"ts", "1000", "key", "k", "value", "v", "h:h1", "a", "h:h1", "b", "hn:h2", ""}},
			{"0-2", []string{"ts", "2000"}},
			{"0-3", []string{"ts", "3000", "key", "", "value", ""}},
		}
		if len(raw) != len(want) {
			t.Fatalf("XRANGE %s: %d entries, want %d: %v", key, len(raw), len(want), raw)
		}
		for i, e := range raw {
			pair := e.([]any)
			id := pair[0].(string)
			var fields []string
			for _, f := range pair[1].([]any) {
				fields = append(fields, f.(string))
			}
			if id != want[i][0] || !slices.Equal(fields, want[i][1].([]string)) {
				t.Errorf("entry %d: %s %q, want %s %q", i, id, fields, want[i][0], want[i][1])
			}
		}
		// Partition 0 got nothing: its stream does not exist.
		if n, err := g.Store.Client().Exists(ctx, g.Namespace+":stream:{layout:0}").Result(); err != nil || n != 0 {
			t.Fatalf("EXISTS stream of the empty partition: %d, %v", n, err)
		}
	})
}

// TestListOffsets covers earliest, latest, max timestamp and by-timestamp lookups with producer
// timestamps that are not monotonic (1000, 3000, 2000, 4000): Apache answers the first offset whose
// timestamp is >= the target, not the first offset after the target in time order. A batch of 1,000
// records enters the time index at a few points only: answers inside it come from the scan between
// two points.
func TestListOffsets(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 30*time.Second)
		adm := newAdmin(t, g)
		mustCreateTopics(t, ctx, adm, 1, nil, "lo", "lo-big")

		checkOn := func(topic, what string, lo kadm.ListedOffsets, err error, offset, ts int64) {
			t.Helper()
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			o, ok := lo.Lookup(topic, 0)
			switch {
			case !ok:
				t.Fatalf("%s: no answer for %s/0", what, topic)
			case o.Err != nil:
				t.Fatalf("%s: %v", what, o.Err)
			case o.Offset != offset || ts != 0 && o.Timestamp != ts:
				t.Fatalf("%s: offset %d timestamp %d, want %d and %d", what, o.Offset, o.Timestamp, offset, ts)
			case o.LeaderEpoch != -1:
				t.Fatalf("%s: leader epoch %d, want -1 (none)", what, o.LeaderEpoch)
			}
		}
		check := func(what string, lo kadm.ListedOffsets, err error, offset, ts int64) {
			t.Helper()
			checkOn("lo", what, lo, err, offset, ts)
		}
		lo, err := adm.ListEndOffsets(ctx, "lo")
		check("end of empty", lo, err, 0, 0)
		lo, err = adm.ListOffsetsAfterMilli(ctx, 0, "lo")
		check("after 0 on empty", lo, err, 0, 0)

		p := newClient(t, g, kgo.DefaultProduceTopic("lo"))
		for _, ms := range []int64{1000, 3000, 2000, 4000} {
			if err := p.ProduceSync(ctx, &kgo.Record{Timestamp: time.UnixMilli(ms), Value: []byte("x")}).FirstErr(); err != nil {
				t.Fatalf("produce ts %d: %v", ms, err)
			}
		}
		lo, err = adm.ListStartOffsets(ctx, "lo")
		check("start", lo, err, 0, 0)
		lo, err = adm.ListEndOffsets(ctx, "lo")
		check("end", lo, err, 4, 0)
		lo, err = adm.ListCommittedOffsets(ctx, "lo") // read_committed: isolation is ignored, no transactions
		check("end, read_committed", lo, err, 4, 0)
		for _, c := range []struct{ at, offset, ts int64 }{
			{0, 0, 1000}, {1000, 0, 1000}, {1001, 1, 3000}, {2000, 1, 3000}, {2500, 1, 3000}, {3000, 1, 3000},
			{3001, 3, 4000}, {3500, 3, 4000}, {4000, 3, 4000},
		} {
			lo, err = adm.ListOffsetsAfterMilli(ctx, c.at, "lo")
			check(fmt.Sprintf("after %d", c.at), lo, err, c.offset, c.ts)
		}
		// Nothing at or after 5000: kadm falls back to the end offset (its documented behaviour, after the
		// broker answered -1), with timestamp -1.
		lo, err = adm.ListOffsetsAfterMilli(ctx, 5000, "lo")
		check("after 5000", lo, err, 4, -1)
		lo, err = adm.ListMaxTimestampOffsets(ctx, "lo")
		check("max timestamp", lo, err, 3, 4000)

		// After DeleteRecords to 2 the answer is the first offset >= the log start whose timestamp is
		// >= the target, although the time index still points at the deleted offset 1.
		var os kadm.Offsets
		os.Add(kadm.Offset{Topic: "lo", Partition: 0, At: 2})
		if _, err := adm.DeleteRecords(ctx, os); err != nil {
			t.Fatalf("DeleteRecords: %v", err)
		}
		for _, c := range []struct{ at, offset, ts int64 }{{0, 2, 2000}, {1500, 2, 2000}, {2500, 3, 4000}} {
			lo, err = adm.ListOffsetsAfterMilli(ctx, c.at, "lo")
			check(fmt.Sprintf("after %d, from log start 2", c.at), lo, err, c.offset, c.ts)
		}

		// The broker's own answer for "none" is offset -1, timestamp -1 (Apache semantics).
		req := kmsg.NewPtrListOffsetsRequest()
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "lo"
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = 0, 5000
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp := roundTrip[*kmsg.ListOffsetsResponse](dialRaw(t, g.Addr), 7, req)
		sp := resp.Topics[0].Partitions[0]
		if sp.ErrorCode != 0 || sp.Offset != -1 || sp.Timestamp != -1 {
			t.Fatalf("raw ListOffsets at 5000: error %d offset %d timestamp %d, want 0, -1, -1", sp.ErrorCode, sp.Offset, sp.Timestamp)
		}

		// One batch of 1,000 records: timestamps rise by 2 ms, every tenth record 5 ms in the past (the
		// last one too, so the maximum is at offset 998).
		big := newClient(t, g, kgo.DefaultProduceTopic("lo-big"), kgo.ProducerLinger(50*time.Millisecond))
		recs := make([]*kgo.Record, 1000)
		for i := range recs {
			ms := int64(100_000 + 2*i)
			if i%10 == 9 {
				ms -= 5
			}
			recs[i] = &kgo.Record{Timestamp: time.UnixMilli(ms), Value: []byte("x")}
		}
		if err := big.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce lo-big: %v", err)
		}
		for _, at := range []int64{0, 100_000, 100_001, 100_255, 100_256, 100_257, 100_999, 101_500, 101_996} {
			want := slices.IndexFunc(recs, func(r *kgo.Record) bool { return r.Timestamp.UnixMilli() >= at })
			lo, err = adm.ListOffsetsAfterMilli(ctx, at, "lo-big")
			checkOn("lo-big", fmt.Sprintf("lo-big after %d", at), lo, err, int64(want), recs[want].Timestamp.UnixMilli())
		}
		lo, err = adm.ListMaxTimestampOffsets(ctx, "lo-big")
		checkOn("lo-big", "lo-big max timestamp", lo, err, 998, 101_996)
	})
}

// TestDeleteRecords moves the log start offset with kadm DeleteRecords: the start offset moves,
// consuming from the start begins there, the stream shrinks in Redis, and an offset beyond the high
// watermark is OFFSET_OUT_OF_RANGE.
func TestDeleteRecords(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 30*time.Second)
		adm := newAdmin(t, g)
		mustCreateTopics(t, ctx, adm, 1, nil, "dr")
		p := newClient(t, g, kgo.DefaultProduceTopic("dr"))
		for i := 0; i < 10; i++ {
			if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte{byte('0' + i)}}).FirstErr(); err != nil {
				t.Fatalf("produce %d: %v", i, err)
			}
		}
		rdb := g.Store.Client()
		streamKey := g.Namespace + ":stream:{dr:0}"
		xlen := func() int64 {
			t.Helper()
			n, err := rdb.XLen(ctx, streamKey).Result()
			if err != nil {
				t.Fatalf("XLEN: %v", err)
			}
			return n
		}
		if n := xlen(); n != 10 {
			t.Fatalf("XLEN before delete: %d, want 10", n)
		}
		deleteTo := func(at int64) kadm.DeleteRecordsResponse {
			t.Helper()
			var os kadm.Offsets
			os.Add(kadm.Offset{Topic: "dr", Partition: 0, At: at})
			resp, err := adm.DeleteRecords(ctx, os)
			if err != nil {
				t.Fatalf("DeleteRecords to %d: %v", at, err)
			}
			r, ok := resp.Lookup("dr", 0)
			if !ok {
				t.Fatalf("DeleteRecords to %d: no answer for dr/0", at)
			}
			return r
		}
		if r := deleteTo(4); r.Err != nil || r.LowWatermark != 4 {
			t.Fatalf("DeleteRecords to 4: low watermark %d, %v", r.LowWatermark, r.Err)
		}
		lo, err := adm.ListStartOffsets(ctx, "dr")
		if o, _ := lo.Lookup("dr", 0); err != nil || o.Offset != 4 {
			t.Fatalf("start offset after delete: %d, %v", o.Offset, err)
		}
		if n := xlen(); n != 6 {
			t.Fatalf("XLEN after delete to 4: %d, want 6", n)
		}
		c := newClient(t, g, kgo.ConsumeTopics("dr"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500*time.Millisecond))
		got := consumeRecords(t, ctx, c, 6)
		for i, r := range got {
			if r.Offset != int64(4+i) || string(r.Value) != string(rune('4'+i)) {
				t.Fatalf("record %d after delete: offset %d value %q", i, r.Offset, r.Value)
			}
		}
		// Below the current start: nothing changes.
		if r := deleteTo(2); r.Err != nil || r.LowWatermark != 4 {
			t.Fatalf("DeleteRecords to 2: low watermark %d, %v; want 4", r.LowWatermark, r.Err)
		}
		if r := deleteTo(11); r.Err != kerr.OffsetOutOfRange {
			t.Fatalf("DeleteRecords beyond the high watermark: %v, want OFFSET_OUT_OF_RANGE", r.Err)
		}
		if r := deleteTo(-1); r.Err != nil || r.LowWatermark != 10 {
			t.Fatalf("DeleteRecords to the high watermark: low watermark %d, %v", r.LowWatermark, r.Err)
		}
		if n := xlen(); n != 0 {
			t.Fatalf("XLEN after deleting everything: %d", n)
		}
		// A fetch below the new start is out of range.
		sp := fetchPart(t, roundTrip[*kmsg.FetchResponse](dialRaw(t, g.Addr), 12, fetchReq("dr", [16]byte{}, 0, 3, 1<<20)))
		if sp.ErrorCode != kerr.OffsetOutOfRange.Code || sp.LogStartOffset != 10 || sp.HighWatermark != 10 {
			t.Fatalf("fetch at 3 after delete: error %d start %d hw %d", sp.ErrorCode, sp.LogStartOffset, sp.HighWatermark)
		}
	})
}

// TestOldProtocolVersions walks the version floors the old clients pin (kafka-python 2.0.2, kafka-go,
// kafkajs): ApiVersions v0, Metadata v0 listing all topics, Produce v3, Fetch v4, ListOffsets v0 and
// v1, DescribeCluster; and ListOffsets v8's earliest-local (-4), which without tiered storage is the
// log start offset.
func TestOldProtocolVersions(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 30*time.Second)
		mustCreateTopics(t, ctx, newAdmin(t, g), 1, nil, "old")
		c := dialRaw(t, g.Addr)

		av := roundTrip[*kmsg.ApiVersionsResponse](c, 0, kmsg.NewPtrApiVersionsRequest())
		if av.ErrorCode != 0 || len(av.ApiKeys) == 0 {
			t.Fatalf("ApiVersions v0: error %d, %d keys", av.ErrorCode, len(av.ApiKeys))
		}
		mreq := kmsg.NewPtrMetadataRequest()
		mreq.Topics = []kmsg.MetadataRequestTopic{} // v0: empty means all
		md := roundTrip[*kmsg.MetadataResponse](c, 0, mreq)
		if len(md.Topics) != 1 || md.Topics[0].Topic == nil || *md.Topics[0].Topic != "old" || len(md.Brokers) == 0 {
			t.Fatalf("Metadata v0 for all topics: %+v", md.Topics)
		}

		pr := produceReq("old", 0, 1, rawBatch(t, -1, -1, -1, 5000, "x", "y", "z"))
		if sp := producePart(t, roundTrip[*kmsg.ProduceResponse](c, 3, pr)); sp.ErrorCode != 0 || sp.BaseOffset != 0 {
			t.Fatalf("Produce v3: error %d base offset %d", sp.ErrorCode, sp.BaseOffset)
		}
		fr := fetchReq("old", [16]byte{}, 0, 1, 1<<20)
		fr.MaxWaitMillis, fr.MinBytes = 100, 1
		sp := fetchPart(t, roundTrip[*kmsg.FetchResponse](c, 4, fr))
		bs := fetchedRecords(t, sp)
		if sp.ErrorCode != 0 || sp.HighWatermark != 3 || len(bs) == 0 || bs[0].BaseOffset > 1 {
			t.Fatalf("Fetch v4 from 1: error %d hw %d, %d batches", sp.ErrorCode, sp.HighWatermark, len(bs))
		}
		var vals []string
		for _, b := range bs {
			for i, r := range b.Records {
				if b.BaseOffset+int64(i) >= 1 {
					vals = append(vals, string(r.Value))
				}
			}
		}
		if !slices.Equal(vals, []string{"y", "z"}) {
			t.Fatalf("Fetch v4 from 1: values %q", vals)
		}

		listOne := func(v int16, ts int64) kmsg.ListOffsetsResponseTopicPartition {
			t.Helper()
			req := kmsg.NewPtrListOffsetsRequest()
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = "old"
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition, rp.Timestamp, rp.MaxNumOffsets = 0, ts, 1
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			resp := roundTrip[*kmsg.ListOffsetsResponse](c, v, req)
			return resp.Topics[0].Partitions[0]
		}
		if sp := listOne(0, -1); sp.ErrorCode != 0 || !slices.Equal(sp.OldStyleOffsets, []int64{3}) {
			t.Fatalf("ListOffsets v0 latest: error %d offsets %v", sp.ErrorCode, sp.OldStyleOffsets)
		}
		if sp := listOne(1, -2); sp.ErrorCode != 0 || sp.Offset != 0 {
			t.Fatalf("ListOffsets v1 earliest: error %d offset %d", sp.ErrorCode, sp.Offset)
		}
		var os kadm.Offsets
		os.Add(kadm.Offset{Topic: "old", Partition: 0, At: 2})
		if _, err := newAdmin(t, g).DeleteRecords(ctx, os); err != nil {
			t.Fatalf("DeleteRecords: %v", err)
		}
		if sp := listOne(8, -4); sp.ErrorCode != 0 || sp.Offset != 2 {
			t.Fatalf("ListOffsets v8 earliest-local: error %d offset %d, want 0 and 2", sp.ErrorCode, sp.Offset)
		}

		dc := roundTrip[*kmsg.DescribeClusterResponse](c, 1, kmsg.NewPtrDescribeClusterRequest())
		if dc.ErrorCode != 0 || dc.ClusterID != "kgate-"+g.Namespace || len(dc.Brokers) != 1 ||
			dc.Brokers[0].NodeID != dc.ControllerID || dc.Brokers[0].Port != md.Brokers[0].Port {
			t.Fatalf("DescribeCluster: error %d cluster %q brokers %+v controller %d",
				dc.ErrorCode, dc.ClusterID, dc.Brokers, dc.ControllerID)
		}
	})
}

// TestConcurrentProducersDenseOffsets: several idempotent producers appending to one partition at once
// get disjoint offsets, and the partition holds exactly 0..n-1 with every record once.
func TestConcurrentProducersDenseOffsets(t *testing.T) {
	const producers, each = 4, 50
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 30*time.Second)
		mustCreateTopics(t, ctx, newAdmin(t, g), 1, nil, "dense")
		var wg sync.WaitGroup
		errs := make(chan error, producers)
		for p := 0; p < producers; p++ {
			cl := newClient(t, g, kgo.DefaultProduceTopic("dense"), kgo.ProducerLinger(0))
			wg.Go(func() {
				for i := 0; i < each; i += 5 {
					var recs []*kgo.Record
					for j := i; j < i+5; j++ {
						recs = append(recs, &kgo.Record{Value: []byte(fmt.Sprintf("p%d-%d", p, j))})
					}
					if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("produce: %v", err)
		}
		c := newClient(t, g, kgo.ConsumeTopics("dense"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500*time.Millisecond))
		seen := map[string]bool{}
		next := map[int]int{}
		for i, r := range consumeRecords(t, ctx, c, producers*each) {
			var p, j int
			if _, err := fmt.Sscanf(string(r.Value), "p%d-%d", &p, &j); err != nil {
				t.Fatalf("offset %d: value %q", r.Offset, r.Value)
			}
			switch {
			case r.Offset != int64(i):
				t.Fatalf("record %d has offset %d", i, r.Offset)
			case seen[string(r.Value)]:
				t.Fatalf("offset %d: %q stored twice", r.Offset, r.Value)
			case j != next[p]:
				t.Fatalf("offset %d: %q out of its producer's order (want p%d-%d)", r.Offset, r.Value, p, next[p])
			}
			seen[string(r.Value)] = true
			next[p]++
		}
		end, err := newAdmin(t, g).ListEndOffsets(ctx, "dense")
		if o, _ := end.Lookup("dense", 0); err != nil || o.Offset != producers*each {
			t.Fatalf("end offset %d, %v; want %d", o.Offset, err, producers*each)
		}
	})
}
