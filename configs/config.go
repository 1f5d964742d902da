package configs

import (
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"
)

// Config is the whole kgate configuration. Each field's koanf tag is its key
// (kafka.listen); its help tag is the one-line meaning shown by --help. The
// flags, the KGATE_* variables and the README key table all derive from these
// tags, so a new key is added here and in Default, nowhere else.
type Config struct {
	Node    Node    `koanf:"node"`
	Kafka   Kafka   `koanf:"kafka"`
	Redis   Redis   `koanf:"redis"`
	Admin   Admin   `koanf:"admin"`
	Log     Log     `koanf:"log"`
	Topics  Topics  `koanf:"topics"`
	Groups  Groups  `koanf:"groups"`
	Cluster Cluster `koanf:"cluster"`
	Metrics Metrics `koanf:"metrics"`
}

// Node identifies this gateway among the gateways sharing one Redis namespace.
type Node struct {
	ID int32 `koanf:"id" help:"broker id told to clients; unique per gateway sharing a namespace"`
}

// Kafka is the client-facing Kafka listener.
type Kafka struct {
	Listen         string        `koanf:"listen" help:"host:port of the Kafka listener"`
	Advertised     string        `koanf:"advertised" help:"host:port told to clients in Metadata; empty = listen address with an unspecified host replaced by 127.0.0.1"`
	MaxFrameBytes  int32         `koanf:"max_frame_bytes" help:"largest request frame accepted; a larger one closes the connection"`
	MaxConnections int           `koanf:"max_connections" help:"most client connections at once; 0 = unlimited"`
	IdleTimeout    time.Duration `koanf:"idle_timeout" help:"close a client connection when no byte of a request arrives, and none of an answer is taken, for this long (Apache's connections.max.idle.ms); 0 = never, else at least 1s"`
	// ProducerIDExpiration drops an idempotent producer's state in a partition it sent nothing to for
	// this long.
	ProducerIDExpiration time.Duration `koanf:"producer_id_expiration" help:"drop an idempotent producer's state in a partition it has not written to for this long (Apache's producer.id.expiration.ms); 0 = never, else at least 1m"`
	FetchMaxBytes        int32         `koanf:"fetch_max_bytes" help:"most record bytes a fetch response carries beyond its first record, whatever the client asks for (Apache's fetch.max.bytes, 55 MiB there): each response is read into the gateway's memory before it is written; at least 1024"`
	TailCacheBytes       int64         `koanf:"tail_cache_bytes" help:"memory for copies of recently appended records (of partitions a fetch read up to their end in the last 10 s), so fetches at the end of a partition skip reading entries from Redis; 0 = off"`
}

// Redis is the backing store. No addresses means the embedded in-process
// store, which keeps nothing across restarts.
type Redis struct {
	Addrs          []string      `koanf:"addrs" help:"Redis host:port list (comma-separated in env and flags); empty = embedded in-process store"`
	Cluster        bool          `koanf:"cluster" help:"addrs are Redis Cluster seed nodes"`
	Namespace      string        `koanf:"namespace" help:"prefix of every Redis key kgate writes"`
	Username       string        `koanf:"username" help:"Redis ACL user name"`
	Password       string        `koanf:"password" help:"Redis password"`
	DB             int           `koanf:"db" help:"Redis database number (standalone only)"`
	DialTimeout    time.Duration `koanf:"dial_timeout" help:"timeout for opening a Redis connection"`
	CommandTimeout time.Duration `koanf:"command_timeout" help:"timeout for one Redis command or script"`
	PoolSize       int           `koanf:"pool_size" help:"Redis connections per node; 0 = go-redis default"`
	WaitReplicas   int           `koanf:"wait_replicas" help:"replicas that must acknowledge a write before acks=all or an offset commit succeeds (Redis WAIT); 0 = none"`
	WaitTimeout    time.Duration `koanf:"wait_timeout" help:"how long WAIT/WAITAOF may block each; together below command_timeout"`
	WaitAOF        bool          `koanf:"wait_aof" help:"acks=all and offset commits also wait for the local AOF fsync (Redis WAITAOF)"`
}

