package redisstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kgate/kgate/internal/redistest"
)

// needMultiAppend skips t on a server where the store appends with scripts because the server refuses
// the MULTI append's undo (Redis 7.2+, Valkey: a suite run with KGATE_TEST_SERVER=valkey-server), and
// fails it when the store does not use the MULTI append on a server that allows it.
func needMultiAppend(t *testing.T, s *Store) {
	t.Helper()
	if s.multiAppend.Load() {
		return
	}
	if undo, err := undoProbeScript.Run(t.Context(), s.rdb, []string{s.keys.ns + ":probe:undo"}).Int(); err == nil && undo == 0 {
		t.Skip("the server refuses the MULTI append's undo: appends are scripts there")
	}
	t.Fatal("the store does not use the MULTI append")
}

// forEachMaster runs fn on every master behind s (concurrently on a cluster).
func forEachMaster(t *testing.T, s *Store, fn func(ctx context.Context, c *redis.Client) error) {
	t.Helper()
	var err error
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(t.Context(), fn)
	case *redis.Client:
		err = fn(t.Context(), c)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// commandStats returns calls and failed_calls of cmd (lower case) summed over the masters behind s.
func commandStats(t *testing.T, s *Store, cmd string) (calls, failed int64) {
	t.Helper()
	var mu sync.Mutex
	forEachMaster(t, s, func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, line := range strings.Split(info, "\r\n") {
			rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":")
			if !ok {
				continue
			}
			for _, kv := range strings.Split(rest, ",") {
				k, v, _ := strings.Cut(kv, "=")
				n, _ := strconv.ParseInt(v, 10, 64)
				switch k {
				case "calls":
					calls += n
				case "failed_calls":
					failed += n
				}
			}
		}
		return nil
	})
	return calls, failed
}

// idempotentBatch is the next batch of n records of producer 42 on partition p.
func idempotentBatch(topic string, p int32, seq *int32, n int) *Batch {
	b := &Batch{Topic: topic, Partition: p, ProducerID: 42, BaseSequence: *seq, Records: plain("v", n)}
	*seq += int32(n)
	return b
}

// checkDense fails t unless the partition's stream holds exactly offsets 0..want-1 as entries
// 0-1..0-want and its high watermark is want.
func checkDense(t *testing.T, s *Store, topic string, p int32, want int64) {
	t.Helper()
	ents, err := s.rdb.XRange(t.Context(), s.keys.stream(topic, p), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(ents)) != want {
		t.Fatalf("partition %d: %d stream entries, want %d", p, len(ents), want)
	}
	for i, e := range ents {
		if id := "0-" + strconv.Itoa(i+1); e.ID != id {
			t.Fatalf("partition %d: entry %d has ID %s, want %s", p, i, e.ID, id)
		}
	}
	next, err := s.rdb.HGet(t.Context(), s.keys.meta(topic, p), "next").Int64()
	if err != nil || next != want {
		t.Fatalf("partition %d: high watermark %d (%v), want %d", p, next, err, want)
	}
}

// The finish step of an append runs as a Redis function, not as EVAL with the script's text.
func TestAppendFinishesWithFunction(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Store) {
		needMultiAppend(t, s)
		if s.noFunctions.Load() {
			t.Fatal("store does not use the function library")
		}
		topic := mustCreateTopic(t, s, "fn", 4).Name
		var seq [4]int32
		var batches []*Batch
		for p := range int32(4) {
			batches = append(batches, idempotentBatch(topic, p, &seq[p], 10))
		}
		calls0, _ := commandStats(t, s, "fcall")
		for i, r := range s.Append(t.Context(), batches) {
			if r.Err != nil || r.BaseOffset != 0 {
				t.Fatalf("batch %d: %+v", i, r)
			}
		}
		if calls, _ := commandStats(t, s, "fcall"); calls < calls0+4 {
			t.Fatalf("FCALL calls went from %d to %d for 4 batches", calls0, calls)
		}
	})
}

