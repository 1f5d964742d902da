package redisstore

import (
	"context"
	"fmt"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Options configures a Store. The zero value of every field but Addrs has a usable default.
type Options struct {
	Addrs          []string // empty: an embedded in-process store (data lives in memory only)
	Cluster        bool     // Redis Cluster: Addrs are seeds
	Username       string
	Password       string
	DB             int
	Namespace      string        // key prefix, default "kgate"
	DialTimeout    time.Duration // default 2s
	CommandTimeout time.Duration // default 5s; bounds every call that arrives without a deadline
	PoolSize       int           // 0: go-redis default

	// WaitReplicas, when > 0, makes appends of Durable batches wait (WAIT) for that many replicas.
	WaitReplicas int
	// WaitAOF makes appends of Durable batches wait (WAITAOF) for the primary's AOF fsync.
	WaitAOF     bool
	WaitTimeout time.Duration // default 1s
}

func (o *Options) fillDefaults() {
	if o.Namespace == "" {
		o.Namespace = "kgate"
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 2 * time.Second
	}
	if o.CommandTimeout <= 0 {
		o.CommandTimeout = 5 * time.Second
	}
	if o.WaitTimeout <= 0 {
		o.WaitTimeout = time.Second
	}
}

// Store is kgate's view of Redis. It is safe for concurrent use.
type Store struct {
	rdb      redis.UniversalClient
	opts     Options
	keys     keys
	embedded *miniredis.Miniredis
	// autoSeq: the server takes XADD <ms>-* (Redis 7+), so appends name only the first entry's ID.
	autoSeq atomic.Bool
	// multiAppend: appends go out as MULTI blocks with a finish step (append_multi.go), which needs
	// XADD <ms>-* and a server that lets the finish step undo a refused block: set a stream's last ID
	// back below the entries it just deleted. Redis 7.2 and later (and Valkey) refuse that (XSETID below
	// the stream's max-deleted-entry-id), which would leave a partition whose batch was refused unable
	// to take another; there each append is one script (appendScript), which decides before it adds.
	multiAppend atomic.Bool
	// noFunctions: the finish step runs as EVAL, because the function library could not be loaded
	// (functions.go).
	noFunctions atomic.Bool
	// reprobeAt is when Append next starts a failed probe again (unix ns; 0: nothing to retry); the
	// probe runs in the background (probes), stopped and waited for by Close (stopProbes).
	reprobeAt  atomic.Int64
	probes     sync.WaitGroup
	probeCtx   context.Context
	stopProbes context.CancelFunc
	// nodeObserver is Observe's observer on a cluster, told of the appends' pipelines (nil: none, or
	// a standalone server, whose client's hooks see them).
	nodeObserver CommandObserver
	// panicObserver is ObservePanics's observer (nil: none).
	panicObserver PanicObserver
	// indexed holds groups this store added to the groups set (up to maxIndexedGroups), each with when
	// it last did (*atomic.Int64, unix ns): their commits do not fail when adding them again does
	// (groupIndexed).
	indexed  sync.Map
	nIndexed atomic.Int64
	// bounds caches the bytes index points reads were cut by (bytes_index.go).
	bounds readBounds
	// lagging counts the goroutines of acrossMasters, among them those left to a master that did not
	// answer: Close waits for them once the client is closed, which ends their reads.
	lagging sync.WaitGroup
	// behind holds the masters (*redis.Client, a cluster's node clients) whose share of a call was left
	// unanswered (acrossMasters), until one of their shares answers.
	behind sync.Map
}

// Open connects to Redis (or starts the embedded store when opts.Addrs is empty) and checks it answers.
func Open(ctx context.Context, opts Options) (*Store, error) {
	opts.fillDefaults()
	s := &Store{opts: opts, keys: keys{ns: opts.Namespace}}
	s.probeCtx, s.stopProbes = context.WithCancel(context.Background())
	addrs := opts.Addrs
	if len(addrs) == 0 {
		m := miniredis.NewMiniRedis()
		if err := m.StartAddr("127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("redisstore: start embedded store: %w", err)
		}
		s.embedded = m
		addrs = []string{m.Addr()}
		s.probes.Go(func() { s.expireEmbedded(embeddedExpiryTick) })
	}
	uo := &redis.UniversalOptions{
		Addrs:                 addrs,
		Username:              opts.Username,
		Password:              opts.Password,
		DB:                    opts.DB,
		DialTimeout:           opts.DialTimeout,
		ReadTimeout:           opts.CommandTimeout,
		WriteTimeout:          opts.CommandTimeout,
		ContextTimeoutEnabled: true,
		PoolSize:              opts.PoolSize,
		IsClusterMode:         opts.Cluster,
		// No resending by the client library: a connection that fails after Redis ran an append but
		// before its reply arrived would have the append run twice, a batch without idempotence
		// stored twice while its producer hears of it once. A failure is answered as a retriable
		// Kafka error and the Kafka client decides (TestAppendReplyLostIsNotResent).
		MaxRetries: -1,
		// RESP2: kgate uses no client-side caching, and its one subscription (the appends channel)
		// works alike on RESP2; with RESP3 the client library looks for a push message before every
		// reply it reads (a tenth of the gateway's CPU in a profile at 100k records/s).
		Protocol: 2,
	}
	if opts.Cluster {
		s.rdb = redis.NewClusterClient(uo.Cluster())
	} else {
		s.rdb = redis.NewClient(uo.Simple())
	}
	pctx, cancel := context.WithTimeout(ctx, opts.DialTimeout+opts.CommandTimeout)
	defer cancel()
	// The client library reads a reply until its deadline whatever becomes of ctx: a caller giving up
	// (a gateway told to stop while it starts) closes the client instead, which ends the read.
	stopClosing := context.AfterFunc(ctx, func() { _ = s.rdb.Close() })
	if err := s.rdb.Ping(pctx).Err(); err != nil {
		if !stopClosing() { // closed under the ping
			err = context.Cause(ctx)
		}
		s.Close()
		return nil, fmt.Errorf("redisstore: ping %s: %w", strings.Join(addrs, ","), err)
	}
	if s.embedded == nil && !opts.Cluster {
		if err := s.checkNotClusterNode(pctx); err != nil {
			stopClosing()
			s.Close()
			return nil, fmt.Errorf("%w: %s", err, addrs[0])
		}
	}
	if s.embedded == nil {
		s.probe(pctx)
	}
	if !stopClosing() { // ctx ended: the client is closed, maybe under the probe
		s.Close()
		return nil, fmt.Errorf("redisstore: open: %w", context.Cause(ctx))
	}
	return s, nil
}

// checkNotClusterNode returns ErrClusterNode when the server says it is a Redis Cluster node. A
// server that does not answer INFO (an ACL without it) passes: nothing is known against it.
func (s *Store) checkNotClusterNode(ctx context.Context) error {
	txt, err := s.rdb.Info(ctx, "cluster").Result()
	if err != nil {
		return nil
	}
	for _, line := range strings.Split(txt, "\n") {
		if strings.TrimSpace(line) == "cluster_enabled:1" {
			return ErrClusterNode
		}
	}
	return nil
}

// probeRetryInterval is how long appends take a slower path after the server's version could not be
// read or the function library not loaded (a Redis still loading its data refuses FUNCTION LOAD; a
// failover in progress; an ACL without FUNCTION) before an append starts the probe again: without a
// retry, a gateway started at such a moment would pay for it as long as it runs.
const probeRetryInterval = 30 * time.Second

// probe finds whether the server is Redis 7+ (XADD <ms>-*, functions) and lets a stream's last ID be
// set back (undoProbeScript), and if so loads the function library for the MULTI append. What fails is
// tried again by Append (reprobe) after probeRetryInterval; meanwhile appends run as scripts.
func (s *Store) probe(ctx context.Context) {
	if !s.autoSeq.Load() {
		info, err := s.Info(ctx)
		if err != nil {
			s.reprobeAt.Store(time.Now().Add(probeRetryInterval).UnixNano())
			return
		}
		major, _, _ := strings.Cut(info.Version, ".")
		if v, err := strconv.Atoi(major); err != nil || v < 7 {
			s.reprobeAt.Store(0) // the append script's own XADDs, for good
			return
		}
		s.autoSeq.Store(true)
	}
	if !s.multiAppend.Load() {
		undo, err := undoProbeScript.Run(ctx, s.rdb, []string{s.keys.ns + ":probe:undo"}).Int()
		switch {
		case err != nil:
			s.reprobeAt.Store(time.Now().Add(probeRetryInterval).UnixNano())
			return
		case undo != 1:
			s.reprobeAt.Store(0) // appends are scripts on this server, for good
			return
		}
	}
	if s.loadFunctions(ctx) {
		s.reprobeAt.Store(0) // before noFunctions: a repair failing meanwhile schedules a retry again
		s.noFunctions.Store(false)
	} else {
		s.functionsUnavailable()
	}
	s.multiAppend.Store(true) // after noFunctions: an append that sees it finishes the right way
}

// AppendMode is how appends reach Redis: "transaction" (MULTI blocks of plain XADDs and a finish
// function, Redis 7.0), "script" (one Lua script per batch carrying its records: Redis before 7, Redis
// 7.2+ and Valkey, which refuse the transaction's undo, the embedded store, or a probe not yet
// answered) — the latter costs Redis more per record.
func (s *Store) AppendMode() string {
	if s.multiAppend.Load() {
		return "transaction"
	}
	return "script"
}

// undoProbeScript answers 1 when the server lets a stream's last ID be set back below an entry just
// deleted, as the MULTI append's undo does (removePastLua), and 0 when it refuses (Redis 7.2+: "The ID
// specified in XSETID is smaller than current max_deleted_entry_id"). On a cluster it runs on the master
// of its key alone: a cluster's masters are taken to run one server version.
var undoProbeScript = redis.NewScript(`
redis.call('DEL', KEYS[1])
redis.call('XADD', KEYS[1], '0-1', 'f', 'v')
redis.call('XADD', KEYS[1], '0-2', 'f', 'v')
redis.call('XDEL', KEYS[1], '0-2')
local set = redis.pcall('XSETID', KEYS[1], '0-1')
redis.call('DEL', KEYS[1])
if type(set) == 'table' and set.err then return 0 end
return 1
`)

// functionsUnavailable makes the finish step run as EVAL until a later probe loads the library.
func (s *Store) functionsUnavailable() {
	s.noFunctions.Store(true)
	s.reprobeAt.Store(time.Now().Add(probeRetryInterval).UnixNano())
}

// reprobe starts probe in the background when a failed one is due again, one at a time: on a cluster
// with a master unreachable it can take a dial timeout, which the append that starts it must not wait
// for.
func (s *Store) reprobe() {
	at := s.reprobeAt.Load()
	if at == 0 || time.Now().UnixNano() < at || s.probeCtx.Err() != nil ||
		!s.reprobeAt.CompareAndSwap(at, time.Now().Add(probeRetryInterval).UnixNano()) {
		return
	}
	s.probes.Go(func() {
		defer func() {
			// Nothing else recovers this goroutine's panics: the probe fails instead of the process,
			// the finish step runs as EVAL meanwhile, and the next probe comes after probeRetryInterval.
			if p := recover(); p != nil {
				s.functionsUnavailable()
				if fn := s.panicObserver; fn != nil {
					fn("store_probe", p, debug.Stack())
				}
			}
		}()
		ctx, cancel := context.WithTimeout(s.probeCtx, s.opts.DialTimeout+s.opts.CommandTimeout)
		defer cancel()
		s.probe(ctx)
	})
}

// Embedded reports whether the store keeps its data in process memory.
func (s *Store) Embedded() bool { return s.embedded != nil }

// EmbeddedAddr is the loopback address the embedded store answers on ("" when Redis is configured), for
// redis-cli to look at the records as Redis-native applications see them.
func (s *Store) EmbeddedAddr() string {
	if s.embedded == nil {
		return ""
	}
	return s.embedded.Addr()
}

// Namespace returns the key prefix.
func (s *Store) Namespace() string { return s.opts.Namespace }

// Close releases the Redis connections (and the embedded store).
func (s *Store) Close() error {
	s.stopProbes()
	s.probes.Wait()
	err := s.rdb.Close()
	s.lagging.Wait()
	if s.embedded != nil {
		s.embedded.Close()
	}
	return err
}

// embeddedExpiryTick is how often the embedded store's keys' TTLs are counted down.
const embeddedExpiryTick = time.Minute

// expireEmbedded counts the embedded store's key TTLs down with real time, every tick, until the store
// closes: the embedded store does so only when told, and keys given a TTL (a group's owner record,
// owner.go) would otherwise stay for the life of the process.
func (s *Store) expireEmbedded(tick time.Duration) {
	t := time.NewTicker(tick)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-s.probeCtx.Done():
			return
		case now := <-t.C:
			s.embedded.FastForward(now.Sub(last))
			last = now
		}
	}
}

