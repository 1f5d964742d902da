package redisstore

import (
	"context"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// CommandObserver is told the duration and outcome of every Redis command or pipeline the store runs
// (pipelines are reported as "pipeline").
type CommandObserver func(command string, took time.Duration, err error)

// Observe installs fn as a command observer (metrics). Call it before the store is used.
func (s *Store) Observe(fn CommandObserver) {
	s.rdb.AddHook(observeHook{fn: fn})
	if _, ok := s.rdb.(*redis.ClusterClient); ok {
		// A cluster's appends run on its node clients (append_multi.go), which the cluster client's
		// hooks do not cover; they report themselves (observeNodePipeline).
		s.nodeObserver = fn
	}
}

// PanicObserver is told of a panic the store recovered on a goroutine of its own that no caller waits
// for (where names it: "store_probe", "store_read": a master's share of a call the caller no longer
// waits for, acrossMasters), with the panic's value and stack; the store carries on as if
// the work had failed.
type PanicObserver func(where string, p any, stack []byte)

// ObservePanics installs fn as the panic observer (logs, metrics), in place of any earlier one. Call it
// before the store is used.
func (s *Store) ObservePanics(fn PanicObserver) { s.panicObserver = fn }

// observeNodePipeline reports an append pipeline run on a cluster's node client: its time and its
// error, or else the first error reply among its raw replies.
func (s *Store) observeNodePipeline(start time.Time, err error, cmds []redis.Cmder) {
	if s.nodeObserver == nil {
		return
	}
	if err == nil {
		err = rawErrorReply(cmds)
	}
	s.nodeObserver("pipeline", time.Since(start), err)
}

type observeHook struct{ fn CommandObserver }

func (h observeHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (h observeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmd)
		if err == redis.Nil {
			h.fn(cmd.Name(), time.Since(start), nil)
		} else {
			h.fn(cmd.Name(), time.Since(start), err)
		}
		return err
	}
}

func (h observeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmds)
		reported := err
		if reported == nil {
			reported = rawErrorReply(cmds)
		}
		h.fn("pipeline", time.Since(start), reported)
		return err
	}
}

// rawErrorReply is the first error reply among cmds' raw replies (the append's EXEC, raw_reply.go),
// which the client library does not count as a command's error. (The fetch's raw XRANGE replies are
// read again as values when they are errors: readAgain.)
func rawErrorReply(cmds []redis.Cmder) error {
	for _, c := range cmds {
		if rc, ok := c.(*redis.RawCmd); ok {
			if v := rc.Val(); isErrorReply(v) {
				r := respReader{b: v}
				_, line, _ := r.line()
				return replyError(line)
			}
		}
	}
	return nil
}
