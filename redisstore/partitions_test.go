package redisstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"
)

// rawEntries reads a partition stream with the raw client.
func rawEntries(t *testing.T, s *Store, topic string, p int32) []redis.XMessage {
	t.Helper()
	msgs, err := s.Client().XRange(t.Context(), s.keys.stream(topic, p), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// rawFields reads one entry's field/value list in stored order (XMessage.Values is a map and would
// hide duplicate header names).
func rawFields(t *testing.T, s *Store, topic string, p int32, offset int64) []string {
	t.Helper()
	id := EntryID(offset)
	raw, err := s.Client().Do(t.Context(), "XRANGE", s.keys.stream(topic, p), id, id).Slice()
	if err != nil || len(raw) != 1 {
		t.Fatalf("XRANGE %s: %v %v", id, raw, err)
	}
	pair := raw[0].([]any)
	var out []string
	for _, f := range pair[1].([]any) {
		out = append(out, f.(string))
	}
	return out
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestAppendDenseOffsets(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "dense", 2)
		var next int64
		for i, n := range []int{1, 4, 2, 7} {
			res := mustAppend(t, s, &Batch{Topic: "dense", Partition: 1, Records: plain(fmt.Sprint("b", i), n), ProducerID: -1})
			if res.BaseOffset != next || res.Duplicate || res.LogStartOffset != 0 {
				t.Fatalf("batch %d: %+v, want base %d", i, res, next)
			}
			next += int64(n)
		}
		msgs := rawEntries(t, s, "dense", 1)
		if len(msgs) != int(next) {
			t.Fatalf("XLEN-ish %d, want %d", len(msgs), next)
		}
		for i, m := range msgs {
			if want := fmt.Sprintf("0-%d", i+1); m.ID != want {
				t.Fatalf("entry %d has ID %s, want %s", i, m.ID, want)
			}
		}
		offs, err := s.PartitionOffsets(ctx, "dense", []int32{0, 1})
		if err != nil {
			t.Fatal(err)
		}
		if offs[0] != (Offsets{0, 0}) || offs[1] != (Offsets{Start: 0, End: next}) {
			t.Fatalf("PartitionOffsets = %+v", offs)
		}
		// Several batches for several partitions in one call: one pipeline, results in order.
		res := s.Append(ctx, []*Batch{
			{Topic: "dense", Partition: 0, Records: plain("x", 2), ProducerID: -1},
			{Topic: "dense", Partition: 1, Records: plain("y", 1), ProducerID: -1},
			{Topic: "dense", Partition: 0, Records: plain("z", 3), ProducerID: -1},
		})
		for i, want := range []int64{0, next, 2} {
			if res[i].Err != nil || res[i].BaseOffset != want {
				t.Errorf("multi-batch result %d: %+v, want base %d", i, res[i], want)
			}
		}
		r := mustRead(t, s, "dense", 0, 0, 100)
		if !equalInts(offsetsOf(r.Records), seq(0, 5)) || string(r.Records[2].Value) != "z-0" {
			t.Fatalf("partition 0 after multi-batch append: %+v", r.Records)
		}
	})
}

func TestAppendFieldsAndRead(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "fields", 1)
		recs := []Record{
			{Timestamp: 10}, // null key, null value, no headers
			{Timestamp: 11, Key: []byte{}, Value: []byte{}},
			{Timestamp: 12, Key: []byte("k"), Value: []byte("v\x00\xff binary")},
			{Timestamp: 13, Value: []byte("hv"), Headers: []Header{
				{Key: "a", Value: []byte("1")},
				{Key: "nul", Value: nil},
				{Key: "empty", Value: []byte{}},
				{Key: "a", Value: []byte("2")},
				{Key: "nul", Value: nil},
				{Key: "with:colon", Value: []byte("x")},
			}},
			{Timestamp: -1, Key: []byte("only-key")},
		}
		mustAppend(t, s, &Batch{Topic: "fields", Records: recs, ProducerID: -1})
		want := [][]string{
			{"ts", "10"},
			{"ts", "11", "key", "", "value", ""},
			{"ts", "12", "key", "k", "value", "v\x00\xff binary"},
			{"ts", "13", "value", "hv", "h:a", "1", "hn:nul", "", "h:empty", "", "h:a", "2", "hn:nul", "", "h:with:colon", "x"},
			{"ts", "-1", "key", "only-key"},
		}
		for i := range want {
			if got := rawFields(t, s, "fields", 0, int64(i)); !equalStrings(got, want[i]) {
				t.Errorf("entry %d fields %q, want %q", i, got, want[i])
			}
		}

		res := mustRead(t, s, "fields", 0, 0, 100)
		if res.Offsets != (Offsets{Start: 0, End: 5}) {
			t.Fatalf("Read offsets %+v", res.Offsets)
		}
		if len(res.Records) != len(recs) {
			t.Fatalf("Read %d records, want %d", len(res.Records), len(recs))
		}
		for i, got := range res.Records {
			checkRecord(t, got, recs[i], int64(i))
		}

		// From the middle, limited by Count.
		res = mustRead(t, s, "fields", 0, 2, 2)
		if !equalInts(offsetsOf(res.Records), []int64{2, 3}) {
			t.Fatalf("Read(2, count 2) offsets %v", offsetsOf(res.Records))
		}
		checkRecord(t, res.Records[0], recs[2], 2)
		// At the high watermark: nothing yet, offsets still reported.
		res = mustRead(t, s, "fields", 0, 5, 10)
		if len(res.Records) != 0 || res.End != 5 {
			t.Fatalf("Read at HW: %+v", res)
		}
		// Count 0 reads only the offsets.
		res = s.Read(ctx, []ReadRequest{{Topic: "fields", Offset: 0, Count: 0}})[0]
		if res.Err != nil || len(res.Records) != 0 || res.End != 5 {
			t.Fatalf("Read count 0: %+v", res)
		}
		// A negative offset is below the log start: no records, no error, offsets reported.
		res = s.Read(ctx, []ReadRequest{{Topic: "fields", Offset: -1, Count: 10}})[0]
		if res.Err != nil || len(res.Records) != 0 || res.End != 5 {
			t.Fatalf("Read at -1: %+v", res)
		}
		// An unknown partition reads as empty.
		res = s.Read(ctx, []ReadRequest{{Topic: "fields", Partition: 9, Offset: 0, Count: 10}})[0]
		if res.Err != nil || len(res.Records) != 0 || res.Offsets != (Offsets{}) {
			t.Fatalf("Read unknown partition: %+v", res)
		}
	})
}

func checkRecord(t *testing.T, got, want Record, offset int64) {
	t.Helper()
	if got.Offset != offset || got.Timestamp != want.Timestamp {
		t.Errorf("record %d: offset %d ts %d, want ts %d", offset, got.Offset, got.Timestamp, want.Timestamp)
	}
	sameBytes := func(what string, g, w []byte) {
		if (g == nil) != (w == nil) || !bytes.Equal(g, w) {
			t.Errorf("record %d %s = %q (nil %v), want %q (nil %v)", offset, what, g, g == nil, w, w == nil)
		}
	}
	sameBytes("key", got.Key, want.Key)
	sameBytes("value", got.Value, want.Value)
	if len(got.Headers) != len(want.Headers) {
		t.Errorf("record %d: %d headers, want %d", offset, len(got.Headers), len(want.Headers))
		return
	}
	for j := range got.Headers {
		if got.Headers[j].Key != want.Headers[j].Key {
			t.Errorf("record %d header %d key %q, want %q", offset, j, got.Headers[j].Key, want.Headers[j].Key)
		}
		sameBytes(fmt.Sprint("header ", j), got.Headers[j].Value, want.Headers[j].Value)
	}
}

func TestLogAppendTime(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		mustCreateTopic(t, s, "lat", 1)
		mustAppend(t, s, &Batch{Topic: "lat", Records: plain("a", 3), ProducerID: -1, LogAppendTime: 1700000000123})
		res := mustRead(t, s, "lat", 0, 0, 10)
		for _, r := range res.Records {
			if r.Timestamp != 1700000000123 {
				t.Fatalf("record %d timestamp %d, want the log append time", r.Offset, r.Timestamp)
			}
		}
		off, ts, found, err := s.MaxTimestamp(t.Context(), "lat", 0)
		if err != nil || !found || off != 0 || ts != 1700000000123 {
			t.Fatalf("MaxTimestamp = %d, %d, %v, %v", off, ts, found, err)
		}
	})
}

