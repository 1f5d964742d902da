package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The script append (appendScript) is what Redis 7.2+, Valkey, Redis before 7 and the embedded store
// run. These tests take it on the suite's servers by turning the MULTI append off.

// scriptStore is a store of backend's appending with scripts.
func scriptStore(t *testing.T, opts Options) *Store {
	t.Helper()
	s := openStore(t, opts)
	s.multiAppend.Store(false)
	return s
}

// TestScriptAppendForeignLastIDConflicts: a foreign entry XADDed and then XDELed leaves the stream's
// last ID foreign. The script append's first XADD is refused before anything is stored, and the batch
// is answered ErrStreamConflict (as the MULTI append answers it), not a Redis failure the producer
// retries for ever; the acknowledged records stay.
func TestScriptAppendForeignLastIDConflicts(t *testing.T) {
	for _, backend := range []string{"standalone", "cluster"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			s := scriptStore(t, backendOptions(t, backend))
			ctx := t.Context()
			mustCreateTopic(t, s, "script-foreign", 1)
			appendOne(t, s, "script-foreign", 0, plain("a", 3)...)
			addForeignThenDelete(t, s, s.StreamKey("script-foreign", 0))
			res := s.Append(ctx, []*Batch{{Topic: "script-foreign", Records: plain("b", 2), ProducerID: -1}})[0]
			if !errors.Is(res.Err, ErrStreamConflict) || IsUnavailable(res.Err) {
				t.Fatalf("append after a foreign last ID: %v, want ErrStreamConflict", res.Err)
			}
			if got := mustRead(t, s, "script-foreign", 0, 0, 10); len(got.Records) != 3 {
				t.Fatalf("read %d records, want the 3 acknowledged", len(got.Records))
			}
		})
	}
}

// TestScriptAppendDurableDuplicateWaits: an acks=all batch whose replication was not confirmed, then
// retried through another connection (another gateway), is answered as a duplicate only once the
// replica has it: the script's duplicate answer writes (the high watermark, unchanged), so WAIT on the
// retry's connection covers the original write. (It wrote nothing, and WAIT confirmed the retry at
// once while the replica lacked the records.)
func TestScriptAppendDurableDuplicateWaits(t *testing.T) {
	master, replica := startReplicated(t)
	ctx := t.Context()
	opts := Options{Addrs: []string{master.Addr}, WaitReplicas: 1, WaitTimeout: 2 * time.Second}
	one := scriptStore(t, opts)
	opts.Namespace = one.Namespace()
	other := scriptStore(t, opts)
	mustCreateTopic(t, one, "dd", 1)
	for _, s := range []*Store{one, other} { // both connections have written and been confirmed
		if res := s.Append(ctx, []*Batch{{Topic: "dd", Records: plain("w", 1), ProducerID: -1, Durable: true}})[0]; res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	if err := replica.Pause(); err != nil {
		t.Skip("cannot pause a server here:", err)
	}
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			replica.Resume()
		}
	})
	batch := func() *Batch {
		return &Batch{Topic: "dd", Records: plain("x", 2), ProducerID: 77, BaseSequence: 0, Durable: true}
	}
	if res := one.Append(ctx, []*Batch{batch()})[0]; !errors.Is(res.Err, ErrNotDurable) {
		t.Fatalf("first attempt, the replica stalled: %+v, want ErrNotDurable", res)
	}
	if res := other.Append(ctx, []*Batch{batch()})[0]; !errors.Is(res.Err, ErrNotDurable) {
		t.Fatalf("retry through another connection, the replica still stalled: %+v, want ErrNotDurable", res)
	}
	replica.Resume()
	resumed = true
	res := other.Append(ctx, []*Batch{batch()})[0]
	if res.Err != nil || !res.Duplicate || res.BaseOffset != 2 {
		t.Fatalf("retry with the replica back: %+v, want a duplicate at 2", res)
	}
}

// loadScriptAfterFirst is a client hook that, in a pipeline of EVALSHAs, has the append script loaded
// right after the first one runs: what another connection's NOSCRIPT fallback does after a failover
// or SCRIPT FLUSH, between two batches of one partition.
type loadScriptAfterFirst struct{}

