package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kgate/kgate/gateway"
	"github.com/kgate/kgate/internal/redistest"
	"github.com/kgate/kgate/redisstore"
)

// bench is one run: the Redis, the gateway in front of it and what earlier phases left for later ones.
type bench struct {
	o         options
	rep       *reporter
	redisAddr string
	redisPID  int
	store     *redisstore.Store // the gateway's
	base      *redisstore.Store // the baselines' own connection pool, in a namespace of their own
	gw        *gateway.Gateway
	addr      string // the gateway's Kafka listener
	adm       *kadm.Client
	admCl     *kgo.Client

	produced []producedTopic     // topics the produce phase filled, for the consume phase
	maxRate  map[string]float64  // "size/partitions" -> kgate records/s in the produce phase
	maxE2E   map[string]float64  // "size/partitions" -> kgate records/s end to end (maxEndToEndRate)
	topics   map[string]struct{} // created topics
	prof     *os.File            // open while the CPU profile runs
	cleanups []func()            // run in reverse at the end
}

type producedTopic struct {
	topic string
	size  int
	parts int
}

func run(ctx context.Context, o options) error {
	return runWith(ctx, o, newReporter(o.json))
}

// runWith runs the phases o names, reporting to rep.
func runWith(ctx context.Context, o options, rep *reporter) (err error) {
	b := &bench{o: o, rep: rep, maxRate: map[string]float64{}, maxE2E: map[string]float64{}, topics: map[string]struct{}{}}
	defer func() {
		for i := len(b.cleanups) - 1; i >= 0; i-- {
			b.cleanups[i]()
		}
	}()
	if err := b.setup(ctx); err != nil {
		return err
	}
	if o.cpuprofile != "" && !o.phases[o.profPhase] {
		if err := b.startProfile(); err != nil {
			return err
		}
	}
	defer b.stopProfile()
	// A phase's CPU profile (--cpuprofile-phase) covers the whole phase, but for consume, whose profile
	// starts after its fill (profSelf: the phase starts it itself).
	steps := []struct {
		name     string
		fn       func(context.Context) error
		profSelf bool
	}{
		{"produce", b.producePhase, false},
		{"consume", b.consumePhase, true},
		{"latency", b.latencyPhase, false},
		{"commits", b.commitsPhase, false},
		{"conns", b.connsPhase, false},
		{"replay", b.replayPhase, false},
	}
	for _, s := range steps {
		if !o.phases[s.name] {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if s.name != "produce" && s.name != "consume" && len(b.produced) > 0 {
			if err := b.dropProduced(ctx); err != nil {
				return err
			}
		}
		progress("phase %s", s.name)
		stopProfile := func() {}
		if !s.profSelf {
			var err error
			if stopProfile, err = b.profilePhase(s.name); err != nil {
				return err
			}
		}
		err := s.fn(ctx)
		stopProfile()
		if err != nil {
			b.rep.print()
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	b.stopProfile()
	b.rep.meta("total", time.Since(startTime).Round(100*time.Millisecond).String())
	b.rep.print()
	return nil
}

func (b *bench) setup(ctx context.Context) error {
	raiseNoFile(4096)
	b.redisAddr = b.o.redis
	started := false
	if b.redisAddr == "" {
		if !redistest.Available() {
			return errors.New("redis-server is not on PATH: install it or pass --redis ADDR")
		}
		srv, err := redistest.Start()
		if err != nil {
			return err
		}
		b.cleanups = append(b.cleanups, srv.Stop)
		b.redisAddr, started = srv.Addr, true
	}
	ns := fmt.Sprintf("kbench%d", time.Now().UnixNano()%1e9)
	var err error
	if b.store, err = redisstore.Open(ctx, redisstore.Options{Addrs: []string{b.redisAddr}, Namespace: ns}); err != nil {
		return err
	}
	b.cleanups = append(b.cleanups, func() { b.store.Close() })
	if b.base, err = redisstore.Open(ctx, redisstore.Options{Addrs: []string{b.redisAddr}, Namespace: ns + "-base"}); err != nil {
		return err
	}
	b.cleanups = append(b.cleanups, func() { b.base.Close() })
	if !started && !b.o.keep {
		b.cleanups = append(b.cleanups, func() { b.dropKeys(ns) })
	}

	version, pid, persistence := b.redisInfo(ctx)
	b.redisPID = pid
	if _, bad := procCPU(pid); bad {
		progress("redis-server pid %d: /proc not readable, its CPU is not reported", pid)
	}
	// The gateway as cmd/kgate configures it by default; logs at warn so per-connection info lines
	// do not count against it (cmd/kgate logs them at info).
	log := zerolog.New(io.Discard).Level(zerolog.WarnLevel)
	b.gw = gateway.New(gateway.Config{
		Listen:            "127.0.0.1:0",
		DefaultPartitions: 1,
	}, b.store, log)
	if err := b.gw.Listen(ctx); err != nil {
		return err
	}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	// Every gateway goroutine descends from Serve's, so the profile label sticks to all of them.
	pprof.Do(context.Background(), pprof.Labels("side", "gateway"), func(context.Context) {
		go func() { done <- b.gw.Serve(sctx) }()
	})
	<-b.gw.Ready()
	b.cleanups = append(b.cleanups, func() {
		stop()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			progress("gateway did not stop within 15s")
		}
	})
	b.addr = b.gw.Addr().String()
	if b.admCl, err = kgo.NewClient(kgo.SeedBrokers(b.addr)); err != nil {
		return err
	}
	b.cleanups = append(b.cleanups, b.admCl.Close)
	b.adm = kadm.NewClient(b.admCl)

	where := "started by kgate-bench, persistence off"
	if !started {
		where = "at " + b.redisAddr + ", " + persistence
	}
	b.rep.meta("machine", fmt.Sprintf("%s, %d cores (GOMAXPROCS %d), %s/%s, %s", cpuModel(), runtime.NumCPU(),
		runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version()))
	b.rep.meta("redis", fmt.Sprintf("redis-server %s (%s), pid %d, loopback", version, where, pid))
	b.rep.meta("kgate", "in-process gateway on "+b.addr+", Redis namespace "+ns+" (baselines: "+ns+"-base)")
	b.rep.meta("date", time.Now().UTC().Format(time.RFC3339))
	return nil
}

// redisInfo returns the server version, its process id and its persistence settings.
func (b *bench) redisInfo(ctx context.Context) (version string, pid int, persistence string) {
	txt, err := b.base.Client().Info(ctx, "server", "persistence").Result()
	if err != nil {
		return "unknown", 0, "persistence unknown"
	}
	pid, _ = strconv.Atoi(infoField(txt, "process_id"))
	return infoField(txt, "redis_version"), pid,
		"aof_enabled=" + infoField(txt, "aof_enabled") + ", rdb changes pending " + infoField(txt, "rdb_changes_since_last_save")
}

// infoField is the value of field in an INFO reply, "?" when absent.
func infoField(info, field string) string {
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == field {
			return v
		}
	}
	return "?"
}

// dropKeys removes every key of the run's namespaces from a Redis the benchmark did not start.
func (b *bench) dropKeys(ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := b.base.Client()
	n := 0
	// Keys on the topic registry's slot begin with its hash tag: "{<ns>:topics}:forms", ":gen".
	for _, pat := range []string{ns + ":*", ns + "-base:*", "{" + ns + ":*", "{" + ns + "-base:*"} {
		it := rdb.Scan(ctx, 0, pat, 1000).Iterator()
		var batch []string
		for it.Next(ctx) {
			batch = append(batch, it.Val())
			if len(batch) == 500 {
				rdb.Unlink(ctx, batch...)
				n += len(batch)
				batch = batch[:0]
			}
		}
		if len(batch) > 0 {
			rdb.Unlink(ctx, batch...)
			n += len(batch)
		}
	}
	progress("removed %d benchmark keys", n)
}

// dropProduced deletes the produce phase's topics, through the gateway, once the consume phase no
// longer needs them, and waits for Redis to free them: the phases after it run on a Redis holding
// their own data alone. On a 2-core VM, Redis holding the produce phase's 3.4 GB stalled for 10-30 ms
// at times, and the latency phase's p99 at 1,000 records/s rose from 2.7 ms to 10-16 ms (kgate and
// baseline alike).
func (b *bench) dropProduced(ctx context.Context) error {
	names := make([]string, len(b.produced))
	for i, pt := range b.produced {
		names[i] = pt.topic
	}
	resps, err := b.adm.DeleteTopics(ctx, names...)
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		return fmt.Errorf("delete the produce phase's topics: %w", err)
	}
	for _, n := range names {
		delete(b.topics, n)
	}
	b.produced = nil
	// UNLINK frees large streams on Redis's lazyfree thread, which would compete with the next phase.
	rdb := b.base.Client()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		txt, err := rdb.Info(ctx, "memory").Result()
		if err != nil {
			return err
		}
		if pending := infoField(txt, "lazyfree_pending_objects"); pending == "0" || pending == "?" { // "?": a server that does not say
			progress("deleted the produce phase's topics (%s in Redis now)", infoField(txt, "used_memory_human"))
			return nil
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	progress("Redis still freeing the produce phase's topics after a minute; going on")
	return nil
}

// createTopic creates a topic through the gateway (CreateTopics), once.
func (b *bench) createTopic(ctx context.Context, name string, parts int) error {
	if _, ok := b.topics[name]; ok {
		return nil
	}
	resp, err := b.adm.CreateTopic(ctx, int32(parts), 1, nil, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("create topic %s: %w", name, err)
	}
	b.topics[name] = struct{}{}
	return nil
}

// highWatermarks returns the high watermark of each partition of a kgate topic.
func (b *bench) highWatermarks(ctx context.Context, topic string, parts int) ([]int64, error) {
	ps := make([]int32, parts)
	for i := range ps {
		ps[i] = int32(i)
	}
	offs, err := b.store.PartitionOffsets(ctx, topic, ps)
	if err != nil {
		return nil, err
	}
	out := make([]int64, parts)
	for i, o := range offs {
		out[i] = o.End
	}
	return out, nil
}

func sum(xs []int64) int64 {
	var n int64
	for _, x := range xs {
		n += x
	}
	return n
}

// profilePhase starts the CPU profile when --cpuprofile covers phase; the caller defers the returned
// stop, which ends only a profile this call started.
func (b *bench) profilePhase(phase string) (stop func(), err error) {
	if b.o.cpuprofile == "" || b.o.profPhase != phase || b.prof != nil {
		return func() {}, nil
	}
	if err := b.startProfile(); err != nil {
		return func() {}, err
	}
	return b.stopProfile, nil
}

func (b *bench) startProfile() error {
	f, err := os.Create(b.o.cpuprofile)
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return err
	}
	b.prof = f
	return nil
}

