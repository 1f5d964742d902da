package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// The transactional append (Redis 7+). Records are written by plain XADD commands, so Redis parses each
// record once, straight from the network buffer, as it would for any client; a Lua script that carried
// the records would copy every key and value twice more (into Lua strings and back), which made the
// append cost Redis 1.3-2.6x the CPU of plain XADDs. Each batch is one MULTI block on its partition's
// slot:
//
//	MULTI
//	XADD <stream> 0-* ts <ts> [key <k>] [value <v>] [h:<name> <v>]...   (one per record)
//	FCALL <finish function> ...   (idempotence check, high watermark, time index, producer state)
//	EXEC
//
// XADD 0-* takes the next sequence number after the stream's last ID, so offset n stays entry 0-(n+1).
// finishScript (run as a Redis function, or with EVAL when the library cannot be loaded: functions.go)
// decides after the fact: when the batch is a duplicate or out of sequence it deletes the entries just
// added and restores the stream's last ID and entries-added counter (XSETID), so the records leave no
// trace (only the stream's max-deleted-entry-id mark moves). Nothing outside the MULTI block ever sees
// the entries it removes. EVALSHA is not used: a NOSCRIPT after the XADDs (a failed-over replica
// without the script cache) would store records without moving the high watermark, and the script
// cache is neither persisted nor replicated, while functions are.

// errRunRefused is a run of batches (mergeRuns) that failed the idempotence check as a whole; its
// batches are appended again one by one.
var errRunRefused = errors.New("redisstore: run of batches refused")

// ErrStreamConflict is returned when a partition stream's entries do not match kgate's bookkeeping
// (something other than kgate wrote to it); the batch is not stored.
var ErrStreamConflict = errors.New("redisstore: partition stream was written outside kgate")

// ErrStrayEntries is returned when an append found entries of kgate's past the high watermark, left by
// appends that were never finished nor acknowledged, and removed them with its own: the batch is not
// stored, and a retry finds the stream clean.
var ErrStrayEntries = errors.New("redisstore: unfinished appends removed; retry")

