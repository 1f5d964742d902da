package integration

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Issue 3's error paths with raw requests (kmsg over a plain connection), pinned to the versions that
// carry each behaviour: FindCoordinator and NOT_COORDINATOR across two gateways, KIP-394, Heartbeat /
// SyncGroup / LeaveGroup errors, KIP-345 fencing, and OffsetCommit identity checks.

// ---- raw helpers ----

// asyncResult is a response read off the test goroutine.
type asyncResult[R kmsg.Response] struct {
	resp R
	err  error
}

// asyncRoundTrip sends req on c (from the test goroutine) and reads its response on another
// goroutine: for requests that block until other requests arrive (JoinGroup, SyncGroup).
func asyncRoundTrip[R kmsg.Response](c *rawConn, v int16, req kmsg.Request) <-chan asyncResult[R] {
	c.t.Helper()
	req.SetVersion(v)
	corr := c.send(req)
	out := make(chan asyncResult[R], 1)
	go func() {
		resp := req.ResponseKind()
		resp.SetVersion(v)
		frame, err := c.readFrame()
		if err == nil {
			err = decodeRaw(frame, corr, resp)
		}
		out <- asyncResult[R]{resp: resp.(R), err: err}
	}()
	return out
}

// smallRoundTrip is roundTrip for responses that may be shorter than the 8 bytes protocol.ReadFrame
// accepts (it checks request frames): LeaveGroup v0 and Heartbeat v0 answer just an error code.
func smallRoundTrip[R kmsg.Response](c *rawConn, v int16, req kmsg.Request) R {
	c.t.Helper()
	req.SetVersion(v)
	corr := c.send(req)
	resp := req.ResponseKind()
	resp.SetVersion(v)
	_ = c.nc.SetReadDeadline(time.Now().Add(ioTimeout))
	var size [4]byte
	if _, err := io.ReadFull(c.nc, size[:]); err != nil {
		c.t.Fatalf("read %s response size: %v", kmsg.NameForKey(req.Key()), err)
	}
	frame := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c.nc, frame); err != nil {
		c.t.Fatalf("read %s response: %v", kmsg.NameForKey(req.Key()), err)
	}
	if err := decodeRaw(frame, corr, resp); err != nil {
		c.t.Fatalf("decode %s v%d response: %v", kmsg.NameForKey(req.Key()), v, err)
	}
	return resp.(R)
}

// decodeRaw decodes a response frame (correlation id, header tags, body) into resp.
func decodeRaw(frame []byte, corr int32, resp kmsg.Response) error {
	if len(frame) < 4 {
		return fmt.Errorf("short frame")
	}
	if got := int32(binary.BigEndian.Uint32(frame)); got != corr {
		return fmt.Errorf("correlation id %d, want %d", got, corr)
	}
	body := frame[4:]
	if resp.IsFlexible() && resp.Key() != 18 {
		if len(body) == 0 || body[0] != 0 {
			return fmt.Errorf("expected an empty header tag section")
		}
		body = body[1:]
	}
	return resp.ReadFrom(body)
}

// awaitRT waits for an asyncRoundTrip.
func awaitRT[R kmsg.Response](t *testing.T, ch <-chan asyncResult[R]) R {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("async request: %v", r.err)
		}
		return r.resp
	case <-time.After(30 * time.Second):
		t.Fatalf("async request: no response within 30s")
		panic("unreachable")
	}
}

// consumerMeta is consumer-protocol subscription metadata for topics.
func consumerMeta(topics ...string) []byte {
	m := kmsg.NewConsumerMemberMetadata()
	m.Topics = topics
	return m.AppendTo(nil)
}

// consumerAssignment is a consumer-protocol assignment of partitions of topic.
func consumerAssignment(topic string, partitions ...int32) []byte {
	a := kmsg.NewConsumerMemberAssignment()
	at := kmsg.NewConsumerMemberAssignmentTopic()
	at.Topic, at.Partitions = topic, partitions
	a.Topics = append(a.Topics, at)
	return a.AppendTo(nil)
}

func joinReq(group, member string, instance *string, sessionMs int32, topics ...string) *kmsg.JoinGroupRequest {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Group, req.MemberID, req.InstanceID = group, member, instance
	req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = sessionMs, 10000
	req.ProtocolType = "consumer"
	p := kmsg.NewJoinGroupRequestProtocol()
	p.Name, p.Metadata = "range", consumerMeta(topics...)
	req.Protocols = append(req.Protocols, p)
	return req
}

func syncReq(group, member string, instance *string, generation int32, assignments map[string][]byte) *kmsg.SyncGroupRequest {
	req := kmsg.NewPtrSyncGroupRequest()
	req.Group, req.MemberID, req.InstanceID, req.Generation = group, member, instance, generation
	for id, a := range assignments {
		ga := kmsg.NewSyncGroupRequestGroupAssignment()
		ga.MemberID, ga.MemberAssignment = id, a
		req.GroupAssignment = append(req.GroupAssignment, ga)
	}
	return req
}

