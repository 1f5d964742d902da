package coordinator

// Heartbeat v0-v4 (Apache's GroupCoordinator.handleHeartbeat).
//
//   - Unknown group or member: UNKNOWN_MEMBER_ID; a replaced static member
//     (v3+ instance id): FENCED_INSTANCE_ID; wrong generation: ILLEGAL_GENERATION.
//   - PreparingRebalance: REBALANCE_IN_PROGRESS, so the member rejoins.
//   - CompletingRebalance and Stable: no error.
//   - A valid heartbeat (including one answered REBALANCE_IN_PROGRESS) restarts
//     the member's session timer.
//
// If ctx ends first the answer is COORDINATOR_NOT_AVAILABLE.

import (
	"context"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Heartbeat handles a HeartbeatRequest. See the file comment for versions.
func (c *Coordinator) Heartbeat(ctx context.Context, req *kmsg.HeartbeatRequest) *kmsg.HeartbeatResponse {
	resp := kmsg.NewPtrHeartbeatResponse()
	resp.Version = req.Version
	if req.Group == "" {
		resp.ErrorCode = kerr.InvalidGroupID.Code
		return resp
	}
	// Cloned: the group goroutine may still read them after a cancelled call returns.
	memberID, generation := strings.Clone(req.MemberID), req.Generation
	var instanceID *string
	if req.Version >= 3 {
		instanceID = cloneStringPtr(req.InstanceID)
	}
	code, err := call(ctx, c, req.Group, false, func(g *group, reply chan<- int16) {
		reply <- g.handleHeartbeat(memberID, instanceID, generation)
	})
	if err != nil {
		code = errCode(err, kerr.CoordinatorNotAvailable.Code)
	}
	resp.ErrorCode = code
	return resp
}

func (g *group) handleHeartbeat(memberID string, instanceID *string, generation int32) int16 {
	m, code := g.currentMember(memberID, instanceID)
	if code != 0 {
		return code
	}
	if generation != g.generation {
		return kerr.IllegalGeneration.Code
	}
	switch g.state {
	case statePreparingRebalance:
		g.scheduleSession(m, m.sessionTimeout)
		return kerr.RebalanceInProgress.Code
	case stateCompletingRebalance, stateStable:
		g.scheduleSession(m, m.sessionTimeout)
		return 0
	default:
		return kerr.UnknownMemberID.Code
	}
}