// finishScript completes a batch whose n XADDs ran just before it in the same MULTI. The batch may be a
// run of m consecutive batches of one producer epoch with contiguous sequences (mergeRuns): they are
// checked as one (the first against the producer's state) and recorded as m batches, so a retry of any
// of them is still recognised; a run that fails the check is undone and reported as {-1, -3}, and its
// batches are then appended one by one for their exact answers.
// KEYS: stream, meta, tindex, producers, bindex. ARGV: producer id (-1: none), epoch, base sequence, n,
// k, then k pairs (record index, timestamp): the batch's time-index candidates (eachTimeCandidate),
// then m and the m batch sizes, then 1 when the partition must be known (Batch.KnownPartition), then
// the batch's bytes (recordBytes, summed), then the time now (ms, the producer state's last use), then
// after and tok: the pipeline's chain of the partition's blocks (empty for none; batchLua).
// Returns {base offset, log start offset, 1 if duplicate else 0 [, a duplicate's original first
// timestamp: checkProducer]} or {-1, kafka error code | -2 conflict
// | -3 run refused | -4 unacknowledged entries removed, retry | -5 the block before it in the chain did
// not finish, its entries and this block's removed}; a partition that must be known and has no meta (its topic deleted) gets {-1, 3}
// (UNKNOWN_TOPIC_OR_PARTITION), its XADDs undone, and the stream goes if that leaves it empty.
var finishScript = batchLua + removePastLua + `
-- blockStart is the offset of the first of this block's n entries, or nil when its XADDs did not land.
-- They all land or none does (each XADD 0-* follows the stream's last ID, which only a foreign ID,
-- one with a time part, makes them fail), and when they land the stream's last ID is its top entry's
-- and of kgate's form. When they did not, the newest entries are not this block's: they may be
-- records kgate acknowledged, below a foreign entry since deleted (XDEL leaves the stream's last ID).
local function blockStart(stream, n)
  local info = redis.pcall('XINFO', 'STREAM', stream)
  if type(info) ~= 'table' or info.err then return nil end
  local lastID
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then lastID = info[i + 1] end
  end
  local added = redis.call('XREVRANGE', stream, '+', '-', 'COUNT', n)
  if #added == 0 or added[1][1] ~= lastID or not string.match(lastID, '^0%-%d+$') then return nil end
  return tonumber(string.match(added[#added][1], '^0%-(%d+)$'))
end
local stream, meta, tindex, prods, bindex = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local pid, epoch, seq, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local k = tonumber(ARGV[5])
local m = tonumber(ARGV[6 + 2 * k])
local after, tok = ARGV[10 + 2 * k + m], ARGV[11 + 2 * k + m]
local nxt, start, tix, st, known, chain = readMeta(meta, pid)
if not known and ARGV[7 + 2 * k + m] == '1' then
  -- Undo this block's XADDs alone (a stream holding more, its meta lost some other way, keeps it).
  local first = blockStart(stream, n)
  if first then removePast(stream, first - 1) end
  if redis.call('XLEN', stream) == 0 then redis.call('DEL', stream) end
  return {-1, 3}
end
if not chained(chain, after) then
  -- The block before this one did not finish (its FCALL found no library, or failed): whatever its
  -- XADDs left past the high watermark goes with this block's, which must not be kept ahead of it.
  removePast(stream, nxt)
  return {-1, -5}
end
local top = redis.call('XREVRANGE', stream, '+', '-', 'COUNT', 1)
if #top == 0 or top[1][1] ~= string.format('0-%d', nxt + n) then
  local last = #top > 0 and tonumber(string.match(top[1][1], '^0%-(%d+)$'))
  if last and last > nxt + n then
    -- kgate's entries past the high watermark ahead of this block's: XADDs whose finish step never
    -- ran (the library missing, and the answer lost with its connection, so nobody repaired them).
    -- No one was told they were stored: they go with this block's, and the batch is retried.
    removePast(stream, nxt)
    return {-1, -4}
  end
  local first = last and blockStart(stream, n)
  if first then
    -- This block's XADDs landed below where they belong: the stream lost entries kgate stored
    -- (deleted or evicted). Undo them, as the batch is not stored; a stream they alone make up goes
    -- with them. (When they did not land, a foreign ID made them fail and the stream keeps all it has.)
    removePast(stream, first - 1)
    if redis.call('XLEN', stream) == 0 then redis.call('DEL', stream) end
  end
  return {-1, -2}
end
local refused, kept, last, legacy = checkProducer(stream, prods, pid, epoch, seq, tonumber(ARGV[7 + 2 * k]), start, st)
if refused then
  -- Undo the XADDs that ran before this script in the same MULTI.
  removePast(stream, nxt)
  -- Answered: the partition's next block in the chain may finish (a meta hash is never created for it).
  local pass = chainPass(chain, after, tok)
  if pass and known then redis.call('HSET', meta, 'chain', pass) end
  if m > 1 then return {-1, -3} end
  return refused
end
local subs, s, o = {}, seq, nxt
for i = 1, m do
  local c = tonumber(ARGV[6 + 2 * k + i])
  last = (s + c - 1) % 2147483648
  table.insert(subs, 1, string.format('%d:%d:%d', s, last, o))
  s, o = (last + 1) % 2147483648, o + c
end
finishBatch(meta, tindex, bindex, prods, pid, epoch, subs, n, last, kept, legacy, nxt, tix, k, 6, tonumber(ARGV[8 + 2 * k + m]), ARGV[9 + 2 * k + m], chainPass(chain, after, tok))
return {nxt, start, 0}
`

// Constant arguments, referenced by pointer so they are not boxed per command.
var (
	cmdXADD  = "XADD"
	cmdEVAL  = "EVAL"
	autoID   = "0-*"
	fieldTS  = "ts"
	numKeys  = int64(5)
	cmdMULTI = "MULTI"
	cmdEXEC  = "EXEC"
)