// TestMaxTimestampKeptByOlderKgate: a partition whose maximum timestamp an older kgate kept in the
// time index alone (a point at every batch, no maxoff or tioff in meta) still answers MaxTimestamp and
// lookups above its index's other points; the next append that raises the maximum keeps it in meta and
// indexes it (no tioff: the index is due a point); an older gateway's append after that (a rolling
// upgrade) moves maxts and the index but not maxoff, and MaxTimestamp follows the index.
func TestMaxTimestampKeptByOlderKgate(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "oldmax", 1)
		appendOne(t, s, "oldmax", 0, Record{Timestamp: 10}, Record{Timestamp: 30}, Record{Timestamp: 20})
		meta, tindex := s.keys.meta("oldmax", 0), s.keys.tindex("oldmax", 0)
		pipe := s.Client().TxPipeline()
		pipe.HDel(ctx, meta, "maxoff", "tioff")
		pipe.ZAdd(ctx, tindex, redis.Z{Score: 10, Member: "0"}, redis.Z{Score: 30, Member: "1"})
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		want := func(wantOff, wantTS int64) {
			t.Helper()
			off, ts, found, err := s.MaxTimestamp(ctx, "oldmax", 0)
			if err != nil || !found || off != wantOff || ts != wantTS {
				t.Fatalf("MaxTimestamp = %d, %d, %v, %v; want %d, %d", off, ts, found, err, wantOff, wantTS)
			}
			off, ts, found, err = s.OffsetForTime(ctx, "oldmax", 0, wantTS-5)
			if err != nil || !found || off != wantOff || ts != wantTS {
				t.Fatalf("OffsetForTime(%d) = %d, %d, %v, %v; want %d, %d", wantTS-5, off, ts, found, err, wantOff, wantTS)
			}
		}
		want(1, 30)
		appendOne(t, s, "oldmax", 0, Record{Timestamp: 25}, Record{Timestamp: 40})
		want(4, 40)
		if _, err := s.Client().ZScore(ctx, tindex, "4").Result(); err != nil {
			t.Fatalf("the first new maximum after an older kgate's appends is not in the time index: %v", err)
		}
		pipe = s.Client().TxPipeline() // an older gateway appends ts 60 at offset 5
		pipe.HSet(ctx, meta, "maxts", "60", "next", "6")
		pipe.ZAdd(ctx, tindex, redis.Z{Score: 60, Member: "5"})
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: s.keys.stream("oldmax", 0), ID: "0-6", Values: []any{"ts", "60"}})
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		want(5, 60)
	})
}

// idem builds an idempotent batch of n records.
func idem(topic string, pid int64, epoch int16, seq int32, n int) *Batch {
	return &Batch{Topic: topic, Records: plain(fmt.Sprintf("p%d-e%d-s%d", pid, epoch, seq), n),
		ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq}
}

// TestDuplicateTellsOriginalTime: a retry recognised as a duplicate comes back with the timestamp
// stored with its original's first record, its log append time on a LogAppendTime topic (Apache answers
// a duplicate with the time its producer state kept for the original, not the retry's), also when
// retries of two batches come in one call (a run, refused as a whole, then appended one by one). Once
// the original's records are deleted the duplicate is still recognised, with no time to tell.
func TestDuplicateTellsOriginalTime(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "lat", 1)
		pid, err := s.NewProducerID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		at := func(seq int32, n int, appended int64) *Batch {
			b := idem("lat", pid, 0, seq, n)
			b.LogAppendTime = appended
			return b
		}
		mustAppend(t, s, at(0, 2, 1111))
		mustAppend(t, s, at(2, 3, 2222))
		if res := mustAppend(t, s, at(0, 2, 9999)); !res.Duplicate || res.BaseOffset != 0 || !res.HasFirstTimestamp || res.FirstTimestamp != 1111 {
			t.Fatalf("retry of seq 0: %+v, want a duplicate at 0 with time 1111", res)
		}
		both := s.Append(ctx, []*Batch{at(0, 2, 9999), at(2, 3, 9999)})
		for i, want := range []struct{ base, ts int64 }{{0, 1111}, {2, 2222}} {
			if r := both[i]; r.Err != nil || !r.Duplicate || r.BaseOffset != want.base || !r.HasFirstTimestamp || r.FirstTimestamp != want.ts {
				t.Errorf("retry %d of two in one call: %+v, want a duplicate at %d with time %d", i, r, want.base, want.ts)
			}
		}
		if _, err := s.DeleteRecords(ctx, "lat", 0, -1); err != nil {
			t.Fatal(err)
		}
		if res := mustAppend(t, s, at(2, 3, 9999)); !res.Duplicate || res.BaseOffset != 2 || res.HasFirstTimestamp {
			t.Fatalf("retry of seq 2 after its records were deleted: %+v, want a duplicate at 2 without a time", res)
		}
	})
}

func TestIdempotentAppend(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "idem", 1)
		xlen := func() int64 { return s.Client().XLen(ctx, s.keys.stream("idem", 0)).Val() }

		pid, err := s.NewProducerID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if pid2, _ := s.NewProducerID(ctx); pid2 != pid+1 {
			t.Fatalf("NewProducerID: %d then %d", pid, pid2)
		}
		first := mustAppend(t, s, idem("idem", pid, 0, 0, 3))
		second := mustAppend(t, s, idem("idem", pid, 0, 3, 2))
		if first.BaseOffset != 0 || second.BaseOffset != 3 || first.Duplicate || second.Duplicate {
			t.Fatalf("first %+v second %+v", first, second)
		}
		// Retries: the original base offset, nothing stored.
		for _, tc := range []struct {
			seq  int32
			n    int
			base int64
		}{{0, 3, 0}, {3, 2, 3}} {
			res := mustAppend(t, s, idem("idem", pid, 0, tc.seq, tc.n))
			if !res.Duplicate || res.BaseOffset != tc.base {
				t.Errorf("retry of seq %d: %+v, want duplicate at %d", tc.seq, res, tc.base)
			}
		}
		if n := xlen(); n != 5 {
			t.Fatalf("XLEN %d after retries, want 5", n)
		}
		// Gaps and overlaps are out of order, and store nothing.
		for _, b := range []*Batch{idem("idem", pid, 0, 6, 1), idem("idem", pid, 0, 4, 1), idem("idem", pid, 0, 0, 2)} {
			if res := s.Append(ctx, []*Batch{b})[0]; !errors.Is(res.Err, ErrOutOfOrderSequence) {
				t.Errorf("seq %d: %+v, want ErrOutOfOrderSequence", b.BaseSequence, res)
			}
		}
		// A new epoch must start at 0; afterwards the old epoch is fenced.
		if res := s.Append(ctx, []*Batch{idem("idem", pid, 1, 5, 1)})[0]; !errors.Is(res.Err, ErrOutOfOrderSequence) {
			t.Errorf("new epoch at seq 5: %+v, want ErrOutOfOrderSequence", res)
		}
		if res := mustAppend(t, s, idem("idem", pid, 1, 0, 1)); res.BaseOffset != 5 {
			t.Errorf("new epoch at seq 0: %+v", res)
		}
		if res := s.Append(ctx, []*Batch{idem("idem", pid, 0, 5, 1)})[0]; !errors.Is(res.Err, ErrInvalidEpoch) {
			t.Errorf("stale epoch: %+v, want ErrInvalidEpoch", res)
		}
		// The old epoch's batches are no longer deduplicated against.
		if res := s.Append(ctx, []*Batch{idem("idem", pid, 0, 0, 3)})[0]; !errors.Is(res.Err, ErrInvalidEpoch) {
			t.Errorf("retry from the stale epoch: %+v, want ErrInvalidEpoch", res)
		}
		// A producer with no state here (never seen, or expired: ExpireProducers) may start at any
		// sequence, as on Apache; from there on it is held to it.
		if res := s.Append(ctx, []*Batch{idem("idem", pid+100, 0, 1, 1)})[0]; res.Err != nil || res.BaseOffset != 6 {
			t.Errorf("unknown producer at seq 1: %+v, want stored at 6", res)
		}
		if res := s.Append(ctx, []*Batch{idem("idem", pid+100, 0, 3, 1)})[0]; !errors.Is(res.Err, ErrOutOfOrderSequence) {
			t.Errorf("the same producer at seq 3 after 1: %+v, want ErrOutOfOrderSequence", res)
		}
		// Non-idempotent batches are never deduplicated.
		a := appendOne(t, s, "idem", 0, plain("n", 1)...)
		b := appendOne(t, s, "idem", 0, plain("n", 1)...)
		if b != a+1 {
			t.Errorf("non-idempotent appends at %d then %d", a, b)
		}
		if n := xlen(); n != 9 {
			t.Fatalf("XLEN %d, want 9", n)
		}
		if offs, _ := s.PartitionOffsets(ctx, "idem", []int32{0}); offs[0].End != 9 {
			t.Fatalf("high watermark %d, want 9", offs[0].End)
		}
	})
}

func TestIdempotentLastFiveBatches(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "five", 1)
		const pid = 42
		var bases []int64
		for i := range 6 {
			bases = append(bases, mustAppend(t, s, idem("five", pid, 3, int32(2*i), 2)).BaseOffset)
		}
		// Batches 1..5 (the last five) are recognised; batch 0 is forgotten.
		for i := 5; i >= 1; i-- {
			res := mustAppend(t, s, idem("five", pid, 3, int32(2*i), 2))
			if !res.Duplicate || res.BaseOffset != bases[i] {
				t.Errorf("retry of batch %d: %+v, want duplicate at %d", i, res, bases[i])
			}
		}
		if res := s.Append(ctx, []*Batch{idem("five", pid, 3, 0, 2)})[0]; res.Duplicate || !errors.Is(res.Err, ErrOutOfOrderSequence) {
			t.Errorf("retry of the sixth-newest batch: %+v, want ErrOutOfOrderSequence", res)
		}
		// Retries left the window alone; a new batch pushes batch 1 out of it.
		if res := mustAppend(t, s, idem("five", pid, 3, 12, 1)); res.BaseOffset != 12 || res.Duplicate {
			t.Fatalf("next batch: %+v", res)
		}
		if res := s.Append(ctx, []*Batch{idem("five", pid, 3, 2, 2)})[0]; !errors.Is(res.Err, ErrOutOfOrderSequence) {
			t.Errorf("batch 1 after a seventh batch: %+v, want ErrOutOfOrderSequence", res)
		}
		if res := mustAppend(t, s, idem("five", pid, 3, 4, 2)); !res.Duplicate || res.BaseOffset != bases[2] {
			t.Errorf("batch 2 after a seventh batch: %+v, want duplicate", res)
		}
		if n := s.Client().XLen(ctx, s.keys.stream("five", 0)).Val(); n != 13 {
			t.Fatalf("XLEN %d, want 13", n)
		}
	})
}

