package gateway

// InitProducerId v0-v4.
//
// Allocates a producer ID from a Redis counter (INCR), so IDs are unique across every gateway sharing
// the Redis, with epoch 0. A request carrying an existing producer ID and epoch (KIP-360, v3+) gets
// the same ID with the epoch bumped; partitions then require the new epoch to start at sequence 0 and
// fence the old epoch (INVALID_PRODUCER_EPOCH). An exhausted epoch (32766 and up, Apache's bound) gets
// a fresh ID with epoch 0 instead, as Apache gives. Exactly one of the producer ID and epoch -1 ->
// INVALID_REQUEST, as on Apache. Redis failing -> COORDINATOR_LOAD_IN_PROGRESS, as Apache answers when
// it has no producer ID block at hand: clients retry it as it is, while COORDINATOR_NOT_AVAILABLE has
// the Java producer look up a transaction coordinator for a producer that has no transactional ID.
//
// Deviation: transactions are not supported: a transactional ID -> TRANSACTIONAL_ID_AUTHORIZATION_FAILED.

import (
	"context"
	"math"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// maxProducerEpoch is the highest epoch a bump gives. Apache takes an epoch of math.MaxInt16-1 (or
// more) as exhausted, and a producer at it gets a fresh ID; an epoch bumped past MaxInt16 would wrap
// to a negative one.
const maxProducerEpoch = math.MaxInt16 - 1

func (c *conn) initProducerID(ctx context.Context, req *kmsg.InitProducerIDRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrInitProducerIDResponse()
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	switch {
	case req.TransactionalID != nil:
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
	case (req.ProducerID == -1) != (req.ProducerEpoch == -1):
		resp.ErrorCode = kerr.InvalidRequest.Code
	case req.ProducerID >= 0 && req.ProducerEpoch >= 0:
		if req.ProducerEpoch >= maxProducerEpoch { // exhausted: a fresh ID below
			break
		}
		resp.ProducerID, resp.ProducerEpoch = req.ProducerID, req.ProducerEpoch+1
		return resp, nil
	}
	if resp.ErrorCode != 0 {
		return resp, nil
	}
	id, err := c.g.store.NewProducerID(ctx)
	if err != nil {
		resp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
		return resp, nil
	}
	resp.ProducerID, resp.ProducerEpoch = id, 0
	return resp, nil
}
