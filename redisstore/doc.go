// Package redisstore is kgate's Redis data model: the key schema, the Lua scripts that make appends and
// commits atomic, topics, partition streams, producer state and committed offsets. It speaks Go types,
// never Kafka wire types, and is the only kgate package that imports go-redis.
//
// # Key schema
//
// Every key starts with the namespace (default "kgate"). Keys that belong to one partition share the
// Redis Cluster hash tag {<topic>:<partition>}, so a partition's append script touches one slot; keys
// that belong to one consumer group share the hash tag {<8 hex digits of FNV-1a-32(group)>}.
//
//	<ns>:topics                        hash   topic -> JSON {"id","partitions","configs","created","pmeta",
//	                                          "gen"} (pmeta: partitions below it got their meta at
//	                                          creation; gen: the topic's generation)
//	{<ns>:topics}:forms                hash   topic with '.' as '_' -> topic (collision check; the
//	                                          registry's slot, one script writes both)
//	{<ns>:topics}:gen                  string INCR counter of topic creations (generations; the
//	                                          registry's slot, read with an entry by a deletion)
//	<ns>:stream:{<topic>:<p>}          stream one entry per record; offset n <-> entry ID 0-(n+1)
//	<ns>:meta:{<topic>:<p>}            hash   written when the partition is created (topics with pmeta)
//	                                          or by its first append; next (high watermark), start (log
//	                                          start offset), maxts and maxoff (maximum timestamp, its
//	                                          offset), tioff (last time index point), bytes (record
//	                                          bytes appended, bytes_index.go), p:<producer id>
//	                                          and t:<producer id> (idempotence state, time of its
//	                                          last batch), chain (batchLua), gen (the generation of
//	                                          the topic that created it)
//	<ns>:tindex:{<topic>:<p>}          zset   member offset, score running-max timestamp (sparse time
//	                                          index: points at least 512 records apart)
//	<ns>:bindex:{<topic>:<p>}          zset   member total record bytes below the offset in the score
//	                                          (bytes index: a point per MiB appended; bytes_index.go)
//	<ns>:producers:{<topic>:<p>}       hash   producer id -> idempotence state (older kgate; moved to meta)
//	<ns>:producer-id                   string INCR counter for producer IDs (unique across gateways)
//	<ns>:offsets:{<tag>}:<group>       hash   stream key -> committed offset (bare decimal)
//	<ns>:offsets-ts:{<tag>}:<group>    hash   stream key -> "<offset>|<commit epoch ms>" (sidecar)
//	<ns>:offsets-md:{<tag>}:<group>    hash   stream key -> commit metadata
//	<ns>:owner:{<tag>}:<group>         string the claim of the gateway whose writes of the group's
//	                                          offsets are stored (owner.go); expires a day after it
//	<ns>:groups                        set    group IDs with committed offsets
//	<ns>:gateways                      hash   node id -> gateway registration JSON
//	<ns>:appends                       pub/sub "partition grew" notices that wake other gateways' fetches
//	<ns>:appends:{<ns>:<i>}            sharded pub/sub: the same notices on a Redis Cluster, i below
//	                                   AppendShards (sharded_appends.go)
//
// # Stream entries
//
// Offsets are dense: the record at offset n is the entry with ID 0-(n+1) (ID 0-0 is not a valid XADD
// ID). Fields, in order: "ts" (timestamp, epoch ms), "key" (absent when null), "value" (absent when
// null), then one field per header: "h:<name>" with its value, or "hn:<name>" with an empty string when
// the header value is null. Streams keep duplicate field names and their order, so repeated headers
// round-trip.
//
// # Committed offsets
//
// A commit of offset N for (group, partition) writes the canonical hash (N), the timestamp sidecar
// ("N|ms") and the metadata hash in one script on the group's slot, which stores nothing unless the
// group's owner record names the writer's claim (owner.go), and moves the Redis consumer group
// named after the Kafka group on the partition's stream to last-delivered-id 0-N with entries-read N,
// acknowledging every pending entry below N, so XINFO GROUPS and XPENDING agree with Kafka's view.
// The sidecar is advisory: it is never required to read or write the canonical offset.
// DeleteOffsets and DeleteGroup remove the Redis consumer group along with the offsets.
//
// # Durability
//
// With Options.WaitReplicas or WaitAOF, each master's batches are appended and then waited for
// (WAIT / WAITAOF) on one pinned connection: both commands only cover the writes of the connection
// they run on. WAITAOF needs Redis 7.2.
//
// # Embedded store
//
// Open without Addrs runs miniredis in process: topics, appends (idempotence included), reads,
// DeleteRecords, OffsetForTime and committed offsets behave as on Redis. What it lacks:
//   - XGROUP SETID and ENTRIESREAD: a commit moves the Redis consumer group by destroying and
//     recreating it, which drops its pending entries and consumers; XINFO GROUPS shows the right
//     last-delivered-id but no entries-read and no true lag.
//   - Replicas and AOF: with WaitReplicas every append reports ErrNotDurable (WAIT answers 0); with
//     WaitAOF every append reports it too (no WAITAOF).
//   - Persistence: the data lives as long as the Store.
//   - Expiry to the second: keys with a time to live (the groups' owner records) are counted down
//     once a minute (embeddedExpiryTick).
package redisstore
