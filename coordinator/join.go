package coordinator

// JoinGroup v0-v9 (Apache's GroupCoordinator.handleJoinGroup).
//
//   - v0 has no rebalance timeout: the session timeout is used.
//   - v4+: a dynamic member joining with an empty member id gets
//     MEMBER_ID_REQUIRED and a generated id (KIP-394); the id is pending until
//     the member rejoins with it or its session timeout passes, and a pending id
//     holds back the end of the join phase like a member that has not rejoined.
//     Below v4 the member joins at once.
//   - v5+: group.instance.id (KIP-345). A static member joining with an empty
//     member id replaces the member registered under its instance id; the old
//     member id is fenced.
//   - v7+: ProtocolType and a nullable Protocol in the response.
//   - v8+: Reason is logged.
//   - v9: SkipAssignment is set for a static leader rejoining a Stable group
//     (KIP-814); below v9 such a rejoin is told the old leader id instead.
//
// The call blocks until the join phase completes. If ctx ends first the answer
// is REBALANCE_IN_PROGRESS (see the package doc for what happens to the member).

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// joinRequest is the group goroutine's copy of a JoinGroupRequest: strings and
// bytes are cloned so the caller may reuse its request buffer.
type joinRequest struct {
	version          int16
	memberID         string
	instanceID       *string
	clientID         string
	clientHost       string
	protocolType     string
	protocols        []protocol
	sessionTimeout   time.Duration
	rebalanceTimeout time.Duration
	reason           string
}

// JoinGroup handles a JoinGroupRequest. See the file comment for versions.
func (c *Coordinator) JoinGroup(ctx context.Context, req *kmsg.JoinGroupRequest, clientID, clientHost string) *kmsg.JoinGroupResponse {
	v := req.Version
	if req.Group == "" {
		return joinResponse(v, joinError(req.MemberID, kerr.InvalidGroupID.Code))
	}
	j := joinRequest{
		version:          v,
		memberID:         strings.Clone(req.MemberID),
		clientID:         strings.Clone(clientID),
		clientHost:       strings.Clone(clientHost),
		protocolType:     strings.Clone(req.ProtocolType),
		sessionTimeout:   millis(req.SessionTimeoutMillis),
		rebalanceTimeout: millis(req.RebalanceTimeoutMillis),
	}
	if v == 0 {
		j.rebalanceTimeout = j.sessionTimeout
	}
	if v >= 5 {
		j.instanceID = cloneStringPtr(req.InstanceID)
	}
	if v >= 8 {
		j.reason = deref(req.Reason)
	}
	if j.sessionTimeout < c.cfg.MinSessionTimeout || j.sessionTimeout > c.cfg.MaxSessionTimeout {
		return joinResponse(v, joinError(req.MemberID, kerr.InvalidSessionTimeout.Code))
	}
	seen := make(map[string]bool, len(req.Protocols))
	for _, p := range req.Protocols {
		if seen[p.Name] {
			continue // a repeated name would count twice in the vote
		}
		seen[p.Name] = true
		j.protocols = append(j.protocols, protocol{name: strings.Clone(p.Name), metadata: bytes.Clone(p.Metadata)})
	}

	reply := make(chan joinResult, 1)
	// Only a join with an empty member id may create the group (Apache).
	g, err := c.send(ctx, req.Group, j.memberID == "", func(g *group) { g.handleJoin(j, reply) })
	if err != nil {
		return joinResponse(v, joinError(req.MemberID, errCode(err, kerr.RebalanceInProgress.Code)))
	}
	r, ok := await(ctx, g, reply)
	if !ok {
		// Withdraw the parked reply so the member does not count as rejoined.
		g.post(func() { g.abandonJoin(reply) })
		code := kerr.RebalanceInProgress.Code
		if ctx.Err() == nil {
			code = kerr.CoordinatorNotAvailable.Code
		}
		return joinResponse(v, joinError(req.MemberID, code))
	}
	return joinResponse(v, r)
}