// multiArgs builds one batch's commands in sc: an XADD argument list per record and the FCALL (or
// EVAL) arguments, now (ms) the time the producer state records as its last use, after and tok the
// batch's chainLink. Every argument is a
// pointer into sc's slabs, grown up front for the batch.
func (s *Store) multiArgs(b *Batch, keys []string, sc *appendScratch, now int64, after, tok *string) (xadds [][]any, eval []any) {
	cands, subs := b.timeCandidates(), max(len(b.runOf), 1)
	a := &sc.args
	a.grow(b.multiArgCounts(len(keys), cands))
	sc.xadds = slices.Grow(sc.xadds, len(b.Records))
	xadds = sc.xadds[len(sc.xadds) : len(sc.xadds)+len(b.Records)]
	sc.xadds = sc.xadds[:len(sc.xadds)+len(b.Records)]
	keyAt := len(a.strs)
	a.strs = append(a.strs, keys...)
	var names headerNames
	bytes := int64(0)
	for i := range b.Records {
		r := &b.Records[i]
		bytes += recordBytes(r)
		from := len(a.args)
		a.addConst(&cmdXADD)
		a.args = append(a.args, &a.strs[keyAt])
		a.addConst(&autoID)
		a.addConst(&fieldTS)
		a.addInt(b.recordTS(r))
		a.addFields(r, &names)
		xadds[i] = a.args[from:len(a.args):len(a.args)]
	}
	from := len(a.args)
	if s.noFunctions.Load() {
		a.addConst(&cmdEVAL)
		a.addConst(&finishScript)
	} else {
		a.addConst(&cmdFCALL)
		a.addConst(&finishFunction)
	}
	a.args = append(a.args, &numKeys)
	for i := range keys {
		a.args = append(a.args, &a.strs[keyAt+i])
	}
	a.addInt(b.ProducerID)
	a.addInt(int64(b.ProducerEpoch))
	a.addInt(int64(b.BaseSequence))
	a.addInt(int64(len(b.Records)))
	a.addInt(int64(cands))
	a.addTimeCandidates(b)
	a.addInt(int64(subs))
	if b.runOf == nil {
		a.addInt(int64(len(b.Records)))
	}
	for _, sub := range b.runOf {
		a.addInt(int64(len(sub.Records)))
	}
	if b.KnownPartition {
		a.addInt(1)
	} else {
		a.addInt(0)
	}
	a.addInt(bytes)
	a.addInt(now)
	a.addConst(after)
	a.addConst(tok)
	return xadds, a.args[from:]
}

// multiArgCounts is the strings, integers and arguments multiArgs builds for b with nkeys keys and
// cands time-index candidates (timeCandidates).
func (b *Batch) multiArgCounts(nkeys, cands int) (nstrs, nints, nargs int) {
	nstrs, nints = nkeys, 4+1
	for i := range b.Records {
		r := &b.Records[i]
		fc := fieldCount(r)
		nstrs += fc + len(r.Headers)
		nints++
		nargs += 5 + 2*fc
	}
	subs := max(len(b.runOf), 1)
	nints += 2*cands + 1 + subs + 3
	nargs += 3 + nkeys + 5 + 2*cands + 1 + subs + 5 // FCALL fn numkeys, keys, pid epoch seq n k, candidates, m, sizes, known, bytes, now, after, tok
	return nstrs, nints, nargs
}

// pipeliner is a client or one pinned connection.
type pipeliner interface {
	Pipeline() redis.Pipeliner
}

// appendSplitMin is the number of records from which the batches of a request for several partitions
// are written as several pipelines at once (the fewest records per pipeline), and appendSplitMax the
// most pipelines one request uses.
const (
	appendSplitMin = 128
	appendSplitMax = 4
)

// appendRuns is Append on Redis 7+: batches of one partition that can be checked and stored as one
// (mergeRuns) are, and each master's share is written by appendMultiSplit.
func (s *Store) appendRuns(ctx context.Context, batches []*Batch, out []AppendResult) {
	runs, at := mergeRuns(batches)
	defer func() {
		for _, r := range runs {
			if r.runOf != nil {
				r.recycleRecords()
			}
		}
	}()
	res := make([]AppendResult, len(runs))
	s.appendByNode(ctx, runs, res)
	var again []int // batches of refused runs
	for i := range batches {
		r := res[at[i].run]
		switch {
		case errors.Is(r.Err, errRunRefused):
			again = append(again, i)
			continue
		case r.Err == nil:
			r.BaseOffset += at[i].skip
		}
		out[i] = r
	}
	if again == nil {
		return
	}
	// A refused run (one of its batches retried, most likely) left no trace: its batches are appended
	// again one by one, in order, for their own answers.
	single := make([]*Batch, len(again))
	for j, i := range again {
		single[j] = batches[i]
	}
	res = make([]AppendResult, len(single))
	s.appendByNode(ctx, single, res)
	for j, i := range again {
		out[i] = res[j]
	}
}

