package redisstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestLookUpTimesRoundTrips: LookUpTimes of 16 partitions takes the round trips of one partition's
// lookups (on a Redis Cluster, those once per master): one pipeline of every lookup's time index and
// meta reads, then one read of every scan's first page. It took each lookup's own round trips, one
// lookup after the other.
func TestLookUpTimesRoundTrips(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		const topic, partitions = "lookups", 16
		mustCreateTopic(t, s, topic, partitions)
		var all []int32
		for p := range int32(partitions) {
			appendOne(t, s, topic, p, plain("r", 5)...) // timestamps 1000-1004
			all = append(all, p)
		}
		// Each partition's lookups: one answered by a scan of the records below its meta's maximum,
		// one by a scan from the index's first point, the maximum, and one past every record.
		cases := []struct {
			lookup TimeLookup
			want   TimeAnswer
		}{
			{TimeLookup{Timestamp: 1002, Known: true}, TimeAnswer{Offset: 2, Timestamp: 1002, Found: true}},
			{TimeLookup{Timestamp: 0}, TimeAnswer{Offset: 0, Timestamp: 1000, Found: true}},
			{TimeLookup{Timestamp: -3, Known: true}, TimeAnswer{Offset: 4, Timestamp: 1004, Found: true}},
			{TimeLookup{Timestamp: 5000, Known: true}, TimeAnswer{Timestamp: 1004}},
		}
		trips := serverTrips(t, s)
		lookUp := func(parts []int32) int64 {
			t.Helper()
			var lookups []TimeLookup
			var want []TimeAnswer
			for _, p := range parts {
				for _, c := range cases {
					l := c.lookup
					l.Partition = p
					lookups, want = append(lookups, l), append(want, c.want)
				}
			}
			before := trips.Load()
			got := s.LookUpTimes(ctx, topic, lookups)
			n := trips.Load() - before
			for i := range lookups {
				if got[i] != want[i] {
					t.Errorf("lookup %+v: %+v, want %+v", lookups[i], got[i], want[i])
				}
			}
			return n
		}
		lookUp(all) // the cluster client's slot map, the connections: there before the counts
		one := lookUp([]int32{0})
		many := lookUp(all)
		masters := int64(mastersOf(t, s, topic, all))
		t.Logf("LookUpTimes of %d lookups of 1 partition: %d round trips; of %d partitions on %d masters: %d", len(cases), one, partitions, masters, many)
		if many != one*masters {
			t.Errorf("LookUpTimes of %d partitions on %d masters: %d round trips, want %d (1 partition's, %d, per master)", partitions, masters, many, one*masters, one)
		}
	})
}

