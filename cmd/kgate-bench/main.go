// Command kgate-bench measures kgate against the raw-Redis limit: it starts a redis-server (or uses
// --redis ADDR) and an in-process gateway on 127.0.0.1, then runs each phase on the same Redis in the
// same run through kgate with a franz-go client and with go-redis talking to Redis directly, and prints
// each kgate figure next to its baseline and their ratio. Produce and consume cases alternate the two
// --rounds times and report over all of them, so the machine's drift falls on both sides.
//
// Phases (--phases, default all but replay, in this order):
//
//	produce   records/s and MB/s, 100 B and 1 KB values over 1, 8 and 64 partitions; franz-go with
//	          acks=-1, idempotence, --linger and --batch-bytes. Baseline: pipelined XADD of the same
//	          fields (ts, key, value), in batches of the records per batch kgate's requests carried.
//	consume   records/s reading the produce phase's topics from offset 0 (franz-go consumer).
//	          Baseline: pipelined XRANGE over the same streams, pages sized as kgate's fetch sizes them.
//	latency   end-to-end p50/p99/p999 at fixed rates (1k, 10k rec/s and 50% of the maximum end-to-end rate)
//	          with a long-polling consumer. Baseline: XADD + XREAD BLOCK at the same rates.
//	commits   OffsetCommit/s (simple commits, generation -1) vs redisstore.CommitOffsets called directly.
//	conns     RSS with 1,000 and 10,000 idle connections (opened by a child process so the RSS is the
//	          gateway's), memory per connection, and one active producer's p99 with and without them.
//	replay    (not by default) produce with a fixed request shape from a raw connection, no Kafka client
//	          library: kgate's own cost per record at --replay-batch records per batch. Baseline: the
//	          produce phase's, same shape.
//
// Client, gateway and Redis share the machine: every run also reports the CPU used by this process
// (kgate + client) and by redis-server, to show which side is the bottleneck. --cpuprofile writes a CPU
// profile of the produce phase (or of --cpuprofile-phase); samples are labelled side=gateway|client|baseline, so
//
//	go tool pprof -top -tagfocus=side=gateway kgate-bench.pprof
//
// shows the gateway alone.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// options are the command-line flags.
type options struct {
	redis      string
	phases     map[string]bool
	json       bool
	cpuprofile string
	profPhase  string
	keep       bool

	warmup     time.Duration
	duration   time.Duration
	sizes      []int
	partitions []int
	linger     time.Duration
	batchBytes int
	buffered   int
	// replay phase: records per batch, requests in flight
	replayBatch, replayInflight int
	keyBytes                    int
	basePipes                   int

	consumeTimeout time.Duration
	rounds         int

	latDuration   time.Duration
	latRates      []float64
	latPartitions int
	latLinger     time.Duration
	latSize       int

	commitDuration time.Duration
	commitWorkers  int

	conns      []int
	connsProbe time.Duration
}

var allPhases = []string{"produce", "consume", "latency", "commits", "conns", "replay"}

