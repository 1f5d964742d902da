package gateway

import (
	"container/list"
	"context"
	"sync"
	"time"
	"unsafe"

	"github.com/kgate/kgate/redisstore"
)

// tailCache keeps, per partition, copies of the records this gateway appended last, so a consumer
// reading at the end of a partition (the common case: consumers keep up) is answered from memory:
// the fetch reads the partition's offsets from Redis (one HMGET; but see ownAppend below), not the
// entries, whose reply parsing is most of what a fetch costs the gateway. Records are immutable once
// Redis stored them, so a copy taken after the append succeeded stays right. The fetch takes records
// from the cache only when it holds every offset from the fetch offset to the high watermark just
// read, for the same topic ID; if this gateway still has appends to the partition in flight it waits
// for them first (await), otherwise (another gateway appended the rest) it reads Redis. A cache
// reaching past a high watermark with no append since it was read holds records Redis does not have
// (a topic deleted and created again) and is dropped. Entries deleted with DeleteRecords or retention
// fall below the fresh log start offset and are never returned; entries deleted natively with XDEL
// may still be served from the cache while it holds them.
//
// A fetch woken by this gateway's own append may skip the offsets read too: when the newest append the
// cache holds for every partition of the fetch was committed after the fetch arrived (it began after
// the fetch arrived, or Redis ran it after a read of the fetch: see ownAppend), that append's result
// (its high watermark and log start offset, read by the append script inside its transaction) is the
// partition's state at a moment within the fetch, and the fetch answers as of that moment (ownAppends).
// A DeleteRecords or another gateway's append after it is concurrent with the fetch and may be ordered
// after it, as on a broker that serves the fetch just before them. (An append that a Redis failover
// loses after acknowledging it may be served this way, as it may be by a fetch that read Redis just
// before the failover.)
//
// Only partitions a fetch lately read up to their end (a consumer keeping up) are cached: copying
// appends nobody reads at the tail would cost the produce path CPU and memory for nothing.
//
// Memory is bounded: each partition keeps at most perPart bytes (its newest batches), and when the
// whole cache passes max bytes the partitions appended to longest ago are dropped.
type tailCache struct {
	mu       sync.Mutex
	parts    map[partKey]*tailPart
	watched  map[partKey]time.Time // when a fetch last read the partition up to its end
	sweepAt  int                   // size of watched from which watch drops stale entries
	inflight map[partKey]int       // appends being copied that Redis has not yet answered
	wake     chan struct{}         // closed (and replaced) when appends are answered
	lru      list.List             // of partKey, the partition appended to last in front
	bytes    int64
	max      int64
	perPart  int64
	clock    uint64 // counts appends
	tickets  uint64 // counts begin calls: a fetch's arrival, compared with an append's ticket
}

// tailPart is one partition's newest records, as the batches that appended them: chunks[0] starts at
// offset base, each chunk continues where the previous one ends.
type tailPart struct {
	id      [16]byte
	base    int64
	end     int64 // offset after the last record
	chunks  []tailChunk
	bytes   int64
	touched uint64 // clock at its last append
	elem    *list.Element
	// What the newest append (the one that ends at end) answered, its base offset and its ticket
	// from begin.
	start  int64
	last   int64
	ticket uint64
}

type tailChunk struct {
	recs  []redisstore.Record
	bytes int64
}

func newTailCache(max int64) *tailCache {
	if max <= 0 {
		return nil
	}
	return &tailCache{parts: map[partKey]*tailPart{}, watched: map[partKey]time.Time{}, sweepAt: 1024, inflight: map[partKey]int{}, wake: make(chan struct{}),
		max: max, perPart: min(max, 1<<20)}
}

// tailBatch is a batch's records copied for the cache (offsets from 0), taken while its append is
// still in flight, so the copy does not lengthen the request.
type tailBatch struct {
	recs []redisstore.Record
	size int64
}

// appended is an accepted append: its base offset and the log start offset Redis answered, and the
// ticket begin gave it before it went to Redis.
type appended struct {
	base, start int64
	ticket      uint64
}