func hbReq(group, member string, instance *string, generation int32) *kmsg.HeartbeatRequest {
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.MemberID, req.InstanceID, req.Generation = group, member, instance, generation
	return req
}

// hb sends a Heartbeat v4 and returns its error code.
func hb(t *testing.T, c *rawConn, group, member string, instance *string, generation int32) int16 {
	t.Helper()
	return roundTrip[*kmsg.HeartbeatResponse](c, 4, hbReq(group, member, instance, generation)).ErrorCode
}

// joinAlone joins group as its only member (v3: no MEMBER_ID_REQUIRED), syncs an assignment of
// topic partition 0 and returns the member id and generation.
func joinAlone(t *testing.T, c *rawConn, group, topic string, sessionMs int32) (string, int32) {
	t.Helper()
	j := roundTrip[*kmsg.JoinGroupResponse](c, 3, joinReq(group, "", nil, sessionMs, topic))
	if j.ErrorCode != 0 || j.MemberID == "" || j.LeaderID != j.MemberID {
		t.Fatalf("join %s: error %d member %q leader %q", group, j.ErrorCode, j.MemberID, j.LeaderID)
	}
	s := roundTrip[*kmsg.SyncGroupResponse](c, 3, syncReq(group, j.MemberID, nil, j.Generation,
		map[string][]byte{j.MemberID: consumerAssignment(topic, 0)}))
	if s.ErrorCode != 0 {
		t.Fatalf("sync %s: error %d", group, s.ErrorCode)
	}
	return j.MemberID, j.Generation
}

// describeRaw returns the DescribeGroups v5 entry of group.
func describeRaw(t *testing.T, c *rawConn, group string) kmsg.DescribeGroupsResponseGroup {
	t.Helper()
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{group}
	resp := roundTrip[*kmsg.DescribeGroupsResponse](c, 5, req)
	if len(resp.Groups) != 1 || resp.Groups[0].ErrorCode != 0 {
		t.Fatalf("describe %s: %+v", group, resp.Groups)
	}
	return resp.Groups[0]
}

// fetchOne returns the committed offset of one partition (raw OffsetFetch v5).
func fetchOne(t *testing.T, c *rawConn, group, topic string, partition int32) int64 {
	t.Helper()
	resp := roundTrip[*kmsg.OffsetFetchResponse](c, 5, offsetFetchReq(group, topic, partition))
	if resp.ErrorCode != 0 || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("offset fetch %s: %+v", group, resp)
	}
	return resp.Topics[0].Partitions[0].Offset
}

// commitAs commits offset of topic partition 0 as member (v7: with instance id) and returns the code.
func commitAs(t *testing.T, c *rawConn, group, member string, instance *string, generation int32, topic string, offset int64) int16 {
	t.Helper()
	req := rawCommitReq(group, member, generation, topic, 0, offset, nil)
	req.InstanceID = instance
	return commitCode(t, roundTrip[*kmsg.OffsetCommitResponse](c, 7, req))
}

func codeName(code int16) string {
	if err := kerr.ErrorForCode(code); err != nil {
		return err.Error()
	}
	return "NONE"
}

func wantCode(t *testing.T, what string, got int16, want *kerr.Error) {
	t.Helper()
	var w int16
	if want != nil {
		w = want.Code
	}
	if got != w {
		t.Fatalf("%s: %s (%d), want %s (%d)", what, codeName(got), got, codeName(w), w)
	}
}

// ---- coordinator placement across gateways ----

// fnv1a is FNV-1a-32, the hash the issue fixes for coordinator placement.
func fnv1a(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}

// groupsOnEach returns n group ids, the i-th of which FNV-1a places on node i of n gateways.
func groupsOnEach(n int) []string {
	out := make([]string, n)
	found := 0
	for i := 0; found < n; i++ {
		id := "grp-" + strconv.Itoa(i)
		if k := fnv1a(id) % uint32(n); out[k] == "" {
			out[k] = id
			found++
		}
	}
	return out
}

func findCoordinatorReq(key string, keyType int8) *kmsg.FindCoordinatorRequest {
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorKey, req.CoordinatorType = key, keyType
	req.CoordinatorKeys = []string{key}
	return req
}

