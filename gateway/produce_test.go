package gateway

import (
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/protocol"
	"github.com/kgate/kgate/redisstore"
)

// A request's batches decompress to at most the largest frame accepted in all: three zstd batches of
// a few hundred bytes, each one 400 KiB record of zeros, under a 1 MiB frame limit; the third finds
// the budget spent (MESSAGE_TOO_LARGE) and the connection's queue counts the other two's 800 KiB.
func TestProduceDecompressionBounded(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{MaxFrameBytes: 1 << 20})
	createTopic(t, store, "zeros", 3)
	now := time.Now().UnixMilli()
	batch, err := protocol.AppendCompressedBatch(nil, protocol.Batch{
		PartitionLeaderEpoch: -1, FirstTimestamp: now, MaxTimestamp: now,
		ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, NumRecords: 1,
		Records: []protocol.Record{{Value: make([]byte, 400<<10)}},
	}, protocol.CodecZstd)
	if err != nil {
		t.Fatal(err)
	}
	if len(batch) > 4<<10 {
		t.Fatalf("compressed batch of %d bytes", len(batch))
	}
	req := produceRequestOf("zeros", batch, batch, batch)

	j := (&conn{g: g}).prepareProduce(ctx, req)
	codes := make([]int16, 3)
	for i, sp := range j.resp.Topics[0].Partitions {
		codes[i] = sp.ErrorCode
	}
	if codes[0] != 0 || codes[1] != 0 || codes[2] != kerr.MessageTooLarge.Code || len(j.batches) != 2 {
		t.Fatalf("error codes %v with %d batches, want [0 0 %d] and 2", codes, len(j.batches), kerr.MessageTooLarge.Code)
	}
	if j.held < 800<<10 || j.held > 1<<20 {
		t.Fatalf("%d bytes counted, want about 800 KiB", j.held)
	}
}

// TestProduceRecordMemoryBounded: the records a batch decodes to take memory of their own, 88 bytes or
// more each where a record on the wire can take 7, compressed or not. A batch of many tiny records is
// charged for them against the request's budget (kafka.max_frame_bytes): past it the partition gets
// MESSAGE_TOO_LARGE instead of the gateway holding ten times the frame, and what is let in is counted
// by the connection's queue.
func TestProduceRecordMemoryBounded(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{MaxFrameBytes: 1 << 20})
	createTopic(t, store, "tiny", 2)
	now := time.Now().UnixMilli()
	batch := func(n int) []byte {
		recs := make([]protocol.Record, n)
		for i := range recs {
			recs[i] = protocol.Record{OffsetDelta: int32(i), Timestamp: now}
		}
		b, err := protocol.AppendCompressedBatch(nil, protocol.Batch{
			PartitionLeaderEpoch: -1, FirstTimestamp: now, MaxTimestamp: now,
			ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, NumRecords: int32(n),
			LastOffsetDelta: int32(n - 1), Records: recs,
		}, protocol.CodecNone)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	many, few := batch(50_000), batch(1_000) // 50,000 records: 4.4 MB of structs in a 400 KB batch
	if len(many) > 512<<10 {
		t.Fatalf("batch of %d bytes", len(many))
	}
	req := produceRequestOf("tiny", many, few)

	j := (&conn{g: g}).prepareProduce(ctx, req)
	sps := j.resp.Topics[0].Partitions
	if sps[0].ErrorCode != kerr.MessageTooLarge.Code || sps[1].ErrorCode != 0 || len(j.batches) != 1 {
		t.Fatalf("error codes %d and %d with %d batches, want MESSAGE_TOO_LARGE for 50,000 tiny records and the 1,000 let in", sps[0].ErrorCode, sps[1].ErrorCode, len(j.batches))
	}
	if j.held < 1_000*int(unsafe.Sizeof(redisstore.Record{})) {
		t.Fatalf("%d bytes counted for 1,000 records", j.held)
	}
}

