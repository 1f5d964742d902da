package gateway

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kgate/kgate/redisstore"
)

func tailRecords(prefix string, n int) []redisstore.Record {
	recs := make([]redisstore.Record, n)
	for i := range recs {
		recs[i] = redisstore.Record{Timestamp: int64(1000 + i), Key: []byte(fmt.Sprint("k", i)), Value: []byte(fmt.Sprintf("%s-%d", prefix, i))}
	}
	return recs
}

func values(recs []redisstore.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, fmt.Sprintf("%d:%s", r.Offset, r.Value))
	}
	return out
}

// TestTailCacheRanges: contiguous appends extend a partition's records; a read is answered only when
// the cache holds every offset up to the high watermark, for the same topic ID.
func TestTailCacheRanges(t *testing.T) {
	tc := newTailCache(1 << 20)
	k, id := partKey{"t", 0}, [16]byte{1}
	tc.watch([]partKey{k})
	tc.add(k, id, appended{base: 10}, copyBatch(tailRecords("a", 3), 0))
	tc.add(k, id, appended{base: 13}, copyBatch(tailRecords("b", 2), 0))
	if got := fmt.Sprint(values(getFrom(tc, k, id, 11, 15, tc.now()))); got != "[11:a-1 12:a-2 13:b-0 14:b-1]" {
		t.Fatalf("get 11..15: %s", got)
	}
	if got := getFrom(tc, k, id, 15, 15, tc.now()); got == nil || len(got) != 0 {
		t.Fatalf("get at the end: %v, want empty", got)
	}
	for _, c := range []struct {
		id       [16]byte
		from, to int64
	}{{id, 9, 15}, {[16]byte{2}, 11, 15}, {id, 16, 16}} {
		if got := getFrom(tc, k, c.id, c.from, c.to, tc.now()); got != nil {
			t.Errorf("get %x %d..%d: %v, want nil", c.id, c.from, c.to, values(got))
		}
	}
	// A high watermark read just before an append: the cache moved on since; it answers up to the
	// high watermark and is kept.
	since := tc.now()
	tc.add(k, id, appended{base: 15}, copyBatch(tailRecords("c", 1), 0))
	if got := fmt.Sprint(values(getFrom(tc, k, id, 13, 15, since))); got != "[13:b-0 14:b-1]" || !tc.covers(k, id, 16) {
		t.Fatalf("get 13..15 read before an append: %s", got)
	}
	// A high watermark below the cached records with no append since: another incarnation; dropped.
	if got := getFrom(tc, k, id, 11, 14, tc.now()); got != nil || tc.covers(k, id, 11) {
		t.Fatalf("cache reaching past the high watermark answered %v", values(got))
	}
	// Not contiguous (another gateway appended 15..19): starts over at 20.
	tc.add(k, id, appended{base: 10}, copyBatch(tailRecords("a", 5), 0))
	tc.add(k, id, appended{base: 20}, copyBatch(tailRecords("c", 2), 0))
	if tc.covers(k, id, 14) || !tc.covers(k, id, 20) || !tc.covers(k, id, 22) || tc.covers(k, id, 23) {
		t.Fatal("cache kept records across a gap")
	}
	tc.forget("t")
	if tc.covers(k, id, 20) {
		t.Fatal("forget kept the topic")
	}
}

// TestTailCacheCopies: records are copied (the request buffer they came from is reused), null and
// empty keys stay apart, headers are kept, and the log append time replaces timestamps.
func TestTailCacheCopies(t *testing.T) {
	tc := newTailCache(1 << 20)
	k, id := partKey{"t", 0}, [16]byte{1}
	tc.watch([]partKey{k})
	buf := []byte("keyvaluehnamehval")
	recs := []redisstore.Record{
		{Timestamp: 5, Key: buf[0:3], Value: buf[3:8], Headers: []redisstore.Header{{Key: "h", Value: buf[13:17]}, {Key: "n"}}},
		{Timestamp: 6, Key: nil, Value: []byte{}},
	}
	tc.add(k, id, appended{base: 0}, copyBatch(recs, 99))
	for i := range buf {
		buf[i] = 'x'
	}
	got := getFrom(tc, k, id, 0, 2, tc.now())
	if string(got[0].Key) != "key" || string(got[0].Value) != "value" || got[0].Timestamp != 99 ||
		len(got[0].Headers) != 2 || got[0].Headers[0].Key != "h" || string(got[0].Headers[0].Value) != "hval" || got[0].Headers[1].Value != nil {
		t.Fatalf("record 0: %+v", got[0])
	}
	if got[1].Key != nil || got[1].Value == nil || len(got[1].Value) != 0 || got[1].Offset != 1 {
		t.Fatalf("record 1: null key or empty value lost: %+v", got[1])
	}
}