// The finish function stamps an idempotent producer's state with the gateway's clock, passed in,
// rather than a redis.call('TIME') per batch (a tenth of the function's time), and the expiry reads
// that stamp. On a server of its own: any other test's append could call TIME meanwhile.
func TestAppendStampsProducerWithGatewayClock(t *testing.T) {
	ctx := t.Context()
	s, _ := openOwnServer(t)
	needMultiAppend(t, s)
	if s.noFunctions.Load() {
		t.Fatal("store does not use the function library")
	}
	topic := mustCreateTopic(t, s, "stamped", 2).Name
	var seq [2]int32
	time0, _ := commandStats(t, s, "time")
	before := time.Now().UnixMilli()
	for range 3 {
		for i, r := range s.Append(ctx, []*Batch{idempotentBatch(topic, 0, &seq[0], 4), idempotentBatch(topic, 1, &seq[1], 4)}) {
			if r.Err != nil {
				t.Fatalf("batch %d: %v", i, r.Err)
			}
		}
	}
	after := time.Now().UnixMilli()
	if calls, _ := commandStats(t, s, "time"); calls != time0 {
		t.Fatalf("TIME called %d times by 6 appends", calls-time0)
	}
	for p := range int32(2) {
		used, err := s.rdb.HGet(ctx, s.keys.meta(topic, p), "t:42").Int64()
		if err != nil || used < before || used > after {
			t.Fatalf("partition %d: last use %d, %v; want within [%d, %d]", p, used, err, before, after)
		}
	}
	if n, err := s.ExpireProducers(ctx, topic, []int32{0, 1}, time.UnixMilli(after+1), time.Now()); err != nil || n != 2 {
		t.Fatalf("expiry at a cutoff past the stamps dropped %d, %v; want 2", n, err)
	}
}

// A master that lost the library (FUNCTION FLUSH; a new cluster node) gets it back, and the batches
// whose FCALL failed after their XADDs are stored once, densely, with nothing left past the high
// watermark. Not parallel: it flushes the functions of the servers every test shares.
func TestAppendRepairsMissingFunction(t *testing.T) {
	for _, backend := range []string{"standalone", "cluster"} {
		t.Run(backend, func(t *testing.T) {
			s := openStore(t, backendOptions(t, backend))
			needMultiAppend(t, s)
			const parts = 6
			topic := mustCreateTopic(t, s, "repair", parts).Name
			var seq [parts]int32
			appendAll := func(n int) {
				t.Helper()
				var batches []*Batch
				for p := range int32(parts) {
					batches = append(batches, idempotentBatch(topic, p, &seq[p], n))
				}
				for i, r := range s.Append(t.Context(), batches) {
					if r.Err != nil {
						t.Fatalf("batch %d: %v", i, r.Err)
					}
				}
			}
			appendAll(5)
			forEachMaster(t, s, func(ctx context.Context, c *redis.Client) error { return c.FunctionFlush(ctx).Err() })
			_, failed0 := commandStats(t, s, "fcall")
			appendAll(7)
			if _, failed := commandStats(t, s, "fcall"); failed == failed0 {
				t.Fatal("no FCALL failed after FUNCTION FLUSH: the repair was not exercised")
			}
			appendAll(3)
			for p := range int32(parts) {
				checkDense(t, s, topic, p, 15)
			}
			if s.noFunctions.Load() {
				t.Fatal("the store fell back to EVAL although the library could be loaded again")
			}
			// Masters the appends did not reach get the library back here, for the tests that follow.
			if !s.loadFunctions(t.Context()) {
				t.Fatal("loading the library again failed")
			}
		})
	}
}

// When the library cannot be used, the finish step runs as EVAL.
func TestAppendFinishesWithEvalWithoutFunctions(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Store) {
		needMultiAppend(t, s)
		s.noFunctions.Store(true)
		topic := mustCreateTopic(t, s, "eval", 2).Name
		var seq [2]int32
		evals0, _ := commandStats(t, s, "eval")
		for i := range 3 {
			b := idempotentBatch(topic, int32(i%2), &seq[i%2], 4)
			if r := s.Append(t.Context(), []*Batch{b}); r[0].Err != nil {
				t.Fatal(r[0].Err)
			}
		}
		if evals, _ := commandStats(t, s, "eval"); evals < evals0+3 {
			t.Fatalf("EVAL calls went from %d to %d for 3 batches", evals0, evals)
		}
		checkDense(t, s, topic, 0, 8)
		checkDense(t, s, topic, 1, 4)
	})
}

