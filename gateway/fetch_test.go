package gateway

import (
	"bytes"
	"testing"

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
	_, n, _ = encodeRecords(nil, recs, 0, 250, true, false)
	if n == 0 || n == 10 {
		t.Fatalf("limit 250 bytes took %d of 10 records", n)
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
	cache := newTopicCache(store)
	if err := cache.refresh(ctx); err != nil {
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
	if err := cache.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if has("gone") || has("again") || !has("kept") {
		t.Fatalf("sizing kept: gone %v, again %v, kept %v; want false, false, true", has("gone"), has("again"), has("kept"))
	}
	forgetSizing("kept")
}
