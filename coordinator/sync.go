package coordinator

// SyncGroup v0-v5 (Apache's GroupCoordinator.handleSyncGroup).
//
//   - Unknown group or member: UNKNOWN_MEMBER_ID; a replaced static member
//     (v3+ instance id): FENCED_INSTANCE_ID; wrong generation: ILLEGAL_GENERATION.
//   - v5: ProtocolType / ProtocolName, when sent, must match the group's, else
//     INCONSISTENT_GROUP_PROTOCOL; the response carries both. (A null one is
//     answered INCONSISTENT_GROUP_PROTOCOL by the gateway before it gets here.)
//   - PreparingRebalance: REBALANCE_IN_PROGRESS.
//   - CompletingRebalance: followers wait for the leader's SyncGroup. The
//     leader's assignments are stored (members it left out get an empty one,
//     ids that are not members are ignored) and every waiting member is
//     answered; the group is Stable. If a rebalance starts first, the waiting
//     members get REBALANCE_IN_PROGRESS.
//   - Stable: the member's current assignment.
//
// The call blocks until answered. If ctx ends first the answer is
// REBALANCE_IN_PROGRESS and the parked reply is withdrawn.

import (
	"bytes"
	"context"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

type syncRequest struct {
	memberID     string
	instanceID   *string
	generation   int32
	protocolType *string
	protocol     *string
	assignments  map[string][]byte
}

// SyncGroup handles a SyncGroupRequest. See the file comment for versions.
func (c *Coordinator) SyncGroup(ctx context.Context, req *kmsg.SyncGroupRequest) *kmsg.SyncGroupResponse {
	v := req.Version
	if req.Group == "" {
		return syncResponse(v, syncError(kerr.InvalidGroupID.Code))
	}
	s := syncRequest{
		memberID:   strings.Clone(req.MemberID),
		generation: req.Generation,
	}
	if v >= 3 {
		s.instanceID = cloneStringPtr(req.InstanceID)
	}
	if v >= 5 {
		s.protocolType = cloneStringPtr(req.ProtocolType)
		s.protocol = cloneStringPtr(req.Protocol)
	}
	if len(req.GroupAssignment) > 0 {
		s.assignments = make(map[string][]byte, len(req.GroupAssignment))
		for _, a := range req.GroupAssignment {
			s.assignments[strings.Clone(a.MemberID)] = bytes.Clone(a.MemberAssignment)
		}
	}

	reply := make(chan syncResult, 1)
	g, err := c.send(ctx, req.Group, false, func(g *group) { g.handleSync(s, reply) })
	if err != nil {
		return syncResponse(v, syncError(errCode(err, kerr.RebalanceInProgress.Code)))
	}
	r, ok := await(ctx, g, reply)
	if !ok {
		g.post(func() { g.abandonSync(reply) })
		code := kerr.RebalanceInProgress.Code
		if ctx.Err() == nil {
			code = kerr.CoordinatorNotAvailable.Code
		}
		return syncResponse(v, syncError(code))
	}
	return syncResponse(v, r)
}

func syncResponse(version int16, r syncResult) *kmsg.SyncGroupResponse {
	resp := kmsg.NewPtrSyncGroupResponse()
	resp.Version = version
	resp.ErrorCode = r.code
	resp.ProtocolType = r.protocolType
	resp.Protocol = r.protocol
	resp.MemberAssignment = r.assignment
	if resp.MemberAssignment == nil {
		resp.MemberAssignment = []byte{}
	}
	return resp
}

func (g *group) handleSync(s syncRequest, reply chan<- syncResult) {
	m, code := g.currentMember(s.memberID, s.instanceID)
	switch {
	case code != 0:
	case s.generation != g.generation:
		code = kerr.IllegalGeneration.Code
	case s.protocolType != nil && (g.protocolType == "" || *s.protocolType != g.protocolType):
		code = kerr.InconsistentGroupProtocol.Code
	case s.protocol != nil && (g.protocol == "" || *s.protocol != g.protocol):
		code = kerr.InconsistentGroupProtocol.Code
	}
	if code != 0 {
		reply <- syncError(code)
		return
	}

	switch g.state {
	case statePreparingRebalance:
		reply <- syncError(kerr.RebalanceInProgress.Code)
	case stateCompletingRebalance:
		g.setSync(m, reply)
		delete(g.pendingSync, m.id)
		if m.id != g.leader {
			return // waits for the leader
		}
		var missing int
		for _, mm := range g.members {
			a, ok := s.assignments[mm.id]
			if !ok {
				missing++
			}
			mm.assignment = a
		}
		if missing > 0 {
			g.log.Warn().Int("members", missing).Int32("generation", g.generation).
				Msg("leader left members without an assignment; they get an empty one")
		}
		g.state = stateStable
		g.log.Info().Int32("generation", g.generation).Str("leader", m.id).Msg("group is stable")
		for _, mm := range g.sortedMembers() {
			if mm.sync != nil {
				g.answerSync(mm, g.syncSuccess(mm))
				g.scheduleSession(mm, mm.sessionTimeout)
			}
		}
	case stateStable:
		delete(g.pendingSync, m.id)
		reply <- g.syncSuccess(m)
		g.scheduleSession(m, m.sessionTimeout)
	default: // Empty: no members, so currentMember already failed
		reply <- syncError(kerr.UnknownMemberID.Code)
	}
}

// abandonSync withdraws a parked SyncGroup reply whose caller gave up.
func (g *group) abandonSync(reply chan syncResult) {
	for _, m := range g.members {
		if m.sync == (chan<- syncResult)(reply) {
			m.sync = nil
			g.scheduleSession(m, m.sessionTimeout)
			return
		}
	}
}
