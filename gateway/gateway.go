package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/kgate/kgate/coordinator"
	"github.com/kgate/kgate/redisstore"
)

// Config is the gateway's plain-data configuration; cmd/kgate fills it from configs.Config.
type Config struct {
	NodeID          int32
	Listen          string // Kafka listener, host:port
	Advertised      string // host:port told to clients; empty: the listener's address
	AdminListen     string // admin HTTP listener; empty: none
	AdminAdvertised string // host:port other gateways reach the admin API at; empty: derived
	MaxFrameBytes   int32
	ClusterID       string // empty: derived from the Redis namespace

	AutoCreateTopics      bool
	DefaultPartitions     int32
	DefaultRetentionMs    int64
	DefaultRetentionBytes int64
	MaxMessageBytes       int32 // broker default for max.message.bytes

	SlowRequest    time.Duration // requests slower than this are logged at warn; 0: 1s; negative: never
	MaxConnections int           // 0: unlimited
	// IdleTimeout closes a client connection no request byte reached for this long (Apache's
	// connections.max.idle.ms); 0: 10 minutes, Apache's default; negative: never.
	IdleTimeout time.Duration

	// Gateway membership (scale-out): registration heartbeat in Redis, or a static peer list.
	HeartbeatInterval time.Duration
	NodeTimeout       time.Duration
	Peers             []Peer

	RetentionCheckInterval time.Duration // how often retention.ms is enforced; default 30s
	// ProducerIDExpiration drops, at the retention pass, an idempotent producer's state in a partition
	// it has not written to for this long (Apache's producer.id.expiration.ms); 0: a day, Apache's
	// default; negative: never.
	ProducerIDExpiration time.Duration

	LagMetrics   bool // export consumer-group lag per partition
	LagMaxSeries int

	// FetchMaxBytes caps the record bytes of a fetch response beyond its first record, whatever
	// max_bytes asks for (Apache's broker config fetch.max.bytes); 0: 8 MiB (fetch_sizing.go says why).
	FetchMaxBytes int32

	// TailCacheBytes bounds the copies of recently appended records kept for fetches at the end of
	// partitions (tail_cache.go); 0: 64 MiB; negative: none.
	TailCacheBytes int64

	Groups coordinator.Config
}

// Peer is a statically configured gateway.
type Peer struct {
	ID   int32
	Addr string // advertised Kafka host:port
}

func (c *Config) fillDefaults() {
	if c.TailCacheBytes == 0 {
		c.TailCacheBytes = 64 << 20
	}
	if c.FetchMaxBytes <= 0 {
		c.FetchMaxBytes = defaultFetchMaxBytes
	}
	if c.MaxFrameBytes <= 0 {
		c.MaxFrameBytes = 100 << 20
	}
	if c.DefaultPartitions <= 0 {
		c.DefaultPartitions = 1
	}
	if c.DefaultRetentionMs == 0 {
		c.DefaultRetentionMs = 7 * 24 * 3600 * 1000
	}
	if c.DefaultRetentionBytes == 0 {
		c.DefaultRetentionBytes = -1
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = 1048588
	}
	if c.SlowRequest == 0 {
		c.SlowRequest = time.Second
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 10 * time.Minute
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = time.Second
	}
	if c.NodeTimeout <= 0 {
		c.NodeTimeout = 5 * time.Second
	}
	if c.RetentionCheckInterval <= 0 {
		c.RetentionCheckInterval = 30 * time.Second
	}
	if c.ProducerIDExpiration == 0 {
		c.ProducerIDExpiration = 24 * time.Hour
	}
	if c.LagMaxSeries <= 0 {
		c.LagMaxSeries = 1000
	}
}

