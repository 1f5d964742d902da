package main

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// produceHook counts what the producer's requests carried: batches (one per partition per request),
// records and Produce requests written.
type produceHook struct {
	batches, records, requests atomic.Int64
}

var (
	_ kgo.HookProduceBatchWritten = (*produceHook)(nil)
	_ kgo.HookBrokerWrite         = (*produceHook)(nil)
)

func (h *produceHook) OnProduceBatchWritten(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.ProduceBatchMetrics) {
	h.batches.Add(1)
	h.records.Add(int64(m.NumRecords))
}

func (h *produceHook) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == 0 && err == nil {
		h.requests.Add(1)
	}
}

type hookSnap struct{ batches, records, requests int64 }

func (h *produceHook) snap() hookSnap {
	return hookSnap{h.batches.Load(), h.records.Load(), h.requests.Load()}
}

// producerOpts is the franz-go producer of every phase: acks=-1 with idempotence (franz-go's default),
// no compression (the baseline stores the same bytes uncompressed), records spread round-robin.
func (b *bench) producerOpts(topic string, linger time.Duration, hooks ...kgo.Hook) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(b.addr),
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(linger),
		kgo.ProducerBatchMaxBytes(int32(b.o.batchBytes)),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.RetryTimeout(30 * time.Second),
		kgo.MaxBufferedRecords(b.o.buffered),
	}
	if len(hooks) > 0 {
		opts = append(opts, kgo.WithHooks(hooks...))
	}
	return opts
}

func sizeName(n int) string {
	if n%1024 == 0 {
		return strconv.Itoa(n/1024) + "KB"
	}
	return strconv.Itoa(n) + "B"
}

func rateKey(size, parts int) string { return fmt.Sprintf("%d/%d", size, parts) }

// produceRun is one measured produce run.
type produceRun struct {
	rate     float64 // records/s
	cpu      cpuUse
	perBatch float64 // records per partition batch
	perReq   float64 // partition batches per Produce request
}

// plus is two runs taken together (rates and shapes weighted by measured time).
func (r produceRun) plus(s produceRun) produceRun {
	if r.cpu.WallSec == 0 {
		return s
	}
	a, b := r.cpu.WallSec, s.cpu.WallSec
	avg := func(x, y float64) float64 { return (x*a + y*b) / (a + b) }
	return produceRun{rate: avg(r.rate, s.rate), cpu: r.cpu.plus(s.cpu), perBatch: avg(r.perBatch, s.perBatch), perReq: avg(r.perReq, s.perReq)}
}

