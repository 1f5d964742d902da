package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Latency records carry, in their first 9 bytes, the time they were handed to the client (nanoseconds
// since the run's start, on the monotonic clock) and a warm-up flag.
const (
	stampLen = 9
	flagWarm = 1
)

func stampValue(dst []byte, since time.Duration, warm bool) {
	binary.BigEndian.PutUint64(dst, uint64(since))
	dst[8] = 0
	if warm {
		dst[8] = flagWarm
	}
}

// stampedValue is a fresh record value: the stamp, then tail's bytes after it (len(tail) bytes in all).
func stampedValue(tail []byte, since time.Duration, warm bool) []byte {
	v := make([]byte, len(tail))
	copy(v[stampLen:], tail[stampLen:])
	stampValue(v, since, warm)
	return v
}

func readStamp(v []byte) (time.Duration, bool) {
	if len(v) < stampLen {
		return 0, false
	}
	return time.Duration(binary.BigEndian.Uint64(v)), v[8] != flagWarm
}

// latencyRun is one rate's samples.
type latencyRun struct {
	lat      []time.Duration
	achieved float64 // records/s delivered (deliveryWindow)
	cpu      cpuUse
}

// deliveryWindow spans the deliveries of a latency run's measured records. Their rate is their count
// over that span, but over no less than the time they were scheduled over: a consumer that stalls and
// then catches up in a burst delivered no faster than the pacer produced (even when the pacer stalled
// too and stamped a burst alike), one that falls behind delivered slower.
type deliveryWindow struct {
	first, last time.Duration
	n           int
}

func (w *deliveryWindow) add(got time.Duration) {
	if w.n == 0 {
		w.first = got
	}
	w.last = got
	w.n++
}

func (w *deliveryWindow) rate(scheduled time.Duration) float64 {
	span := max(w.last-w.first, scheduled)
	if span <= 0 {
		return 0
	}
	return float64(w.n) / span.Seconds()
}

func (b *bench) latencyPhase(ctx context.Context) error {
	parts, size := b.o.latPartitions, b.o.latSize
	warm := b.o.latDuration / 10
	measure := b.o.latDuration / time.Duration(b.o.rounds)
	b.rep.meta("latency", fmt.Sprintf("%d B values over %d partition(s); franz-go producer linger=%v, acks=-1, idempotent; franz-go consumer long-polling (max wait 5s, min bytes 1); each rate: %d rounds of kgate then baseline, each run %v warm-up + %v measured, percentiles over all rounds' samples; latency = consumer poll return - time the record was handed to the producer; baseline: XADD pipelined per 1 ms tick by one sender, XREAD BLOCK consumer; N%% max: that share of the end-to-end maximum, measured when the first such rate comes up (this producer flat out with the consumer reading along, %v after a %v warm-up)",
		size, parts, b.o.latLinger, b.o.rounds, warm, measure, b.o.duration, b.o.warmup))
	for i, r := range b.o.latRates {
		rate, label, maxNote := r, fmt.Sprintf("%s rec/s", fmtNum(r)), ""
		if r < 0 {
			maxRate, err := b.maxEndToEndRate(ctx, size, parts)
			if err != nil {
				return err
			}
			rate = -r * maxRate
			label = fmt.Sprintf("%.0f%% max (%s rec/s)", -r*100, fmtNum(rate))
			maxNote = fmt.Sprintf("; max = %s rec/s end to end (producer and consumer at once)", fmtNum(maxRate))
			if p := b.maxProduceRate(size, parts); p > 0 {
				maxNote += fmt.Sprintf(", %s rec/s for the producer alone in the produce phase", fmtNum(p))
			}
		}
		// The percentiles are over every round's samples.
		topic := func(round int) string { return fmt.Sprintf("latency-%d-%d", i, round) }
		ks, bs, err := alternate(label, b.o.rounds, func(round int) (latencyRun, error) {
			if err := b.createTopic(ctx, topic(round), parts); err != nil {
				return latencyRun{}, err
			}
			return b.latencyKgate(ctx, topic(round), parts, size, rate, warm, measure)
		}, func(round int) (latencyRun, error) {
			return b.latencyBaseline(ctx, topic(round), parts, size, rate, warm, measure)
		})
		if err != nil {
			return err
		}
		k, base := total(ks), total(bs)
		var kp99, bp99 []float64
		for j := range ks {
			kp99 = append(kp99, percentiles(ks[j].lat, .99)[0])
			bp99 = append(bp99, percentiles(bs[j].lat, .99)[0])
		}
		kp := percentiles(k.lat, .5, .99, .999)
		bp := percentiles(base.lat, .5, .99, .999)
		notes := fmt.Sprintf("delivered %s rec/s (baseline %s), %d samples", fmtNum(k.achieved), fmtNum(base.achieved), len(k.lat))
		if len(kp99) > 1 {
			notes += "; p99 per round " + joinNums(kp99) + " (baseline " + joinNums(bp99) + ")"
		}
		notes += maxNote
		for j, m := range []string{"p50", "p99", "p999"} {
			res := result{Phase: "latency", Case: label, Metric: m, Unit: "ms", Kgate: kp[j]}
			if j == 0 {
				res.KgateCPU, res.BaselineCPU, res.Notes = &k.cpu, &base.cpu, notes
			}
			b.rep.add(withBaseline(res, bp[j]))
		}
	}
	return nil
}

// plus is two runs' samples together, the delivered rate and CPU weighted by measured time.
func (r latencyRun) plus(s latencyRun) latencyRun {
	if r.cpu.WallSec == 0 {
		return s
	}
	a, b := r.cpu.WallSec, s.cpu.WallSec
	return latencyRun{lat: append(r.lat, s.lat...), achieved: (r.achieved*a + s.achieved*b) / (a + b), cpu: r.cpu.plus(s.cpu)}
}

// maxProduceRate is the produce phase's kgate figure for size and parts, or 0 when that phase did not
// run that case.
func (b *bench) maxProduceRate(size, parts int) float64 {
	return b.maxRate[rateKey(size, parts)]
}

// maxEndToEndRate is the most records/s kgate delivers end to end: the latency phase's producer (its
// linger, acks=-1, idempotent; a fresh, time-stamped value per record) writing as fast as franz-go's
// buffer lets it while a consumer long-polls the same partitions. The produce phase's maximum is a
// different system, a producer alone with a 5 ms linger: on two shared cores, half of it can already
// saturate producer + consumer + gateway + Redis, so "50% of max" would not be half loaded. The rate
// is what the consumer received over --duration, after --warmup.
func (b *bench) maxEndToEndRate(ctx context.Context, size, parts int) (float64, error) {
	if r, ok := b.maxE2E[rateKey(size, parts)]; ok {
		return r, nil
	}
	topic := fmt.Sprintf("latency-max-%d-%dp", size, parts)
	if err := b.createTopic(ctx, topic, parts); err != nil {
		return 0, err
	}
	progress("measuring the maximum end-to-end rate for %s x %dp", sizeName(size), parts)
	cons, err := b.tailConsumer(ctx, topic, parts)
	if err != nil {
		return 0, err
	}
	defer cons.Close()
	prod, err := kgo.NewClient(b.producerOpts(topic, b.o.latLinger)...)
	if err != nil {
		return 0, err
	}
	defer prod.Close()
	if err := prod.ProduceSync(ctx, &kgo.Record{Value: randomBytes(size)}).FirstErr(); err != nil {
		return 0, fmt.Errorf("end-to-end maximum: primer: %w", err)
	}

	// The consumer and the producer run until the measurement ends or either fails.
	rctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var got, acked atomic.Int64
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		for rctx.Err() == nil {
			fs := cons.PollFetches(rctx)
			if rctx.Err() != nil {
				return
			}
			if errs := fs.Errors(); len(errs) > 0 {
				stop(fmt.Errorf("end-to-end maximum: consumer: %w", errs[0].Err))
				return
			}
			got.Add(int64(fs.NumRecords()))
		}
	}()
	defer func() { stop(nil); <-consumed }()
	// The producer starts once the consumer has the primer: on a loaded machine the consumer's first
	// fetch can come later than the warm-up lasts, and the backlog it would then catch up on inflates
	// the rate.
	for deadline := time.Now().Add(10 * time.Second); got.Load() == 0; {
		if time.Now().After(deadline) {
			return 0, errors.New("end-to-end maximum: the consumer did not receive the primer in 10s")
		}
		if err := sleep(rctx, 5*time.Millisecond); err != nil {
			return 0, context.Cause(rctx)
		}
	}
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		promise := func(_ *kgo.Record, err error) {
			if err == nil {
				acked.Add(1)
			} else if rctx.Err() == nil {
				stop(fmt.Errorf("end-to-end maximum: producer: %w", err))
			}
		}
		keys := recordKeys(b.o.keyBytes)
		tail := randomBytes(size)
		start := time.Now()
		for i := 0; rctx.Err() == nil; i++ {
			v := stampedValue(tail, time.Since(start), false)
			prod.Produce(rctx, &kgo.Record{Key: keys[i%len(keys)], Value: v}, promise) // blocks while the buffer is full
		}
	}()
	defer func() { stop(nil); <-produced }()
	if err := sleep(rctx, b.o.warmup); err != nil {
		return 0, context.Cause(rctx) // the consumer's or producer's failure, or ctx's
	}
	from, acked0, t0 := got.Load(), acked.Load(), time.Now()
	if err := sleep(rctx, b.o.duration); err != nil {
		return 0, context.Cause(rctx)
	}
	rate := float64(got.Load()-from) / time.Since(t0).Seconds()
	if rate <= 0 {
		return 0, fmt.Errorf("end-to-end maximum: nothing delivered in %v (%d records acknowledged meanwhile)", b.o.duration, acked.Load()-acked0)
	}
	b.maxE2E[rateKey(size, parts)] = rate
	return rate, nil
}

