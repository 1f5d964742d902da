package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkAppendRedisCPU measures what an append costs Redis per record, against plain pipelined
// XADDs of the same records on the same server: each iteration writes one 64-partition request of
// every kind in turn (so the machine's drift falls on all of them), and redis-server's own CPU time
// (INFO cpu) around each is summed per kind. Kinds: the store's append (MULTI, XADDs, finish function),
// the same with the finish step as EVAL, MULTI + XADDs alone, and plain XADDs. The finish step is a
// fixed cost per batch, so it weighs most at the small batches a producer sends when it spreads
// records over many partitions (50-150 records per batch in kgate-bench's 64-partition runs, fewer in
// its latency phase).
//
//	go test -run '^$' -bench AppendRedisCPU -benchtime 100x ./redisstore/
func BenchmarkAppendRedisCPU(b *testing.B) {
	if standalone == nil {
		b.Skip("KGATE_SKIP_REDIS=1")
	}
	for _, per := range []int{10, 50, 150} {
		b.Run(fmt.Sprintf("records=%d", per), func(b *testing.B) { benchAppendRedisCPU(b, per) })
	}
}

func benchAppendRedisCPU(b *testing.B, per int) {
	ctx := b.Context()
	s, err := Open(ctx, Options{Addrs: []string{standalone.Addr}, Namespace: fmt.Sprintf("bench-cpu-%d-%d", per, time.Now().UnixNano())})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const parts = 64
	value := make([]byte, benchValueSize)
	type kind struct {
		name   string
		append func(bs []*Batch) error
		topic  string
		seq    [parts]int32
		cpu    float64       // redis-server's
		proc   time.Duration // this process's while the kind ran: its building, writing and parsing, and whatever the runtime did meanwhile (GC)
	}
	appendAll := func(bs []*Batch) error {
		for _, r := range s.Append(ctx, bs) {
			if r.Err != nil {
				return r.Err
			}
		}
		return nil
	}
	pipelined := func(multi bool) func(bs []*Batch) error {
		return func(bs []*Batch) error {
			pipe := s.rdb.Pipeline()
			for _, b := range bs {
				xadds, _ := s.multiArgs(b, s.partKeys(b), new(appendScratch), 1, &emptyValue, &emptyValue)
				if multi {
					pipe.Do(ctx, &cmdMULTI)
				}
				for _, args := range xadds {
					pipe.Do(ctx, args...)
				}
				if multi {
					pipe.Do(ctx, &cmdEXEC)
				}
			}
			_, err := pipe.Exec(ctx)
			return err
		}
	}
	kinds := []*kind{
		{name: "append", append: appendAll},
		{name: "append-eval", append: func(bs []*Batch) error {
			s.noFunctions.Store(true)
			defer s.noFunctions.Store(false)
			return appendAll(bs)
		}},
		{name: "multi-xadd", append: pipelined(true)},
		{name: "plain-xadd", append: pipelined(false)},
	}
	for i, k := range kinds {
		k.topic = fmt.Sprintf("t%d", i)
		if err := s.CreateTopic(ctx, Topic{Name: k.topic, Partitions: parts}); err != nil {
			b.Fatal(err)
		}
	}
	if s.noFunctions.Load() {
		b.Fatal("the function library did not load")
	}
	for b.Loop() {
		for _, k := range kinds {
			bs := make([]*Batch, parts)
			for p := range bs {
				bs[p] = &Batch{Topic: k.topic, Partition: int32(p), ProducerID: 1, BaseSequence: k.seq[p], Records: make([]Record, per)}
				for i := range bs[p].Records {
					bs[p].Records[i] = Record{Timestamp: time.Now().UnixMilli(), Key: []byte("k0000001"), Value: value}
				}
				k.seq[p] += int32(per)
			}
			before := redisCPUSeconds(ctx, b, s)
			p0 := processCPU()
			if err := k.append(bs); err != nil {
				b.Fatalf("%s: %v", k.name, err)
			}
			k.proc += processCPU() - p0
			k.cpu += redisCPUSeconds(ctx, b, s) - before
		}
	}
	records := float64(b.N * parts * per)
	plain := kinds[len(kinds)-1]
	for _, k := range kinds {
		b.ReportMetric(k.cpu*1e6/records, k.name+"-us/rec")
		if k != plain {
			b.ReportMetric(k.cpu/plain.cpu, k.name+"/plain")
		}
	}
	// The client side: this process's CPU per record while each kind ran (its own work, and the
	// garbage collector's share, which the alternating kinds share alike), the store's append against
	// go-redis writing plain XADDs.
	b.ReportMetric(float64(kinds[0].proc.Nanoseconds())/records, "append-proc-ns/rec")
	b.ReportMetric(float64(plain.proc.Nanoseconds())/records, "plain-proc-ns/rec")
}

// processCPU is the user + system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPUSeconds is redis-server's user + system CPU time so far.
func redisCPUSeconds(ctx context.Context, b *testing.B, s *Store) float64 {
	info, err := s.rdb.Info(ctx, "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\r\n") {
		name, v, _ := strings.Cut(line, ":")
		if name == "used_cpu_user" || name == "used_cpu_sys" {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f
		}
	}
	return sum
}
