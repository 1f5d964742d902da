package redisstore

import (
	"bytes"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kgate/kgate/internal/redistest"
)

// TestReadBoundedByBytes: a run of large records after many small ones. A read sized for the small
// ones (10,000 entries for 1 MiB) takes no more than the bytes index allows, on every store and both
// append paths; the index has its first point at 0, a point per stride, the meta hash the running total,
// and DeleteRecords keeps one point below the new log start offset.
func TestReadBoundedByBytes(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "mixed", 1)
		small := valued(2000, 100)
		total := readBytes(small)
		appendOne(t, s, "mixed", 0, small[:1000]...)
		appendOne(t, s, "mixed", 0, small[1000:]...)
		const large, largeSize = 64, 256 << 10
		for range large {
			r := valued(1, largeSize)
			total += readBytes(r)
			appendOne(t, s, "mixed", 0, r...)
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
		// The first read looks the points up, and takes no more than the later ones.
		for k := range 3 {
			res := read(1990, 1<<20)
			got := readBytes(res.Records)
			if len(res.Records) == 0 || res.Records[0].Offset != 1990 {
				t.Fatalf("bounded read %d from 1990 found %d records", k, len(res.Records))
			}
			// The limit, and the segment the read ends in (a stride and a record).
			if most := readLimit(1<<20) + bytesIndexStride + largeSize; got > most || len(res.Records) >= 2000+large-1990 {
				t.Fatalf("bounded read %d took %d records, %d bytes; want at most %d bytes, fewer than all %d", k, len(res.Records), got, most, 2000+large-1990)
			}
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
// run's points (interpolated between them), the tail past the newest point (fresh and not), a read
// below the first point, a run short of the limit, one batch larger than the limit.
func TestPartPointsBound(t *testing.T) {
	now := time.Now()
	const mib = 1 << 20
	limit := int64(3 * mib)
	check := func(name string, pp *partPoints, from, want int64, wantNeed boundNeed) {
		t.Helper()
		n, need, _ := pp.bound(from, 10000, limit, now)
		if need == needLookup {
			n = -1
		}
		if n != want || need != wantNeed {
			t.Errorf("%s: bound(%d) = %d, need %d; want %d, %d", name, from, n, need, want, wantNeed)
		}
	}
	check("never read", &partPoints{}, 0, -1, needLookup)
	if n, need, _ := (&partPoints{}).bound(0, 1, limit, now); n != 1 || need != needNothing {
		t.Errorf("never read, one entry: %d, need %d; want 1, none", n, need)
	}
	check("stored before the index", &partPoints{lastAt: now, last: bytePoint{500, 0}}, 0, 10000, needNothing)
	check("stored before the index, appended since long ago", &partPoints{lastAt: now.Add(-time.Second), last: bytePoint{500, 0}}, 450, 50+unknownReadCount, needNothing)

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
	check("run", fresh(), 1050, 1350-1050, needNothing) // 0.5 MiB below 1050, 3.5 MiB below 1350
	check("run, on a point", fresh(), 1100, 1400-1100, needNothing)
	check("tail, read lately", fresh(), 1900, 10000, needNothing)
	stale := fresh()
	stale.lastAt = now.Add(-time.Second)
	check("tail, read long ago", stale, 1900, 2000+unknownReadCount-1900, needNothing)
	check("past the tail, read long ago", stale, 2000, unknownReadCount, needNothing)
	check("no run for the offset", fresh(), 500, -1, needLookup)
	noBase := fresh()
	noBase.wins[0].origin = 0 // no point at or below it
	// Below the index's first point (1000): those entries as count says, and 3 MiB from the point on.
	check("below the index's first point", noBase, 500, 1300-500, needNothing)

	// A point past the run, known from the last read, and beyond the limit: up to hi, and the points
	// between fetched in the read's pipeline.
	ahead := fresh()
	ahead.wins[0].pts, ahead.wins[0].hi = ahead.wins[0].pts[:3], 1200
	ahead.last = bytePoint{5000, 40 * mib}
	check("run short of the limit", ahead, 1000, 1200-1000, needMore)

	// One batch of 8,000 records of 1,000 bytes: reads inside it take their share, not one record.
	big := fresh()
	big.wins[0].pts = []bytePoint{{1000, 0}, {9000, 8000 * 1000}}
	big.wins[0].hi, big.last = 9000, bytePoint{9000, 8000 * 1000}
	check("inside one large batch", big, 2000, limit/1000, needNothing)
	// One record larger than the limit: that record.
	huge := fresh()
	huge.wins[0].pts = []bytePoint{{1000, 0}, {1001, 5 * mib}}
	huge.wins[0].hi = 1001
	check("one record past the limit", huge, 1000, 1, needNothing)

	// A read's meta hash: a newer high watermark moves the last point; an older read's does not; a
	// lower one seen by a newer read (a partition that lost records) drops the runs.
	pp := fresh()
	pp.observe(2500, 15*mib, true, now)
	pp.observe(2100, 11*mib, true, now.Add(-time.Millisecond))
	if pp.last != (bytePoint{2500, 15 * mib}) || len(pp.wins) != 1 {
		t.Errorf("after observing 2500, then 2100 from an older read: last %+v, %d runs", pp.last, len(pp.wins))
	}
	pp.observe(2100, 11*mib, true, now.Add(time.Millisecond))
	if pp.last != (bytePoint{2100, 11 * mib}) || pp.wins != nil {
		t.Errorf("after observing 2100 from a newer read: last %+v, %d runs", pp.last, len(pp.wins))
	}
	pp = fresh()
	pp.observe(2600, 0, false, now)
	if pp.lastOK || pp.wins != nil {
		t.Errorf("meta without bytes: lastOK %v, %d runs kept", pp.lastOK, len(pp.wins))
	}
	pp.observe(2600, 12*mib, true, now.Add(-time.Millisecond))
	if pp.lastOK {
		t.Errorf("an older read's meta with bytes after a newer one's without: counted")
	}
}

func TestForgetReadBounds(t *testing.T) {
	s := &Store{}
	for _, topic := range []string{"a", "a:1", "b"} {
		for p := range int32(3) {
			s.bounds.get(topic, p)
		}
	}
	s.ForgetReadBounds("a")
	var left []partRef
	for k := range s.bounds.m {
		left = append(left, k)
	}
	if len(left) != 6 {
		t.Fatalf("after forgetting a: %v", left)
	}
	for _, k := range left {
		if k.topic == "a" {
			t.Fatalf("after forgetting a: %v", left)
		}
	}
}

// valued is n records whose values are size bytes each.
func valued(n, size int) []Record {
	recs := make([]Record, n)
	for i := range recs {
		recs[i].Value = bytes.Repeat([]byte{'v'}, size)
	}
	return recs
}

// readBytes is what records count in the bytes index.
func readBytes(recs []Record) int64 {
	n := int64(0)
	for i := range recs {
		n += recordBytes(&recs[i])
	}
	return n
}

// TestReadBoundAtFirstAppend: a consumer polled the empty partition at 0 before its producer wrote a
// run of large records: reads from 0 are bounded (the index's first point, added after that poll, sits
// at the offset the poll saw as the high watermark), as they are after the index began on a partition
// written before it (bogus points a deleted topic's earlier incarnation left are dropped).
func TestReadBoundAtFirstAppend(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "fresh", 1)
		// Points of an earlier topic of the name, deleted by a gateway that did not know the index.
		if err := s.Client().ZAdd(ctx, s.keys.bindex("fresh", 0), redis.Z{Score: 5, Member: "99999999"}).Err(); err != nil {
			t.Fatal(err)
		}
		const maxBytes, largeSize = 64 << 10, 256 << 10
		read := func(off int64) ReadResult {
			t.Helper()
			res := s.Read(ctx, []ReadRequest{{Topic: "fresh", Partition: 0, Offset: off, Count: 10000, MaxBytes: maxBytes}})[0]
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			return res
		}
		read(0)
		for range 64 {
			appendOne(t, s, "fresh", 0, valued(1, largeSize)...)
		}
		if pts := indexPoints(t, s, "fresh", 0); pts[0] != (bytePoint{0, 0}) || len(pts) != 17 {
			t.Fatalf("bytes index %v, want (0, 0) and a point per MiB", pts)
		}
		time.Sleep(tailFresh + 50*time.Millisecond)
		most := readLimit(maxBytes) + bytesIndexStride + largeSize
		for k := range 3 {
			if res := read(0); readBytes(res.Records) > most || len(res.Records) == 0 {
				t.Fatalf("read %d from 0: %d records, %d bytes; want some, at most %d bytes", k, len(res.Records), readBytes(res.Records), most)
			}
		}
	})
}