// tailConsumer is a franz-go consumer of every partition of topic from its current end, long-polling
// (max wait 5 s, min bytes 1).
func (b *bench) tailConsumer(ctx context.Context, topic string, parts int) (*kgo.Client, error) {
	hwm, err := b.highWatermarks(ctx, topic, parts)
	if err != nil {
		return nil, err
	}
	offs := map[int32]kgo.Offset{}
	for p := range parts {
		offs[int32(p)] = kgo.NewOffset().At(hwm[p])
	}
	return kgo.NewClient(kgo.SeedBrokers(b.addr), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offs}),
		kgo.FetchMaxWait(5*time.Second))
}

// pace calls emit every millisecond with the records due by then at rate, until total were emitted.
// Each record's latency counts from when it was due (dueAt), not from when emit ran: a pacer held up
// (a producer's full buffer, the garbage collector) would otherwise hide the wait of every record due
// meanwhile (coordinated omission), and a tick's records would all count from its end.
func pace(ctx context.Context, rate float64, total int64, emit func(from, to int64, dueAt func(i int64) time.Time)) error {
	start := time.Now()
	dueAt := func(i int64) time.Time { return start.Add(time.Duration(float64(i) / rate * float64(time.Second))) }
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var sent int64
	for sent < total {
		due := min(int64(rate*time.Since(start).Seconds())+1, total)
		if due > sent {
			emit(sent, due, dueAt)
			sent = due
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (b *bench) latencyKgate(ctx context.Context, topic string, parts, size int, rate float64, warm, measure time.Duration) (latencyRun, error) {
	cons, err := b.tailConsumer(ctx, topic, parts)
	if err != nil {
		return latencyRun{}, err
	}
	defer cons.Close()
	prod, err := kgo.NewClient(b.producerOpts(topic, b.o.latLinger)...)
	if err != nil {
		return latencyRun{}, err
	}
	defer prod.Close()

	start := time.Now()
	total := int64(rate * (warm + measure).Seconds())
	warmN := int64(rate * warm.Seconds())
	// One primer record per partition: both clients are connected and the consumer long-polls.
	primers := int64(parts)
	for range parts {
		v := randomBytes(size)
		stampValue(v, 0, true)
		if err := prod.ProduceSync(ctx, &kgo.Record{Value: v}).FirstErr(); err != nil {
			return latencyRun{}, fmt.Errorf("primer: %w", err)
		}
	}
	var (
		got      atomic.Int64
		lats     = make([]time.Duration, 0, total)
		cctx, cc = context.WithCancel(ctx)
		done     = make(chan error, 1)
		window   deliveryWindow
	)
	defer cc()
	go func() {
		for got.Load() < total+primers {
			fs := cons.PollFetches(cctx)
			now := time.Since(start)
			if cctx.Err() != nil {
				done <- cctx.Err()
				return
			}
			if errs := fs.Errors(); len(errs) > 0 {
				done <- errs[0].Err
				return
			}
			fs.EachRecord(func(r *kgo.Record) {
				got.Add(1)
				if at, measured := readStamp(r.Value); measured {
					lats = append(lats, now-at)
					window.add(now)
				}
			})
		}
		done <- nil
	}()

	var perr atomic.Pointer[error]
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			perr.CompareAndSwap(nil, &err)
		}
	}
	keys := recordKeys(b.o.keyBytes)
	tail := randomBytes(size)
	m0 := b.markCPU()
	err = pace(ctx, rate, total, func(from, to int64, dueAt func(int64) time.Time) {
		for i := from; i < to; i++ {
			v := stampedValue(tail, dueAt(i).Sub(start), i < warmN)
			prod.Produce(ctx, &kgo.Record{Key: keys[i%int64(len(keys))], Value: v}, promise)
		}
	})
	if err != nil {
		return latencyRun{}, err
	}
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		err = fmt.Errorf("only %d of %d records delivered 10s after the last was produced", got.Load()-primers, total)
	}
	cpu := b.cpuSince(m0)
	if err != nil {
		return latencyRun{}, err
	}
	if p := perr.Load(); p != nil {
		return latencyRun{}, *p
	}
	return latencyRun{lat: lats, cpu: cpu, achieved: window.rate(measure)}, nil
}