// TestRepeatsPartitionNoAllocation: telling a Produce request that lists no partition twice, the common
// case, allocates nothing; one that does is told.
func TestRepeatsPartitionNoAllocation(t *testing.T) {
	req := kmsg.NewPtrProduceRequest()
	for _, name := range []string{"a", "b"} {
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = name
		for p := range int32(64) {
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Partition = 63 - p
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	if allocs := testing.AllocsPerRun(100, func() {
		if supersededEntries(req) != nil {
			t.Fatal("a request without repeats has superseded entries")
		}
	}); allocs != 0 {
		t.Fatalf("%v allocations per request without repeats, want 0", allocs)
	}
	req.Topics[1].Partitions[5].Partition = 3
	if got := supersededEntries(req); got == nil || !got[1][5] || got[1][60] {
		t.Fatalf("superseded entries %v, want topic b's first entry for partition 3 (its 6th), not its last", got)
	}
}

// Record slabs recycled between produce requests carry nothing over: a batch of a few records without
// headers, decoded after batches of many with headers (whose records went back for reuse), holds
// exactly its own.
func TestProduceRecordsRecycled(t *testing.T) {
	g := &Gateway{}
	decode := func(raw []byte) *redisstore.Batch {
		t.Helper()
		b, _, code := g.decodeProduceBatch("t", 0, raw, redisstore.Topic{}, 0, 1<<30, &kmsg.ProduceResponseTopicPartition{})
		if code != 0 {
			t.Fatalf("error code %d", code)
		}
		return b
	}
	big, small := benchProduceBatch(300, 10, 2), benchProduceBatch(3, 10, 0)
	want := benchStoredRecords(3, 10, 0)
	for range 20 { // sync.Pool keeps most, not all, of what it is handed
		redisstore.RecycleRecords([]*redisstore.Batch{decode(big)})
		got := decode(small)
		if len(got.Records) != len(want) {
			t.Fatalf("%d records, want %d", len(got.Records), len(want))
		}
		for i, r := range got.Records {
			w := want[i]
			if r.Offset != 0 || r.Timestamp != 1_700_000_000_000 || string(r.Key) != string(w.Key) || len(r.Value) != 10 || r.Headers != nil {
				t.Fatalf("record %d: %+v", i, r)
			}
		}
		redisstore.RecycleRecords([]*redisstore.Batch{got})
	}
}

// A panic copying an append's records for the tail cache, on a goroutine of its own, ends that copy
// alone, where it ended the process: the produce is answered, and a fetch gets the records from Redis.
func TestTailCopyPanicKeepsProduce(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{})
	watchedTopic(t, ctx, g, store, "tail-panics", [16]byte{7})
	req := produceRequest(t, "tail-panics", []byte("a"), []byte("b"))

	beforeTailCopy = func() { panic("a panic copying for the tail cache") }
	defer func() { beforeTailCopy = nil }()
	before := testutil.ToFloat64(mPanics.WithLabelValues("tail_copy"))
	j := (&conn{g: g, log: zerolog.Nop()}).prepareProduce(ctx, req)
	j.begin()
	if j.copyOf == nil {
		t.Fatal("the partition is not watched: the test copies nothing")
	}
	resp, err := j.complete(store.Append(ctx, j.batches))
	j.finish()
	if err != nil {
		t.Fatal(err)
	}
	if sp := resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0]; sp.ErrorCode != 0 || sp.BaseOffset != 0 {
		t.Fatalf("produce answered error %d, base offset %d", sp.ErrorCode, sp.BaseOffset)
	}
	if got := testutil.ToFloat64(mPanics.WithLabelValues("tail_copy")) - before; got != 1 {
		t.Errorf("kgate_panics_recovered_total{where=tail_copy} grew by %v, want 1", got)
	}
	if sp := fetchOne(t, ctx, fetchConn(t, g), fetchRequest("tail-panics", 0, 0, 1<<20, 1<<20)); sp.ErrorCode != 0 || countRecords(sp.RecordBatches) != 2 {
		t.Fatalf("fetch after the copy's panic: error %d, %d records; want both", sp.ErrorCode, countRecords(sp.RecordBatches))
	}
}

// produceRequestOf is a Produce v9 request (acks=-1) of topic with batches[p] for partition p.
func produceRequestOf(topic string, batches ...[]byte) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 9, -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	for p, b := range batches {
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = int32(p), b
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	return req
}