// Gateway serves the Kafka protocol (and the admin API) over a redisstore.Store.
type Gateway struct {
	cfg   Config
	store *redisstore.Store
	log   zerolog.Logger
	// producersExpired is when the retention pass last dropped idle producers' state (owned by the
	// retention goroutine).
	producersExpired time.Time
	// refusedLog logs connections refused at kafka.max_connections, at most once per 10 s: clients
	// reconnect in a loop, and a line each would flood the log.
	refusedLog zerolog.Logger
	topics     *topicCache
	notify     *appendNotifier
	tail       *tailCache // nil: disabled
	coord      *coordinator.Coordinator
	writes     *groupWrites
	claims     groupClaims
	nodes      *membership

	ln       net.Listener
	advHost  string
	advPort  int32
	ready    chan struct{}
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	quit     chan struct{}  // closed (under mu) when shutdown begins
	drained  chan struct{}  // closed once shutdown has begun and no connection is left
	wg       sync.WaitGroup // connections and background loops
	stopBg   context.CancelFunc
	bgCtx    context.Context
	adminSrv adminServer

	instance string // random per process, tells a restart from a duplicate node id; owns the groups it claims (claims)
	started  time.Time
	multi    atomic.Bool // more than one live gateway: publish appends for remote long-polls
	fenced   atomic.Bool // the lease's end was logged and its groups handed over; coordinatorFor checks the lease itself
	appends  chan string // partitions to publish, drained by runAppendPublisher ("": a wake-up only)
	unsentMu sync.Mutex
	unsent   map[string]struct{} // partitions to publish that found appends full
	// sharded: publish append notices on this gateway's sharded channel (Redis Cluster, every other
	// live gateway hears those); else on the global channel. hearsSharded: this gateway's subscription
	// to every sharded channel has been made (advertised in its registration).
	sharded      atomic.Bool
	hearsSharded atomic.Bool
}

// New builds a gateway; Listen binds the Kafka listener and Serve runs it.
func New(cfg Config, store *redisstore.Store, log zerolog.Logger) *Gateway {
	cfg.fillDefaults()
	if cfg.ClusterID == "" {
		cfg.ClusterID = "kgate-" + store.Namespace()
	}
	cfg.Groups.Logger = log
	cfg.Groups.OnRebalance = func(string) { mRebalances.Inc() }
	cfg.Groups.OnPanic = func(string) { mPanics.WithLabelValues("group").Inc() }
	store.Observe(observeRedis)
	store.ObservePanics(func(where string, p any, stack []byte) {
		notePanic(log, where, p, stack, "panic in the store; carrying on")
	})
	g := &Gateway{
		cfg:        cfg,
		store:      store,
		log:        log,
		refusedLog: log.Sample(&zerolog.BurstSampler{Burst: 1, Period: 10 * time.Second}),
		topics:     newTopicCache(store, log),
		notify:     newAppendNotifier(),
		tail:       newTailCache(cfg.TailCacheBytes),
		coord:      coordinator.New(cfg.Groups),
		writes:     newGroupWrites(),
		ready:      make(chan struct{}),
		conns:      make(map[net.Conn]struct{}),
		quit:       make(chan struct{}),
		drained:    make(chan struct{}),
		appends:    make(chan string, 4096),
		unsent:     map[string]struct{}{},
		instance:   uuid.NewString(),
	}
	g.bgCtx, g.stopBg = context.WithCancel(context.Background())
	g.topics.ctx = g.bgCtx
	return g
}

