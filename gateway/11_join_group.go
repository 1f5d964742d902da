package gateway

// JoinGroup v0-v9.
//
// Routed to this gateway's coordinator when it coordinates the group (NOT_COORDINATOR otherwise); the
// state machine, KIP-394 MEMBER_ID_REQUIRED at v4+, KIP-345 static membership and the initial
// rebalance delay live in package coordinator. The request blocks until the join phase completes.
// The group's offsets in Redis are claimed for this gateway as the request arrives (Gateway.claimAtJoin),
// while the join phase goes on; a join admitted waits for the claim's answer before it is answered,
// NOT_COORDINATOR when the group moved away meanwhile.

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
	claim, code := c.g.claimAtJoin(ctx, req.Group)
	if code == 0 {
		r := c.g.coord.JoinGroup(ctx, req, c.reqClientID, clientHost(c.remote))
		if r.ErrorCode != 0 {
			return r, nil
		}
		if code = c.g.joinClaimed(ctx, req.Group, claim); code == 0 {
			return r, nil
		}
	}
	resp := kmsg.NewPtrJoinGroupResponse()
	resp.ErrorCode, resp.Generation = code, -1
	return resp, nil
}