// add records an accepted batch, copied by copyBatch, at offsets a.base, a.base+1, ... unless the
// partition's watch mark expired meanwhile: an append begun since then was not copied and dropped the
// partition, and this one must not bring it back behind that append.
func (tc *tailCache) add(k partKey, id [16]byte, a appended, b tailBatch) {
	if tc == nil || len(b.recs) == 0 {
		return
	}
	base := a.base
	copied, size := b.recs, b.size
	for i := range copied {
		copied[i].Offset = base + int64(i)
	}
	now := time.Now()
	tc.mu.Lock()
	defer tc.mu.Unlock()
	tc.clock++
	p := tc.parts[k]
	if !tc.watchedLocked(k, now) {
		if p != nil {
			tc.drop(k, p)
		}
		return
	}
	if p == nil || p.id != id || p.end != base {
		// New, recreated, or not contiguous (another gateway appended in between, or Redis lost
		// writes in a failover and the offsets went back): start over.
		if p != nil {
			tc.drop(k, p)
		}
		p = &tailPart{id: id, base: base, end: base}
		p.elem = tc.lru.PushFront(k)
		tc.parts[k] = p
	}
	tc.lru.MoveToFront(p.elem)
	p.chunks = append(p.chunks, tailChunk{recs: copied, bytes: size})
	p.end += int64(len(copied))
	p.start, p.last, p.ticket = a.start, base, a.ticket
	p.bytes += size
	tc.bytes += size
	p.touched = tc.clock
	// Drop the oldest batches beyond the partition's share, always keeping the newest.
	drop := 0
	for p.bytes > tc.perPart && drop < len(p.chunks)-1 {
		c := &p.chunks[drop]
		p.bytes -= c.bytes
		tc.bytes -= c.bytes
		p.base += int64(len(c.recs))
		drop++
	}
	if drop > 0 {
		clear(p.chunks[:drop]) // release the records; append reallocates the slice as it needs
		p.chunks = p.chunks[drop:]
	}
	for tc.bytes > tc.max && tc.lru.Len() > 1 {
		last := tc.lru.Back().Value.(partKey)
		tc.drop(last, tc.parts[last])
	}
}

// drop removes partition k (p) from the cache.
func (tc *tailCache) drop(k partKey, p *tailPart) {
	tc.bytes -= p.bytes
	tc.lru.Remove(p.elem)
	delete(tc.parts, k)
}