func joinResponse(version int16, r joinResult) *kmsg.JoinGroupResponse {
	resp := kmsg.NewPtrJoinGroupResponse()
	resp.Version = version
	resp.ErrorCode = r.code
	resp.Generation = r.generation
	resp.MemberID = r.memberID
	resp.LeaderID = r.leader
	resp.ProtocolType = r.protocolType
	resp.Protocol = r.protocol
	if version < 7 && resp.Protocol == nil {
		empty := "" // not nullable before v7
		resp.Protocol = &empty
	}
	resp.SkipAssignment = version >= 9 && r.skip
	resp.Members = r.members
	if version < 5 && len(resp.Members) > 0 {
		ms := make([]kmsg.JoinGroupResponseMember, len(resp.Members))
		copy(ms, resp.Members)
		for i := range ms {
			ms[i].InstanceID = nil
		}
		resp.Members = ms
	}
	return resp
}

func (g *group) handleJoin(j joinRequest, reply chan<- joinResult) {
	if j.reason != "" {
		g.log.Info().Str("member", j.memberID).Str("reason", j.reason).Msg("join group reason")
	}
	if j.memberID == "" {
		g.joinNewMember(j, reply)
	} else {
		g.joinCurrentMember(j, reply)
	}
}

// joinNewMember is Apache's doNewMemberJoinGroup.
func (g *group) joinNewMember(j joinRequest, reply chan<- joinResult) {
	if !g.supportsProtocols(j.protocolType, j.protocols) {
		reply <- joinError("", kerr.InconsistentGroupProtocol.Code)
		return
	}
	if j.instanceID != nil {
		id := newMemberID(*j.instanceID)
		if old, ok := g.static[*j.instanceID]; ok {
			g.replaceStaticMember(old, id, j, reply)
			return
		}
		g.addMemberAndRebalance(id, j, reply)
		return
	}
	id := newMemberID(j.clientID)
	if j.version >= 4 {
		g.addPending(id, j.sessionTimeout)
		g.log.Debug().Str("member", id).Msg("member id required; pending until rejoin")
		reply <- joinError(id, kerr.MemberIDRequired.Code)
		return
	}
	g.addMemberAndRebalance(id, j, reply)
}

// joinCurrentMember is Apache's doCurrentMemberJoinGroup.
func (g *group) joinCurrentMember(j joinRequest, reply chan<- joinResult) {
	if !g.supportsProtocols(j.protocolType, j.protocols) {
		reply <- joinError(j.memberID, kerr.InconsistentGroupProtocol.Code)
		return
	}
	if _, ok := g.pending[j.memberID]; ok {
		if j.instanceID != nil {
			// Pending ids are only handed to dynamic members (Apache throws here).
			reply <- joinError(j.memberID, kerr.UnknownMemberID.Code)
			return
		}
		g.addMemberAndRebalance(j.memberID, j, reply)
		return
	}
	m, code := g.currentMember(j.memberID, j.instanceID)
	if code != 0 {
		reply <- joinError(j.memberID, code)
		return
	}
	switch g.state {
	case statePreparingRebalance:
		g.updateMember(m, j, reply)
	case stateCompletingRebalance:
		if m.matches(j.protocols) {
			// Probably lost the first response: answer for the current generation.
			reply <- g.joinSuccess(m.id, m.id == g.leader, g.leader, false)
			return
		}
		g.updateMember(m, j, reply)
		g.prepareRebalance("member " + m.id + " rejoined with new metadata")
	case stateStable:
		if m.id == g.leader || !m.matches(j.protocols) {
			// A leader rejoin asks for a rebalance (e.g. topic metadata changed).
			g.updateMember(m, j, reply)
			g.prepareRebalance("member " + m.id + " rejoined (leader or new metadata)")
			return
		}
		reply <- g.joinSuccess(m.id, false, g.leader, false)
	default:
		reply <- joinError(j.memberID, kerr.UnknownMemberID.Code)
	}
}

