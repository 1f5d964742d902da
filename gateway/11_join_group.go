package gateway

// JoinGroup v0-v9.
//
// Routed to this gateway's coordinator when it coordinates the group (NOT_COORDINATOR otherwise); the
// state machine, KIP-394 MEMBER_ID_REQUIRED at v4+, KIP-345 static membership and the initial
// rebalance delay live in package coordinator. The request blocks until the join phase completes.
// The group's offsets in Redis are claimed for this gateway first (Gateway.claimGroup); a group that
// moved away meanwhile is answered NOT_COORDINATOR.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func (c *conn) joinGroup(ctx context.Context, req *kmsg.JoinGroupRequest) (kmsg.Response, error) {
	if code := c.g.notCoordinator(req.Group); code != 0 {
		resp := kmsg.NewPtrJoinGroupResponse()
		resp.ErrorCode, resp.Generation = code, -1
		return resp, nil
	}
	if code := c.g.claimAtJoin(ctx, req.Group); code != 0 {
		resp := kmsg.NewPtrJoinGroupResponse()
		resp.ErrorCode, resp.Generation = code, -1
		return resp, nil
	}
	return c.g.coord.JoinGroup(ctx, req, c.reqClientID, clientHost(c.remote)), nil
}
