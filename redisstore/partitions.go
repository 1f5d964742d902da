package redisstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"
)

// Header is one record header; a nil Value is a null header value. In records a Read returned, Key
// (a string) and Value point into the read's reply buffer: after RecycleReads both may change, so a
// header key kept beyond that (a map key, a label) must be cloned.
type Header struct {
	Key   string
	Value []byte
}

// Record is one Kafka record as stored in a partition stream. Nil Key or Value means null.
type Record struct {
	Offset    int64
	Timestamp int64
	Key       []byte
	Value     []byte
	Headers   []Header
}

// Batch is one producer batch to append to one partition.
type Batch struct {
	Topic     string
	Partition int32
	Records   []Record // Offset is ignored: the store assigns offsets

	ProducerID    int64 // -1: not idempotent
	ProducerEpoch int16
	BaseSequence  int32
	// LogAppendTime, when non-zero, replaces every record's timestamp (message.timestamp.type=LogAppendTime).
	LogAppendTime int64
	// KnownPartition refuses the batch (ErrUnknownPartition) when the partition's meta hash is missing:
	// set for topics whose partitions got theirs at creation (Topic.PartitionMeta), where a missing one
	// means the topic was deleted, so an append still in flight cannot bring the partition back.
	KnownPartition bool
	// Durable has the append wait for Options.WaitReplicas / WaitAOF before it succeeds (a Kafka
	// producer's acks=all); other batches are answered once Redis applied them.
	Durable bool

	// runOf, set only on a run that mergeRuns built, holds the batches it is made of, in order.
	runOf []*Batch
}

// AppendResult is the outcome of one Batch.
type AppendResult struct {
	BaseOffset     int64
	LogStartOffset int64
	Duplicate      bool // an idempotent retry: nothing was stored, BaseOffset is the original one
	// FirstTimestamp is, for a Duplicate whose original's first record is still stored
	// (HasFirstTimestamp), that record's timestamp: the original's log append time on a LogAppendTime
	// topic, which Apache answers a duplicate with.
	FirstTimestamp    int64
	HasFirstTimestamp bool
	Err               error // nil, ErrOutOfOrderSequence, ErrInvalidEpoch, or a Redis failure
}

// argBuilder collects script arguments as pointers (*string, *int64) so go-redis writes them without
// boxing each one into an interface.
type argBuilder struct {
	strs []string
	ints []int64
	args []any
}

// Field names shared by every record; pointers to them cost nothing per argument.
var (
	fieldKey   = "key"
	fieldValue = "value"
	emptyValue = ""
)

func (a *argBuilder) addBytes(b []byte) {
	a.strs = append(a.strs, unsafe.String(unsafe.SliceData(b), len(b)))
	a.args = append(a.args, &a.strs[len(a.strs)-1])
}
func (a *argBuilder) addString(s string) {
	a.strs = append(a.strs, s)
	a.args = append(a.args, &a.strs[len(a.strs)-1])
}
func (a *argBuilder) addConst(s *string) { a.args = append(a.args, s) }
func (a *argBuilder) addInt(n int64) {
	a.ints = append(a.ints, n)
	a.args = append(a.args, &a.ints[len(a.ints)-1])
}

// headerNames builds "h:<name>" / "hn:<name>" field names once per distinct header name of a batch:
// producers repeat the same few header names on every record.
type headerNames struct{ seen []string } // pairs: header name, field name

func (h *headerNames) field(prefix, name string) string {
	for i := 0; i+1 < len(h.seen); i += 2 {
		if h.seen[i] == name && strings.HasPrefix(h.seen[i+1], prefix) {
			return h.seen[i+1]
		}
	}
	f := prefix + name
	if len(h.seen) < 32 {
		h.seen = append(h.seen, name, f)
	}
	return f
}

// addFields appends a record's stream fields after "ts": key, value, then its headers, as documented
// in doc.go.
func (a *argBuilder) addFields(r *Record, names *headerNames) {
	if r.Key != nil {
		a.addConst(&fieldKey)
		a.addBytes(r.Key)
	}
	if r.Value != nil {
		a.addConst(&fieldValue)
		a.addBytes(r.Value)
	}
	for _, h := range r.Headers {
		if h.Value == nil {
			a.addString(names.field("hn:", h.Key))
			a.addConst(&emptyValue)
		} else {
			a.addString(names.field("h:", h.Key))
			a.addBytes(h.Value)
		}
	}
}

func fieldCount(r *Record) int {
	n := len(r.Headers)
	if r.Key != nil {
		n++
	}
	if r.Value != nil {
		n++
	}
	return n
}

// appendArgs builds the append script's arguments (layout documented on appendScript), after and tok
// the batch's chainLink. The slices are sized up front: pointers into them must stay valid.
func (s *Store) appendArgs(b *Batch, after, tok *string) []any {
	nargs, nstrs, nints := 9, 1, 6
	cands := b.timeCandidates()
	for i := range b.Records {
		r := &b.Records[i]
		fc := fieldCount(r)
		nargs += 1 + 2*fc
		nstrs += fc + len(r.Headers)
		nints++
	}
	nargs += 2 * cands
	nints += 2 * cands
	a := argBuilder{strs: make([]string, 0, nstrs), ints: make([]int64, 0, nints), args: make([]any, 0, nargs)}
	a.addInt(b.ProducerID)
	a.addInt(int64(b.ProducerEpoch))
	a.addInt(int64(b.BaseSequence))
	a.addInt(int64(len(b.Records)))
	flags := int64(0) // appendScript's ARGV[5]
	if s.autoSeq.Load() {
		flags |= 1
	}
	if b.KnownPartition {
		flags |= 2
	}
	if b.Durable && (s.opts.WaitReplicas > 0 || s.opts.WaitAOF) {
		flags |= 4
	}
	a.addInt(flags)
	layout := make([]byte, 2*len(b.Records))
	for i := range b.Records {
		fc := fieldCount(&b.Records[i])
		layout[2*i], layout[2*i+1] = byte(fc>>8), byte(fc)
	}
	a.addString(unsafe.String(unsafe.SliceData(layout), len(layout)))
	a.addConst(after)
	a.addConst(tok)
	a.addInt(int64(cands))
	a.addTimeCandidates(b)
	var names headerNames
	for i := range b.Records {
		r := &b.Records[i]
		a.addInt(b.recordTS(r))
		a.addFields(r, &names)
	}
	return a.args
}