// A producer's state kept by an older kgate in the producers hash is still honoured (duplicates and
// sequence), and moves into the meta hash with the producer's next batch.
func TestIdempotentStateFromProducersHash(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "legacy", 1)
		const pid = 77
		meta, prods, field := s.keys.meta("legacy", 0), s.keys.producers("legacy", 0), "p:77"
		first := mustAppend(t, s, idem("legacy", pid, 2, 0, 3))
		state, err := s.Client().HGet(ctx, meta, field).Result()
		if err != nil {
			t.Fatalf("producer state not in the meta hash: %v", err)
		}
		// The layout of an older kgate: the state in the producers hash, none in meta.
		if err := s.Client().HDel(ctx, meta, field).Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.Client().HSet(ctx, prods, "77", state).Err(); err != nil {
			t.Fatal(err)
		}
		if res := mustAppend(t, s, idem("legacy", pid, 2, 0, 3)); !res.Duplicate || res.BaseOffset != first.BaseOffset {
			t.Fatalf("retry of the batch the producers hash records: %+v, want duplicate at %d", res, first.BaseOffset)
		}
		if res := s.Append(ctx, []*Batch{idem("legacy", pid, 2, 5, 1)})[0]; !errors.Is(res.Err, ErrOutOfOrderSequence) {
			t.Fatalf("gap after the legacy state: %+v, want ErrOutOfOrderSequence", res)
		}
		if res := mustAppend(t, s, idem("legacy", pid, 2, 3, 2)); res.Duplicate || res.BaseOffset != 3 {
			t.Fatalf("next batch: %+v, want base 3", res)
		}
		if n, _ := s.Client().HExists(ctx, prods, "77").Result(); n {
			t.Error("the producers hash still holds the state after the producer's next batch")
		}
		if _, err := s.Client().HGet(ctx, meta, field).Result(); err != nil {
			t.Errorf("producer state not moved into the meta hash: %v", err)
		}
		// Both batches are still recognised: the moved state kept the older one.
		for _, b := range []struct{ seq, base int64 }{{0, 0}, {3, 3}} {
			if res := mustAppend(t, s, idem("legacy", pid, 2, int32(b.seq), int(3-b.seq/3))); !res.Duplicate || res.BaseOffset != b.base {
				t.Errorf("retry of seq %d: %+v, want duplicate at %d", b.seq, res, b.base)
			}
		}
	})
}

func TestIdempotentSequenceWrap(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "wrap", 1)
		const pid = 9
		// Reaching 2^31 records is not practical: seed the producer state (format: epoch,last seq,...)
		// as if this producer had written up to sequence 2147483644.
		if err := s.Client().HSet(ctx, s.keys.producers("wrap", 0), fmt.Sprint(pid), "0,2147483644").Err(); err != nil {
			t.Fatal(err)
		}
		steps := []struct {
			seq int32
			n   int
		}{
			{2147483645, 3}, // 2147483645..2147483647: ends exactly at MaxInt32
			{0, 2},          // wraps to 0
			{2, 1},
		}
		for i, st := range steps {
			if res := mustAppend(t, s, idem("wrap", pid, 0, st.seq, st.n)); res.Duplicate {
				t.Fatalf("step %d: %+v", i, res)
			}
		}
		// A batch that spans the wrap: 3..(2^31-1) is impossible to reach here, so seed again.
		if err := s.Client().HSet(ctx, s.keys.producers("wrap", 0), fmt.Sprint(pid+1), "0,2147483646").Err(); err != nil {
			t.Fatal(err)
		}
		spanning := mustAppend(t, s, idem("wrap", pid+1, 0, math.MaxInt32, 3)) // 2147483647, 0, 1
		if res := mustAppend(t, s, idem("wrap", pid+1, 0, math.MaxInt32, 3)); !res.Duplicate || res.BaseOffset != spanning.BaseOffset {
			t.Fatalf("retry of the spanning batch: %+v", res)
		}
		if res := s.Append(ctx, []*Batch{idem("wrap", pid+1, 0, 0, 1)})[0]; !errors.Is(res.Err, ErrOutOfOrderSequence) {
			t.Fatalf("seq 0 after a batch that ended at 1: %+v", res)
		}
		if res := mustAppend(t, s, idem("wrap", pid+1, 0, 2, 1)); res.Duplicate {
			t.Fatalf("seq 2 after the spanning batch: %+v", res)
		}
		if n := s.Client().XLen(ctx, s.keys.stream("wrap", 0)).Val(); n != 10 {
			t.Fatalf("XLEN %d, want 10", n)
		}
	})
}

func TestConcurrentAppendsStayDense(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "busy", 1)
		const writers, batches, per = 6, 15, 3
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for b := range batches {
					recs := plain(fmt.Sprintf("w%d-b%d", w, b), per)
					res := s.Append(ctx, []*Batch{{Topic: "busy", Records: recs, ProducerID: -1}})[0]
					if res.Err != nil {
						t.Error(res.Err)
						return
					}
				}
			})
		}
		// An idempotent producer interleaves with them and must keep its own order.
		wg.Go(func() {
			for b := range batches {
				if res := s.Append(ctx, []*Batch{idem("busy", 77, 0, int32(b*per), per)})[0]; res.Err != nil || res.Duplicate {
					t.Errorf("idempotent batch %d: %+v", b, res)
					return
				}
			}
		})
		wg.Wait()
		const total = (writers + 1) * batches * per
		res := mustRead(t, s, "busy", 0, 0, total+10)
		if !equalInts(offsetsOf(res.Records), seq(0, total)) || res.End != total {
			t.Fatalf("offsets %v (end %d), want 0..%d", offsetsOf(res.Records), res.End, total-1)
		}
		// Each batch landed contiguously and every record exactly once.
		seen := map[string]bool{}
		for i := 0; i < total; i += per {
			for j := range per {
				v := string(res.Records[i+j].Value)
				if seen[v] {
					t.Fatalf("record %q stored twice", v)
				}
				seen[v] = true
				if want := fmt.Sprintf("-%d", j); v[len(v)-len(want):] != want {
					t.Fatalf("batch at %d is not contiguous: record %d is %q", i, i+j, v)
				}
			}
		}
		if len(seen) != total {
			t.Fatalf("%d distinct records, want %d", len(seen), total)
		}
	})
}

func TestDeleteRecords(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "del", 1)
		appendOne(t, s, "del", 0, plain("r", 10)...)
		xlen := func() int64 { return s.Client().XLen(ctx, s.keys.stream("del", 0)).Val() }

		start, err := s.DeleteRecords(ctx, "del", 0, 4)
		if err != nil || start != 4 {
			t.Fatalf("DeleteRecords(4) = %d, %v", start, err)
		}
		if n := xlen(); n != 6 {
			t.Fatalf("XLEN %d after deleting below 4, want 6", n)
		}
		if first := rawEntries(t, s, "del", 0)[0].ID; first != EntryID(4) {
			t.Fatalf("first remaining entry %s, want %s", first, EntryID(4))
		}
		offs, _ := s.PartitionOffsets(ctx, "del", []int32{0})
		if offs[0] != (Offsets{Start: 4, End: 10}) {
			t.Fatalf("offsets %+v", offs[0])
		}
		for _, from := range []int64{0, 3} {
			if res := mustRead(t, s, "del", 0, from, 100); len(res.Records) != 0 || res.Start != 4 {
				t.Errorf("Read below the log start (%d): %d records, start %d", from, len(res.Records), res.Start)
			}
		}
		if res := mustRead(t, s, "del", 0, 4, 100); !equalInts(offsetsOf(res.Records), seq(4, 10)) {
			t.Fatalf("Read from the log start: %v", offsetsOf(res.Records))
		}
		// Moving backwards is a no-op that reports the current start.
		if start, err := s.DeleteRecords(ctx, "del", 0, 2); err != nil || start != 4 {
			t.Fatalf("DeleteRecords(2) after 4 = %d, %v", start, err)
		}
		if _, err := s.DeleteRecords(ctx, "del", 0, 11); !errors.Is(err, ErrOffsetOutOfRange) {
			t.Fatalf("DeleteRecords beyond HW: %v, want ErrOffsetOutOfRange", err)
		}
		// Appends report the new log start.
		if res := mustAppend(t, s, &Batch{Topic: "del", Records: plain("s", 2), ProducerID: -1}); res.BaseOffset != 10 || res.LogStartOffset != 4 {
			t.Fatalf("append after delete: %+v", res)
		}
		// -1: up to the high watermark.
		start, err = s.DeleteRecords(ctx, "del", 0, -1)
		if err != nil || start != 12 {
			t.Fatalf("DeleteRecords(-1) = %d, %v, want 12", start, err)
		}
		if n := xlen(); n != 0 {
			t.Fatalf("XLEN %d after deleting everything", n)
		}
		if res := mustRead(t, s, "del", 0, 4, 100); len(res.Records) != 0 || res.Offsets != (Offsets{Start: 12, End: 12}) {
			t.Fatalf("Read after deleting everything: %+v", res)
		}
		// The log goes on at the same offsets.
		if base := appendOne(t, s, "del", 0, plain("t", 1)...); base != 12 {
			t.Fatalf("append after emptying: base %d, want 12", base)
		}
		if res := mustRead(t, s, "del", 0, 12, 10); !equalInts(offsetsOf(res.Records), []int64{12}) {
			t.Fatalf("read after emptying: %v", offsetsOf(res.Records))
		}
	})
}