// appendByNode writes batches (runs or single batches, never both for one partition) to their masters.
func (s *Store) appendByNode(ctx context.Context, batches []*Batch, out []AppendResult) {
	eachGroup(s.groupByNode(ctx, batches, out), batches, out, func(g *nodeGroup, sub []*Batch, res []AppendResult) {
		s.appendMultiSplit(ctx, g.node, sub, res)
	})
}

// refreshOnMoved has the cluster client reload its slot map when an append was refused with MOVED. The
// append's node clients (and pinned connections) do not redirect, and their refusals never reach the
// cluster client, which would keep its map until its next periodic reload: a slot that moved would
// fail every append to it until then. The producer's retry finds the new map.
func (s *Store) refreshOnMoved(ctx context.Context, out []AppendResult) {
	for _, r := range out {
		if redis.HasErrorPrefix(r.Err, "MOVED") {
			s.RefreshTopology(ctx)
			return
		}
	}
}

// runAt locates a batch in the output of mergeRuns: the run it went into and the number of records
// ahead of it there.
type runAt struct {
	run  int
	skip int64
}

// mergeRuns merges a partition's batches into one batch (a run, with runOf set) when each of them
// continues the one before, so a request that carries several of one partition's batches (a
// connection's queued produce requests, appended together) pays the finish step once per partition.
// Other batches are returned as they are, in order.
func mergeRuns(batches []*Batch) ([]*Batch, []runAt) {
	// A partition's batches are merged only when every one of them continues the one before: were a
	// run followed by a batch that cannot join it, and the run refused, the later batch would be
	// checked before the run's batches are appended again.
	type partState struct {
		last    *Batch
		chained bool
		records int // in all the partition's batches
		at      int // index in out of the partition's batch or run (second pass)
	}
	parts := make(map[partID]partState, len(batches))
	for _, b := range batches {
		id := partID{b.Topic, b.Partition}
		p, seen := parts[id]
		parts[id] = partState{last: b, chained: !seen || p.chained && continues(p.last, b), records: p.records + len(b.Records), at: -1}
	}
	at := make([]runAt, len(batches))
	out := make([]*Batch, 0, len(batches))
	for i, b := range batches {
		id := partID{b.Topic, b.Partition}
		p := parts[id]
		if p.at < 0 || !p.chained {
			p.at = len(out)
			parts[id] = p
			at[i] = runAt{run: len(out)}
			out = append(out, b)
			continue
		}
		r := out[p.at]
		if r.runOf == nil {
			first := r
			r = &Batch{Topic: first.Topic, Partition: first.Partition, ProducerID: first.ProducerID,
				ProducerEpoch: first.ProducerEpoch, BaseSequence: first.BaseSequence,
				LogAppendTime: first.LogAppendTime, KnownPartition: first.KnownPartition, runOf: []*Batch{first}}
			r.Records = append(RecycledRecords(p.records)[:0], first.Records...)
			out[p.at] = r
		}
		at[i] = runAt{run: p.at, skip: int64(len(r.Records))}
		r.Records = append(r.Records, b.Records...)
		r.runOf = append(r.runOf, b)
	}
	return out, at
}

// continues reports whether b can join the batch or run r of its partition: both not idempotent, or
// of one producer epoch with b's first sequence right after r's last; and the same log append time
// and partition check (a run is checked as its first batch is).
func continues(r, b *Batch) bool {
	switch {
	case b.ProducerID != r.ProducerID || b.LogAppendTime != r.LogAppendTime || b.KnownPartition != r.KnownPartition:
		return false
	case r.ProducerID < 0:
		return true
	}
	next := int64(r.BaseSequence) + int64(len(r.Records))
	return b.ProducerEpoch == r.ProducerEpoch && int64(b.BaseSequence) == next%(1<<31)
}

