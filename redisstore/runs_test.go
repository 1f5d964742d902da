package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestMergeRuns(t *testing.T) {
	b := func(p int32, pid int64, epoch int16, seq int32, n int) *Batch {
		return &Batch{Topic: "t", Partition: p, ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq, Records: make([]Record, n)}
	}
	appended := b(6, 5, 1, 3, 1)
	appended.LogAppendTime = 9
	checked := b(7, 5, 1, 3, 1)
	checked.KnownPartition = true
	in := []*Batch{
		b(0, 5, 1, 0, 3), b(1, 5, 1, 0, 2), b(2, -1, 0, 0, 2),
		b(0, 5, 1, 3, 4), // partition 0: contiguous, one run
		b(1, 5, 1, 3, 1), // partition 1: a gap, so no run at all on it
		b(1, 5, 1, 4, 2),
		b(2, -1, 0, 0, 3),                  // partition 2: not idempotent, one run
		b(3, 5, 1, 0, 1), b(3, 6, 1, 1, 1), // partition 3: another producer
		b(4, 5, 1, 0, 1), b(4, 5, 2, 0, 1), // partition 4: another epoch
		b(5, 5, 0, 2147483647-2, 3), b(5, 5, 0, 0, 2), // partition 5: wraps to sequence 0, one run
		b(6, 5, 1, 0, 3), appended, // partition 6: another log append time
		b(7, 5, 1, 0, 3), checked, // partition 7: another partition check
		b(0, 5, 1, 7, 2), // partition 0 again, still contiguous
	}
	want := map[int32][][]int{
		0: {{3, 4, 2}}, 1: {{2}, {1}, {2}}, 2: {{2, 3}}, 3: {{1}, {1}}, 4: {{1}, {1}}, 5: {{3, 2}}, 6: {{3}, {1}}, 7: {{3}, {1}},
	}
	runs, at := mergeRuns(in)
	got := map[int32][][]int{}
	for _, r := range runs {
		var sizes []int
		if r.runOf == nil {
			sizes = []int{len(r.Records)}
		}
		total := 0
		for _, sub := range r.runOf {
			sizes = append(sizes, len(sub.Records))
			total += len(sub.Records)
		}
		if r.runOf != nil && len(r.Records) != total {
			t.Fatalf("run on partition %d: %d records, want %d", r.Partition, len(r.Records), total)
		}
		got[r.Partition] = append(got[r.Partition], sizes)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("runs per partition %v, want %v", got, want)
	}
	// Each batch points into its run at the records before it.
	for i, a := range at {
		r := runs[a.run]
		if r.Partition != in[i].Partition {
			t.Fatalf("batch %d (partition %d) points at a run of partition %d", i, in[i].Partition, r.Partition)
		}
		skip := int64(0)
		for _, sub := range r.runOf {
			if sub == in[i] {
				break
			}
			skip += int64(len(sub.Records))
		}
		if a.skip != skip {
			t.Fatalf("batch %d: skip %d, want %d", i, a.skip, skip)
		}
	}
}

