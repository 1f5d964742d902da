package gateway

// SyncGroup v0-v5: followers wait for the leader's assignments; v5 checks protocol type and name
// (INCONSISTENT_GROUP_PROTOCOL); REBALANCE_IN_PROGRESS when a new round superseded this one.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func (c *conn) syncGroup(ctx context.Context, req *kmsg.SyncGroupRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrSyncGroupResponse()
	// From v5 both are mandatory; Apache refuses a null one before routing the request anywhere.
	if req.Version >= 5 && (req.ProtocolType == nil || req.Protocol == nil) {
		resp.ErrorCode = kerr.InconsistentGroupProtocol.Code
		return resp, nil
	}
	if code := c.g.notCoordinator(req.Group); code != 0 {
		resp.ErrorCode = code
		return resp, nil
	}
	return c.g.coord.SyncGroup(ctx, req), nil
}