// TestOffsetForTimeSparseIndex: batches of many records and runs of small ones, timestamps mostly
// rising with dips and repeats, enter the time index at points at least timeIndexStride records apart,
// and every lookup still finds what a scan of all records finds (the first record at or above the
// target; past the index's last point from the maximum kept in meta), before and after DeleteRecords.
func TestOffsetForTimeSparseIndex(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "sparse", 1)
		rng := rand.New(rand.NewPCG(1, 2))
		var all []Record
		ts := int64(1000)
		sizes := []int{700, 5, 300, 1, 900}
		for i := range 150 {
			sizes = append(sizes, 1+i%4)
		}
		for _, n := range sizes {
			recs := make([]Record, n)
			for i := range recs {
				ts += rng.Int64N(3)                                   // repeats
				recs[i].Timestamp = ts - rng.Int64N(40)*rng.Int64N(2) // dips below the running maximum
			}
			appendOne(t, s, "sparse", 0, recs...)
			all = append(all, recs...)
		}
		points, err := s.Client().ZRange(ctx, s.keys.tindex("sparse", 0), 0, -1).Result()
		if err != nil || len(points) < 2 {
			t.Fatalf("time index of %d records: %v (%v)", len(all), points, err)
		}
		for i := 1; i < len(points); i++ {
			a, _ := strconv.Atoi(points[i-1])
			b, _ := strconv.Atoi(points[i])
			if b-a < timeIndexStride {
				t.Fatalf("time index points %d and %d: fewer than %d records apart (%v)", a, b, timeIndexStride, points)
			}
		}
		check := func(start int) {
			t.Helper()
			for target := int64(900); target <= ts+2; target += 11 { // each lookup scans up to ~512 records
				wantOff, found := -1, false
				for i := start; i < len(all); i++ {
					if all[i].Timestamp >= target {
						wantOff, found = i, true
						break
					}
				}
				off, got, ok, err := s.OffsetForTime(ctx, "sparse", 0, target)
				if err != nil || ok != found || (found && (off != int64(wantOff) || got != all[wantOff].Timestamp)) {
					t.Fatalf("OffsetForTime(%d) from %d = %d, %d, %v, %v; want %d, %v", target, start, off, got, ok, err, wantOff, found)
				}
			}
		}
		maxOff := 0
		for i := range all {
			if all[i].Timestamp > all[maxOff].Timestamp {
				maxOff = i
			}
		}
		if last := points[len(points)-1]; last == strconv.Itoa(maxOff) {
			t.Fatalf("the maximum (offset %s) is in the time index: lookups above its last point are not tested", last)
		}
		check(0)
		if off, got, _, _ := s.MaxTimestamp(ctx, "sparse", 0); off != int64(maxOff) || got != all[maxOff].Timestamp {
			t.Fatalf("MaxTimestamp = %d, %d; want %d, %d", off, got, maxOff, all[maxOff].Timestamp)
		}
		if _, err := s.DeleteRecords(ctx, "sparse", 0, 850); err != nil {
			t.Fatal(err)
		}
		check(850)
	})
}

// TestDeleteRecordsTrimsTimeIndex: DeleteRecords (and so retention) drops the time index's points below
// the new log start but the last, which lookups still answer correctly with; before, the index kept a
// point per few hundred records for as long as the partition was written.
func TestDeleteRecordsTrimsTimeIndex(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "trimmed", 1)
		const batches, per = 20, 600
		for b := range batches {
			recs := make([]Record, per)
			for i := range recs {
				recs[i].Timestamp = int64(10 * (b*per + i)) // offset x has timestamp 10x
			}
			appendOne(t, s, "trimmed", 0, recs...)
		}
		index := s.keys.tindex("trimmed", 0)
		points := func() []int64 {
			t.Helper()
			ms, err := s.Client().ZRange(ctx, index, 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			var out []int64
			for _, m := range ms {
				v, _ := strconv.ParseInt(m, 10, 64)
				out = append(out, v)
			}
			return out
		}
		if n := len(points()); n < 10 {
			t.Fatalf("%d time index points for %d records, want about one per %d", n, batches*per, timeIndexStride)
		}
		const start = 7000
		if _, err := s.DeleteRecords(ctx, "trimmed", 0, start); err != nil {
			t.Fatal(err)
		}
		below := 0
		for _, p := range points() {
			if p < start {
				below++
			}
		}
		if below != 1 {
			t.Fatalf("after DeleteRecords to %d: %d points below it (%v), want 1", start, below, points())
		}
		for _, target := range []int64{0, 10*start - 5, 10 * start, 10*start + 4321, 10*(batches*per-1) + 1} {
			want, found := max((target+9)/10, start), true
			if want >= batches*per {
				found = false
			}
			off, _, ok, err := s.OffsetForTime(ctx, "trimmed", 0, target)
			if err != nil || ok != found || found && off != want {
				t.Fatalf("OffsetForTime(%d) = %d, %v, %v; want %d, %v", target, off, ok, err, want, found)
			}
		}
		if _, err := s.DeleteRecords(ctx, "trimmed", 0, -1); err != nil {
			t.Fatal(err)
		}
		if ps := points(); len(ps) > 1 {
			t.Fatalf("after deleting every record: time index %v, want at most one point", ps)
		}
		// No record left, so no largest timestamp (Apache answers -1): the one kept pointed below the
		// log start, where a consumer seeking to it gets OFFSET_OUT_OF_RANGE.
		if off, ts, found, err := s.MaxTimestamp(ctx, "trimmed", 0); err != nil || found {
			t.Fatalf("MaxTimestamp of an emptied partition = %d, %d, %v, %v; want none", off, ts, found, err)
		}
	})
}

// TestOffsetForTimeNativeGaps: entries deleted natively (XDEL) inside the scanned range, and the index
// point itself, make reads come back short; the scan goes on to the high watermark.
func TestOffsetForTimeNativeGaps(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "gaps", 1)
		appendOne(t, s, "gaps", 0, Record{Timestamp: 1})
		recs := make([]Record, 2601) // offsets 1-2601; only the last raises the maximum
		recs[2600].Timestamp = 1000
		appendOne(t, s, "gaps", 0, recs...)
		appendOne(t, s, "gaps", 0, Record{Timestamp: 2000})
		xdel := func(off int64) {
			t.Helper()
			if err := s.Client().XDel(ctx, s.keys.stream("gaps", 0), EntryID(off)).Err(); err != nil {
				t.Fatal(err)
			}
		}
		check := func(target, wantOff, wantTS int64) {
			t.Helper()
			off, ts, found, err := s.OffsetForTime(ctx, "gaps", 0, target)
			if err != nil || !found || off != wantOff || ts != wantTS {
				t.Fatalf("OffsetForTime(%d) = %d, %d, %v, %v; want %d, %d", target, off, ts, found, err, wantOff, wantTS)
			}
		}
		xdel(5)
		check(500, 2601, 1000)
		xdel(2601) // the index point
		check(500, 2602, 2000)
		if _, _, found, err := s.OffsetForTime(ctx, "gaps", 0, 3000); err != nil || found {
			t.Fatalf("OffsetForTime(3000): found %v, %v", found, err)
		}
	})
}

