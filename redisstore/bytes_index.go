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
// stride plus one batch apart. A read with MaxBytes takes the entries whose bytes, interpolated
// between the points around them, come to readLimit(MaxBytes): records of one size are read as their
// count says, and whatever the sizes, a read takes at most readLimit plus the two segments (between
// two points) it starts and ends in.
//
// Points never change once written, so each store caches the runs of them its reads use
// (pointWindow, up to pointWindows per partition), and the points past a run's end are fetched in the
// pipeline of a read nearing it, for the reads after it. A read that no cached run covers (the first
// of a partition, or a reader elsewhere in it) looks its points up first, a round trip more. Past the
// newest point a store knows of, the entries are unknown: the high watermark and total its last read
// of the partition saw are a point too, and entries appended after that read are taken as Count
// allows when it ran at most tailFresh ago (a tailing consumer: what was appended since is what
// producers wrote meanwhile), else at most unknownReadCount of them; a read so cut says so
// (ReadResult.Cut) and the caller reads on. Entries stored before the index (no "bytes" in meta, or
// below the first point) are read as Count says, as before; the bound counts from the first point.

const (
	// bytesIndexStride is the bytes between two points of the bytes index. A point costs the append
	// that adds it a ZADD, once per MiB of records.
	bytesIndexStride = 1 << 20
	// recordOverhead is what a record counts beyond its fields' names and values: its ID, timestamp
	// and the reply's framing, about what an XRANGE reply spends on a record.
	recordOverhead = 64
	// pointsPerFetch is how many points a lookup fetches past a read's offset (32 MiB of records).
	pointsPerFetch = 32
	// pointWindows is how many runs of points a partition's cache keeps: one per reader at a
	// different place in the partition, up to this many.
	pointWindows = 8
	// unknownReadCount is the most entries a read takes past the high watermark of the partition's
	// last read when that read was more than tailFresh ago (a consumer woken after a quiet spell most
	// often finds a record or a few; more are read by the fetch's next read, which looks the points
	// up), or when its points could not be looked up. A lookup per such read would cost a fetch of
	// many quiet partitions a round trip and three commands per partition at every wake-up.
	unknownReadCount = 4
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
// and pts starts with the greatest point at or below origin when there is one (else the offsets below
// pts[0], all of them when pts is empty, were stored before the index).
type pointWindow struct {
	pts        []bytePoint
	origin, hi int64
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

// pointFetch is a lookup of points from offset from on: with the point at or below it and the
// partition's meta hash, before a read (reset: the run it starts replaces one covering from, else the
// one used longest ago), or the points past a run's end, in a read's pipeline.
type pointFetch struct {
	req   int
	from  int64
	reset bool
	pp    *partPoints
	meta  *redis.SliceCmd
	base  *redis.ZSliceCmd
	ahead *redis.ZSliceCmd
}

// partRef names a partition.
type partRef struct {
	topic     string
	partition int32
}

// readBounds caches partPoints by partition.
type readBounds struct {
	mu sync.RWMutex
	m  map[partRef]*partPoints
}

func (b *readBounds) get(topic string, partition int32) *partPoints {
	key := partRef{topic, partition}
	b.mu.RLock()
	pp := b.m[key]
	b.mu.RUnlock()
	if pp != nil {
		return pp
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[partRef]*partPoints{}
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
	s.bounds.mu.Lock()
	defer s.bounds.mu.Unlock()
	for k := range s.bounds.m {
		if k.topic == topic {
			delete(s.bounds.m, k)
		}
	}
}

// readLimit is the bytes (as recordBytes counts them) a read with MaxBytes maxBytes takes, by the
// index's interpolation. Four times maxBytes: a record stores more than it encodes (field names and
// recordOverhead: 180 bytes for a 100-byte value and 8-byte key, which a fetch encodes in 128), and a
// read a caller sized for maxBytes must not be cut in the usual case (a cut read comes back short of
// the fetch's limit and costs a fetch more), with room for records of mixed sizes between two points.
// Plus two strides, for those of the segments a read starts and ends in.
func readLimit(maxBytes int64) int64 { return 4*maxBytes + 2*bytesIndexStride }

// boundNeed is what a read's bound asks for besides.
type boundNeed int

const (
	needNothing boundNeed = iota
	needLookup            // the points around the read's offset, before the read
	needMore              // the points past its run's end, in the read's pipeline
)

// planBounds cuts the Count of each request with MaxBytes to what the bytes index allows (copying reqs
// when one changes, and saying which in cut), looking up first the points of the requests no cached
// run covers, and lists the fetches of points the reads after these need.
func (s *Store) planBounds(ctx context.Context, reqs []ReadRequest) ([]ReadRequest, []pointFetch, []bool) {
	var more, lookups []pointFetch
	counts := make([]int64, len(reqs))
	// A request looked up is bounded again at the same time: a lookup slower than tailFresh leaves
	// its partition read after that time, not stale.
	now := time.Now()
	bound := func(i int, looked bool) {
		r := &reqs[i]
		count := r.count()
		if r.MaxBytes <= 0 || count <= 0 {
			counts[i] = -1
			return
		}
		pp := s.bounds.get(r.Topic, r.Partition)
		n, need, from := pp.bound(r.Offset, count, readLimit(r.MaxBytes), now)
		switch {
		case need == needLookup && !looked:
			lookups = append(lookups, pointFetch{req: i, from: from, reset: true, pp: pp})
		case need == needLookup:
			n = min(count, unknownReadCount) // the lookup failed
		case need == needMore:
			more = append(more, pointFetch{req: i, from: from, pp: pp})
		}
		counts[i] = n
	}
	for i := range reqs {
		bound(i, false)
	}
	if len(lookups) > 0 {
		s.lookUpPoints(ctx, reqs, lookups)
		for _, f := range lookups {
			bound(f.req, true)
		}
	}
	var cut []bool
	for i, n := range counts {
		if n >= 0 && n < reqs[i].count() {
			if cut == nil {
				reqs, cut = append([]ReadRequest(nil), reqs...), make([]bool, len(reqs))
			}
			reqs[i].Count, cut[i] = n, true
		}
	}
	return reqs, more, cut
}

// lookUpPoints runs lookups in one pipeline and keeps what they found.
func (s *Store) lookUpPoints(ctx context.Context, reqs []ReadRequest, lookups []pointFetch) {
	pipe := s.rdb.Pipeline()
	sent := time.Now()
	for i := range lookups {
		f := &lookups[i]
		r := reqs[f.req]
		f.meta = pipe.HMGet(ctx, s.keys.meta(r.Topic, r.Partition), readMetaFields...)
		f.queue(ctx, pipe, s.keys.bindex(r.Topic, r.Partition))
	}
	_, _ = pipe.Exec(ctx)
	for i := range lookups {
		f := &lookups[i]
		v, err := f.meta.Result()
		if err != nil {
			continue
		}
		if next, ok := f.pp.observeMeta(v, sent); ok {
			f.store(next)
		}
	}
}

// bound is how many of count entries from offset from a read takes for their bytes to stay within
// limit, and what it needs besides (and from where).
func (pp *partPoints) bound(from, count, limit int64, now time.Time) (int64, boundNeed, int64) {
	if count <= 1 {
		return count, needNothing, 0 // one record is read whatever its size (KIP-74)
	}
	pp.mu.Lock()
	defer pp.mu.Unlock()
	pp.tick++
	if pp.lastAt.IsZero() {
		return count, needLookup, from
	}
	fresh := now.Sub(pp.lastAt) <= tailFresh
	// tail is the count for a read whose entries below known are within the limit and past it were
	// appended after the last read: all when that read was lately, else unknownReadCount of them.
	tail := func(known int64) int64 {
		if fresh {
			return count
		}
		return min(count, max(known-from, 0)+unknownReadCount)
	}
	if !pp.lastOK {
		return tail(pp.last.offset), needNothing, 0 // below the last read's high watermark: stored before the index
	}
	var w *pointWindow
	for _, c := range pp.wins {
		if from >= c.origin && from <= c.hi && (w == nil || c.used > w.used) {
			w = c
		}
	}
	if w == nil {
		if from >= pp.last.offset {
			return tail(from), needNothing, 0
		}
		return count, needLookup, from
	}
	w.used = pp.tick
	i := sort.Search(len(w.pts), func(j int) bool { return w.pts[j].offset > from }) - 1
	start := from
	if i < 0 {
		if len(w.pts) == 0 {
			return count, needNothing, 0 // no point in the run: stored before the index
		}
		// The entries below the index's first point are read as count says; the bound counts from it.
		start, i = w.pts[0].offset, 0
	}
	if i >= 2*pointsPerFetch {
		w.pts = append([]bytePoint(nil), w.pts[i:]...)
		w.origin, i = w.pts[0].offset, 0
	}
	within := func(end int64) int64 { return min(count, max(end-from, 1)) }
	most := w.pts[i].bytes + limit
	if i+1 < len(w.pts) {
		most = interpolate(w.pts[i], w.pts[i+1], start) + limit
	}
	for j := i + 1; j < len(w.pts); j++ {
		if p := w.pts[j]; p.bytes > most {
			q := w.pts[j-1]
			return within(q.offset + int64(float64(most-q.bytes)*float64(p.offset-q.offset)/float64(p.bytes-q.bytes))), needNothing, 0
		}
	}
	// Every point of the run fits; so do the entries up to hi, less than a stride past the last.
	switch {
	case pp.last.offset > w.hi && pp.last.bytes > most:
		return within(w.hi), needMore, w.hi
	case pp.last.offset > w.hi:
		return tail(pp.last.offset), needMore, w.hi
	}
	return tail(w.hi), needNothing, 0
}

// interpolate is the bytes below offset o, between points p and q, as if their records were of one
// size.
func interpolate(p, q bytePoint, o int64) int64 {
	return p.bytes + int64(float64(o-p.offset)*float64(q.bytes-p.bytes)/float64(q.offset-p.offset))
}

// readMetaFields are the fields of a partition's meta hash a read gets: its offsets (parseOffsets) and
// its total bytes (observeMeta).
var readMetaFields = []string{"next", "start", "bytes"}

// observeMeta records what a read sent at sent found in the partition's meta hash (readMetaFields),
// and returns its high watermark and whether the partition is counted.
func (pp *partPoints) observeMeta(v []any, sent time.Time) (next int64, counted bool) {
	if len(v) != len(readMetaFields) {
		return 0, false
	}
	bytes, counted := v[2].(string)
	next = parseOffsets(v).End
	pp.observe(next, anyInt(bytes), counted, sent)
	return next, counted
}

// observe records the meta hash a read sent at sent found: high watermark next, and the partition's
// total bytes when ok. A high watermark below the last one, seen by a read sent after the one that saw
// that, is a partition that lost records (a failover) or a topic created again: what was known of it
// goes.
func (pp *partPoints) observe(next, bytes int64, ok bool, sent time.Time) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	newer := !sent.Before(pp.lastAt)
	switch {
	case pp.lastAt.IsZero():
	case ok != pp.lastOK && newer:
		pp.wins = nil // counted from now on, or no longer: runs built before hold none or stale points
	case next < pp.last.offset && newer:
		pp.wins = nil
	case next < pp.last.offset, ok != pp.lastOK:
		return // an older read's
	}
	pp.last, pp.lastOK = bytePoint{next, bytes}, ok
	if newer {
		pp.lastAt = sent
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

// store records what f fetched; next is the high watermark read before it in the same pipeline, whose
// meta hash had a total (an index without it may still lack its first point).
func (f *pointFetch) store(next int64) {
	if (f.base != nil && f.base.Err() != nil && f.base.Err() != redis.Nil) || (f.ahead.Err() != nil && f.ahead.Err() != redis.Nil) {
		return
	}
	ahead := points(f.ahead.Val())
	hi := max(next, f.from)
	if f.reset {
		hi = next // a lookup past the high watermark knows no point there: they come later
	}
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
	w.pts = ahead
	if base := points(f.base.Val()); len(base) == 1 {
		w.pts, w.origin = append(base, ahead...), base[0].offset
	}
	// It replaces a run covering its offset (the same reader's, gone stale), else the one used
	// longest ago once there are pointWindows.
	replace := -1
	for i, c := range pp.wins {
		if f.from >= c.origin && f.from <= c.hi {
			replace = i
			break
		}
	}
	if replace < 0 && len(pp.wins) < pointWindows {
		pp.wins = append(pp.wins, w)
		return
	}
	if replace < 0 {
		replace = 0
		for i, c := range pp.wins {
			if c.used < pp.wins[replace].used {
				replace = i
			}
		}
	}
	pp.wins[replace] = w
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