// appendMultiSplit is appendMulti, with the batches of a large request for several partitions split
// into up to appendSplitMax pipelines on as many pooled connections of c (a client, never one pinned
// connection), written at once: Redis runs their blocks one after the other, but the other pipelines
// are being written, or their replies parsed, while Redis executes one. Batches of one partition stay
// in one pipeline, in order.
func (s *Store) appendMultiSplit(ctx context.Context, c *redis.Client, batches []*Batch, out []AppendResult) {
	cuts := splitBatches(batches, appendSplitMin, appendSplitMax)
	var fo fanOut
	// Deferred: a panic in the first pipeline (recovered further up) must not unwind into the callers'
	// recycling of these batches' memory while the other pipelines still use it.
	defer fo.Wait()
	for i := len(cuts) - 2; i > 0; i-- {
		from, to := cuts[i], cuts[i+1]
		fo.Go(func() { s.appendMulti(ctx, c, batches[from:to], out[from:to]) })
	}
	s.appendMulti(ctx, c, batches[:cuts[1]], out[:cuts[1]])
}

// splitBatches returns the bounds (0, ..., len(batches)) of up to maxParts runs of batches with about
// the same number of records and at least minRecords each; one run when the batches are a single
// batch, fewer than 2*minRecords records, or name a partition twice.
func splitBatches(batches []*Batch, minRecords, maxParts int) []int {
	whole := []int{0, len(batches)}
	if len(batches) < 2 {
		return whole
	}
	total := 0
	seen := make(map[partID]struct{}, len(batches))
	for _, b := range batches {
		total += len(b.Records)
		id := partID{b.Topic, b.Partition}
		if _, dup := seen[id]; dup {
			return whole
		}
		seen[id] = struct{}{}
	}
	parts := min(maxParts, len(batches), total/minRecords)
	if parts < 2 {
		return whole
	}
	// Cut where the run reaches an equal share of the records left (before or after the batch that
	// reaches it, the nearer first), where both sides keep minRecords.
	cuts := []int{0}
	n, last := 0, 0 // records before the cut candidate; before the last cut
	for i, b := range batches {
		prev := n
		n += len(b.Records)
		if len(cuts) == parts {
			break
		}
		target := last + (total-last)/(parts-len(cuts)+1)
		if n < target {
			continue
		}
		cands := [2]struct{ at, count int }{{i + 1, n}, {i, prev}}
		if target-prev < n-target {
			cands[0], cands[1] = cands[1], cands[0]
		}
		for _, c := range cands {
			if c.at > cuts[len(cuts)-1] && c.at < len(batches) && c.count-last >= minRecords && total-c.count >= minRecords {
				cuts, last = append(cuts, c.at), c.count
				break
			}
		}
	}
	return append(cuts, len(batches))
}

type partID struct {
	topic     string
	partition int32
}

// appendMulti writes batches as MULTI blocks in one pipeline on c, which must reach the master of every
// batch's partition (a standalone client, a node client of a cluster, or a pinned connection).
func (s *Store) appendMulti(ctx context.Context, c pipeliner, batches []*Batch, out []AppendResult) {
	links := chainLinks(batches)
	s.appendMultiOnce(ctx, c, batches, out, links)
	if failed := needRepair(batches, out); len(failed) > 0 {
		s.repairMissingFunction(ctx, c, batches, out, failed, links)
	}
}

// needRepair lists the batches a missing function library failed: those whose FCALL found no
// function, and later batches of their partitions that found the entries those left behind.
func needRepair(batches []*Batch, out []AppendResult) []int {
	var failed []int
	var missing map[partID]bool
	for i := range out {
		id := partID{batches[i].Topic, batches[i].Partition}
		switch {
		case isFunctionMissing(out[i].Err):
			failed = append(failed, i)
			if missing == nil {
				missing = map[partID]bool{}
			}
			missing[id] = true
		case (errors.Is(out[i].Err, ErrStreamConflict) || errors.Is(out[i].Err, ErrStrayEntries) ||
			errors.Is(out[i].Err, errEarlierBatchFailed)) && missing[id]:
			// An earlier block of this partition ran its XADDs without the function (the library
			// loaded again in between, by another gateway): this one was refused for it (the chain,
			// batchLua; or those entries, not a native writer, are what it found). The repair
			// appends this batch again too, after that one.
			failed = append(failed, i)
		}
	}
	return failed
}

