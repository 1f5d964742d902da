// Command kgate runs the Kafka protocol gateway: flags and config, logger, Redis store, gateway, until
// SIGINT/SIGTERM. It holds no logic of its own.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/kgate/kgate/configs"
	"github.com/kgate/kgate/coordinator"
	"github.com/kgate/kgate/gateway"
	"github.com/kgate/kgate/redisstore"
)

func main() {
	cfg, err := configs.Load(os.Args[1:], os.Environ())
	if errors.Is(err, configs.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kgate:", err)
		os.Exit(2)
	}
	log := newLogger(cfg.Log, os.Stderr)
	redisstore.SetClientLog(func(msg string) { log.Warn().Str("detail", msg).Msg("redis client library") })
	ctx, stop := signalContext()
	defer stop()
	if err := run(ctx, cfg, log); err != nil {
		log.Error().Err(err).Msg("kgate stopped")
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg configs.Config, log zerolog.Logger) error {
	// A signal while starting ends the start-up, which is then a requested stop, not a failure.
	startFailed := func(err error) error {
		if ctx.Err() != nil {
			log.Info().AnErr("start", err).Msg("kgate stopped before serving")
			return nil
		}
		return err
	}
	if len(cfg.Redis.Addrs) > 0 && cfg.Kafka.AdvertisesLoopback() {
		// Fine for one gateway tried out on one host; with a shared Redis, the gateways tell clients and
		// each other an address only this host can dial.
		log.Warn().Str("kafka.listen", cfg.Kafka.Listen).Msg("kafka.listen takes connections on every interface but kafka.advertised is empty: clients and other gateways are told 127.0.0.1, which only this host can dial; set kafka.advertised")
	}
	store, err := redisstore.Open(ctx, redisstore.Options{
		Addrs: cfg.Redis.Addrs, Cluster: cfg.Redis.Cluster, Username: cfg.Redis.Username,
		Password: cfg.Redis.Password, DB: cfg.Redis.DB, Namespace: cfg.Redis.Namespace,
		DialTimeout: cfg.Redis.DialTimeout, CommandTimeout: cfg.Redis.CommandTimeout,
		PoolSize: cfg.Redis.PoolSize, WaitReplicas: cfg.Redis.WaitReplicas, WaitAOF: cfg.Redis.WaitAOF,
		WaitTimeout: cfg.Redis.WaitTimeout,
	})
	if errors.Is(err, redisstore.ErrClusterNode) {
		err = fmt.Errorf("redis.addrs is a Redis Cluster node: set redis.cluster (%w)", err)
	}
	if err != nil {
		return startFailed(err)
	}
	defer store.Close()
	if store.Embedded() {
		// Logged whatever log.level says: log.level error must not hide that every record is lost.
		loud := log.Level(min(log.GetLevel(), zerolog.WarnLevel))
		loud.Warn().Str("embedded_redis", store.EmbeddedAddr()).Msg("NO REDIS CONFIGURED: using the embedded in-process store; every record is lost when kgate stops (set redis.addrs / KGATE_REDIS_ADDRS)")
	}
	if evicting := store.EvictingMasters(ctx); len(evicting) > 0 {
		log.Warn().Strs("masters", evicting).Msg("Redis may evict keys when full (maxmemory-policy is not noeviction): evicted keys are records and commits lost without an error; set maxmemory-policy noeviction")
	}
	peers, err := cfg.Cluster.ParsePeers()
	if err != nil {
		return err
	}
	gpeers := make([]gateway.Peer, len(peers))
	for i, p := range peers {
		gpeers[i] = gateway.Peer{ID: p.ID, Addr: p.Addr}
	}
	g := gateway.New(gateway.Config{
		NodeID:                cfg.Node.ID,
		Listen:                cfg.Kafka.Listen,
		Advertised:            cfg.Kafka.Advertised,
		AdminListen:           cfg.Admin.Listen,
		AdminAdvertised:       cfg.Admin.Advertised,
		MaxFrameBytes:         cfg.Kafka.MaxFrameBytes,
		MaxConnections:        cfg.Kafka.MaxConnections,
		TailCacheBytes:        tailCacheBytes(cfg.Kafka.TailCacheBytes),
		FetchMaxBytes:         cfg.Kafka.FetchMaxBytes,
		AutoCreateTopics:      cfg.Topics.AutoCreate,
		DefaultPartitions:     cfg.Topics.Partitions,
		DefaultRetentionMs:    cfg.Topics.RetentionMs,
		DefaultRetentionBytes: cfg.Topics.RetentionBytes,
		MaxMessageBytes:       cfg.Topics.MaxMessageBytes,
		SlowRequest:           neverIfZero(cfg.Log.SlowRequest),
		IdleTimeout:           neverIfZero(cfg.Kafka.IdleTimeout),
		ProducerIDExpiration:  neverIfZero(cfg.Kafka.ProducerIDExpiration),
		HeartbeatInterval:     cfg.Cluster.HeartbeatInterval,
		NodeTimeout:           cfg.Cluster.NodeTimeout,
		Peers:                 gpeers,
		LagMetrics:            cfg.Metrics.LagEnabled,
		LagMaxSeries:          cfg.Metrics.LagMaxSeries,
		Groups:                groupsConfig(cfg.Groups),
	}, store, log)
	if err := g.Listen(ctx); err != nil {
		return startFailed(err)
	}
	ev := log.Info().Str("kafka", g.Addr().String()).Str("advertised", g.AdvertisedAddr()).Int32("node_id", cfg.Node.ID).
		Str("append_mode", store.AppendMode())
	if a := g.AdminAddr(); a != nil {
		ev = ev.Str("admin", a.String())
	}
	ev.Msg("kgate serving")
	logged := make(chan struct{})
	stopLogging := context.AfterFunc(ctx, func() {
		log.Info().Msg("shutting down: answering the requests read, then closing (a second signal ends at once)")
		close(logged)
	})
	err = g.Serve(ctx)
	if !stopLogging() {
		<-logged // the shutdown line, once begun, comes before the last
	}
	if err != nil {
		return err
	}
	log.Info().Msg("kgate stopped")
	return nil
}

// signalContext is done at the first SIGINT or SIGTERM, which starts the gateway's graceful shutdown.
// From then on the signals have their default behaviour again, so a second one ends the process at
// once, as an operator pressing Ctrl-C twice expects.
func signalContext() (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	return ctx, stop
}

func newLogger(c configs.Log, out io.Writer) zerolog.Logger {
	level, err := zerolog.ParseLevel(c.Level)
	if err != nil {
		level = zerolog.InfoLevel
	}
	var log zerolog.Logger
	if c.Format == "console" {
		// Colours only on a terminal: in a file or a log collector the escapes would be stored as text.
		noColor := true
		if f, ok := out.(*os.File); ok {
			fi, err := f.Stat()
			noColor = err != nil || fi.Mode()&os.ModeCharDevice == 0
		}
		log = zerolog.New(zerolog.ConsoleWriter{Out: out, TimeFormat: time.RFC3339, NoColor: noColor})
	} else {
		log = zerolog.New(out)
	}
	return log.Level(level).With().Timestamp().Logger()
}

// groupsConfig is the coordinator's configuration from the groups settings; an initial rebalance
// delay of 0 means none (the coordinator's 0 is its default).
func groupsConfig(c configs.Groups) coordinator.Config {
	return coordinator.Config{
		InitialRebalanceDelay: neverIfZero(c.InitialRebalanceDelay),
		MinSessionTimeout:     c.MinSessionTimeout,
		MaxSessionTimeout:     c.MaxSessionTimeout,
	}
}

// neverIfZero maps a configured 0 ("never", "none") to the gateway's negative one (its 0 is the default).
func neverIfZero(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// tailCacheBytes maps the setting (0 = off) to the gateway's (0 = its default, negative = off).
func tailCacheBytes(n int64) int64 {
	if n == 0 {
		return -1
	}
	return n
}