// Listen binds the Kafka listener (and the admin listener when configured) and registers the gateway,
// which can wait up to a node timeout for a crashed predecessor's registration to expire; ctx cancels
// the wait.
func (g *Gateway) Listen(ctx context.Context) error {
	ln, err := net.Listen("tcp", g.cfg.Listen)
	if err != nil {
		return fmt.Errorf("gateway: listen %s: %w", g.cfg.Listen, err)
	}
	g.ln = ln
	adv := g.cfg.Advertised
	if adv == "" {
		adv = ln.Addr().String()
	}
	host, port, err := net.SplitHostPort(adv)
	if err != nil {
		ln.Close()
		return fmt.Errorf("gateway: advertised address %q: %w", adv, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		ln.Close()
		return fmt.Errorf("gateway: advertised port %q: %w", port, err)
	}
	if p == 0 { // advertised with port 0: tell clients the port actually bound
		p = ln.Addr().(*net.TCPAddr).Port
	}
	g.advHost, g.advPort = host, int32(p)
	g.nodes = newMembership(g.cfg.NodeID, net.JoinHostPort(host, strconv.Itoa(p)))
	// Every gateway has refreshed within two intervals; one whose view is a node timeout and an
	// interval old is as far behind as a gateway its peers consider down.
	g.nodes.settleAfterChanges(2*g.cfg.HeartbeatInterval, g.cfg.NodeTimeout+g.cfg.HeartbeatInterval)
	if g.cfg.AdminListen != "" {
		if err := g.listenAdmin(); err != nil {
			ln.Close()
			return err
		}
	}
	// register waits up to node_timeout + heartbeat_interval for the id; the margin is for Redis to
	// answer the last attempt and the first registration read.
	ctx, cancel := context.WithTimeout(ctx, g.cfg.NodeTimeout+g.cfg.HeartbeatInterval+10*time.Second)
	defer cancel()
	if err := g.register(ctx); err != nil {
		ln.Close()
		if g.adminSrv.ln != nil {
			g.adminSrv.ln.Close()
		}
		return fmt.Errorf("gateway: register node %d: %w", g.cfg.NodeID, err)
	}
	return nil
}

// Addr is the bound Kafka listener address.
func (g *Gateway) Addr() net.Addr { return g.ln.Addr() }

// AdvertisedAddr is the host:port clients are told.
func (g *Gateway) AdvertisedAddr() string {
	return net.JoinHostPort(g.advHost, strconv.Itoa(int(g.advPort)))
}

// Serve accepts connections until ctx is done, then shuts down (shutdown: what is in flight is
// answered first) and returns once every connection and background loop has stopped.
func (g *Gateway) Serve(ctx context.Context) error {
	if g.ln == nil {
		if err := g.Listen(ctx); err != nil {
			return err
		}
	}
	g.startAdmin()
	g.goBackground("membership", g.runMembership)
	g.goBackground("topology_refresh", g.runTopologyRefresh)
	g.goBackground("append_publisher", g.runAppendPublisher)
	g.goBackground("append_subscriber", g.runAppendSubscriber)
	if g.store.ShardedAppends() {
		g.goBackground("sharded_append_subscriber", g.runShardedAppendSubscriber)
	}
	g.goBackground("retention", g.runRetention)
	close(g.ready)
	served := make(chan struct{})
	shutDown := make(chan struct{})
	go func() { // Serve waits for it (shutDown)
		defer close(shutDown)
		select {
		case <-ctx.Done():
			g.shutdownRecovered()
		case <-served:
		}
	}()
	var err error
	var backoff time.Duration
	for {
		c, aerr := g.ln.Accept()
		if aerr != nil {
			if g.quitting() {
				break
			}
			if errors.Is(aerr, net.ErrClosed) {
				err = aerr
				g.shutdownRecovered()
				break
			}
			// Out of file descriptors and the like: wait and try again rather than stop serving.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			g.log.Error().Err(aerr).Dur("retry_in", backoff).Msg("accept failed")
			select {
			case <-time.After(backoff):
			case <-g.quit:
			}
			continue
		}
		backoff = 0
		if g.atConnectionLimit() {
			g.refusedLog.Warn().Int("max_connections", g.cfg.MaxConnections).Str("remote", c.RemoteAddr().String()).Msg("connection refused: kafka.max_connections reached (logged at most once per 10 s)")
			c.Close()
			continue
		}
		if !g.track(c) {
			c.Close()
			break
		}
		go g.serveConn(c)
	}
	close(served)
	<-shutDown // shutdown has run, whoever started it: the coordinator is closed
	g.wg.Wait()
	g.topics.wait()
	g.claims.bg.Wait() // started by connections only, all done
	return err
}

// Ready is closed once the listener serves.
func (g *Gateway) Ready() <-chan struct{} { return g.ready }

// track registers a connection; it refuses once shutdown has begun.
func (g *Gateway) track(c net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.quitting() {
		return false
	}
	g.conns[c] = struct{}{}
	g.wg.Add(1)
	return true
}

func (g *Gateway) atConnectionLimit() bool {
	if g.cfg.MaxConnections <= 0 {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.conns) >= g.cfg.MaxConnections
}

func (g *Gateway) untrack(c net.Conn) {
	g.mu.Lock()
	delete(g.conns, c)
	if g.quitting() && len(g.conns) == 0 {
		close(g.drained) // once: no connection is tracked once quit is closed
	}
	g.mu.Unlock()
	g.wg.Done()
}

// quitting reports whether shutdown has begun: connections read no further request.
func (g *Gateway) quitting() bool {
	select {
	case <-g.quit:
		return true
	default:
		return false
	}
}

// goBackground starts a loop owned by the gateway; it refuses once shutdown has begun. A panic in the
// loop is logged and the loop started again after a pause: restartPause, doubling up to
// maxRestartPause while the loop keeps panicking within maxRestartPause of its start, and back to
// restartPause after a run that lasted longer. So one bad pass of a loop the gateway needs (membership
// heartbeats, retention, append wake-ups) neither ends the process nor stops that loop for good, and
// rare panics days apart do not add up to a pause long enough to have the gateway declared dead.
// Shutdown ends a pause at once, so the loop runs again and does its shutdown work (the membership
// loop marks the gateway down), rather than only when bgCtx ends, after the drain.
func (g *Gateway) goBackground(name string, fn func(ctx context.Context)) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.quitting() {
		return false
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		pause, quit := restartPause, g.quit
		for {
			began := time.Now()
			if !g.runRecovered(name, fn) {
				return
			}
			if time.Since(began) > maxRestartPause {
				pause = restartPause
			}
			select {
			case <-quit:
			case <-g.bgCtx.Done(): // ends after quit; with no connection to drain, maybe seen first
				if quit == nil {
					return
				}
			case <-time.After(pause):
			}
			if quit != nil && g.quitting() {
				quit = nil // once: a loop that panics again waits its pauses out, or bgCtx
			}
			pause = min(2*pause, maxRestartPause)
		}
	}()
	return true
}

