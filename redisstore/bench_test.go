package redisstore

// Per-record cost of the store's side of the produce and fetch paths, without a Redis round trip:
// building the append script's arguments (appendArgs) and turning a raw XRANGE reply into records
// (parseEntries). At 10, 100 and 1000 records, so allocs/op shows what grows with
// the batch. These need no redis-server: run with KGATE_SKIP_REDIS=1 to skip starting one.

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/kgate/kgate/internal/benchrec"
)

var benchRecordCounts = []int{10, 100, 1000}

const benchValueSize = 100

func benchBatch(n, hdrs int) *Batch {
	value := make([]byte, benchValueSize)
	b := &Batch{Topic: "bench", Partition: 0, ProducerID: 1000, ProducerEpoch: 0, BaseSequence: 0,
		Records: make([]Record, n)}
	for i := range b.Records {
		r := &b.Records[i]
		r.Timestamp = 1_700_000_000_000 + int64(i/50)
		r.Key = fmt.Appendf(nil, "k%07d", i)
		r.Value = value
		for h := range hdrs {
			r.Headers = append(r.Headers, Header{Key: fmt.Sprintf("h%d", h), Value: []byte("trace-0123")})
		}
	}
	return b
}

// benchReply is a raw XRANGE reply of n entries as Redis sends it (RESP2): [id, [field, value, ...]].
func benchReply(n, hdrs int) []byte {
	return rangeReply(n, func(i int) []string {
		fields := []string{"ts", strconv.FormatInt(1_700_000_000_000+int64(i/50), 10), "key", fmt.Sprintf("k%07d", i), "value", string(make([]byte, benchValueSize))}
		for h := range hdrs {
			fields = append(fields, fmt.Sprintf("h:h%d", h), "trace-0123")
		}
		return fields
	})
}

// rangeReply is a raw XRANGE reply of n entries with IDs 0-1..0-n and the fields fieldsOf gives.
func rangeReply(n int, fieldsOf func(i int) []string) []byte {
	out := fmt.Appendf(nil, "*%d\r\n", n)
	for i := range n {
		fields := fieldsOf(i)
		id := EntryID(int64(i))
		out = fmt.Appendf(out, "*2\r\n$%d\r\n%s\r\n*%d\r\n", len(id), id, len(fields))
		for _, f := range fields {
			out = fmt.Appendf(out, "$%d\r\n%s\r\n", len(f), f)
		}
	}
	return out
}

// BenchmarkAppendArgs builds the append script's ARGV for one batch (the produce path's command
// building; go-redis then copies the list once more into its command).
func BenchmarkAppendArgs(b *testing.B) {
	s := &Store{keys: keys{ns: "kgate"}}
	for _, hdrs := range []int{0, 1} {
		for _, n := range benchRecordCounts {
			batch := benchBatch(n, hdrs)
			b.Run(fmt.Sprintf("headers=%d/records=%d", hdrs, n), func(b *testing.B) {
				benchrec.PerRecord(b, n, func() {
					if args := s.appendArgs(batch, &emptyValue, &emptyValue); len(args) < 5+2*n {
						b.Fatalf("%d args", len(args))
					}
				})
			})
		}
	}
}

// BenchmarkMultiArgs builds one batch's commands for the transactional append (Redis 7+): an XADD
// argument list per record plus the finish script's EVAL, all pointing into slabs sized up front.
func BenchmarkMultiArgs(b *testing.B) {
	s := &Store{keys: keys{ns: "kgate"}}
	for _, hdrs := range []int{0, 1} {
		for _, n := range benchRecordCounts {
			batch := benchBatch(n, hdrs)
			keys := s.partKeys(batch)
			b.Run(fmt.Sprintf("headers=%d/records=%d", hdrs, n), func(b *testing.B) {
				benchrec.PerRecord(b, n, func() {
					if xadds, eval := s.multiArgs(batch, keys, new(appendScratch), 1, &emptyValue, &emptyValue); len(xadds) != n || len(eval) < 9 {
						b.Fatalf("%d xadds, %d eval args", len(xadds), len(eval))
					}
				})
			})
		}
	}
}

// BenchmarkParseEntries turns a raw XRANGE reply into records (the fetch path's reply decoding; go-redis
// reads the reply off the wire into one growing buffer first).
func BenchmarkParseEntries(b *testing.B) {
	for _, hdrs := range []int{0, 1} {
		for _, n := range benchRecordCounts {
			reply := benchReply(n, hdrs)
			b.Run(fmt.Sprintf("headers=%d/records=%d", hdrs, n), func(b *testing.B) {
				benchrec.PerRecord(b, n, func() {
					recs, err := parseEntries(reply)
					if err != nil || len(recs) != n {
						b.Fatalf("parsed %d records: %v", len(recs), err)
					}
				})
			})
		}
	}
}
