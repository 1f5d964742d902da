// Package coordinator keeps Kafka consumer-group membership (the classic
// protocol) in memory: members, generations, rebalances, session timers and
// static membership. Apache Kafka's GroupCoordinator (3.x, the Scala classic
// coordinator) is the reference; where this package differs it says so below.
// The initial delayed join (group.initial.rebalance.delay.ms) follows Apache
// 4.x's coordinator (GroupMetadataManager, which replaced the Scala one): it
// begins whenever an Empty group rebalances and is extended while new members
// come, at any generation (3.x: extended at generation 0 only); a LeaveGroup
// does not end it early, a session expiry that leaves every remaining member
// joined does (3.x: only its timer ends it).
//
// It does not store offsets. The gateway writes committed offsets to Redis and
// asks ValidateCommit / ValidateTxnCommit whether a commit's member, instance
// id and generation are acceptable; a successful member commit counts as a
// heartbeat, as in Apache.
//
// # Ownership
//
// Each group is owned by one goroutine (group.manage, modelled on franz-go
// kfake's group.manage). Requests and timer expiries reach it as closures on
// one unbuffered channel, so the group's fields need no mutex. A JoinGroup or
// SyncGroup that must wait for other members parks a buffered reply channel on
// the member; the goroutine answers it exactly once and never blocks doing so.
// The Coordinator's mutex guards only the map of groups. Close stops every
// group goroutine, answers every parked request with NOT_COORDINATOR, stops
// every timer and waits; requests after Close get COORDINATOR_NOT_AVAILABLE.
//
// Timers are time.AfterFunc timers whose callbacks only post an event to the
// group goroutine, so tests drive time with testing/synctest.
//
// # Supported requests
//
//	JoinGroup   v0-v9   KIP-394 MEMBER_ID_REQUIRED from v4, KIP-345 static members from v5,
//	                    nullable protocol from v7, KIP-800 reason (logged) from v8,
//	                    KIP-814 SkipAssignment from v9
//	SyncGroup   v0-v5   protocol type/name check at v5
//	Heartbeat   v0-v4
//	LeaveGroup  v0-v5   batch by member id and/or group.instance.id from v3, reason (logged) at v5
//	OffsetCommit / TxnOffsetCommit identity checks: ValidateCommit, ValidateTxnCommit
//	DescribeGroups / ListGroups / DeleteGroups / OffsetDelete data: Describe, List, Delete
//
// # Skipped features and deviations from Apache Kafka
//
//   - group.max.size (GROUP_MAX_SIZE_REACHED) is not enforced.
//   - State is in memory only and not shared between gateways: a group must be
//     coordinated by one gateway (the gateway's FindCoordinator decides), and a
//     restart loses membership; clients then rejoin after UNKNOWN_MEMBER_ID.
//   - An Empty group with no pending members is dropped from memory after
//     Config.EmptyGroupRetention (default 10m). Apache drops an Empty group when
//     its last offset expires; offsets live in Redis here, so the gateway should
//     report a group that has offsets but is unknown here as Empty.
//   - The new consumer protocol (KIP-848, ConsumerGroupHeartbeat) is not here.
//   - A static member rejoining a Stable group keeps its assignment without a
//     rebalance when the selected protocol is unchanged (Apache's rule) and, for
//     protocol type "consumer", its subscribed topics are unchanged (Apache does
//     not look at the topics; a changed subscription rebalances here).
//   - A static member's rejoin also updates its client id and host for Describe.
//   - A JoinGroup or SyncGroup whose context ends is answered REBALANCE_IN_PROGRESS
//     and its parked reply is withdrawn: a new member (never answered) is removed
//     at once (Apache waits for its 5-minute new-member join timeout), an existing
//     member stays but counts as not rejoined. A parked request superseded by a
//     second one for the same member is answered REBALANCE_IN_PROGRESS (Apache
//     drops the callback).
//   - A session timer that expires while its member waits in a rebalance is re-armed
//     (Apache leaves it unarmed until the rebalance step completes).
//   - Protocol vote ties, a replacement leader and member lists follow join order
//     (Apache uses hash-map order).
//   - In a LeaveGroup batch the join phase is checked for completion once, after
//     the whole batch (Apache checks after each member).
//   - Describe reports Protocol, member Metadata and Assignment in every state;
//     Apache's DescribeGroups shows them only for Stable groups (the gateway
//     blanks them).
//   - LeaveGroup with a static member's member id removes it, as in Apache (Java
//     clients with group.instance.id simply do not send LeaveGroup on close).
//   - ValidateCommit answers a generation >= 0 to an unknown group
//     ILLEGAL_GENERATION whatever the OffsetCommit version (Apache: GROUP_ID_NOT_FOUND
//     from v9): after a restart every group is unknown here, and that error makes
//     classic members rejoin.
package coordinator
