package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/internal/redistest"
	"github.com/kgate/kgate/protocol"
	"github.com/kgate/kgate/redisstore"
)

func storeRecords(offsets ...int64) []redisstore.Record {
	out := make([]redisstore.Record, len(offsets))
	for i, o := range offsets {
		out[i] = redisstore.Record{Offset: o, Timestamp: 1000 + o, Key: []byte{byte(o)}, Value: bytes.Repeat([]byte{'v'}, 10)}
	}
	return out
}

// TestEncodeRecordsSplitsAtGaps: entries deleted natively leave gaps; each contiguous run becomes its
// own batch so every record keeps its offset.
func TestEncodeRecordsSplitsAtGaps(t *testing.T) {
	buf, n, _ := encodeRecords(nil, storeRecords(3, 4, 7, 8, 9), 3, 1<<20, true, false)
	if n != 5 {
		t.Fatalf("encoded %d records, want 5", n)
	}
	batches, err := protocol.DecodeBatches(buf, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if len(batches) != 2 || batches[0].BaseOffset != 3 || len(batches[0].Records) != 2 ||
		batches[1].BaseOffset != 7 || len(batches[1].Records) != 3 {
		t.Fatalf("batches %+v", batches)
	}
	if batches[1].Records[2].Timestamp != 1009 {
		t.Fatalf("timestamp %d", batches[1].Records[2].Timestamp)
	}
}

// TestPickRecordsSizesExactly: a response is sized before it is encoded (the budget of the partitions
// after it, min_bytes), so the size pickRecords states must be what encodeRecordPick writes, for
// records of every shape: nil and empty keys and values, headers, gaps that split batches, append
// times that split LogAppendTime batches, and timestamp deltas from negative to huge. It takes as many
// records as fit the limit, every batch's header counted, and goes past it only for a response's
// first record.
func TestPickRecordsSizesExactly(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	bytesOf := func() []byte {
		switch rng.IntN(4) {
		case 0:
			return nil
		case 1:
			return []byte{}
		default:
			return bytes.Repeat([]byte{'x'}, rng.IntN(300))
		}
	}
	for trial := range 300 {
		recs := make([]redisstore.Record, 1+rng.IntN(60))
		offset, ts := int64(rng.IntN(1000)), int64(rng.IntN(1<<20))
		for i := range recs {
			offset += 1 + int64(rng.IntN(2)*rng.IntN(3)) // gaps now and then
			switch rng.IntN(5) {
			case 0:
				ts += int64(rng.Int64N(1 << 40))
			case 1:
				ts -= int64(rng.IntN(1 << 16))
			case 2: // the same append time: a LogAppendTime batch goes on
			default:
				ts += int64(rng.IntN(100))
			}
			r := redisstore.Record{Offset: offset, Timestamp: ts, Key: bytesOf(), Value: bytesOf()}
			for range rng.IntN(3) {
				r.Headers = append(r.Headers, redisstore.Header{Key: string(bytesOf()), Value: bytesOf()})
			}
			recs[i] = r
		}
		from := recs[rng.IntN(len(recs))].Offset
		limit := rng.IntN(20000)
		logAppend := rng.IntN(2) == 0
		first := trial%2 == 0
		pk := pickRecords(recs, from, limit, first, logAppend)
		out := encodeRecordPick(nil, recs[pk.from:pk.from+pk.n], logAppend)
		if len(out) != pk.encoded {
			t.Fatalf("trial %d: pickRecords said %d bytes for %d records, encodeRecordPick wrote %d", trial, pk.encoded, pk.n, len(out))
		}
		// Within the limit (batch headers counted), the first record of a response excepted, and
		// taking as many records as fit.
		if len(out) > limit && !(first && pk.n == 1) {
			t.Fatalf("trial %d: %d records in %d bytes, limit %d", trial, pk.n, len(out), limit)
		}
		if end := pk.from + pk.n; end < len(recs) {
			if more := encodeRecordPick(nil, recs[pk.from:end+1], logAppend); len(more) <= limit {
				t.Fatalf("trial %d: stopped at %d records (%d bytes) where %d fit in %d bytes of %d", trial, pk.n, len(out), pk.n+1, len(more), limit)
			}
		}
		batches, err := protocol.DecodeBatches(out, 1<<30)
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		got := 0
		for _, b := range batches {
			for j := range b.Records {
				want := recs[pk.from+got]
				if o := b.BaseOffset + int64(b.Records[j].OffsetDelta); o != want.Offset {
					t.Fatalf("trial %d: record %d at offset %d, want %d", trial, got, o, want.Offset)
				}
				got++
			}
		}
		if got != pk.n || (pk.n > 0 && recs[pk.from].Offset < from) || (pk.from > 0 && recs[pk.from-1].Offset >= from) {
			t.Fatalf("trial %d: %d records decoded from %d picked at index %d (from offset %d)", trial, got, pk.n, pk.from, from)
		}
	}
}

// TestEncodeRecordsLimits: the byte limit stops the batch, records below the fetch offset are
// skipped, and the first record of a response is returned even when it alone exceeds the limit.
func TestEncodeRecordsLimits(t *testing.T) {
	recs := storeRecords(0, 1, 2, 3, 4, 5, 6, 7, 8, 9)
	_, n, _ := encodeRecords(nil, recs, 5, 1<<20, true, false)
	if n != 5 {
		t.Fatalf("from offset 5: %d records, want 5", n)
	}
	_, n, _ = encodeRecords(nil, recs, 0, 1, true, false)
	if n != 1 {
		t.Fatalf("first record of the response not forced: %d", n)
	}
	_, n, _ = encodeRecords(nil, recs, 0, 1, false, false)
	if n != 0 {
		t.Fatalf("limit ignored after the first partition: %d", n)
	}
	all, n, _ := encodeRecords(nil, recs, 0, 1<<20, true, false)
	if n != 10 {
		t.Fatalf("no limit: %d records", n)
	}
	part, n, _ := encodeRecords(nil, recs, 0, len(all)-1, true, false)
	if n != 9 || len(part) > len(all)-1 {
		t.Fatalf("a byte short of all 10 records (%d bytes): took %d in %d bytes", len(all), n, len(part))
	}
}

// TestAppendNotifier: a registered waiter is signalled by an append to any of its partitions and not by
// others; unregistering leaves nothing behind.
func TestAppendNotifier(t *testing.T) {
	n := newAppendNotifier()
	keys := []partKey{{"a", 0}, {"b", 1}}
	w := n.register(keys)
	n.notify(partKey{"a", 1})
	select {
	case <-w.ch:
		t.Fatal("woken by another partition")
	default:
	}
	n.notify(partKey{"b", 1})
	n.notify(partKey{"b", 1}) // a second signal must not block
	select {
	case <-w.ch:
	default:
		t.Fatal("not woken by its partition")
	}
	n.unregister(w, keys)
	if len(n.waiters) != 0 {
		t.Fatal("waiter left registered")
	}
}

// TestWantReadAhead: after three unused read-aheads in a row a connection reads ahead once in 16
// chances, and fully again after one is used.
func TestWantReadAhead(t *testing.T) {
	c := &conn{}
	for i := range readAheadMaxMisses {
		if !c.wantReadAhead() {
			t.Fatalf("chance %d refused before any miss limit", i)
		}
		c.aheadMisses++
	}
	tries := 0
	for range 4 * readAheadRetry {
		if c.wantReadAhead() {
			tries++
		}
	}
	if tries != 4 {
		t.Fatalf("%d read-aheads in %d chances after %d misses, want 4", tries, 4*readAheadRetry, readAheadMaxMisses)
	}
	c.aheadMisses = 0 // one was used
	if !c.wantReadAhead() {
		t.Fatal("read-ahead still refused after one was used")
	}
}

// TestSizingForgottenWithTopic: the fetch sizing of a topic's partitions goes when the topic cache
// finds the topic deleted or created again (through any gateway), so it does not grow with every
// topic ever read.
func TestSizingForgottenWithTopic(t *testing.T) {
	ctx := t.Context()
	store, err := redisstore.Open(ctx, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, name := range []string{"gone", "again", "kept"} {
		if err := store.CreateTopic(ctx, redisstore.Topic{Name: name, ID: [16]byte{name[0]}, Partitions: 2}); err != nil {
			t.Fatal(err)
		}
	}
	cache := newTopicCache(store, zerolog.Nop())
	if _, err := cache.all(ctx); err != nil {
		t.Fatal(err)
	}
	has := func(topic string) bool {
		recordSizes.RLock()
		defer recordSizes.RUnlock()
		_, ok := recordSizes.m[partKey{topic, 1}]
		return ok
	}
	for _, name := range []string{"gone", "again", "kept"} {
		sizingOf(partKey{name, 1}).end.Store(7)
	}
	if err := store.DeleteTopic(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if err := store.DeleteTopic(ctx, "again"); err != nil {
		t.Fatal(err)
	}
	if err := store.CreateTopic(ctx, redisstore.Topic{Name: "again", ID: [16]byte{'A'}, Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := cache.all(ctx); err != nil {
		t.Fatal(err)
	}
	if has("gone") || has("again") || !has("kept") {
		t.Fatalf("sizing kept: gone %v, again %v, kept %v; want false, false, true", has("gone"), has("again"), has("kept"))
	}
	forgetSizing("kept")
}

// redisGateway is embeddedGateway over a redis-server of its own (stopped at cleanup), for what the
// embedded store does not behave like Redis in. Skipped with KGATE_SKIP_REDIS=1; a missing
// redis-server fails the test, as in redisstore.
func redisGateway(t *testing.T, cfg Config) (context.Context, *Gateway, *redisstore.Store) {
	t.Helper()
	srv := redisServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	store, err := redisstore.Open(ctx, redisstore.Options{Addrs: []string{srv.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return ctx, New(cfg, store, zerolog.Nop()), store
}

// redisServer starts a redis-server of the test's own, stopped at cleanup. Skipped with
// KGATE_SKIP_REDIS=1; a missing redis-server fails the test, as in redisstore.
func redisServer(t *testing.T) *redistest.Server {
	t.Helper()
	if os.Getenv("KGATE_SKIP_REDIS") == "1" {
		t.Skip("KGATE_SKIP_REDIS=1")
	}
	if !redistest.Available() {
		t.Fatal("redis-server is not on PATH; install it or set KGATE_SKIP_REDIS=1")
	}
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

// fetchConn is a connection of g for calling its fetch directly (responses are not written); its
// read-ahead is stopped when t ends.
func fetchConn(t *testing.T, g *Gateway) *conn {
	c := &conn{g: g, nc: discardConn{}, log: zerolog.Nop()}
	t.Cleanup(c.closeReadAhead)
	return c
}

// fetchRequest is a v12 fetch of one partition that does not wait.
func fetchRequest(topic string, partition int32, offset int64, partitionMaxBytes, maxBytes int32) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.MinBytes, req.MaxBytes = 12, 1, maxBytes
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = partition, offset, partitionMaxBytes
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

// fetchAlso adds partition at offset to req's first topic, with the limit of its first partition.
func fetchAlso(req *kmsg.FetchRequest, partition int32, offset int64) {
	rp := req.Topics[0].Partitions[0]
	rp.Partition, rp.FetchOffset = partition, offset
	req.Topics[0].Partitions = append(req.Topics[0].Partitions, rp)
}

// fetchOne runs req on c and returns its first partition's answer.
func fetchOne(t *testing.T, ctx context.Context, c *conn, req *kmsg.FetchRequest) kmsg.FetchResponseTopicPartition {
	t.Helper()
	resp, err := c.fetch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return resp.(*kmsg.FetchResponse).Topics[0].Partitions[0]
}

// TestFetchOffsetPastAnyEntry: a fetch from an offset near math.MaxInt64 gets OFFSET_OUT_OF_RANGE and
// the partition's offsets, as from Apache, not the retriable error of a failed read (the entry ID of
// such an offset overflowed and Redis refused it).
func TestFetchOffsetPastAnyEntry(t *testing.T) {
	ctx, g, store := redisGateway(t, Config{})
	t.Cleanup(func() { forgetSizing("far") })
	if err := store.CreateTopic(ctx, redisstore.Topic{Name: "far", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	recs := []redisstore.Record{{Value: []byte("a")}, {Value: []byte("b")}, {Value: []byte("c")}}
	if res := store.Append(ctx, []*redisstore.Batch{{Topic: "far", Partition: 0, Records: recs, ProducerID: -1}}); res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
	c := fetchConn(t, g)
	// (Reads split by offset near math.MaxInt64 are redisstore's TestReadNearMaxOffset.)
	for _, offset := range []int64{math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64 - 5000} {
		sp := fetchOne(t, ctx, c, fetchRequest("far", 0, offset, 1<<20, 1<<20))
		if sp.ErrorCode != kerr.OffsetOutOfRange.Code || sp.HighWatermark != 3 || len(sp.RecordBatches) != 0 {
			t.Errorf("fetch @%d: error %d, high watermark %d, %d record bytes; want OFFSET_OUT_OF_RANGE (%d), 3, none",
				offset, sp.ErrorCode, sp.HighWatermark, len(sp.RecordBatches), kerr.OffsetOutOfRange.Code)
		}
	}
}

// watchedTopic creates a one-partition topic with the given ID and has a fetch read its partition to
// the end, so the tail cache copies appends to it; it returns the topic as the gateway sees it.
func watchedTopic(t *testing.T, ctx context.Context, g *Gateway, store *redisstore.Store, name string, id [16]byte) redisstore.Topic {
	t.Helper()
	t.Cleanup(func() { forgetSizing(name) })
	if err := store.CreateTopic(ctx, redisstore.Topic{Name: name, ID: id, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	topic, err := g.topics.get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if sp := fetchOne(t, ctx, fetchConn(t, g), fetchRequest(name, 0, 0, 1<<20, 1<<20)); sp.ErrorCode != 0 {
		t.Fatalf("first fetch: error %d", sp.ErrorCode)
	}
	return topic
}

// beginOwnAppend begins an append of this gateway's to partition k of topic id, as produce does: the
// tail cache registers it and copies recs. The returned function records it as Redis answered it
// (base offset, log start) and releases the registration.
func beginOwnAppend(g *Gateway, k partKey, id [16]byte, recs []redisstore.Record) (done func(base, start int64)) {
	copyOf, ticket := g.tail.begin([]partKey{k})
	cp := copyBatch(recs, 0)
	return func(base, start int64) {
		g.tail.add(k, id, appended{base: base, start: start, ticket: ticket}, cp)
		g.tail.finish([]partKey{k}, copyOf)
	}
}

// longPoll starts a fetch of partition 0 of topic from offset 0 that waits up to 15 s for minBytes,
// and returns where its answer comes; the fetch ends with the test.
func longPoll(t *testing.T, ctx context.Context, g *Gateway, topic string, minBytes int32) <-chan kmsg.FetchResponseTopicPartition {
	fctx, cancel := context.WithCancel(ctx)
	answered := make(chan kmsg.FetchResponseTopicPartition, 1)
	done := make(chan struct{})
	c := fetchConn(t, g)
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		req := fetchRequest(topic, 0, 0, 1<<20, 1<<20)
		req.MinBytes, req.MaxWaitMillis = minBytes, 15000
		resp, err := c.fetch(fctx, req)
		if err == nil {
			answered <- resp.(*kmsg.FetchResponse).Topics[0].Partitions[0]
		}
	}()
	return answered
}

// TestFetchOwnAppendThenOtherGateway: a long-poll woken once for two appends, this gateway's own and
// then another gateway's (their signals merge in the waiter's one-slot channel), is answered with
// both as soon as they are in, not at max_wait: its own append alone, below min_bytes, only shows the
// partition as of that append, so the fetch reads Redis before it waits again.
func TestFetchOwnAppendThenOtherGateway(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{})
	const topicName = "merged-wake"
	topic := watchedTopic(t, ctx, g, store, topicName, [16]byte{'m'})
	k := partKey{topicName, 0}
	// Each record alone is below min_bytes, the two together are above it.
	batch := func() *redisstore.Batch {
		return &redisstore.Batch{Topic: topicName, Partition: 0, ProducerID: -1,
			Records: []redisstore.Record{{Timestamp: 1, Value: bytes.Repeat([]byte{'v'}, 200)}}}
	}
	answered := longPoll(t, ctx, g, topicName, 300)
	// The appends come once the fetch waits (its arrival taken and its first read done).
	waitFor(t, 10*time.Second, "the fetch to long-poll", fetchWaiting)

	// This gateway's append, as produce makes it, but without its wake-up ...
	a := batch()
	done := beginOwnAppend(g, k, topic.ID, a.Records)
	ra := store.Append(ctx, []*redisstore.Batch{a})[0]
	if ra.Err != nil {
		t.Fatal(ra.Err)
	}
	done(ra.BaseOffset, ra.LogStartOffset)
	// ... then another gateway's, and one wake-up for both.
	if rb := store.Append(ctx, []*redisstore.Batch{batch()})[0]; rb.Err != nil {
		t.Fatal(rb.Err)
	}
	g.notify.notify(k)

	// Answered at once when fixed; a missed wake-up waits out max_wait (15 s).
	select {
	case sp := <-answered:
		if sp.ErrorCode != 0 || sp.HighWatermark != 2 || countRecords(sp.RecordBatches) != 2 {
			t.Fatalf("answer: error %d, high watermark %d, %d records; want 0, 2, 2", sp.ErrorCode, sp.HighWatermark, countRecords(sp.RecordBatches))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("fetch still waiting 10 s after both appends: the wake-up was missed")
	}
}

// TestFetchAnsweredByAppendInFlight: a consumer keeping up sends its next fetch while this gateway's
// append to the partition is already on its way to Redis (begun before the fetch arrived). Redis runs
// that append after the fetch's first read, so the append's own answer is the partition's state
// within the fetch: the fetch is answered from it, without a second Redis read that would wait
// behind the next append. The proof: another gateway's append lands before the wake-up, and the
// answer does not include it (a Redis read would have).
func TestFetchAnsweredByAppendInFlight(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{})
	const topicName = "in-flight-wake"
	topic := watchedTopic(t, ctx, g, store, topicName, [16]byte{'i'})
	k := partKey{topicName, 0}
	batch := func() *redisstore.Batch {
		return &redisstore.Batch{Topic: topicName, Partition: 0, ProducerID: -1,
			Records: []redisstore.Record{{Timestamp: 1, Value: []byte("v")}}}
	}
	// This gateway's append begins before the fetch arrives ...
	a := batch()
	done := beginOwnAppend(g, k, topic.ID, a.Records)
	answered := longPoll(t, ctx, g, topicName, 1)
	waitFor(t, 10*time.Second, "the fetch to long-poll", fetchWaiting)

	// ... and reaches Redis after the fetch's first read; another gateway appends after it.
	ra := store.Append(ctx, []*redisstore.Batch{a})[0]
	if ra.Err != nil {
		t.Fatal(ra.Err)
	}
	if rb := store.Append(ctx, []*redisstore.Batch{batch()})[0]; rb.Err != nil {
		t.Fatal(rb.Err)
	}
	done(ra.BaseOffset, ra.LogStartOffset)
	g.notify.notify(k)

	select {
	case sp := <-answered:
		if sp.ErrorCode != 0 || sp.HighWatermark != 1 || countRecords(sp.RecordBatches) != 1 {
			t.Fatalf("answer: error %d, high watermark %d, %d records; want 0, 1, 1 (the in-flight append's own state, no Redis read)",
				sp.ErrorCode, sp.HighWatermark, countRecords(sp.RecordBatches))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("fetch not answered 10 s after the appends")
	}
}

// TestFetchLostAppendNotServed: the tail cache holds an own append Redis no longer has (acknowledged,
// then lost in a failover: the high watermark went back below it). A fetch whose read found the lower
// high watermark must not be answered from that append, although it is based at that watermark: it
// was recorded before the read, so nothing says Redis ran it after. Here the read is the read-ahead's
// fresh offsets, a path that does not drop a cache reaching past the high watermark.
func TestFetchLostAppendNotServed(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{})
	const topicName = "lost-append"
	topic := watchedTopic(t, ctx, g, store, topicName, [16]byte{'l'})
	k := partKey{topicName, 0}
	records := func(n int) []redisstore.Record {
		recs := make([]redisstore.Record, n)
		for i := range recs {
			recs[i] = redisstore.Record{Timestamp: 1, Value: bytes.Repeat([]byte{'v'}, 100)}
		}
		return recs
	}
	// Offsets 0-2, stored and cached.
	b := &redisstore.Batch{Topic: topicName, Partition: 0, ProducerID: -1, Records: records(3)}
	done := beginOwnAppend(g, k, topic.ID, b.Records)
	r := store.Append(ctx, []*redisstore.Batch{b})[0]
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	done(r.BaseOffset, r.LogStartOffset)

	// A one-record answer leaves records behind: the connection reads ahead from offset 1.
	c := fetchConn(t, g)
	if sp := fetchOne(t, ctx, c, fetchRequest(topicName, 0, 0, 1, 1<<20)); countRecords(sp.RecordBatches) != 1 {
		t.Fatalf("first read: %d records, want 1", countRecords(sp.RecordBatches))
	}
	// Offsets 3-7, cached but not in Redis (lost after they were acknowledged).
	beginOwnAppend(g, k, topic.ID, records(5))(3, 0)

	req := fetchRequest(topicName, 0, 1, 1<<20, 1<<20)
	req.MinBytes, req.MaxWaitMillis = 400, 200
	sp := fetchOne(t, ctx, c, req)
	if sp.ErrorCode != 0 || sp.HighWatermark != 3 || countRecords(sp.RecordBatches) != 2 {
		t.Fatalf("answer: error %d, high watermark %d, %d records; want 0, 3, 2 (what Redis holds)",
			sp.ErrorCode, sp.HighWatermark, countRecords(sp.RecordBatches))
	}
}

// fetchWaiting reports whether some goroutine is blocked in fetch's own select (long-polling), not in
// a read.
func fetchWaiting() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		lines := bytes.SplitN(g, []byte("\n"), 3)
		if len(lines) >= 2 && bytes.Contains(lines[0], []byte("[select")) &&
			bytes.HasPrefix(lines[1], []byte("github.com/kgate/kgate/gateway.(*conn).fetch(")) {
			return true
		}
	}
	return false
}

// appendValues appends n records of valueSize-byte values (and 8-byte keys) to a partition.
func appendValues(t *testing.T, ctx context.Context, store *redisstore.Store, topic string, partition int32, n, valueSize int) {
	t.Helper()
	value := bytes.Repeat([]byte{'v'}, valueSize)
	for done := 0; done < n; done += 1000 {
		b := &redisstore.Batch{Topic: topic, Partition: partition, ProducerID: -1}
		for i := range min(1000, n-done) {
			b.Records = append(b.Records, redisstore.Record{Timestamp: 1, Key: fmt.Appendf(nil, "k%07d", done+i), Value: value})
		}
		if res := store.Append(ctx, []*redisstore.Batch{b}); res[0].Err != nil {
			t.Fatal(res[0].Err)
		}
	}
}

// sizingPart is partition p of topic as a fetch from offset 0 with a partition limit of maxBytes
// plans it, its sizing forgotten when t ends (the sizing is the process's, not the gateway's).
func sizingPart(t *testing.T, topic string, p int32, maxBytes int32) fetchPart {
	t.Cleanup(func() { forgetSizing(topic) })
	key := partKey{topic, p}
	return fetchPart{key: key, maxBytes: maxBytes, sizing: sizingOf(key)}
}

// TestFetchFirstReadBounded: the first read of a partition whose records are large (32 KiB) asks Redis
// for about the partition limit (1 MiB), not for as many entries as 1 KiB records would need (1,025,
// 32 MiB); once its records are seen, a partition of 100-byte records is read 8,193 entries at a time
// (1 MiB of them, as encodeRecords counts their size).
func TestFetchFirstReadBounded(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{})
	const large, small = "first-read-large", "first-read-small"
	for _, name := range []string{large, small} {
		if err := store.CreateTopic(ctx, redisstore.Topic{Name: name, Partitions: 1}); err != nil {
			t.Fatal(err)
		}
	}
	appendValues(t, ctx, store, large, 0, 200, 32<<10)
	parts := []fetchPart{sizingPart(t, large, 0, 1<<20)}
	res := store.Read(ctx, planReads(parts, 55<<20, false))[0]
	read := 0
	for _, r := range res.Records {
		read += len(r.Value)
	}
	if res.Err != nil || len(res.Records) == 0 || read > 1<<20+32<<10 {
		t.Fatalf("first read of 32 KiB records with a 1 MiB limit: %v, %d records, %d bytes; want at most 1 MiB and one record", res.Err, len(res.Records), read)
	}

	appendValues(t, ctx, store, small, 0, 20000, 100)
	parts = []fetchPart{sizingPart(t, small, 0, 1<<20)}
	c := fetchConn(t, g)
	want := int64(1<<20/(20+8+100) + 1)
	for i := range 3 {
		sp := fetchOne(t, ctx, c, fetchRequest(small, 0, parts[0].offset, 1<<20, 50<<20))
		n := countRecords(sp.RecordBatches)
		if sp.ErrorCode != 0 || n == 0 {
			t.Fatalf("fetch %d of 100-byte records: error %d, %d records", i, sp.ErrorCode, n)
		}
		parts[0].offset += int64(n)
		if got := planReads(parts, 50<<20, false)[0].Count; got != want {
			t.Fatalf("after fetch %d (%d records) of 100-byte records: read count %d, want %d", i, n, got, want)
		}
	}
}

// TestSizingFollowsLargestRecent: a partition's read count comes from the largest records seen lately:
// a read of larger records lowers it at once, smaller ones raise it back over a few reads, never
// above what fits the limit.
func TestSizingFollowsLargestRecent(t *testing.T) {
	ps := &partSizing{}
	ps.end.Store(-1)
	const limit = 1 << 20
	if got := ps.count(limit); got != unseenReadCount {
		t.Fatalf("never read: count %d, want %d", got, unseenReadCount)
	}
	if got := ps.count(10); got != 1 {
		t.Fatalf("never read, limit 10 bytes: count %d, want 1", got)
	}
	small, large := int64(128), int64(32<<10)
	ps.observe(8000, int(8000*small), 8000*120, 8000)
	if got, want := ps.count(limit), limit/small+1; got != want {
		t.Fatalf("after 128-byte records: count %d, want %d", got, want)
	}
	ps.observe(32, int(32*large), 32*int(large), 8032)
	if got, want := ps.count(limit), limit/large+1; got != want {
		t.Fatalf("after 32 KiB records: count %d, want %d", got, want)
	}
	ps.observe(8000, int(8000*small), 8000*120, 16032)
	if got := ps.count(limit); got > 2*(limit/large+1) {
		t.Fatalf("one read of small records after large ones: count %d, want at most %d", got, 2*(limit/large+1))
	}
	for range 15 {
		ps.observe(8000, int(8000*small), 8000*120, 16032)
	}
	if got, want := ps.count(limit), limit/small+1; got != want {
		t.Fatalf("after 16 reads of small records: count %d, want %d", got, want)
	}
}

// TestPlanReadsBudget: the response's max_bytes is shared in request order by partitions never read
// too (counted as large records), and with max_bytes 0 the first partition expecting records is
// still read for one (KIP-74), one caught up before it taking nothing.
func TestPlanReadsBudget(t *testing.T) {
	parts := []fetchPart{sizingPart(t, "budget", 0, 1<<20), sizingPart(t, "budget", 1, 1<<20), sizingPart(t, "budget", 2, 1<<20)}
	counts := func(maxBytes int32) []int64 {
		var out []int64
		for _, r := range planReads(parts, maxBytes, false) {
			out = append(out, r.Count)
		}
		return out
	}
	if got := counts(1 << 20); fmt.Sprint(got) != fmt.Sprint([]int64{unseenReadCount, 0, 0}) {
		t.Fatalf("three partitions never read, 1 MiB response: counts %v, want [%d 0 0]", got, unseenReadCount)
	}
	if got := counts(0); fmt.Sprint(got) != "[1 0 0]" {
		t.Fatalf("max_bytes 0: counts %v, want [1 0 0]", got)
	}
	parts[0].sizing.observe(1, 128, 120, 0) // caught up: offset 0 is its high watermark
	if got := counts(0); fmt.Sprint(got) != "[1 1 0]" {
		t.Fatalf("max_bytes 0, the first partition caught up: counts %v, want [1 1 0]", got)
	}
}

// TestPlanReadsCaughtUpShare: partitions caught up at their last read take nothing from the budget, but
// each reads at most an equal share of max_bytes: a consumer back from a pause, whose hundred partitions
// all got records meanwhile, read each partition's limit from Redis (about a hundred times max_bytes),
// and so did a fetch listing one caught-up partition a hundred times.
func TestPlanReadsCaughtUpShare(t *testing.T) {
	var parts []fetchPart
	for p := range int32(100) {
		fp := sizingPart(t, "caught-up", p, 1<<20)
		fp.sizing.observe(10, 10*1000, 10*1000, 0) // 1,000-byte records; offset 0 was the high watermark
		parts = append(parts, fp)
	}
	const maxBytes = 1 << 20
	planned := func(parts []fetchPart) int64 {
		var n int64
		for _, r := range planReads(parts, maxBytes, false) {
			n += r.Count * 1000
		}
		return n
	}
	if n := planned(parts); n > 2*maxBytes {
		t.Fatalf("100 caught-up partitions plan %d bytes of reads for a %d-byte response", n, maxBytes)
	}
	same := make([]fetchPart, 100)
	for i := range same {
		same[i] = parts[0]
	}
	if n := planned(same); n > 2*maxBytes {
		t.Fatalf("one caught-up partition listed 100 times plans %d bytes of reads for a %d-byte response", n, maxBytes)
	}
	// Alone, a caught-up partition may still read up to its limit.
	if r := planReads(parts[:1], maxBytes, false)[0]; r.Count < (1<<20)/1000 {
		t.Fatalf("one caught-up partition reads %d entries, want its limit's worth", r.Count)
	}
}

// TestFetchManyCaughtUpPartitionsBounded: a fetch whose partitions were all caught up at their last
// read, and each got a record larger than its equal share of max_bytes meanwhile (here 300 partitions,
// a 64 KiB record each, a 1 MiB response), reads about max_bytes of them from Redis, not one record of
// every partition: at one record each it read 19 MB for a 1 MiB answer, and with thousands of
// partitions of 1 MB records a single fetch held gigabytes. The partitions left unread come with the
// next fetches.
func TestFetchManyCaughtUpPartitionsBounded(t *testing.T) {
	ctx, g, store := redisGateway(t, Config{})
	const name, partitions, valueSize = "caught-up-many", 300, 64 << 10
	createTopic(t, store, name, partitions)
	t.Cleanup(func() { forgetSizing(name) })
	c := fetchConn(t, g)
	fetchAll := func(offset int64, maxBytes int32) *kmsg.FetchResponse {
		t.Helper()
		req := fetchRequest(name, 0, offset, 1<<20, maxBytes)
		for p := int32(1); p < partitions; p++ {
			fetchAlso(req, p, offset)
		}
		resp, err := c.fetch(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.(*kmsg.FetchResponse)
	}
	records := func(resp *kmsg.FetchResponse) (n int) {
		for _, sp := range resp.Topics[0].Partitions {
			if sp.ErrorCode != 0 {
				t.Fatalf("partition %d: error %d", sp.Partition, sp.ErrorCode)
			}
			n += countRecords(sp.RecordBatches)
		}
		return n
	}
	for p := range int32(partitions) {
		appendValues(t, ctx, store, name, p, 1, valueSize)
	}
	// Every partition read (its record size seen) and caught up at offset 1.
	for p := range int32(partitions) {
		if sp := fetchOne(t, ctx, c, fetchRequest(name, p, 0, 1<<20, 1<<20)); sp.ErrorCode != 0 || countRecords(sp.RecordBatches) != 1 {
			t.Fatalf("partition %d: error %d, %d records; want its record", p, sp.ErrorCode, countRecords(sp.RecordBatches))
		}
	}
	for p := range int32(partitions) {
		appendValues(t, ctx, store, name, p, 1, valueSize)
	}
	sent := func() int64 {
		t.Helper()
		n, err := strconv.ParseInt(redisInfo(ctx, store, "stats", "total_net_output_bytes:"), 10, 64)
		if err != nil {
			t.Fatal("no total_net_output_bytes in INFO stats")
		}
		return n
	}
	before := sent()
	n := records(fetchAll(1, 1<<20))
	c.closeReadAhead() // waits for the read-ahead the fetch started, counted too
	if n == 0 || n > (1<<20)/valueSize+1 {
		t.Fatalf("1 MiB fetch at the tails: %d records of 64 KiB, want 1 to %d", n, (1<<20)/valueSize+1)
	}
	got, most := sent()-before, int64(6<<20)
	t.Logf("Redis sent %d bytes", got)
	if got > most {
		t.Fatalf("Redis sent %d bytes for one 1 MiB fetch of %d caught-up partitions, want at most %d", got, partitions, most)
	}
	// The rest come with the next fetches, each from where the partition's last response ended.
	offsets := make([]int64, partitions)
	left := partitions
	for fetches := 0; left > 0; fetches++ {
		if fetches == 2*partitions/((1<<20)/valueSize) {
			t.Fatalf("%d partitions still without their new record after %d fetches", left, fetches)
		}
		req := fetchRequest(name, 0, 1+offsets[0], 1<<20, 1<<20)
		for p := int32(1); p < partitions; p++ {
			fetchAlso(req, p, 1+offsets[p])
		}
		resp, err := c.fetch(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		for _, sp := range resp.(*kmsg.FetchResponse).Topics[0].Partitions {
			if n := countRecords(sp.RecordBatches); n > 0 && offsets[sp.Partition] == 0 {
				offsets[sp.Partition] = int64(n)
				left--
			}
		}
	}
}

// TestFetchMaxBytes: max_bytes is capped as by Apache's fetch.max.bytes (the gateway's, 8 MiB by
// default), and a max_bytes of 0 returns the first record alone (KIP-74) instead of every record;
// min_bytes is capped at max_bytes.
func TestFetchMaxBytes(t *testing.T) {
	for _, tc := range []struct{ max, min, capBytes, wantMax, wantMin int32 }{
		{math.MaxInt32, 1, 55 << 20, 55 << 20, 1}, // Apache's fetch.max.bytes default, configured
		{50 << 20, 1, 55 << 20, 50 << 20, 1},
		{50 << 20, 1, 8 << 20, 8 << 20, 1},
		{0, 1, 8 << 20, 0, 0},
		{-1, 1, 8 << 20, 0, 0},
		{1 << 20, 2 << 20, 8 << 20, 1 << 20, 1 << 20},
		{16 << 20, 10 << 20, 8 << 20, 8 << 20, 8 << 20},
	} {
		req := kmsg.NewPtrFetchRequest()
		req.MaxBytes, req.MinBytes = tc.max, tc.min
		if gotMax, gotMin := responseLimits(req, tc.capBytes); gotMax != tc.wantMax || gotMin != tc.wantMin {
			t.Errorf("max_bytes %d, min_bytes %d, fetch.max.bytes %d: limits %d, %d; want %d, %d", tc.max, tc.min, tc.capBytes, gotMax, gotMin, tc.wantMax, tc.wantMin)
		}
	}

	ctx, g, store := embeddedGateway(t, Config{})
	if g.cfg.FetchMaxBytes != 8<<20 {
		t.Fatalf("fetch.max.bytes %d by default, want 8 MiB", g.cfg.FetchMaxBytes)
	}
	const name = "max-bytes-zero"
	t.Cleanup(func() { forgetSizing(name) })
	if err := store.CreateTopic(ctx, redisstore.Topic{Name: name, Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	appendValues(t, ctx, store, name, 0, 5, 100)
	appendValues(t, ctx, store, name, 1, 5, 100)
	req := fetchRequest(name, 0, 0, 1<<20, 0)
	fetchAlso(req, 1, 0)
	c := fetchConn(t, g)
	for i := range 2 { // the second with the record sizes known
		resp, err := c.fetch(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		ps := resp.(*kmsg.FetchResponse).Topics[0].Partitions
		if n0, n1 := countRecords(ps[0].RecordBatches), countRecords(ps[1].RecordBatches); ps[0].ErrorCode != 0 || ps[1].ErrorCode != 0 || n0 != 1 || n1 != 0 {
			t.Fatalf("fetch %d with max_bytes 0: errors %d, %d, records %d, %d; want the first record of partition 0 alone", i, ps[0].ErrorCode, ps[1].ErrorCode, n0, n1)
		}
	}
}

// A partition's first fetch with min_bytes above what its first read (sized for large records) holds
// reads again at once, sized by what it found, instead of waiting out max_wait for an append that may
// never come: the backlog is there already.
func TestFetchFirstReadBelowMinBytes(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{})
	const topic = "first-read-min-bytes"
	if err := store.CreateTopic(ctx, redisstore.Topic{Name: topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { forgetSizing(topic) })
	appendValues(t, ctx, store, topic, 0, 2000, 100)
	req := fetchRequest(topic, 0, 0, 1<<20, 50<<20)
	req.MinBytes, req.MaxWaitMillis = 64<<10, 10_000
	start := time.Now()
	sp := fetchOne(t, ctx, fetchConn(t, g), req)
	if took := time.Since(start); sp.ErrorCode != 0 || len(sp.RecordBatches) < 64<<10 || took > 5*time.Second {
		t.Fatalf("error %d, %d bytes after %v; want 64 KiB at once from a 200 KB backlog", sp.ErrorCode, len(sp.RecordBatches), took)
	}
}

// A read held back by its entry count counts as short (read again at once when below min_bytes) only
// while a read sized by what it found would ask for more: at the most entries a read takes, tiny
// records leave it short of a large min_bytes every time, and reading the same entries again gains
// nothing.
func TestFetchShortOnlyWhenMoreCanBeRead(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{})
	const topic = "short-at-max-count"
	if err := store.CreateTopic(ctx, redisstore.Topic{Name: topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	appendValues(t, ctx, store, topic, 0, 3*maxReadCount, 10)
	c := fetchConn(t, g)
	read := func() fetchRead {
		p := sizingPart(t, topic, 0, 1<<20)
		p.resp = &kmsg.FetchResponseTopicPartition{}
		arrival := uint64(0)
		return c.readFetch(ctx, []fetchPart{p}, 50<<20, false, &arrival)
	}
	if rd := read(); !rd.short || rd.failed {
		t.Fatalf("first read (32 entries, sized for large records): %+v, want short", rd)
	}
	if rd := read(); rd.short || rd.failed || rd.bytes == 0 {
		t.Fatalf("read of %d entries, the most a read takes: %+v, want not short", maxReadCount, rd)
	}
}

// encodeRecords' pooled slice keeps no records once it is back in the pool: records are views of a
// Redis reply's buffer, which a stale slot would keep alive while the pool is in use. The slice a long
// run grew is looked at in the pool after a shorter run used it; the race detector has sync.Pool drop
// a share of what it is given, so the run is repeated until the slice is found there.
func TestEncodeRecordsPoolKeepsNoReply(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1)) // one P: the pool hands back what it was given
	reply := make([]byte, 100_000)
	big := make([]redisstore.Record, 1000)
	for i := range big {
		big[i] = redisstore.Record{Offset: int64(i), Value: reply[i*100 : i*100+100 : i*100+100]}
	}
	small := []redisstore.Record{{Offset: 0, Value: []byte("v")}}
	for range 50 {
		encodeRecords(nil, big, 0, 1<<30, true, false)
		encodeRecords(nil, small, 0, 1<<20, true, false)
		rp := recordPool.Get().(*[]protocol.Record)
		pooled := (*rp)[:cap(*rp)]
		recordPool.Put(rp)
		if len(pooled) < len(big) {
			continue // not the slice the long run grew
		}
		for i, r := range pooled {
			if r.Value != nil || r.Key != nil || r.Headers != nil {
				t.Fatalf("the pooled slice still holds record %d, a view of a reply (%d bytes)", i, len(r.Value))
			}
		}
		return
	}
	t.Skip("the pool never handed the long run's slice back")
}

// TestListOffsetsOneRoundTripPerTopic: the earliest and latest offsets of a topic's partitions are read
// in one Redis round trip, not one per partition, which at a 1 ms round trip made a lag tool's
// ListOffsets over 5,000 partitions take 5 s. The answers stay each partition's own.
func TestListOffsetsOneRoundTripPerTopic(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{})
	const parts = 200
	createTopic(t, store, "lag", parts)
	for p := range int32(3) {
		appendValues(t, ctx, store, "lag", p, int(p)+1, 10)
	}
	if _, err := store.DeleteRecords(ctx, "lag", 2, 1); err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrListOffsetsRequest()
	req.Version = 7
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = "lag"
	for p := range int32(parts) {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p, -1
		if p%2 == 0 {
			rp.Timestamp = -2
		}
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	c := fetchConn(t, g)
	if _, err := c.listOffsets(ctx, req); err != nil { // the topic is cached from here on
		t.Fatal(err)
	}
	var pipelines atomic.Int64
	store.Observe(func(cmd string, _ time.Duration, _ error) { pipelines.Add(1) })
	resp, err := c.listOffsets(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if n := pipelines.Load(); n != 1 {
		t.Fatalf("ListOffsets of %d partitions took %d Redis round trips, want 1", parts, n)
	}
	// Partition 0: earliest 0; 1: latest 2; 2: earliest 1 (deleted below); 3: latest 0.
	for p, want := range []int64{0, 2, 1, 0} {
		if sp := resp.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[p]; sp.ErrorCode != 0 || sp.Offset != want || sp.Timestamp != -1 {
			t.Errorf("partition %d: error %d offset %d timestamp %d; want 0, %d, -1", p, sp.ErrorCode, sp.Offset, sp.Timestamp, want)
		}
	}
}

// TestFetchManyPartitionsShareBuffers: the record batches of a fetch's partitions share pooled chunks;
// a buffer each (16 KiB at least) held 8 MB for a fetch of 500 partitions of one small record each
// until the response was written.
func TestFetchManyPartitionsShareBuffers(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{})
	const name, parts = "many-small", 500
	t.Cleanup(func() { forgetSizing(name) })
	createTopic(t, store, name, parts)
	var batches []*redisstore.Batch
	for p := range int32(parts) {
		batches = append(batches, &redisstore.Batch{Topic: name, Partition: p, ProducerID: -1,
			Records: []redisstore.Record{{Timestamp: 1, Value: bytes.Repeat([]byte{'v'}, 100)}}})
	}
	for _, r := range store.Append(ctx, batches) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	req := fetchRequest(name, 0, 0, 1<<20, 50<<20)
	for p := int32(1); p < parts; p++ {
		fetchAlso(req, p, 0)
	}
	c := fetchConn(t, g)
	for round := range 3 { // the first rounds size the partitions' reads
		resp, err := c.fetch(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for _, sp := range resp.(*kmsg.FetchResponse).Topics[0].Partitions {
			got += countRecords(sp.RecordBatches)
		}
		held := 0
		for _, bp := range c.outBufs {
			held += cap(*bp)
		}
		c.releaseOutBufs()
		if round == 2 {
			if got != parts {
				t.Fatalf("fetched %d records, want %d", got, parts)
			}
			if held > 1<<20 {
				t.Fatalf("%d records of 100 bytes held %d KiB of buffers", got, held>>10)
			}
		}
	}
}

// TestFetchTopicDeletedElsewhere: a fetch of a topic another gateway deleted, which this gateway's topic
// cache still holds (for up to a second), answers UNKNOWN_TOPIC_OR_PARTITION, as Apache does for a
// deleted topic; it answered OFFSET_OUT_OF_RANGE with a high watermark of 0, which resets a consumer's
// position (or, with auto.offset.reset=none, fails it).
func TestFetchTopicDeletedElsewhere(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{})
	const name = "deleted-elsewhere"
	t.Cleanup(func() { forgetSizing(name) })
	id := [16]byte{'d', 'e', 'l'}
	if err := store.CreateTopic(ctx, redisstore.Topic{Name: name, ID: id, Partitions: 1, Created: time.Now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	appendValues(t, ctx, store, name, 0, 6, 10)
	c := fetchConn(t, g)
	if sp := fetchOne(t, ctx, c, fetchRequest(name, 0, 5, 1<<20, 1<<20)); sp.ErrorCode != 0 || sp.HighWatermark != 6 {
		t.Fatalf("before the delete: error %d, high watermark %d", sp.ErrorCode, sp.HighWatermark)
	}
	if err := store.DeleteTopic(ctx, name); err != nil { // as another gateway does: this one's cache still has it
		t.Fatal(err)
	}
	// By topic ID (v13), as Apache answers for an ID it does not know.
	byID := fetchRequest(name, 0, 5, 1<<20, 1<<20)
	byID.Version, byID.Topics[0].TopicID = 13, id
	if sp := fetchOne(t, ctx, c, byID); sp.ErrorCode != kerr.UnknownTopicID.Code {
		t.Fatalf("v13 after the delete: error %d; want UNKNOWN_TOPIC_ID (%d)", sp.ErrorCode, kerr.UnknownTopicID.Code)
	}
	if sp := fetchOne(t, ctx, c, fetchRequest(name, 0, 5, 1<<20, 1<<20)); sp.ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("after the delete: error %d, high watermark %d; want UNKNOWN_TOPIC_OR_PARTITION (%d)", sp.ErrorCode, sp.HighWatermark, kerr.UnknownTopicOrPartition.Code)
	}
}

// TestPlanReadsHighWatermarkMoving: another connection's reads move a partition's last high watermark
// while a fetch plans its reads; planning reads it once per partition. Read twice, a value that moved
// to the fetch's offset between the two made the count of caught-up partitions 0 and the share a
// division by zero, which closed the consumer's connection.
func TestPlanReadsHighWatermarkMoving(t *testing.T) {
	var parts []fetchPart
	for p := range int32(50) {
		fp := sizingPart(t, "moving", p, 1<<20)
		fp.offset = 10
		fp.sizing.observe(1, 100, 100, 20) // behind: not caught up
		parts = append(parts, fp)
	}
	last := parts[len(parts)-1].sizing
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for end := int64(9); ; end = 19 - end { // 9, 10, 9, 10, ...
			select {
			case <-stop:
				return
			default:
				last.end.Store(end)
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()
	for deadline := time.Now().Add(200 * time.Millisecond); time.Now().Before(deadline); {
		planReads(parts, 1<<20, false)
	}
}

// TestFetchWaitCapped: a fetch asking to wait far longer than an idle connection is kept is answered
// by the idle timeout (and at most maxFetchWait), so a client that asked for days and went away does
// not hold its connection that long.
func TestFetchWaitCapped(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{IdleTimeout: 300 * time.Millisecond})
	const name = "wait-capped"
	t.Cleanup(func() { forgetSizing(name) })
	createTopic(t, store, name, 1)
	req := fetchRequest(name, 0, 0, 1<<20, 1<<20)
	req.MaxWaitMillis = 1 << 30 // about 12 days
	start := time.Now()
	if sp := fetchOne(t, ctx, fetchConn(t, g), req); sp.ErrorCode != 0 || len(sp.RecordBatches) != 0 {
		t.Fatalf("answer: error %d, %d record bytes; want an empty answer", sp.ErrorCode, len(sp.RecordBatches))
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("answered after %v, want about the 300 ms idle timeout", took)
	}
}

// TestFetchMaxWaitCapped: with no idle timeout, a fetch asking to wait for days is answered at
// maxFetchWait (30 s, lowered here), not when its max_wait_ms runs out.
func TestFetchMaxWaitCapped(t *testing.T) {
	keep := maxFetchWait
	maxFetchWait = 300 * time.Millisecond
	t.Cleanup(func() { maxFetchWait = keep }) // once the gateway has stopped
	ctx, g, store := embeddedGateway(t, Config{IdleTimeout: -1})
	const name = "max-wait-capped"
	t.Cleanup(func() { forgetSizing(name) })
	createTopic(t, store, name, 1)
	req := fetchRequest(name, 0, 0, 1<<20, 1<<20)
	req.MaxWaitMillis = 1 << 30 // about 12 days
	// Uncapped, the fetch waits until this context ends.
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	sp := fetchOne(t, fctx, fetchConn(t, g), req)
	took := time.Since(start)
	if sp.ErrorCode != 0 || len(sp.RecordBatches) != 0 {
		t.Fatalf("answer: error %d, %d record bytes; want an empty answer", sp.ErrorCode, len(sp.RecordBatches))
	}
	if took < maxFetchWait || took >= 4*time.Second {
		t.Fatalf("answered after %v, want at the %v cap", took, maxFetchWait)
	}
}

// TestFetchUnseenEmptyPartitionLeavesRoom: partitions this gateway never read are planned as if
// full; when they turn out empty, a read sized by what they held follows before any wait, so a later
// partition's records are answered at once, not after max_wait.
func TestFetchUnseenEmptyPartitionLeavesRoom(t *testing.T) {
	ctx, g, store := redisGateway(t, Config{})
	const name = "unseen-empty"
	t.Cleanup(func() { forgetSizing(name) })
	createTopic(t, store, name, 2)
	appendValues(t, ctx, store, name, 1, 10, 100)
	req := fetchRequest(name, 0, 0, 1<<20, 1<<20)
	req.MaxWaitMillis = 5000
	fetchAlso(req, 1, 0)
	start := time.Now()
	resp, err := fetchConn(t, g).fetch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if sp := resp.(*kmsg.FetchResponse).Topics[0].Partitions[1]; sp.ErrorCode != 0 || len(sp.RecordBatches) == 0 {
		t.Fatalf("partition 1: error %d, %d record bytes", sp.ErrorCode, len(sp.RecordBatches))
	}
	if took >= 4*time.Second {
		t.Fatalf("answered after %v: waited out max_wait with records in Redis", took)
	}
}

// TestFetchCaughtUpReadsSmallBuffers: a partition caught up at its last read is read into a small
// buffer, not one sized for a record of the size it holds: 200 idle partitions of 512 KiB records
// allocated about 55 MB per fetch.
func TestFetchCaughtUpReadsSmallBuffers(t *testing.T) {
	ctx, g, store := redisGateway(t, Config{})
	const name, parts = "idle-large", 200
	t.Cleanup(func() { forgetSizing(name) })
	createTopic(t, store, name, parts)
	for p := range int32(parts) {
		appendValues(t, ctx, store, name, p, 1, 512<<10)
	}
	req := fetchRequest(name, 0, 0, 1<<20, 1<<30)
	for p := int32(1); p < parts; p++ {
		fetchAlso(req, p, 0)
	}
	c := fetchConn(t, g)
	if _, err := c.fetch(ctx, req); err != nil { // reads each record: the partitions' sizes are known
		t.Fatal(err)
	}
	c.closeReadAhead()
	for i := range req.Topics[0].Partitions {
		req.Topics[0].Partitions[i].FetchOffset = 1 // caught up
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	resp, err := c.fetch(ctx, req)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	for _, sp := range resp.(*kmsg.FetchResponse).Topics[0].Partitions {
		if sp.ErrorCode != 0 || len(sp.RecordBatches) != 0 {
			t.Fatalf("partition %d: error %d, %d record bytes", sp.Partition, sp.ErrorCode, len(sp.RecordBatches))
		}
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 10<<20 {
		t.Fatalf("a fetch of %d caught-up partitions allocated %d MB", parts, alloc>>20)
	}
}

// TestFetchSessionEpochWithoutSession: kgate hands out no fetch sessions, so a v7+ request whose epoch
// is neither 0 (open one) nor -1 (no session) asks for one it cannot hold: FETCH_SESSION_ID_NOT_FOUND
// at the top level, whatever its session id, as Apache answers an unknown session. Session id 0 with
// an epoch above 0 was served. Every answer carries session id 0 (none opened).
func TestFetchSessionEpochWithoutSession(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{})
	t.Cleanup(func() { forgetSizing("sess") })
	createTopic(t, store, "sess", 1)
	c := fetchConn(t, g)
	for _, tc := range []struct {
		id, epoch int32
		served    bool
	}{
		{0, 0, true}, {0, -1, true}, {5, 0, true}, {5, -1, true},
		{0, 1, false}, {5, 1, false}, {0, -2, false}, {5, -2, false},
	} {
		req := fetchRequest("sess", 0, 0, 1<<20, 1<<20)
		req.SessionID, req.SessionEpoch = tc.id, tc.epoch
		r, err := c.fetch(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		resp := r.(*kmsg.FetchResponse)
		if served := resp.ErrorCode == 0 && len(resp.Topics) == 1; served != tc.served ||
			!tc.served && resp.ErrorCode != kerr.FetchSessionIDNotFound.Code {
			t.Errorf("session %d epoch %d: error %d, %d topics; want served %v (else FETCH_SESSION_ID_NOT_FOUND)",
				tc.id, tc.epoch, resp.ErrorCode, len(resp.Topics), tc.served)
		}
		if resp.SessionID != 0 { // sessions are declined: the client keeps sending full requests
			t.Errorf("session %d epoch %d: answered session id %d, want 0", tc.id, tc.epoch, resp.SessionID)
		}
	}
}

// A consumer deep in a backlog: a fetch taking a read-ahead of whole counts starts the next fetch's
// read at once, guessing its response takes as many records as the one before, and the next fetch
// uses it when its response ends there (every record once and in order either way), for small records
// and for large ones, of which a read asks for one more than a response takes. While the guesses hold,
// the fetch after the next is being read too (specDepth). After three misses in a row a connection
// guesses only now and then.
func TestFetchSpeculativeReadAhead(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{})
	createTopic(t, store, "spec", 1)
	createTopic(t, store, "spec-large", 1)
	t.Cleanup(func() { forgetSizing("spec"); forgetSizing("spec-large") })
	const n = 4000
	appendValues(t, ctx, store, "spec", 0, n, 100)
	c := fetchConn(t, g)
	deepest := 0 // most guessed reads left in flight after a fetch, beyond the next fetch's
	consume := func(from, to int64) (fetches int) {
		for next := from; next < to; fetches++ {
			sp := fetchOne(t, ctx, c, fetchRequest("spec", 0, next, 16<<10, 1<<20))
			c.releaseOutBufs()
			deepest = max(deepest, len(c.specs))
			got := batchOffsets(t, sp.RecordBatches)
			if sp.ErrorCode != 0 || len(got) == 0 {
				t.Fatalf("fetch %d at %d: error %d, %d records", fetches, next, sp.ErrorCode, len(got))
			}
			for i, o := range got {
				if o != next+int64(i) {
					t.Fatalf("fetch %d: offset %d at %d, want %d", fetches, o, i, next+int64(i))
				}
			}
			next += int64(len(got))
		}
		return fetches
	}
	before := testutil.ToFloat64(mReadAheadSpec)
	fetches := consume(0, n)
	if used := testutil.ToFloat64(mReadAheadSpec) - before; used < float64(fetches)/2 {
		t.Fatalf("%d fetches of equal records used %v speculative reads, want most", fetches, used)
	}
	if deepest != 1 {
		t.Fatalf("at most %d guessed reads in flight beyond the next fetch's, want 1", deepest)
	}
	// Large records: a read asks for one more entry than fits, and each response leaves it; the guess
	// follows what the response before took.
	appendValues(t, ctx, store, "spec-large", 0, 600, 5000)
	before = testutil.ToFloat64(mReadAheadSpec)
	large := 0
	for next := int64(0); next < 600; large++ {
		sp := fetchOne(t, ctx, c, fetchRequest("spec-large", 0, next, 64<<10, 1<<20))
		c.releaseOutBufs()
		got := batchOffsets(t, sp.RecordBatches)
		if sp.ErrorCode != 0 || len(got) == 0 || got[0] != next || got[len(got)-1] != next+int64(len(got))-1 {
			t.Fatalf("large fetch %d at %d: error %d, offsets %v", large, next, sp.ErrorCode, got)
		}
		next += int64(len(got))
	}
	if used := testutil.ToFloat64(mReadAheadSpec) - before; used < float64(large)/2 {
		t.Fatalf("%d fetches of 5 KB records used %v speculative reads, want most", large, used)
	}

	// After three misses in a row, a connection guesses once in readAheadRetry chances, until a guess
	// is used again.
	appendValues(t, ctx, store, "spec", 0, 4000, 100)
	c.specMisses, c.specSkipped = readAheadMaxMisses, 0
	before = testutil.ToFloat64(mReadAheadSpec)
	consume(n, n+1200) // 10 fetches of about 120 records
	if used := testutil.ToFloat64(mReadAheadSpec) - before; used != 0 || c.specSkipped == 0 {
		t.Fatalf("after three misses: %v speculative reads used, %d chances passed up; want none used", used, c.specSkipped)
	}
	// The sixteenth chance guesses, the guess is used, and the connection guesses every time again.
	before = testutil.ToFloat64(mReadAheadSpec)
	consume(n+1200, n+4000)
	if used := testutil.ToFloat64(mReadAheadSpec) - before; used < 5 || c.specMisses != 0 {
		t.Fatalf("after a guess was used: %v speculative reads used, %d misses in a row", used, c.specMisses)
	}
	// Whatever a fetch does, it leaves no speculative read behind: here one at the end of the
	// partition, which starts no read-ahead.
	c.dropReadAhead()
	c.specs = append(c.specs, c.newReadAhead([]redisstore.ReadRequest{{Topic: "spec", Partition: 0, Offset: 0, Count: 1}}, [][16]byte{{}}))
	fetchOne(t, ctx, c, fetchRequest("spec", 0, 2*n, 16<<10, 1<<20))
	c.releaseOutBufs()
	if len(c.specs) != 0 {
		t.Fatal("a speculative read kept after a fetch")
	}
}

// A client that alternates the order of its partitions between fetches (franz-go rotates them) keeps
// its guesses: the guess for the fetch after the next, made in one order and taken in the other,
// guesses each partition from what that partition's response took, not its neighbour's.
func TestFetchSpeculationPartitionsReordered(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{})
	createTopic(t, store, "spec-order", 2)
	t.Cleanup(func() { forgetSizing("spec-order") })
	appendValues(t, ctx, store, "spec-order", 0, 3000, 100)
	appendValues(t, ctx, store, "spec-order", 1, 3000, 400)
	c := fetchConn(t, g)
	next := [2]int64{}
	before := testutil.ToFloat64(mReadAheadSpec)
	const fetches = 25
	for f := range fetches {
		first := int32(f % 2)
		req := fetchRequest("spec-order", first, next[first], 8<<10, 1<<20)
		fetchAlso(req, 1-first, next[1-first])
		resp, err := c.fetch(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		for _, sp := range resp.(*kmsg.FetchResponse).Topics[0].Partitions {
			got := batchOffsets(t, sp.RecordBatches)
			if sp.ErrorCode != 0 || len(got) == 0 || got[0] != next[sp.Partition] {
				t.Fatalf("fetch %d, partition %d at %d: error %d, offsets %v", f, sp.Partition, next[sp.Partition], sp.ErrorCode, got)
			}
			next[sp.Partition] += int64(len(got))
		}
		c.releaseOutBufs()
	}
	if used := testutil.ToFloat64(mReadAheadSpec) - before; used < fetches-4 {
		t.Fatalf("%d fetches alternating their partitions' order used %v guesses, want all but the first few", fetches, used)
	}
}

// A guess read two fetches early is kept readAheadKeep from when it became the read-ahead, not from
// its read's end: a consumer that takes longer than half of readAheadKeep between fetches still gets
// its records read ahead.
func TestFetchSpeculationKeptFromAdoption(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{})
	createTopic(t, store, "spec-keep", 1)
	t.Cleanup(func() { forgetSizing("spec-keep") })
	keep := readAheadKeep
	readAheadKeep = 400 * time.Millisecond
	t.Cleanup(func() { readAheadKeep = keep })
	appendValues(t, ctx, store, "spec-keep", 0, 2000, 100)
	c := fetchConn(t, g)
	next := int64(0)
	unused := testutil.ToFloat64(mReadAheadUnused)
	for f := range 8 {
		if f > 0 {
			time.Sleep(250 * time.Millisecond) // the consumer at work
		}
		sp := fetchOne(t, ctx, c, fetchRequest("spec-keep", 0, next, 16<<10, 1<<20))
		got := batchOffsets(t, sp.RecordBatches)
		c.releaseOutBufs()
		if sp.ErrorCode != 0 || len(got) == 0 || got[0] != next {
			t.Fatalf("fetch %d at %d: error %d, offsets %v", f, next, sp.ErrorCode, got)
		}
		next += int64(len(got))
	}
	if n := testutil.ToFloat64(mReadAheadUnused) - unused; n != 0 || c.aheadMisses != 0 {
		t.Fatalf("%v read-aheads expired unused (%d misses in a row), want none", n, c.aheadMisses)
	}
}

// batchOffsets is the offsets of the records in a fetch response's record batches.
func batchOffsets(t *testing.T, set []byte) []int64 {
	t.Helper()
	batches, err := protocol.DecodeBatches(set, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, b := range batches {
		for _, r := range b.Records {
			out = append(out, b.BaseOffset+int64(r.OffsetDelta))
		}
	}
	return out
}

// readAhead.order maps a fetch's partitions to the read-ahead's in any order (franz-go rotates them
// between fetches), and refuses a fetch naming a partition the read-ahead did not read.
func TestReadAheadOrderRotated(t *testing.T) {
	const n = 1000
	ra := &readAhead{reqs: make([]redisstore.ReadRequest, n), ids: make([][16]byte, n)}
	for i := range n {
		ra.reqs[i] = redisstore.ReadRequest{Topic: "t", Partition: int32(i), Offset: int64(10 * i)}
	}
	reqs := append(append([]redisstore.ReadRequest{}, ra.reqs[1:]...), ra.reqs[0])
	order := ra.order(reqs, make([][16]byte, n))
	if order == nil {
		t.Fatal("a rotated fetch was not matched")
	}
	for i, j := range order {
		if ra.reqs[j].Partition != reqs[i].Partition {
			t.Fatalf("request %d (partition %d) mapped to partition %d", i, reqs[i].Partition, ra.reqs[j].Partition)
		}
	}
	reqs[5].Partition = n + 1
	if ra.order(reqs, make([][16]byte, n)) != nil {
		t.Fatal("a fetch naming a partition the read-ahead did not read was matched")
	}
}

// A Fetch naming one partition many times reads it once, at its first place with its last entry's
// offset, as Apache reads a request's partitions into a map; the other entries get its offsets and no
// records. Read once per entry, a caught-up partition named 500 times had Redis send a new 1 MB record
// 500 times for one request (each entry of a caught-up partition reads at least one).
func TestFetchDuplicatePartitionReadOnce(t *testing.T) {
	srv := redisServer(t)
	store := openStoreAt(t, srv.Addr, redisstore.Options{})
	// Apache's fetch.max.bytes: twenty partitions never read take 1 MiB each in a fetch's plan (at
	// the default 8 MiB, eight are read in the first fetch, the others in the next).
	g, _ := serveOn(t, store, Config{FetchMaxBytes: 55 << 20})
	ctx := t.Context()
	createTopic(t, store, "dup", 1)
	t.Cleanup(func() { forgetSizing("dup") })
	appendValues(t, ctx, store, "dup", 0, 10, 1000)
	c := fetchConn(t, g)
	fetchOne(t, ctx, c, fetchRequest("dup", 0, 10, 1<<20, 1<<20)) // caught up at 10
	appendValues(t, ctx, store, "dup", 0, 1, 1000)
	xranges := func() int {
		calls, _, _ := strings.Cut(redisInfo(ctx, store, "commandstats", "cmdstat_xrange:calls="), ",")
		n, _ := strconv.Atoi(calls)
		return n
	}
	many := func(offsets ...int64) []kmsg.FetchResponseTopicPartition {
		req := fetchRequest("dup", 0, offsets[0], 1<<20, 1<<20)
		for _, o := range offsets[1:] {
			fetchAlso(req, 0, o)
		}
		resp, err := c.fetch(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		c.releaseOutBufs()
		return resp.(*kmsg.FetchResponse).Topics[0].Partitions
	}
	offsets := make([]int64, 200)
	for i := range offsets {
		offsets[i] = 10
	}
	before := xranges()
	ps := many(offsets...)
	if n := xranges() - before; n > 4 {
		t.Fatalf("a fetch naming one caught-up partition 200 times ran %d XRANGEs", n)
	}
	if got := batchOffsets(t, ps[0].RecordBatches); ps[0].ErrorCode != 0 || len(got) != 1 || got[0] != 10 {
		t.Fatalf("first entry: error %d, offsets %v; want the new record", ps[0].ErrorCode, got)
	}
	for i, sp := range ps[1:] {
		if sp.ErrorCode != 0 || len(sp.RecordBatches) != 0 || sp.HighWatermark != 11 {
			t.Fatalf("entry %d: error %d, %d record bytes, high watermark %d; want no records and the partition's offsets", i+1, sp.ErrorCode, len(sp.RecordBatches), sp.HighWatermark)
		}
	}
	if got := batchOffsets(t, many(0, 8)[0].RecordBatches); len(got) == 0 || got[0] != 8 {
		t.Fatalf("entries at 0 then 8: offsets %v; want the records from 8, the last entry's", got)
	}
	// Many partitions, each named twice (looked up in a map past a few).
	createTopic(t, store, "dup20", 20)
	g.topics.invalidate() // created behind the gateway's back, just now
	t.Cleanup(func() { forgetSizing("dup20") })
	req := fetchRequest("dup20", 0, 0, 1<<20, 50<<20)
	for p := range int32(40) {
		appendValues(t, ctx, store, "dup20", p%20, 1, 10)
		if p > 0 {
			fetchAlso(req, p%20, 0)
		}
	}
	resp, err := c.fetch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	c.releaseOutBufs()
	for i, sp := range resp.(*kmsg.FetchResponse).Topics[0].Partitions {
		if n := len(batchOffsets(t, sp.RecordBatches)); sp.ErrorCode != 0 || (i < 20) != (n == 2) || (i >= 20 && n != 0) {
			t.Fatalf("entry %d (partition %d): error %d, %d records; want 2 at the first entry, none at the second", i, sp.Partition, sp.ErrorCode, n)
		}
	}
}

// TestFetchUnseenPartitionsPlannedAtOneMiB: a partition never read takes 1 MiB (32 records of 32 KiB)
// in a fetch's plan, so at the default fetch.max.bytes of 8 MiB a fetch naming twenty such partitions
// reads eight of them, and the next fetch, with their sizes known, the others.
func TestFetchUnseenPartitionsPlannedAtOneMiB(t *testing.T) {
	srv := redisServer(t)
	store := openStoreAt(t, srv.Addr, redisstore.Options{})
	g, _ := serveOn(t, store, Config{})
	ctx := t.Context()
	const topic = "unseen20"
	createTopic(t, store, topic, 20)
	t.Cleanup(func() { forgetSizing(topic) })
	req := fetchRequest(topic, 0, 0, 1<<20, 50<<20)
	for p := range int32(20) {
		appendValues(t, ctx, store, topic, p, 1, 10)
		if p > 0 {
			fetchAlso(req, p, 0)
		}
	}
	c := fetchConn(t, g)
	withRecords := func() (n int) {
		t.Helper()
		resp, err := c.fetch(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		c.releaseOutBufs()
		for _, sp := range resp.(*kmsg.FetchResponse).Topics[0].Partitions {
			if sp.ErrorCode != 0 {
				t.Fatalf("partition %d: error %d", sp.Partition, sp.ErrorCode)
			}
			if countRecords(sp.RecordBatches) > 0 {
				n++
			}
		}
		return n
	}
	if n := withRecords(); n != 8 {
		t.Fatalf("first fetch: %d partitions with records, want 8", n)
	}
	if n := withRecords(); n != 20 {
		t.Fatalf("second fetch: %d partitions with records, want 20", n)
	}
}

// TestFetchBoundedAfterSizingDrivenDown: fetches of a stretch of 100-byte records, again and again,
// bring a partition's record-size estimate down to them; a fetch of the run of 512 KiB records after
// them then asks Redis for thousands of entries. The bytes index cuts the read (and the read-ahead
// after it) to a few times the fetch's 1 MiB: Redis sends a few MiB for each, not the whole 50 MiB run.
func TestFetchBoundedAfterSizingDrivenDown(t *testing.T) {
	ctx, g, store := redisGateway(t, Config{})
	const name = "driven-down"
	createTopic(t, store, name, 1)
	t.Cleanup(func() { forgetSizing(name) })
	appendValues(t, ctx, store, name, 0, 3000, 100)
	const large, largeSize = 100, 512 << 10
	for range large {
		appendValues(t, ctx, store, name, 0, 1, largeSize)
	}
	c := fetchConn(t, g)
	for range 8 {
		for offset := int64(0); offset < 2000; {
			sp := fetchOne(t, ctx, c, fetchRequest(name, 0, offset, 64<<10, 50<<20))
			n := countRecords(sp.RecordBatches)
			if sp.ErrorCode != 0 || n == 0 {
				t.Fatalf("fetch of 100-byte records at %d: error %d, %d records", offset, sp.ErrorCode, n)
			}
			offset += int64(n)
		}
	}
	parts := []fetchPart{sizingPart(t, name, 0, 1<<20)}
	if count := planReads(parts, 50<<20, false)[0].Count; count < 5000 {
		t.Fatalf("read count after the small records %d; want it driven to thousands", count)
	}
	sent := func() int64 {
		t.Helper()
		n, err := strconv.ParseInt(redisInfo(ctx, store, "stats", "total_net_output_bytes:"), 10, 64)
		if err != nil {
			t.Fatal("no total_net_output_bytes in INFO stats")
		}
		return n
	}
	before := sent()
	sp := fetchOne(t, ctx, c, fetchRequest(name, 0, 2990, 1<<20, 50<<20))
	if n := countRecords(sp.RecordBatches); sp.ErrorCode != 0 || n == 0 {
		t.Fatalf("fetch at 2990: error %d, %d records", sp.ErrorCode, n)
	}
	c.closeReadAhead() // waits for a read-ahead the fetch started
	got, most := sent()-before, int64(16<<20)
	t.Logf("Redis sent %d bytes", got)
	if got > most {
		t.Fatalf("Redis sent %d bytes for one 1 MiB fetch at the run of 512 KiB records, want at most %d", got, most)
	}
}

// TestFetchCutReadReadsOn: a read cut by its byte bound that took every record it read does not leave
// the fetch waiting out max_wait below min_bytes with records in Redis: the fetch reads on at once.
// One consumer's read of the tail leaves a run of the bytes index ending there; 8 MiB of records
// come (more than the read's limit, 4 MiB and 2 strides); another consumer's fetch of the new tail moves the last high watermark the gateway saw; a
// third consumer's fetch from the old tail, min_bytes 256 KiB, gets its records without waiting.
func TestFetchCutReadReadsOn(t *testing.T) {
	ctx, g, store := redisGateway(t, Config{})
	const name = "cut-read"
	createTopic(t, store, name, 1)
	t.Cleanup(func() { forgetSizing(name) })
	appendValues(t, ctx, store, name, 0, 10, 100)
	if sp := fetchOne(t, ctx, fetchConn(t, g), fetchRequest(name, 0, 10, 64<<10, 50<<20)); sp.ErrorCode != 0 {
		t.Fatalf("fetch at the tail: error %d", sp.ErrorCode)
	}
	for range 128 {
		appendValues(t, ctx, store, name, 0, 1, 64<<10)
	}
	if sp := fetchOne(t, ctx, fetchConn(t, g), fetchRequest(name, 0, 138, 64<<10, 50<<20)); sp.ErrorCode != 0 || sp.HighWatermark != 138 {
		t.Fatalf("fetch at the new tail: error %d, high watermark %d", sp.ErrorCode, sp.HighWatermark)
	}
	req := fetchRequest(name, 0, 10, 1<<20, 50<<20)
	req.MinBytes, req.MaxWaitMillis = 256<<10, 2000
	began := time.Now()
	sp := fetchOne(t, ctx, fetchConn(t, g), req)
	if n, took := countRecords(sp.RecordBatches), time.Since(began); sp.ErrorCode != 0 || n < 2 || took > time.Second {
		t.Fatalf("fetch from 10 with min_bytes 256 KiB: error %d, %d records after %v; want more than one, at once", sp.ErrorCode, n, took)
	}
}

// redisInfo is the rest of the line of INFO section that starts with prefix ("" when none does).
func redisInfo(ctx context.Context, store *redisstore.Store, section, prefix string) string {
	for _, line := range strings.Split(store.Client().Info(ctx, section).Val(), "\r\n") {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			return rest
		}
	}
	return ""
}

// panicOn is a client hook that panics on the command named, alone or in a pipeline.
type panicOn string

func (panicOn) DialHook(next redis.DialHook) redis.DialHook { return next }
func (name panicOn) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, c redis.Cmder) error {
		name.check(c)
		return next(ctx, c)
	}
}
func (name panicOn) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			name.check(c)
		}
		return next(ctx, cmds)
	}
}
func (name panicOn) check(c redis.Cmder) {
	if c.Name() == string(name) {
		panic("a panic on " + string(name))
	}
}

// A panic in a read-ahead's read, on a goroutine of its own, fails that read (a retriable error for the
// fetch that takes it) instead of ending the process.
func TestReadAheadPanicFailsRead(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{})
	createTopic(t, store, "ahead-panics", 1)
	if r := store.Append(ctx, []*redisstore.Batch{{Topic: "ahead-panics", ProducerID: -1, Records: storeRecords(0, 1, 2)}})[0]; r.Err != nil {
		t.Fatal(r.Err)
	}
	store.Client().AddHook(panicOn("xrange"))
	c := &conn{g: g, log: zerolog.Nop()}
	ra := c.newReadAhead([]redisstore.ReadRequest{{Topic: "ahead-panics", Offset: 0, Count: 3}}, make([][16]byte, 1))
	<-ra.done
	ra.mu.Lock()
	res := ra.res
	ra.mu.Unlock()
	ra.cancel()
	c.aheadWG.Wait()
	if len(res) != 1 || !errors.Is(res[0].Err, errPanic) || errCode(res[0].Err) != kerr.NotLeaderForPartition.Code {
		t.Fatalf("read-ahead results after a panic: %+v", res)
	}
}

// Consumers catching up, each on its own connection with its read-ahead, get every record whole and in
// order while the gateway reuses the reply buffers their reads come in (redisstore.RecycleReads after
// each response is encoded): what a fetch allocates is then a fraction of the bytes it serves, where
// it was a buffer of about the response's size per fetch.
func TestFetchRecyclesReplyBuffers(t *testing.T) {
	ctx, g, store := redisGateway(t, Config{}) // a real Redis: the embedded one allocates in this process
	const consumers, records, size = 3, 3000, 1000
	for i := range consumers {
		topic := fmt.Sprintf("recycling-%d", i)
		createTopic(t, store, topic, 1)
		t.Cleanup(func() { forgetSizing(topic) })
		b := &redisstore.Batch{Topic: topic, ProducerID: -1}
		for o := range records {
			b.Records = append(b.Records, redisstore.Record{Timestamp: 1, Value: fmt.Appendf(nil, "%s/%07d/%s", topic, o, strings.Repeat("x", size))})
		}
		if res := store.Append(ctx, []*redisstore.Batch{b}); res[0].Err != nil {
			t.Fatal(res[0].Err)
		}
	}
	consume := func(topic string, c *conn) error {
		var want []byte // checked without allocating: the test measures what the fetches allocate
		for offset := int64(0); offset < records; {
			resp, err := c.fetch(ctx, fetchRequest(topic, 0, offset, 1<<20, 1<<20))
			if err != nil {
				return err
			}
			sp := resp.(*kmsg.FetchResponse).Topics[0].Partitions[0]
			batches, err := protocol.DecodeBatches(sp.RecordBatches, 1<<30)
			if err != nil || sp.ErrorCode != 0 {
				return fmt.Errorf("fetch at %d: error %d, %v", offset, sp.ErrorCode, err)
			}
			for _, b := range batches {
				for _, r := range b.Records {
					at := b.BaseOffset + int64(r.OffsetDelta)
					want = fmt.Appendf(want[:0], "%s/%07d/", topic, offset)
					if at != offset || !bytes.HasPrefix(r.Value, want) || len(r.Value) != len(want)+size {
						return fmt.Errorf("record at offset %d: %.30q (%d bytes); want offset %d, %q", at, r.Value, len(r.Value), offset, want)
					}
					offset++
				}
			}
			c.releaseOutBufs() // as writing the response does
		}
		return nil
	}
	conns := make([]*conn, consumers)
	for i := range conns {
		conns[i] = fetchConn(t, g)
	}
	run := func() {
		t.Helper()
		errs := make(chan error, consumers)
		for i, c := range conns {
			go func() { errs <- consume(fmt.Sprintf("recycling-%d", i), c) }()
		}
		for range consumers {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	run() // warms the pools and the sizing of reads
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const rounds = 3
	for range rounds {
		run()
	}
	runtime.ReadMemStats(&after)
	served := uint64(rounds * consumers * records * size)
	// A reply buffer allocated per read is the served bytes and more; the rest (record slabs, the client
	// library's readers, this test's decoding) is about half of them.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > served*3/4 && !raceEnabled {
		t.Fatalf("fetches serving %d MB allocated %d MB; reply buffers are not being reused", served>>20, alloc>>20)
	}
}

// TestReadAheadKeepsOnePartitionsError: a consumer catching up on two topics has a read-ahead, and one
// topic is deleted (through another gateway) before the read-ahead's read runs, so the read-ahead
// holds UNKNOWN_TOPIC_OR_PARTITION for that partition alone. The next fetch answers the live topic's
// partition with its records: the read-ahead is a miss, not a Redis failure spread to every partition.
func TestReadAheadKeepsOnePartitionsError(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{})
	t.Cleanup(func() { forgetSizing("ra-live"); forgetSizing("ra-gone") })
	for i, name := range []string{"ra-live", "ra-gone"} {
		if err := store.CreateTopic(ctx, redisstore.Topic{Name: name, ID: [16]byte{byte(i + 1)}, Partitions: 1, Created: time.Now().UnixMilli()}); err != nil {
			t.Fatal(err)
		}
		appendValues(t, ctx, store, name, 0, 200, 100)
	}
	c := fetchConn(t, g)
	req := func(offLive, offGone int64) *kmsg.FetchRequest {
		r := fetchRequest("ra-live", 0, offLive, 2000, 1<<20)
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "ra-gone"
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = 0, offGone, 2000
		rt.Partitions = append(rt.Partitions, rp)
		r.Topics = append(r.Topics, rt)
		return r
	}
	next := func(sp kmsg.FetchResponseTopicPartition, from int64) int64 {
		if offs := batchOffsets(t, sp.RecordBatches); len(offs) > 0 {
			return offs[len(offs)-1] + 1
		}
		return from
	}
	resp, err := c.fetch(ctx, req(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	fr := resp.(*kmsg.FetchResponse)
	nl, ng := next(fr.Topics[0].Partitions[0], 0), next(fr.Topics[1].Partitions[0], 0)
	if nl == 0 || ng == 0 || c.ahead == nil {
		t.Fatalf("setup: next offsets %d and %d, read-ahead %v", nl, ng, c.ahead != nil)
	}
	<-c.ahead.done
	// The delete lands before the read-ahead's read (the same read-ahead, started again after it).
	reqs, ids, took := c.ahead.reqs, c.ahead.ids, c.ahead.took
	c.dropReadAhead()
	if err := store.DeleteTopic(ctx, "ra-gone"); err != nil {
		t.Fatal(err)
	}
	c.ahead = c.newReadAhead(reqs, ids)
	c.ahead.took = took
	resp, err = c.fetch(ctx, req(nl, ng))
	if err != nil {
		t.Fatal(err)
	}
	fr = resp.(*kmsg.FetchResponse)
	live, gone := fr.Topics[0].Partitions[0], fr.Topics[1].Partitions[0]
	if live.ErrorCode != 0 || next(live, nl) == nl {
		t.Fatalf("live topic: error %d, records up to %d from %d; want its records", live.ErrorCode, next(live, nl), nl)
	}
	if gone.ErrorCode == 0 {
		t.Fatal("deleted topic answered without an error")
	}
}

// TestReadAheadFailureOfOneMaster: on a Redis Cluster (cluster-require-full-coverage no), a
// read-ahead whose read of one partition failed, its master down, answers the fetch that takes it
// with that partition's retriable error and the other partitions' records. It answered every
// partition with the error, those of live masters too.
func TestReadAheadFailureOfOneMaster(t *testing.T) {
	if os.Getenv("KGATE_SKIP_REDIS") == "1" {
		t.Skip("KGATE_SKIP_REDIS=1")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cluster, err := redistest.StartPartialCluster(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Stop)
	store, err := redisstore.Open(ctx, redisstore.Options{Addrs: cluster.Addrs(), Cluster: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	g := New(Config{}, store, zerolog.Nop())
	cc := store.Client().(*redis.ClusterClient)
	masterOf := func(key string) string {
		t.Helper()
		m, err := cc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return m.Options().Addr
	}
	// Partition 0 on a live master, partition 1 on the one to pause, which holds no registry.
	registry := masterOf(store.Namespace() + ":topics")
	var name string
	for n := 0; name == ""; n++ {
		cand := "ra" + strconv.Itoa(n)
		m0, m1 := masterOf(store.StreamKey(cand, 0)), masterOf(store.StreamKey(cand, 1))
		if m0 != m1 && m1 != registry {
			name = cand
		}
	}
	createTopic(t, store, name, 2)
	t.Cleanup(func() { forgetSizing(name) })
	for p := range int32(2) {
		appendValues(t, ctx, store, name, p, 10, 100)
	}
	topic, err := g.topics.get(ctx, name) // the view the fetch reads, before the pause
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range cluster.Masters {
		if m.Addr == masterOf(store.StreamKey(name, 1)) {
			if err := m.Pause(); err != nil {
				t.Skipf("cannot pause a redis-server here: %v", err)
			}
			t.Cleanup(func() { _ = m.Resume() })
		}
	}

	c := fetchConn(t, g)
	reqs := []redisstore.ReadRequest{
		{Topic: name, Partition: 0, Offset: 0, Count: 10, KnownPartition: true},
		{Topic: name, Partition: 1, Offset: 0, Count: 10, KnownPartition: true},
	}
	c.ahead = c.newReadAhead(reqs, [][16]byte{topic.ID, topic.ID})
	<-c.ahead.done
	if res := c.ahead.res; res[0].Err != nil || res[1].Err == nil {
		t.Fatalf("the read-ahead's read: partition 0 (live) %v, partition 1 (paused) %v; want only 1 failed", res[0].Err, res[1].Err)
	}
	req := fetchRequest(name, 0, 0, 1<<20, 1<<20)
	fetchAlso(req, 1, 0)
	resp, err := c.fetch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	c.releaseOutBufs()
	if c.ahead != nil {
		t.Fatal("the fetch did not take the read-ahead")
	}
	ps := resp.(*kmsg.FetchResponse).Topics[0].Partitions
	if got := batchOffsets(t, ps[0].RecordBatches); ps[0].ErrorCode != 0 || len(got) != 10 {
		t.Errorf("partition 0 (its master up): error %d, %d records; want 10", ps[0].ErrorCode, len(got))
	}
	if ps[1].ErrorCode != kerr.NotLeaderForPartition.Code {
		t.Errorf("partition 1 (its master paused): error %d; want NOT_LEADER_OR_FOLLOWER", ps[1].ErrorCode)
	}
}
