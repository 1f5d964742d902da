package redisstore

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/redis/go-redis/v9"
)

// Errors callers classify with errors.Is. Anything else returned by the store is a Redis failure:
// see IsUnavailable.
var (
	ErrUnknownTopic       = errors.New("redisstore: unknown topic")
	ErrTopicExists        = errors.New("redisstore: topic already exists")
	ErrTopicCollides      = errors.New("redisstore: topic name collides with a registered topic") // *CollisionError
	ErrUnknownPartition   = errors.New("redisstore: unknown partition")
	ErrInvalidPartitions  = errors.New("redisstore: invalid partition count")
	ErrOffsetOutOfRange   = errors.New("redisstore: offset out of range")
	ErrOutOfOrderSequence = errors.New("redisstore: out of order sequence number")
	ErrInvalidEpoch       = errors.New("redisstore: invalid producer epoch")
	ErrUnknownProducer    = errors.New("redisstore: unknown producer id")
	ErrNodeIDInUse        = errors.New("redisstore: node id in use by a live gateway")
	ErrTooManyHeaders     = errors.New("redisstore: record has too many headers") // MaxRecordHeaders
	// ErrClusterNode: Open without Options.Cluster reached a Redis Cluster node, which holds only some
	// of the slots: keys of the others would be refused (MOVED), partition by partition.
	ErrClusterNode = errors.New("redisstore: server is a Redis Cluster node; open it as a cluster")
	// ErrNotDurable: the configured replicas or AOF fsync did not confirm a write in time. The write
	// itself happened (Kafka's NOT_ENOUGH_REPLICAS_AFTER_APPEND).
	ErrNotDurable = errors.New("redisstore: write not confirmed by replicas in time")
	// ErrNotOwner: a write of a group's offsets refused because another gateway claimed the group
	// (ClaimGroup) since the writer did. Nothing of it was written.
	ErrNotOwner = errors.New("redisstore: group claimed by another gateway")
)

// CollisionError is ErrTopicCollides naming the registered topic, Other, that Topic differs from only
// in '.' and '_'.
type CollisionError struct{ Topic, Other string }

func (e *CollisionError) Error() string {
	return "redisstore: topic " + e.Topic + " collides with registered topic " + e.Other
}

// Is makes errors.Is(err, ErrTopicCollides) hold.
func (e *CollisionError) Is(target error) bool { return target == ErrTopicCollides }

// ErrOffsetsStored marks a commit failure that came after the offsets themselves were stored (the
// groups index or the streams' consumer groups): the commit is reported failed, for the client to send
// it again, but whoever computed the offsets from the stored ones (a relative reset) must not. It
// wraps the Redis failure and, unlike the errors above, is retriable (IsUnavailable).
var ErrOffsetsStored = errors.New("redisstore: offsets stored, then")

// sentinels are the errors above: outcomes callers map to Kafka codes, never Redis failures.
var sentinels = []error{ErrUnknownTopic, ErrTopicExists, ErrTopicCollides, ErrUnknownPartition, ErrInvalidPartitions,
	ErrOffsetOutOfRange, ErrOutOfOrderSequence, ErrInvalidEpoch, ErrUnknownProducer, ErrNodeIDInUse,
	ErrNotDurable, ErrNotOwner, ErrStreamConflict, ErrTooManyHeaders}

// IsUnavailable reports whether err is a Redis-side failure (network, timeout, cluster redirection,
// loading, read-only replica) that a client should retry.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.Is(err, redis.ErrClosed), errors.As(err, &ne):
		return true
	}
	for _, known := range sentinels {
		if errors.Is(err, known) {
			return false
		}
	}
	return true
}

// OutcomeUnknown reports whether a write that failed with err may have been carried out all the same:
// its answer did not come back in time, or its connection broke after it was sent. A failure to
// connect, the pool's own timeout (redis.ErrPoolTimeout) and an error Redis answered mean it was not;
// a deadline counts as unknown even when it ran out before the write was sent (no way to tell).
func OutcomeUnknown(err error) bool {
	if err == nil || errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrClosed) {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
