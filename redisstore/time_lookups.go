package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// OffsetForTime returns the first offset whose record timestamp is at least ts (Kafka's ListOffsets by
// timestamp, correct for non-monotonic timestamps), with that record's timestamp; found is false when
// no such record exists, and recordTS then the largest timestamp the partition's records are known to
// carry, -1 when none carries one (records stamped -1 alone: retention keeps them). The time index
// holds some of the points where the partition's running maximum timestamp grows, and meta the last of
// them (maxts, maxoff): the answer is the first record after the last point below ts with a timestamp
// of at least ts, at the latest the first point at or above ts.
func (s *Store) OffsetForTime(ctx context.Context, topic string, partition int32, ts int64) (offset, recordTS int64, found bool, err error) {
	return s.lookUpOne(ctx, topic, timeQuery{partition: partition, ts: ts})
}

// KnownOffsetForTime is OffsetForTime for a partition known to have a meta hash
// (Topic.PartitionMeta): one that has none (its topic deleted since the caller looked it up) answers
// ErrUnknownPartition, where OffsetForTime finds no record. The check costs no round trip of its own.
func (s *Store) KnownOffsetForTime(ctx context.Context, topic string, partition int32, ts int64) (offset, recordTS int64, found bool, err error) {
	return s.lookUpOne(ctx, topic, timeQuery{partition: partition, ts: ts, known: true})
}

// MaxTimestamp returns the offset and timestamp of the record with the largest timestamp (the first
// one when several share it); found is false for an empty partition. Meta keeps it (maxts, maxoff); a
// gateway of a version before that kept it as the time index's last point, and may still append to
// the partition during a rolling upgrade, moving maxts but not maxoff: the index's last point is taken
// when it is at least maxts. A partition whose records were all deleted has none, as on Apache. (One
// whose largest timestamp's record alone was deleted still answers with it: the largest of the records
// left is not kept.)
func (s *Store) MaxTimestamp(ctx context.Context, topic string, partition int32) (offset, recordTS int64, found bool, err error) {
	return s.lookUpOne(ctx, topic, timeQuery{partition: partition, max: true})
}

// KnownMaxTimestamp is MaxTimestamp for a partition known to have a meta hash (Topic.PartitionMeta):
// one that has none (its topic deleted since the caller looked it up) answers ErrUnknownPartition,
// where MaxTimestamp finds an empty partition. The check costs no round trip of its own.
func (s *Store) KnownMaxTimestamp(ctx context.Context, topic string, partition int32) (offset, recordTS int64, found bool, err error) {
	return s.lookUpOne(ctx, topic, timeQuery{partition: partition, max: true, known: true})
}

// TimeLookup is a ListOffsets by time of one partition: Timestamp is a record timestamp
// (OffsetForTime) or -3 (MaxTimestamp). Known says the partition has a meta hash
// (Topic.PartitionMeta): KnownOffsetForTime, KnownMaxTimestamp.
type TimeLookup struct {
	Partition int32
	Timestamp int64
	Known     bool
}

// TimeAnswer is a TimeLookup's answer: the offset and the record timestamp found (Found), or its error.
type TimeAnswer struct {
	Offset, Timestamp int64
	Found             bool
	Err               error
}

// LookUpTimes answers each of lookups, partitions of topic, in their order, as OffsetForTime or
// MaxTimestamp of each would, in the round trips of the longest of them alone: the lookups go in
// lock-step (lookUpTimesOn), most of them done in two round trips, so a ListOffsets by time costs
// about the same for one partition or 64 (timeLookupsAtOnce; more go in groups of as many, one after
// the other, each within a command timeout of its own). On a Redis Cluster each master's lookups run
// at once with the others' (acrossMasters): a master that fails, or does not answer, holds up and
// fails its partitions alone. A lookup's error is its own.
func (s *Store) LookUpTimes(ctx context.Context, topic string, lookups []TimeLookup) []TimeAnswer {
	qs := make([]timeQuery, len(lookups))
	for i, l := range lookups {
		qs[i] = timeQuery{partition: l.Partition, ts: l.Timestamp, max: l.Timestamp == -3, known: l.Known}
	}
	return s.lookUpTimes(ctx, topic, qs)
}