// defaultPhases leave out replay, a diagnostic of kgate's own cost (replay.go).
var defaultPhases = allPhases[:len(allPhases)-1]

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("kgate-bench", flag.ContinueOnError)
	fs.StringVar(&o.redis, "redis", "", "address of a running Redis to use (default: start a redis-server with persistence off)")
	phases := fs.String("phases", strings.Join(defaultPhases, ","), "comma-separated phases to run: "+strings.Join(allPhases, ","))
	fs.BoolVar(&o.json, "json", false, "write JSON lines to stdout (the table then goes to stderr)")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of one phase (--cpuprofile-phase) to this file (samples labelled side=gateway|client|baseline)")
	fs.StringVar(&o.profPhase, "cpuprofile-phase", "produce", "the phase --cpuprofile covers (the consume phase's profile starts after any fill); when that phase is not run, the profile covers the whole run")
	fs.BoolVar(&o.keep, "keep", false, "keep the benchmark's keys in Redis (with --redis)")
	fs.DurationVar(&o.warmup, "warmup", 500*time.Millisecond, "unmeasured warm-up before each produce run and before the end-to-end maximum")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "measured time of each produce case, for kgate and for the baseline each (split over --rounds runs); also of the latency phase's end-to-end maximum")
	sizes := fs.String("sizes", "100,1024", "record value sizes in bytes")
	parts := fs.String("partitions", "1,8,64", "partition counts")
	fs.DurationVar(&o.linger, "linger", 5*time.Millisecond, "producer linger in the produce phase")
	fs.IntVar(&o.batchBytes, "batch-bytes", 1<<20, "producer max batch bytes")
	fs.IntVar(&o.buffered, "buffered-records", 10000, "producer max buffered records, in flight included (franz-go's default, 10000, bounds how many records the producer keeps in flight, and so the size of its requests)")
	fs.IntVar(&o.keyBytes, "key-bytes", 8, "record key size in bytes")
	fs.IntVar(&o.replayBatch, "replay-batch", 150, "records per partition batch in the replay phase")
	fs.IntVar(&o.replayInflight, "replay-inflight", 1, "produce requests in flight in the replay phase (at most 5, as a Kafka producer)")
	fs.IntVar(&o.basePipes, "baseline-pipelines", 1, "requests in flight in the produce baseline (each split into pipelines as the gateway splits one): 1 mirrors the gateway, which answers a connection's requests one at a time and in order, as Kafka brokers do (franz-go may have up to five produce requests in flight, queued on the connection); 2 shows what overlapping consecutive requests could add")
	fs.DurationVar(&o.consumeTimeout, "consume-timeout", 20*time.Second, "upper bound of each consume run")
	fs.IntVar(&o.rounds, "rounds", 5, "produce, consume and latency cases alternate kgate and baseline runs this many times (each produce run measures --duration/rounds, each latency run --latency-duration/rounds) and report figures over all of them, so the machine's drift falls on both sides")
	fs.DurationVar(&o.latDuration, "latency-duration", 5*time.Second, "measured time at each latency rate, for kgate and for the baseline each (split over --rounds runs, each after a warm-up of a tenth of this)")
	rates := fs.String("latency-rates", "1000,10000,50%", "records/s; N% is that share of the maximum end-to-end rate, measured first (producer and consumer at once, same size, partitions and linger)")
	fs.IntVar(&o.latPartitions, "latency-partitions", 1, "partitions of the latency topic")
	fs.DurationVar(&o.latLinger, "latency-linger", 0, "producer linger in the latency phase")
	fs.IntVar(&o.latSize, "latency-size", 100, "record value size in the latency phase")
	fs.DurationVar(&o.commitDuration, "commit-duration", 3*time.Second, "measured time of the commits phase on each side (split over --rounds runs that alternate kgate and the baseline)")
	fs.IntVar(&o.commitWorkers, "commit-workers", 4, "concurrent committers (each its own client and group)")
	conns := fs.String("conns", "1000,10000", "idle connection counts")
	fs.DurationVar(&o.connsProbe, "conns-probe", 2*time.Second, "time of each active-producer latency probe in the conns phase")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	o.phases = map[string]bool{}
	for _, p := range strings.Split(*phases, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		known := false
		for _, a := range allPhases {
			known = known || a == p
		}
		if !known {
			return o, fmt.Errorf("--phases: unknown phase %q (have %s)", p, strings.Join(allPhases, ","))
		}
		o.phases[p] = true
	}
	if !slices.Contains(allPhases, o.profPhase) {
		return o, fmt.Errorf("--cpuprofile-phase: unknown phase %q (have %s)", o.profPhase, strings.Join(allPhases, ","))
	}
	var err error
	if o.sizes, err = intList("sizes", *sizes); err != nil {
		return o, err
	}
	if o.partitions, err = intList("partitions", *parts); err != nil {
		return o, err
	}
	if o.conns, err = intList("conns", *conns); err != nil {
		return o, err
	}
	for _, r := range strings.Split(*rates, ",") {
		r = strings.TrimSpace(r)
		if pct, ok := strings.CutSuffix(r, "%"); ok {
			f, err := strconv.ParseFloat(pct, 64)
			if err != nil || f <= 0 || f > 100 {
				return o, fmt.Errorf("--latency-rates: bad share %q", r)
			}
			o.latRates = append(o.latRates, -f/100) // negative: a share of the measured maximum
			continue
		}
		f, err := strconv.ParseFloat(r, 64)
		if err != nil || f <= 0 {
			return o, fmt.Errorf("--latency-rates: bad rate %q", r)
		}
		o.latRates = append(o.latRates, f)
	}
	switch {
	case o.rounds < 1:
		return o, errors.New("--rounds must be at least 1")
	case o.duration <= 0 || o.latDuration <= 0 || o.commitDuration <= 0 || o.connsProbe <= 0:
		return o, errors.New("durations must be positive")
	case o.batchBytes < 1024:
		return o, errors.New("--batch-bytes must be at least 1024")
	case o.buffered < 1:
		return o, errors.New("--buffered-records must be at least 1")
	case o.replayBatch < 1 || o.replayInflight < 1 || o.replayInflight > replayMaxWindow:
		return o, errors.New("--replay-batch >= 1, --replay-inflight 1-5")
	case o.keyBytes < 0 || o.latSize < 16 || o.latPartitions < 1 || o.commitWorkers < 1 || o.basePipes < 1:
		return o, errors.New("--key-bytes >= 0, --latency-size >= 16, --latency-partitions, --commit-workers and --baseline-pipelines >= 1")
	}
	return o, nil
}

func intList(name, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("--%s: bad value %q", name, f)
		}
		out = append(out, n)
	}
	return out, nil
}

func main() {
	if addr := os.Getenv(connsChildEnv); addr != "" {
		os.Exit(connsChild(addr))
	}
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kgate-bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "kgate-bench:", err)
		os.Exit(1)
	}
}
