package coordinator

// LeaveGroup v0-v5 (Apache's GroupCoordinator.handleLeaveGroup).
//
//   - v0-v2 name one member id; its error is the response's top-level error.
//   - v3+ name a batch of members by member id and/or group.instance.id, each
//     answered with its own error; the top-level error is NONE unless the
//     request as a whole fails (INVALID_GROUP_ID).
//   - A member id that is empty removes whichever member holds the instance id
//     (admin removal, KIP-345); a pending (KIP-394) id is simply dropped; an
//     instance id held by another member id is FENCED_INSTANCE_ID; anything
//     else unknown is UNKNOWN_MEMBER_ID, including every member of an unknown
//     group.
//   - v5: each member's Reason (KIP-800) is logged.
//   - A departure rebalances the group; the last member leaving makes it Empty.
//
// If ctx ends first the answer is COORDINATOR_NOT_AVAILABLE.

import (
	"context"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

type leaveMember struct {
	memberID   string
	instanceID *string
	reason     string
}

// LeaveGroup handles a LeaveGroupRequest. See the file comment for versions.
func (c *Coordinator) LeaveGroup(ctx context.Context, req *kmsg.LeaveGroupRequest) *kmsg.LeaveGroupResponse {
	resp := kmsg.NewPtrLeaveGroupResponse()
	resp.Version = req.Version
	if req.Group == "" {
		resp.ErrorCode = kerr.InvalidGroupID.Code
		return resp
	}
	var leaving []leaveMember
	if req.Version < 3 {
		leaving = []leaveMember{{memberID: strings.Clone(req.MemberID)}}
	} else {
		for _, m := range req.Members {
			lm := leaveMember{memberID: strings.Clone(m.MemberID), instanceID: cloneStringPtr(m.InstanceID)}
			if req.Version >= 5 {
				lm.reason = strings.Clone(deref(m.Reason))
			}
			leaving = append(leaving, lm)
		}
	}

	// leaving is cloned: the group goroutine may still read it after a cancelled call returns.
	codes, err := call(ctx, c, req.Group, false, func(g *group, reply chan<- []int16) {
		reply <- g.handleLeave(leaving)
	})
	if err != nil {
		code := errCode(err, kerr.CoordinatorNotAvailable.Code)
		if code != kerr.UnknownMemberID.Code { // unknown group: per-member UNKNOWN_MEMBER_ID
			resp.ErrorCode = code
			return resp
		}
		codes = make([]int16, len(leaving))
		for i := range codes {
			codes[i] = code
		}
	}

	if req.Version < 3 {
		resp.ErrorCode = codes[0]
		return resp
	}
	for i, lm := range leaving {
		rm := kmsg.NewLeaveGroupResponseMember()
		rm.MemberID = lm.memberID
		rm.InstanceID = lm.instanceID
		rm.ErrorCode = codes[i]
		resp.Members = append(resp.Members, rm)
	}
	return resp
}

func (g *group) handleLeave(leaving []leaveMember) []int16 {
	codes := make([]int16, len(leaving))
	for i, lm := range leaving {
		reason := "left the group"
		if lm.reason != "" {
			reason = "left the group: " + lm.reason
		}
		switch {
		case lm.memberID == "":
			// Removal by group.instance.id alone.
			id, ok := "", false
			if lm.instanceID != nil {
				id, ok = g.static[*lm.instanceID]
			}
			if !ok {
				codes[i] = kerr.UnknownMemberID.Code
				continue
			}
			g.removeMember(g.members[id], reason)
		case g.pending[lm.memberID] != nil:
			g.removePending(lm.memberID)
			g.log.Debug().Str("member", lm.memberID).Msg("pending member left")
		default:
			m, code := g.currentMember(lm.memberID, lm.instanceID)
			if code != 0 {
				codes[i] = code
				continue
			}
			g.removeMember(m, reason)
		}
	}
	return codes
}
