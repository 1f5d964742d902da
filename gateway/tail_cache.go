package gateway

import (
	"sync"
	"unsafe"

	"github.com/kgate/kgate/redisstore"
)

// tailCache keeps, per partition, copies of the records this gateway appended last, so a consumer
// reading at the end of a partition (the common case: consumers keep up) is answered from memory:
// the fetch still reads the partition's offsets from Redis (one HMGET), but not the entries, whose
// reply parsing is most of what a fetch costs the gateway. Records are immutable once Redis stored
// them, so a copy taken after the append succeeded stays right; the fetch takes records from the
// cache only when it holds every offset from the fetch offset to the high watermark just read (an
// append by another gateway leaves a gap, and the fetch reads Redis), for the same topic ID (a topic
// deleted and created again under its name starts over; so does a cache reaching past the high
// watermark, which never goes back within one topic). Entries deleted with DeleteRecords or
// retention fall below the fresh log start offset and are never returned; entries deleted natively
// with XDEL may still be served from the cache while it holds them.
//
// Memory is bounded: each partition keeps at most perPart bytes (its newest records), and when the
// whole cache passes max bytes the partitions appended to longest ago are dropped.
type tailCache struct {
	mu      sync.Mutex
	parts   map[partKey]*tailPart
	bytes   int64
	max     int64
	perPart int64
	clock   uint64
}

// tailPart is one partition's newest records: recs[i] has offset base+i.
type tailPart struct {
	id      [16]byte
	base    int64
	recs    []redisstore.Record
	sizes   []int64 // bytes of each record (to trim from the front)
	bytes   int64
	touched uint64
}

func newTailCache(max int64) *tailCache {
	if max <= 0 {
		return nil
	}
	return &tailCache{parts: map[partKey]*tailPart{}, max: max, perPart: min(max, 1<<20)}
}

// add records an accepted batch: recs (timestamps as stored) at offsets base, base+1, ... The records
// are copied: they point into the request's buffer, which is reused.
func (tc *tailCache) add(k partKey, id [16]byte, base int64, recs []redisstore.Record, logAppendTime int64) {
	if tc == nil || len(recs) == 0 {
		return
	}
	copied, sizes, total := copyRecords(recs, base, logAppendTime)
	tc.mu.Lock()
	defer tc.mu.Unlock()
	tc.clock++
	p := tc.parts[k]
	if p == nil || p.id != id || p.base+int64(len(p.recs)) != base {
		// New, recreated, or not contiguous (another gateway appended in between): start over.
		if p != nil {
			tc.bytes -= p.bytes
		}
		p = &tailPart{id: id, base: base}
		tc.parts[k] = p
	}
	p.recs = append(p.recs, copied...)
	p.sizes = append(p.sizes, sizes...)
	p.bytes += total
	tc.bytes += total
	p.touched = tc.clock
	// Trim the oldest records beyond the partition's share (always keeping the newest batch whole).
	drop := 0
	for p.bytes > tc.perPart && len(p.recs)-drop > len(copied) {
		p.bytes -= p.sizes[drop]
		tc.bytes -= p.sizes[drop]
		drop++
	}
	if drop > 0 {
		p.recs, p.sizes, p.base = p.recs[drop:], p.sizes[drop:], p.base+int64(drop)
	}
	for tc.bytes > tc.max && len(tc.parts) > 1 {
		tc.evictOldest(k)
	}
}

// evictOldest drops the partition appended to longest ago, other than keep.
func (tc *tailCache) evictOldest(keep partKey) {
	var (
		oldest partKey
		at     uint64
		found  bool
	)
	for k, p := range tc.parts {
		if k != keep && (!found || p.touched < at) {
			oldest, at, found = k, p.touched, true
		}
	}
	if found {
		tc.bytes -= tc.parts[oldest].bytes
		delete(tc.parts, oldest)
	}
}

// get returns the records of offsets [from, to) when the cache holds all of them for topic ID id
// (an empty, non-nil slice when from == to and the cache reaches from), else nil. to is the high
// watermark just read: a cache reaching past it holds records Redis does not have (a topic deleted
// and created again, or writes a failover lost) and is dropped, since a high watermark never goes back.
func (tc *tailCache) get(k partKey, id [16]byte, from, to int64) []redisstore.Record {
	if tc == nil || to < from {
		return nil
	}
	tc.mu.Lock()
	defer tc.mu.Unlock()
	p := tc.parts[k]
	if p == nil {
		return nil
	}
	if end := p.base + int64(len(p.recs)); end > to {
		tc.bytes -= p.bytes
		delete(tc.parts, k)
		return nil
	}
	if p.id != id || from < p.base || to > p.base+int64(len(p.recs)) {
		return nil
	}
	// The slice is never written below its length again (appends go past it, trims reslice), so the
	// caller may read it after the lock is released.
	return p.recs[from-p.base : to-p.base : to-p.base]
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
	return p != nil && p.id == id && from >= p.base && from <= p.base+int64(len(p.recs))
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
			tc.bytes -= p.bytes
			delete(tc.parts, k)
		}
	}
}

// copyRecords copies recs into one slab, with offsets from base and, when set, the log append time.
func copyRecords(recs []redisstore.Record, base, logAppendTime int64) ([]redisstore.Record, []int64, int64) {
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
	headers := make([]redisstore.Header, 0, nh)
	out := make([]redisstore.Record, len(recs))
	sizes := make([]int64, len(recs))
	var total int64
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
		c.Offset, c.Timestamp = base+int64(i), r.Timestamp
		if logAppendTime != 0 {
			c.Timestamp = logAppendTime
		}
		c.Key, c.Value = take(r.Key), take(r.Value)
		size := int64(64 + len(r.Key) + len(r.Value))
		if len(r.Headers) > 0 {
			from := len(headers)
			for _, h := range r.Headers {
				from := len(slab)
				slab = append(slab, h.Key...)
				key := unsafe.String(unsafe.SliceData(slab[from:]), len(h.Key))
				headers = append(headers, redisstore.Header{Key: key, Value: take(h.Value)})
				size += int64(32 + len(h.Key) + len(h.Value))
			}
			c.Headers = headers[from:len(headers):len(headers)]
		}
		sizes[i] = size
		total += size
	}
	return out, sizes, total
}