// timeIndexStride is the fewest records between two time-index entries (batchLua's TIME_INDEX_STRIDE).
// The index is sparse, as Apache Kafka's is: OffsetForTime scans the records between two index points
// (512-1,000 while timestamps keep rising; points come only where the maximum grows), and an append
// adds an entry once per timeIndexStride records instead of once per batch. The partition's maximum timestamp and
// its offset are kept exactly, in its meta hash.
const timeIndexStride = 512

// maxIndexedTS is the largest timestamp the time index and the partition's maximum hold; a record's
// larger one (past the year 287,000: nanoseconds sent as milliseconds, or garbage) counts as this. The
// finish step compares and writes timestamps as Lua numbers, doubles, exact up to 2^53: one above
// would be rounded, and one near 2^63 stored as -2^63, after which time lookups missed records and
// retention deleted records still within retention.ms. Lookups still compare each record's own
// timestamp; MaxTimestamp answers such a record's offset with this timestamp.
const maxIndexedTS = 1<<53 - 1

// eachTimeCandidate calls f for the records of b that may enter the partition's time index (or set its
// maximum timestamp) if they raise its running maximum: of the records where the batch's running
// maximum grows, the first, every one at least timeIndexStride records after the previous pick, and the
// last (the batch's maximum).
func (b *Batch) eachTimeCandidate(f func(i int, ts int64)) {
	maxTS, last, picked := int64(-1<<63), -1, -timeIndexStride
	for i := range b.Records {
		ts := min(b.recordTS(&b.Records[i]), maxIndexedTS)
		if ts <= maxTS {
			continue
		}
		maxTS = ts
		if i-picked >= timeIndexStride {
			f(i, ts)
			picked = i
		}
		last = i
	}
	if last > picked {
		f(last, maxTS)
	}
}

// timeCandidates counts b's time-index candidates.
func (b *Batch) timeCandidates() int {
	n := 0
	b.eachTimeCandidate(func(int, int64) { n++ })
	return n
}

// addTimeCandidates adds a (record index, timestamp) pair per time-index candidate of b.
func (a *argBuilder) addTimeCandidates(b *Batch) {
	b.eachTimeCandidate(func(i int, ts int64) {
		a.addInt(int64(i))
		a.addInt(ts)
	})
}

// recordTS is the timestamp stored for r: the log append time when the topic uses it.
func (b *Batch) recordTS(r *Record) int64 {
	if b.LogAppendTime != 0 {
		return b.LogAppendTime
	}
	return r.Timestamp
}

// Append stores each batch atomically and in order within its partition; batches for different
// partitions go out in one pipeline. Results are in the order of batches. A batch with a record of more
// than MaxRecordHeaders headers is refused (ErrTooManyHeaders) and not sent.
func (s *Store) Append(ctx context.Context, batches []*Batch) []AppendResult {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if s.reprobeAt.Load() != 0 {
		s.reprobe()
	}
	out := make([]AppendResult, len(batches))
	if !slices.ContainsFunc(batches, func(b *Batch) bool { return tooManyHeaders(b) != nil }) {
		s.appendTo(ctx, batches, out)
		return out
	}
	var kept []*Batch
	var at []int
	for i, b := range batches {
		if out[i].Err = tooManyHeaders(b); out[i].Err == nil {
			kept, at = append(kept, b), append(at, i)
		}
	}
	res := make([]AppendResult, len(kept))
	s.appendTo(ctx, kept, res)
	for j, i := range at {
		out[i] = res[j]
	}
	return out
}

// MaxRecordHeaders is the most headers Append takes in one record; a batch with a record of more is
// refused (ErrTooManyHeaders) before anything of it is sent. The append script (Redis before 7, Redis
// 7.2+, Valkey, the embedded store) passes a record's fields to XADD as Lua values (unpack), of which
// Redis 7.0 and Valkey 8 took 3,996 headers beside a key and a value, the embedded store 2,532; a
// record past that failed the script after the records ahead of it were added, past the high
// watermark, and the partition refused every later append as a stream conflict. One bound on every
// path and server, so a batch means the same everywhere.
const MaxRecordHeaders = 2000

// tooManyHeaders refuses b (ErrTooManyHeaders) if it has a record of more than MaxRecordHeaders
// headers.
func tooManyHeaders(b *Batch) error {
	for j := range b.Records {
		if n := len(b.Records[j].Headers); n > MaxRecordHeaders {
			return fmt.Errorf("%w: record %d of %s/%d has %d, at most %d", ErrTooManyHeaders, j, b.Topic, b.Partition, n, MaxRecordHeaders)
		}
	}
	return nil
}

// appendTo is Append of batches that passed its checks, into out.
func (s *Store) appendTo(ctx context.Context, batches []*Batch, out []AppendResult) {
	switch {
	case (s.opts.WaitReplicas > 0 || s.opts.WaitAOF) && slices.ContainsFunc(batches, func(b *Batch) bool { return b.Durable }):
		s.appendDurable(ctx, batches, out)
	case s.multiAppend.Load():
		s.appendRuns(ctx, batches, out)
	default:
		// Through each master's own client: a cluster client sends a pipeline again after a lost
		// reply (MaxRedirects), and an append must not run twice.
		eachGroup(s.groupByNode(ctx, batches, out), batches, out, func(g *nodeGroup, sub []*Batch, res []AppendResult) {
			s.appendOn(ctx, g.node, sub, res)
		})
	}
	s.refreshOnMoved(ctx, out) // every path appends through node clients or pinned connections
	if s.multiAppend.Load() && slices.ContainsFunc(out, refusedUndo) {
		// The server refuses the transaction's undo: a master replaced by Redis 7.2+ or Valkey since
		// the probe. Appends are scripts from now on; the partition this hit keeps its stream's last
		// ID past the high watermark, and refuses appends (ErrStreamConflict).
		s.multiAppend.Store(false)
	}
}

// refusedUndo reports an append whose finish step could not set the stream's last ID back (Redis 7.2+).
func refusedUndo(r AppendResult) bool {
	return r.Err != nil && strings.Contains(r.Err.Error(), "max_deleted_entry_id")
}