// Admin is the HTTP admin API (health, metrics).
type Admin struct {
	Listen     string `koanf:"listen" help:"host:port of the admin HTTP API; empty = disabled"`
	Advertised string `koanf:"advertised" help:"host:port other gateways use to reach this admin API; empty = listen address with an unspecified host replaced by the Kafka advertised host"`
}

// Log configures the logger built by cmd/kgate.
type Log struct {
	Level       string        `koanf:"level" help:"debug, info, warn or error"`
	Format      string        `koanf:"format" help:"json or console"`
	SlowRequest time.Duration `koanf:"slow_request" help:"log requests slower than this, beyond what they wait by design (a fetch's max_wait; JoinGroup and SyncGroup are never logged); 0 = never"`
}

// Topics holds the defaults for topics, including auto-created ones.
type Topics struct {
	AutoCreate      bool  `koanf:"autocreate" help:"create unknown topics when a Metadata request allows it (Produce never creates topics)"`
	Partitions      int32 `koanf:"partitions" help:"partition count of auto-created topics and CreateTopics with -1"`
	RetentionMs     int64 `koanf:"retention_ms" help:"default retention.ms; -1 = infinite"`
	RetentionBytes  int64 `koanf:"retention_bytes" help:"default retention.bytes per partition; -1 = infinite"`
	MaxMessageBytes int32 `koanf:"max_message_bytes" help:"default max.message.bytes: the largest record batch accepted"`
}

// Groups holds the consumer-group coordinator settings.
type Groups struct {
	InitialRebalanceDelay time.Duration `koanf:"initial_rebalance_delay" help:"wait for more members before the first rebalance of an empty group; 0 = none"`
	MinSessionTimeout     time.Duration `koanf:"min_session_timeout" help:"smallest session timeout a member may ask for"`
	MaxSessionTimeout     time.Duration `koanf:"max_session_timeout" help:"largest session timeout a member may ask for"`
}

// Cluster configures how gateways sharing a namespace find each other.
type Cluster struct {
	HeartbeatInterval time.Duration `koanf:"heartbeat_interval" help:"how often this gateway refreshes its registration in Redis; at least 100ms"`
	NodeTimeout       time.Duration `koanf:"node_timeout" help:"a gateway silent this long is dropped from Metadata"`
	Peers             []string      `koanf:"peers" help:"static id@host:port gateway list (comma-separated in env and flags); empty = discover through Redis"`
}

// Metrics configures the Prometheus metrics served on the admin listener.
type Metrics struct {
	LagEnabled   bool `koanf:"lag_enabled" help:"export consumer-group lag per partition"`
	LagMaxSeries int  `koanf:"lag_max_series" help:"most group/topic/partition lag series exported"`
}

// Default returns the configuration used for every key nobody sets.
func Default() Config {
	return Config{
		Kafka: Kafka{
			Listen:               "0.0.0.0:9092",
			MaxFrameBytes:        100 << 20,
			IdleTimeout:          10 * time.Minute,
			TailCacheBytes:       64 << 20,
			FetchMaxBytes:        8 << 20,
			ProducerIDExpiration: 24 * time.Hour,
		},
		Redis: Redis{
			Namespace:      "kgate",
			DialTimeout:    2 * time.Second,
			CommandTimeout: 5 * time.Second,
			WaitTimeout:    time.Second,
		},
		Admin: Admin{Listen: "0.0.0.0:8080"},
		Log: Log{
			Level:       "info",
			Format:      "json",
			SlowRequest: time.Second,
		},
		Topics: Topics{
			AutoCreate:      true,
			Partitions:      1,
			RetentionMs:     7 * 24 * 60 * 60 * 1000,
			RetentionBytes:  -1,
			MaxMessageBytes: 1048588, // Kafka's message.max.bytes default
		},
		Groups: Groups{
			InitialRebalanceDelay: 3 * time.Second,
			MinSessionTimeout:     6 * time.Second,
			MaxSessionTimeout:     30 * time.Minute,
		},
		Cluster: Cluster{
			HeartbeatInterval: time.Second,
			NodeTimeout:       5 * time.Second,
		},
		Metrics: Metrics{
			LagEnabled:   true,
			LagMaxSeries: 1000,
		},
	}
}