func (b *bench) stopProfile() {
	if b.prof == nil {
		return
	}
	pprof.StopCPUProfile()
	b.prof.Close()
	progress("CPU profile written to %s (go tool pprof -top -tagfocus=side=gateway %s)", b.o.cpuprofile, b.o.cpuprofile)
	b.prof = nil
}

// labeled runs fn with a profile label naming which side of the benchmark it is.
func labeled(side string, fn func()) {
	pprof.Do(context.Background(), pprof.Labels("side", side), func(context.Context) { fn() })
}

// alternate runs a case through kgate and its baseline, rounds times, so the machine's drift falls on
// both sides: kgate first in even rounds and the baseline first in odd ones, so neither side always
// runs on what the other left (a warm or a fragmented heap, Redis's memory). It returns each side's
// runs in round order (each labelled for the CPU profile).
func alternate[R any](name string, rounds int, kgate, baseline func(round int) (R, error)) (ks, bs []R, err error) {
	return alternateRounds(name, rounds, true, kgate, baseline)
}

// kgateThenBaseline is alternate for a case whose baseline takes something from kgate's run of the
// same round (the produce phase's batch shape): kgate runs first in every round.
func kgateThenBaseline[R any](name string, rounds int, kgate, baseline func(round int) (R, error)) (ks, bs []R, err error) {
	return alternateRounds(name, rounds, false, kgate, baseline)
}