// appendMultiOnce is appendMulti without the repair of a missing function library, its blocks chained
// by links (chainLinks).
func (s *Store) appendMultiOnce(ctx context.Context, c pipeliner, batches []*Batch, out []AppendResult, links chain) {
	sc := getAppendScratch()
	defer sc.release()
	pipe := c.Pipeline()
	execs := make([]*redis.RawCmd, len(batches))
	finishes := make([]*redis.Cmd, len(batches))
	now := time.Now().UnixMilli()
	for i, b := range batches {
		after, tok := links.at(i)
		xadds, eval := s.multiArgs(b, s.partKeys(b), sc, now, after, tok)
		sc.queue(redis.NewCmd(ctx, &cmdMULTI))
		sc.queueXADDs(ctx, xadds) // "+QUEUED" (raw_reply.go)
		finishes[i] = redis.NewCmd(ctx, eval...)
		sc.queue(finishes[i])
		execs[i] = redis.NewRawCmd(ctx, &cmdEXEC)
		sc.queue(execs[i])
	}
	_ = pipe.BatchProcess(ctx, sc.cmders...)
	start := time.Now()
	cmds, err := pipe.Exec(ctx)
	s.observeNodePipeline(start, err, cmds) // on a cluster, c is a node client (or a pinned connection)
	for i, e := range execs {
		raw, err := e.Result()
		if err != nil {
			out[i] = AppendResult{Err: err} // connection, timeout
			continue
		}
		out[i] = execReply(raw, len(batches[i].Records))
		// EXECABORT names no cause; the finish step's own refusal when queued does (MOVED, ASK: the
		// slot moved; OOM), as every command of the block was refused alike.
		var queued redis.Error
		if redis.HasErrorPrefix(out[i].Err, "EXECABORT") && errors.As(finishes[i].Err(), &queued) {
			out[i].Err = queued
		}
	}
}

// nodeGroup is the batches owned by one Redis master.
type nodeGroup struct {
	node *redis.Client
	idx  []int
}

// groupByNode splits batches by the master owning their partition (one group on a standalone Redis).
func (s *Store) groupByNode(ctx context.Context, batches []*Batch, out []AppendResult) []*nodeGroup {
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		var groups []*nodeGroup
		byNode := map[*redis.Client]*nodeGroup{}
		for i, b := range batches {
			node, err := c.MasterForKey(ctx, s.keys.stream(b.Topic, b.Partition))
			if err != nil {
				out[i].Err = err
				continue
			}
			g := byNode[node]
			if g == nil {
				g = &nodeGroup{node: node}
				byNode[node] = g
				groups = append(groups, g)
			}
			g.idx = append(g.idx, i)
		}
		return groups
	case *redis.Client:
		g := &nodeGroup{node: c}
		for i := range batches {
			g.idx = append(g.idx, i)
		}
		return []*nodeGroup{g}
	}
	for i := range out {
		out[i].Err = fmt.Errorf("redisstore: append: unsupported client %T", s.rdb)
	}
	return nil
}

// masterFor is the client of the master owning key (the store's client on a standalone Redis).
func (s *Store) masterFor(ctx context.Context, key string) (*redis.Client, error) {
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	case *redis.Client:
		return c, nil
	}
	return nil, fmt.Errorf("redisstore: unsupported client %T", s.rdb)
}

// eachGroup runs fn for every group's batches (in parallel when there are several masters) and copies
// the results into out.
func eachGroup(groups []*nodeGroup, batches []*Batch, out []AppendResult, fn func(g *nodeGroup, sub []*Batch, res []AppendResult)) {
	run := func(g *nodeGroup) {
		sub := make([]*Batch, len(g.idx))
		for j, i := range g.idx {
			sub[j] = batches[i]
		}
		res := make([]AppendResult, len(sub))
		fn(g, sub, res)
		for j, i := range g.idx {
			out[i] = res[j]
		}
	}
	if len(groups) == 1 {
		run(groups[0])
		return
	}
	var fo fanOut
	for _, g := range groups {
		fo.Go(func() { run(g) })
	}
	fo.Wait()
}