// waitTwoGateways waits until every gateway places the groupsOnEach groups on their nodes.
func waitTwoGateways(t *testing.T, gs ...*testGateway) {
	t.Helper()
	keys := groupsOnEach(len(gs))
	conns := make([]*rawConn, len(gs))
	for i, g := range gs {
		conns[i] = dialRaw(t, g.Addr)
	}
	waitFor(t, 20*time.Second, "the gateways to see each other", func() bool {
		for _, c := range conns {
			for node, key := range keys {
				r := roundTrip[*kmsg.FindCoordinatorResponse](c, 3, findCoordinatorReq(key, 0))
				if r.ErrorCode != 0 || r.NodeID != int32(node) {
					return false
				}
			}
		}
		return true
	})
}

// TestGroupFindCoordinator: two gateways on one namespace (node ids 0 and 1) place every group by
// FNV-1a modulo the gateway set, answer identically at v0-v4 (batched keys at v4, key type 1 by the
// same hash, key type 2 INVALID_REQUEST), and the one that does not coordinate a group answers
// NOT_COORDINATOR to its group requests.
func TestGroupFindCoordinator(t *testing.T) {
	t.Parallel()
	b := backends()[0]
	g0 := startGateway(t, b)
	g1 := startPeer(t, b, g0, 1)
	ctx := testCtx(t, 30*time.Second)
	grpCreateTopic(t, ctx, newAdmin(t, g0), "fc", 1)
	waitTwoGateways(t, g0, g1)
	gws := []*testGateway{g0, g1}
	keys := groupsOnEach(2) // keys[i] is coordinated by node i
	conns := []*rawConn{dialRaw(t, g0.Addr), dialRaw(t, g1.Addr)}

	expect := func(node int) (string, int32) {
		host, port, _ := strings.Cut(gws[node].Addr, ":")
		p, _ := strconv.Atoi(port)
		return host, int32(p)
	}
	for ci, c := range conns {
		for node, key := range keys {
			host, port := expect(node)
			for v := int16(0); v <= 3; v++ {
				r := roundTrip[*kmsg.FindCoordinatorResponse](c, v, findCoordinatorReq(key, 0))
				if r.ErrorCode != 0 || r.NodeID != int32(node) || r.Host != host || r.Port != port {
					t.Fatalf("FindCoordinator v%d %q via gateway %d: error %d node %d %s:%d, want node %d %s:%d",
						v, key, ci, r.ErrorCode, r.NodeID, r.Host, r.Port, node, host, port)
				}
			}
			// Transactional ids (key type 1) are placed by the same hash.
			r := roundTrip[*kmsg.FindCoordinatorResponse](c, 3, findCoordinatorReq(key, 1))
			if r.ErrorCode != 0 || r.NodeID != int32(node) {
				t.Fatalf("FindCoordinator key type 1 %q via gateway %d: error %d node %d, want node %d", key, ci, r.ErrorCode, r.NodeID, node)
			}
			r = roundTrip[*kmsg.FindCoordinatorResponse](c, 3, findCoordinatorReq(key, 2))
			wantCode(t, "FindCoordinator v3 key type 2", r.ErrorCode, kerr.InvalidRequest)
		}
		// v4: batched keys, answered per key.
		for _, kt := range []int8{0, 1} {
			req := kmsg.NewPtrFindCoordinatorRequest()
			req.CoordinatorType, req.CoordinatorKeys = kt, []string{keys[1], keys[0], "another-group"}
			r := roundTrip[*kmsg.FindCoordinatorResponse](c, 4, req)
			if len(r.Coordinators) != 3 {
				t.Fatalf("FindCoordinator v4: %d coordinators, want 3", len(r.Coordinators))
			}
			for i, rc := range r.Coordinators {
				want := int32(fnv1a(req.CoordinatorKeys[i]) % 2)
				host, port := expect(int(want))
				if rc.Key != req.CoordinatorKeys[i] || rc.ErrorCode != 0 || rc.NodeID != want || rc.Host != host || rc.Port != port {
					t.Fatalf("FindCoordinator v4 type %d via gateway %d, key %d: %+v, want %q on node %d %s:%d", kt, ci, i, rc, req.CoordinatorKeys[i], want, host, port)
				}
			}
		}
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorType, req.CoordinatorKeys = 2, []string{keys[0], keys[1]}
		r := roundTrip[*kmsg.FindCoordinatorResponse](c, 4, req)
		if len(r.Coordinators) != 2 {
			t.Fatalf("FindCoordinator v4 key type 2: %d coordinators", len(r.Coordinators))
		}
		for _, rc := range r.Coordinators {
			wantCode(t, "FindCoordinator v4 key type 2", rc.ErrorCode, kerr.InvalidRequest)
		}
	}

	// The gateway that does not coordinate a group refuses its group requests.
	for node, key := range keys {
		other := conns[1-node]
		j := roundTrip[*kmsg.JoinGroupResponse](other, 5, joinReq(key, "", nil, 10000, "fc"))
		wantCode(t, fmt.Sprintf("JoinGroup %s on node %d", key, 1-node), j.ErrorCode, kerr.NotCoordinator)
		wantCode(t, "OffsetCommit on the non-coordinator",
			commitCode(t, roundTrip[*kmsg.OffsetCommitResponse](other, 8, rawCommitReq(key, "", -1, "fc", 0, 1, nil))), kerr.NotCoordinator)
		wantCode(t, "Heartbeat on the non-coordinator", hb(t, other, key, "m", nil, 1), kerr.NotCoordinator)
		wantCode(t, "SyncGroup on the non-coordinator",
			roundTrip[*kmsg.SyncGroupResponse](other, 3, syncReq(key, "m", nil, 1, nil)).ErrorCode, kerr.NotCoordinator)
		lreq := kmsg.NewPtrLeaveGroupRequest()
		lreq.Group, lreq.MemberID = key, "m"
		wantCode(t, "LeaveGroup on the non-coordinator", roundTrip[*kmsg.LeaveGroupResponse](other, 1, lreq).ErrorCode, kerr.NotCoordinator)
		wantCode(t, "OffsetFetch on the non-coordinator",
			roundTrip[*kmsg.OffsetFetchResponse](other, 5, offsetFetchReq(key, "fc", 0)).ErrorCode, kerr.NotCoordinator)

		// The coordinator accepts them.
		mine := conns[node]
		id, gen := joinAlone(t, mine, key, "fc", 10000)
		wantCode(t, "Heartbeat on the coordinator", hb(t, mine, key, id, nil, gen), nil)
		wantCode(t, "OffsetCommit on the coordinator",
			commitCode(t, roundTrip[*kmsg.OffsetCommitResponse](mine, 8, rawCommitReq(key, id, gen, "fc", 0, 1, nil))), nil)
	}

	// Node 1 stops: its groups move to node 0, which reads their commits from Redis.
	g1.Stop()
	waitFor(t, 20*time.Second, "node 0 to take over node 1's groups", func() bool {
		r := roundTrip[*kmsg.FindCoordinatorResponse](conns[0], 3, findCoordinatorReq(keys[1], 0))
		return r.ErrorCode == 0 && r.NodeID == 0
	})
	if o := fetchOne(t, conns[0], keys[1], "fc", 0); o != 1 {
		t.Fatalf("after the coordinator moved, %s's committed offset is %d, want 1", keys[1], o)
	}
	id, gen := joinAlone(t, conns[0], keys[1], "fc", 10000)
	wantCode(t, "commit on the new coordinator",
		commitCode(t, roundTrip[*kmsg.OffsetCommitResponse](conns[0], 8, rawCommitReq(keys[1], id, gen, "fc", 0, 2, nil))), nil)
}