// The least value of each duration key, 0 aside where it means never or none. Kafka and Redis count
// time in whole milliseconds (session timeouts, WAIT's timeout, the node timeout in the registration
// script), so no duration is below 1ms; some keys need more:
const (
	// A long poll ends at the idle timeout (the read loop alone notices a client gone): below the
	// 0.5-5 s clients ask a fetch to wait, each poll would end early and come straight back.
	minIdleTimeout = time.Second
	// A producer retries a batch whose answer it did not get after its request timeout (30 s by
	// default): its state dropped meanwhile, the retry of a stored batch is stored again.
	minProducerIDExpiration = time.Minute
	// Each interval writes the registration, reads every gateway's with the interval as its timeout
	// and, on a cluster, reloads the slot map: a few round trips to Redis, which a shorter interval
	// would repeat in a loop.
	minHeartbeatInterval = 100 * time.Millisecond
)

// KeyError is a problem with the value of one key. Load and Validate return
// KeyErrors (joined with errors.Join when there are several).
type KeyError struct {
	Key string // dotted key, e.g. "kafka.listen"
	Err error
}

func (e *KeyError) Error() string { return "configs: " + e.Key + ": " + e.Err.Error() }
func (e *KeyError) Unwrap() error { return e.Err }

func keyErr(key, format string, args ...any) error {
	return &KeyError{Key: key, Err: fmt.Errorf(format, args...)}
}

