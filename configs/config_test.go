package configs

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// errorKeys returns the keys of every *KeyError in err's tree.
func errorKeys(err error) []string {
	if err == nil {
		return nil
	}
	if ke, ok := err.(*KeyError); ok {
		return []string{ke.Key}
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var keys []string
		for _, e := range j.Unwrap() {
			keys = append(keys, errorKeys(e)...)
		}
		return keys
	}
	return errorKeys(errors.Unwrap(err))
}

func TestDefaultIsValid(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(c *Config)
		wantKey string // "" = valid
		wantMsg string // substring of the error, when wantKey is set
	}{
		{"admin disabled", func(c *Config) { c.Admin.Listen = "" }, "", ""},
		{"advertised hostname", func(c *Config) { c.Kafka.Advertised = "kgate.internal:9092" }, "", ""},
		{"listen any port", func(c *Config) { c.Kafka.Listen = ":0" }, "", ""},
		{"listen ipv6", func(c *Config) { c.Kafka.Listen = "[::]:9092" }, "", ""},
		{"one redis", func(c *Config) { c.Redis.Addrs = []string{"redis:6379"} }, "", ""},
		{"redis credentials", func(c *Config) {
			c.Redis.Addrs = []string{"redis:6379"}
			c.Redis.Username, c.Redis.Password = "kgate", "secret"
		}, "", ""},
		{"cluster seeds", func(c *Config) {
			c.Redis.Cluster = true
			c.Redis.Addrs = []string{"a:7000", "b:7001", "c:7002"}
			c.Redis.WaitReplicas = 1
			c.Redis.WaitAOF = true
		}, "", ""},
		{"slow request off", func(c *Config) { c.Log.SlowRequest = 0 }, "", ""},
		{"idle timeout off", func(c *Config) { c.Kafka.IdleTimeout = 0 }, "", ""},
		{"producer ids kept", func(c *Config) { c.Kafka.ProducerIDExpiration = 0 }, "", ""},
		{"least durations", func(c *Config) {
			c.Kafka.IdleTimeout, c.Kafka.ProducerIDExpiration = time.Second, time.Minute
			c.Redis.DialTimeout, c.Redis.CommandTimeout, c.Redis.WaitTimeout = time.Millisecond, 3*time.Millisecond, time.Millisecond
			c.Log.SlowRequest = time.Millisecond
			c.Groups.InitialRebalanceDelay, c.Groups.MinSessionTimeout = time.Millisecond, time.Millisecond
			c.Cluster.HeartbeatInterval, c.Cluster.NodeTimeout = 100*time.Millisecond, 101*time.Millisecond
		}, "", ""},
		{"two waits within command timeout", func(c *Config) {
			c.Redis.Addrs = []string{"redis:6379"}
			c.Redis.WaitReplicas, c.Redis.WaitAOF = 1, true
			c.Redis.CommandTimeout, c.Redis.WaitTimeout = 5*time.Second, 2400*time.Millisecond
		}, "", ""},
		{"long wait timeout without waits", func(c *Config) { c.Redis.WaitTimeout = time.Minute }, "", ""},
		{"infinite retention", func(c *Config) { c.Topics.RetentionMs = -1 }, "", ""},
		{"no rebalance delay", func(c *Config) { c.Groups.InitialRebalanceDelay = 0 }, "", ""},
		{"lag off", func(c *Config) { c.Metrics.LagEnabled = false; c.Metrics.LagMaxSeries = 0 }, "", ""},
		{"peers", func(c *Config) {
			c.Redis.Addrs = []string{"redis:6379"}
			c.Cluster.Peers = []string{"0@a:9092", "1@b:9092"}
		}, "", ""},

		{"node id", func(c *Config) { c.Node.ID = -1 }, "node.id", "must be >= 0"},
		{"listen no port", func(c *Config) { c.Kafka.Listen = "x" }, "kafka.listen", `missing port in address "x"`},
		{"listen empty", func(c *Config) { c.Kafka.Listen = "" }, "kafka.listen", "missing port"},
		{"listen port range", func(c *Config) { c.Kafka.Listen = "h:65536" }, "kafka.listen", "port"},
		{"listen named port", func(c *Config) { c.Kafka.Listen = "h:kafka" }, "kafka.listen", "port"},
		{"listen bad host", func(c *Config) { c.Kafka.Listen = "a b:9092" }, "kafka.listen", "neither an IP address nor a DNS name"},
		{"admin listen bad host", func(c *Config) { c.Admin.Listen = "127.0.0.1 :8080" }, "admin.listen", "neither"},
		{"advertised unspecified", func(c *Config) { c.Kafka.Advertised = "0.0.0.0:9092" }, "kafka.advertised", "unspecified"},
		{"advertised no host", func(c *Config) { c.Kafka.Advertised = ":9092" }, "kafka.advertised", "missing host"},
		{"advertised host with a space", func(c *Config) { c.Kafka.Advertised = "a b:9092" }, "kafka.advertised", "neither an IP address nor a DNS name"},
		{"advertised host with a leading space", func(c *Config) { c.Kafka.Advertised = " kgate:9092" }, "kafka.advertised", "neither"},
		{"admin advertised bad host", func(c *Config) { c.Admin.Advertised = "kgate/1:8080" }, "admin.advertised", "neither"},
		{"advertised port 0", func(c *Config) { c.Kafka.Advertised = "h:0" }, "kafka.advertised", "port"},
		{"frame zero", func(c *Config) { c.Kafka.MaxFrameBytes = 0 }, "kafka.max_frame_bytes", "> 0"},
		{"frame below message", func(c *Config) { c.Kafka.MaxFrameBytes = 1000 }, "kafka.max_frame_bytes", "topics.max_message_bytes"},
		{"connections", func(c *Config) { c.Kafka.MaxConnections = -1 }, "kafka.max_connections", ">= 0"},
		{"tail cache", func(c *Config) { c.Kafka.TailCacheBytes = -1 }, "kafka.tail_cache_bytes", ">= 0"},
		{"fetch max bytes", func(c *Config) { c.Kafka.FetchMaxBytes = 1023 }, "kafka.fetch_max_bytes", ">= 1024"},
		{"idle timeout", func(c *Config) { c.Kafka.IdleTimeout = -time.Second }, "kafka.idle_timeout", "0 (never) or at least 1s"},
		{"idle timeout too short", func(c *Config) { c.Kafka.IdleTimeout = time.Nanosecond }, "kafka.idle_timeout", "0 (never) or at least 1s, got 1ns"},
		{"producer id expiration negative", func(c *Config) { c.Kafka.ProducerIDExpiration = -time.Hour }, "kafka.producer_id_expiration", "0 (never) or at least 1m0s"},
		{"producer id expiration too short", func(c *Config) { c.Kafka.ProducerIDExpiration = 59 * time.Second }, "kafka.producer_id_expiration", "at least 1m0s, got 59s"},
		{"redis addr", func(c *Config) { c.Redis.Addrs = []string{"redis"} }, "redis.addrs", "missing port"},
		{"redis addr host", func(c *Config) { c.Redis.Addrs = []string{":6379"} }, "redis.addrs", "missing host"},
		{"redis many addrs", func(c *Config) { c.Redis.Addrs = []string{"a:1", "b:2"} }, "redis.addrs", "redis.cluster"},
		{"cluster no addrs", func(c *Config) { c.Redis.Cluster = true }, "redis.cluster", "requires redis.addrs"},
		{"namespace empty", func(c *Config) { c.Redis.Namespace = "" }, "redis.namespace", "empty"},
		{"namespace hash tag", func(c *Config) { c.Redis.Namespace = "a{b}" }, "redis.namespace", "only letters"},
		{"db negative", func(c *Config) { c.Redis.DB = -1 }, "redis.db", ">= 0"},
		{"db in cluster", func(c *Config) {
			c.Redis.Cluster = true
			c.Redis.Addrs = []string{"a:7000"}
			c.Redis.DB = 2
		}, "redis.db", "cluster"},
		{"dial timeout", func(c *Config) { c.Redis.DialTimeout = 0 }, "redis.dial_timeout", "at least 1ms"},
		{"dial timeout too short", func(c *Config) { c.Redis.DialTimeout = time.Nanosecond }, "redis.dial_timeout", "at least 1ms, got 1ns"},
		{"command timeout", func(c *Config) { c.Redis.CommandTimeout = -time.Second }, "redis.command_timeout", "at least 1ms"},
		{"command timeout too short", func(c *Config) { c.Redis.CommandTimeout = 999 * time.Microsecond }, "redis.command_timeout", "at least 1ms, got 999µs"},
		{"pool size", func(c *Config) { c.Redis.PoolSize = -1 }, "redis.pool_size", ">= 0"},
		{"wait replicas negative", func(c *Config) { c.Redis.WaitReplicas = -1 }, "redis.wait_replicas", ">= 0"},
		{"wait replicas embedded", func(c *Config) { c.Redis.WaitReplicas = 1 }, "redis.wait_replicas", "embedded"},
		{"wait aof embedded", func(c *Config) { c.Redis.WaitAOF = true }, "redis.wait_aof", "embedded"},
		{"username embedded", func(c *Config) { c.Redis.Username = "kgate" }, "redis.username", "requires redis.addrs"},
		{"password embedded", func(c *Config) { c.Redis.Password = "secret" }, "redis.password", "requires redis.addrs"},
		{"wait timeout", func(c *Config) { c.Redis.WaitTimeout = 0 }, "redis.wait_timeout", "at least 1ms"},
		// WAIT 0 (500µs in whole milliseconds) blocks until the command timeout.
		{"wait timeout below a millisecond", func(c *Config) {
			c.Redis.Addrs = []string{"redis:6379"}
			c.Redis.WaitReplicas = 1
			c.Redis.WaitTimeout = 500 * time.Microsecond
		}, "redis.wait_timeout", "at least 1ms, got 500µs"},
		{"wait timeout fills command timeout", func(c *Config) {
			c.Redis.Addrs = []string{"redis:6379"}
			c.Redis.WaitReplicas = 1
			c.Redis.WaitTimeout = c.Redis.CommandTimeout
		}, "redis.wait_timeout", "less than redis.command_timeout"},
		{"two waits fill command timeout", func(c *Config) {
			c.Redis.Addrs = []string{"redis:6379"}
			c.Redis.WaitReplicas, c.Redis.WaitAOF = 1, true
			c.Redis.CommandTimeout, c.Redis.WaitTimeout = 5*time.Second, 2500*time.Millisecond
		}, "redis.wait_timeout", "2 waits"},
		{"admin listen", func(c *Config) { c.Admin.Listen = "nope" }, "admin.listen", "missing port"},
		{"log level", func(c *Config) { c.Log.Level = "trace" }, "log.level", `"trace"`},
		{"log format", func(c *Config) { c.Log.Format = "text" }, "log.format", `"text"`},
		{"slow request", func(c *Config) { c.Log.SlowRequest = -1 }, "log.slow_request", "0 (never) or at least 1ms"},
		{"slow request too short", func(c *Config) { c.Log.SlowRequest = time.Microsecond }, "log.slow_request", "at least 1ms, got 1µs"},
		{"partitions", func(c *Config) { c.Topics.Partitions = 0 }, "topics.partitions", ">= 1"},
		{"retention zero", func(c *Config) { c.Topics.RetentionMs = 0 }, "topics.retention_ms", "-1"},
		{"retention below -1", func(c *Config) { c.Topics.RetentionMs = -2 }, "topics.retention_ms", "-1"},
		{"retention bytes", func(c *Config) { c.Topics.RetentionBytes = 0 }, "topics.retention_bytes", "-1"},
		{"max message", func(c *Config) { c.Topics.MaxMessageBytes = 0 }, "topics.max_message_bytes", "> 0"},
		{"rebalance delay", func(c *Config) { c.Groups.InitialRebalanceDelay = -1 }, "groups.initial_rebalance_delay", "0 (none) or at least 1ms"},
		{"rebalance delay too short", func(c *Config) { c.Groups.InitialRebalanceDelay = time.Nanosecond }, "groups.initial_rebalance_delay", "at least 1ms, got 1ns"},
		{"min session", func(c *Config) { c.Groups.MinSessionTimeout = 0 }, "groups.min_session_timeout", "at least 1ms"},
		{"min session too short", func(c *Config) { c.Groups.MinSessionTimeout = time.Nanosecond }, "groups.min_session_timeout", "at least 1ms, got 1ns"},
		{"max session", func(c *Config) { c.Groups.MaxSessionTimeout = time.Second }, "groups.max_session_timeout", "min_session_timeout"},
		{"heartbeat", func(c *Config) { c.Cluster.HeartbeatInterval = 0 }, "cluster.heartbeat_interval", "at least 100ms"},
		{"heartbeat too short", func(c *Config) { c.Cluster.HeartbeatInterval = time.Nanosecond }, "cluster.heartbeat_interval", "at least 100ms, got 1ns"},
		{"node timeout", func(c *Config) { c.Cluster.NodeTimeout = c.Cluster.HeartbeatInterval }, "cluster.node_timeout", "heartbeat_interval"},
		{"peer no id", func(c *Config) { c.Cluster.Peers = []string{"a:9092"} }, "cluster.peers", "id@host:port"},
		{"peer bad id", func(c *Config) { c.Cluster.Peers = []string{"x@a:9092"} }, "cluster.peers", "id must be"},
		{"peer bad addr", func(c *Config) { c.Cluster.Peers = []string{"1@a"} }, "cluster.peers", "missing port"},
		{"peer twice", func(c *Config) { c.Cluster.Peers = []string{"1@a:1", "1@b:2"} }, "cluster.peers", "twice"},
		{"peers embedded", func(c *Config) { c.Cluster.Peers = []string{"0@a:9092", "1@b:9092"} }, "cluster.peers", "requires redis.addrs"},
		{"lag series", func(c *Config) { c.Metrics.LagMaxSeries = 0 }, "metrics.lag_max_series", ">= 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.mutate(&c)
			err := c.Validate()
			if tt.wantKey == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if got := errorKeys(err); !slices.Equal(got, []string{tt.wantKey}) {
				t.Fatalf("Validate() = %v; keys %q, want [%q]", err, got, tt.wantKey)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "configs: "+tt.wantKey+": ") || !strings.Contains(msg, tt.wantMsg) {
				t.Fatalf("Validate() = %q, want prefix %q and %q", msg, "configs: "+tt.wantKey+": ", tt.wantMsg)
			}
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	c := Default()
	c.Log.Level = "loud"
	c.Topics.Partitions = 0
	got := errorKeys(c.Validate())
	want := []string{"log.level", "topics.partitions"}
	if !slices.Equal(got, want) {
		t.Fatalf("keys = %q, want %q", got, want)
	}
}

func TestAdvertisedAddr(t *testing.T) {
	tests := []struct {
		advertised, bound, want string
	}{
		{"", "0.0.0.0:9092", "127.0.0.1:9092"},
		{"", "[::]:40001", "127.0.0.1:40001"},
		{"", ":9092", "127.0.0.1:9092"},
		{"", "10.1.2.3:9092", "10.1.2.3:9092"},
		{"", "kgate.local:9092", "kgate.local:9092"},
		{"gw1.example:19092", "0.0.0.0:9092", "gw1.example:19092"},
	}
	for _, tt := range tests {
		k := Kafka{Advertised: tt.advertised}
		if got := k.AdvertisedAddr(tt.bound); got != tt.want {
			t.Errorf("Kafka{Advertised: %q}.AdvertisedAddr(%q) = %q, want %q", tt.advertised, tt.bound, got, tt.want)
		}
	}
}

func TestParsePeers(t *testing.T) {
	got, err := Cluster{Peers: []string{"0@a:9092", "7@[::1]:9093"}}.ParsePeers()
	if err != nil {
		t.Fatal(err)
	}
	want := []Peer{{ID: 0, Addr: "a:9092"}, {ID: 7, Addr: "[::1]:9093"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ParsePeers() = %v, want %v", got, want)
	}
}