// ---- group protocol error paths ----

// TestGroupErrors runs the raw error-path scenarios in parallel against one gateway.
func TestGroupErrors(t *testing.T) {
	t.Parallel()
	g := startGateway(t, backends()[0])
	ctx := testCtx(t, 60*time.Second)
	grpCreateTopic(t, ctx, newAdmin(t, g), "errs", 2)

	// KIP-394: JoinGroup v4+ with an empty member id gets MEMBER_ID_REQUIRED and the id to use;
	// v3 joins at once.
	t.Run("MemberIDRequired", func(t *testing.T) {
		t.Parallel()
		c := dialRaw(t, g.Addr)
		r := roundTrip[*kmsg.JoinGroupResponse](c, 4, joinReq("kip394", "", nil, 10000, "errs"))
		wantCode(t, "JoinGroup v4 with an empty member id", r.ErrorCode, kerr.MemberIDRequired)
		if r.MemberID == "" {
			t.Fatalf("MEMBER_ID_REQUIRED without a member id")
		}
		id := r.MemberID
		r = roundTrip[*kmsg.JoinGroupResponse](c, 4, joinReq("kip394", id, nil, 10000, "errs"))
		if r.ErrorCode != 0 || r.MemberID != id || r.Generation != 1 || r.LeaderID != id || len(r.Members) != 1 {
			t.Fatalf("rejoin with the assigned id: error %d member %q gen %d leader %q members %d", r.ErrorCode, r.MemberID, r.Generation, r.LeaderID, len(r.Members))
		}
		other := joinReq("kip394", "", nil, 10000, "errs")
		other.ProtocolType = "connect"
		wantCode(t, "JoinGroup with another protocol type", roundTrip[*kmsg.JoinGroupResponse](c, 4, other).ErrorCode, kerr.InconsistentGroupProtocol)
		r = roundTrip[*kmsg.JoinGroupResponse](c, 3, joinReq("v3join", "", nil, 10000, "errs"))
		if r.ErrorCode != 0 || r.MemberID == "" || r.Generation != 1 {
			t.Fatalf("JoinGroup v3 with an empty member id: error %d member %q gen %d, want a direct join", r.ErrorCode, r.MemberID, r.Generation)
		}
	})

	// Heartbeat UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION / REBALANCE_IN_PROGRESS, SyncGroup
	// REBALANCE_IN_PROGRESS and v5 INCONSISTENT_GROUP_PROTOCOL, LeaveGroup v0 and v3 errors.
	t.Run("HeartbeatSyncLeave", func(t *testing.T) {
		t.Parallel()
		const group = "hb"
		c := dialRaw(t, g.Addr)
		a, gen := joinAlone(t, c, group, "errs", 10000)
		wantCode(t, "heartbeat of the member", hb(t, c, group, a, nil, gen), nil)
		wantCode(t, "heartbeat of an unknown member", hb(t, c, group, "ghost", nil, gen), kerr.UnknownMemberID)
		wantCode(t, "heartbeat with a wrong generation", hb(t, c, group, a, nil, gen+5), kerr.IllegalGeneration)
		wantCode(t, "heartbeat to an unknown group", hb(t, c, "no-such-group", a, nil, gen), kerr.UnknownMemberID)

		// A second member joins: the group rebalances.
		bJoin := asyncRoundTrip[*kmsg.JoinGroupResponse](dialRaw(t, g.Addr), 3, joinReq(group, "", nil, 10000, "errs"))
		waitFor(t, 10*time.Second, "heartbeat to answer REBALANCE_IN_PROGRESS", func() bool {
			return hb(t, c, group, a, nil, gen) == kerr.RebalanceInProgress.Code
		})
		wantCode(t, "SyncGroup during a rebalance",
			roundTrip[*kmsg.SyncGroupResponse](c, 3, syncReq(group, a, nil, gen, nil)).ErrorCode, kerr.RebalanceInProgress)
		aJoin := asyncRoundTrip[*kmsg.JoinGroupResponse](dialRaw(t, g.Addr), 3, joinReq(group, a, nil, 10000, "errs"))
		ja, jb := awaitRT(t, aJoin), awaitRT(t, bJoin)
		if ja.ErrorCode != 0 || jb.ErrorCode != 0 || ja.Generation != gen+1 || jb.Generation != gen+1 || ja.LeaderID != a || len(ja.Members) != 2 {
			t.Fatalf("rejoin: a %d gen %d leader %q members %d; b %d gen %d", ja.ErrorCode, ja.Generation, ja.LeaderID, len(ja.Members), jb.ErrorCode, jb.Generation)
		}
		b, gen2 := jb.MemberID, ja.Generation
		wantCode(t, "commit before the assignment arrived",
			commitCode(t, roundTrip[*kmsg.OffsetCommitResponse](c, 8, rawCommitReq(group, a, gen2, "errs", 0, 1, nil))), kerr.RebalanceInProgress)
		wantCode(t, "heartbeat with the old generation", hb(t, c, group, a, nil, gen), kerr.IllegalGeneration)

		// SyncGroup v5 checks the protocol type and name.
		bad := syncReq(group, b, nil, gen2, nil)
		bad.ProtocolType, bad.Protocol = kmsg.StringPtr("connect"), kmsg.StringPtr("range")
		wantCode(t, "SyncGroup v5 with another protocol type", roundTrip[*kmsg.SyncGroupResponse](c, 5, bad).ErrorCode, kerr.InconsistentGroupProtocol)
		bad = syncReq(group, b, nil, gen2, nil)
		bad.ProtocolType, bad.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("roundrobin")
		wantCode(t, "SyncGroup v5 with another protocol name", roundTrip[*kmsg.SyncGroupResponse](c, 5, bad).ErrorCode, kerr.InconsistentGroupProtocol)

		// The follower waits for the leader; both get their assignments.
		fs := syncReq(group, b, nil, gen2, nil)
		fs.ProtocolType, fs.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("range")
		bSync := asyncRoundTrip[*kmsg.SyncGroupResponse](dialRaw(t, g.Addr), 5, fs)
		ls := syncReq(group, a, nil, gen2, map[string][]byte{a: consumerAssignment("errs", 0), b: consumerAssignment("errs", 1)})
		ls.ProtocolType, ls.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("range")
		sa := roundTrip[*kmsg.SyncGroupResponse](c, 5, ls)
		sb := awaitRT(t, bSync)
		if sa.ErrorCode != 0 || sb.ErrorCode != 0 || !bytes.Equal(sa.MemberAssignment, consumerAssignment("errs", 0)) ||
			!bytes.Equal(sb.MemberAssignment, consumerAssignment("errs", 1)) || sb.Protocol == nil || *sb.Protocol != "range" {
			t.Fatalf("sync: leader %d %x, follower %d %x", sa.ErrorCode, sa.MemberAssignment, sb.ErrorCode, sb.MemberAssignment)
		}

		// LeaveGroup v0: one member, error at top level.
		l0 := kmsg.NewPtrLeaveGroupRequest()
		l0.Group, l0.MemberID = group, "ghost"
		wantCode(t, "LeaveGroup v0 of an unknown member", smallRoundTrip[*kmsg.LeaveGroupResponse](c, 0, l0).ErrorCode, kerr.UnknownMemberID)
		// LeaveGroup v3: per-member results.
		l3 := kmsg.NewPtrLeaveGroupRequest()
		l3.Group = group
		for _, id := range []string{b, "ghost"} {
			m := kmsg.NewLeaveGroupRequestMember()
			m.MemberID = id
			l3.Members = append(l3.Members, m)
		}
		lr := roundTrip[*kmsg.LeaveGroupResponse](c, 3, l3)
		if lr.ErrorCode != 0 || len(lr.Members) != 2 || lr.Members[0].MemberID != b || lr.Members[0].ErrorCode != 0 ||
			lr.Members[1].MemberID != "ghost" || lr.Members[1].ErrorCode != kerr.UnknownMemberID.Code {
			t.Fatalf("LeaveGroup v3: top %d members %+v; want b: NONE, ghost: UNKNOWN_MEMBER_ID", lr.ErrorCode, lr.Members)
		}
		wantCode(t, "heartbeat of the member that left", hb(t, c, group, b, nil, gen2), kerr.UnknownMemberID)
		// LeaveGroup v5 carries a KIP-800 reason (Java clients send it on close).
		l5 := kmsg.NewPtrLeaveGroupRequest()
		l5.Group = group
		m5 := kmsg.NewLeaveGroupRequestMember()
		m5.MemberID, m5.Reason = a, kmsg.StringPtr("the consumer is being closed")
		l5.Members = append(l5.Members, m5)
		lr = roundTrip[*kmsg.LeaveGroupResponse](c, 5, l5)
		if lr.ErrorCode != 0 || len(lr.Members) != 1 || lr.Members[0].ErrorCode != 0 {
			t.Fatalf("LeaveGroup v5 with a reason: top %d members %+v", lr.ErrorCode, lr.Members)
		}
		waitFor(t, 10*time.Second, "the group to be Empty", func() bool { return describeRaw(t, c, group).State == "Empty" })
	})

	// A member that does not rejoin within the rebalance timeout is removed from the new generation.
	t.Run("RebalanceTimeout", func(t *testing.T) {
		t.Parallel()
		const group = "rebalance-timeout"
		c := dialRaw(t, g.Addr)
		ja := joinReq(group, "", nil, 10000, "errs")
		ja.RebalanceTimeoutMillis = 1500
		j := roundTrip[*kmsg.JoinGroupResponse](c, 3, ja)
		a, gen := j.MemberID, j.Generation
		wantCode(t, "sync", roundTrip[*kmsg.SyncGroupResponse](c, 3, syncReq(group, a, nil, gen, map[string][]byte{a: consumerAssignment("errs", 0)})).ErrorCode, nil)
		jb := joinReq(group, "", nil, 10000, "errs")
		jb.RebalanceTimeoutMillis = 1500
		start := time.Now()
		rb := awaitRT(t, asyncRoundTrip[*kmsg.JoinGroupResponse](dialRaw(t, g.Addr), 3, jb))
		if rb.ErrorCode != 0 || rb.Generation != gen+1 || rb.LeaderID != rb.MemberID || len(rb.Members) != 1 {
			t.Fatalf("join while the old member does not rejoin: error %d gen %d leader %q (self %q) members %d",
				rb.ErrorCode, rb.Generation, rb.LeaderID, rb.MemberID, len(rb.Members))
		}
		if waited := time.Since(start); waited < time.Second {
			t.Fatalf("the join phase ended after %v, before the 1.5s rebalance timeout", waited)
		}
		wantCode(t, "heartbeat of the member removed by the rebalance timeout", hb(t, c, group, a, nil, gen), kerr.UnknownMemberID)
	})

	// The fixed old versions kafka-go and kafka-python use: JoinGroup v0 (no rebalance timeout),
	// SyncGroup / Heartbeat / LeaveGroup v0, OffsetCommit v2, OffsetFetch v1.
	t.Run("OldVersions", func(t *testing.T) {
		t.Parallel()
		const group = "old-versions"
		c := dialRaw(t, g.Addr)
		j := roundTrip[*kmsg.JoinGroupResponse](c, 0, joinReq(group, "", nil, 10000, "errs"))
		if j.ErrorCode != 0 || j.MemberID == "" || j.Generation != 1 || j.LeaderID != j.MemberID {
			t.Fatalf("JoinGroup v0: error %d member %q gen %d leader %q", j.ErrorCode, j.MemberID, j.Generation, j.LeaderID)
		}
		asg := consumerAssignment("errs", 0, 1)
		s0 := roundTrip[*kmsg.SyncGroupResponse](c, 0, syncReq(group, j.MemberID, nil, j.Generation, map[string][]byte{j.MemberID: asg}))
		if s0.ErrorCode != 0 || !bytes.Equal(s0.MemberAssignment, asg) {
			t.Fatalf("SyncGroup v0: error %d", s0.ErrorCode)
		}
		h := hbReq(group, j.MemberID, nil, j.Generation)
		wantCode(t, "Heartbeat v0", smallRoundTrip[*kmsg.HeartbeatResponse](c, 0, h).ErrorCode, nil)
		oc := rawCommitReq(group, j.MemberID, j.Generation, "errs", 1, 4, kmsg.StringPtr("old"))
		wantCode(t, "OffsetCommit v2", commitCode(t, roundTrip[*kmsg.OffsetCommitResponse](c, 2, oc)), nil)
		f := roundTrip[*kmsg.OffsetFetchResponse](c, 1, offsetFetchReq(group, "errs", 0, 1))
		if p := f.Topics[0].Partitions; len(p) != 2 || p[0].Offset != -1 || p[1].Offset != 4 || p[1].Metadata == nil || *p[1].Metadata != "old" {
			t.Fatalf("OffsetFetch v1: %+v", f.Topics)
		}
		l := kmsg.NewPtrLeaveGroupRequest()
		l.Group, l.MemberID = group, j.MemberID
		wantCode(t, "LeaveGroup v0", smallRoundTrip[*kmsg.LeaveGroupResponse](c, 0, l).ErrorCode, nil)
		waitFor(t, 10*time.Second, "the group to be Empty", func() bool { return describeRaw(t, c, group).State == "Empty" })
	})

	// KIP-345: a second member with the same group.instance.id takes over the cached assignment
	// without a new generation, and the old member id is fenced everywhere.
	t.Run("StaticMembership", func(t *testing.T) {
		t.Parallel()
		const group = "static"
		inst := kmsg.StringPtr("i1")
		c := dialRaw(t, g.Addr)
		j1 := roundTrip[*kmsg.JoinGroupResponse](c, 5, joinReq(group, "", inst, 10000, "errs"))
		if j1.ErrorCode != 0 || !strings.HasPrefix(j1.MemberID, "i1-") || j1.Generation != 1 {
			t.Fatalf("static join: error %d member %q gen %d", j1.ErrorCode, j1.MemberID, j1.Generation)
		}
		x1 := j1.MemberID
		asg := consumerAssignment("errs", 0, 1)
		s1 := roundTrip[*kmsg.SyncGroupResponse](c, 3, syncReq(group, x1, inst, 1, map[string][]byte{x1: asg}))
		if s1.ErrorCode != 0 || !bytes.Equal(s1.MemberAssignment, asg) {
			t.Fatalf("static sync: error %d", s1.ErrorCode)
		}
		wantCode(t, "commit by the static member", commitAs(t, c, group, x1, inst, 1, "errs", 3), nil)

		// The same instance id joins again (a restarted process): new member id, same generation,
		// the cached assignment.
		j2 := roundTrip[*kmsg.JoinGroupResponse](c, 5, joinReq(group, "", inst, 10000, "errs"))
		if j2.ErrorCode != 0 || j2.MemberID == x1 || !strings.HasPrefix(j2.MemberID, "i1-") || j2.Generation != 1 {
			t.Fatalf("static rejoin: error %d member %q gen %d; want a new id at generation 1", j2.ErrorCode, j2.MemberID, j2.Generation)
		}
		x2 := j2.MemberID
		s2 := roundTrip[*kmsg.SyncGroupResponse](c, 3, syncReq(group, x2, inst, 1, nil))
		if s2.ErrorCode != 0 || !bytes.Equal(s2.MemberAssignment, asg) {
			t.Fatalf("static rejoin sync: error %d assignment %x, want the cached %x", s2.ErrorCode, s2.MemberAssignment, asg)
		}

		// The old member id is fenced on every API.
		wantCode(t, "heartbeat of the replaced member", hb(t, c, group, x1, inst, 1), kerr.FencedInstanceID)
		wantCode(t, "sync of the replaced member",
			roundTrip[*kmsg.SyncGroupResponse](c, 3, syncReq(group, x1, inst, 1, nil)).ErrorCode, kerr.FencedInstanceID)
		wantCode(t, "join of the replaced member",
			roundTrip[*kmsg.JoinGroupResponse](c, 5, joinReq(group, x1, inst, 10000, "errs")).ErrorCode, kerr.FencedInstanceID)
		wantCode(t, "commit of the replaced member", commitAs(t, c, group, x1, inst, 1, "errs", 5), kerr.FencedInstanceID)
		l := kmsg.NewPtrLeaveGroupRequest()
		l.Group = group
		lm := kmsg.NewLeaveGroupRequestMember()
		lm.MemberID, lm.InstanceID = x1, inst
		l.Members = append(l.Members, lm)
		lr := roundTrip[*kmsg.LeaveGroupResponse](c, 3, l)
		if len(lr.Members) != 1 || lr.Members[0].ErrorCode != kerr.FencedInstanceID.Code {
			t.Fatalf("leave of the replaced member: %+v, want FENCED_INSTANCE_ID", lr.Members)
		}
		if o := fetchOne(t, c, group, "errs", 0); o != 3 {
			t.Fatalf("committed offset after the fenced commit: %d, want 3", o)
		}

		// The new member is the group's only member and works.
		wantCode(t, "heartbeat of the new member", hb(t, c, group, x2, inst, 1), nil)
		d := describeRaw(t, c, group)
		if d.State != "Stable" || len(d.Members) != 1 || d.Members[0].MemberID != x2 || d.Members[0].InstanceID == nil || *d.Members[0].InstanceID != "i1" {
			t.Fatalf("describe after the static rejoin: %s %+v", d.State, d.Members)
		}
	})

	// OffsetCommit identity checks for a group with a member, a simple commit once it is Empty.
	t.Run("CommitValidation", func(t *testing.T) {
		t.Parallel()
		const group = "commits"
		c := dialRaw(t, g.Addr)
		m, gen := joinAlone(t, c, group, "errs", 10000)
		commit := func(member string, generation int32, topic string, offset int64) int16 {
			return commitCode(t, roundTrip[*kmsg.OffsetCommitResponse](c, 8, rawCommitReq(group, member, generation, topic, 0, offset, nil)))
		}
		wantCode(t, "commit with a wrong generation", commit(m, gen+4, "errs", 1), kerr.IllegalGeneration)
		wantCode(t, "commit by an unknown member", commit("ghost", gen, "errs", 1), kerr.UnknownMemberID)
		wantCode(t, "simple commit to a group with members", commit("", -1, "errs", 1), kerr.UnknownMemberID)
		wantCode(t, "commit by the member", commit(m, gen, "errs", 2), nil)
		wantCode(t, "commit to an unknown topic", commit(m, gen, "no-such-topic", 2), kerr.UnknownTopicOrPartition)
		// A documented deviation (COMPATIBILITY.md): Apache stores a negative offset, kgate refuses it.
		wantCode(t, "commit of a negative offset", commit(m, gen, "errs", -1), kerr.InvalidCommitOffsetSize)
		if o := fetchOne(t, c, group, "errs", 0); o != 2 {
			t.Fatalf("committed %d, want only the member's commit (2)", o)
		}

		l := kmsg.NewPtrLeaveGroupRequest()
		l.Group, l.MemberID = group, m
		wantCode(t, "leave", roundTrip[*kmsg.LeaveGroupResponse](c, 1, l).ErrorCode, nil)
		waitFor(t, 10*time.Second, "the group to be Empty", func() bool { return describeRaw(t, c, group).State == "Empty" })
		wantCode(t, "simple commit to an Empty group", commit("", -1, "errs", 7), nil)
		if o := fetchOne(t, c, group, "errs", 0); o != 7 {
			t.Fatalf("committed %d after the simple commit, want 7", o)
		}
	})

	// A member evicted by its session timeout cannot commit any more (zombie).
	t.Run("ZombieCommit", func(t *testing.T) {
		t.Parallel()
		const group = "zombie"
		c := dialRaw(t, g.Addr)
		z, gen := joinAlone(t, c, group, "errs", 1000)
		wantCode(t, "commit before eviction", commitCode(t, roundTrip[*kmsg.OffsetCommitResponse](c, 8, rawCommitReq(group, z, gen, "errs", 0, 1, nil))), nil)
		waitFor(t, 15*time.Second, "the session timeout to evict the member", func() bool { return describeRaw(t, c, group).State == "Empty" })
		wantCode(t, "commit by the evicted member",
			commitCode(t, roundTrip[*kmsg.OffsetCommitResponse](c, 8, rawCommitReq(group, z, gen, "errs", 0, 9, nil))), kerr.UnknownMemberID)
		wantCode(t, "heartbeat of the evicted member", hb(t, c, group, z, nil, gen), kerr.UnknownMemberID)
		if o := fetchOne(t, c, group, "errs", 0); o != 1 {
			t.Fatalf("committed %d after the zombie commit, want 1", o)
		}
	})
}
