package redisstore

import (
	"context"
	"io"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"
)

// appendScratch is the memory one append pipeline's commands are built in: the argument slabs of its
// batches (multiArgs), the XADD commands and the list handed to the pipeline. It is recycled between
// appends: built afresh it was about 400 bytes per 100-byte record, the largest share of what a
// produce allocated, and its garbage collections cost the gateway more CPU per record than writing
// the commands did.
type appendScratch struct {
	args   argBuilder
	xadds  [][]any
	cmds   []redis.RawWriteToCmd
	cmders []redis.Cmder
}

// maxScratchArgs bounds the scratch kept for reuse: a one-off request far larger than usual does not
// pin its memory.
const maxScratchArgs = 1 << 18 // about 20,000 records: a few megabytes

var appendScratches = sync.Pool{New: func() any { return new(appendScratch) }}

func getAppendScratch() *appendScratch { return appendScratches.Get().(*appendScratch) }

// release hands sc back for reuse, its pointers cleared first: they point into requests' records,
// which must not stay reachable from the pool.
func (sc *appendScratch) release() {
	if cap(sc.args.args) > maxScratchArgs {
		return
	}
	sc.reset()
	appendScratches.Put(sc)
}

func (sc *appendScratch) reset() {
	clear(sc.args.strs)
	clear(sc.args.args)
	clear(sc.xadds)
	clear(sc.cmds)
	clear(sc.cmders)
	sc.args.strs, sc.args.ints, sc.args.args = sc.args.strs[:0], sc.args.ints[:0], sc.args.args[:0]
	sc.xadds, sc.cmds, sc.cmders = sc.xadds[:0], sc.cmds[:0], sc.cmders[:0]
}

// grow makes room for nstrs strings, nints integers and nargs arguments more. Arguments already built
// keep pointing where they did: into the slabs they were built in, still reachable through them.
func (a *argBuilder) grow(nstrs, nints, nargs int) {
	a.strs = slices.Grow(a.strs, nstrs)
	a.ints = slices.Grow(a.ints, nints)
	a.args = slices.Grow(a.args, nargs)
}

func (sc *appendScratch) queue(cmd redis.Cmder) { sc.cmders = append(sc.cmders, cmd) }

// queueXADDs queues one command per argument list, its reply ("+QUEUED") discarded.
func (sc *appendScratch) queueXADDs(ctx context.Context, xadds [][]any) {
	sc.cmds = slices.Grow(sc.cmds, len(xadds))
	sc.cmders = slices.Grow(sc.cmders, len(xadds)+2)
	for _, args := range xadds {
		sc.cmds = append(sc.cmds, *redis.NewRawWriteToCmd(ctx, io.Discard, args...))
		sc.cmders = append(sc.cmders, &sc.cmds[len(sc.cmds)-1])
	}
}

// Record slabs are recycled too: those of a produce request's batches (the gateway takes them with
// RecycledRecords and hands them back with RecycleRecords once the request is answered) and of the runs
// mergeRuns builds. Allocated afresh they were 88 bytes per record each time, and the garbage
// collections they brought on cost the gateway more than filling them.
var recordSlabs sync.Pool // *[]Record

// maxRecycledRecords bounds the slabs kept for reuse: a one-off request far larger than usual does
// not pin its memory.
const maxRecycledRecords = 1 << 14 // 1.4 MB of records

// RecycledRecords returns n zeroed records, from a recycled slab when one is large enough.
func RecycledRecords(n int) []Record {
	if p, ok := recordSlabs.Get().(*[]Record); ok && cap(*p) >= n {
		return (*p)[:n]
	}
	return make([]Record, n)
}

// RecycleRecords hands back the records of batches no longer used (their requests answered); the
// batches keep none.
func RecycleRecords(batches []*Batch) {
	for _, b := range batches {
		b.recycleRecords()
	}
}

// recycleRecords hands back b's records, cleared: they point into requests' frames. (Past its length a
// slab is clear already: slabs go back cleared.)
func (b *Batch) recycleRecords() {
	if c := cap(b.Records); c > 0 && c <= maxRecycledRecords {
		clear(b.Records)
		recs := b.Records[:c]
		b.Records = nil
		recordSlabs.Put(&recs)
	}
}