// Pauses before a background loop that panicked runs again (goBackground); variables for tests.
var restartPause, maxRestartPause = time.Second, 30 * time.Second

// runRecovered runs fn on bgCtx and reports whether it panicked (then logged and counted).
func (g *Gateway) runRecovered(name string, fn func(ctx context.Context)) (panicked bool) {
	defer func() {
		if p := recover(); p != nil {
			panicked = true
			notePanic(g.log, name, p, debug.Stack(), "panic in a background loop; restarting it")
		}
	}()
	fn(g.bgCtx)
	return false
}

// shutdownGrace bounds how long shutdown waits for what is in flight to be answered before it closes
// the connections and cancels their requests.
const shutdownGrace = 5 * time.Second

// shutdown stops the gateway in three phases, so that a request in flight is answered rather than
// abandoned (an append stored but not acknowledged makes a producer without idempotence store it
// twice when it retries elsewhere):
//
//  1. the Kafka listener closes and readiness fails (quit); the admin server stops in parallel, and
//     the membership loop stops heartbeating and marks this gateway down in Redis (runMembership), so
//     peers stop sending clients here and take its groups over without waiting for the drain;
//  2. connections read no further request, but what they have read is answered: queued produces are
//     appended and acknowledged, a long-polling fetch answers with what it has, the coordinator
//     answers parked joins and syncs NOT_COORDINATOR; each connection then closes (conn.lingerClose),
//     and this lasts until all have, or shutdownGrace;
//  3. the connections left are closed and bgCtx is cancelled, which ends their requests and the
//     background loops.
//
// Requests (and admin handlers) run on bgCtx throughout, so nothing in flight fails only because
// shutdown began.
func (g *Gateway) shutdown() {
	g.mu.Lock()
	if g.quitting() {
		g.mu.Unlock()
		return
	}
	close(g.quit)
	conns := make([]net.Conn, 0, len(g.conns))
	for c := range g.conns {
		conns = append(conns, c)
	}
	if len(conns) == 0 {
		close(g.drained)
	}
	g.mu.Unlock()

	g.ln.Close()
	grace, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	adminStopped := make(chan struct{})
	go func() { // waited for below
		defer close(adminStopped)
		defer func() {
			if p := recover(); p != nil {
				notePanic(g.log, "shutdown", p, debug.Stack(), "panic stopping the admin server; closing it")
				bestEffort(g.log, func() { g.adminSrv.srv.Close() })
			}
		}()
		g.stopAdmin(grace)
	}()

	g.coord.Close()
	for _, c := range conns {
		// Ends a read loop's wait for the next request; one between requests sees quit instead
		// (conn.stayOpen).
		_ = c.SetReadDeadline(time.Unix(1, 0))
	}
	select {
	case <-g.drained:
	case <-grace.Done():
	}
	<-adminStopped

	g.mu.Lock()
	conns = conns[:0]
	for c := range g.conns {
		conns = append(conns, c)
	}
	g.mu.Unlock()
	if len(conns) > 0 {
		g.log.Warn().Int("connections", len(conns)).Dur("grace", shutdownGrace).Msg("closing connections still busy after the shutdown grace period")
	}
	for _, c := range conns {
		c.Close()
	}
	g.stopBg()
}