func (loadScriptAfterFirst) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (loadScriptAfterFirst) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (loadScriptAfterFirst) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) >= 2 && strings.EqualFold(cmds[0].Name(), "evalsha") {
			load := redis.NewStringCmd(ctx, "script", "load", appendScriptSource)
			return next(ctx, append([]redis.Cmder{cmds[0], load}, cmds[1:]...))
		}
		return next(ctx, cmds)
	}
}

// TestScriptAppendNoscriptKeepsOrder: an idempotent producer's two batches of one partition in one
// pipeline, the first answered NOSCRIPT and the script loaded (by another connection) before the
// second runs: the second, refused because the first did not run (the chain, batchLua), is appended
// again after the first, and both are stored in order (the second was once answered
// OUT_OF_ORDER_SEQUENCE, which a producer takes as fatal).
func TestScriptAppendNoscriptKeepsOrder(t *testing.T) {
	s := scriptStore(t, backendOptions(t, "standalone"))
	ctx := t.Context()
	mustCreateTopic(t, s, "noscript", 1)
	appendOne(t, s, "noscript", 0, plain("warm", 1)...)
	if err := s.Client().ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	s.rdb.(*redis.Client).AddHook(loadScriptAfterFirst{})
	var seq int32
	first, second := idempotentBatch("noscript", 0, &seq, 2), idempotentBatch("noscript", 0, &seq, 2)
	res := s.Append(ctx, []*Batch{first, second})
	if res[0].Err != nil || res[1].Err != nil || res[0].BaseOffset != 1 || res[1].BaseOffset != 3 {
		t.Fatalf("after NOSCRIPT: first %+v, second %+v; want both stored, at 1 and 3", res[0], res[1])
	}
}

// flushMidPipeline is a client hook that, in a pipeline of at least three append scripts, flushes the
// script cache right after the first runs and has the script loaded again right after the second:
// an operator's SCRIPT FLUSH (or a failover) landing between two batches of one partition, then
// another connection's NOSCRIPT fallback loading the script before the third.
// It does so once, and records whether the second was answered NOSCRIPT.
type flushMidPipeline struct{ done, noscript atomic.Bool }

func (*flushMidPipeline) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*flushMidPipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *flushMidPipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) < 3 || !strings.EqualFold(cmds[1].Name(), "evalsha") || h.done.Swap(true) {
			return next(ctx, cmds)
		}
		flush := redis.NewStatusCmd(ctx, "script", "flush")
		load := redis.NewStringCmd(ctx, "script", "load", appendScriptSource)
		err := next(ctx, append([]redis.Cmder{cmds[0], flush, cmds[1], load}, cmds[2:]...))
		h.noscript.Store(redis.HasErrorPrefix(cmds[1].Err(), "NOSCRIPT"))
		return err
	}
}

// TestScriptAppendFlushMidPipelineKeepsOrder: three batches of one partition in one pipeline, the
// script cache flushed after the first and loaded again (by another connection) before the third.
// The second, answered NOSCRIPT, is stored before the third, and every batch is answered as stored at
// its place. Before, a third batch without idempotence was stored ahead of the second (appended again
// after the pipeline), and an idempotent producer's third was answered OUT_OF_ORDER_SEQUENCE_NUMBER
// (data loss to a Kafka producer) while the second was then stored. Redis of its own: SCRIPT FLUSH,
// and no other test's EVAL may load the script in between.
func TestScriptAppendFlushMidPipelineKeepsOrder(t *testing.T) {
	for _, producer := range []int64{-1, 42} {
		t.Run(fmt.Sprintf("producer%d", producer), func(t *testing.T) {
			t.Parallel()
			s, _ := openOwnServer(t)
			s.multiAppend.Store(false)
			ctx := t.Context()
			topic := mustCreateTopic(t, s, "midflush", 1).Name
			appendOne(t, s, topic, 0, plain("warm", 1)...) // the script is cached
			hook := &flushMidPipeline{}
			s.rdb.(*redis.Client).AddHook(hook)
			var batches []*Batch
			for i, name := range []string{"a", "b", "c"} {
				batches = append(batches, &Batch{Topic: topic, ProducerID: producer, BaseSequence: int32(2 * i), Records: plain(name, 2)})
			}
			out := s.Append(ctx, batches)
			if !hook.noscript.Load() {
				t.Fatal("the second batch was not answered NOSCRIPT: the flush did not land mid-pipeline")
			}
			for i, r := range out {
				if r.Err != nil || r.BaseOffset != int64(1+2*i) {
					t.Errorf("batch %d: %+v, want stored at %d", i, r, 1+2*i)
				}
			}
			checkValues(t, s, topic, "[a-0 a-1 b-0 b-1 c-0 c-1]")
		})
	}
}