// Ping checks Redis answers.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return s.rdb.Ping(ctx).Err()
}

// Info describes the Redis behind the store.
type Info struct {
	Mode    string // "standalone", "cluster" or "embedded"
	Version string
}

// Info reports the Redis mode and server version.
func (s *Store) Info(ctx context.Context) (Info, error) {
	info := Info{Mode: "standalone"}
	switch {
	case s.embedded != nil:
		return Info{Mode: "embedded", Version: "miniredis"}, nil
	case s.opts.Cluster:
		info.Mode = "cluster"
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	txt, err := s.rdb.Info(ctx, "server").Result()
	if err != nil {
		return info, err
	}
	for _, line := range strings.Split(txt, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			info.Version = v
			break
		}
	}
	return info, nil
}

// bound gives ctx the store's command timeout unless it already has an earlier deadline.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= s.opts.CommandTimeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.opts.CommandTimeout)
}

// Client exposes the underlying client for tests and the benchmark's raw-Redis baseline.
func (s *Store) Client() redis.UniversalClient { return s.rdb }

// EvictingMasters lists the masters ("addr: policy") whose maxmemory-policy may evict keys: anything but
// noeviction. kgate's keys are its data (an evicted stream, meta hash or offsets hash is records or
// commits lost without an error), so Redis must refuse writes when full instead. Masters that refuse
// CONFIG GET, as managed services often do, and the embedded store are not listed.
func (s *Store) EvictingMasters(ctx context.Context) []string {
	if s.Embedded() {
		return nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var mu sync.Mutex
	var out []string
	check := func(ctx context.Context, c *redis.Client) error {
		vals, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		if p, ok := vals["maxmemory-policy"]; err == nil && ok && p != "noeviction" {
			mu.Lock()
			out = append(out, c.Options().Addr+": "+p)
			mu.Unlock()
		}
		return nil
	}
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		_ = c.ForEachMaster(ctx, check)
	case *redis.Client:
		_ = check(ctx, c)
	}
	slices.Sort(out)
	return out
}