// scriptPiper is what an append needs: a client or one pinned connection.
type scriptPiper interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
}

// appendOn runs the batches' append scripts on c in one pipeline and stores the results in out.
//
// Scripts are loaded lazily: a fresh Redis (or a failed-over replica, or one whose script cache was
// flushed) answers EVALSHA with NOSCRIPT. From a partition's first batch answered so, its batches that
// did not run (NOSCRIPT, or refused because the one before did not: the chain, batchLua) are run
// again, in order, in a second pipeline of EVAL with the script's text, which never answers NOSCRIPT.
// The chain keeps a later batch from being stored ahead of an earlier one when the cache is flushed,
// and the script loaded again by another connection, between them. The second pipeline goes on with
// the first's chain (each batch keeps its link): the first batch run again waits for the token of the
// batch before it in the first pipeline, so a batch that failed otherwise there (OOM, any error
// reply) still stops the ones after it (errEarlierBatchFailed), which must not be stored ahead of it.
func (s *Store) appendOn(ctx context.Context, c scriptPiper, batches []*Batch, out []AppendResult) {
	links := chainLinks(batches)
	s.appendScripts(ctx, c, batches, out, links, false)
	var again []int
	var noscript map[partID]bool
	for i, r := range out {
		id := partID{batches[i].Topic, batches[i].Partition}
		switch {
		case r.Err != nil && redis.HasErrorPrefix(r.Err, "NOSCRIPT"):
			if noscript == nil {
				noscript = map[partID]bool{}
			}
			noscript[id] = true
			again = append(again, i)
		case errors.Is(r.Err, errEarlierBatchFailed) && noscript[id]:
			again = append(again, i)
		}
	}
	if again == nil {
		return
	}
	sub := make([]*Batch, len(again))
	for j, i := range again {
		sub[j] = batches[i]
	}
	res := make([]AppendResult, len(sub))
	s.appendScripts(ctx, c, sub, res, links.of(again), true)
	for j, i := range again {
		out[i] = res[j]
	}
}

// appendScripts runs the batches' append scripts on c in one pipeline, chained by links (chainLinks),
// as EVAL with the script's text when eval is set, else as EVALSHA.
func (s *Store) appendScripts(ctx context.Context, c scriptPiper, batches []*Batch, out []AppendResult, links chain, eval bool) {
	cmds := make([]*redis.Cmd, len(batches))
	pipe := c.Pipeline()
	for i, b := range batches {
		after, tok := links.at(i)
		keys, args := s.partKeys(b), s.appendArgs(b, after, tok)
		if eval {
			cmds[i] = appendScript.Eval(ctx, pipe, keys, args...)
		} else {
			cmds[i] = appendScript.EvalSha(ctx, pipe, keys, args...)
		}
	}
	_, _ = pipe.Exec(ctx)
	for i := range cmds {
		out[i] = appendResult(cmds[i])
	}
}

// errEarlierBatchFailed answers a batch refused, nothing of it kept, because the batch before it of
// its partition in the same pipeline did not run to an answer (the chain, batchLua): retried, by the
// store (after NOSCRIPT or a missing function library) or the producer, it is stored after that one.
var errEarlierBatchFailed = errors.New("redisstore: an earlier batch of the partition was not stored; retry")

// chainLink is a batch's place in its pipeline's chain of its partition's batches (batchLua): the token
// of the batch before it (after) and its own (tok), "" for none.
type chainLink struct{ after, tok string }

// chain is the links of batches appended in one pipeline, in order; nil when no partition has more
// than one batch there.
type chain []chainLink

// chainLinks links each partition's batches among batches, in order. The tokens are unique to the
// pipeline: a random prefix and the batch's place.
func chainLinks(batches []*Batch) chain {
	if len(batches) < 2 {
		return nil
	}
	next := make([]int, len(batches)) // the partition's next batch, 0 for none
	following := make(map[partID]int, len(batches))
	for i := len(batches) - 1; i >= 0; i-- {
		id := partID{batches[i].Topic, batches[i].Partition}
		next[i] = following[id]
		following[id] = i
	}
	if !slices.ContainsFunc(next, func(n int) bool { return n > 0 }) {
		return nil
	}
	links := make(chain, len(batches))
	prefix := strconv.FormatUint(rand.Uint64(), 36) + ":"
	for i, n := range next {
		if n > 0 {
			links[i].tok = prefix + strconv.Itoa(i)
			links[n].after = links[i].tok
		}
	}
	return links
}

// of is the links of the batches at idx (in order), for appending them again: each keeps its own, so
// the first of a partition among them waits for the batch before it in the first pipeline.
func (l chain) of(idx []int) chain {
	if l == nil {
		return nil
	}
	out := make(chain, len(idx))
	for j, i := range idx {
		out[j] = l[i]
	}
	return out
}

// at is the i-th batch's link as arguments.
func (l chain) at(i int) (after, tok *string) {
	if l == nil {
		return &emptyValue, &emptyValue
	}
	return &l[i].after, &l[i].tok
}

func (s *Store) partKeys(b *Batch) []string {
	return []string{s.keys.stream(b.Topic, b.Partition), s.keys.meta(b.Topic, b.Partition),
		s.keys.tindex(b.Topic, b.Partition), s.keys.producers(b.Topic, b.Partition), s.keys.bindex(b.Topic, b.Partition)}
}

func appendResult(c *redis.Cmd) AppendResult {
	vals, err := c.Int64Slice()
	if err != nil {
		return AppendResult{Err: err}
	}
	if len(vals) < 2 {
		return AppendResult{Err: fmt.Errorf("redisstore: append: unexpected reply %v", vals)}
	}
	return scriptAnswer(vals)
}

// scriptAnswer reads the answer of the append script or of the finish step (at least two numbers):
// {base offset, log start offset, 1 if duplicate [, the duplicate's first timestamp]} or {-1, code};
// only the finish step answers the codes -3 and -4.
func scriptAnswer(vals []int64) AppendResult {
	if vals[0] >= 0 {
		r := AppendResult{BaseOffset: vals[0], LogStartOffset: vals[1], Duplicate: len(vals) > 2 && vals[2] == 1}
		if r.Duplicate && len(vals) > 3 {
			r.FirstTimestamp, r.HasFirstTimestamp = vals[3], true
		}
		return r
	}
	switch vals[1] {
	case 47:
		return AppendResult{Err: ErrInvalidEpoch}
	case 3:
		return AppendResult{Err: ErrUnknownPartition}
	case -2:
		return AppendResult{Err: ErrStreamConflict}
	case -3:
		return AppendResult{Err: errRunRefused}
	case -4:
		return AppendResult{Err: ErrStrayEntries}
	case -5:
		return AppendResult{Err: errEarlierBatchFailed}
	default:
		return AppendResult{Err: ErrOutOfOrderSequence}
	}
}