// TestScriptAppendChainPassesRefusals: in one pipeline, a batch the producer check refuses (a retried
// duplicate) still lets the next batch of its partition run: its script ran to an answer, which
// passes the chain on. The duplicate is answered as one, the next stored after the original.
func TestScriptAppendChainPassesRefusals(t *testing.T) {
	for _, backend := range []string{"standalone", "embedded"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			var s *Store
			if backend == "embedded" {
				s = openEmbedded(t)
			} else {
				s = scriptStore(t, backendOptions(t, backend))
			}
			ctx := t.Context()
			topic := mustCreateTopic(t, s, "chain", 1).Name
			var seq int32
			first := idempotentBatch(topic, 0, &seq, 2)
			mustAppend(t, s, first)
			retry := &Batch{Topic: topic, ProducerID: first.ProducerID, BaseSequence: 0, Records: plain("v", 2)}
			res := s.Append(ctx, []*Batch{retry, idempotentBatch(topic, 0, &seq, 3), idempotentBatch(topic, 0, &seq, 1)})
			if r := res[0]; r.Err != nil || !r.Duplicate || r.BaseOffset != 0 {
				t.Fatalf("retried batch: %+v, want a duplicate at 0", r)
			}
			if r := res[1]; r.Err != nil || r.BaseOffset != 2 {
				t.Fatalf("next batch: %+v, want stored at 2", r)
			}
			if r := res[2]; r.Err != nil || r.BaseOffset != 5 {
				t.Fatalf("last batch: %+v, want stored at 5", r)
			}
		})
	}
}

// withHeaders is a record whose n headers are "h<i>" = "v".
func withHeaders(n int) Record {
	r := Record{Timestamp: 1000, Key: []byte("k"), Value: []byte("v")}
	for i := range n {
		r.Headers = append(r.Headers, Header{Key: fmt.Sprintf("h%d", i), Value: []byte("v")})
	}
	return r
}

// TestAppendTooManyHeaders: a record with more than MaxRecordHeaders headers is refused before it is
// sent, with ErrTooManyHeaders (INVALID_RECORD at the gateway), its batch alone; one with
// MaxRecordHeaders is stored with every header, on every path and server: the script append passes a
// record's fields to XADD as Lua values, of which Redis and Valkey take about 8,000 and the embedded
// store about 5,000. Before, the script append stored the records ahead of such a record and then
// failed (a Redis error, retried for ever), leaving them past the high watermark: every later append
// to the partition was refused as a stream conflict.
func TestAppendTooManyHeaders(t *testing.T) {
	for name, open := range appendPaths(true) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			ctx := t.Context()
			topic := mustCreateTopic(t, s, "headers", 2).Name
			over := &Batch{Topic: topic, ProducerID: -1, Records: []Record{withHeaders(1), withHeaders(4000)}}
			other := &Batch{Topic: topic, Partition: 1, ProducerID: -1, Records: plain("o", 1)}
			res := s.Append(ctx, []*Batch{over, other})
			if !errors.Is(res[0].Err, ErrTooManyHeaders) || IsUnavailable(res[0].Err) {
				t.Fatalf("batch with a record of 4,000 headers: %+v, want ErrTooManyHeaders", res[0])
			}
			if res[1].Err != nil || res[1].BaseOffset != 0 {
				t.Fatalf("other partition's batch: %+v, want stored at 0", res[1])
			}
			most := &Batch{Topic: topic, ProducerID: -1, Records: []Record{withHeaders(1), withHeaders(MaxRecordHeaders)}}
			if r := s.Append(ctx, []*Batch{most})[0]; r.Err != nil || r.BaseOffset != 0 {
				t.Fatalf("batch with a record of %d headers: %+v, want stored at 0", MaxRecordHeaders, r)
			}
			got := mustRead(t, s, topic, 0, 0, 10).Records
			if len(got) != 2 || len(got[1].Headers) != MaxRecordHeaders || got[1].Headers[MaxRecordHeaders-1].Key != fmt.Sprintf("h%d", MaxRecordHeaders-1) {
				t.Fatalf("read %d records, want 2, the second with %d headers", len(got), MaxRecordHeaders)
			}
		})
	}
}