// TestTailCacheBounds: a partition keeps its newest records within its share; past the cache's total
// the partition appended to longest ago goes.
func TestTailCacheBounds(t *testing.T) {
	tc := newTailCache(1 << 20)
	tc.perPart = 1000
	k, id := partKey{"t", 0}, [16]byte{1}
	tc.watch([]partKey{k})
	big := bytes.Repeat([]byte("v"), 200)
	for i := range 20 {
		tc.add(k, id, appended{base: int64(i)}, copyBatch([]redisstore.Record{{Value: big}}, 0))
	}
	if tc.covers(k, id, 10) || !tc.covers(k, id, 17) || tc.bytes > 1000 {
		t.Fatalf("partition share not enforced: covers 10 %v, 17 %v, %d bytes", tc.covers(k, id, 10), tc.covers(k, id, 17), tc.bytes)
	}
	tc = newTailCache(2000)
	tc.perPart = 1000
	for p := range int32(4) {
		tc.watch([]partKey{{"t", p}})
		tc.add(partKey{"t", p}, id, appended{base: 0}, copyBatch([]redisstore.Record{{Value: big}, {Value: big}}, 0))
	}
	if tc.bytes > 2000 || tc.covers(partKey{"t", 0}, id, 0) || !tc.covers(partKey{"t", 3}, id, 0) {
		t.Fatalf("total bound: %d bytes, partition 0 kept %v, 3 kept %v", tc.bytes, tc.covers(partKey{"t", 0}, id, 0), tc.covers(partKey{"t", 3}, id, 0))
	}
	if newTailCache(0) != nil || newTailCache(-1) != nil {
		t.Fatal("a cache without bytes exists")
	}
	var off *tailCache
	off.add(k, id, appended{base: 0}, copyBatch(tailRecords("a", 1), 0))
	if getFrom(off, k, id, 0, 1, 0) != nil || off.covers(k, id, 0) {
		t.Fatal("a disabled cache answered")
	}
}

// TestTailCacheAwait: a read the cache cannot answer yet waits for this gateway's appends in flight to
// the partition (their records come with them), not for others, and not past its bound.
func TestTailCacheAwait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tc := newTailCache(1 << 20)
		k, id := partKey{"t", 0}, [16]byte{1}
		ks := []partKey{k}
		tc.watch(ks)
		tc.add(k, id, appended{base: 0}, copyBatch(tailRecords("a", 2), 0))
		since := tc.now()
		// Nothing in flight: the answer is at once.
		if got := tc.await(t.Context(), k, id, 1, 4, since, time.Second); got != nil {
			t.Fatalf("await without appends in flight: %v", values(got))
		}
		// An append in flight, answered after 10 ms.
		copyOf, _ := tc.begin(ks)
		go func() {
			time.Sleep(10 * time.Millisecond)
			tc.add(k, id, appended{base: 2}, copyBatch(tailRecords("b", 2), 0))
			tc.finish(ks, copyOf)
		}()
		start := time.Now()
		if got := fmt.Sprint(values(tc.await(t.Context(), k, id, 1, 4, since, time.Second))); got != "[1:a-1 2:b-0 3:b-1]" {
			t.Fatalf("await with an append in flight: %s", got)
		}
		if waited := time.Since(start); waited != 10*time.Millisecond {
			t.Fatalf("waited %v for an append answered after 10ms", waited)
		}
		// An append in flight that does not answer: the wait ends at its bound.
		copyOf, _ = tc.begin(ks)
		start = time.Now()
		if got := tc.await(t.Context(), k, id, 1, 9, tc.now(), 5*time.Millisecond); got != nil || time.Since(start) != 5*time.Millisecond {
			t.Fatalf("await past its bound: %v after %v", values(got), time.Since(start))
		}
		tc.finish(ks, copyOf)
	})
}

// getFrom reads tc without waiting.
func getFrom(tc *tailCache, k partKey, id [16]byte, from, to int64, since uint64) []redisstore.Record {
	return tc.await(context.Background(), k, id, from, to, since, 0)
}