// appendDurable appends and then waits (WAIT / WAITAOF) on the very connection that wrote: both
// commands only wait for the replication offset of their own connection's last write, so a WAIT on
// another pooled connection returns at once and confirms nothing. Batches are grouped by the master
// that owns their partition; each group is written and waited for on one pinned connection, the
// groups in parallel. (A pinned connection is not redirected: a slot that moved in between fails
// with MOVED, which IsUnavailable classifies as retriable.)
func (s *Store) appendDurable(ctx context.Context, batches []*Batch, out []AppendResult) {
	eachGroup(s.groupByNode(ctx, batches, out), batches, out, func(g *nodeGroup, sub []*Batch, res []AppendResult) {
		conn := g.node.Conn()
		defer conn.Close()
		if s.multiAppend.Load() {
			s.appendMulti(ctx, conn, sub, res)
		} else {
			s.appendOn(ctx, conn, sub, res)
		}
		var err error
		for j, r := range res {
			if r.Err == nil && sub[j].Durable {
				err = s.waitDurable(ctx, conn)
				break
			}
		}
		for j := range res {
			if res[j].Err == nil && sub[j].Durable {
				res[j].Err = err
			}
		}
	})
}

// waitDurable applies the configured WAIT / WAITAOF on conn, the connection that took the writes.
// Those are done whatever it answers: a wait that fails (WAITAOF refused by a server whose AOF is off,
// a timeout) is ErrNotDurable too, which a relative offset reset must not be sent again on.
func (s *Store) waitDurable(ctx context.Context, conn *redis.Conn) error {
	err := s.wait(ctx, conn)
	if err == nil || errors.Is(err, ErrNotDurable) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrNotDurable, err)
}

func (s *Store) wait(ctx context.Context, conn *redis.Conn) error {
	if s.opts.WaitReplicas > 0 {
		n, err := conn.Do(ctx, "WAIT", s.opts.WaitReplicas, s.opts.WaitTimeout.Milliseconds()).Int64()
		if err != nil {
			return err
		}
		if n < int64(s.opts.WaitReplicas) {
			return ErrNotDurable
		}
	}
	if s.opts.WaitAOF {
		res, err := conn.Do(ctx, "WAITAOF", 1, 0, s.opts.WaitTimeout.Milliseconds()).Int64Slice()
		if err != nil {
			return err
		}
		if len(res) == 0 || res[0] < 1 {
			return ErrNotDurable
		}
	}
	return nil
}

// Offsets is a partition's log start offset and high watermark.
type Offsets struct {
	Start, End int64
}

// PartitionOffsets returns the offsets of each partition of topic, or the first error of
// EachPartitionOffsets.
func (s *Store) PartitionOffsets(ctx context.Context, topic string, partitions []int32) ([]Offsets, error) {
	out, errs := s.EachPartitionOffsets(ctx, topic, partitions)
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// EachPartitionOffsets is PartitionOffsets with an error for each partition: a read that failed fails
// its partition alone (on Redis Cluster, a master down fails the partitions it holds), where
// PartitionOffsets fails them all. One round trip per master, as the cluster client's one pipeline.
func (s *Store) EachPartitionOffsets(ctx context.Context, topic string, partitions []int32) ([]Offsets, []error) {
	return s.KnownPartitionOffsets(ctx, topic, partitions, 0)
}

// KnownPartitionOffsets is EachPartitionOffsets for a topic whose partitions below known
// (Topic.PartitionMeta) got their meta hash when they were created: such a partition that has none,
// its topic deleted since the caller looked it up, answers ErrUnknownPartition (EachPartitionOffsets
// gives it an empty partition's offsets). On a Redis Cluster each master's partitions are read on
// their own (acrossMasters), and fail alone.
func (s *Store) KnownPartitionOffsets(ctx context.Context, topic string, partitions []int32, known int32) ([]Offsets, []error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	type answer struct {
		offs Offsets
		err  error
	}
	res := perMaster(ctx, s, len(partitions), func(i int) string { return s.keys.meta(topic, partitions[i]) },
		func(ctx context.Context, idx []int) []answer {
			offs, errs := s.partitionOffsets(ctx, topic, picked(partitions, idx), known)
			out := make([]answer, len(idx))
			for k := range out {
				out[k] = answer{offs[k], errs[k]}
			}
			return out
		}, func(a answer) bool { return a.err == nil }, answer{err: errMasterLagging})
	offs, errs := make([]Offsets, len(partitions)), make([]error, len(partitions))
	for i, a := range res {
		offs[i], errs[i] = a.offs, a.err
	}
	return offs, errs
}

// partitionOffsets is KnownPartitionOffsets of partitions all on one master (or of any, through the
// cluster client), in one pipeline.
func (s *Store) partitionOffsets(ctx context.Context, topic string, partitions []int32, known int32) ([]Offsets, []error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(partitions))
	for i, p := range partitions {
		cmds[i] = pipe.HMGet(ctx, s.keys.meta(topic, p), "next", "start")
	}
	_, _ = pipe.Exec(ctx)
	offs, errs := make([]Offsets, len(partitions)), make([]error, len(partitions))
	for i, c := range cmds {
		if err := c.Err(); err != nil && err != redis.Nil {
			errs[i] = err
			continue
		}
		offs[i], errs[i] = readOffsets(ReadRequest{KnownPartition: partitions[i] < known}, c.Val())
	}
	return offs, errs
}

func parseOffsets(v []any) Offsets {
	var o Offsets
	if len(v) >= 2 {
		o.End = anyInt(v[0])
		o.Start = anyInt(v[1])
	}
	return o
}