// A store that cannot load the function library (here, a user whose ACL lacks FUNCTION) finishes its
// appends with EVAL, and loads the library once allowed, when its retry is due (probeRetryInterval).
func TestAppendLoadsFunctionsWhenAllowedLater(t *testing.T) {
	for _, backend := range []string{"standalone", "cluster"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			admin := openStore(t, backendOptions(t, backend))
			needMultiAppend(t, admin)
			user := testNamespace(t)
			acl := func(ctx context.Context, args ...any) error {
				do := func(ctx context.Context, c *redis.Client) error { return c.Do(ctx, args...).Err() }
				if c, ok := admin.rdb.(*redis.ClusterClient); ok {
					return c.ForEachMaster(ctx, do)
				}
				return do(ctx, admin.rdb.(*redis.Client))
			}
			if err := acl(t.Context(), "ACL", "SETUSER", user, "reset", "on", ">pw", "~*", "&*", "+@all", "-function"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = acl(context.Background(), "ACL", "DELUSER", user) })
			opts := backendOptions(t, backend)
			opts.Username, opts.Password = user, "pw"
			s := openStore(t, opts)
			if !s.multiAppend.Load() || !s.noFunctions.Load() || s.reprobeAt.Load() == 0 {
				t.Fatalf("without FUNCTION: multiAppend %v, noFunctions %v, retry at %d; want the MULTI path with EVAL and a retry", s.multiAppend.Load(), s.noFunctions.Load(), s.reprobeAt.Load())
			}
			topic := mustCreateTopic(t, s, "reprobe", 2).Name
			var seq [2]int32
			appendAll := func() {
				t.Helper()
				for p := range int32(2) {
					if r := s.Append(t.Context(), []*Batch{idempotentBatch(topic, p, &seq[p], 3)}); r[0].Err != nil {
						t.Fatal(r[0].Err)
					}
				}
			}
			appendAll()
			if err := acl(t.Context(), "ACL", "SETUSER", user, "+function"); err != nil {
				t.Fatal(err)
			}
			appendAll()
			if !s.noFunctions.Load() {
				t.Fatal("the library was loaded before the retry was due")
			}
			s.reprobeAt.Store(time.Now().Add(-time.Second).UnixNano()) // the retry is due
			appendAll()                                                // starts it, in the background
			checkFor(t, 10*time.Second, func() error {
				if s.noFunctions.Load() || s.reprobeAt.Load() != 0 {
					return fmt.Errorf("retry due and FUNCTION allowed: noFunctions %v, retry at %d", s.noFunctions.Load(), s.reprobeAt.Load())
				}
				return nil
			})
			appendAll()
			for p := range int32(2) {
				checkDense(t, s, topic, p, 12)
			}
		})
	}
}

// TestNeedRepair: the batches a missing function library failed are repaired, and so is a later
// batch of the same partition that found their entries (a conflict it did not cause); a conflict on
// another partition is a real one.
func TestNeedRepair(t *testing.T) {
	missing := errors.New("ERR Function not found")
	batches := []*Batch{{Topic: "t", Partition: 0}, {Topic: "t", Partition: 1}, {Topic: "t", Partition: 0}, {Topic: "t", Partition: 2}}
	out := []AppendResult{{Err: missing}, {}, {Err: ErrStreamConflict}, {Err: ErrStreamConflict}}
	if got := needRepair(batches, out); fmt.Sprint(got) != "[0 2]" {
		t.Fatalf("needRepair: %v, want [0 2]", got)
	}
	if got := needRepair(batches[2:], out[2:]); got != nil {
		t.Fatalf("conflicts alone: %v, want none", got)
	}
}