// TestTailCacheWatch: appends are copied only for partitions a fetch read up to their end within
// tailWatch, and only those count as in flight; an append not copied drops what the cache holds of its
// partition, and a copied one answered after that does not bring it back; stale marks are forgotten
// (on the partition's next append, and in sweeps as the marks grow), and a deleted topic's marks go
// with it.
func TestTailCacheWatch(t *testing.T) {
	tc := newTailCache(1 << 20)
	a, b, c := partKey{"t", 0}, partKey{"t", 1}, partKey{"u", 0}
	id := [16]byte{1}
	ks := []partKey{a, b, c}
	stale := func(k partKey) { tc.watched[k] = time.Now().Add(-2 * tailWatch) }
	if got, _ := tc.begin(ks); got != nil {
		t.Fatalf("copies before any fetch: %v", got)
	}
	tc.finish(ks, nil)
	tc.watch([]partKey{a})
	tc.add(a, id, appended{base: 0}, copyBatch(tailRecords("a", 2), 0))
	stale(a)
	if got, _ := tc.begin(ks); got != nil || tc.covers(a, id, 0) || len(tc.inflight) != 0 {
		t.Fatalf("appends not copied: copies %v, cache kept %v, in flight %v", got, tc.covers(a, id, 0), tc.inflight)
	}
	tc.finish(ks, nil)

	tc.watch([]partKey{b, c})
	stale(c)
	copyOf, _ := tc.begin(ks)
	if got := fmt.Sprint(copyOf); got != "[false true false]" {
		t.Fatalf("copies after fetches at the end of t/1 (now) and u/0 (long ago): %s", got)
	}
	if fmt.Sprint(tc.inflight) != fmt.Sprint(map[partKey]int{b: 1}) {
		t.Fatalf("in flight: %v, want t/1 once", tc.inflight)
	}
	// t/1's mark expires while its copied append is in flight; the next append is not copied, and
	// finishing it leaves the first in flight.
	stale(b)
	later, _ := tc.begin([]partKey{b})
	tc.finish([]partKey{b}, later)
	if tc.inflight[b] != 1 {
		t.Fatalf("in flight after an append not copied finished: %v", tc.inflight)
	}
	// The first append, answered now, does not bring back the partition behind the second.
	tc.add(b, id, appended{base: 0}, copyBatch(tailRecords("b", 1), 0))
	tc.finish(ks, copyOf)
	if tc.covers(b, id, 0) || len(tc.inflight) != 0 {
		t.Fatalf("after the appends: cache kept %v, in flight %v", tc.covers(b, id, 0), tc.inflight)
	}
	if _, ok := tc.watched[c]; ok {
		t.Error("a stale mark was kept")
	}
	tc.watch([]partKey{a})
	tc.forget("t")
	if got, _ := tc.begin(ks); got != nil {
		t.Fatalf("copies after topic t was deleted: %v", got)
	}
	tc.finish(ks, nil)

	// Marks of partitions never appended to again go in a sweep once the marks double.
	tc.sweepAt = 4
	for p := range int32(3) {
		tc.watched[partKey{"gone", p}] = time.Now().Add(-2 * tailWatch)
	}
	tc.watch([]partKey{a})
	if len(tc.watched) != 1 || tc.sweepAt != 1024 {
		t.Fatalf("after a sweep: %d marks (want 1), next sweep at %d", len(tc.watched), tc.sweepAt)
	}

	var off *tailCache
	off.watch(ks)
	if got, _ := off.begin(ks); got != nil {
		t.Fatalf("copies without a cache: %v", got)
	}
	off.finish(ks, nil)
}