func anyInt(v any) int64 {
	s, _ := v.(string)
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// ReadRequest asks for up to Count records of one partition from Offset on.
type ReadRequest struct {
	Topic     string
	Partition int32
	Offset    int64
	Count     int64
	// Expect is how many entries the caller expects to be there (0: Count; negative: none, as for a
	// partition caught up at its last read). It only decides whether and where a read is split (a
	// consumer at the end of a partition asks for many, finds few) and how large a buffer its reply is
	// read into.
	Expect int64
	// RecordBytes is the size the caller expects of a record, its key, value and headers (0: unknown;
	// an estimate of its encoded size will do). It only sizes the buffer the reply is read into.
	RecordBytes int64
	// MaxBytes is the byte limit of what the caller makes of the records (0: none). The read takes at
	// most the entries that the partition's bytes index shows to fit in readLimit(MaxBytes)
	// (bytes_index.go), whatever Count says.
	MaxBytes int64
	// KnownPartition says the partition has a meta hash (Topic.PartitionMeta): a read that finds none
	// answers ErrUnknownPartition (the topic was deleted since the caller looked it up), not the
	// offsets of an empty partition.
	KnownPartition bool
}

// readOffsets are the offsets of an HMGET of a partition's meta hash (next, start) for r, or
// ErrUnknownPartition when r's partition is known to have a meta hash and it is gone.
func readOffsets(r ReadRequest, v []any) (Offsets, error) {
	if r.KnownPartition && len(v) >= 2 && v[0] == nil && v[1] == nil {
		return Offsets{}, ErrUnknownPartition
	}
	return parseOffsets(v), nil
}

// expected is the number of entries r is expected to find.
func (r ReadRequest) expected() int64 {
	n := r.count()
	switch {
	case r.Expect < 0:
		return 0
	case r.Expect > 0 && r.Expect < n:
		return r.Expect
	}
	return n
}

// count is how many entries r reads: Count, but none from a negative offset and none from
// math.MaxInt64 on (no entry has an offset a high watermark cannot pass), so a read from near there
// sends no entry ID past the largest and no piece's bounds overflow.
func (r ReadRequest) count() int64 {
	if r.Offset < 0 {
		return 0
	}
	return min(r.Count, math.MaxInt64-r.Offset)
}

// ReadResult is what one ReadRequest found: records from Offset (empty when none yet) and the
// partition's offsets as read in the same round trip.
type ReadResult struct {
	Offsets
	Records []Record
	Err     error
	// Cut says the read took fewer entries than Count, by its byte bound (MaxBytes): when it found
	// all it took, more may be there.
	Cut   bool
	short *readPiece // a piece with a fixed end that came back short of it (see mergeParts)
	// bufs are the reply buffers Records point into, this result's alone (RecycleReads).
	bufs []*replyBuffer
}

// RecycleReads hands the reply buffers of results back for reuse, once the caller is done with them and
// with every record in them: their keys, values and headers point into those buffers, which the next
// read overwrites. Each result's Records is nil after. Copies of a result share its buffers: recycling
// one ends the records of every copy, so exactly one copy is recycled (a second RecycleReads of the
// same slice does nothing). Results not recycled are left to the garbage collector.
func RecycleReads(results []ReadResult) {
	for i := range results {
		r := &results[i]
		for _, b := range r.bufs {
			b.recycle()
		}
		r.bufs, r.Records = nil, nil
	}
}

// Read runs every request in one pipeline. A request outside [Start, End] gets no records (the caller
// compares against the returned offsets); records are never returned from below Start or from End on.
//
// A large read is split by entry ID (offsets are dense IDs, so a range splits exactly) into up to
// readSplitMax parts of about the same expected size that run as pipelines on as many connections at
// once: Redis answers them one after the other, but their replies are parsed in parallel, and parsing is
// most of a read's cost. (Entries deleted natively inside a part but the last make the read return that
// many fewer entries, never different ones.)
//
// On a Redis Cluster each master's partitions are read on their own (acrossMasters): a master that
// fails, or has not answered masterLag after another did, fails its partitions alone
// (errMasterLagging, retriable), and the others' records are returned.
func (s *Store) Read(ctx context.Context, reqs []ReadRequest) []ReadResult {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return perMaster(ctx, s, len(reqs), func(i int) string { return s.keys.meta(reqs[i].Topic, reqs[i].Partition) },
		func(ctx context.Context, idx []int) []ReadResult {
			if len(idx) == len(reqs) {
				return s.readShare(ctx, reqs)
			}
			return s.readShare(ctx, picked(reqs, idx))
		}, func(r ReadResult) bool { return r.Err == nil }, ReadResult{Err: errMasterLagging})
}

// readShare is Read of requests all on one master (or of any, through the cluster client).
func (s *Store) readShare(ctx context.Context, reqs []ReadRequest) []ReadResult {
	out := make([]ReadResult, len(reqs))
	reqs, fetches, cut := s.planBounds(ctx, reqs)
	for i := range cut {
		out[i].Cut = cut[i]
	}
	parts := splitReads(reqs, readSplitMin, readSplitMax, readPipelineBytes)
	if len(parts) == 1 {
		s.readPieces(ctx, reqs, parts[0], true, fetches, out)
		return out
	}
	more := make([][]ReadResult, len(parts))
	for j := 1; j < len(parts); j++ {
		more[j] = make([]ReadResult, len(reqs))
	}
	var fo fanOut
	defer fo.Wait() // a panic of the first part's unwinds once the others are done
	// Each connection takes the next part not taken yet; this goroutine's takes the first.
	var next atomic.Int64
	next.Store(1)
	for range min(readSplitMax, len(parts)) - 1 {
		fo.Go(func() {
			for j := next.Add(1) - 1; j < int64(len(parts)); j = next.Add(1) - 1 {
				s.readPieces(ctx, reqs, parts[j], false, nil, more[j])
			}
		})
	}
	s.readPieces(ctx, reqs, parts[0], true, fetches, out)
	fo.Wait()
	s.mergeParts(ctx, reqs, out, more[1:])
	return out
}

// mergeParts appends to out (the first part's results) the records of the later parts, in part order.
// The first part reads the offsets before its own entries, so every entry below End existed when it
// ran; a later part may have run before that, and a piece of it that found the stream ending inside
// its range (short of its fixed end) leaves a gap before what a still later part found appended
// meanwhile. A consumer given records past a gap never asks for the ones in it, so such a request's
// records from that piece on are read again, below End, in one more round trip.
func (s *Store) mergeParts(ctx context.Context, reqs []ReadRequest, out []ReadResult, more [][]ReadResult) {
	var again []readPiece
	cut := make([]bool, len(reqs))
	grow := make([]int, len(reqs)) // the records each request takes from the later parts
	for _, part := range more {
		for i := range out {
			m := &part[i]
			out[i].bufs = append(out[i].bufs, m.bufs...) // their records, or none, and recycled alike
			if out[i].Err == nil {
				out[i].Err = m.Err
			}
			if out[i].Err != nil || cut[i] {
				m.Records = nil
				continue
			}
			if m.short != nil && m.short.from < out[i].End {
				cut[i] = true
				again = append(again, readPiece{req: i, from: m.short.from, to: out[i].End - 1,
					count: reqs[i].Offset + reqs[i].count() - m.short.from})
				m.Records = nil
				continue
			}
			m.Records = out[i].Offsets.Clip(m.Records, reqs[i].Offset)
			grow[i] += len(m.Records)
		}
	}
	// Each request's records copied once, into a slice of their number: a read in parts of 256 KiB
	// has a 1 MiB request's records in four or five of them.
	for i := range out {
		if grow[i] == 0 || out[i].Err != nil {
			continue
		}
		out[i].Records = slices.Grow(out[i].Records, grow[i])
		for _, part := range more {
			out[i].Records = append(out[i].Records, part[i].Records...)
		}
	}
	if len(again) == 0 {
		return
	}
	res := make([]ReadResult, len(reqs))
	s.readPieces(ctx, reqs, again, false, nil, res)
	for _, p := range again { // one piece per request (cut)
		out[p.req].bufs = append(out[p.req].bufs, res[p.req].bufs...)
		if err := res[p.req].Err; err != nil {
			out[p.req].Err = err
			continue
		}
		out[p.req].Records = append(out[p.req].Records, out[p.req].Offsets.Clip(res[p.req].Records, reqs[p.req].Offset)...)
	}
}

// A read expecting readSplitMin entries or more is split in parts of at least half that many, at
// most readSplitMax of them, read on as many connections at once, whose replies are parsed in parallel
// (parsing is most of a read's cost). A read expected to bring more reply than readPipelineBytes in
// each part is split further, into parts of about that much (below twice that), still readSplitMax
// at a time: Redis builds a pipeline's whole reply before it writes any of it, and a reply of megabytes
// lands in memory it has to fault in afresh each time (perf on redis-server reading 1 KB records of 64
// partitions in four pipelines of 16 MB: page faults and the copies into fresh pages most of its
// time, 8-9 us of its CPU a record against 1.3-1.9 in pipelines of 256 KiB).
const (
	readSplitMin      = 512
	readSplitMax      = 4
	readPipelineBytes = 256 << 10
)

// replyBytes is about the size of an XRANGE reply of entries entries: each takes its record's bytes
// and about 80 of ID, field names and lengths; unknown records are taken for 100-byte ones.
func replyBytes(entries, recordBytes int64) int64 {
	if recordBytes <= 0 {
		recordBytes = 100
	}
	return entries * (recordBytes + 80)
}

// rangeReplyHint is the buffer an XRANGE reply of entries entries is read into (replyBytes; the buffer
// doubles when the records are larger). At most 8 MiB up front.
func rangeReplyHint(entries, recordBytes int64) int {
	return int(min(replyBytes(entries, recordBytes), 8<<20))
}

// readPiece is a range of one request's entries: from offset from, up to count entries, up to offset
// to (inclusive; -1: no bound).
type readPiece struct {
	req      int
	from, to int64
	count    int64
}

// splitReads turns reqs into lists of pieces: one list, or, when they expect splitMin entries or more,
// up to maxParts lists of about the same number of expected entries, and more when that leaves lists
// expected to bring more than about pipeBytes of reply each (replyBytes); a request at a boundary is
// split by offset, and a request's pieces are in list order.
func splitReads(reqs []ReadRequest, splitMin int64, maxParts int, pipeBytes int64) [][]readPiece {
	var total, bytes int64
	for _, r := range reqs {
		if r.count() > 0 {
			total += r.expected()
			bytes += replyBytes(r.expected(), r.RecordBytes)
		}
	}
	n := int64(1)
	if total >= splitMin {
		n = min(int64(maxParts), max(2, total/(splitMin/2)))
	}
	// Lists of about pipeBytes, up to twice that for a read of less than twice that: a read a
	// little over readSplitMax pipelines' worth is not made to wait for one more round trip.
	if need := bytes / pipeBytes; need > n {
		n = min(total, need)
	}
	share := (total + n - 1) / n
	if share > 0 {
		n = (total + share - 1) / share // no list left empty: 9 in 4 lists are 3, 3 and 3
	}
	lists := make([][]readPiece, n)
	li, taken := int64(0), int64(0)
	for i, r := range reqs {
		if r.count() <= 0 {
			continue
		}
		from, count, e := r.Offset, r.count(), r.expected()
		for {
			room := share - taken
			if li == n-1 || e <= room {
				lists[li] = append(lists[li], readPiece{req: i, from: from, to: -1, count: count})
				taken += e
				break
			}
			if room > 0 {
				lists[li] = append(lists[li], readPiece{req: i, from: from, to: from + room - 1, count: room})
				from, count, e = from+room, count-room, e-room
			}
			li, taken = li+1, 0
		}
	}
	return lists
}

// readPieces reads pieces (and, with metas, every request's offsets and the bytes index points in
// fetches) in one pipeline into out, whose records are in the order of the pieces. The XRANGE replies are read raw (raw_reply.go), which the
// client library neither redirects (MOVED, ASK: a slot migrating or failed over) nor retries; a request
// whose read failed, or came back as an error reply, is read once more as values (readAgain), which
// it does.
func (s *Store) readPieces(ctx context.Context, reqs []ReadRequest, pieces []readPiece, metas bool, fetches []pointFetch, out []ReadResult) {
	var mcmds []*redis.SliceCmd
	ranges := make([]*redis.RawWriteToCmd, len(pieces))
	bufs := make([]*replyBuffer, len(pieces))
	pipe := s.rdb.Pipeline()
	sent := time.Now()
	if metas {
		mcmds = make([]*redis.SliceCmd, len(reqs))
		for i, r := range reqs {
			mcmds[i] = pipe.HMGet(ctx, s.keys.meta(r.Topic, r.Partition), readMetaFields...)
		}
		for i := range fetches {
			f := &fetches[i]
			f.queue(ctx, pipe, s.keys.bindex(reqs[f.req].Topic, reqs[f.req].Partition))
		}
	}
	for i, p := range pieces {
		r := reqs[p.req]
		bufs[i] = newReplyBuffer(rangeReplyHint(p.expected(r), r.RecordBytes))
		ranges[i] = redis.NewRawWriteToCmd(ctx, bufs[i], s.rangeArgs(r, p)...)
		_ = pipe.Process(ctx, ranges[i])
	}
	_, _ = pipe.Exec(ctx)
	raws := make([][]byte, len(pieces))
	errs := make([]error, len(pieces))
	var failed map[int]bool // requests to read again
	fail := func(req int) {
		if failed == nil {
			failed = map[int]bool{}
		}
		failed[req] = true
	}
	for i, c := range mcmds {
		if err := c.Err(); err != nil && err != redis.Nil {
			fail(i)
			out[i].Err = err
			continue
		}
		out[i].Offsets, out[i].Err = readOffsets(reqs[i], c.Val())
		if out[i].Err == nil && reqs[i].MaxBytes > 0 {
			s.bounds.get(reqs[i].Topic, reqs[i].Partition).observeMeta(c.Val(), sent)
		}
	}
	for i := range fetches {
		f := &fetches[i]
		next := int64(-1)
		if mcmds[f.req].Err() == nil {
			next = out[f.req].End
		}
		f.store(next)
	}
	for i, p := range pieces {
		errs[i], raws[i] = ranges[i].Err(), bufs[i].b
		if errs[i] != nil || isErrorReply(raws[i]) {
			fail(p.req)
		}
		out[p.req].bufs = append(out[p.req].bufs, bufs[i])
	}
	if failed != nil && ctx.Err() == nil {
		s.readAgain(ctx, reqs, pieces, failed, mcmds != nil, out, raws, errs)
	}
	for i, p := range pieces {
		o := &out[p.req]
		if o.Err != nil {
			continue
		}
		if errs[i] != nil {
			o.Err = errs[i]
			continue
		}
		recs, err := parseEntries(raws[i])
		if err != nil {
			o.Err = err
			continue
		}
		if p.to >= 0 && int64(len(recs)) < p.count && (len(recs) == 0 || recs[len(recs)-1].Offset < p.to) {
			o.short = &pieces[i]
		}
		if metas {
			recs = o.Offsets.Clip(recs, reqs[p.req].Offset)
		}
		o.Records = recs
	}
}

// readAgain reads the requests in failed (offsets too, with metas) and their pieces once more, as
// values, through the client library's redirects and retries, and stores what it read in out, raws
// (each reply turned back into RESP for parseEntries) and errs.
func (s *Store) readAgain(ctx context.Context, reqs []ReadRequest, pieces []readPiece, failed map[int]bool, metas bool, out []ReadResult, raws [][]byte, errs []error) {
	pipe := s.rdb.Pipeline()
	mcmds := map[int]*redis.SliceCmd{}
	if metas {
		for i := range failed {
			mcmds[i] = pipe.HMGet(ctx, s.keys.meta(reqs[i].Topic, reqs[i].Partition), "next", "start")
		}
	}
	ranges := make([]*redis.Cmd, len(pieces))
	for i, p := range pieces {
		if failed[p.req] {
			ranges[i] = pipe.Do(ctx, s.rangeArgs(reqs[p.req], p)...)
		}
	}
	_, _ = pipe.Exec(ctx)
	for i, c := range mcmds {
		out[i].Err = nil
		if err := c.Err(); err != nil && err != redis.Nil {
			out[i].Err = err
			continue
		}
		out[i].Offsets, out[i].Err = readOffsets(reqs[i], c.Val())
	}
	for i, c := range ranges {
		if c == nil {
			continue
		}
		v, err := c.Result()
		switch {
		case err == redis.Nil:
			raws[i], errs[i] = []byte("*0\r\n"), nil
		case err != nil:
			errs[i] = err
		default:
			raws[i], errs[i] = appendRESP(nil, v), nil
		}
	}
}

// rangeArgs is the XRANGE command of piece p of request r.
func (s *Store) rangeArgs(r ReadRequest, p readPiece) []any {
	to := "+"
	if p.to >= 0 {
		to = EntryID(p.to)
	}
	return []any{"XRANGE", s.keys.stream(r.Topic, r.Partition), EntryID(p.from), to, "COUNT", p.count}
}

// expected is how many entries piece p of request r is expected to find: those of the request's
// expected entries that lie in its range.
func (p readPiece) expected(r ReadRequest) int64 {
	return min(p.count, max(r.Offset+r.expected()-p.from, 0))
}

// Clip keeps the records of a read from offset from that lie in [Start, End), and drops them all when
// the read starts below Start: the stream may still hold entries below a log start offset that a
// concurrent (or fallback) trim has not removed yet, and records past End were appended after the
// offsets were read.
func (o Offsets) Clip(recs []Record, from int64) []Record {
	if from < o.Start {
		return recs[:0]
	}
	n := 0
	for _, r := range recs {
		if r.Offset >= o.Start && r.Offset < o.End {
			recs[n] = r
			n++
		}
	}
	return recs[:n]
}

// parseEntries decodes a raw XRANGE reply (raw_reply.go says why raw) into records whose keys, values,
// header keys and header values are views of raw, which is not written again until the read's results
// are recycled (RecycleReads). The records' headers share one
// slab, sized when the first header shows up, so a reply whose records carry alike headers costs the
// same few allocations with or without them, at any length.
func parseEntries(raw []byte) ([]Record, error) {
	r := respReader{b: raw}
	kind, line, ok := r.line()
	switch {
	case ok && kind == '-':
		return nil, replyError(line)
	case !ok || kind != '*':
		return nil, errMalformedRange
	}
	n, ok := respInt(line)
	if !ok || n > int64(len(raw)/16) { // an entry takes 18 bytes at least
		return nil, errMalformedRange
	}
	recs := make([]Record, 0, max(n, 0))
	var headers []Header
	for range n {
		id, fields, ok := r.entryHead()
		if !ok {
			return recs, errMalformedRange
		}
		off, kgates := OffsetOfID(stringView(id))
		rec := Record{Offset: off}
		from := len(headers)
		for j := range fields {
			name, ok1 := r.bulk()
			val, ok2 := r.bulk()
			if !ok1 || !ok2 {
				return recs, errMalformedRange
			}
			switch {
			case !kgates:
			case string(name) == "ts":
				rec.Timestamp, _ = respInt(val)
			case string(name) == "key":
				rec.Key = val
			case string(name) == "value":
				rec.Value = val
			case isHeaderField(name):
				if headers == nil {
					// Sized as if every entry from this one on had as many headers as this one can
					// have (writers put them after the other fields), but for no more than the rest
					// of the reply can hold (a header takes 14 bytes at least: one record with many
					// headers among plain ones must not size it); more make it grow, and the records
					// before keep their views of the smaller slab.
					headers = make([]Header, 0, min((fields-j)*(n-int64(len(recs))), int64(len(raw)-r.at)/14+1))
				}
				h := Header{Key: stringView(name[2:]), Value: val}
				if name[1] == 'n' { // "hn:": a null value
					h = Header{Key: stringView(name[3:])}
				}
				headers = append(headers, h)
			}
		}
		if !kgates {
			continue // not written by kgate
		}
		if len(headers) > from {
			rec.Headers = headers[from:len(headers):len(headers)]
		}
		recs = append(recs, rec)
	}
	if r.at != len(raw) {
		return recs, errMalformedRange
	}
	return recs, nil
}

var errMalformedRange = errors.New("redisstore: malformed XRANGE reply")

// isHeaderField reports whether a stream entry's field holds a record header: "h:<name>" with its
// value, "hn:<name>" for a null value.
func isHeaderField(name []byte) bool {
	return bytes.HasPrefix(name, []byte("h:")) || bytes.HasPrefix(name, []byte("hn:"))
}

// stringView views bytes of a reply as a string without copying; replies are never written again.
func stringView(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// DeleteRecords moves the log start offset of a partition to before (-1: the high watermark) and
// trims the stream. It returns the new log start offset, or ErrOffsetOutOfRange.
func (s *Store) DeleteRecords(ctx context.Context, topic string, partition int32, before int64) (int64, error) {
	return s.deleteRecords(ctx, topic, partition, before, false)
}

// DeleteKnownRecords is DeleteRecords for a partition known to have a meta hash
// (Topic.PartitionMeta): one that has none (its topic deleted since the caller looked it up) answers
// ErrUnknownPartition, where DeleteRecords takes it for an empty partition.
func (s *Store) DeleteKnownRecords(ctx context.Context, topic string, partition int32, before int64) (int64, error) {
	return s.deleteRecords(ctx, topic, partition, before, true)
}

func (s *Store) deleteRecords(ctx context.Context, topic string, partition int32, before int64, known bool) (int64, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return trimmed(deleteRecordsScript.Run(ctx, s.rdb, s.trimKeys(topic, partition), before, knownFlag(known)).Int64())
}

// knownFlag is deleteRecordsScript's ARGV[2]: 1 for a partition known to have a meta hash.
func knownFlag(known bool) int {
	if known {
		return 1
	}
	return 0
}

// Trim is a DeleteRecords of one partition: its records below Before (-1: the high watermark) go.
// Known says the partition has a meta hash (Topic.PartitionMeta): DeleteKnownRecords.
type Trim struct {
	Partition int32
	Before    int64
	Known     bool
}

// TrimResult is a Trim's new log start offset, or its error (DeleteRecords').
type TrimResult struct {
	Start int64
	Err   error
}

// DeleteRecordsOf is DeleteRecords of each of trims, partitions of topic, in one round trip per master
// (and one more for those whose master lacks the script), not one per partition. Results are in the
// order of trims. On a Redis Cluster each master's partitions are trimmed on their own
// (acrossMasters), and fail alone.
func (s *Store) DeleteRecordsOf(ctx context.Context, topic string, trims []Trim) []TrimResult {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return perMaster(ctx, s, len(trims), func(i int) string { return s.keys.meta(topic, trims[i].Partition) },
		func(ctx context.Context, idx []int) []TrimResult {
			return s.deleteRecordsOn(ctx, topic, picked(trims, idx))
		}, func(r TrimResult) bool { return r.Err == nil }, TrimResult{Err: errMasterLagging})
}

// deleteRecordsOn is DeleteRecordsOf of trims all on one master (or of any, through the cluster
// client), in one pipeline.
func (s *Store) deleteRecordsOn(ctx context.Context, topic string, trims []Trim) []TrimResult {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(trims))
	for i, tr := range trims {
		cmds[i] = deleteRecordsScript.EvalSha(ctx, pipe, s.trimKeys(topic, tr.Partition), tr.Before, knownFlag(tr.Known))
	}
	_, _ = pipe.Exec(ctx)
	s.scriptsAgain(ctx, cmds, func(again redis.Pipeliner, i int) *redis.Cmd {
		return deleteRecordsScript.Eval(ctx, again, s.trimKeys(topic, trims[i].Partition), trims[i].Before, knownFlag(trims[i].Known))
	})
	out := make([]TrimResult, len(trims))
	for i, c := range cmds {
		out[i].Start, out[i].Err = trimmed(c.Int64())
	}
	return out
}

// trimKeys are deleteRecordsScript's keys for a partition.
func (s *Store) trimKeys(topic string, partition int32) []string {
	return []string{s.keys.stream(topic, partition), s.keys.meta(topic, partition), s.keys.tindex(topic, partition),
		s.keys.bindex(topic, partition)}
}

// trimmed is the new log start offset of deleteRecordsScript's answer n, or its error.
func trimmed(n int64, err error) (int64, error) {
	switch {
	case err != nil:
		return 0, err
	case n == -2:
		return 0, ErrUnknownPartition
	case n < 0:
		return 0, ErrOffsetOutOfRange
	}
	return n, nil
}

// NewProducerID allocates a producer ID unique across every gateway sharing this Redis.
func (s *Store) NewProducerID(ctx context.Context) (int64, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return s.rdb.Incr(ctx, s.keys.producerID()).Result()
}