// latencyBaseline does the same with Redis alone: the pacer hands each tick's records to one sender
// goroutine that XADDs them in one pipeline; a consumer XREAD BLOCKs on every stream.
func (b *bench) latencyBaseline(ctx context.Context, topic string, parts, size int, rate float64, warm, measure time.Duration) (latencyRun, error) {
	rdb := b.base.Client()
	keys := make([]string, parts)
	ids := make([]string, parts)
	for p := range keys {
		keys[p] = b.base.StreamKey(topic, int32(p))
		ids[p] = "0-0"
	}
	defer rdb.Unlink(context.Background(), keys...)
	total := int64(rate * (warm + measure).Seconds())
	warmN := int64(rate * warm.Seconds())
	var (
		start    = time.Now()
		got      int64
		lats     = make([]time.Duration, 0, total)
		cctx, cc = context.WithCancel(ctx)
		done     = make(chan error, 1)
		window   deliveryWindow
	)
	defer cc()
	ready := make(chan struct{})
	go func() {
		streams := append(append([]string{}, keys...), ids...)
		first := true
		for got < total {
			if first {
				close(ready)
				first = false
			}
			res, err := rdb.XRead(cctx, &redis.XReadArgs{Streams: streams, Count: 10000, Block: 5 * time.Second}).Result()
			now := time.Since(start)
			if cctx.Err() != nil {
				done <- cctx.Err()
				return
			}
			if errors.Is(err, redis.Nil) {
				continue
			}
			if err != nil {
				done <- err
				return
			}
			for _, s := range res {
				for p, k := range keys {
					if k == s.Stream && len(s.Messages) > 0 {
						streams[parts+p] = s.Messages[len(s.Messages)-1].ID
					}
				}
				for _, m := range s.Messages {
					got++
					v, _ := m.Values["value"].(string)
					if at, measured := readStamp([]byte(v[:min(len(v), stampLen)])); measured {
						lats = append(lats, now-at)
						window.add(now)
					}
				}
			}
		}
		done <- nil
	}()
	<-ready
	time.Sleep(50 * time.Millisecond) // let the first XREAD block

	type tickBatch struct {
		from, to int64
		dueAt    func(int64) time.Time
	}
	sendq := make(chan tickBatch, 1<<16)
	senderErr := make(chan error, 1)
	rkeys := recordKeys(b.o.keyBytes)
	tail := randomBytes(size)
	go func() {
		for tb := range sendq {
			pipe := rdb.Pipeline()
			ts := strconv.FormatInt(time.Now().UnixMilli(), 10)
			for i := tb.from; i < tb.to; i++ {
				v := stampedValue(tail, tb.dueAt(i).Sub(start), i < warmN)
				pipe.Do(ctx, "XADD", keys[i%int64(parts)], "*", "ts", ts, "key", rkeys[i%int64(len(rkeys))], "value", v)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				senderErr <- err
				for range sendq {
				}
				return
			}
		}
		senderErr <- nil
	}()
	m0 := b.markCPU()
	err := pace(ctx, rate, total, func(from, to int64, dueAt func(int64) time.Time) {
		sendq <- tickBatch{from, to, dueAt}
	})
	close(sendq)
	if serr := <-senderErr; err == nil {
		err = serr
	}
	if err != nil {
		return latencyRun{}, err
	}
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		err = fmt.Errorf("baseline: only %d of %d records delivered 10s after the last was sent", got, total)
	}
	cpu := b.cpuSince(m0)
	if err != nil {
		return latencyRun{}, err
	}
	return latencyRun{lat: lats, cpu: cpu, achieved: window.rate(measure)}, nil
}
