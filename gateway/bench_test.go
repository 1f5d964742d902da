package gateway

// Per-record cost of the produce and fetch paths inside the gateway, without Redis: decoding a produce
// batch into a store batch, and encoding stored records into a fetch response batch. Each benchmark runs
// at 10, 100 and 1000 records so ns/record and allocs/op show whether the cost is per batch (constant
// allocs/op) or per record (allocs/op growing with the batch). Script-argument building is measured in
// redisstore (BenchmarkAppendArgs), the XRANGE reply parsing there too (BenchmarkParseEntries).

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/protocol"
	"github.com/kgate/kgate/redisstore"
)

var benchRecordCounts = []int{10, 100, 1000}

const benchValueSize = 100

// benchProduceBatch is an uncompressed magic-2 batch of n records (8-byte keys, valueSize-byte values,
// hdrs headers each), as a franz-go producer sends it.
func benchProduceBatch(n, valueSize, hdrs int) []byte {
	b := protocol.Batch{
		PartitionLeaderEpoch: -1,
		FirstTimestamp:       1_700_000_000_000,
		MaxTimestamp:         1_700_000_000_000,
		ProducerID:           1,
		BaseSequence:         0,
		NumRecords:           int32(n),
		LastOffsetDelta:      int32(n - 1),
	}
	value := make([]byte, valueSize)
	for i := range value {
		value[i] = byte(i)
	}
	for i := range n {
		r := protocol.Record{
			OffsetDelta: int32(i),
			Timestamp:   b.FirstTimestamp,
			Key:         fmt.Appendf(nil, "k%07d", i),
			Value:       value,
		}
		for h := range hdrs {
			r.Headers = append(r.Headers, protocol.Header{Key: fmt.Sprintf("h%d", h), Value: []byte("trace-0123")})
		}
		b.Records = append(b.Records, r)
	}
	raw, err := protocol.AppendCompressedBatch(nil, b, protocol.CodecNone)
	if err != nil {
		panic(err)
	}
	return raw
}

// benchStoredRecords are n records as redisstore.Read returns them (offsets 0..n-1).
func benchStoredRecords(n, valueSize, hdrs int) []redisstore.Record {
	value := make([]byte, valueSize)
	recs := make([]redisstore.Record, n)
	for i := range recs {
		recs[i] = redisstore.Record{Offset: int64(i), Timestamp: 1_700_000_000_000 + int64(i/50),
			Key: fmt.Appendf(nil, "k%07d", i), Value: value}
		for h := range hdrs {
			recs[i].Headers = append(recs[i].Headers, redisstore.Header{Key: fmt.Sprintf("h%d", h), Value: []byte("trace-0123")})
		}
	}
	return recs
}

// benchPerRecord runs fn b.N times and reports ns/record and allocs/record next to the usual per-op figures.
func benchPerRecord(b *testing.B, records int, fn func()) {
	b.Helper()
	b.ReportAllocs()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for b.Loop() {
		fn()
	}
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(records), "ns/record")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N)/float64(records), "allocs/record")
}

// BenchmarkProduceDecode is the gateway's share of a produce: CRC check, record decoding and building
// the redisstore.Batch (g.decodeProduceBatch), per partition batch.
func BenchmarkProduceDecode(b *testing.B) {
	g := &Gateway{}
	g.cfg.fillDefaults()
	topic := redisstore.Topic{Name: "bench", Partitions: 1}
	for _, hdrs := range []int{0, 1} {
		for _, n := range benchRecordCounts {
			rp := &kmsg.ProduceRequestTopicPartition{Partition: 0, Records: benchProduceBatch(n, benchValueSize, hdrs)}
			b.Run(fmt.Sprintf("headers=%d/records=%d", hdrs, n), func(b *testing.B) {
				b.SetBytes(int64(len(rp.Records)))
				benchPerRecord(b, n, func() {
					if _, code := g.decodeProduceBatch("bench", rp, topic, 0); code != 0 {
						b.Fatalf("decode: error code %d", code)
					}
				})
			})
		}
	}
}

// BenchmarkFetchEncode is the gateway's share of a fetch after Redis answered: encodeRecords turning
// stored records into one record batch (the destination buffer reused, as a response buffer would be).
func BenchmarkFetchEncode(b *testing.B) {
	for _, hdrs := range []int{0, 1} {
		for _, n := range benchRecordCounts {
			recs := benchStoredRecords(n, benchValueSize, hdrs)
			dst, taken, _ := encodeRecords(nil, recs, 0, 1<<30, true, false)
			if taken != n {
				b.Fatalf("encoded %d of %d records", taken, n)
			}
			b.Run(fmt.Sprintf("headers=%d/records=%d", hdrs, n), func(b *testing.B) {
				b.SetBytes(int64(len(dst)))
				benchPerRecord(b, n, func() {
					dst, _, _ = encodeRecords(dst[:0], recs, 0, 1<<30, true, false)
				})
			})
		}
	}
}