// shutdownRecovered runs shutdown. A panic in it is logged and counted, and the gateway is then
// stopped at once (stopAfterPanic) rather than left half stopped: the panic would have ended the
// process, or, caught by nothing that goes on, left Serve waiting for connections and loops that
// nothing closes.
func (g *Gateway) shutdownRecovered() {
	defer func() {
		if p := recover(); p != nil {
			notePanic(g.log, "shutdown", p, debug.Stack(), "panic shutting down; closing everything at once")
			g.stopAfterPanic()
		}
	}()
	g.shutdown()
}

// stopAfterPanic does what shutdown does, without its grace (how far shutdown got is unknown): quit
// closed, then the listener, the admin server, the coordinator and every connection closed, and bgCtx
// cancelled, each step whatever the others do.
func (g *Gateway) stopAfterPanic() {
	g.mu.Lock()
	if !g.quitting() {
		close(g.quit)
		if len(g.conns) == 0 {
			close(g.drained)
		}
	}
	conns := make([]net.Conn, 0, len(g.conns))
	for c := range g.conns {
		conns = append(conns, c)
	}
	g.mu.Unlock()
	bestEffort(g.log, func() { g.ln.Close() })
	if g.adminSrv.srv != nil {
		bestEffort(g.log, func() { g.adminSrv.srv.Close() })
	}
	bestEffort(g.log, g.coord.Close)
	for _, c := range conns {
		bestEffort(g.log, func() { c.Close() })
	}
	g.stopBg()
}

// bestEffort runs a step of stopAfterPanic; a panic in it is logged and counted, and the next step
// runs.
func bestEffort(log zerolog.Logger, step func()) {
	defer func() {
		if p := recover(); p != nil {
			notePanic(log, "shutdown", p, debug.Stack(), "panic closing down after a panic in shutdown")
		}
	}()
	step()
}

// OpenConnections reports the number of open client connections.
func (g *Gateway) OpenConnections() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.conns)
}