// Validate checks every key and returns all problems found, each a *KeyError
// naming its key. Load calls it; tests that build a Config literal may too.
func (c Config) Validate() error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	atLeast := func(key string, d, least time.Duration) {
		if d < least {
			add(keyErr(key, "must be at least %v, got %v", least, d))
		}
	}
	// zeroOr is atLeast for a key whose 0 means never or none (what zero says).
	zeroOr := func(key string, d, least time.Duration, zero string) {
		if d != 0 && d < least {
			add(keyErr(key, "must be 0 (%s) or at least %v, got %v", zero, least, d))
		}
	}

	if c.Node.ID < 0 {
		add(keyErr("node.id", "must be >= 0, got %d", c.Node.ID))
	}

	add(checkListen("kafka.listen", c.Kafka.Listen))
	if c.Kafka.Advertised != "" {
		add(checkAdvertised("kafka.advertised", c.Kafka.Advertised))
	}
	if c.Kafka.MaxFrameBytes <= 0 {
		add(keyErr("kafka.max_frame_bytes", "must be > 0, got %d", c.Kafka.MaxFrameBytes))
	} else if c.Kafka.MaxFrameBytes < c.Topics.MaxMessageBytes {
		// A produce request carrying one maximal batch must still fit in a frame.
		add(keyErr("kafka.max_frame_bytes", "%d is smaller than topics.max_message_bytes (%d)",
			c.Kafka.MaxFrameBytes, c.Topics.MaxMessageBytes))
	}
	zeroOr("kafka.idle_timeout", c.Kafka.IdleTimeout, minIdleTimeout, "never")
	zeroOr("kafka.producer_id_expiration", c.Kafka.ProducerIDExpiration, minProducerIDExpiration, "never")
	if c.Kafka.FetchMaxBytes < 1024 { // as Apache's fetch.max.bytes
		add(keyErr("kafka.fetch_max_bytes", "must be >= 1024, got %d", c.Kafka.FetchMaxBytes))
	}
	if c.Kafka.TailCacheBytes < 0 {
		add(keyErr("kafka.tail_cache_bytes", "must be >= 0 (0 = off), got %d", c.Kafka.TailCacheBytes))
	}
	if c.Kafka.MaxConnections < 0 {
		add(keyErr("kafka.max_connections", "must be >= 0 (0 = unlimited), got %d", c.Kafka.MaxConnections))
	}

	for _, a := range c.Redis.Addrs {
		add(checkDialAddr("redis.addrs", a))
	}
	switch {
	case c.Redis.Cluster && len(c.Redis.Addrs) == 0:
		add(keyErr("redis.cluster", "requires redis.addrs (the embedded store is not a cluster)"))
	case !c.Redis.Cluster && len(c.Redis.Addrs) > 1:
		add(keyErr("redis.addrs", "%d addresses without redis.cluster; give one address or set redis.cluster", len(c.Redis.Addrs)))
	}
	add(checkNamespace("redis.namespace", c.Redis.Namespace))
	if c.Redis.DB < 0 {
		add(keyErr("redis.db", "must be >= 0, got %d", c.Redis.DB))
	} else if c.Redis.DB != 0 && c.Redis.Cluster {
		add(keyErr("redis.db", "must be 0 with redis.cluster (Redis Cluster has only database 0), got %d", c.Redis.DB))
	}
	atLeast("redis.dial_timeout", c.Redis.DialTimeout, time.Millisecond)
	atLeast("redis.command_timeout", c.Redis.CommandTimeout, time.Millisecond)
	if c.Redis.PoolSize < 0 {
		add(keyErr("redis.pool_size", "must be >= 0 (0 = go-redis default), got %d", c.Redis.PoolSize))
	}
	if c.Redis.WaitReplicas < 0 {
		add(keyErr("redis.wait_replicas", "must be >= 0, got %d", c.Redis.WaitReplicas))
	} else if c.Redis.WaitReplicas > 0 && len(c.Redis.Addrs) == 0 {
		add(keyErr("redis.wait_replicas", "requires redis.addrs (the embedded store has no replicas)"))
	}
	if c.Redis.WaitAOF && len(c.Redis.Addrs) == 0 {
		add(keyErr("redis.wait_aof", "requires redis.addrs (the embedded store has no AOF)"))
	}
	if c.Redis.Username != "" && len(c.Redis.Addrs) == 0 {
		add(keyErr("redis.username", "requires redis.addrs (the embedded store has no users)"))
	}
	if c.Redis.Password != "" && len(c.Redis.Addrs) == 0 {
		add(keyErr("redis.password", "requires redis.addrs (the embedded store has no password)"))
	}
	// WAIT and WAITAOF take whole milliseconds, and 0 there blocks until the command timeout.
	atLeast("redis.wait_timeout", c.Redis.WaitTimeout, time.Millisecond)
	// An acks=-1 append runs its script, then WAIT and WAITAOF, each blocking up to wait_timeout, all
	// within one command_timeout: waits that can fill it time the produce out instead of answering
	// NOT_ENOUGH_REPLICAS_AFTER_APPEND.
	waits := 0
	if c.Redis.WaitReplicas > 0 {
		waits++
	}
	if c.Redis.WaitAOF {
		waits++
	}
	if waits > 0 && c.Redis.WaitTimeout > 0 && time.Duration(waits)*c.Redis.WaitTimeout >= c.Redis.CommandTimeout {
		add(keyErr("redis.wait_timeout", "%v for each of %d waits (redis.wait_replicas, redis.wait_aof) must add up to less than redis.command_timeout (%v)",
			c.Redis.WaitTimeout, waits, c.Redis.CommandTimeout))
	}

	if c.Admin.Advertised != "" {
		add(checkAdvertised("admin.advertised", c.Admin.Advertised))
	}
	if c.Admin.Listen != "" {
		add(checkListen("admin.listen", c.Admin.Listen))
	}

	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		add(keyErr("log.level", "must be debug, info, warn or error, got %q", c.Log.Level))
	}
	switch c.Log.Format {
	case "json", "console":
	default:
		add(keyErr("log.format", "must be json or console, got %q", c.Log.Format))
	}
	zeroOr("log.slow_request", c.Log.SlowRequest, time.Millisecond, "never")

	if c.Topics.Partitions < 1 {
		add(keyErr("topics.partitions", "must be >= 1, got %d", c.Topics.Partitions))
	}
	if c.Topics.RetentionMs < -1 || c.Topics.RetentionMs == 0 {
		add(keyErr("topics.retention_ms", "must be > 0 or -1 (infinite), got %d", c.Topics.RetentionMs))
	}
	if c.Topics.RetentionBytes < -1 || c.Topics.RetentionBytes == 0 {
		add(keyErr("topics.retention_bytes", "must be > 0 or -1 (infinite), got %d", c.Topics.RetentionBytes))
	}
	if c.Topics.MaxMessageBytes <= 0 {
		add(keyErr("topics.max_message_bytes", "must be > 0, got %d", c.Topics.MaxMessageBytes))
	}

	zeroOr("groups.initial_rebalance_delay", c.Groups.InitialRebalanceDelay, time.Millisecond, "none")
	atLeast("groups.min_session_timeout", c.Groups.MinSessionTimeout, time.Millisecond)
	if c.Groups.MaxSessionTimeout < c.Groups.MinSessionTimeout {
		add(keyErr("groups.max_session_timeout", "%v is below groups.min_session_timeout (%v)",
			c.Groups.MaxSessionTimeout, c.Groups.MinSessionTimeout))
	}

	atLeast("cluster.heartbeat_interval", c.Cluster.HeartbeatInterval, minHeartbeatInterval)
	if c.Cluster.NodeTimeout <= c.Cluster.HeartbeatInterval {
		add(keyErr("cluster.node_timeout", "%v must exceed cluster.heartbeat_interval (%v)",
			c.Cluster.NodeTimeout, c.Cluster.HeartbeatInterval))
	}
	if _, err := c.Cluster.ParsePeers(); err != nil {
		add(err)
	} else if len(c.Cluster.Peers) > 0 && len(c.Redis.Addrs) == 0 {
		// Static peers are always alive: gateways with stores of their own would hand each other
		// partitions and groups whose data the other cannot see.
		add(keyErr("cluster.peers", "requires redis.addrs (each embedded store is private to its gateway)"))
	}

	if c.Metrics.LagEnabled && c.Metrics.LagMaxSeries < 1 {
		add(keyErr("metrics.lag_max_series", "must be >= 1 with metrics.lag_enabled, got %d", c.Metrics.LagMaxSeries))
	}

	return errors.Join(errs...)
}