// TestLookUpTimesGapsInLockStep: lookups whose scans take more pages than one (entries deleted
// natively, the index point among them; the log start moved past the point below the target) answer
// as each alone does, errors per lookup, all in the round trips of the longest of them, not the sum.
func TestLookUpTimesGapsInLockStep(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		const topic = "lookup-gaps"
		mustCreateTopic(t, s, topic, 5)
		// Offset 0 at 1, 1-20 at 0, 21 at 1000 (meta's maximum), 22 at 900: partition 4 stays empty.
		recs := make([]Record, 23)
		recs[0].Timestamp, recs[21].Timestamp, recs[22].Timestamp = 1, 1000, 900
		for p := range int32(4) {
			appendOne(t, s, topic, p, recs...)
		}
		xdel := func(p int32, offs ...int64) {
			t.Helper()
			for _, off := range offs {
				if err := s.Client().XDel(ctx, s.keys.stream(topic, p), EntryID(off)).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
		xdel(1, 5, 21) // a gap in the first page, and the maximum's record: two pages more
		xdel(2, 21, 22)
		if _, err := s.DeleteRecords(ctx, topic, 3, 10); err != nil { // the scan starts below the log start
			t.Fatal(err)
		}
		cases := []struct {
			lookup TimeLookup
			want   TimeAnswer
			err    error
		}{
			{TimeLookup{Partition: 0, Timestamp: 500, Known: true}, TimeAnswer{Offset: 21, Timestamp: 1000, Found: true}, nil},
			{TimeLookup{Partition: 1, Timestamp: 500, Known: true}, TimeAnswer{Offset: 22, Timestamp: 900, Found: true}, nil},
			{TimeLookup{Partition: 2, Timestamp: 500, Known: true}, TimeAnswer{Timestamp: 1000}, nil},
			{TimeLookup{Partition: 3, Timestamp: 500, Known: true}, TimeAnswer{Offset: 21, Timestamp: 1000, Found: true}, nil},
			{TimeLookup{Partition: 3, Timestamp: 0, Known: true}, TimeAnswer{Offset: 10, Timestamp: 0, Found: true}, nil},
			{TimeLookup{Partition: 4, Timestamp: 500, Known: true}, TimeAnswer{Timestamp: -1}, nil},
			{TimeLookup{Partition: 1, Timestamp: -3, Known: true}, TimeAnswer{Offset: 21, Timestamp: 1000, Found: true}, nil},
			{TimeLookup{Partition: 4, Timestamp: -3, Known: true}, TimeAnswer{}, nil},
			{TimeLookup{Partition: 1, Timestamp: 2000}, TimeAnswer{Timestamp: 1000}, nil},
			{TimeLookup{Partition: 7, Timestamp: 500, Known: true}, TimeAnswer{}, ErrUnknownPartition},
			{TimeLookup{Partition: 7, Timestamp: -3, Known: true}, TimeAnswer{}, ErrUnknownPartition},
			{TimeLookup{Partition: 7, Timestamp: 500}, TimeAnswer{Timestamp: -1}, nil},
			{TimeLookup{Partition: 7, Timestamp: -3}, TimeAnswer{}, nil},
		}
		check := func(l TimeLookup, got TimeAnswer, want TimeAnswer, err error) {
			t.Helper()
			if !errors.Is(got.Err, err) || err == nil && got != want {
				t.Errorf("lookup %+v: %+v, want %+v (error %v)", l, got, want, err)
			}
		}
		var lookups []TimeLookup
		for _, c := range cases {
			lookups = append(lookups, c.lookup)
			var a TimeAnswer
			if c.lookup.Timestamp == -3 && c.lookup.Known {
				a.Offset, a.Timestamp, a.Found, a.Err = s.KnownMaxTimestamp(ctx, topic, c.lookup.Partition)
			} else if c.lookup.Timestamp == -3 {
				a.Offset, a.Timestamp, a.Found, a.Err = s.MaxTimestamp(ctx, topic, c.lookup.Partition)
			} else if c.lookup.Known {
				a.Offset, a.Timestamp, a.Found, a.Err = s.KnownOffsetForTime(ctx, topic, c.lookup.Partition, c.lookup.Timestamp)
			} else {
				a.Offset, a.Timestamp, a.Found, a.Err = s.OffsetForTime(ctx, topic, c.lookup.Partition, c.lookup.Timestamp)
			}
			check(c.lookup, a, c.want, c.err)
		}
		if s.Embedded() {
			for i, a := range s.LookUpTimes(ctx, topic, lookups) {
				check(lookups[i], a, cases[i].want, cases[i].err)
			}
			return // its round trips are not counted: it runs in the process
		}
		trips := serverTrips(t, s)
		longest, sum := int64(0), int64(0)
		for _, l := range lookups {
			before := trips.Load()
			s.LookUpTimes(ctx, topic, []TimeLookup{l})
			n := trips.Load() - before
			longest, sum = max(longest, n), sum+n
		}
		before := trips.Load()
		for i, a := range s.LookUpTimes(ctx, topic, lookups) {
			check(lookups[i], a, cases[i].want, cases[i].err)
		}
		n := trips.Load() - before
		masters := int64(mastersOf(t, s, topic, []int32{0, 1, 2, 3, 4, 7}))
		t.Logf("%d lookups alone: %d round trips, the longest %d; together on %d masters: %d", len(lookups), sum, longest, masters, n)
		if n > longest*masters {
			t.Errorf("LookUpTimes of %d lookups on %d masters: %d round trips, want at most %d (the longest lookup's, %d, per master)", len(lookups), masters, n, longest*masters, longest)
		}
	})
}