// OffsetsForTime is OffsetForTime of each of partitions of topic at ts, in their order, 64 at a time in
// the round trips of the longest of them alone (LookUpTimes; ts -3 too is a timestamp here).
func (s *Store) OffsetsForTime(ctx context.Context, topic string, partitions []int32, ts int64) []TimeAnswer {
	qs := make([]timeQuery, len(partitions))
	for i, p := range partitions {
		qs[i] = timeQuery{partition: p, ts: ts}
	}
	return s.lookUpTimes(ctx, topic, qs)
}

// timeQuery is one partition's time lookup: the first offset at or after ts (OffsetForTime), or the
// largest timestamp (max: MaxTimestamp); known as in KnownOffsetForTime.
type timeQuery struct {
	partition int32
	ts        int64
	max       bool
	known     bool
}

func (s *Store) lookUpOne(ctx context.Context, topic string, q timeQuery) (offset, recordTS int64, found bool, err error) {
	a := s.lookUpTimes(ctx, topic, []timeQuery{q})[0]
	return a.Offset, a.Timestamp, a.Found, a.Err
}

// timeLookupsAtOnce is the most lookups that go in lock-step within one command timeout. A round reads
// a page of each scan (up to timeScanPage records), so a round's time and memory grow with its
// lookups: the lookups of a topic of hundreds of partitions, each a few milliseconds alone, timed out
// all together. The lookups past these go in further groups, one after the other.
const timeLookupsAtOnce = 64

// lookUpTimes answers qs in groups of timeLookupsAtOnce, each within a command timeout of its own.
func (s *Store) lookUpTimes(ctx context.Context, topic string, qs []timeQuery) []TimeAnswer {
	var out []TimeAnswer
	for len(qs) > 0 {
		n := min(len(qs), timeLookupsAtOnce)
		out = append(out, s.lookUpTimesAtOnce(ctx, topic, qs[:n])...)
		qs = qs[n:]
	}
	return out
}

// lookUpTimesAtOnce answers qs within one command timeout, each master's share by lookUpTimesOn.
func (s *Store) lookUpTimesAtOnce(ctx context.Context, topic string, qs []timeQuery) []TimeAnswer {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return perMaster(ctx, s, len(qs), func(i int) string { return s.keys.meta(topic, qs[i].partition) },
		func(ctx context.Context, idx []int) []TimeAnswer {
			return s.lookUpTimesOn(ctx, topic, picked(qs, idx))
		}, func(a TimeAnswer) bool { return a.Err == nil }, TimeAnswer{Err: errMasterLagging})
}

// lookUpTimesOn answers qs, all on one master (or on any, through the cluster client), in lock-step:
// one pipeline of every lookup's time index and meta reads, which settles some (a maximum, a target
// past every record), then one Read of the first page of every other's scan, which settles most; the
// scans left (entries deleted natively, the log start moved past where one began) read their next
// pages together, one Read a round, until none is left.
func (s *Store) lookUpTimesOn(ctx context.Context, topic string, qs []timeQuery) []TimeAnswer {
	out := make([]TimeAnswer, len(qs))
	pipe := s.rdb.Pipeline()
	reads := make([]timeReads, len(qs))
	for i, q := range qs {
		reads[i] = s.queueTimeReads(ctx, pipe, topic, q)
	}
	_, _ = pipe.Exec(ctx) // each lookup's commands carry their own errors
	var scans []timeScan
	for i, q := range qs {
		if q.max {
			out[i] = reads[i].maxTimestamp(q)
			continue
		}
		a, scan, ok := reads[i].forTime(topic, q)
		if !ok {
			out[i] = a
			continue
		}
		scan.lookup = i
		scans = append(scans, scan)
	}
	for len(scans) > 0 {
		reqs := make([]ReadRequest, len(scans))
		for k := range scans {
			reqs[k] = scans[k].page()
		}
		res := s.Read(ctx, reqs)
		left := scans[:0]
		for k := range scans {
			if a, done := scans[k].take(res[k]); done {
				out[scans[k].lookup] = a
			} else {
				left = append(left, scans[k])
			}
		}
		RecycleReads(res) // only offsets and timestamps are kept
		scans = left
	}
	return out
}

// timeReads are a lookup's commands in the first step's pipeline: the time index's first point at or
// above the target and last below it (OffsetForTime), or its last point (MaxTimestamp), and the fields
// of meta a time lookup needs (timeMeta).
type timeReads struct {
	atOrAbove, last *redis.ZSliceCmd
	below           *redis.StringSliceCmd
	meta            *redis.SliceCmd
	all             []redis.Cmder // in the order queued
}

