package redisstore

import (
	"context"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The bytes index bounds a read by bytes. XRANGE takes a number of entries, not of bytes, and a caller
// sizing that number from the records it saw lately (the gateway's fetch sizing) pulls that many of
// whatever records come next: after a long run of 100-byte records, one 1 MiB fetch of a run of 1 MiB
// records asked for 10,000 entries, 10 GB, built in Redis's output buffer and read into the gateway.
//
// Every append adds its batch's bytes (recordBytes) to the partition's running total, "bytes" in its
// meta hash, and, when the total passes a multiple of bytesIndexStride, adds a point to the partition's
// bytes index: member the total, score the offset after the batch (the bytes of every record below the
// offset). The first append counted adds a point (its base offset, 0). So two points lie less than a
// stride plus one batch apart. A read with MaxBytes is cut at the last point within MaxBytes plus
// two strides of the point at or below its offset (readBound).
//
// Points never change once written, so each store caches those its reads use (partPoints), fetched in
// the pipeline of a read that lacked them, for the reads after it. Past the newest point a store knows
// of, the entries are unknown: the high watermark and total its last read of the partition saw are
// a point too, and entries appended after that read are taken as Count allows when it ran at most
// tailFresh ago (a tailing consumer: what was appended since is what producers wrote meanwhile), and
// as at most unknownReadCount otherwise. A read of a partition this store never read, or from an
// offset no cached window covers, is cut to unknownReadCount entries and fetches the points for the
// next. Entries stored before the index (no "bytes" in meta, or below the first point) are read as
// Count says, as before.

const (
	// bytesIndexStride is the bytes between two points of the bytes index. A point costs the append
	// that adds it a ZADD (5-8 us of Redis time), once per MiB of records.
	bytesIndexStride = 1 << 20
	// recordOverhead is what a record counts beyond its fields' names and values: its ID, timestamp
	// and the reply's framing, about what an XRANGE reply spends on a record.
	recordOverhead = 64
	// pointsPerFetch is how many points a read fetches for the reads after it (32 MiB of records).
	pointsPerFetch = 32
	// pointWindows is how many runs of points a partition's cache keeps: one per reader at a
	// different place in the partition, up to this many.
	pointWindows = 4
	// unknownReadCount is the most entries a read of unknown sizes takes.
	unknownReadCount = 32
	// tailFresh is how old the last read of a partition may be for the entries appended since to be
	// read as Count allows.
	tailFresh = 100 * time.Millisecond
)

// recordBytes is what a record adds to its partition's bytes: the names and values of its stream
// fields after "ts", and recordOverhead. appendScript counts the same from its arguments.
func recordBytes(r *Record) int64 {
	n := int64(recordOverhead)
	if r.Key != nil {
		n += int64(len(fieldKey) + len(r.Key))
	}
	if r.Value != nil {
		n += int64(len(fieldValue) + len(r.Value))
	}
	for _, h := range r.Headers {
		if h.Value == nil {
			n += int64(len("hn:") + len(h.Key))
		} else {
			n += int64(len("h:") + len(h.Key) + len(h.Value))
		}
	}
	return n
}

// bytePoint says the records below offset take bytes.
type bytePoint struct{ offset, bytes int64 }

// pointWindow is a run of the index's points: every point with an offset from origin to hi is in pts,
// and pts starts with the greatest point at or below origin, unless noBase: there is none, and the
// offsets below pts[0] (all of them, when pts is empty) were stored before the index.
type pointWindow struct {
	pts        []bytePoint
	origin, hi int64
	noBase     bool
	used       int64 // partPoints.tick at the last read it bounded
}

// partPoints is what a store knows of one partition's bytes index.
type partPoints struct {
	mu   sync.Mutex
	wins []*pointWindow
	// last is the high watermark and total bytes the newest read of the partition saw (lastOK: its
	// meta hash had a total), at lastAt (when that read was sent; zero: never read).
	last   bytePoint
	lastOK bool
	lastAt time.Time
	tick   int64
}

// pointFetch is a read's fetch of points for the reads after it: from offset from on, with the point at
// or below it when reset.
type pointFetch struct {
	req   int
	from  int64
	reset bool
	pp    *partPoints
	base  *redis.ZSliceCmd
	ahead *redis.ZSliceCmd
}

// readBounds caches partPoints by partition stream key.
type readBounds struct {
	mu sync.RWMutex
	m  map[string]*partPoints
}

func (b *readBounds) get(key string) *partPoints {
	b.mu.RLock()
	pp := b.m[key]
	b.mu.RUnlock()
	if pp != nil {
		return pp
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[string]*partPoints{}
	}
	if pp = b.m[key]; pp == nil {
		pp = &partPoints{}
		b.m[key] = pp
	}
	return pp
}

// ForgetReadBounds drops what the store knows of topic's bytes indexes: the topic was deleted or
// created again, and its points are another partition's.
func (s *Store) ForgetReadBounds(topic string) {
	prefix := s.keys.stream(topic, 0)
	prefix = prefix[:len(prefix)-len("0}")]
	s.bounds.mu.Lock()
	defer s.bounds.mu.Unlock()
	for k := range s.bounds.m {
		if len(k) > len(prefix) && k[:len(prefix)] == prefix {
			if _, err := strconv.Atoi(k[len(prefix) : len(k)-1]); err == nil {
				delete(s.bounds.m, k)
			}
		}
	}
}

// readLimit is the most bytes (as recordBytes counts them) a read with MaxBytes maxBytes takes past the
// point at or below its offset. Four times maxBytes: a record stores more than it encodes (field
// names and recordOverhead: 180 bytes for a 100-byte value and 8-byte key, which a fetch encodes in
// 128), and the reads a caller sizes for maxBytes must not be cut in the usual case; a cut read comes
// back short of the fetch's limit and costs a fetch more. Plus two strides: the offset may lie up to a
// stride and a batch past the point, and the last point within the limit up to that much before it.
func readLimit(maxBytes int64) int64 { return 4*maxBytes + 2*bytesIndexStride }

// planBounds cuts the Count of each request with MaxBytes to what the bytes index allows (copying reqs
// when one changes) and lists the fetches of points the reads after these need.
func (s *Store) planBounds(reqs []ReadRequest) ([]ReadRequest, []pointFetch) {
	var fetches []pointFetch
	copied := false
	for i := range reqs {
		r := &reqs[i]
		count := r.count()
		if r.MaxBytes <= 0 || count <= 0 {
			continue
		}
		pp := s.bounds.get(s.keys.stream(r.Topic, r.Partition))
		n, fetch, from, reset := pp.bound(r.Offset, count, readLimit(r.MaxBytes), time.Now())
		if n < count {
			if !copied {
				reqs, copied = append([]ReadRequest(nil), reqs...), true
				r = &reqs[i]
			}
			r.Count = n
		}
		if fetch {
			fetches = append(fetches, pointFetch{req: i, from: from, reset: reset, pp: pp})
		}
	}
	return reqs, fetches
}

// bound is how many of count entries from offset from a read takes for their bytes to stay within
// limit, and whether (and from where) the read fetches points.
func (pp *partPoints) bound(from, count, limit int64, now time.Time) (n int64, fetch bool, fetchFrom int64, reset bool) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	pp.tick++
	if pp.lastAt.IsZero() {
		return min(count, unknownReadCount), true, from, true
	}
	if !pp.lastOK {
		return count, false, 0, false // stored before the index
	}
	var w *pointWindow
	for _, c := range pp.wins {
		if from >= c.origin && from <= c.hi && (w == nil || c.used > w.used) {
			w = c
		}
	}
	fresh := now.Sub(pp.lastAt) <= tailFresh
	if w == nil {
		if from >= pp.last.offset && fresh {
			return count, false, 0, false // the tail, read lately
		}
		return min(count, unknownReadCount), true, from, true
	}
	w.used = pp.tick
	i := sort.Search(len(w.pts), func(j int) bool { return w.pts[j].offset > from }) - 1
	if i < 0 {
		return count, false, 0, false // below the index's first point
	}
	if i >= 2*pointsPerFetch {
		w.pts = append([]bytePoint(nil), w.pts[i:]...)
		w.origin, w.noBase, i = w.pts[0].offset, false, 0
	}
	most := w.pts[i].bytes + limit
	within := func(end int64) int64 { return min(count, max(end-from, 1)) }
	for j := i + 1; j < len(w.pts); j++ {
		if w.pts[j].bytes > most {
			if j == i+1 {
				return 1, false, 0, false
			}
			return within(w.pts[j-1].offset), false, 0, false
		}
	}
	// Every point of the window fits; so do the entries up to hi, less than a stride past the last.
	extend := pp.last.offset > w.hi
	switch {
	case pp.last.offset > w.hi && pp.last.bytes > most:
		return within(w.hi), extend, w.hi, false
	case fresh:
		return count, extend, w.hi, false
	}
	return within(max(w.hi, pp.last.offset) + unknownReadCount), extend, w.hi, false
}

