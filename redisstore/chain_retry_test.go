package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// oomThenFlush is a client hook that, once, in a pipeline of at least three appends (EVALSHAs, or
// MULTI blocks), runs the first with maxmemory at 1 byte, so it fails (OOM), then flushes the script
// cache or the function library (flush) before the second, and loads it again (load) before the
// third: a batch failing for want of memory, and an operator's flush (or a failover) landing right
// after it, between two batches of its partition.
type oomThenFlush struct {
	flush, load []any
	done        atomic.Bool
	noscript    atomic.Bool // the second append (a script) was answered NOSCRIPT
}

func (*oomThenFlush) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*oomThenFlush) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *oomThenFlush) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var ends []int // where each append's commands end
		for i, c := range cmds {
			switch strings.ToLower(c.Name()) {
			case "evalsha", "exec":
				ends = append(ends, i+1)
			}
		}
		if len(ends) < 3 || h.done.Swap(true) {
			return next(ctx, cmds)
		}
		cfg := func(v string) redis.Cmder { return redis.NewStatusCmd(ctx, "config", "set", "maxmemory", v) }
		with := slices.Concat([]redis.Cmder{cfg("1")}, cmds[:ends[0]],
			[]redis.Cmder{cfg("0"), redis.NewCmd(ctx, h.flush...)}, cmds[ends[0]:ends[1]],
			[]redis.Cmder{redis.NewCmd(ctx, h.load...)}, cmds[ends[1]:])
		err := next(ctx, with)
		h.noscript.Store(redis.HasErrorPrefix(cmds[ends[0]].Err(), "NOSCRIPT"))
		return err
	}
}

// TestAppendRetryAfterFailedBatchKeepsOrder: three batches of one partition in one pipeline; the first
// fails (OOM), the script cache or function library is flushed before the second and loaded again
// before the third. The second (NOSCRIPT, or its FCALL missing) and the third (refused by the chain)
// are appended again by the store, but must not be stored ahead of the first, which was not: both are
// refused with a retriable error, nothing is stored, and the producer's retry of all three stores
// them in order. Before, the store's second pipeline started a chain of its own and stored them,
// ahead of the first: a reorder when the producer retried it, and for an idempotent producer the
// first's retry answered OUT_OF_ORDER_SEQUENCE_NUMBER (a lost batch). Redis of its own: maxmemory,
// flushes.
func TestAppendRetryAfterFailedBatchKeepsOrder(t *testing.T) {
	for _, path := range []string{"script", "transaction"} {
		for _, producer := range []int64{-1, 42} {
			t.Run(fmt.Sprintf("%s/producer%d", path, producer), func(t *testing.T) {
				t.Parallel()
				s, _ := openOwnServer(t)
				hook := &oomThenFlush{flush: []any{"script", "flush"}, load: []any{"script", "load", appendScriptSource}}
				if path == "script" {
					s.multiAppend.Store(false)
				} else {
					needMultiAppend(t, s)
					hook.flush, hook.load = []any{"function", "flush"}, []any{"function", "load", finishLibrary}
				}
				ctx := t.Context()
				topic := mustCreateTopic(t, s, "oom", 1).Name
				appendOne(t, s, topic, 0, plain("warm", 1)...) // the script is cached
				batches := func() []*Batch {
					var out []*Batch
					for i, name := range []string{"a", "b", "c"} {
						// Each its own log append time: the transaction path does not merge them into a run.
						out = append(out, &Batch{Topic: topic, ProducerID: producer, BaseSequence: int32(2 * i),
							LogAppendTime: int64(1000 + i), Records: plain(name, 2)})
					}
					return out
				}
				s.rdb.(*redis.Client).AddHook(hook)
				_, failed0 := commandStats(t, s, "fcall")
				out := s.Append(ctx, batches())
				if !hook.done.Load() || out[0].Err == nil || !strings.HasPrefix(out[0].Err.Error(), "OOM") {
					t.Fatalf("first batch: %+v, want refused OOM", out[0])
				}
				if _, failed := commandStats(t, s, "fcall"); path == "script" && !hook.noscript.Load() || path == "transaction" && failed == failed0 {
					t.Fatal("the second batch did not find its script or function missing: the flush did not land")
				}
				for i, r := range out[1:] {
					if r.Err == nil || !IsUnavailable(r.Err) {
						t.Errorf("batch %d after the failed first: %+v, want a retriable error, not stored", i+1, r)
					}
				}
				checkValues(t, s, topic, "[]")
				checkDense(t, s, topic, 0, 1)
				// The producer sends the three again, in order.
				for i, r := range s.Append(ctx, batches()) {
					if r.Err != nil || r.Duplicate || r.BaseOffset != int64(1+2*i) {
						t.Errorf("batch %d sent again: %+v, want stored at %d", i, r, 1+2*i)
					}
				}
				checkValues(t, s, topic, "[a-0 a-1 b-0 b-1 c-0 c-1]")
				checkDense(t, s, topic, 0, 7)
			})
		}
	}
}