// queueTimeReads queues q's first-step reads on pipe.
func (s *Store) queueTimeReads(ctx context.Context, pipe redis.Pipeliner, topic string, q timeQuery) timeReads {
	var r timeReads
	key := s.keys.tindex(topic, q.partition)
	if q.max {
		r.meta = s.timeMeta(ctx, pipe, topic, q.partition)
		r.last = pipe.ZRevRangeWithScores(ctx, key, 0, 0)
		r.all = []redis.Cmder{r.meta, r.last}
		return r
	}
	// The index holds timestamps up to maxIndexedTS: a later target is looked up there, and the scan
	// goes on to the first record at or after the target itself.
	indexed := strconv.FormatInt(min(q.ts, maxIndexedTS), 10)
	r.atOrAbove = pipe.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: key, Start: indexed, Stop: "+inf", ByScore: true, Count: 1})
	r.below = pipe.ZRangeArgs(ctx, redis.ZRangeArgs{Key: key, Start: "(" + indexed, Stop: "-inf", ByScore: true, Rev: true, Count: 1})
	r.meta = s.timeMeta(ctx, pipe, topic, q.partition)
	r.all = []redis.Cmder{r.atOrAbove, r.below, r.meta}
	return r
}

// err is the first error among r's commands.
func (r timeReads) err() error {
	for _, c := range r.all {
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
	}
	return nil
}

// maxTimestamp is MaxTimestamp's answer from r.
func (r timeReads) maxTimestamp(q timeQuery) TimeAnswer {
	if err := r.err(); err != nil {
		return TimeAnswer{Err: err}
	}
	offset, recordTS, found, o, err := readTimeMeta(q.known, r.meta.Val())
	if err != nil || o.Start >= o.End {
		return TimeAnswer{Err: err}
	}
	if zs := r.last.Val(); len(zs) > 0 && (!found || int64(zs[0].Score) >= recordTS) {
		offset, _ = strconv.ParseInt(fmt.Sprint(zs[0].Member), 10, 64)
		return TimeAnswer{Offset: offset, Timestamp: int64(zs[0].Score), Found: true}
	}
	return TimeAnswer{Offset: offset, Timestamp: recordTS, Found: found}
}

// forTime is OffsetForTime's answer from r (ok false), or the scan that finds it (ok).
func (r timeReads) forTime(topic string, q timeQuery) (a TimeAnswer, scan timeScan, ok bool) {
	if err := r.err(); err != nil {
		return TimeAnswer{Err: err}, timeScan{}, false
	}
	maxOff, maxTS, stamped, offs, err := readTimeMeta(q.known, r.meta.Val())
	if err != nil {
		return TimeAnswer{Err: err}, timeScan{}, false
	}
	if !stamped {
		maxTS = -1
	}
	var upTo int64
	if zs := r.atOrAbove.Val(); len(zs) > 0 {
		upTo, _ = strconv.ParseInt(fmt.Sprint(zs[0].Member), 10, 64)
	} else if stamped && maxTS >= min(q.ts, maxIndexedTS) {
		upTo = maxOff
	} else {
		return TimeAnswer{Timestamp: maxTS}, timeScan{}, false
	}
	from := int64(0)
	if prev := r.below.Val(); len(prev) > 0 {
		p, _ := strconv.ParseInt(prev[0], 10, 64)
		from = p + 1
	}
	// The records between the two points are read (from the log start when the point below was
	// deleted): up to the point at or above ts, whose record matches unless it was deleted too (then on
	// from there, page by page).
	page := ReadRequest{Topic: topic, Partition: q.partition, Offset: from, KnownPartition: q.known}
	if v := r.meta.Val(); len(v) == 5 && offs.End > 0 && anyInt(v[4])/offs.End*timeScanPage > timeScanBytes {
		page.MaxBytes = timeScanBytes
	}
	return TimeAnswer{}, timeScan{r: page, upTo: upTo, ts: q.ts, maxTS: maxTS, end: offs.End}, true
}

// timeScanPage is the most records a scan reads in a round.
const timeScanPage = 1000

