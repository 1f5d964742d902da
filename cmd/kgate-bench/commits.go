package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/redisstore"
)

const commitTopic = "commits"

func (b *bench) commitsPhase(ctx context.Context) error {
	workers := b.o.commitWorkers
	b.rep.meta("commits", fmt.Sprintf("%d committers for %v, each its own connection and group, one partition per OffsetCommit, simple commits (generation -1, no member) on an empty group; baseline: the same number of goroutines calling redisstore.CommitOffsets (MULTI of 3 HSETs + the commit stream script)",
		workers, b.o.commitDuration))
	if err := b.createTopic(ctx, commitTopic, workers); err != nil {
		return err
	}
	var (
		kn, bn    int64
		kcpu, bcp cpuUse
		err       error
	)
	labeled("client", func() { kn, kcpu, err = b.commitsKgate(ctx, workers) })
	if err != nil {
		return fmt.Errorf("through kgate: %w", err)
	}
	labeled("baseline", func() { bn, bcp, err = b.commitsBaseline(ctx, workers) })
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	secs := b.o.commitDuration.Seconds()
	b.rep.add(withBaseline(result{Phase: "commits", Case: fmt.Sprintf("%d committers", workers), Metric: "OffsetCommit",
		Unit: "commits/s", Kgate: float64(kn) / secs, KgateCPU: &kcpu, BaselineCPU: &bcp}, float64(bn)/secs))
	return nil
}

// runWorkers runs fn in n goroutines until the measured window ends; fn returns the work done per call.
func (b *bench) runWorkers(ctx context.Context, n int, fn func(w int) error) (int64, cpuUse, error) {
	var (
		count atomic.Int64
		stop  atomic.Bool
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	m0 := b.markCPU()
	for w := range n {
		wg.Go(func() {
			for !stop.Load() && ctx.Err() == nil {
				if err := fn(w); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
				count.Add(1)
			}
		})
	}
	err := sleep(ctx, b.o.commitDuration)
	stop.Store(true)
	done := count.Load()
	cpu := b.cpuSince(m0)
	wg.Wait()
	if err != nil {
		return 0, cpu, err
	}
	return done, cpu, first
}

func (b *bench) commitsKgate(ctx context.Context, workers int) (int64, cpuUse, error) {
	clients := make([]*kgo.Client, workers)
	offsets := make([]int64, workers)
	defer func() {
		for _, cl := range clients {
			if cl != nil {
				cl.Close()
			}
		}
	}()
	commit := func(w int) error {
		offsets[w]++
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Group = fmt.Sprintf("bench-commit-%d", w)
		req.Generation = -1
		t := kmsg.NewOffsetCommitRequestTopic()
		t.Topic = commitTopic
		p := kmsg.NewOffsetCommitRequestTopicPartition()
		p.Partition, p.Offset = int32(w), offsets[w]
		t.Partitions = append(t.Partitions, p)
		req.Topics = append(req.Topics, t)
		resp, err := clients[w].Request(ctx, req)
		if err != nil {
			return err
		}
		r := resp.(*kmsg.OffsetCommitResponse)
		if len(r.Topics) != 1 || len(r.Topics[0].Partitions) != 1 {
			return fmt.Errorf("unexpected OffsetCommit response %+v", r)
		}
		return kerr.ErrorForCode(r.Topics[0].Partitions[0].ErrorCode)
	}
	// Connect and find the coordinator before the measured window.
	for w := range clients {
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.addr))
		if err != nil {
			return 0, cpuUse{}, err
		}
		clients[w] = cl
		if err := commit(w); err != nil {
			return 0, cpuUse{}, err
		}
	}
	return b.runWorkers(ctx, workers, commit)
}

func (b *bench) commitsBaseline(ctx context.Context, workers int) (int64, cpuUse, error) {
	offsets := make([]int64, workers)
	commit := func(w int) error {
		offsets[w]++
		errs := b.base.CommitOffsets(ctx, fmt.Sprintf("bench-commit-%d", w),
			[]redisstore.OffsetCommit{{Topic: commitTopic, Partition: int32(w), Offset: offsets[w]}}, time.Now())
		return errs[0]
	}
	for w := range workers {
		if err := commit(w); err != nil {
			return 0, cpuUse{}, err
		}
	}
	return b.runWorkers(ctx, workers, commit)
}