// observe records the meta hash a read sent at sent found: high watermark next, and the partition's
// total bytes when ok.
func (pp *partPoints) observe(next, bytes int64, ok bool, sent time.Time) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.lastAt.IsZero() || next >= pp.last.offset || ok != pp.lastOK {
		if !ok {
			pp.wins = nil
		}
		pp.last, pp.lastOK = bytePoint{next, bytes}, ok
		if sent.After(pp.lastAt) {
			pp.lastAt = sent
		}
	}
}

// queue adds f's point queries to pipe.
func (f *pointFetch) queue(ctx context.Context, pipe redis.Pipeliner, key string) {
	from := strconv.FormatInt(f.from, 10)
	if f.reset {
		f.base = pipe.ZRevRangeByScoreWithScores(ctx, key, &redis.ZRangeBy{Max: from, Min: "-inf", Count: 1})
	}
	f.ahead = pipe.ZRangeByScoreWithScores(ctx, key, &redis.ZRangeBy{Min: "(" + from, Max: "+inf", Count: pointsPerFetch})
}

// store records what f fetched; next is the high watermark read before it in the same pipeline.
func (f *pointFetch) store(next int64) {
	if (f.base != nil && f.base.Err() != nil && f.base.Err() != redis.Nil) || (f.ahead.Err() != nil && f.ahead.Err() != redis.Nil) {
		return
	}
	ahead := points(f.ahead.Val())
	hi := max(next, f.from)
	if len(ahead) == pointsPerFetch {
		hi = ahead[len(ahead)-1].offset
	} else if len(ahead) > 0 {
		hi = max(hi, ahead[len(ahead)-1].offset)
	}
	pp := f.pp
	pp.mu.Lock()
	defer pp.mu.Unlock()
	pp.tick++
	if !f.reset {
		for _, w := range pp.wins {
			if w.hi == f.from {
				w.pts = append(w.pts, ahead...)
				w.hi = hi
				return
			}
		}
		return
	}
	w := &pointWindow{hi: hi, used: pp.tick}
	if base := points(f.base.Val()); len(base) == 1 {
		w.pts, w.origin = append(base, ahead...), base[0].offset
	} else {
		w.pts, w.noBase = ahead, true
	}
	if len(pp.wins) < pointWindows {
		pp.wins = append(pp.wins, w)
		return
	}
	oldest := 0
	for i, c := range pp.wins {
		if c.used < pp.wins[oldest].used {
			oldest = i
		}
	}
	pp.wins[oldest] = w
}

func points(zs []redis.Z) []bytePoint {
	out := make([]bytePoint, 0, len(zs))
	for _, z := range zs {
		m, _ := z.Member.(string)
		b, err := strconv.ParseInt(m, 10, 64)
		if err != nil {
			continue
		}
		out = append(out, bytePoint{offset: int64(z.Score), bytes: b})
	}
	return out
}
