package main

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kgate/kgate/redisstore"
)

// Fetch sizing as kgate does it (gateway/fetch_sizing.go) for records of one size, from a partition's
// second read on: its XRANGE COUNT is partition_max_bytes / stored record size + 1, capped, where the
// stored size of a record is 20 + len(key) + len(value). franz-go asks for 1 MiB per partition by
// default.
const (
	consumePartitionMaxBytes = 1 << 20
	kgateRecordOverhead      = 20
	kgateMaxReadCount        = 10000
)

func kgatePageSize(keyBytes, size int) int {
	return min(max(consumePartitionMaxBytes/(kgateRecordOverhead+keyBytes+size)+1, 1), kgateMaxReadCount)
}

type consumeRun struct {
	records int64
	bytes   int64 // value bytes
	elapsed time.Duration
	cpu     cpuUse
	partial bool // stopped by --consume-timeout
}

func (r consumeRun) rate() float64 { return float64(r.records) / r.elapsed.Seconds() }

// plus is two runs taken together.
func (r consumeRun) plus(s consumeRun) consumeRun {
	return consumeRun{records: r.records + s.records, bytes: r.bytes + s.bytes, elapsed: r.elapsed + s.elapsed,
		cpu: r.cpu.plus(s.cpu), partial: r.partial || s.partial}
}

func (b *bench) consumePhase(ctx context.Context) error {
	if len(b.produced) == 0 {
		if err := b.fillForConsume(ctx); err != nil {
			return err
		}
	}
	stopProfile, err := b.profilePhase("consume")
	if err != nil {
		return err
	}
	defer stopProfile()
	b.rep.meta("consume", fmt.Sprintf("franz-go consumer from offset 0 of each produce topic (fetch max 50 MB, partition max 1 MiB: franz-go defaults, responses capped at the gateway's fetch.max.bytes, 8 MiB by default; max wait 500ms); baseline: kgate's own reader (redisstore.Read: raw XRANGE replies, large reads split into pipelines of about 256 KiB of reply, 4 at once, no Kafka encoding) of every partition per round over kgate's own streams, COUNT as kgate sizes it (1 MiB/(20+key+value)+1: %d for 100 B, %d for 1 KB); bounded by %v",
		kgatePageSize(b.o.keyBytes, 100), kgatePageSize(b.o.keyBytes, 1024), b.o.consumeTimeout))
	for _, pt := range b.produced {
		hwm, err := b.highWatermarks(ctx, pt.topic, pt.parts)
		if err != nil {
			return err
		}
		page := kgatePageSize(b.o.keyBytes, pt.size)
		ks, bs, err := alternate(pt.topic, b.o.rounds, func(int) (consumeRun, error) {
			return b.consumeKgate(ctx, pt.topic, pt.parts, sum(hwm))
		}, func(int) (consumeRun, error) {
			return b.consumeBaseline(ctx, pt.topic, hwm, page)
		})
		if err != nil {
			return err
		}
		k, base := total(ks), total(bs)
		ratios := roundRatios(ks, bs, consumeRun.rate)
		cs := fmt.Sprintf("%s x %dp", sizeName(pt.size), pt.parts)
		notes := fmt.Sprintf("%s records x %d rounds, XRANGE COUNT %d", fmtNum(float64(sum(hwm))), b.o.rounds, page)
		if k.partial || base.partial {
			notes += fmt.Sprintf("; stopped at %v (kgate %d, baseline %d records)", b.o.consumeTimeout, k.records, base.records)
		}
		if spread := roundSpread(ratios); spread != "" {
			notes += "; " + spread
		}
		b.rep.add(withBaseline(result{Phase: "consume", Case: cs, Metric: "throughput", Unit: "rec/s",
			Kgate: k.rate(), KgateCPU: &k.cpu, BaselineCPU: &base.cpu, Notes: notes, RoundRatios: ratios}, base.rate()))
		b.rep.add(withBaseline(result{Phase: "consume", Case: cs, Metric: "throughput", Unit: "MB/s",
			Kgate: k.rate() * float64(pt.size) / 1e6}, base.rate()*float64(pt.size)/1e6))
		b.rep.addCPUPerRecord("consume", cs, k.cpu, float64(k.records), base.cpu, float64(base.records))
	}
	return nil
}

