package configs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// writeYAML writes body to a file in a temporary directory and returns its path.
func writeYAML(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kgate.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadDefaults(t *testing.T) {
	got, err := Load(nil, []string{"PATH=/usr/bin", "HOME=/root"})
	if err != nil {
		t.Fatal(err)
	}
	if want := Default(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Load() = %+v\nwant %+v", got, want)
	}
}

func TestLoadLayers(t *testing.T) {
	tests := []struct {
		name string
		yaml string // written to a file passed as --config when not empty
		env  []string
		args []string
		want func(c *Config) // applied to Default()
	}{
		{
			name: "yaml overrides defaults",
			yaml: `
kafka:
  listen: "127.0.0.1:19092"
  advertised: "gw.local:19092"
redis:
  addrs: ["r1:6379"]
  namespace: test
groups:
  max_session_timeout: 10m
log:
  slow_request: 0
`,
			want: func(c *Config) {
				c.Kafka.Listen = "127.0.0.1:19092"
				c.Kafka.Advertised = "gw.local:19092"
				c.Redis.Addrs = []string{"r1:6379"}
				c.Redis.Namespace = "test"
				c.Groups.MaxSessionTimeout = 10 * time.Minute
				c.Log.SlowRequest = 0
			},
		},
		{
			name: "empty yaml sections set nothing",
			yaml: "kafka:\ngroups: {}\n",
			want: func(c *Config) {},
		},
		{
			name: "env overrides yaml",
			yaml: "kafka:\n  listen: 127.0.0.1:1\nnode:\n  id: 1\n",
			env:  []string{"KGATE_KAFKA_LISTEN=127.0.0.1:2"},
			want: func(c *Config) { c.Kafka.Listen = "127.0.0.1:2"; c.Node.ID = 1 },
		},
		{
			name: "flags override env",
			yaml: "kafka:\n  listen: 127.0.0.1:1\n",
			env:  []string{"KGATE_KAFKA_LISTEN=127.0.0.1:2"},
			args: []string{"--kafka.listen", "127.0.0.1:3"},
			want: func(c *Config) { c.Kafka.Listen = "127.0.0.1:3" },
		},
		{
			name: "unset flags keep yaml and env",
			yaml: "kafka:\n  listen: 127.0.0.1:1\n",
			env:  []string{"KGATE_LOG_LEVEL=debug"},
			args: []string{"--node.id=4"},
			want: func(c *Config) { c.Kafka.Listen = "127.0.0.1:1"; c.Log.Level = "debug"; c.Node.ID = 4 },
		},
		{
			name: "env key with underscores",
			env:  []string{"KGATE_KAFKA_MAX_FRAME_BYTES=2097152", "KGATE_GROUPS_INITIAL_REBALANCE_DELAY=0"},
			want: func(c *Config) { c.Kafka.MaxFrameBytes = 2 << 20; c.Groups.InitialRebalanceDelay = 0 },
		},
		{
			name: "env comma list",
			env:  []string{"KGATE_REDIS_ADDRS=a:7000, b:7001,,c:7002,", "KGATE_REDIS_CLUSTER=true"},
			want: func(c *Config) {
				c.Redis.Addrs = []string{"a:7000", "b:7001", "c:7002"}
				c.Redis.Cluster = true
			},
		},
		{
			name: "flag comma list",
			args: []string{"--redis.addrs", "a:7000,b:7001", "--redis.cluster"},
			want: func(c *Config) { c.Redis.Addrs = []string{"a:7000", "b:7001"}; c.Redis.Cluster = true },
		},
		{
			name: "repeated list flag",
			args: []string{"--redis.addrs", "r1:6379", "--cluster.peers", "1@a:9092", "--cluster.peers=2@b:9092"},
			want: func(c *Config) {
				c.Redis.Addrs = []string{"r1:6379"}
				c.Cluster.Peers = []string{"1@a:9092", "2@b:9092"}
			},
		},
		{
			name: "yaml comma string list",
			yaml: "redis:\n  addrs: [r1:6379]\ncluster:\n  peers: \"0@a:9092, 1@b:9092\"\n",
			want: func(c *Config) {
				c.Redis.Addrs = []string{"r1:6379"}
				c.Cluster.Peers = []string{"0@a:9092", "1@b:9092"}
			},
		},
		{
			name: "empty env clears yaml list",
			yaml: "redis:\n  addrs: [r1:6379]\n",
			env:  []string{"KGATE_REDIS_ADDRS="},
			want: func(c *Config) {},
		},
		{
			name: "empty flag clears env list",
			env:  []string{"KGATE_REDIS_ADDRS=r1:6379"},
			args: []string{"--redis.addrs="},
			want: func(c *Config) {},
		},
		{
			name: "empty env disables admin",
			env:  []string{"KGATE_ADMIN_LISTEN="},
			want: func(c *Config) { c.Admin.Listen = "" },
		},
		{
			name: "durations from each layer",
			yaml: "redis:\n  command_timeout: 1m30s\n",
			env:  []string{"KGATE_REDIS_WAIT_TIMEOUT=250ms"},
			args: []string{"--redis.dial_timeout", "750ms", "--cluster.node_timeout=1m"},
			want: func(c *Config) {
				c.Redis.CommandTimeout = 90 * time.Second
				c.Redis.WaitTimeout = 250 * time.Millisecond
				c.Redis.DialTimeout = 750 * time.Millisecond
				c.Cluster.NodeTimeout = time.Minute
			},
		},
		{
			name: "booleans",
			env:  []string{"KGATE_TOPICS_AUTOCREATE=false"},
			args: []string{"--metrics.lag_enabled=false"},
			want: func(c *Config) { c.Topics.AutoCreate = false; c.Metrics.LagEnabled = false },
		},
		{
			name: "int64 and negative values",
			env:  []string{"KGATE_TOPICS_RETENTION_MS=-1"},
			args: []string{"--topics.retention_bytes", "10737418240"},
			want: func(c *Config) { c.Topics.RetentionMs = -1; c.Topics.RetentionBytes = 10 << 30 },
		},
		{
			// Kubernetes service links for Services kgate-redis, kgate-admin and kgate-kafka-udp.
			name: "kubernetes service links ignored",
			env: []string{
				"KGATE_REDIS_SERVICE_HOST=10.0.0.7",
				"KGATE_REDIS_SERVICE_PORT=6379",
				"KGATE_REDIS_SERVICE_PORT_REDIS=6379",
				"KGATE_REDIS_PORT=tcp://10.0.0.7:6379",
				"KGATE_REDIS_PORT_6379_TCP=tcp://10.0.0.7:6379",
				"KGATE_REDIS_PORT_6379_TCP_ADDR=10.0.0.7",
				"KGATE_REDIS_PORT_6379_TCP_PORT=6379",
				"KGATE_REDIS_PORT_6379_TCP_PROTO=tcp",
				"KGATE_ADMIN_SERVICE_PORT_HTTP_API=8080",
				"KGATE_ADMIN_PORT=tcp://10.0.0.8:8080",
				"KGATE_KAFKA_UDP_PORT=udp://10.0.0.9:53",
				"KGATE_KAFKA_UDP_PORT_53_UDP=udp://10.0.0.9:53",
				"KGATE_KAFKA_UDP_PORT_53_SCTP_ADDR=10.0.0.9",
				"KGATE_KAFKA_LISTEN=127.0.0.1:1", // a real key beside them still applies
			},
			want: func(c *Config) { c.Kafka.Listen = "127.0.0.1:1" },
		},
		{
			name: "quoted yaml strings keep their text",
			yaml: "redis:\n  addrs: [r1:6379]\n  password: \"0123\"\n  namespace: '007'\n  username: \"true\"\n",
			want: func(c *Config) {
				c.Redis.Addrs = []string{"r1:6379"}
				c.Redis.Password, c.Redis.Namespace, c.Redis.Username = "0123", "007", "true"
			},
		},
		{
			name: "env strings keep their text",
			env:  []string{"KGATE_REDIS_ADDRS=r1:6379", "KGATE_REDIS_PASSWORD=0x1F", "KGATE_REDIS_NAMESPACE=007", "KGATE_REDIS_USERNAME=1e3"},
			want: func(c *Config) {
				c.Redis.Addrs = []string{"r1:6379"}
				c.Redis.Password, c.Redis.Namespace, c.Redis.Username = "0x1F", "007", "1e3"
			},
		},
		{
			name: "plain integers from each layer",
			yaml: "node:\n  id: 10\nmetrics:\n  lag_max_series: \"20\"\n",
			env:  []string{"KGATE_KAFKA_MAX_CONNECTIONS=+5", "KGATE_REDIS_POOL_SIZE=0"},
			args: []string{"--topics.partitions", "12", "--kafka.tail_cache_bytes=0"},
			want: func(c *Config) {
				c.Node.ID, c.Metrics.LagMaxSeries, c.Kafka.MaxConnections = 10, 20, 5
				c.Topics.Partitions, c.Kafka.TailCacheBytes = 12, 0
			},
		},
		{
			name: "unrelated variables ignored",
			env:  []string{"KGATE_TEST_REDIS=x", "KGATE=1", "KGATEWAY_X=1", "kgate_kafka_listen=bad", "PATH=/bin"},
			want: func(c *Config) {},
		},
		{
			name: "last duplicate variable wins",
			env:  []string{"KGATE_NODE_ID=1", "KGATE_NODE_ID=2"},
			want: func(c *Config) { c.Node.ID = 2 },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if tt.yaml != "" {
				args = append([]string{"--config", writeYAML(t, tt.yaml)}, args...)
			}
			got, err := Load(args, tt.env)
			if err != nil {
				t.Fatalf("Load() error: %v", err)
			}
			want := Default()
			tt.want(&want)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("Load() =\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

func TestLoadConfigPath(t *testing.T) {
	fromEnv := writeYAML(t, "node:\n  id: 1\n")
	fromFlag := writeYAML(t, "node:\n  id: 2\n")
	tests := []struct {
		name   string
		args   []string
		env    []string
		wantID int32
	}{
		{"KGATE_CONFIG", nil, []string{"KGATE_CONFIG=" + fromEnv}, 1},
		{"--config beats KGATE_CONFIG", []string{"--config", fromFlag}, []string{"KGATE_CONFIG=" + fromEnv}, 2},
		{"--config= disables KGATE_CONFIG", []string{"--config="}, []string{"KGATE_CONFIG=" + fromEnv}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(tt.args, tt.env)
			if err != nil {
				t.Fatal(err)
			}
			if c.Node.ID != tt.wantID {
				t.Fatalf("node.id = %d, want %d", c.Node.ID, tt.wantID)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		env     []string
		args    []string
		wantKey string // the *KeyError key, if the error is about a value
		wantMsg string // substring of the error
	}{
		{name: "unknown yaml key", yaml: "kafka:\n  listn: x\n", wantMsg: `unknown key "kafka.listn"`},
		{name: "unknown yaml section", yaml: "kafak:\n  listen: x\n", wantMsg: `unknown key "kafak.listen"`},
		{name: "yaml scalar section", yaml: "kafka: 5\n", wantMsg: `unknown key "kafka"`},
		{name: "bad yaml", yaml: "kafka: [\n", wantMsg: "kgate.yaml"},
		// The YAML parser read the first document alone: the second's keys were ignored without a word.
		{name: "yaml second document", yaml: "kafka:\n  listen: 127.0.0.1:9092\n---\nkafka:\n  listen: 127.0.0.1:9093\n",
			wantMsg: `kgate.yaml: a second YAML document (after a "---" line) begins at line 4`},
		{name: "yaml second document after an empty one", yaml: "---\n---\nnode:\n  id: 3\n", wantMsg: "second YAML document"},
		{name: "yaml second document unparsable", yaml: "node:\n  id: 3\n---\nkafka: [\n", wantMsg: "kgate.yaml"},
		{name: "missing file", args: []string{"--config", "/nonexistent/kgate.yaml"}, wantMsg: "/nonexistent/kgate.yaml"},
		{name: "unknown env key", env: []string{"KGATE_KAFKA_LISTN=x"}, wantMsg: `KGATE_KAFKA_LISTN: unknown key "kafka.listn"`},
		{name: "unknown flag", args: []string{"--kafka.listn", "x"}, wantMsg: "--kafka.listn"},
		{name: "positional argument", args: []string{"serve"}, wantMsg: `unexpected argument "serve"`},
		{name: "bad int from env", env: []string{"KGATE_KAFKA_MAX_FRAME_BYTES=lots"}, wantKey: "kafka.max_frame_bytes", wantMsg: `"lots"`},
		{name: "bad bool from env", env: []string{"KGATE_TOPICS_AUTOCREATE=maybe"}, wantKey: "topics.autocreate"},
		{name: "int32 overflow", yaml: "node:\n  id: 4294967296\n", wantKey: "node.id", wantMsg: "out of range"},
		{name: "fractional int", yaml: "topics:\n  partitions: 1.5\n", wantKey: "topics.partitions", wantMsg: "not an integer"},
		{name: "bare number duration", yaml: "redis:\n  dial_timeout: 2\n", wantKey: "redis.dial_timeout", wantMsg: "no unit"},
		{name: "bad duration from env", env: []string{"KGATE_LOG_SLOW_REQUEST=1x"}, wantKey: "log.slow_request", wantMsg: `"1x"`},
		{name: "list where scalar expected", yaml: "kafka:\n  listen: [a, b]\n", wantKey: "kafka.listen"},
		{name: "bad flag value", args: []string{"--redis.db", "one"}, wantMsg: "redis.db"},
		{name: "validation after merge", args: []string{"--kafka.listen", "x"}, wantKey: "kafka.listen", wantMsg: `missing port in address "x"`},
		{name: "validation from env", env: []string{"KGATE_REDIS_CLUSTER=1"}, wantKey: "redis.cluster"},
		{name: "typo beside service links", env: []string{"KGATE_REDIS_SERVICE_HOST=10.0.0.7", "KGATE_REDIS_ADRS=r:6379"}, wantMsg: `KGATE_REDIS_ADRS: unknown key "redis.adrs"`},
		{name: "port without scheme is no service link", env: []string{"KGATE_REDIS_PORT=6379"}, wantMsg: `unknown key "redis.port"`},
		{name: "service host misspelt", env: []string{"KGATE_REDIS_SERVICE_HOSTS=10.0.0.7"}, wantMsg: `unknown key "redis.service_hosts"`},
		{name: "link port of unknown protocol", env: []string{"KGATE_REDIS_PORT_6379_HTTP=tcp://10.0.0.7:6379"}, wantMsg: `unknown key "redis.port_6379_http"`},
		// YAML reads these unquoted scalars as numbers or bools, which weak typing turned into other text.
		{name: "yaml octal string", yaml: "redis:\n  password: 0123\n", wantKey: "redis.password", wantMsg: "as a number, not a string: quote it"},
		{name: "yaml hex string", yaml: "redis:\n  password: 0x1F\n", wantKey: "redis.password", wantMsg: "as a number"},
		{name: "yaml float string", yaml: "redis:\n  password: 1e3\n", wantKey: "redis.password", wantMsg: "as a number"},
		{name: "yaml bool string", yaml: "redis:\n  username: true\n", wantKey: "redis.username", wantMsg: "as a bool"},
		{name: "yaml number namespace", yaml: "redis:\n  namespace: 007\n", wantKey: "redis.namespace", wantMsg: "as a number"},
		{name: "yaml number listen", yaml: "kafka:\n  listen: 9092\n", wantKey: "kafka.listen", wantMsg: "kgate.yaml"},
		// YAML reads a key with no value as null, which decoded to the zero value over the default.
		{name: "yaml duration without value", yaml: "kafka:\n  idle_timeout:\n", wantKey: "kafka.idle_timeout", wantMsg: "no value: give one or remove the key"},
		{name: "yaml bool without value", yaml: "topics:\n  autocreate:\n", wantKey: "topics.autocreate", wantMsg: "no value"},
		{name: "yaml int without value", yaml: "node:\n  id: ~\n", wantKey: "node.id", wantMsg: "no value"},
		{name: "yaml string without value", yaml: "admin:\n  listen: null\n", wantKey: "admin.listen", wantMsg: "no value"},
		// Weak typing read a quoted empty string as false, where an empty variable is refused.
		{name: "yaml empty string bool", yaml: "topics:\n  autocreate: \"\"\n", wantKey: "topics.autocreate", wantMsg: "empty"},
		// Weak typing read an empty variable as false or 0.
		{name: "empty bool from env", env: []string{"KGATE_TOPICS_AUTOCREATE="}, wantKey: "topics.autocreate", wantMsg: "KGATE_TOPICS_AUTOCREATE is empty"},
		{name: "empty int from env", env: []string{"KGATE_NODE_ID="}, wantKey: "node.id", wantMsg: "KGATE_NODE_ID is empty"},
		{name: "empty int64 from env", env: []string{"KGATE_KAFKA_TAIL_CACHE_BYTES="}, wantKey: "kafka.tail_cache_bytes", wantMsg: "KGATE_KAFKA_TAIL_CACHE_BYTES is empty"},
		{name: "empty duration from env", env: []string{"KGATE_LOG_SLOW_REQUEST="}, wantKey: "log.slow_request", wantMsg: "KGATE_LOG_SLOW_REQUEST is empty"},
		// Base 0 read these as 8, 16 and 10; YAML reads its numbers the same way.
		{name: "octal int from env", env: []string{"KGATE_NODE_ID=010"}, wantKey: "node.id", wantMsg: `"010" is not an integer in plain base 10`},
		{name: "hex int from env", env: []string{"KGATE_NODE_ID=0x10"}, wantKey: "node.id", wantMsg: `"0x10"`},
		{name: "underscored int from env", env: []string{"KGATE_KAFKA_MAX_FRAME_BYTES=2_097_152"}, wantKey: "kafka.max_frame_bytes", wantMsg: `"2_097_152"`},
		{name: "octal int flag", args: []string{"--node.id", "010"}, wantMsg: `"010" for "--node.id"`},
		{name: "hex int64 flag", args: []string{"--topics.retention_ms=0x10"}, wantMsg: `"0x10" for "--topics.retention_ms"`},
		{name: "yaml octal int", yaml: "node:\n  id: 010\n", wantKey: "node.id", wantMsg: `"010"`},
		{name: "yaml 0o octal int", yaml: "node:\n  id: 0o10\n", wantKey: "node.id", wantMsg: `"0o10"`},
		{name: "yaml dotted key octal int", yaml: "node.id: 010\n", wantKey: "node.id", wantMsg: `"010"`},
		{name: "yaml merged octal int", yaml: "node:\n  <<: [{id: 010}]\n", wantKey: "node.id", wantMsg: `"010"`},
		{name: "yaml hex int", yaml: "redis:\n  db: 0x1\n", wantKey: "redis.db", wantMsg: `"0x1"`},
		{name: "yaml underscored int", yaml: "kafka:\n  tail_cache_bytes: 1_000\n", wantKey: "kafka.tail_cache_bytes", wantMsg: `"1_000"`},
		{name: "yaml exponent int", yaml: "topics:\n  partitions: 1e1\n", wantKey: "topics.partitions", wantMsg: `"1e1"`},
		{name: "yaml bool int", yaml: "kafka:\n  max_connections: true\n", wantKey: "kafka.max_connections", wantMsg: "as a bool, not an integer"},
		{name: "yaml number bool", yaml: "topics:\n  autocreate: 0\n", wantKey: "topics.autocreate", wantMsg: "as a number, not a bool"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if tt.yaml != "" {
				args = append([]string{"--config", writeYAML(t, tt.yaml)}, args...)
			}
			_, err := Load(args, tt.env)
			if err == nil {
				t.Fatal("Load() succeeded, want an error")
			}
			if !strings.HasPrefix(err.Error(), "configs: ") {
				t.Errorf("error %q lacks the configs: prefix", err)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not contain %q", err, tt.wantMsg)
			}
			if tt.wantKey != "" {
				if got := errorKeys(err); !slices.Equal(got, []string{tt.wantKey}) {
					t.Errorf("error %q: keys %q, want [%q]", err, got, tt.wantKey)
				}
			}
		})
	}
}

func TestLoadHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help"} {
		t.Run(arg, func(t *testing.T) {
			var buf bytes.Buffer
			helpOutput = &buf
			t.Cleanup(func() { helpOutput = os.Stdout })

			_, err := Load([]string{arg}, nil)
			if !errors.Is(err, ErrHelp) {
				t.Fatalf("Load(%q) error = %v, want ErrHelp", arg, err)
			}
			out := buf.String()
			for _, want := range []string{
				"--config", "KGATE_KAFKA_LISTEN",
				`--kafka.listen string`, `(default "0.0.0.0:9092")`,
				"--groups.max_session_timeout duration", "(default 30m0s)",
				"--redis.addrs strings",
				"--kafka.max_frame_bytes int32", "(default 104857600)",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("usage lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

func TestSchema(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range fields {
		if seen[f.env] {
			t.Errorf("env name %s used twice", f.env)
		}
		seen[f.env] = true
		if key, ok := envKey(f.env); !ok || key != f.key {
			t.Errorf("envKey(%q) = %q, %v; want %q", f.env, key, ok, f.key)
		}
	}
}

func TestExampleFiles(t *testing.T) {
	t.Run("kgate.example.yaml is the defaults", func(t *testing.T) {
		layer, err := readFile("kgate.example.yaml")
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fields {
			if _, ok := layer[f.key]; !ok {
				t.Errorf("kgate.example.yaml lacks %s", f.key)
			}
		}
		got, err := Load([]string{"--config", "kgate.example.yaml"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if want := Default(); !reflect.DeepEqual(got, want) {
			t.Fatalf("kgate.example.yaml loads as\n%+v\nwant Default()\n%+v", got, want)
		}
	})
	t.Run("cluster.example.yaml", func(t *testing.T) {
		got, err := Load([]string{"--config", "cluster.example.yaml"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Redis.Cluster || len(got.Redis.Addrs) != 3 {
			t.Fatalf("redis = %+v, want cluster with 3 seeds", got.Redis)
		}
	})
}

// TestLoadYAMLDocumentMarkers: a file's one document may open with "---" and end with "---" or "...",
// and a document after it that sets nothing (comments alone) is no second document to refuse.
func TestLoadYAMLDocumentMarkers(t *testing.T) {
	for _, body := range []string{
		"---\nnode:\n  id: 3\n",
		"node:\n  id: 3\n---\n",
		"node:\n  id: 3\n...\n",
		"---\nnode:\n  id: 3\n---\n# nothing here\n",
	} {
		c, err := Load([]string{"--config", writeYAML(t, body)}, nil)
		if err != nil || c.Node.ID != 3 {
			t.Errorf("%q: node.id %d, %v; want 3", body, c.Node.ID, err)
		}
	}
}

// TestLoadYAMLMergesAndAnchors: the base-10 check reads merged keys as YAML merges them (the mapping's
// own key wins over a merged one), and a file whose anchor contains itself is refused, not walked for
// good.
func TestLoadYAMLMergesAndAnchors(t *testing.T) {
	c, err := Load([]string{"--config", writeYAML(t, "node:\n  id: 5\n  <<: {id: 7}\n")}, nil)
	if err != nil || c.Node.ID != 5 {
		t.Fatalf("node.id %d, %v; want the mapping's own 5", c.Node.ID, err)
	}
	c, err = Load([]string{"--config", writeYAML(t, "node:\n  <<: {id: 010}\n  id: \"8\"\n")}, nil)
	if err != nil || c.Node.ID != 8 {
		t.Fatalf("node.id %d, %v; want the mapping's own \"8\", the merged 010 replaced", c.Node.ID, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := Load([]string{"--config", writeYAML(t, "node: &a\n  x: *a\n")}, nil)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("an anchor within itself loaded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an anchor within itself: Load did not return")
	}
}