// AdvertisedAddr returns the host:port told to clients. A set kafka.advertised
// wins. Otherwise it is bound, the listener's actual address (so a ":0" listen
// reports its real port; pass k.Listen before binding), with an unspecified
// host ("", 0.0.0.0, ::) replaced by 127.0.0.1. That default only suits
// clients on the same host: set kafka.advertised for anything else.
func (k Kafka) AdvertisedAddr(bound string) string {
	if k.Advertised != "" {
		return k.Advertised
	}
	host, port, err := net.SplitHostPort(bound)
	if err != nil {
		return bound
	}
	if host == "" {
		host = "127.0.0.1"
	} else if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// AdvertisesLoopback reports whether AdvertisedAddr replaces an unspecified
// listen host with 127.0.0.1: kafka.advertised is empty and kafka.listen
// takes connections on every interface, from hosts that cannot dial it.
func (k Kafka) AdvertisesLoopback() bool {
	if k.Advertised != "" {
		return false
	}
	host, _, err := net.SplitHostPort(k.Listen)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host == "" || ip != nil && ip.IsUnspecified()
}

// Peer is one entry of cluster.peers.
type Peer struct {
	ID   int32
	Addr string // host:port of the peer's Kafka listener as told to clients
}

// ParsePeers parses cluster.peers ("id@host:port" each). Ids must be unique.
func (c Cluster) ParsePeers() ([]Peer, error) {
	peers := make([]Peer, 0, len(c.Peers))
	seen := make(map[int32]bool, len(c.Peers))
	for _, s := range c.Peers {
		idStr, addr, ok := strings.Cut(s, "@")
		if !ok {
			return nil, keyErr("cluster.peers", "%q is not id@host:port", s)
		}
		id, err := strconv.ParseInt(idStr, 10, 32)
		if err != nil || id < 0 {
			return nil, keyErr("cluster.peers", "%q: id must be an integer >= 0", s)
		}
		if err := checkDialAddr("cluster.peers", addr); err != nil {
			return nil, err
		}
		if seen[int32(id)] {
			return nil, keyErr("cluster.peers", "id %d listed twice", id)
		}
		seen[int32(id)] = true
		peers = append(peers, Peer{ID: int32(id), Addr: addr})
	}
	return peers, nil
}

// checkListen accepts a bindable host:port: the host may be empty or
// unspecified and the port may be 0 (any free port, for tests).
func checkListen(key, addr string) error {
	host, _, err := splitHostPort(key, addr, 0)
	if err == nil && host != "" && net.ParseIP(host) == nil && !isHostname(host) {
		// Found out only at bind, after Redis was reached.
		return keyErr(key, "host %q is neither an IP address nor a DNS name", host)
	}
	return err
}

// checkDialAddr accepts an address others connect to: a non-empty host and a
// port from 1.
func checkDialAddr(key, addr string) error {
	host, _, err := splitHostPort(key, addr, 1)
	if err != nil {
		return err
	}
	if host == "" {
		return keyErr(key, "missing host in address %q", addr)
	}
	return nil
}

// checkAdvertised is checkDialAddr that also refuses 0.0.0.0 and ::, which
// a client cannot connect to.
func checkAdvertised(key, addr string) error {
	if err := checkDialAddr(key, addr); err != nil {
		return err
	}
	host, _, _ := net.SplitHostPort(addr)
	ip := net.ParseIP(host)
	switch {
	case ip != nil && ip.IsUnspecified():
		return keyErr(key, "unspecified host in %q cannot be dialled by clients", addr)
	case ip == nil && !isHostname(host):
		// Told to every client as is (Metadata, FindCoordinator): a typo here ("a b", a stray space
		// from the environment) would only show as clients failing to connect.
		return keyErr(key, "host %q is neither an IP address nor a DNS name", host)
	}
	return nil
}

// isHostname reports whether h is a DNS name: dot-separated labels of letters, digits, '-' and '_' (which
// container and service names use), each 1-63 bytes, 253 in all, a final dot allowed.
func isHostname(h string) bool {
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

func splitHostPort(key, addr string, minPort int) (host string, port int, err error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return "", 0, keyErr(key, "%s %q", ae.Err, addr)
		}
		return "", 0, keyErr(key, "%v", err)
	}
	port, err = strconv.Atoi(p)
	if err != nil || port < minPort || port > math.MaxUint16 {
		return "", 0, keyErr(key, "port in %q must be a number from %d to 65535", addr, minPort)
	}
	return host, port, nil
}

// checkNamespace keeps the namespace to characters that cannot clash with the
// key schema: ':' separates parts and '{' '}' are Redis Cluster hash tags.
func checkNamespace(key, ns string) error {
	if ns == "" {
		return keyErr(key, "must not be empty")
	}
	for _, r := range ns {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.'
		if !ok {
			return keyErr(key, "%q: only letters, digits, '-', '_' and '.' are allowed", ns)
		}
	}
	return nil
}