// fillForConsume produces the produce phase's topics without measuring, when that phase did not run.
func (b *bench) fillForConsume(ctx context.Context) error {
	for _, size := range b.o.sizes {
		for _, parts := range b.o.partitions {
			topic := fmt.Sprintf("produce-%d-%dp", size, parts)
			if err := b.createTopic(ctx, topic, parts); err != nil {
				return err
			}
			var err error
			labeled("client", func() { _, err = b.produceKgate(ctx, topic, size, b.o.duration) })
			if err != nil {
				return fmt.Errorf("fill %s: %w", topic, err)
			}
			b.produced = append(b.produced, producedTopic{topic: topic, size: size, parts: parts})
		}
	}
	return nil
}

// consumeKgate reads every partition of topic from offset 0 with a franz-go consumer until expected
// records arrived.
func (b *bench) consumeKgate(ctx context.Context, topic string, parts int, expected int64) (consumeRun, error) {
	offs := map[int32]kgo.Offset{}
	for p := range parts {
		offs[int32(p)] = kgo.NewOffset().At(0)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.addr), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offs}),
		kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		return consumeRun{}, err
	}
	defer cl.Close()
	dctx, cancel := context.WithTimeout(ctx, b.o.consumeTimeout)
	defer cancel()
	var r consumeRun
	m0 := b.markCPU()
	for r.records < expected {
		fs := cl.PollFetches(dctx)
		if dctx.Err() != nil {
			if ctx.Err() != nil {
				return r, ctx.Err()
			}
			r.partial = true
			break
		}
		if errs := fs.Errors(); len(errs) > 0 {
			return r, fmt.Errorf("fetch %s/%d: %w", errs[0].Topic, errs[0].Partition, errs[0].Err)
		}
		fs.EachRecord(func(rec *kgo.Record) {
			r.records++
			r.bytes += int64(len(rec.Value))
		})
	}
	r.elapsed = time.Since(m0.at)
	r.cpu = b.cpuSince(m0)
	return r, nil
}

// consumeBaseline reads kgate's streams of topic directly, through the store's reader: each round
// reads page entries of every partition not yet read to its high watermark, with the reply read raw
// into a reused buffer and a large read split into pipelines at once, as kgate's fetch reads them. go-redis's generic reply
// decoding (a string and an interface value per field) made the baseline slower than kgate itself.
func (b *bench) consumeBaseline(ctx context.Context, topic string, hwm []int64, page int) (consumeRun, error) {
	next := make([]int64, len(hwm))
	expected := sum(hwm)
	deadline := time.Now().Add(b.o.consumeTimeout)
	var r consumeRun
	m0 := b.markCPU()
	for r.records < expected {
		if err := ctx.Err(); err != nil {
			return r, err
		}
		if time.Now().After(deadline) {
			r.partial = true
			break
		}
		var reqs []redisstore.ReadRequest
		for p := range hwm {
			if next[p] < hwm[p] {
				// page is 1 MiB over a record's bytes (and 20), as kgate sizes its reads: the reply buffer
				// is sized from it, as kgate's is from the records it has seen.
				reqs = append(reqs, redisstore.ReadRequest{Topic: topic, Partition: int32(p), Offset: next[p], Count: int64(page),
					RecordBytes: int64(1<<20) / int64(page)})
			}
		}
		results := b.store.Read(ctx, reqs)
		for k, res := range results {
			p := reqs[k].Partition
			if res.Err != nil {
				return r, res.Err
			}
			if len(res.Records) == 0 {
				return r, fmt.Errorf("partition %d: no entries from offset %d below high watermark %d", p, next[p], hwm[p])
			}
			for i := range res.Records {
				r.bytes += int64(len(res.Records[i].Value))
			}
			r.records += int64(len(res.Records))
			next[p] = res.Records[len(res.Records)-1].Offset + 1
		}
		redisstore.RecycleReads(results) // as kgate's fetch does once a response is encoded
	}
	r.elapsed = time.Since(m0.at)
	r.cpu = b.cpuSince(m0)
	return r, nil
}