// await returns the records of offsets [from, to) when the cache holds all of them for topic ID id
// (an empty, non-nil slice when from == to and the cache reaches from), else nil. When it does not
// hold them yet while this gateway has appends to the partition in flight (Redis moves the high
// watermark before the gateway has parsed its reply and recorded them), it waits for those appends,
// at most maxWait (not at all when it is not positive). to is a high watermark read after the cache's clock showed since: a cache reaching
// past it without an append since then holds records Redis does not have (a topic deleted and created
// again) and is dropped, as a high watermark never goes back; one appended to since merely moved on
// after the read.
func (tc *tailCache) await(ctx context.Context, k partKey, id [16]byte, from, to int64, since uint64, maxWait time.Duration) []redisstore.Record {
	if tc == nil || to < from {
		return nil
	}
	var timer *time.Timer
	for {
		tc.mu.Lock()
		recs := tc.getLocked(k, id, from, to, since)
		if recs != nil || tc.inflight[k] == 0 {
			tc.mu.Unlock()
			return recs
		}
		wake := tc.wake
		tc.mu.Unlock()
		if maxWait <= 0 {
			return nil
		}
		if timer == nil {
			timer = time.NewTimer(maxWait)
			defer timer.Stop()
		}
		select {
		case <-wake:
		case <-timer.C:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// tailWatch is how long a partition stays cached after a fetch last read it up to its end.
const tailWatch = 10 * time.Second

// watch notes fetches that read partitions ks up to their end.
func (tc *tailCache) watch(ks []partKey) {
	if tc == nil || len(ks) == 0 {
		return
	}
	now := time.Now()
	tc.mu.Lock()
	defer tc.mu.Unlock()
	for _, k := range ks {
		tc.watched[k] = now
	}
	if len(tc.watched) >= tc.sweepAt {
		for k, at := range tc.watched {
			if now.Sub(at) > tailWatch {
				delete(tc.watched, k)
			}
		}
		tc.sweepAt = max(2*len(tc.watched), 1024)
	}
}

// begin notes appends to partitions ks going to Redis and reports which of them to copy for the cache
// (those watched lately; nil when none is), with the appends' ticket (see ownAppend). A partition not
// copied loses what the cache holds of it: the append moves Redis past it (and after a failover that
// lost writes, could bring the high watermark back to exactly where the cache ends, with other
// records). finish notes that the appends are answered (and, when copied and successful, recorded
// with add).
func (tc *tailCache) begin(ks []partKey) (copyOf []bool, ticket uint64) {
	if tc == nil {
		return nil, 0
	}
	now := time.Now()
	tc.mu.Lock()
	defer tc.mu.Unlock()
	tc.tickets++
	ticket = tc.tickets
	for i, k := range ks {
		if tc.watchedLocked(k, now) {
			if copyOf == nil {
				copyOf = make([]bool, len(ks))
			}
			copyOf[i] = true
			tc.inflight[k]++
		} else if p := tc.parts[k]; p != nil {
			tc.drop(k, p)
		}
	}
	return copyOf, ticket
}

// watchedLocked reports whether a fetch read partition k up to its end within tailWatch of now,
// forgetting a mark older than that; tc.mu is held.
func (tc *tailCache) watchedLocked(k partKey, now time.Time) bool {
	at, ok := tc.watched[k]
	if ok && now.Sub(at) > tailWatch {
		delete(tc.watched, k)
		ok = false
	}
	return ok
}

func (tc *tailCache) finish(ks []partKey, copyOf []bool) {
	if tc == nil || copyOf == nil {
		return
	}
	tc.mu.Lock()
	defer tc.mu.Unlock()
	for i, k := range ks {
		if !copyOf[i] {
			continue
		}
		if tc.inflight[k]--; tc.inflight[k] <= 0 {
			delete(tc.inflight, k)
		}
	}
	close(tc.wake)
	tc.wake = make(chan struct{})
}

// getLocked is await without waiting; tc.mu is held.
func (tc *tailCache) getLocked(k partKey, id [16]byte, from, to int64, since uint64) []redisstore.Record {
	p := tc.parts[k]
	if p == nil {
		return nil
	}
	if p.end > to && p.touched <= since {
		tc.drop(k, p)
		return nil
	}
	if p.id != id || from < p.base || to > p.end {
		return nil
	}
	// to may be below p.end (appended to since the high watermark was read): only [from, to) is read.
	// Chunks are never written after they are added, so the records may be read after the lock is
	// released. A range within one batch is a slice of it; a longer one is copied together.
	var out []redisstore.Record
	at := p.base
	for _, c := range p.chunks {
		cend := at + int64(len(c.recs))
		if cend > from && at < to {
			part := c.recs[max(from, at)-at : min(to, cend)-at]
			if out == nil && to <= cend {
				return part[:len(part):len(part)]
			}
			if out == nil {
				out = make([]redisstore.Record, 0, to-from)
			}
			out = append(out, part...)
		}
		at = cend
	}
	if out == nil {
		out = []redisstore.Record{}
	}
	return out
}

// arrival is the ticket a fetch arriving now compares appends with: those with a higher one began
// after it.
func (tc *tailCache) arrival() uint64 {
	if tc == nil {
		return 0
	}
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return tc.tickets
}

// ownAppend returns partition k's records from offset from to the end of the newest append the cache
// holds, with that append's high watermark, log start offset and ticket, when that append was
// committed after the fetch arrived, for topic ID id, and the cache holds every offset from from on;
// else ok is false. The append was committed after the fetch arrived when it began after arrival (its
// ticket is higher), or when it was recorded after a read of the fetch began (the cache's clock then
// was seenAt) and is based at or above seen, the high watermark that read found (-1 when none):
// offsets only grow, so Redis ran the append after that read. The second is the common case of a
// consumer keeping up: its fetch arrives while the append that wakes it is in flight. An append
// recorded before the read began does not count, whatever its base: reaching past the high watermark
// the read found, it may hold records Redis no longer has (lost in a failover, or the topic deleted),
// which only the check of await catches.
func (tc *tailCache) ownAppend(k partKey, id [16]byte, from int64, arrival uint64, seen int64, seenAt uint64) (recs []redisstore.Record, offs redisstore.Offsets, ticket uint64, ok bool) {
	if tc == nil {
		return nil, offs, 0, false
	}
	tc.mu.Lock()
	defer tc.mu.Unlock()
	p := tc.parts[k]
	if p == nil || p.id != id || from < p.base || from > p.end {
		return nil, offs, 0, false
	}
	if p.ticket <= arrival && (seen < 0 || p.last < seen || p.touched <= seenAt) {
		return nil, offs, 0, false
	}
	offs = redisstore.Offsets{Start: p.start, End: p.end}
	if from < p.start {
		return nil, offs, p.ticket, true // below the log start: the fetch answers OFFSET_OUT_OF_RANGE
	}
	return tc.getLocked(k, id, from, p.end, tc.clock), offs, p.ticket, true
}

// now is the cache's clock, to pass to await for a high watermark read after this call.
func (tc *tailCache) now() uint64 {
	if tc == nil {
		return 0
	}
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return tc.clock
}

// covers reports whether the cache holds offset from for topic ID id (and so may answer a read from
// there, depending on the high watermark).
func (tc *tailCache) covers(k partKey, id [16]byte, from int64) bool {
	if tc == nil {
		return false
	}
	tc.mu.Lock()
	defer tc.mu.Unlock()
	p := tc.parts[k]
	return p != nil && p.id == id && from >= p.base && from <= p.end
}

// forget drops a partition (its topic was deleted or recreated here).
func (tc *tailCache) forget(topic string) {
	if tc == nil {
		return
	}
	tc.mu.Lock()
	defer tc.mu.Unlock()
	for k, p := range tc.parts {
		if k.topic == topic {
			tc.drop(k, p)
		}
	}
	for k := range tc.watched {
		if k.topic == topic {
			delete(tc.watched, k)
		}
	}
}

// copyBatch copies recs (they point into the request's buffer, which is reused) into one slab, with
// timestamps as stored (the log append time, when set), and counts their approximate memory size.
func copyBatch(recs []redisstore.Record, logAppendTime int64) tailBatch {
	n, nh := 0, 0
	for i := range recs {
		r := &recs[i]
		n += len(r.Key) + len(r.Value)
		for _, h := range r.Headers {
			n += len(h.Key) + len(h.Value)
		}
		nh += len(r.Headers)
	}
	slab := make([]byte, 0, n)
	var headers []redisstore.Header
	if nh > 0 {
		headers = make([]redisstore.Header, 0, nh)
	}
	out := make([]redisstore.Record, len(recs))
	take := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		from := len(slab)
		slab = append(slab, b...)
		return slab[from:len(slab):len(slab)]
	}
	for i := range recs {
		r := &recs[i]
		c := &out[i]
		c.Timestamp = r.Timestamp
		if logAppendTime != 0 {
			c.Timestamp = logAppendTime
		}
		c.Key, c.Value = take(r.Key), take(r.Value)
		if len(r.Headers) > 0 {
			from := len(headers)
			for _, h := range r.Headers {
				at := len(slab)
				slab = append(slab, h.Key...)
				key := unsafe.String(unsafe.SliceData(slab[at:]), len(h.Key))
				headers = append(headers, redisstore.Header{Key: key, Value: take(h.Value)})
			}
			c.Headers = headers[from:len(headers):len(headers)]
		}
	}
	size := int64(n) + int64(len(recs))*int64(unsafe.Sizeof(redisstore.Record{})) + int64(nh)*int64(unsafe.Sizeof(redisstore.Header{}))
	return tailBatch{out, size}
}
