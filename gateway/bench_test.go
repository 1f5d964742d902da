package gateway

// Per-record cost of the produce and fetch paths inside the gateway, without Redis: decoding a produce
// batch into a store batch, and encoding stored records into a fetch response batch. Each benchmark runs
// at 10, 100 and 1000 records so ns/record and allocs/op show whether the cost is per batch (constant
// allocs/op) or per record (allocs/op growing with the batch). Script-argument building is measured in
// redisstore (BenchmarkAppendArgs, BenchmarkMultiArgs), the XRANGE reply parsing there too
// (BenchmarkParseEntries). BenchmarkFetchRedis runs a whole fetch against a real redis-server (skipped
// without one), as CPU time per record.

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/internal/benchrec"
	"github.com/kgate/kgate/internal/redistest"
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
				benchrec.PerRecord(b, n, func() {
					if _, _, code := g.decodeProduceBatch("bench", rp.Partition, rp.Records, topic, 0, 100<<20, &kmsg.ProduceResponseTopicPartition{}); code != 0 {
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
				benchrec.PerRecord(b, n, func() {
					dst, _, _ = encodeRecords(dst[:0], recs, 0, 1<<30, true, false)
				})
			})
		}
	}
}

// BenchmarkTailCacheAdd is what the tail cache adds to an accepted produce batch: copying its records
// (they point into the request buffer) and linking them to the partition's newest ones.
func BenchmarkTailCacheAdd(b *testing.B) {
	for _, hdrs := range []int{0, 1} {
		for _, n := range benchRecordCounts {
			recs := benchStoredRecords(n, benchValueSize, hdrs)
			b.Run(fmt.Sprintf("headers=%d/records=%d", hdrs, n), func(b *testing.B) {
				tc := newTailCache(64 << 20)
				k, id, base := partKey{"bench", 0}, [16]byte{1}, int64(0)
				tc.watch([]partKey{k})
				benchrec.PerRecord(b, n, func() {
					tc.add(k, id, appended{base: base}, copyBatch(recs, 0))
					base += int64(n)
				})
			})
		}
	}
}

// discardConn is a net.Conn whose writes go nowhere (the response side of BenchmarkFetchRedis).
type discardConn struct{ net.Conn }

func (discardConn) Write(p []byte) (int, error) { return len(p), nil }

func (discardConn) SetWriteDeadline(time.Time) error { return nil } // conn.write sets one per answer

// BenchmarkFetchRedis is a whole Fetch as the gateway serves it, against a real redis-server (skipped
// when none is on PATH): the pipelined read, reply parsing, record encoding and writing the response
// (to a discarding connection). The request is franz-go's default sizing (50 MB response, 1 MiB per
// partition) from offset 0 of partitions holding more than 1 MiB each. cpu-ns/record is this
// process's CPU time (GC included) per record returned; Redis's own CPU is not in it.
func BenchmarkFetchRedis(b *testing.B) {
	if !redistest.Available() {
		b.Skip("redis-server is not on PATH")
	}
	srv, err := redistest.Start()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Stop)
	ctx := context.Background()
	store, err := redisstore.Open(ctx, redisstore.Options{Addrs: []string{srv.Addr}, Namespace: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	g := New(Config{}, store, zerolog.Nop())
	c := &conn{g: g, nc: discardConn{}, log: zerolog.Nop()}
	for _, tc := range []struct{ size, parts, perPart int }{{100, 1, 10000}, {1024, 8, 1100}, {1024, 64, 1100}} {
		topic := fmt.Sprintf("fetch-%d-%dp", tc.size, tc.parts)
		if err := store.CreateTopic(ctx, redisstore.Topic{Name: topic, Partitions: int32(tc.parts)}); err != nil {
			b.Fatal(err)
		}
		value := make([]byte, tc.size)
		for p := range tc.parts {
			for done := 0; done < tc.perPart; done += 500 {
				batch := &redisstore.Batch{Topic: topic, Partition: int32(p), ProducerID: -1}
				for i := range min(500, tc.perPart-done) {
					batch.Records = append(batch.Records, redisstore.Record{Timestamp: 1_700_000_000_000,
						Key: fmt.Appendf(nil, "k%07d", done+i), Value: value})
				}
				if res := store.Append(ctx, []*redisstore.Batch{batch}); res[0].Err != nil {
					b.Fatal(res[0].Err)
				}
			}
		}
		req := kmsg.NewPtrFetchRequest()
		req.Version = 12
		req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 0, 1, 50<<20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = topic
		for p := range tc.parts {
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = int32(p), 0, 1<<20
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		hdr := protocol.RequestHeader{APIKey: req.Key(), APIVersion: req.Version, CorrelationID: 1}
		b.Run(fmt.Sprintf("%s/partitions=%d", sizeName(tc.size), tc.parts), func(b *testing.B) {
			b.ReportAllocs()
			// One unmeasured fetch first, so the figures are those of a consumer whose partitions'
			// record sizes the gateway has seen (the first fetch of a partition sizes its read by guess).
			if resp, err := c.fetch(ctx, req); err != nil {
				b.Fatal(err)
			} else if err := c.write(hdr, resp); err != nil {
				b.Fatal(err)
			}
			records, bytes := 0, 0
			cpu0 := processCPU()
			for b.Loop() {
				resp, err := c.fetch(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				for _, t := range resp.(*kmsg.FetchResponse).Topics {
					for _, p := range t.Partitions {
						if p.ErrorCode != 0 {
							b.Fatalf("partition %d: error %d", p.Partition, p.ErrorCode)
						}
						bytes += len(p.RecordBatches)
						records += countRecords(p.RecordBatches)
					}
				}
				resp.SetVersion(req.Version)
				if err := c.write(hdr, resp); err != nil {
					b.Fatal(err)
				}
			}
			cpu := processCPU() - cpu0
			if records == 0 {
				b.Fatal("no records fetched")
			}
			b.SetBytes(int64(bytes / b.N))
			b.ReportMetric(float64(records)/float64(b.N), "records/op")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(records), "cpu-ns/record")
		})
	}
}

func sizeName(n int) string {
	if n%1024 == 0 {
		return fmt.Sprintf("%dKB", n/1024)
	}
	return fmt.Sprintf("%dB", n)
}

// countRecords adds up the record counts of the batches in a fetch partition's record set.
func countRecords(set []byte) int {
	n := 0
	for len(set) >= 61 {
		size := int(binary.BigEndian.Uint32(set[8:12])) + 12
		n += int(binary.BigEndian.Uint32(set[57:61]))
		set = set[min(size, len(set)):]
	}
	return n
}

// processCPU is the user+system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkReadAheadOrderRotated is matching a read-ahead of 10,000 partitions to a fetch naming them
// rotated by one, as franz-go rotates partitions between fetches.
func BenchmarkReadAheadOrderRotated(b *testing.B) {
	const n = 10_000
	ra := &readAhead{reqs: make([]redisstore.ReadRequest, n), ids: make([][16]byte, n)}
	for i := range n {
		ra.reqs[i] = redisstore.ReadRequest{Topic: "t", Partition: int32(i)}
	}
	reqs := append(append([]redisstore.ReadRequest{}, ra.reqs[1:]...), ra.reqs[0])
	ids := make([][16]byte, n)
	for b.Loop() {
		if ra.order(reqs, ids) == nil {
			b.Fatal("not matched")
		}
	}
}
