package gateway

// Heartbeat v0-v4: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS, FENCED_INSTANCE_ID as
// decided by package coordinator; NOT_COORDINATOR on a gateway that does not coordinate the group.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func (c *conn) heartbeat(ctx context.Context, req *kmsg.HeartbeatRequest) (kmsg.Response, error) {
	if code := c.g.notCoordinator(req.Group); code != 0 {
		resp := kmsg.NewPtrHeartbeatResponse()
		resp.ErrorCode = code
		return resp, nil
	}
	return c.g.coord.Heartbeat(ctx, req), nil
}
