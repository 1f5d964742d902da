package gateway

// InitProducerId v0-v4.
//
// Allocates a producer ID from a Redis counter (INCR), so IDs are unique across every gateway sharing
// the Redis, with epoch 0. A request carrying an existing producer ID and epoch (KIP-360, v3+) gets
// the same ID with the epoch bumped; partitions then require the new epoch to start at sequence 0 and
// fence the old epoch (INVALID_PRODUCER_EPOCH).
//
// Deviation: transactions are not supported: a transactional ID -> TRANSACTIONAL_ID_AUTHORIZATION_FAILED.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func (c *conn) initProducerID(ctx context.Context, req *kmsg.InitProducerIDRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrInitProducerIDResponse()
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	switch {
	case req.TransactionalID != nil:
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
	case req.ProducerID >= 0 && req.ProducerEpoch >= 0:
		if req.ProducerEpoch == 32766 { // epoch exhausted: a fresh ID, as Apache does
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
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		return resp, nil
	}
	resp.ProducerID, resp.ProducerEpoch = id, 0
	return resp, nil
}
