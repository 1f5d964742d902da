package gateway

// LeaveGroup v0-v5: one member (v0-v2, error at top level) or a batch with per-member results (v3+,
// by member ID or group.instance.id); v5's KIP-800 reason is accepted and logged by the coordinator.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func (c *conn) leaveGroup(ctx context.Context, req *kmsg.LeaveGroupRequest) (kmsg.Response, error) {
	if code := c.g.notCoordinator(req.Group); code != 0 {
		resp := kmsg.NewPtrLeaveGroupResponse()
		resp.ErrorCode = code
		return resp, nil
	}
	return c.g.coord.LeaveGroup(ctx, req), nil
}