// addMemberAndRebalance is Apache's addMemberAndRebalance.
func (g *group) addMemberAndRebalance(id string, j joinRequest, reply chan<- joinResult) {
	m := &member{
		id:               id,
		instanceID:       j.instanceID,
		clientID:         j.clientID,
		clientHost:       j.clientHost,
		protocolType:     j.protocolType,
		protocols:        j.protocols,
		sessionTimeout:   j.sessionTimeout,
		rebalanceTimeout: j.rebalanceTimeout,
		isNew:            true,
	}
	if g.state == statePreparingRebalance && g.initialJoin {
		// Lets the initial delayed join wait longer: at any generation whose rebalance began from
		// Empty, as Apache 4.x's coordinator (previousState EMPTY; the 3.x Scala one: generation 0).
		g.newMemberAdded = true
	}
	g.add(m)
	m.join = reply
	// A new member cannot heartbeat before its first answer; bound its wait.
	g.scheduleSession(m, newMemberJoinTimeout)
	g.log.Info().Str("member", id).Str("instance", deref(j.instanceID)).Str("client_id", j.clientID).
		Msg("adding member")
	g.maybePrepareRebalance("adding member " + id)
}

// updateMember is Apache's GroupMetadata.updateMember with a new JoinGroup.
func (g *group) updateMember(m *member, j joinRequest, reply chan<- joinResult) {
	m.protocols = j.protocols
	m.sessionTimeout = j.sessionTimeout
	m.rebalanceTimeout = j.rebalanceTimeout
	g.setJoin(m, reply)
}

// replaceStaticMember is Apache's updateStaticMemberAndRebalance: the member
// registered under j.instanceID takes the new id newID; the old id is fenced.
func (g *group) replaceStaticMember(oldID, newID string, j joinRequest, reply chan<- joinResult) {
	m := g.members[oldID]
	oldLeader := g.leader
	g.log.Info().Str("instance", *j.instanceID).Str("old_member", oldID).Str("member", newID).
		Stringer("state", g.state).Msg("static member rejoined; replacing member id")

	g.answerJoin(m, joinError(oldID, kerr.FencedInstanceID.Code))
	g.answerSync(m, syncError(kerr.FencedInstanceID.Code))
	delete(g.members, oldID)
	m.id = newID
	g.members[newID] = m
	g.static[*j.instanceID] = newID
	if g.leader == oldID {
		g.leader = newID
	}
	if _, ok := g.pendingSync[oldID]; ok {
		delete(g.pendingSync, oldID)
		g.pendingSync[newID] = struct{}{}
	}
	oldProtocols := m.protocols
	m.clientID, m.clientHost = j.clientID, j.clientHost
	g.updateMember(m, j, reply)
	g.scheduleSession(m, m.sessionTimeout)

	switch g.state {
	case stateStable:
		if g.selectProtocol() != g.protocol || !g.sameSubscription(oldProtocols, m.protocols) {
			g.prepareRebalance("static member " + newID + " rejoined with changed protocols")
			return
		}
		// Keep the generation and the member's cached assignment.
		var r joinResult
		if j.version >= 9 {
			isLeader := g.leader == newID
			r = g.joinSuccess(newID, isLeader, g.leader, isLeader)
		} else {
			// The old leader id keeps a rejoining leader from running a trivial
			// assignment that a Stable group would ignore.
			r = g.joinSuccess(newID, false, oldLeader, false)
		}
		g.answerJoin(m, r)
	case stateCompletingRebalance:
		// The leader may be assigning to the old id: start over.
		g.prepareRebalance("static member " + newID + " rejoined while awaiting sync")
	case statePreparingRebalance:
		// Waits with everyone else.
	}
}

// sameSubscription reports whether a static member's rejoin leaves its
// consumer subscription (for the group's protocol) unchanged. Non-consumer
// groups and unparsable metadata count as unchanged, as in Apache.
func (g *group) sameSubscription(before, after []protocol) bool {
	if g.protocolType != consumerProtocolType {
		return true
	}
	find := func(ps []protocol) []byte {
		for _, p := range ps {
			if p.name == g.protocol {
				return p.metadata
			}
		}
		return nil
	}
	a, okA := subscribedTopics(find(before))
	b, okB := subscribedTopics(find(after))
	if !okA || !okB {
		return true
	}
	return slices.Equal(a, b)
}

// abandonJoin withdraws a parked JoinGroup reply whose caller gave up.
func (g *group) abandonJoin(reply chan joinResult) {
	for _, m := range g.members {
		if m.join != (chan<- joinResult)(reply) {
			continue
		}
		m.join = nil
		if m.isNew {
			g.removeMember(m, "new member's JoinGroup abandoned")
		} else {
			g.scheduleSession(m, m.sessionTimeout)
		}
		return
	}
}
