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
	b.rep.meta("commits", fmt.Sprintf("%d committers for %v on each side in %d alternating rounds, each committer its own connection and group, one partition per OffsetCommit, simple commits (generation -1, no member) on an empty group; baseline: the same number of goroutines calling redisstore.CommitOffsets (the offsets script, 3 hash writes checked against the group's owner record, + the commit stream script)",
		workers, b.o.commitDuration, b.o.rounds))
	if err := b.createTopic(ctx, commitTopic, workers); err != nil {
		return err
	}
	// The measured time is split into rounds that alternate the two sides, as the other phases do.
	window := b.o.commitDuration / time.Duration(b.o.rounds)
	ks, bs, err := alternate("commits", b.o.rounds, func(int) (commitRun, error) {
		return b.commitsKgate(ctx, workers, window)
	}, func(int) (commitRun, error) {
		return b.commitsBaseline(ctx, workers, window)
	})
	if err != nil {
		return err
	}
	k, base := total(ks), total(bs)
	res := result{Phase: "commits", Case: fmt.Sprintf("%d committers", workers), Metric: "OffsetCommit",
		Unit: "commits/s", Kgate: k.rate(), KgateCPU: &k.cpu, BaselineCPU: &base.cpu, RoundRatios: roundRatios(ks, bs, commitRun.rate)}
	if spread := roundSpread(res.RoundRatios); spread != "" {
		res.Notes = spread
	}
	b.rep.add(withBaseline(res, base.rate()))
	return nil
}

// commitRun is one side's commits in one round.
type commitRun struct {
	commits int64
	window  time.Duration
	cpu     cpuUse
}

func (r commitRun) rate() float64 { return float64(r.commits) / r.window.Seconds() }

func (r commitRun) plus(s commitRun) commitRun {
	return commitRun{commits: r.commits + s.commits, window: r.window + s.window, cpu: r.cpu.plus(s.cpu)}
}

// runWorkers runs fn in n goroutines for window and counts the calls that succeeded in it.
func (b *bench) runWorkers(ctx context.Context, n int, window time.Duration, fn func(w int) error) (commitRun, error) {
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
	err := sleep(ctx, window)
	stop.Store(true)
	r := commitRun{commits: count.Load(), window: window, cpu: b.cpuSince(m0)}
	wg.Wait()
	if err != nil {
		return r, err
	}
	return r, first
}

func (b *bench) commitsKgate(ctx context.Context, workers int, window time.Duration) (commitRun, error) {
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
			return commitRun{}, err
		}
		clients[w] = cl
		if err := commit(w); err != nil {
			return commitRun{}, err
		}
	}
	return b.runWorkers(ctx, workers, window, commit)
}

func (b *bench) commitsBaseline(ctx context.Context, workers int, window time.Duration) (commitRun, error) {
	offsets := make([]int64, workers)
	commit := func(w int) error {
		offsets[w]++
		errs := b.base.CommitOffsets(ctx, fmt.Sprintf("bench-commit-%d", w), "",
			[]redisstore.OffsetCommit{{Topic: commitTopic, Partition: int32(w), Offset: offsets[w]}}, time.Now())
		return errs[0]
	}
	for w := range workers {
		if err := commit(w); err != nil {
			return commitRun{}, err
		}
	}
	return b.runWorkers(ctx, workers, window, commit)
}