// Consecutive batches of a partition in one Append (a connection's queued produce requests) are stored
// with one finish step per partition, and each stays known to the idempotence check: a retry of any of
// them is a duplicate with its own offsets.
func TestAppendRuns(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Store) {
		needMultiAppend(t, s)
		ctx := t.Context()
		const parts = 4
		mustCreateTopic(t, s, "runs", parts)
		var batches []*Batch
		for round := range 3 {
			for p := range int32(parts) {
				batches = append(batches, &Batch{Topic: "runs", Partition: p, ProducerID: 9, ProducerEpoch: 1,
					BaseSequence: int32(round * 5), Records: plain("r", 5)})
			}
		}
		calls0, _ := commandStats(t, s, "fcall")
		res := s.Append(ctx, batches)
		for i, r := range res {
			if want := int64(i/parts) * 5; r.Err != nil || r.BaseOffset != want || r.Duplicate {
				t.Fatalf("batch %d: %+v, want base %d", i, r, want)
			}
		}
		if calls, _ := commandStats(t, s, "fcall"); calls-calls0 != parts {
			t.Fatalf("%d FCALLs for %d partitions' runs, want one per partition", calls-calls0, parts)
		}
		for p := range int32(parts) {
			checkDense(t, s, "runs", p, 15)
		}
		// Every batch of the runs is recognised when retried, alone or as a run again.
		for i, r := range s.Append(ctx, batches) {
			if want := int64(i/parts) * 5; r.Err != nil || !r.Duplicate || r.BaseOffset != want {
				t.Fatalf("retry of batch %d: %+v, want duplicate at %d", i, r, want)
			}
		}
		retry := &Batch{Topic: "runs", Partition: 2, ProducerID: 9, ProducerEpoch: 1, BaseSequence: 5, Records: plain("r", 5)}
		if r := s.Append(ctx, []*Batch{retry})[0]; !r.Duplicate || r.BaseOffset != 5 {
			t.Fatalf("retry of the middle batch: %+v", r)
		}
		// A run that starts with a retry: the retry is a duplicate, the new batch is stored.
		tail := &Batch{Topic: "runs", Partition: 2, ProducerID: 9, ProducerEpoch: 1, BaseSequence: 15, Records: plain("n", 2)}
		res = s.Append(ctx, []*Batch{batches[2*parts+2], tail})
		if !res[0].Duplicate || res[0].BaseOffset != 10 || res[1].Err != nil || res[1].Duplicate || res[1].BaseOffset != 15 {
			t.Fatalf("retry then new batch: %+v", res)
		}
		checkDense(t, s, "runs", 2, 17)
		// A retry, a new batch and one that could not join them (another log append time) keep their
		// order: the last is not checked ahead of the other two.
		next := &Batch{Topic: "runs", Partition: 2, ProducerID: 9, ProducerEpoch: 1, BaseSequence: 17, Records: plain("m", 1)}
		last := &Batch{Topic: "runs", Partition: 2, ProducerID: 9, ProducerEpoch: 1, BaseSequence: 18, Records: plain("l", 1), LogAppendTime: 1_700_000_000_000}
		res = s.Append(ctx, []*Batch{tail, next, last})
		if !res[0].Duplicate || res[0].BaseOffset != 15 || res[1].Err != nil || res[1].BaseOffset != 17 || res[2].Err != nil || res[2].BaseOffset != 18 {
			t.Fatalf("retry, new batch, batch of another log append time: %+v", res)
		}
		checkDense(t, s, "runs", 2, 19)
		// A run out of sequence is refused batch by batch.
		gap := []*Batch{
			{Topic: "runs", Partition: 1, ProducerID: 9, ProducerEpoch: 1, BaseSequence: 30, Records: plain("g", 1)},
			{Topic: "runs", Partition: 1, ProducerID: 9, ProducerEpoch: 1, BaseSequence: 31, Records: plain("g", 1)},
		}
		for i, r := range s.Append(ctx, gap) {
			if !errors.Is(r.Err, ErrOutOfOrderSequence) {
				t.Fatalf("gap batch %d: %+v, want ErrOutOfOrderSequence", i, r)
			}
		}
		checkDense(t, s, "runs", 1, 15)
	})
}

// pipelineHook runs fn around every pipeline of the client it is added to.
type pipelineHook func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error

func (h pipelineHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h pipelineHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h pipelineHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { return h(ctx, cmds, next) }
}

// processHook is a redis.Hook of single commands (pipelines and dials pass through).
type processHook func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error

func (h processHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h processHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { return h(ctx, cmd, next) }
}
func (h processHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A panic in an append's first pipeline (the gateway recovers it and serves on) unwinds only once the
// request's other pipelines are done: the runs' records go back for reuse on the way out, and the
// other pipelines still read them.
func TestAppendPanicWaitsForOtherPipelines(t *testing.T) {
	s := openStore(t, backendOptions(t, "standalone"))
	if !s.multiAppend.Load() {
		t.Skip("needs Redis 7+")
	}
	mustCreateTopic(t, s, "panics", 2)
	var batches []*Batch
	for round := range 2 { // two batches per partition: two runs of 200 records, one per pipeline
		for p := range int32(2) {
			batches = append(batches, &Batch{Topic: "panics", Partition: p, ProducerID: 7, ProducerEpoch: 1,
				BaseSequence: int32(round * 100), Records: plain("x", 100)})
		}
	}
	first := s.keys.stream("panics", 0) // the first pipeline runs on Append's own goroutine
	var otherDone atomic.Bool
	otherRan := make(chan struct{})
	s.Client().AddHook(pipelineHook(func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
		if len(cmds) > 1 && len(cmds[1].Args()) > 1 {
			if key, ok := cmds[1].Args()[1].(*string); ok && *key == first {
				<-otherRan
				panic("a panic in the first pipeline")
			}
		}
		err := next(ctx, cmds)
		close(otherRan)
		time.Sleep(200 * time.Millisecond)
		otherDone.Store(true)
		return err
	}))
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("Append did not panic")
			}
		}()
		s.Append(t.Context(), batches)
	}()
	if !otherDone.Load() {
		t.Fatal("Append unwound its panic while its other pipeline was still running")
	}
}

