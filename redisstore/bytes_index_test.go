package redisstore

import (
	"bytes"
	"testing"
	"time"
)

// TestReadBoundedByBytes: a run of large records after many small ones. A read sized for the small
// ones (10,000 entries for 1 MiB) takes no more than the bytes index allows, on every store and both
// append paths; the index has its first point at 0, a point per stride, the meta hash the running total,
// and DeleteRecords keeps one point below the new log start offset.
func TestReadBoundedByBytes(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "mixed", 1)
		small := make([]Record, 2000)
		var total int64
		for i := range small {
			small[i].Value = bytes.Repeat([]byte{'s'}, 100)
			total += recordBytes(&small[i])
		}
		appendOne(t, s, "mixed", 0, small[:1000]...)
		appendOne(t, s, "mixed", 0, small[1000:]...)
		const large, largeSize = 64, 256 << 10
		for range large {
			r := Record{Value: bytes.Repeat([]byte{'L'}, largeSize)}
			total += recordBytes(&r)
			appendOne(t, s, "mixed", 0, r)
		}
		meta, err := s.Client().HGet(ctx, s.keys.meta("mixed", 0), "bytes").Int64()
		if err != nil || meta != total {
			t.Fatalf("meta bytes = %d, %v; want %d", meta, err, total)
		}
		pts := indexPoints(t, s, "mixed", 0)
		if len(pts) != int(total/bytesIndexStride)+1 || pts[0] != (bytePoint{0, 0}) {
			t.Fatalf("bytes index %v for %d bytes, want (0, 0) and a point per %d", pts, total, bytesIndexStride)
		}
		for i := 1; i < len(pts); i++ {
			if pts[i].bytes/bytesIndexStride != int64(i) || pts[i].offset <= pts[i-1].offset {
				t.Fatalf("bytes index %v: point %d not the first past %d strides", pts, i, i)
			}
		}

		read := func(offset, maxBytes int64) ReadResult {
			t.Helper()
			res := s.Read(ctx, []ReadRequest{{Topic: "mixed", Partition: 0, Offset: offset, Count: 10000, MaxBytes: maxBytes}})[0]
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			return res
		}
		// Unknown sizes: a few entries, and the points for the next read.
		if first := read(1990, 1<<20); len(first.Records) != unknownReadCount {
			t.Fatalf("first read took %d records, want %d (sizes unknown)", len(first.Records), unknownReadCount)
		}
		res := read(1990, 1<<20)
		got := int64(0)
		for i := range res.Records {
			got += recordBytes(&res.Records[i])
		}
		if len(res.Records) == 0 || res.Records[0].Offset != 1990 {
			t.Fatalf("bounded read from 1990 found %d records", len(res.Records))
		}
		if most := readLimit(1<<20) + largeSize; got > most || len(res.Records) >= 2000+large-1990 {
			t.Fatalf("bounded read took %d records, %d bytes; want at most %d bytes, fewer than all %d", len(res.Records), got, most, 2000+large-1990)
		}
		// Without a limit the same read takes them all.
		if all := s.Read(ctx, []ReadRequest{{Topic: "mixed", Partition: 0, Offset: 1990, Count: 10000}})[0]; len(all.Records) != 2000+large-1990 {
			t.Fatalf("unbounded read took %d records, want %d", len(all.Records), 2000+large-1990)
		}

		if _, err := s.DeleteRecords(ctx, "mixed", 0, 2010); err != nil {
			t.Fatal(err)
		}
		below := 0
		for _, p := range indexPoints(t, s, "mixed", 0) {
			if p.offset < 2010 {
				below++
			}
		}
		if below != 1 {
			t.Fatalf("after DeleteRecords to 2010: %d bytes index points below it, want 1", below)
		}
	})
}