func TestOffsetForTime(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "time", 1)
		if _, _, found, err := s.OffsetForTime(ctx, "time", 0, 0); err != nil || found {
			t.Fatalf("empty partition: found %v, %v", found, err)
		}
		if _, _, found, err := s.MaxTimestamp(ctx, "time", 0); err != nil || found {
			t.Fatalf("MaxTimestamp of an empty partition: found %v, %v", found, err)
		}
		var recs []Record
		for _, ts := range []int64{100, 300, 200, 400, 250} {
			recs = append(recs, Record{Timestamp: ts, Value: []byte(fmt.Sprint(ts))})
		}
		appendOne(t, s, "time", 0, recs...)
		type want struct {
			off, ts int64
			found   bool
		}
		check := func(target int64, w want) {
			t.Helper()
			off, ts, found, err := s.OffsetForTime(ctx, "time", 0, target)
			if err != nil || found != w.found || (found && (off != w.off || ts != w.ts)) {
				t.Errorf("OffsetForTime(%d) = %d, %d, %v, %v; want %+v", target, off, ts, found, err, w)
			}
		}
		check(0, want{0, 100, true})
		check(100, want{0, 100, true})
		check(101, want{1, 300, true})
		check(250, want{1, 300, true})
		check(300, want{1, 300, true})
		check(350, want{3, 400, true})
		check(400, want{3, 400, true})
		check(500, want{found: false})
		if off, ts, found, err := s.MaxTimestamp(ctx, "time", 0); err != nil || !found || off != 3 || ts != 400 {
			t.Fatalf("MaxTimestamp = %d, %d, %v, %v", off, ts, found, err)
		}
		// A later record with the same maximum does not move MaxTimestamp (the first one wins).
		appendOne(t, s, "time", 0, Record{Timestamp: 400}, Record{Timestamp: 50})
		if off, ts, _, _ := s.MaxTimestamp(ctx, "time", 0); off != 3 || ts != 400 {
			t.Fatalf("MaxTimestamp after a tie = %d, %d", off, ts)
		}

		// Delete past the indexed offset 1 (ts 300): the scan over what remains answers.
		// Remaining: 2:200 3:400 4:250 5:400 6:50.
		if _, err := s.DeleteRecords(ctx, "time", 0, 2); err != nil {
			t.Fatal(err)
		}
		check(150, want{2, 200, true})
		check(250, want{3, 400, true})
		check(210, want{3, 400, true})
		check(500, want{found: false})
		if _, err := s.DeleteRecords(ctx, "time", 0, 4); err != nil {
			t.Fatal(err)
		}
		// Remaining: 4:250 5:400 6:50; index entries 1 (300) and 3 (400) are both gone.
		check(260, want{5, 400, true})
		check(0, want{4, 250, true})
		check(401, want{found: false})
		if _, err := s.DeleteRecords(ctx, "time", 0, -1); err != nil {
			t.Fatal(err)
		}
		check(0, want{found: false})
	})
}

// The scan fallback pages through more than one XRANGE page.
func TestOffsetForTimeScanPages(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "pages", 1)
		recs := make([]Record, 2600)
		for i := range recs {
			recs[i] = Record{Timestamp: 10}
		}
		recs[0].Timestamp = 1000 // indexed at offset 0
		recs[2500].Timestamp = 999
		appendOne(t, s, "pages", 0, recs...)
		if _, err := s.DeleteRecords(ctx, "pages", 0, 1); err != nil {
			t.Fatal(err)
		}
		off, ts, found, err := s.OffsetForTime(ctx, "pages", 0, 500)
		if err != nil || !found || off != 2500 || ts != 999 {
			t.Fatalf("OffsetForTime after deleting the indexed record = %d, %d, %v, %v; want 2500, 999", off, ts, found, err)
		}
	})
}

func TestReadManyPartitions(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		const parts = 12
		mustCreateTopic(t, s, "wide", parts)
		var batches []*Batch
		var reqs []ReadRequest
		for p := range int32(parts) {
			batches = append(batches, &Batch{Topic: "wide", Partition: p, Records: plain(fmt.Sprint("p", p), int(p)+1), ProducerID: -1})
			reqs = append(reqs, ReadRequest{Topic: "wide", Partition: p, Offset: int64(p) / 2, Count: 100})
		}
		for i, res := range s.Append(t.Context(), batches) {
			if res.Err != nil || res.BaseOffset != 0 {
				t.Fatalf("partition %d: %+v", i, res)
			}
		}
		for p, res := range s.Read(t.Context(), reqs) {
			if res.Err != nil || res.End != int64(p)+1 || !equalInts(offsetsOf(res.Records), seq(int64(p)/2, int64(p)+1)) {
				t.Errorf("partition %d: %+v", p, res)
			}
			for _, r := range res.Records {
				if want := fmt.Sprintf("p%d-%d", p, r.Offset); string(r.Value) != want {
					t.Errorf("partition %d offset %d: %q, want %q", p, r.Offset, r.Value, want)
				}
			}
		}
	})
}

func TestClip(t *testing.T) {
	recs := func(offs ...int64) []Record {
		var out []Record
		for _, o := range offs {
			out = append(out, Record{Offset: o})
		}
		return out
	}
	for _, tc := range []struct {
		in   []int64
		from int64
		o    Offsets
		want []int64
	}{
		{[]int64{3, 4, 5}, 3, Offsets{3, 6}, []int64{3, 4, 5}},
		{[]int64{3, 4, 5}, 1, Offsets{3, 6}, nil},                 // below the log start
		{[]int64{1, 2, 3, 4}, 2, Offsets{2, 6}, []int64{2, 3, 4}}, // an untrimmed entry below start is dropped
		{[]int64{3, 4, 5, 6}, 3, Offsets{3, 5}, []int64{3, 4}},    // appended after the offsets were read
	} {
		got := offsetsOf(tc.o.Clip(recs(tc.in...), tc.from))
		if !equalInts(got, tc.want) {
			t.Errorf("%+v.Clip(%v, %d) = %v, want %v", tc.o, tc.in, tc.from, got, tc.want)
		}
	}
}

// Servers without XTRIM MINID (Redis < 6.2) get the XRANGE + XDEL fallback of the delete script. A
// server of our own with XTRIM renamed away stands in for one.
func TestDeleteRecordsWithoutXTRIM(t *testing.T) {
	t.Parallel()
	if standalone == nil {
		t.Skip("KGATE_SKIP_REDIS=1")
	}
	s, _ := openOwnServer(t, "--rename-command", "XTRIM", "")
	ctx := t.Context()
	if err := s.Client().Do(ctx, "XTRIM", "x", "MAXLEN", "0").Err(); err == nil {
		t.Fatal("XTRIM still available")
	}
	mustCreateTopic(t, s, "old", 1)
	appendOne(t, s, "old", 0, plain("r", 2500)...)
	if start, err := s.DeleteRecords(ctx, "old", 0, 2200); err != nil || start != 2200 {
		t.Fatalf("DeleteRecords(2200) = %d, %v", start, err)
	}
	msgs := rawEntries(t, s, "old", 0)
	if len(msgs) != 300 || msgs[0].ID != EntryID(2200) {
		t.Fatalf("after the fallback trim: %d entries from %s", len(msgs), msgs[0].ID)
	}
	if start, err := s.DeleteRecords(ctx, "old", 0, -1); err != nil || start != 2500 {
		t.Fatalf("DeleteRecords(-1) = %d, %v", start, err)
	}
	if n := s.Client().XLen(ctx, s.keys.stream("old", 0)).Val(); n != 0 {
		t.Fatalf("XLEN %d after deleting everything", n)
	}
}

// TestAppendRefusesForeignWrites: an entry XADDed into a kgate stream behind its back (here with a
// time-based ID) makes the next append fail with ErrStreamConflict, storing nothing and leaving the
// high watermark where it was, instead of silently shifting offsets.
func TestAppendRefusesForeignWrites(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "foreign", 1)
		mustAppend(t, s, &Batch{Topic: "foreign", Partition: 0, Records: plain("a", 2), ProducerID: -1})
		key := s.StreamKey("foreign", 0)
		if err := s.Client().XAdd(ctx, &redis.XAddArgs{Stream: key, ID: "*", Values: []string{"native", "1"}}).Err(); err != nil {
			t.Fatal(err)
		}
		res := s.Append(ctx, []*Batch{{Topic: "foreign", Partition: 0, Records: plain("b", 3), ProducerID: -1}})
		if !errors.Is(res[0].Err, ErrStreamConflict) && s.multiAppend.Load() {
			t.Fatalf("append after a foreign XADD: %+v, want ErrStreamConflict", res[0])
		}
		if res[0].Err == nil {
			t.Fatalf("append after a foreign XADD succeeded: %+v", res[0])
		}
		offs, err := s.PartitionOffsets(ctx, "foreign", []int32{0})
		if err != nil {
			t.Fatal(err)
		}
		if offs[0].End != 2 {
			t.Fatalf("high watermark %d after a refused append, want 2", offs[0].End)
		}
		if n := s.Client().XLen(ctx, key).Val(); n != 3 {
			t.Fatalf("XLEN %d, want the 2 kgate records + 1 native entry", n)
		}
	})
}

// TestAppendKeepsRecordsAfterForeignEntryDeleted: a foreign entry XADDed and then XDELed (a native
// app's cleanup) leaves the stream's last ID foreign while its top entry is kgate's. The next append's
// XADDs then fail; it is refused with ErrStreamConflict and every acknowledged record stays: the
// finish step once took the newest entries for the refused block's own and deleted them.
func TestAppendKeepsRecordsAfterForeignEntryDeleted(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "foreign-del", 1)
		appendOne(t, s, "foreign-del", 0, plain("a", 5)...)
		key := s.StreamKey("foreign-del", 0)
		addForeignThenDelete(t, s, key)
		res := s.Append(ctx, []*Batch{{Topic: "foreign-del", Partition: 0, Records: plain("b", 3), ProducerID: -1}})
		if res[0].Err == nil {
			t.Fatalf("append after a foreign ID succeeded: %+v", res[0])
		}
		if !errors.Is(res[0].Err, ErrStreamConflict) && s.multiAppend.Load() {
			t.Fatalf("append after a foreign ID: %v, want ErrStreamConflict", res[0].Err)
		}
		if n := s.Client().XLen(ctx, key).Val(); n != 5 {
			t.Fatalf("XLEN %d after a refused append, want the 5 acknowledged records", n)
		}
		got := mustRead(t, s, "foreign-del", 0, 0, 10)
		if len(got.Records) != 5 {
			t.Fatalf("read %d records, want the 5 acknowledged", len(got.Records))
		}
		for i, r := range got.Records {
			if want := plain("a", 5)[i].Value; string(r.Value) != string(want) {
				t.Fatalf("record %d value %q, want %q", i, r.Value, want)
			}
		}
	})
}