// A panic on one of the store's own goroutines (an append's other pipeline, a read's other part)
// reaches the caller's goroutine, which a connection recovers; on the goroutine it ended the process.
func TestPanicOnStoreGoroutineReachesCaller(t *testing.T) {
	s := openStore(t, backendOptions(t, "standalone"))
	if !s.multiAppend.Load() {
		t.Skip("needs Redis 7+")
	}
	mustCreateTopic(t, s, "far-panics", 2)
	mustAppend(t, s, &Batch{Topic: "far-panics", Partition: 0, ProducerID: -1, Records: plain("x", 2000)})
	other := s.keys.stream("far-panics", 1) // the append's second pipeline, on a goroutine of its own
	s.Client().AddHook(pipelineHook(func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
		offsets := false
		for _, c := range cmds {
			offsets = offsets || c.Name() == "hmget"
			if key, ok := c.Args()[min(1, len(c.Args())-1)].(*string); ok && *key == other {
				panic("a panic in the append's other pipeline")
			}
		}
		if !offsets && cmds[0].Name() == "xrange" {
			panic("a panic in a read's other part") // the first part reads the offsets too
		}
		return next(ctx, cmds)
	}))
	panics := func(what string, f func()) {
		t.Helper()
		defer func() {
			if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), "a panic in "+what) {
				t.Errorf("%s: recovered %v", what, p)
			}
		}()
		f()
	}
	panics("a read's other part", func() {
		s.Read(t.Context(), []ReadRequest{{Topic: "far-panics", Partition: 0, Offset: 0, Count: 2000, RecordBytes: 120}})
	})
	var batches []*Batch
	for p := range int32(2) {
		batches = append(batches, &Batch{Topic: "far-panics", Partition: p, ProducerID: -1, Records: plain("y", 200)})
	}
	panics("the append's other pipeline", func() { s.Append(t.Context(), batches) })
}

// commandHook runs fn around every single command of the client it is added to.
type commandHook func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error

func (h commandHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h commandHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { return h(ctx, cmd, next) }
}
func (h commandHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A panic in a background probe of the function library, on a goroutine no caller waits for, fails
// that probe (the finish step runs as EVAL until the next) and is told to the panic observer, where it
// ended the process.
func TestProbePanicFailsProbe(t *testing.T) {
	s := openStore(t, backendOptions(t, "standalone"))
	if !s.multiAppend.Load() {
		t.Skip("needs Redis 7+")
	}
	mustCreateTopic(t, s, "probe-panics", 1)
	var seen []string // written on the probe's goroutine, read after probes.Wait
	s.ObservePanics(func(where string, p any, stack []byte) {
		seen = append(seen, fmt.Sprintf("%s: %v", where, p))
	})
	s.Client().AddHook(commandHook(func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if cmd.Name() == "function" {
			panic("a panic probing")
		}
		return next(ctx, cmd)
	}))
	s.reprobeAt.Store(1) // a failed probe, due again
	s.reprobe()
	s.probes.Wait()
	if len(seen) != 1 || seen[0] != "store_probe: a panic probing" {
		t.Fatalf("panics observed: %q", seen)
	}
	if !s.noFunctions.Load() || s.reprobeAt.Load() <= time.Now().UnixNano() {
		t.Fatalf("after the probe's panic: noFunctions %v, next probe in %v; want EVAL and a probe later",
			s.noFunctions.Load(), time.Duration(s.reprobeAt.Load()-time.Now().UnixNano()))
	}
	mustAppend(t, s, &Batch{Topic: "probe-panics", ProducerID: -1, Records: plain("x", 3)})
	checkDense(t, s, "probe-panics", 0, 3)
}