// A block whose XADDs ran but whose finish step did not (the library flushed) and whose answer was lost
// (so nobody repaired it) leaves entries past the high watermark. The next append to the partition,
// the library loaded again meanwhile, removes them with its own and is answered ErrStrayEntries (a
// retriable failure), and the retry is stored at the right offset. Before, every later append was
// refused as a stream conflict, for good. Redis of its own: FUNCTION FLUSH.
func TestAppendRemovesUnfinishedAppends(t *testing.T) {
	ctx := t.Context()
	s, _ := openOwnServer(t)
	needMultiAppend(t, s)
	topic := mustCreateTopic(t, s, "stray", 1).Name
	var seq int32
	if r := s.Append(ctx, []*Batch{idempotentBatch(topic, 0, &seq, 5)})[0]; r.Err != nil {
		t.Fatal(r.Err)
	}
	c := s.rdb.(*redis.Client)
	if err := c.FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	lost := idempotentBatch(topic, 0, &seq, 3)
	out := make([]AppendResult, 1)
	s.appendMultiOnce(ctx, c, []*Batch{lost}, out, nil) // its answer "lost": no repair follows
	if !isFunctionMissing(out[0].Err) {
		t.Fatalf("block without the library: %v", out[0].Err)
	}
	if !s.loadFunctions(ctx) {
		t.Fatal("library not loaded again")
	}
	if r := s.Append(ctx, []*Batch{lost})[0]; !errors.Is(r.Err, ErrStrayEntries) || !IsUnavailable(r.Err) {
		t.Fatalf("append after the unfinished block: %+v, want a retriable ErrStrayEntries", r)
	}
	if r := s.Append(ctx, []*Batch{lost})[0]; r.Err != nil || r.BaseOffset != 5 || r.Duplicate {
		t.Fatalf("retry: %+v, want stored at offset 5", r)
	}
	if r := s.Append(ctx, []*Batch{{Topic: topic, Partition: 0, ProducerID: -1, Records: plain("w", 2)}})[0]; r.Err != nil || r.BaseOffset != 8 {
		t.Fatalf("another producer's append: %+v, want offset 8", r)
	}
	if n := c.XLen(ctx, s.keys.stream(topic, 0)).Val(); n != 10 {
		t.Fatalf("stream holds %d entries, want the 10 acknowledged", n)
	}
}

// EvictingMasters names a master that may evict kgate's keys, and none once it may not; the test
// backends (noeviction, Redis's default) and the embedded store name none.
func TestEvictingMasters(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		if got := s.EvictingMasters(t.Context()); len(got) != 0 {
			t.Fatalf("noeviction masters listed: %v", got)
		}
	})
	t.Run("allkeys-lru", func(t *testing.T) {
		s, addr := openOwnServer(t, "--maxmemory-policy", "allkeys-lru")
		if got := s.EvictingMasters(t.Context()); len(got) != 1 || got[0] != addr+": allkeys-lru" {
			t.Fatalf("listed %v, want %s: allkeys-lru", got, addr)
		}
		if err := s.rdb.ConfigSet(t.Context(), "maxmemory-policy", "noeviction").Err(); err != nil {
			t.Fatal(err)
		}
		if got := s.EvictingMasters(t.Context()); len(got) != 0 {
			t.Fatalf("listed %v after noeviction", got)
		}
	})
}

// openValkey opens a store on a valkey-server of its own, a server that refuses the MULTI append's
// undo (.ci/run installs it; elsewhere the test is skipped without one).
func openValkey(t *testing.T) *Store {
	t.Helper()
	if _, err := exec.LookPath("valkey-server"); err != nil {
		if os.Getenv("CI") == "" {
			t.Skip("valkey-server not installed")
		}
		t.Fatal("valkey-server not installed")
	}
	srv, err := redistest.StartBinary("valkey-server")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return openStore(t, Options{Addrs: []string{srv.Addr}})
}