// TestSplitReads: a read expecting readSplitMin entries or more is split into parts of about the same
// expected size, a request at a boundary by offset; smaller reads stay whole.
func TestSplitReads(t *testing.T) {
	reqs := []ReadRequest{
		{Partition: 0, Offset: 10, Count: 300},
		{Partition: 1, Offset: -1, Count: 50}, // below any entry: offsets only
		{Partition: 2, Offset: 0, Count: 10000, Expect: 500},
		{Partition: 3, Offset: 5, Count: 0},
	}
	got := splitReads(reqs, 512, 2, math.MaxInt64)
	want := [][]readPiece{
		{{req: 0, from: 10, to: -1, count: 300}, {req: 2, from: 0, to: 99, count: 100}},
		{{req: 2, from: 100, to: -1, count: 9900}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("split in 2: %v, want %v", got, want)
	}
	got = splitReads(reqs, 512, 4, math.MaxInt64) // 800 expected: parts of at least 256, so 3 of 267
	want = [][]readPiece{
		{{req: 0, from: 10, to: 276, count: 267}},
		{{req: 0, from: 277, to: -1, count: 33}, {req: 2, from: 0, to: 233, count: 234}},
		{{req: 2, from: 234, to: -1, count: 9766}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("split in 3: %v, want %v", got, want)
	}
	got = splitReads(reqs[:2], 512, 4, math.MaxInt64)
	if len(got) != 1 || len(got[0]) != 1 || got[0][0] != (readPiece{req: 0, from: 10, to: -1, count: 300}) {
		t.Fatalf("small read split: %v", got)
	}
}

// TestSplitReadsByReplyBytes: a read expected to bring more reply than a pipeline should is split
// into lists that each bring about readPipelineBytes, every expected entry in exactly one piece.
func TestSplitReadsByReplyBytes(t *testing.T) {
	var reqs []ReadRequest
	for p := range int32(64) {
		reqs = append(reqs, ReadRequest{Partition: p, Offset: int64(p) * 10, Count: 997, RecordBytes: 1032})
	}
	reqs = append(reqs, ReadRequest{Partition: 64, Offset: 0, Count: 5000, Expect: 3}) // at its end
	lists := splitReads(reqs, readSplitMin, readSplitMax, readPipelineBytes)
	// 63,808 entries of 1,112 bytes and 3 of 180: 70,955,036 bytes, 270 lists of 237 entries.
	if len(lists) != 270 {
		t.Fatalf("%d lists, want 270", len(lists))
	}
	next := make([]int64, len(reqs)) // the offset each request's next piece starts at
	for i, r := range reqs {
		next[i] = r.Offset
	}
	for li, l := range lists {
		var b int64
		for _, pc := range l {
			r := reqs[pc.req]
			if pc.from != next[pc.req] {
				t.Fatalf("list %d: request %d's piece from %d, want %d", li, pc.req, pc.from, next[pc.req])
			}
			next[pc.req] = pc.from + pc.count
			b += replyBytes(pc.expected(r), r.RecordBytes)
		}
		if b == 0 || b > readPipelineBytes*101/100 {
			t.Fatalf("list %d expects %d bytes of reply", li, b)
		}
	}
	for i, r := range reqs {
		if next[i] != r.Offset+r.Count {
			t.Fatalf("request %d read up to %d, want %d", i, next[i], r.Offset+r.Count)
		}
	}
}

// TestReadSplitMatchesWholeRead: on real Redis a split read returns exactly what one read returns,
// also across gaps left by entries deleted natively.
func TestReadSplitMatchesWholeRead(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		mustCreateTopic(t, s, "split", 2)
		var batches []*Batch
		for p := range int32(2) {
			batches = append(batches, &Batch{Topic: "split", Partition: p, Records: plain(fmt.Sprint("p", p), 1500), ProducerID: -1})
		}
		for i, res := range s.Append(t.Context(), batches) {
			if res.Err != nil {
				t.Fatalf("partition %d: %v", i, res.Err)
			}
		}
		if !s.Embedded() {
			if err := s.Client().XDel(t.Context(), s.keys.stream("split", 0), EntryID(1200), EntryID(1201), EntryID(1499)).Err(); err != nil {
				t.Fatal(err)
			}
		}
		// Records announced as 8 KiB bring 25 MB of reply by the split's reckoning: about a hundred
		// parts, taken four at a time.
		for _, recordBytes := range []int64{0, 8 << 10} {
			reqs := []ReadRequest{{Topic: "split", Partition: 0, Offset: 3, Count: 2000, RecordBytes: recordBytes},
				{Topic: "split", Partition: 1, Offset: 0, Count: 1000, RecordBytes: recordBytes}}
			parts := splitReads(reqs, readSplitMin, readSplitMax, readPipelineBytes)
			if len(parts) < 2 || recordBytes > 0 && len(parts) < 90 {
				t.Fatalf("the read is split in %d parts; the test proves nothing", len(parts))
			}
			whole := splitReads(reqs, math.MaxInt64, 1, math.MaxInt64)
			want := make([]ReadResult, len(reqs))
			s.readPieces(t.Context(), reqs, whole[0], true, nil, want)
			got := s.Read(t.Context(), reqs)
			for i := range reqs {
				if got[i].Err != nil || want[i].Err != nil || got[i].Offsets != want[i].Offsets ||
					!equalInts(offsetsOf(got[i].Records), offsetsOf(want[i].Records)) || len(got[i].Records) < 900 {
					t.Fatalf("%d parts, partition %d: split read %v (%d records), whole read %v (%d records)", len(parts), i, got[i].Err, len(got[i].Records), want[i].Err, len(want[i].Records))
				}
				for j, r := range got[i].Records {
					if !bytes.Equal(r.Value, want[i].Records[j].Value) {
						t.Fatalf("%d parts, partition %d offset %d: %q vs %q", len(parts), i, r.Offset, r.Value, want[i].Records[j].Value)
					}
				}
			}
		}
	})
}

// TestSplitBatches: a request's batches split into runs of about the same number of records, at most
// maxParts and none below minRecords; never a single batch, a small request, or one naming a
// partition twice (its order must hold).
func TestSplitBatches(t *testing.T) {
	mk := func(sizes ...int) []*Batch {
		var bs []*Batch
		for i, n := range sizes {
			bs = append(bs, &Batch{Topic: "t", Partition: int32(i), Records: make([]Record, n)})
		}
		return bs
	}
	for _, c := range []struct {
		sizes []int
		want  []int
	}{
		{[]int{1000}, []int{0, 1}},
		{[]int{100, 100}, []int{0, 2}},
		{[]int{300, 300}, []int{0, 1, 2}},
		{[]int{100, 100, 100, 100}, []int{0, 2, 4}},
		{[]int{1000, 10, 10}, []int{0, 3}}, // a cut after the big batch would leave 20 records
		{[]int{1000, 300}, []int{0, 1, 2}},
		{[]int{10, 10, 1000}, []int{0, 3}},
		{[]int{300, 300, 300, 300, 300, 300, 300, 300}, []int{0, 2, 4, 6, 8}},
		{[]int{200, 200, 200, 200, 200}, []int{0, 1, 2, 4, 5}},
		{[]int{400, 6700, 19089, 13451, 9969}, []int{0, 2, 3, 4, 5}}, // shares of what is left
		{[]int{300, 300, 3000}, []int{0, 2, 3}},                      // the big batch alone, cut before it
		{[]int{200, 200, 200, 2000}, []int{0, 3, 4}},
		{[]int{3000, 300, 300}, []int{0, 1, 2, 3}},
		{[]int{100, 5000, 100, 100}, []int{0, 2, 4}},
	} {
		if got := splitBatches(mk(c.sizes...), 128, 4); !slices.Equal(got, c.want) {
			t.Errorf("split of %v: %v, want %v", c.sizes, got, c.want)
		}
	}
	// Any split: bounds from 0 to len, strictly rising, at most 4 runs, each of 128 records or more.
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		sizes := make([]int, 1+rng.IntN(12))
		for i := range sizes {
			sizes[i] = 1 + rng.IntN([]int{50, 400, 3000}[rng.IntN(3)])
		}
		cuts := splitBatches(mk(sizes...), 128, 4)
		ok := len(cuts) >= 2 && len(cuts) <= 5 && cuts[0] == 0 && cuts[len(cuts)-1] == len(sizes)
		for j := 1; ok && j < len(cuts); j++ {
			run := 0
			for _, n := range sizes[cuts[j-1]:cuts[j]] {
				run += n
			}
			ok = cuts[j] > cuts[j-1] && (len(cuts) == 2 || run >= 128)
		}
		if !ok {
			t.Fatalf("split of %v: %v", sizes, cuts)
		}
	}
	dup := mk(300, 300, 300)
	dup[2].Partition = 0
	if got := splitBatches(dup, 128, 4); !slices.Equal(got, []int{0, 3}) {
		t.Errorf("split of batches naming partition 0 twice: %v", got)
	}
}

