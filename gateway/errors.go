package gateway

import (
	"context"
	"errors"
	"net"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kgate/kgate/redisstore"
)

// errCode maps a store error to the Kafka error code a data-path (produce, fetch, list offsets)
// response carries. Redis failures, timeouts included, become NOT_LEADER_OR_FOLLOWER: the client
// refreshes metadata and retries. It is the one retriable code every client handles on every data API;
// the Java consumer throws from poll() on a REQUEST_TIMED_OUT in a fetch, for instance.
func errCode(err error) int16 {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, redisstore.ErrUnknownTopic), errors.Is(err, redisstore.ErrUnknownPartition):
		return kerr.UnknownTopicOrPartition.Code
	case errors.Is(err, redisstore.ErrTopicExists):
		return kerr.TopicAlreadyExists.Code
	case errors.Is(err, redisstore.ErrInvalidPartitions):
		return kerr.InvalidPartitions.Code
	case errors.Is(err, redisstore.ErrOffsetOutOfRange):
		return kerr.OffsetOutOfRange.Code
	case errors.Is(err, redisstore.ErrOutOfOrderSequence):
		return kerr.OutOfOrderSequenceNumber.Code
	case errors.Is(err, redisstore.ErrInvalidEpoch):
		return kerr.InvalidProducerEpoch.Code
	case errors.Is(err, redisstore.ErrUnknownProducer):
		return kerr.UnknownProducerID.Code
	case errors.Is(err, redisstore.ErrStreamConflict):
		return kerr.UnknownServerError.Code // not retriable: the stream needs an operator
	case errors.Is(err, redisstore.ErrTooManyHeaders):
		return kerr.InvalidRecord.Code // the gateway's own bound (maxRecordHeaders) is lower
	case errors.Is(err, redisstore.ErrNotDurable):
		return kerr.NotEnoughReplicasAfterAppend.Code
	default:
		return kerr.NotLeaderForPartition.Code
	}
}

// timedOutErrCode is errCode where a timeout is REQUEST_TIMED_OUT, as on Apache: for an append, whose
// batch may or may not have been stored (producers retry it; an idempotent one is then told it is a
// duplicate). Admin requests use adminErrCode.
func timedOutErrCode(err error) int16 {
	if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		return kerr.RequestTimedOut.Code
	}
	return errCode(err)
}

// groupErrCode maps a store error in a group or offset API to a code that makes the client find the
// coordinator again and retry.
func groupErrCode(err error) int16 {
	if err == nil {
		return 0
	}
	switch {
	case errors.Is(err, redisstore.ErrUnknownTopic):
		return kerr.UnknownTopicOrPartition.Code
	case errors.Is(err, redisstore.ErrNotOwner):
		return kerr.NotCoordinator.Code // another gateway took the group over (Gateway.disowned)
	case errors.Is(err, errNotCoordinating):
		return kerr.NotCoordinator.Code // the group moved away before its claim (Gateway.claimGroup)
	}
	return kerr.CoordinatorNotAvailable.Code
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// adminErrCode maps a store error in an admin request (CreatePartitions, DescribeConfigs) to a Kafka
// code: the store's refusals to theirs, and any Redis failure, timeout or not, to REQUEST_TIMED_OUT,
// which admin clients retry, as CreateTopics and DeleteTopics answer. (errCode's NOT_LEADER_OR_FOLLOWER
// means nothing to an admin request: no partition leader is involved.)
func adminErrCode(err error) int16 {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, redisstore.ErrUnknownTopic):
		return kerr.UnknownTopicOrPartition.Code
	case errors.Is(err, redisstore.ErrInvalidPartitions):
		return kerr.InvalidPartitions.Code
	default:
		return kerr.RequestTimedOut.Code
	}
}