// TestAppendOnServerRefusingUndo: Redis 7.2+ and Valkey refuse to set a stream's last ID back below an
// entry just deleted, which the MULTI append's undo of a refused batch does. There the store appends
// with one script per batch, which decides before it adds: a retried batch is answered as a
// duplicate, an out-of-sequence one refused, and the partition takes the next batch at the right
// offset (with the MULTI append, the first refusal left the stream's last ID past the high watermark
// and every later append of the partition failed). Needs valkey-server (.ci/run installs it).
func TestAppendOnServerRefusingUndo(t *testing.T) {
	s := openValkey(t)
	if s.multiAppend.Load() || !s.autoSeq.Load() {
		t.Fatalf("multiAppend %v, autoSeq %v on a server refusing the undo: want the script append with XADD 0-*", s.multiAppend.Load(), s.autoSeq.Load())
	}
	ctx := t.Context()
	mustCreateTopic(t, s, "undo", 1)
	var seq int32
	first := idempotentBatch("undo", 0, &seq, 3)
	if res := mustAppend(t, s, first); res.BaseOffset != 0 {
		t.Fatalf("first batch at %d", res.BaseOffset)
	}
	retry := &Batch{Topic: "undo", ProducerID: first.ProducerID, BaseSequence: 0, Records: plain("v", 3)}
	if res := mustAppend(t, s, retry); !res.Duplicate || res.BaseOffset != 0 {
		t.Fatalf("retried batch: %+v, want a duplicate at 0", res)
	}
	gap := &Batch{Topic: "undo", ProducerID: first.ProducerID, BaseSequence: seq + 5, Records: plain("v", 2)}
	if res := s.Append(ctx, []*Batch{gap})[0]; !errors.Is(res.Err, ErrOutOfOrderSequence) {
		t.Fatalf("out-of-sequence batch: %+v, want ErrOutOfOrderSequence", res)
	}
	for i := range 3 {
		if res := mustAppend(t, s, idempotentBatch("undo", 0, &seq, 2)); res.BaseOffset != int64(3+2*i) {
			t.Fatalf("batch %d after the refusals at %d, want %d", i, res.BaseOffset, 3+2*i)
		}
	}
	checkDense(t, s, "undo", 0, 9)
}

// TestAppendTurnsToScriptsWhenUndoRefused: a store that chose the MULTI append (its probe ran on Redis
// 7.0) on a master since replaced by one refusing the undo (Redis 7.2+, Valkey) turns to scripts at
// the first append that hits the refusal, so that only that partition is left refusing appends.
func TestAppendTurnsToScriptsWhenUndoRefused(t *testing.T) {
	s := openValkey(t)
	ctx := t.Context()
	if !s.loadFunctions(ctx) {
		t.Fatal("the function library did not load")
	}
	s.multiAppend.Store(true) // as a probe on Redis 7.0 left it
	mustCreateTopic(t, s, "upgraded", 2)
	var seq int32
	first := idempotentBatch("upgraded", 0, &seq, 2)
	mustAppend(t, s, first)
	retry := &Batch{Topic: "upgraded", ProducerID: first.ProducerID, BaseSequence: 0, Records: plain("v", 2)}
	if res := s.Append(ctx, []*Batch{retry})[0]; res.Err == nil {
		t.Fatalf("retried batch: %+v; want the finish step's refused undo", res)
	}
	if mode := s.AppendMode(); mode != "script" {
		t.Fatalf("append mode %q after the undo was refused, want script", mode)
	}
	var other int32
	if res := mustAppend(t, s, idempotentBatch("upgraded", 1, &other, 3)); res.BaseOffset != 0 {
		t.Fatalf("another partition's batch at %d", res.BaseOffset)
	}
}

// flushLibraryMidPipeline is a client hook that, once, in a pipeline of at least three MULTI blocks,
// flushes the function library right after the first block and loads it again right after the
// second: an operator's FUNCTION FLUSH landing between two blocks of one partition, then another
// connection's repair loading the library before the third.
type flushLibraryMidPipeline struct{ done atomic.Bool }

func (*flushLibraryMidPipeline) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*flushLibraryMidPipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *flushLibraryMidPipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var execs []int
		for i, c := range cmds {
			if strings.EqualFold(c.Name(), "exec") {
				execs = append(execs, i)
			}
		}
		if len(execs) < 3 || h.done.Swap(true) {
			return next(ctx, cmds)
		}
		flush := redis.NewStatusCmd(ctx, "function", "flush")
		load := redis.NewStringCmd(ctx, "function", "load", finishLibrary)
		with := slices.Concat(cmds[:execs[0]+1], []redis.Cmder{flush}, cmds[execs[0]+1:execs[1]+1], []redis.Cmder{load}, cmds[execs[1]+1:])
		return next(ctx, with)
	}
}