// TestTailCacheOwnAppend: a fetch may take offsets from the newest cached append only when that
// append began after the fetch arrived, and gets the append's own high watermark and log start.
func TestTailCacheOwnAppend(t *testing.T) {
	tc := newTailCache(1 << 20)
	k, id := partKey{"t", 0}, [16]byte{1}
	ks := []partKey{k}
	tc.watch(ks)
	before := tc.arrival()
	copyOf, t1 := tc.begin(ks)
	tc.add(k, id, appended{base: 0, start: 0, ticket: t1}, copyBatch(tailRecords("a", 3), 0))
	tc.finish(ks, copyOf)
	recs, offs, _, ok := tc.ownAppend(k, id, 0, before, -1, 0)
	if got := fmt.Sprint(values(recs)); !ok || got != "[0:a-0 1:a-1 2:a-2]" || offs != (redisstore.Offsets{Start: 0, End: 3}) {
		t.Fatalf("append begun after the fetch arrived: ok %v, %s, %+v", ok, got, offs)
	}
	after := tc.arrival()
	if _, _, _, ok := tc.ownAppend(k, id, 3, after, -1, 0); ok {
		t.Fatal("an append begun before the fetch arrived answered it")
	}
	// Begun before the fetch arrived, but based at the high watermark a read of the fetch found: Redis
	// ran it after that read. One the read already saw (based below it) does not answer.
	if recs, offs, _, ok := tc.ownAppend(k, id, 0, after, 0, 0); !ok || len(recs) != 3 || offs.End != 3 {
		t.Fatalf("append based at the high watermark the fetch read: ok %v, %d records, %+v", ok, len(recs), offs)
	}
	if _, _, _, ok := tc.ownAppend(k, id, 3, after, 3, 0); ok {
		t.Fatal("an append the fetch's read already saw answered it")
	}
	// Recorded before the read began, an append reaching past the high watermark the read found holds
	// records Redis no longer has (lost, or the topic deleted): it does not answer.
	if _, _, _, ok := tc.ownAppend(k, id, 0, after, 0, tc.now()); ok {
		t.Fatal("an append recorded before the fetch's read answered it")
	}
	// The next append saw a DeleteRecords (log start 2): its answer carries it.
	copyOf, t2 := tc.begin(ks)
	tc.add(k, id, appended{base: 3, start: 2, ticket: t2}, copyBatch(tailRecords("b", 2), 0))
	tc.finish(ks, copyOf)
	recs, offs, ticket, ok := tc.ownAppend(k, id, 3, after, -1, 0)
	if got := fmt.Sprint(values(recs)); !ok || got != "[3:b-0 4:b-1]" || offs != (redisstore.Offsets{Start: 2, End: 5}) || ticket != t2 {
		t.Fatalf("read at 3: ok %v, %s, %+v, ticket %d (want %d)", ok, got, offs, ticket, t2)
	}
	// A fetch that took this append and waits on must not be answered by it again.
	if _, _, _, ok := tc.ownAppend(k, id, 5, ticket, -1, 0); ok {
		t.Fatal("the same append answered a fetch twice")
	}
	if recs, offs, _, ok = tc.ownAppend(k, id, 1, after, -1, 0); !ok || recs != nil || offs.Start != 2 {
		t.Fatalf("read below the log start: ok %v, %v, %+v; want the offsets alone", ok, values(recs), offs)
	}
	for _, c := range []struct {
		id   [16]byte
		from int64
	}{{[16]byte{2}, 3}, {id, 6}} {
		if _, _, _, ok := tc.ownAppend(k, c.id, c.from, after, -1, 0); ok {
			t.Errorf("ownAppend %x from %d answered", c.id, c.from)
		}
	}
	// Another gateway appended in between: the cache starts over at this gateway's next append and
	// cannot answer from before it.
	copyOf, t3 := tc.begin(ks)
	tc.add(k, id, appended{base: 7, start: 2, ticket: t3}, copyBatch(tailRecords("c", 1), 0))
	tc.finish(ks, copyOf)
	if _, _, _, ok := tc.ownAppend(k, id, 5, after, -1, 0); ok {
		t.Fatal("answered across another gateway's append")
	}
	if recs, offs, _, ok := tc.ownAppend(k, id, 7, after, -1, 0); !ok || fmt.Sprint(values(recs)) != "[7:c-0]" || offs.End != 8 {
		t.Fatalf("read at 7: ok %v, %v, %+v", ok, values(recs), offs)
	}
}

// TestAwaitCachedBoundOverall: a fetch whose partitions all wait for appends in flight that never
// answer gives up after tailWait in all, not tailWait per partition.
func TestAwaitCachedBoundOverall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tc := newTailCache(1 << 20)
		id := [16]byte{1}
		var parts []fetchPart
		var results []redisstore.ReadResult
		var cached []int
		for p := range int32(8) {
			k := partKey{"t", p}
			tc.watch([]partKey{k})
			tc.add(k, id, appended{base: 0}, copyBatch(tailRecords("a", 2), 0))
			tc.begin([]partKey{k}) // in flight, never finished
			parts = append(parts, fetchPart{key: k, topicID: id, offset: 1})
			results = append(results, redisstore.ReadResult{Offsets: redisstore.Offsets{Start: 0, End: 5}})
			cached = append(cached, int(p))
		}
		start := time.Now()
		missed := awaitCached(t.Context(), tc, parts, results, cached, tc.now())
		if waited := time.Since(start); waited != tailWait || len(missed) != len(parts) {
			t.Fatalf("missed %v after %v, want all %d after %v", missed, waited, len(parts), tailWait)
		}
	})
}