// timeScanBytes bounds a scan's page by bytes (ReadRequest.MaxBytes) on a partition whose records
// average more than timeScanBytes/timeScanPage (its meta's bytes over its high watermark): the index
// points are up to a thousand records apart, and a thousand 1 MB records read in one page, 64 lookups
// in lock-step, took gigabytes. A bounded page takes up to readLimit(timeScanBytes) of records (3 MiB;
// one record whatever its size), and its first read of a partition may look up its bytes index first,
// a round trip that partitions of small records are spared.
const timeScanBytes = 256 << 10

// timeScan is an OffsetForTime scan under way: it reads its partition from r.Offset (the log start
// when that is further) on for the first record with a timestamp of at least ts, its first page ending
// at offset upTo when that is ahead. Entries deleted natively (XDEL) leave gaps, so a short page does
// not mean the end; the scan ends at the high watermark.
type timeScan struct {
	lookup int         // its answer's index
	r      ReadRequest // the next page's, from r.Offset
	upTo   int64
	ts     int64
	maxTS  int64 // the answer's timestamp when no record is found (the records at or after ts deleted)
	end    int64 // the high watermark last read: what the next page expects to find
}

// page is the read of the scan's next page.
func (sc *timeScan) page() ReadRequest {
	count := int64(timeScanPage)
	if sc.upTo >= sc.r.Offset {
		count = min(count, sc.upTo-sc.r.Offset+1)
	}
	sc.r.Count = count
	r := sc.r
	// What is there sizes the read (split, buffer): a page past the index point of a small
	// partition would otherwise be split for the thousand records it may take.
	if there := sc.end - r.Offset; there <= 0 {
		r.Expect = -1
	} else if there < count {
		r.Expect = there
	}
	return r
}

// take goes on from the page read (res): done with the lookup's answer, or not (another page).
func (sc *timeScan) take(res ReadResult) (a TimeAnswer, done bool) {
	if res.Err != nil {
		return TimeAnswer{Err: res.Err}, true
	}
	sc.end = res.End
	from := sc.r.Offset
	if from < res.Start { // below the log start: the read found nothing
		sc.r.Offset = res.Start
		return TimeAnswer{}, false
	}
	for _, rec := range res.Records {
		if rec.Timestamp >= sc.ts {
			return TimeAnswer{Offset: rec.Offset, Timestamp: rec.Timestamp, Found: true}, true
		}
	}
	if n := len(res.Records); n > 0 {
		from = res.Records[n-1].Offset + 1
	} else {
		from += sc.r.Count
	}
	if from >= res.End {
		return TimeAnswer{Timestamp: sc.maxTS}, true
	}
	sc.r.Offset = from
	return TimeAnswer{}, false
}

// timeMeta queues on pipe the read of the fields of a partition's meta hash that a time lookup needs,
// in one HMGET: maxts and maxoff (metaMax), next and start (readOffsets), which also tell whether a
// known partition still has its meta hash, and bytes (the records' bytes appended: timeScanBound).
func (s *Store) timeMeta(ctx context.Context, pipe redis.Pipeliner, topic string, partition int32) *redis.SliceCmd {
	return pipe.HMGet(ctx, s.keys.meta(topic, partition), "maxts", "maxoff", "next", "start", "bytes")
}

// readTimeMeta parses timeMeta's reply: the partition's maximum timestamp and its offset (metaMax),
// and its offsets, or ErrUnknownPartition when known and its meta hash is gone (readOffsets).
func readTimeMeta(known bool, v []any) (maxOff, maxTS int64, stamped bool, offs Offsets, err error) {
	if len(v) != 5 {
		return 0, 0, false, Offsets{}, nil
	}
	if offs, err = readOffsets(ReadRequest{KnownPartition: known}, v[2:4]); err != nil {
		return 0, 0, false, Offsets{}, err
	}
	maxOff, maxTS, stamped = metaMax(v[:2])
	return maxOff, maxTS, stamped, offs, nil
}

// metaMax parses the maxts and maxoff fields of a partition's meta hash; ok is false when maxoff is
// not there (an empty partition, or one whose maximum an older kgate kept in the time index alone).
func metaMax(vals []any) (offset, ts int64, ok bool) {
	if len(vals) != 2 {
		return 0, 0, false
	}
	t, tok := vals[0].(string)
	o, ook := vals[1].(string)
	if !tok || !ook {
		return 0, 0, false
	}
	ts, terr := strconv.ParseInt(t, 10, 64)
	offset, oerr := strconv.ParseInt(o, 10, 64)
	return offset, ts, terr == nil && oerr == nil
}