func indexPoints(t *testing.T, s *Store, topic string, p int32) []bytePoint {
	t.Helper()
	zs, err := s.Client().ZRangeWithScores(t.Context(), s.keys.bindex(topic, p), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	return points(zs)
}

// TestPartPointsBound covers the cases of bound one by one: never read, stored before the index, a
// window's points, the tail past the newest point (fresh and not), and a read below the first point.
func TestPartPointsBound(t *testing.T) {
	now := time.Now()
	const mib = 1 << 20
	limit := int64(3 * mib)
	check := func(name string, pp *partPoints, from, want int64, wantFetch bool) {
		t.Helper()
		n, fetch, _, _ := pp.bound(from, 10000, limit, now)
		if n != want || fetch != wantFetch {
			t.Errorf("%s: bound(%d) = %d, fetch %v; want %d, %v", name, from, n, fetch, want, wantFetch)
		}
	}
	check("never read", &partPoints{}, 0, unknownReadCount, true)
	check("stored before the index", &partPoints{lastAt: now, last: bytePoint{500, 0}}, 0, 10000, false)

	// Points every 100 entries of 1 MiB each from offset 1000 on; the partition read just now, up to
	// offset 2000.
	win := func() *pointWindow {
		w := &pointWindow{origin: 1000, hi: 2000}
		for o := int64(1000); o <= 2000; o += 100 {
			w.pts = append(w.pts, bytePoint{o, (o - 1000) / 100 * mib})
		}
		return w
	}
	fresh := func() *partPoints {
		return &partPoints{wins: []*pointWindow{win()}, last: bytePoint{2000, 10 * mib}, lastOK: true, lastAt: now}
	}
	check("window", fresh(), 1050, 1300-1050, false) // base 1000, 3 MiB past it: the point at 1300
	check("window, on a point", fresh(), 1100, 1400-1100, false)
	check("tail, read lately", fresh(), 1900, 10000, false)
	stale := fresh()
	stale.lastAt = now.Add(-time.Second)
	check("tail, read long ago", stale, 1900, 2000+unknownReadCount-1900, false)
	check("no window for the offset", fresh(), 500, unknownReadCount, true)
	noBase := fresh()
	noBase.wins[0].origin, noBase.wins[0].noBase = 0, true
	check("below the index's first point", noBase, 500, 10000, false)

	// A point past the window, known from the last read, and beyond the limit: up to hi, and a fetch
	// of the points between.
	ahead := fresh()
	ahead.wins[0].pts, ahead.wins[0].hi = ahead.wins[0].pts[:3], 1200
	ahead.last = bytePoint{5000, 40 * mib}
	check("window short of the limit", ahead, 1000, 1200-1000, true)

	// A segment larger than the limit: one entry.
	huge := fresh()
	huge.wins[0].pts = []bytePoint{{1000, 0}, {1001, 5 * mib}}
	huge.wins[0].hi = 1001
	check("one batch past the limit", huge, 1000, 1, false)

	// A read's meta hash: a newer high watermark moves the last point; an older one does not.
	pp := fresh()
	pp.observe(2500, 15*mib, true, now)
	pp.observe(2100, 11*mib, true, now)
	if pp.last != (bytePoint{2500, 15 * mib}) {
		t.Errorf("after observing 2500 then 2100: last %+v", pp.last)
	}
	pp.observe(2600, 0, false, now)
	if pp.lastOK || pp.wins != nil {
		t.Errorf("meta without bytes: lastOK %v, %d windows kept", pp.lastOK, len(pp.wins))
	}
}

func TestForgetReadBounds(t *testing.T) {
	s := &Store{keys: keys{ns: "kg"}}
	for _, topic := range []string{"a", "a:1", "b"} {
		for p := range int32(3) {
			s.bounds.get(s.keys.stream(topic, p))
		}
	}
	s.ForgetReadBounds("a")
	var left []string
	for k := range s.bounds.m {
		left = append(left, k)
	}
	if len(left) != 6 {
		t.Fatalf("after forgetting a: %v", left)
	}
	for _, k := range left {
		if k == s.keys.stream("a", 0) || k == s.keys.stream("a", 2) {
			t.Fatalf("after forgetting a: %v", left)
		}
	}
}
