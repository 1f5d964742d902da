// Package configs loads and validates kgate's configuration. It is the only
// kgate package that knows koanf; everything else receives a plain Config.
//
// # Layers
//
// Load merges, later wins:
//
//  1. Default().
//  2. The YAML file named by --config, or by KGATE_CONFIG when the flag is
//     absent; no file if both are empty. Unknown keys are errors, and so is
//     a number or bool where a string is expected (password: 0123 would read
//     as 83): quote it. So are a bool where an integer is expected, a number
//     where a bool is, a key with no value (idle_timeout: alone would read
//     as 0, never) and an empty string for a key other than text or a list
//     (autocreate: "" would read as false); a section with no keys (kafka:
//     alone) sets nothing. The file holds one YAML document: a second one
//     that sets anything (after a "---" line) is refused, not ignored.
//  3. KGATE_* environment variables. The key's dots and underscores both
//     become '_' and the name is upper-cased: kafka.max_frame_bytes is
//     KGATE_KAFKA_MAX_FRAME_BYTES. Reading back, only the first '_' after
//     the prefix is a '.', since section names hold none. A variable under a
//     known section (KGATE_KAFKA_*) must name a known key; others, such as
//     KGATE_TEST_*, are ignored. So are the variables of Kubernetes service
//     links (a Service kgate-redis sets KGATE_REDIS_SERVICE_HOST,
//     KGATE_REDIS_PORT=tcp://... and more). An empty value is a value for a
//     string or list key: KGATE_ADMIN_LISTEN= disables the admin API. For
//     any other key it is an error, not false or 0.
//  4. Flags, spelled as the keys: --kafka.listen 127.0.0.1:9092. Only flags
//     actually given override; their defaults, shown by --help, come from
//     Default(). -h/--help prints usage and makes Load return ErrHelp.
//
// Lists (redis.addrs, cluster.peers) are YAML lists or comma-separated
// strings; items are trimmed and empty items dropped. Durations take units
// ("3s", "500ms"); a bare number other than 0 is refused rather than read as
// nanoseconds. Integers are plain base 10, optionally signed, from every
// layer: 010, 0x10, 1_0 and 1e1 are refused rather than read as 8, 16 or 10.
// Integers that do not fit their field are refused.
//
// # Validation
//
// Validate checks the whole Config once and reports every problem as a
// *KeyError naming the dotted key, e.g.
//
//	configs: kafka.listen: missing port in address "x"
//
// Durations other than a 0 that means never or none are at least 1ms, as
// Kafka and Redis count whole milliseconds (WAIT's timeout of 0 blocks);
// kafka.idle_timeout is at least 1s, kafka.producer_id_expiration 1m and
// cluster.heartbeat_interval 100ms (config.go says why).
//
// Tests may build Config literals (start from Default()) and call Validate.
//
// # Advertised address
//
// kafka.advertised is the host:port clients are told to dial. When empty,
// Kafka.AdvertisedAddr derives it from the bound listener address with an
// unspecified host (0.0.0.0, ::, "") replaced by 127.0.0.1, which only suits
// clients on the same host; set it explicitly for anything else, and per
// gateway when several share a namespace. Kafka.AdvertisesLoopback reports
// that case, which cmd/kgate warns of at start when Redis is configured.
package configs