// TestReadSplitRacingAnAppend: a later part of a split read that ran before an append, and found the
// stream ending inside its range, must not leave a gap before the records a still later part found
// appended: the parts are run here in the worst order (the first part, which reads the offsets, last).
func TestReadSplitRacingAnAppend(t *testing.T) {
	if standalone == nil {
		t.Skip("KGATE_SKIP_REDIS=1")
	}
	s := openStore(t, Options{Addrs: []string{standalone.Addr}})
	mustCreateTopic(t, s, "race", 1)
	appendN := func(n int) {
		t.Helper()
		if res := s.Append(t.Context(), []*Batch{{Topic: "race", Partition: 0, Records: plain("r", n), ProducerID: -1}}); res[0].Err != nil {
			t.Fatal(res[0].Err)
		}
	}
	appendN(600) // offsets 0-599
	reqs := []ReadRequest{{Topic: "race", Partition: 0, Offset: 0, Count: 1025}}
	parts := splitReads(reqs, readSplitMin, readSplitMax, readPipelineBytes)
	if len(parts) != 4 || parts[2][0].from > 599 || parts[2][0].to <= 599 {
		t.Fatalf("split %v: want four parts, the third across offset 599", parts)
	}
	more := make([][]ReadResult, len(parts))
	for j := range parts {
		more[j] = make([]ReadResult, len(reqs))
	}
	s.readPieces(t.Context(), reqs, parts[2], false, nil, more[2]) // finds the stream ending at 599
	appendN(400)                                                   // offsets 600-999
	s.readPieces(t.Context(), reqs, parts[3], false, nil, more[3])
	s.readPieces(t.Context(), reqs, parts[1], false, nil, more[1])
	out := make([]ReadResult, len(reqs))
	s.readPieces(t.Context(), reqs, parts[0], true, nil, out) // high watermark 1000
	s.mergeParts(t.Context(), reqs, out, more[1:])
	if out[0].Err != nil || out[0].End != 1000 {
		t.Fatalf("read: %v, end %d", out[0].Err, out[0].End)
	}
	got := offsetsOf(out[0].Records)
	for i, off := range got {
		if off != int64(i) {
			t.Fatalf("record %d has offset %d (of %d records): a gap", i, off, len(got))
		}
	}
	if len(got) != 1000 {
		t.Fatalf("%d records, want 1000", len(got))
	}
}

// TestAppendRecordWithManyHeaders: a record with as many headers as the gateway lets through (1,000)
// is stored and read back whole by every store, the embedded one's append script included.
func TestAppendRecordWithManyHeaders(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		mustCreateTopic(t, s, "headers", 1)
		r := Record{Timestamp: 1, Value: []byte("v")}
		for h := range 1000 {
			r.Headers = append(r.Headers, Header{Key: fmt.Sprintf("h%d", h), Value: []byte{byte(h)}})
		}
		b := &Batch{Topic: "headers", Partition: 0, Records: []Record{{Timestamp: 1, Value: []byte("first")}, r}, ProducerID: -1}
		if res := s.Append(t.Context(), []*Batch{b}); res[0].Err != nil {
			t.Fatal(res[0].Err)
		}
		got := s.Read(t.Context(), []ReadRequest{{Topic: "headers", Partition: 0, Offset: 0, Count: 10}})
		if got[0].Err != nil || len(got[0].Records) != 2 || len(got[0].Records[1].Headers) != 1000 ||
			got[0].Records[1].Headers[999].Key != "h999" || got[0].Records[1].Headers[999].Value[0] != byte(999%256) {
			t.Fatalf("read back: %v, %d records", got[0].Err, len(got[0].Records))
		}
	})
}

// TestReadNearMaxOffset: a read from an offset no entry can have (up to math.MaxInt64, a split read
// among them) sends Redis no invalid entry ID: it answers the partition's offsets and no records, so
// the fetch can answer OFFSET_OUT_OF_RANGE instead of failing as if Redis did.
func TestReadNearMaxOffset(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		mustCreateTopic(t, s, "far", 1)
		appendOne(t, s, "far", 0, plain("r", 3)...)
		for _, offset := range []int64{math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64 - 300} {
			for _, count := range []int64{1, 10000} { // 10000: split by offset
				res := s.Read(t.Context(), []ReadRequest{{Topic: "far", Partition: 0, Offset: offset, Count: count}})[0]
				if res.Err != nil || res.End != 3 || len(res.Records) != 0 {
					t.Errorf("Read(@%d, count %d) = %v, end %d, %d records; want no error, end 3, none", offset, count, res.Err, res.End, len(res.Records))
				}
			}
		}
	})
}

// TestAppendRefusedAfterStreamLost: a partition's stream deleted (or evicted) while its meta hash stays
// makes the next append fail with ErrStreamConflict and store nothing: its records are not left in the
// stream, where reads would serve them at offsets other appends had (they were, before).
func TestAppendRefusedAfterStreamLost(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Store) {
		if !s.multiAppend.Load() {
			t.Skip("the script append writes explicit IDs and checks before writing")
		}
		ctx := t.Context()
		mustCreateTopic(t, s, "lost", 1)
		mustAppend(t, s, &Batch{Topic: "lost", Partition: 0, Records: plain("a", 5), ProducerID: -1})
		key := s.StreamKey("lost", 0)
		if err := s.Client().Del(ctx, key).Err(); err != nil {
			t.Fatal(err)
		}
		res := s.Append(ctx, []*Batch{{Topic: "lost", Partition: 0, Records: plain("b", 2), ProducerID: -1}})
		if !errors.Is(res[0].Err, ErrStreamConflict) {
			t.Fatalf("append after the stream was lost: %+v, want ErrStreamConflict", res[0])
		}
		if n := s.Client().XLen(ctx, key).Val(); n != 0 {
			t.Fatalf("XLEN %d after the refused append, want its records undone", n)
		}
		if got := mustRead(t, s, "lost", 0, 0, 10); len(got.Records) != 0 {
			t.Fatalf("read after the refused append: %d records, want none", len(got.Records))
		}
	})
}

// TestProducerStateExpires: a producer's state carries the time of its last batch; ExpireProducers
// drops the state of producers idle since before its cutoff (their next batch may then start at any
// sequence) and keeps the others', and state written without a time gets one, so it expires later.
func TestProducerStateExpires(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "expiring", 1)
		meta := s.keys.meta("expiring", 0)
		for _, pid := range []int64{11, 12} {
			b := &Batch{Topic: "expiring", Partition: 0, ProducerID: pid, BaseSequence: 0, Records: plain("e", 2)}
			if r := s.Append(ctx, []*Batch{b})[0]; r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		used, err := s.Client().HGet(ctx, meta, "t:11").Int64()
		if err != nil || time.Since(time.UnixMilli(used)).Abs() > time.Minute {
			t.Fatalf("last use of producer 11: %d, %v; want about now", used, err)
		}
		// State written before times were kept: no t: field.
		if err := s.Client().HSet(ctx, meta, "p:13", "0,4").Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.Client().HSet(ctx, meta, "t:12", time.Now().Add(-48*time.Hour).UnixMilli()).Err(); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		n, err := s.ExpireProducers(ctx, "expiring", []int32{0}, now.Add(-24*time.Hour), now)
		if err != nil || n != 1 {
			t.Fatalf("expired %d, %v; want producer 12 alone", n, err)
		}
		fields, err := s.Client().HGetAll(ctx, meta).Result()
		if err != nil {
			t.Fatal(err)
		}
		for f, want := range map[string]bool{"p:11": true, "t:11": true, "p:12": false, "t:12": false, "p:13": true, "t:13": true} {
			if _, ok := fields[f]; ok != want {
				t.Errorf("field %s present %v after the expiry, want %v (%v)", f, ok, want, fields)
			}
		}
		// Producer 12 starts over at any sequence; 11 is still held to its own.
		if r := s.Append(ctx, []*Batch{{Topic: "expiring", Partition: 0, ProducerID: 12, BaseSequence: 40, Records: plain("f", 1)}})[0]; r.Err != nil {
			t.Errorf("expired producer at seq 40: %+v, want stored", r)
		}
		if r := s.Append(ctx, []*Batch{{Topic: "expiring", Partition: 0, ProducerID: 11, BaseSequence: 40, Records: plain("f", 1)}})[0]; !errors.Is(r.Err, ErrOutOfOrderSequence) {
			t.Errorf("live producer at seq 40 after 1: %+v, want ErrOutOfOrderSequence", r)
		}
	})
}