// TestReadsInsideLargeBatch: one batch of 8,000 records of 1 KiB (8 MiB between two points of the
// index): reads inside it take their share of the limit, not one record each.
func TestReadsInsideLargeBatch(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		mustCreateTopic(t, s, "big", 1)
		recs := valued(8000, 1024)
		appendOne(t, s, "big", 0, recs...)
		off := int64(0)
		for k := range 6 {
			res := s.Read(t.Context(), []ReadRequest{{Topic: "big", Partition: 0, Offset: off, Count: 1000, MaxBytes: 1 << 20}})[0]
			if res.Err != nil || len(res.Records) != 1000 {
				t.Fatalf("read %d at %d of 1 KiB records, 1 MiB limit: %d records, %v; want 1000", k, off, len(res.Records), res.Err)
			}
			off += 1000
		}
	})
}

// TestReadTailPolledSlowly: a consumer polling the tail every 200 ms (more than tailFresh) takes a few
// of what was appended since, told the read was cut, and the rest in the read after (which looks the
// points up).
func TestReadTailPolledSlowly(t *testing.T) {
	s := openStore(t, backendOptions(t, "standalone"))
	mustCreateTopic(t, s, "tail", 1)
	recs := valued(500, 1024)
	pos := int64(0)
	for round := range 4 {
		appendOne(t, s, "tail", 0, recs...)
		time.Sleep(2 * tailFresh)
		var got []int
		for pos < int64((round+1)*len(recs)) && len(got) < 3 {
			res := s.Read(t.Context(), []ReadRequest{{Topic: "tail", Partition: 0, Offset: pos, Count: 10000, MaxBytes: 1 << 20}})[0]
			if res.Err != nil || len(res.Records) == 0 || res.Cut != (len(res.Records) < len(recs)) && len(got) == 0 {
				t.Fatalf("round %d: read from %d took %d records (cut %v), %v", round, pos, len(res.Records), res.Cut, res.Err)
			}
			pos += int64(len(res.Records))
			got = append(got, len(res.Records))
		}
		if pos != int64((round+1)*len(recs)) {
			t.Fatalf("round %d: reads %v, want the round's %d records in at most 3", round, got, len(recs))
		}
	}
}