// otherPipelineBetween is a client hook that, once, runs between the first append of a pipeline of
// several (the first EVALSHA or EVAL, or the first MULTI block) and the rest: another connection's
// pipeline of appends to the same partition landing there, as Redis interleaves the commands of
// concurrent clients.
type otherPipelineBetween struct {
	done    atomic.Bool
	between func()
}

func (*otherPipelineBetween) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*otherPipelineBetween) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *otherPipelineBetween) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		cut := 0
		switch name := strings.ToLower(cmds[0].Name()); {
		case len(cmds) < 2:
		case name == "evalsha" || name == "eval":
			cut = 1
		case name == "multi":
			cut = slices.IndexFunc(cmds, func(c redis.Cmder) bool { return strings.EqualFold(c.Name(), "exec") }) + 1
		}
		if cut == 0 || cut == len(cmds) || h.done.Swap(true) {
			return next(ctx, cmds)
		}
		err := next(ctx, cmds[:cut])
		h.between()
		if err2 := next(ctx, cmds[cut:]); err == nil {
			err = err2
		}
		return err
	}
}

// TestAppendChainAcrossPipelines: two connections each append two batches of one partition in a
// pipeline, and Redis runs the second connection's pipeline between the first's two batches (as it
// interleaves concurrent clients). Every batch is stored: a chain (batchLua) is its pipeline's own,
// and another pipeline's batches passing theirs on in between do not break it. Before, the partition
// held one token, which the other pipeline overwrote, and the first pipeline's second batch was
// refused (errEarlierBatchFailed, NOT_LEADER_OR_FOLLOWER to the producer, a closed connection with
// acks=0) though the batch before it was stored: two producers pipelining requests to one partition
// failed one another's batches over and over.
func TestAppendChainAcrossPipelines(t *testing.T) {
	for name, open := range appendPaths(false) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			ctx := t.Context()
			topic := mustCreateTopic(t, s, "interleaved", 1).Name
			// Batches that do not form a run (each its own log append time), so the transaction
			// path chains them too.
			batch := func(v string, at int64) *Batch {
				return &Batch{Topic: topic, ProducerID: -1, LogAppendTime: at, Records: plain(v, 1)}
			}
			appendOne(t, s, topic, 0, plain("warm", 1)...) // the script is cached
			var other []AppendResult
			hook := &otherPipelineBetween{between: func() {
				other = s.Append(ctx, []*Batch{batch("b1", 2001), batch("b2", 2002)})
			}}
			s.rdb.(*redis.Client).AddHook(hook)
			out := s.Append(ctx, []*Batch{batch("a1", 1001), batch("a2", 1002)})
			if !hook.done.Load() || len(other) != 2 {
				t.Fatal("the other pipeline did not run between the first's batches")
			}
			for i, r := range append(out, other...) {
				if r.Err != nil {
					t.Errorf("batch %d: %v, want stored", i, r.Err)
				}
			}
			checkValues(t, s, topic, "[a1-0 b1-0 b2-0 a2-0]")
		})
	}
}

// appendPaths opens a store on each append path: the transaction (Redis 7.0's MULTI blocks), the
// script (forced on Redis 7.0), the embedded store and, withValkey, valkey-server's script path.
func appendPaths(withValkey bool) map[string]func(t *testing.T) *Store {
	paths := map[string]func(t *testing.T) *Store{
		"transaction": func(t *testing.T) *Store { return openStore(t, backendOptions(t, "standalone")) },
		"script":      func(t *testing.T) *Store { return scriptStore(t, backendOptions(t, "standalone")) },
		"embedded":    openEmbedded,
	}
	if withValkey {
		paths["valkey"] = openValkey
	}
	return paths
}