// TestAppendLibraryFlushedMidPipelineKeepsOrder: four blocks of one partition in one pipeline (batches
// that do not form a run: each request's own log append time; two producers taking turns), the
// library flushed after the first block and loaded again before the third. The second block's FCALL
// fails after its XADDs, the third finds and removes their entries; the fourth must not be stored
// ahead of them. Every batch is stored, in order, and answered at its place. Before, the fourth was
// stored right after the first and the second and third appended again after it (non-idempotent),
// or (two producers) the fourth was stored ahead and the second then refused as out of sequence.
func TestAppendLibraryFlushedMidPipelineKeepsOrder(t *testing.T) {
	for _, producers := range []string{"none", "two"} {
		t.Run(producers, func(t *testing.T) {
			t.Parallel()
			s, _ := openOwnServer(t)
			needMultiAppend(t, s)
			ctx := t.Context()
			topic := mustCreateTopic(t, s, "midflush", 1).Name
			appendOne(t, s, topic, 0, plain("warm", 1)...)
			hook := &flushLibraryMidPipeline{}
			s.rdb.(*redis.Client).AddHook(hook)
			var batches []*Batch
			for i, name := range []string{"a", "b", "c", "d"} {
				b := &Batch{Topic: topic, ProducerID: -1, LogAppendTime: int64(1000 + i), Records: plain(name, 2)}
				if producers == "two" {
					b.ProducerID, b.LogAppendTime, b.BaseSequence = int64(42+i%2), 0, int32(2*(i/2))
				}
				batches = append(batches, b)
			}
			_, failed0 := commandStats(t, s, "fcall")
			out := s.Append(ctx, batches)
			if _, failed := commandStats(t, s, "fcall"); !hook.done.Load() || failed == failed0 {
				t.Fatal("no FCALL failed: the library was not flushed mid-pipeline")
			}
			for i, r := range out {
				if r.Err != nil || r.BaseOffset != int64(1+2*i) {
					t.Errorf("batch %d: %+v, want stored at %d", i, r, 1+2*i)
				}
			}
			checkValues(t, s, topic, "[a-0 a-1 b-0 b-1 c-0 c-1 d-0 d-1]")
			checkDense(t, s, topic, 0, 9)
		})
	}
}

// TestAppendLibraryFlushedMidPipelineRuns: three partitions, each with two batches of one producer
// that form a run (one block), the library flushed after the first partition's block and loaded again
// before the third's. The second's FCALL fails after its XADDs; the repair removes them and appends
// the run again, and every batch, of every run, is answered at its own offset, once.
func TestAppendLibraryFlushedMidPipelineRuns(t *testing.T) {
	s, _ := openOwnServer(t)
	needMultiAppend(t, s)
	ctx := t.Context()
	const parts = 3
	topic := mustCreateTopic(t, s, "midflush-runs", parts).Name
	var seq [parts]int32
	for p := range int32(parts) {
		mustAppend(t, s, idempotentBatch(topic, p, &seq[p], 1))
	}
	hook := &flushLibraryMidPipeline{}
	s.rdb.(*redis.Client).AddHook(hook)
	var batches []*Batch
	for p := range int32(parts) {
		batches = append(batches, idempotentBatch(topic, p, &seq[p], 2), idempotentBatch(topic, p, &seq[p], 3))
	}
	_, failed0 := commandStats(t, s, "fcall")
	out := s.Append(ctx, batches)
	if _, failed := commandStats(t, s, "fcall"); !hook.done.Load() || failed != failed0+1 {
		t.Fatalf("%d FCALLs failed, want the second partition's run alone", failed-failed0)
	}
	for i, r := range out {
		if want := []int64{1, 3}[i%2]; r.Err != nil || r.Duplicate || r.BaseOffset != want {
			t.Errorf("partition %d, batch %d: %+v, want stored at %d", i/2, i%2, r, want)
		}
	}
	for p := range int32(parts) {
		checkDense(t, s, topic, p, 6)
	}
	// The producer's next batches continue each partition's sequence: the runs were recorded once.
	for p := range int32(parts) {
		if r := mustAppend(t, s, idempotentBatch(topic, p, &seq[p], 1)); r.BaseOffset != 6 {
			t.Fatalf("partition %d: next batch at %d, want 6", p, r.BaseOffset)
		}
	}
}