func alternateRounds[R any](name string, rounds int, swap bool, kgate, baseline func(round int) (R, error)) (ks, bs []R, err error) {
	for round := range rounds {
		var k, b R
		runKgate := func() error {
			labeled("client", func() { k, err = kgate(round) })
			if err != nil {
				return fmt.Errorf("%s through kgate: %w", name, err)
			}
			return nil
		}
		runBaseline := func() error {
			labeled("baseline", func() { b, err = baseline(round) })
			if err != nil {
				return fmt.Errorf("%s baseline: %w", name, err)
			}
			return nil
		}
		first, second := runKgate, runBaseline
		if swap && round%2 == 1 {
			first, second = runBaseline, runKgate
		}
		if err := first(); err != nil {
			return nil, nil, err
		}
		if err := second(); err != nil {
			return nil, nil, err
		}
		ks, bs = append(ks, k), append(bs, b)
	}
	return ks, bs, nil
}

// runs is a phase's run type: runs taken together with plus.
type runs[R any] interface{ plus(R) R }

// total is the runs rs taken together.
func total[R runs[R]](rs []R) R {
	var t R
	for _, r := range rs {
		t = t.plus(r)
	}
	return t
}

// randomBytes is n incompressible bytes.
func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// recordKeys is a set of distinct keys of n bytes that producers cycle through.
func recordKeys(n int) [][]byte {
	keys := make([][]byte, 1024)
	for i := range keys {
		k := fmt.Appendf(nil, "%0*d", n, i)
		keys[i] = k[len(k)-n:]
	}
	return keys
}