// TestTimeScanOfLargeRecordsBounded: a time lookup on a partition of large records reads its scan in
// pages bounded by bytes (timeScanBytes), where a page took every record between two index points (up
// to a thousand: a gigabyte of 1 MB records, for each partition looked up at once); the answers stay
// those of the records' timestamps.
func TestTimeScanOfLargeRecordsBounded(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		const topic, n, size = "large-scan", 1100, 16 << 10
		mustCreateTopic(t, s, topic, 1)
		value := bytes.Repeat([]byte("v"), size)
		for from := 0; from < n; from += 100 {
			recs := make([]Record, 100)
			for i := range recs {
				recs[i] = Record{Timestamp: int64(1000 + from + i), Value: value}
			}
			appendOne(t, s, topic, 0, recs...)
		}
		var most atomic.Int64 // the largest COUNT of an XRANGE sent
		xrange := func(cmd redis.Cmder) {
			if args := cmd.Args(); strings.EqualFold(fmt.Sprint(args[0]), "xrange") && len(args) == 6 {
				c, _ := strconv.ParseInt(fmt.Sprint(args[5]), 10, 64)
				for m := most.Load(); c > m && !most.CompareAndSwap(m, c); m = most.Load() {
				}
			}
		}
		hookServers(t, s, func() []redis.Hook {
			return []redis.Hook{pipelineHook(func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
				for _, c := range cmds {
					xrange(c)
				}
				return next(ctx, cmds)
			}), processHook(func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				xrange(cmd)
				return next(ctx, cmd)
			})}
		})
		for _, ts := range []int64{1000, 1300, 1700, 1950, 2099} {
			offset, got, found, err := s.KnownOffsetForTime(ctx, topic, 0, ts)
			if err != nil || !found || offset != ts-1000 || got != ts {
				t.Errorf("offset for %d: %d (timestamp %d, found %v), %v; want %d", ts, offset, got, found, err, ts-1000)
			}
		}
		// Up to readLimit(timeScanBytes) of records a page, as the bytes index interpolates them, and
		// the two index segments a read starts and ends in.
		if limit := (readLimit(timeScanBytes) + 2*bytesIndexStride) / size; most.Load() > limit {
			t.Errorf("a scan's page asked for %d records of %d bytes, want %d at most", most.Load(), size, limit)
		}
		t.Logf("largest page: %d records", most.Load())
	})
}

// TestLookUpTimesOfManyPartitionsInTime: a lookup of a topic's hundreds of partitions answers each of
// them on a Redis that takes a few milliseconds to answer each scan's page, as each partition's lookup
// alone answers in a few milliseconds. The lookups went in lock-step within one command timeout, so
// the call's time grew with its partitions and every one of them timed out together; they go in groups
// of timeLookupsAtOnce, each within a command timeout of its own.
func TestLookUpTimesOfManyPartitionsInTime(t *testing.T) {
	for _, backend := range []string{"standalone", "cluster"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			opts := backendOptions(t, backend)
			opts.CommandTimeout = time.Second
			s := openStore(t, opts)
			ctx := t.Context()
			const topic, partitions = "many-lookups", 900
			mustCreateTopic(t, s, topic, partitions)
			var batches []*Batch
			var lookups []TimeLookup
			for p := range int32(partitions) {
				batches = append(batches, &Batch{Topic: topic, Partition: p, Records: plain("r", 3), ProducerID: -1})
				lookups = append(lookups, TimeLookup{Partition: p, Timestamp: 1001, Known: true})
			}
			for _, r := range s.Append(ctx, batches) {
				if r.Err != nil {
					t.Fatal(r.Err)
				}
			}
			slowScans(t, s, 4*time.Millisecond)
			start := time.Now()
			answers := s.LookUpTimes(ctx, topic, lookups)
			took := time.Since(start)
			failed := 0
			for i, a := range answers {
				if want := (TimeAnswer{Offset: 1, Timestamp: 1001, Found: true}); a != want {
					if failed++; failed <= 3 {
						t.Errorf("lookup of partition %d: %+v, want %+v", lookups[i].Partition, a, want)
					}
				}
			}
			t.Logf("%d lookups at 4 ms a scan page: %v, %d failed", partitions, took, failed)
		})
	}
}

// slowScans has each Redis server of s take d to answer each XRANGE (a scan's page) it is sent, one
// after the other, as a Redis busy with large reads does.
func slowScans(t *testing.T, s *Store, d time.Duration) {
	t.Helper()
	hookServers(t, s, func() []redis.Hook {
		var serving sync.Mutex // a server answers one command at a time
		slow := func(cmds ...redis.Cmder) {
			for _, cmd := range cmds {
				if cmd.Name() == "xrange" {
					serving.Lock()
					time.Sleep(d)
					serving.Unlock()
				}
			}
		}
		return []redis.Hook{
			pipelineHook(func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
				slow(cmds...)
				return next(ctx, cmds)
			}),
			processHook(func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				slow(cmd)
				return next(ctx, cmd)
			}),
		}
	})
}