func (b *bench) producePhase(ctx context.Context) error {
	b.rep.meta("producer", fmt.Sprintf("franz-go, acks=-1, idempotent, linger=%v, max batch %d B, at most %d records buffered, no compression, round-robin partitioner, %d B keys; values are random bytes",
		b.o.linger, b.o.batchBytes, b.o.buffered, b.o.keyBytes))
	b.rep.meta("produce", fmt.Sprintf("each case: %d rounds of kgate then baseline, each run %v warm-up + %v measured; baseline: go-redis pipelined XADD * (ts, key, value) of the same records, batches of the records/batch kgate's requests carried in the same round, batches/request per request, a request of several partitions split into up to 4 pipelines at once of 128 records or more as the gateway splits one, %d request(s) in flight; MB/s counts values, 1 MB = 10^6 B",
		b.o.rounds, b.o.warmup, b.o.duration/time.Duration(b.o.rounds), b.o.basePipes))
	for _, size := range b.o.sizes {
		for _, parts := range b.o.partitions {
			topic := fmt.Sprintf("produce-%d-%dp", size, parts)
			if err := b.createTopic(ctx, topic, parts); err != nil {
				return err
			}
			// Each round's baseline takes the shape of kgate's requests in that round (it runs right
			// after): franz-go's batches vary from round to round, by a factor of two at 64 partitions.
			measure := b.o.duration / time.Duration(b.o.rounds)
			perBatch, perReq := 0, 0
			ks, bs, err := kgateThenBaseline(topic, b.o.rounds, func(int) (produceRun, error) {
				kr, err := b.produceKgate(ctx, topic, size, measure)
				perBatch = max(int(math.Round(kr.perBatch)), 1)
				perReq = min(max(int(math.Round(kr.perReq)), 1), parts)
				return kr, err
			}, func(int) (produceRun, error) {
				return b.produceBaseline(ctx, topic, parts, size, perBatch, perReq, measure)
			})
			if err != nil {
				return err
			}
			k, base := total(ks), total(bs)
			ratios := roundRatios(ks, bs, func(r produceRun) float64 { return r.rate })
			cs := fmt.Sprintf("%s x %dp", sizeName(size), parts)
			notes := fmt.Sprintf("%.1f rec/batch, %.1f batches/req", k.perBatch, k.perReq)
			if spread := roundSpread(ratios); spread != "" {
				sizes := make([]float64, len(ks))
				for i, r := range ks {
					sizes[i] = r.perBatch
				}
				notes += "; " + spread + "; rec/batch per round " + joinNums(sizes)
			}
			b.rep.add(withBaseline(result{Phase: "produce", Case: cs, Metric: "throughput", Unit: "rec/s",
				Kgate: k.rate, KgateCPU: &k.cpu, BaselineCPU: &base.cpu, Notes: notes, RoundRatios: ratios}, base.rate))
			b.rep.add(withBaseline(result{Phase: "produce", Case: cs, Metric: "throughput", Unit: "MB/s",
				Kgate: k.rate * float64(size) / 1e6}, base.rate*float64(size)/1e6))
			b.rep.addCPUPerRecord("produce", cs, k.cpu, k.rate*k.cpu.WallSec, base.cpu, base.rate*base.cpu.WallSec)
			b.produced = append(b.produced, producedTopic{topic: topic, size: size, parts: parts})
			b.maxRate[rateKey(size, parts)] = k.rate
		}
	}
	return nil
}

// produceKgate runs a franz-go producer flat out for warm-up + measure and counts the records
// acknowledged during the measured window.
func (b *bench) produceKgate(ctx context.Context, topic string, size int, measure time.Duration) (produceRun, error) {
	h := &produceHook{}
	cl, err := kgo.NewClient(b.producerOpts(topic, b.o.linger, h)...)
	if err != nil {
		return produceRun{}, err
	}
	defer cl.Close()
	value, keys := randomBytes(size), recordKeys(b.o.keyBytes)
	var (
		acked    atomic.Int64
		firstErr firstError
		stop     atomic.Bool
		done     = make(chan struct{})
	)
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			firstErr.set(err)
			return
		}
		acked.Add(1)
	}
	go func() {
		defer close(done)
		for i := 0; !stop.Load() && ctx.Err() == nil; i++ {
			cl.Produce(ctx, &kgo.Record{Key: keys[i%len(keys)], Value: value}, promise)
		}
	}()
	defer func() { stop.Store(true); <-done }()
	if err := sleep(ctx, b.o.warmup); err != nil {
		return produceRun{}, err
	}
	m0, a0 := b.markCPU(), acked.Load()
	if err := sleep(ctx, measure); err != nil {
		return produceRun{}, err
	}
	a1, at := acked.Load(), time.Now()
	cpu := b.cpuSince(m0)
	elapsed := at.Sub(m0.at)
	stop.Store(true)
	<-done
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := cl.Flush(fctx); err != nil {
		return produceRun{}, fmt.Errorf("flush: %w", err)
	}
	if err := firstErr.get(); err != nil {
		return produceRun{}, err
	}
	// Batch shape over the whole run, flush included: a window of a few 1 MB requests is too coarse.
	hs := h.snap()
	r := produceRun{rate: float64(a1-a0) / elapsed.Seconds(), cpu: cpu}
	if hs.batches > 0 {
		r.perBatch = float64(hs.records) / float64(hs.batches)
	}
	if hs.requests > 0 {
		r.perReq = float64(hs.batches) / float64(hs.requests)
	}
	return r, nil
}