// TestHugeTimestamps: a record timestamp beyond what a Lua number holds exactly (2^53) counts as
// 2^53-1 in the time index and the partition's maximum. Near 2^63 it was stored as -2^63: MaxTimestamp
// named an earlier record and OffsetForTime found nothing where records qualified, which had
// retention delete records still within retention.ms.
func TestHugeTimestamps(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "huge", 2)
		appendOne(t, s, "huge", 0, Record{Timestamp: 100}, Record{Timestamp: math.MaxInt64}, Record{Timestamp: 200})
		if off, _, found, err := s.MaxTimestamp(ctx, "huge", 0); err != nil || !found || off != 1 {
			t.Errorf("MaxTimestamp = offset %d, found %v, %v; want offset 1", off, found, err)
		}
		for _, target := range []int64{150, 1 << 60} {
			if off, ts, found, err := s.OffsetForTime(ctx, "huge", 0, target); err != nil || !found || off != 1 || ts != math.MaxInt64 {
				t.Errorf("OffsetForTime(%d) = %d, %d, %v, %v; want offset 1, its timestamp", target, off, ts, found, err)
			}
		}
		// Nanoseconds sent as milliseconds: the larger of two such timestamps is the maximum, though
		// their doubles are equal.
		appendOne(t, s, "huge", 1, Record{Timestamp: 1_700_000_000_000_000_000}, Record{Timestamp: 1_700_000_000_000_000_100})
		if off, _, found, err := s.OffsetForTime(ctx, "huge", 1, 1_700_000_000_000_000_001); err != nil || !found || off != 1 {
			t.Errorf("OffsetForTime between two nanosecond timestamps = %d, %v, %v; want offset 1", off, found, err)
		}
	})
}

// RecycleReads hands a read's reply buffers back, every part's of a split read included, and the next
// reads take them instead of allocating: a consumer catching up allocated a fetch's worth per fetch.
// What a read returns after another's buffers were recycled is its own records, whole.
func TestReadBuffersRecycled(t *testing.T) {
	s := openStore(t, backendOptions(t, "standalone"))
	mustCreateTopic(t, s, "recycled", 1)
	const n = 2000
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = Record{Timestamp: 1, Value: []byte(fmt.Sprintf("v%05d-%s", i, strings.Repeat("x", 200)))}
	}
	mustAppend(t, s, &Batch{Topic: "recycled", ProducerID: -1, Records: recs})
	read := func(offset, count int64) []ReadResult {
		t.Helper()
		res := s.Read(t.Context(), []ReadRequest{{Topic: "recycled", Offset: offset, Count: count, RecordBytes: 210}})
		if res[0].Err != nil || int64(len(res[0].Records)) != count {
			t.Fatalf("read %d at %d: %d records, %v", count, offset, len(res[0].Records), res[0].Err)
		}
		for i, r := range res[0].Records {
			if want := fmt.Sprintf("v%05d-", offset+int64(i)); r.Offset != offset+int64(i) || !strings.HasPrefix(string(r.Value), want) {
				t.Fatalf("record %d of the read at %d: offset %d, value %.8q; want %d, %q", i, offset, r.Offset, r.Value, offset+int64(i), want)
			}
		}
		return res
	}
	whole := read(0, n)
	if parts := len(whole[0].bufs); parts < 2 {
		t.Fatalf("a read of %d entries held %d reply buffers; want one per part of a split read", n, parts)
	}
	owned := map[*byte]bool{}
	for _, b := range whole[0].bufs {
		owned[unsafe.SliceData(b.b[:1])] = true
	}
	RecycleReads(whole)
	if whole[0].Records != nil || whole[0].bufs != nil {
		t.Fatal("a recycled result still holds its records")
	}
	reused := 0
	for range 20 { // sync.Pool may drop what it is handed; it keeps most
		res := read(500, 300)
		for _, b := range res[0].bufs {
			if owned[unsafe.SliceData(b.b[:1])] {
				reused++
			}
			owned[unsafe.SliceData(b.b[:1])] = true
		}
		RecycleReads(res)
	}
	if reused < 10 && !raceEnabled || reused == 0 {
		t.Fatalf("%d of 20 reads reused a recycled buffer", reused)
	}
}

// TestKnownTimeLookups: KnownOffsetForTime and KnownMaxTimestamp answer as OffsetForTime and
// MaxTimestamp while the partition has its meta hash, and ErrUnknownPartition once its topic is
// deleted: before the lookup, or during it, between the lookup's read of the index and its scan of the
// records. OffsetForTime and MaxTimestamp still find no record there.
func TestKnownTimeLookups(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "known", 1)
		appendOne(t, s, "known", 0, plain("r", 5)...)
		if off, ts, found, err := s.KnownOffsetForTime(ctx, "known", 0, 1002); err != nil || !found || off != 2 || ts != 1002 {
			t.Fatalf("KnownOffsetForTime(1002) = %d, %d, %v, %v; want 2, 1002", off, ts, found, err)
		}
		if off, ts, found, err := s.KnownMaxTimestamp(ctx, "known", 0); err != nil || !found || off != 4 || ts != 1004 {
			t.Fatalf("KnownMaxTimestamp = %d, %d, %v, %v; want 4, 1004", off, ts, found, err)
		}
		// The topic deleted once the lookup has read the index and meta, before it scans the records.
		var deleted atomic.Bool
		s.rdb.AddHook(pipelineHook(func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
			err := next(ctx, cmds)
			if slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Name() == "zrange" }) && !deleted.Swap(true) {
				if derr := s.DeleteTopic(ctx, "known"); derr != nil {
					t.Error(derr)
				}
			}
			return err
		}))
		if off, ts, found, err := s.KnownOffsetForTime(ctx, "known", 0, 1002); !errors.Is(err, ErrUnknownPartition) {
			t.Errorf("KnownOffsetForTime(1002), the topic deleted during it = %d, %d, %v, %v; want ErrUnknownPartition", off, ts, found, err)
		}
		if !deleted.Load() {
			t.Fatal("the topic was not deleted during the lookup")
		}
		for _, target := range []int64{0, 1002, 5000} {
			if off, ts, found, err := s.KnownOffsetForTime(ctx, "known", 0, target); !errors.Is(err, ErrUnknownPartition) {
				t.Errorf("KnownOffsetForTime(%d) of a deleted topic = %d, %d, %v, %v; want ErrUnknownPartition", target, off, ts, found, err)
			}
			if off, ts, found, err := s.OffsetForTime(ctx, "known", 0, target); err != nil || found {
				t.Errorf("OffsetForTime(%d) of a deleted topic = %d, %d, %v, %v; want none", target, off, ts, found, err)
			}
		}
		if off, ts, found, err := s.KnownMaxTimestamp(ctx, "known", 0); !errors.Is(err, ErrUnknownPartition) {
			t.Errorf("KnownMaxTimestamp of a deleted topic = %d, %d, %v, %v; want ErrUnknownPartition", off, ts, found, err)
		}
		if off, ts, found, err := s.MaxTimestamp(ctx, "known", 0); err != nil || found {
			t.Errorf("MaxTimestamp of a deleted topic = %d, %d, %v, %v; want none", off, ts, found, err)
		}
	})
}

// TestDeleteRecordsOf: DeleteRecordsOf trims several partitions of a topic as DeleteRecords trims
// each (DeleteKnownRecords those marked Known), its errors per partition, in one round trip once the masters have the script, and in one more
// when they lack it (its first use, SCRIPT FLUSH, a restart), not one more per partition.
func TestDeleteRecordsOf(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "trims", 4)
		for p := range int32(4) {
			appendOne(t, s, "trims", p, plain("r", 10)...)
		}
		trips := serverTrips(t, s)
		for _, step := range []struct {
			name  string
			trims []Trim
			want  []TrimResult
			most  int64 // per master
		}{
			{"first", []Trim{{0, 4, false}, {1, -1, false}, {2, 11, false}, {3, 10, false}}, []TrimResult{{Start: 4}, {Start: 10}, {Err: ErrOffsetOutOfRange}, {Start: 10}}, 2},
			// Partition 4 has no meta hash: an empty partition, unless known to have one.
			{"cached", []Trim{{0, 5, true}, {2, 1, false}, {4, 0, false}, {4, 0, true}}, []TrimResult{{Start: 5}, {Start: 1}, {Start: 0}, {Err: ErrUnknownPartition}}, 1},
			{"flushed", []Trim{{0, 6, false}, {1, 2, false}, {2, 2, false}}, []TrimResult{{Start: 6}, {Start: 10}, {Start: 2}}, 2},
		} {
			if step.name == "flushed" {
				flushScripts(t, s)
			}
			before := trips.Load()
			got := s.DeleteRecordsOf(ctx, "trims", step.trims)
			for i := range step.want {
				if got[i].Start != step.want[i].Start || !errors.Is(got[i].Err, step.want[i].Err) {
					t.Errorf("%s: trim %+v = %+v, want %+v", step.name, step.trims[i], got[i], step.want[i])
				}
			}
			var ps []int32
			for _, tr := range step.trims {
				ps = append(ps, tr.Partition)
			}
			if n, most := trips.Load()-before, step.most*int64(mastersOf(t, s, "trims", ps)); n > most {
				t.Errorf("%s: DeleteRecordsOf of %d partitions took %d round trips, want %d at most", step.name, len(step.trims), n, most)
			}
		}
		offs, err := s.PartitionOffsets(ctx, "trims", []int32{0, 1, 2, 3})
		if err != nil {
			t.Fatal(err)
		}
		if want := []Offsets{{6, 10}, {10, 10}, {2, 10}, {10, 10}}; !slices.Equal(offs, want) {
			t.Errorf("offsets after the trims %v, want %v", offs, want)
		}
	})
}