// TestReadAcrossIndexStart: a partition written before the index (by an earlier kgate: no "bytes" in
// meta), then counted: a read from just below the index's first point is bounded from that point on,
// whether this store first saw the partition before it was counted or not.
func TestReadAcrossIndexStart(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "upgraded", 1)
		small := valued(1000, 100)
		appendOne(t, s, "upgraded", 0, small...)
		// As an earlier kgate left it.
		if err := s.Client().HDel(ctx, s.keys.meta("upgraded", 0), "bytes").Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.Client().Del(ctx, s.keys.bindex("upgraded", 0)).Err(); err != nil {
			t.Fatal(err)
		}
		const maxBytes, largeSize = 64 << 10, 256 << 10
		read := func() ReadResult {
			t.Helper()
			res := s.Read(ctx, []ReadRequest{{Topic: "upgraded", Partition: 0, Offset: 990, Count: 10000, MaxBytes: maxBytes}})[0]
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			return res
		}
		if res := read(); len(res.Records) != 10 {
			t.Fatalf("read of the uncounted partition: %d records, want its last 10", len(res.Records))
		}
		for range 100 {
			appendOne(t, s, "upgraded", 0, valued(1, largeSize)...)
		}
		if pts := indexPoints(t, s, "upgraded", 0); pts[0] != (bytePoint{1000, 0}) {
			t.Fatalf("bytes index %v, want it to start at (1000, 0)", pts)
		}
		time.Sleep(tailFresh + 50*time.Millisecond)
		most := readLimit(maxBytes) + bytesIndexStride + largeSize + 10*recordBytes(&small[0])
		for k := range 3 {
			if res := read(); readBytes(res.Records) > most || len(res.Records) < 11 {
				t.Fatalf("read %d from 990: %d records, %d bytes; want more than the 10 small ones, at most %d bytes", k, len(res.Records), readBytes(res.Records), most)
			}
		}
	})
}

// TestReadRunPastHighWatermark: a read from past the high watermark (a consumer left ahead of it by
// a failover that lost records) looks up a run of points that knows nothing past the high watermark;
// once large records fill those offsets, a read inside them is bounded.
func TestReadRunPastHighWatermark(t *testing.T) {
	s := openStore(t, backendOptions(t, "standalone"))
	ctx := t.Context()
	mustCreateTopic(t, s, "ahead", 1)
	for range 10 {
		appendOne(t, s, "ahead", 0, Record{Value: []byte("x")})
	}
	const maxBytes, largeSize = 64 << 10, 64 << 10
	read := func(off, count int64) ReadResult {
		t.Helper()
		res := s.Read(ctx, []ReadRequest{{Topic: "ahead", Partition: 0, Offset: off, Count: count, MaxBytes: maxBytes}})[0]
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		return res
	}
	read(300, 10000)
	for range 290 {
		appendOne(t, s, "ahead", 0, valued(1, largeSize)...)
	}
	read(300, 0) // another reader's look at the offsets
	most := readLimit(maxBytes) + bytesIndexStride + largeSize
	if res := read(10, 10000); readBytes(res.Records) > most || len(res.Records) == 0 {
		t.Fatalf("read from 10: %d records, %d bytes; want some, at most %d bytes", len(res.Records), readBytes(res.Records), most)
	}
}

// TestReadBoundSlowRedis: with every command 50 ms late (a lookup and its read take longer than
// tailFresh), reads of a backlog are not cut to unknownReadCount.
func TestReadBoundSlowRedis(t *testing.T) {
	srv := backendOptions(t, "standalone")
	proxy := redistest.StartProxy(t, srv.Addrs[0])
	s := openStore(t, Options{Addrs: []string{proxy.Addr()}})
	mustCreateTopic(t, s, "slow", 1)
	recs := valued(2000, 100)
	appendOne(t, s, "slow", 0, recs...)
	proxy.Delay(50 * time.Millisecond)
	defer proxy.Delay(0)
	for off := int64(0); off < 2000; off += 500 {
		res := s.Read(t.Context(), []ReadRequest{{Topic: "slow", Partition: 0, Offset: off, Count: 500, MaxBytes: 1 << 20}})[0]
		if res.Err != nil || len(res.Records) != 500 || res.Cut {
			t.Fatalf("read from %d through a slow Redis: %d records (cut %v), %v; want 500", off, len(res.Records), res.Cut, res.Err)
		}
	}
}