// baseSplitMin and baseSplitMax are redisstore's appendSplitMin and appendSplitMax: the fewest records
// per pipeline and the most pipelines a request of several partitions is written as.
const (
	baseSplitMin = 128
	baseSplitMax = 4
)

// baselineSplit is how many pipelines at once a request of perReq batches of perBatch records goes
// out as: up to baseSplitMax, each of at least baseSplitMin records, one batch at least.
func baselineSplit(perReq, perBatch int) int {
	return max(1, min(baseSplitMax, perReq, perReq*perBatch/baseSplitMin))
}

// produceBaseline XADDs the same kind of records straight to Redis: each request holds perReq
// batches of perBatch records, each batch on the next partition, as one kgate Produce request does,
// and goes out as the gateway writes one (split into pipelines at once; see split).
// Its streams are removed afterwards (the consume baseline reads kgate's own streams).
func (b *bench) produceBaseline(ctx context.Context, topic string, parts, size, perBatch, perReq int, measure time.Duration) (produceRun, error) {
	rdb := b.base.Client()
	keys := make([]string, parts)
	for p := range keys {
		keys[p] = b.base.StreamKey(topic, int32(p))
	}
	defer rdb.Unlink(context.Background(), keys...)
	value, rkeys := randomBytes(size), recordKeys(b.o.keyBytes)
	var (
		total    atomic.Int64
		stop     atomic.Bool
		firstErr firstError
		wg       sync.WaitGroup
	)
	// A request of several partitions goes out as up to baseSplitMax pipelines at once, of at least
	// baseSplitMin records each, as the gateway writes one (redisstore's appendSplitMin and
	// appendSplitMax): one pipeline would leave the baseline less parallel than kgate.
	split := baselineSplit(perReq, perBatch)
	// Entry IDs are Redis's own (*): with several pipelines in flight, explicit IDs would race.
	for w := range b.o.basePipes {
		wg.Go(func() {
			j, i := w, 0
			for !stop.Load() && ctx.Err() == nil {
				ts := strconv.FormatInt(time.Now().UnixMilli(), 10)
				var sent sync.WaitGroup
				for s := range split {
					from, to := s*perReq/split, (s+1)*perReq/split
					pipe := rdb.Pipeline()
					for bi := from; bi < to; bi++ {
						k := keys[(j+bi)%parts]
						for r := range perBatch {
							pipe.Do(ctx, "XADD", k, "*", "ts", ts, "key", rkeys[(i+bi*perBatch+r)%len(rkeys)], "value", value)
						}
					}
					sent.Go(func() {
						if _, err := pipe.Exec(ctx); err != nil {
							firstErr.set(err)
						}
					})
				}
				sent.Wait()
				if firstErr.get() != nil {
					return
				}
				j, i = j+perReq, i+perReq*perBatch
				total.Add(int64(perReq * perBatch))
			}
		})
	}
	defer func() { stop.Store(true); wg.Wait() }()
	if err := sleep(ctx, b.o.warmup); err != nil {
		return produceRun{}, err
	}
	m0, t0 := b.markCPU(), total.Load()
	if err := sleep(ctx, measure); err != nil {
		return produceRun{}, err
	}
	t1, at := total.Load(), time.Now()
	cpu := b.cpuSince(m0)
	elapsed := at.Sub(m0.at)
	stop.Store(true)
	wg.Wait()
	if err := firstErr.get(); err != nil {
		return produceRun{}, err
	}
	return produceRun{rate: float64(t1-t0) / elapsed.Seconds(), cpu: cpu, perBatch: float64(perBatch), perReq: float64(perReq)}, nil
}

// firstError keeps the first error goroutines report.
type firstError struct {
	mu  sync.Mutex
	err error
}

func (f *firstError) set(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
}

func (f *firstError) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
