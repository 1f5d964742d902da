package integration

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/gateway"
)

// Rebalances as real clients live them, against Apache's classic GroupCoordinator: franz-go's
// cooperative-sticky balancer through members joining and leaving (its second round, its commits),
// range members next to a raw member that stops rejoining or heartbeating (rebalance and session
// timeouts, the codes the others and the evicted member get), and a static leader restarting (KIP-345,
// KIP-814) then removed by its group.instance.id (LeaveGroup v3+).

// rebStats counts what the members' commits and revocations did.
type rebStats struct {
	mu         sync.Mutex
	commits    int
	commitErrs []string
	revoked    map[string]int // member -> partitions revoked so far
}

func (s *rebStats) commit(name string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.commitErrs = append(s.commitErrs, name+": "+err.Error())
		return
	}
	s.commits++
}

func (s *rebStats) revoke(name string, ps map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.revoked == nil {
		s.revoked = map[string]int{}
	}
	for _, parts := range ps {
		s.revoked[name] += len(parts)
	}
}

// revokedTotal is how many partitions every member revoked so far.
func (s *rebStats) revokedTotal() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.revoked {
		n += c
	}
	return n
}

func (s *rebStats) check(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.commitErrs) > 0 {
		t.Fatalf("%d commits failed (and %d succeeded):\n%v", len(s.commitErrs), s.commits, s.commitErrs)
	}
}

// startRebMember starts a group member (startMember) whose commits and revocations are counted in st,
// heartbeating every 200 ms, with opts added.
func startRebMember(t *testing.T, g *testGateway, tr *grpTracker, st *rebStats, group, topic, name string, opts ...kgo.Opt) *grpMember {
	t.Helper()
	return startMember(t, g, tr, st, group, topic, name, append([]kgo.Opt{kgo.HeartbeatInterval(200 * time.Millisecond)}, opts...)...)
}

// TestGroupCooperativeStickyChurn: three franz-go members with the cooperative-sticky balancer join a
// 6-partition topic one by one, then leave one by one. Each change moves only the partitions that
// must move (a member that keeps a partition never revokes it: the second round of KIP-429 gives the
// moved ones to their new owner), no partition is owned by two members at once, nothing is lost,
// every record is consumed, and no commit is refused (the members commit throughout, between the two
// rounds included); what is committed at the end is every partition's end.
func TestGroupCooperativeStickyChurn(t *testing.T) {
	t.Parallel()
	const (
		topic = "coop"
		group = "coop-group"
		parts = int32(6)
	)
	g := startGateway(t, backends()[0])
	ctx := testCtx(t, 120*time.Second)
	adm := newAdmin(t, g)
	grpCreateTopic(t, ctx, adm, topic, parts)
	prod := grpProducer(t, g)
	tr := newGrpTracker()
	st := &rebStats{}
	coop := kgo.Balancers(kgo.CooperativeStickyBalancer())
	tag := 'a'
	produceAndConsume := func(what string) {
		t.Helper()
		grpProduce(t, ctx, prod, topic, parts, 10, string(tag))
		tag++
		ends := grpEndOffsets(t, ctx, adm, topic)
		waitFor(t, 30*time.Second, "every record consumed "+what, func() bool { return tr.consumedBelow(ends) })
	}
	// settle waits until exactly members own every partition, disjointly, and the coordinator reports
	// the group Stable with those members; it returns how many partitions were revoked meanwhile.
	settle := func(what string, revokedBefore int, members ...string) int {
		t.Helper()
		waitFor(t, 30*time.Second, what, func() bool { return tr.balanced(members, parts) })
		waitFor(t, 15*time.Second, what+" (DescribeGroups Stable)", func() bool {
			d := grpDescribe(t, ctx, adm, group)
			return d.State == "Stable" && len(d.Members) == len(members)
		})
		tr.check(t)
		st.check(t)
		t.Logf("%s: %v", what, tr.ownership())
		return st.revokedTotal() - revokedBefore
	}

	m1 := startRebMember(t, g, tr, st, group, topic, "m1", coop)
	settle("m1 alone", 0, "m1")
	produceAndConsume("by m1")

	before, r0 := tr.ownership(), st.revokedTotal()
	startRebMember(t, g, tr, st, group, topic, "m2", coop)
	revoked := settle("m2 joined", r0, "m1", "m2")
	// Only what m2 took was revoked, and only by m1, which kept the rest.
	if own := tr.ownership(); revoked != len(own["m2"]) || !isSubset(own["m1"], before["m1"]) {
		t.Fatalf("m2 joined: %d partitions revoked for %d moved; m1 owned %v, owns %v", revoked, len(own["m2"]), before["m1"], own["m1"])
	}

	before, r0 = tr.ownership(), st.revokedTotal()
	m3 := startRebMember(t, g, tr, st, group, topic, "m3", coop)
	revoked = settle("m3 joined", r0, "m1", "m2", "m3")
	if own := tr.ownership(); revoked != len(own["m3"]) || !isSubset(own["m1"], before["m1"]) || !isSubset(own["m2"], before["m2"]) {
		t.Fatalf("m3 joined: %d partitions revoked for %d moved (%v -> %v)", revoked, len(own["m3"]), before, own)
	}
	for m, ps := range tr.ownership() {
		if len(ps) != 2 {
			t.Fatalf("%s owns %v; three members on six partitions own two each", m, ps)
		}
	}
	produceAndConsume("by three members")

	// m1 leaves: it revokes its own partitions and nobody else revokes anything.
	before, r0 = tr.ownership(), st.revokedTotal()
	m1.stop()
	revoked = settle("m1 left", r0, "m2", "m3")
	if own := tr.ownership(); revoked != len(before["m1"]) || !isSubset(before["m2"], own["m2"]) || !isSubset(before["m3"], own["m3"]) {
		t.Fatalf("m1 left: %d partitions revoked, m1 owned %d (%v -> %v)", revoked, len(before["m1"]), before, own)
	}
	produceAndConsume("after m1 left")

	// A member joins again while two remain, then m3 leaves.
	before, r0 = tr.ownership(), st.revokedTotal()
	startRebMember(t, g, tr, st, group, topic, "m4", coop)
	if revoked = settle("m4 joined", r0, "m2", "m3", "m4"); revoked != len(tr.ownership()["m4"]) {
		t.Fatalf("m4 joined: %d partitions revoked for %d moved (%v -> %v)", revoked, len(tr.ownership()["m4"]), before, tr.ownership())
	}
	produceAndConsume("by m2, m3, m4")
	before, r0 = tr.ownership(), st.revokedTotal()
	m3.stop()
	if revoked = settle("m3 left", r0, "m2", "m4"); revoked != len(before["m3"]) {
		t.Fatalf("m3 left: %d partitions revoked, m3 owned %d (%v -> %v)", revoked, len(before["m3"]), before, tr.ownership())
	}
	produceAndConsume("after m3 left")

	ends := grpEndOffsets(t, ctx, adm, topic)
	waitFor(t, 15*time.Second, "every record committed", func() bool {
		return mapsEqual(grpOffsets(t, ctx, adm, group, topic), ends)
	})
	tr.check(t)
	st.check(t)
	st.mu.Lock()
	t.Logf("%d commits accepted, partitions revoked per member %v", st.commits, st.revoked)
	st.mu.Unlock()
}

func isSubset(sub, of []int32) bool {
	for _, p := range sub {
		if !slices.Contains(of, p) {
			return false
		}
	}
	return true
}

// rawJoinV5 joins group as a new dynamic member over c (JoinGroup v5: MEMBER_ID_REQUIRED, then the
// join with the id given, which waits for the join phase) and returns the answer.
func rawJoinV5(t *testing.T, c *rawConn, group, topic string, sessionMs, rebalanceMs int32) *kmsg.JoinGroupResponse {
	t.Helper()
	req := joinReq(group, "", nil, sessionMs, topic)
	req.RebalanceTimeoutMillis = rebalanceMs
	r := roundTrip[*kmsg.JoinGroupResponse](c, 5, req)
	wantCode(t, "JoinGroup v5 without a member id", r.ErrorCode, kerr.MemberIDRequired)
	req.MemberID = r.MemberID
	r = awaitRT(t, asyncRoundTrip[*kmsg.JoinGroupResponse](c, 5, req))
	wantCode(t, "JoinGroup v5 with the member id given", r.ErrorCode, nil)
	return r
}

// rawSyncV5 sends a follower's SyncGroup v5 and returns the partitions of topic it was assigned.
func rawSyncV5(t *testing.T, c *rawConn, group, topic, member string, generation int32) []int32 {
	t.Helper()
	req := syncReq(group, member, nil, generation, nil)
	req.ProtocolType, req.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("range")
	s := awaitRT(t, asyncRoundTrip[*kmsg.SyncGroupResponse](c, 5, req))
	wantCode(t, "SyncGroup v5", s.ErrorCode, nil)
	var a kmsg.ConsumerMemberAssignment
	if err := a.ReadFrom(s.MemberAssignment); err != nil {
		t.Fatalf("assignment %x: %v", s.MemberAssignment, err)
	}
	var ps []int32
	for _, at := range a.Topics {
		if at.Topic == topic {
			ps = append(ps, at.Partitions...)
		}
	}
	return ps
}

// TestGroupRangeTimeouts: franz-go members with the range balancer share a group with raw members
// that stop taking part. A member that goes on heartbeating but does not rejoin is told
// REBALANCE_IN_PROGRESS and is out of the next generation once the join phase ends at the rebalance
// timeout; a member that stops heartbeating is removed at its session timeout and the others
// rebalance without it. Both are then UNKNOWN_MEMBER_ID on every API; the franz-go members never lose
// partitions (a lost partition means they were told UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION) and no
// commit of theirs is refused.
func TestGroupRangeTimeouts(t *testing.T) {
	t.Parallel()
	const (
		topic = "rt"
		group = "rt-group"
		parts = int32(4)
	)
	g := startGateway(t, backends()[0])
	ctx := testCtx(t, 120*time.Second)
	adm := newAdmin(t, g)
	grpCreateTopic(t, ctx, adm, topic, parts)
	tr := newGrpTracker()
	st := &rebStats{}
	rng := []kgo.Opt{kgo.Balancers(kgo.RangeBalancer()), kgo.RebalanceTimeout(3 * time.Second)}
	startRebMember(t, g, tr, st, group, topic, "a", rng...)
	waitFor(t, 20*time.Second, "a alone owns every partition", func() bool { return tr.balanced([]string{"a"}, parts) })
	c := dialRaw(t, g.Addr)
	members := func() int {
		d := describeRaw(t, c, group)
		if d.State != "Stable" {
			return -1
		}
		return len(d.Members)
	}

	// B joins as a raw member (session 30 s, rebalance timeout 2 s); a, told REBALANCE_IN_PROGRESS by its
	// heartbeat, rejoins and, as the leader, gives B half the partitions.
	bc := dialRaw(t, g.Addr)
	bj := rawJoinV5(t, bc, group, topic, 30000, 2000)
	b, bgen := bj.MemberID, bj.Generation
	if bj.LeaderID == b || len(bj.Members) != 0 {
		t.Fatalf("B leads (%q) or got the member list (%d): a joined first and leads", bj.LeaderID, len(bj.Members))
	}
	// Its first heartbeat after the join, before its SyncGroup (CompletingRebalance, or Stable once
	// the leader synced), is answered NONE.
	wantCode(t, "B's first heartbeat of its generation", hb(t, c, group, b, nil, bgen), nil)
	bParts := rawSyncV5(t, bc, group, topic, b, bgen)
	if len(bParts) != 2 {
		t.Fatalf("B assigned %v, want half of %d partitions", bParts, parts)
	}
	tr.assign("b", map[string][]int32{topic: bParts})
	waitFor(t, 20*time.Second, "a and B share the partitions", func() bool { return tr.balanced([]string{"a", "b"}, parts) })
	waitFor(t, 10*time.Second, "a Stable group of a and B", func() bool { return members() == 2 })

	// C joins; B heartbeats but never rejoins.
	startRebMember(t, g, tr, st, group, topic, "c", rng...)
	waitFor(t, 10*time.Second, "B's heartbeat to answer REBALANCE_IN_PROGRESS", func() bool {
		return hb(t, c, group, b, nil, bgen) == kerr.RebalanceInProgress.Code
	})
	told := time.Now()
	tr.revoke("b", map[string][]int32{topic: bParts}) // as a client does on REBALANCE_IN_PROGRESS
	waitFor(t, 20*time.Second, "a and c to own every partition", func() bool { return tr.balanced([]string{"a", "c"}, parts) })
	if waited := time.Since(told); waited < 2*time.Second {
		t.Fatalf("the join phase ended %v after B was told to rejoin, before the 3 s rebalance timeout", waited)
	}
	waitFor(t, 10*time.Second, "a Stable group of a and c", func() bool { return members() == 2 })
	wantCode(t, "heartbeat of B, out of the group", hb(t, c, group, b, nil, bgen), kerr.UnknownMemberID)
	wantCode(t, "SyncGroup of B", roundTrip[*kmsg.SyncGroupResponse](c, 3, syncReq(group, b, nil, bgen, nil)).ErrorCode, kerr.UnknownMemberID)
	wantCode(t, "commit of B", commitAs(t, c, group, b, nil, bgen, topic, 1), kerr.UnknownMemberID)
	rejoin := joinReq(group, b, nil, 30000, topic)
	wantCode(t, "B rejoining with its old id", roundTrip[*kmsg.JoinGroupResponse](c, 5, rejoin).ErrorCode, kerr.UnknownMemberID)

	// D joins with a 2 s session, syncs, then goes silent.
	dc := dialRaw(t, g.Addr)
	dj := rawJoinV5(t, dc, group, topic, 2000, 3000)
	d, dgen := dj.MemberID, dj.Generation
	dParts := rawSyncV5(t, dc, group, topic, d, dgen)
	synced := time.Now()
	if len(dParts) == 0 {
		t.Fatalf("D assigned nothing of %d partitions among three members", parts)
	}
	tr.assign("d", map[string][]int32{topic: dParts})
	waitFor(t, 20*time.Second, "a, c and D share the partitions", func() bool { return tr.balanced([]string{"a", "c", "d"}, parts) })
	tr.revoke("d", map[string][]int32{topic: dParts}) // D goes silent: it consumes nothing more
	waitFor(t, 15*time.Second, "D removed by its session timeout", func() bool { return members() == 2 })
	if waited := time.Since(synced); waited < 1500*time.Millisecond {
		t.Fatalf("D removed %v after its last request, before its 2 s session timeout", waited)
	}
	waitFor(t, 20*time.Second, "a and c to own every partition again", func() bool { return tr.balanced([]string{"a", "c"}, parts) })
	wantCode(t, "heartbeat of D after its session timed out", hb(t, c, group, d, nil, dgen), kerr.UnknownMemberID)
	wantCode(t, "commit of D", commitAs(t, c, group, d, nil, dgen, topic, 1), kerr.UnknownMemberID)
	tr.check(t)
	st.check(t)
}

// TestGroupFranzStaticLeaderRestart: KIP-345 and KIP-814 with franz-go. The static member that leads
// restarts (a new client, the same group.instance.id): it replaces its old member id without a
// rebalance, gets its partitions back and stays the leader; the old member id is fenced. Closed (a
// static member sends no LeaveGroup), it is then removed by an admin LeaveGroup naming its instance
// id, and the other member takes its partitions long before the session timeout would have.
// The range balancer is used: with cooperative-sticky, franz-go's restarted leader rejoins by itself
// at once (its KIP-814 check finds its cached assignment differs from the plan it computes from the
// members' metadata of their last JoinGroup, which an Apache coordinator hands it alike).
func TestGroupFranzStaticLeaderRestart(t *testing.T) {
	t.Parallel()
	const (
		topic = "static-leader"
		group = "static-leader-group"
		parts = int32(4)
	)
	g := startGateway(t, backends()[0])
	ctx := testCtx(t, 90*time.Second)
	adm := newAdmin(t, g)
	grpCreateTopic(t, ctx, adm, topic, parts)
	tr := newGrpTracker()
	start := func(name, instance string) *kgo.Client {
		return newClient(t, g, kgo.ClientID(name), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.InstanceID(instance), kgo.Balancers(kgo.RangeBalancer()),
			kgo.SessionTimeout(30*time.Second), kgo.HeartbeatInterval(200*time.Millisecond),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { tr.assign(name, ps) }),
			kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { tr.revoke(name, ps) }),
			kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
				tr.fail("%s lost partitions %v", name, ps)
				tr.revoke(name, ps)
			}))
	}
	instanceMembers := func() map[string]string {
		d := grpDescribe(t, ctx, adm, group)
		out := map[string]string{}
		for _, m := range d.Members {
			if d.State == "Stable" && m.InstanceID != nil {
				out[*m.InstanceID] = m.MemberID
			}
		}
		return out
	}

	// a joins first, alone: it leads every generation after, as long as it stays.
	a := start("a", "inst-a")
	waitFor(t, 20*time.Second, "a alone owns every partition", func() bool { return tr.balanced([]string{"a"}, parts) })
	b := start("b", "inst-b")
	waitFor(t, 20*time.Second, "a and b share the partitions", func() bool { return tr.balanced([]string{"a", "b"}, parts) })
	waitFor(t, 10*time.Second, "a Stable group of two", func() bool { return len(instanceMembers()) == 2 })
	before := tr.ownership()
	ids := instanceMembers()
	_, bGen := b.GroupMetadata()
	tr.mu.Lock()
	bAssigns := tr.assigns["b"]
	tr.mu.Unlock()

	// The leader restarts.
	a.Close()
	tr.revoke("a", map[string][]int32{topic: before["a"]})
	a2 := start("a2", "inst-a")
	waitFor(t, 20*time.Second, "the restarted leader to get its partitions back", func() bool {
		return slices.Equal(tr.ownership()["a2"], before["a"])
	})
	now := instanceMembers()
	if len(now) != 2 || now["inst-a"] == ids["inst-a"] || now["inst-b"] != ids["inst-b"] {
		t.Fatalf("after the leader's restart: members %v, before %v", now, ids)
	}
	_, a2Gen := a2.GroupMetadata()
	_, bGenNow := b.GroupMetadata()
	tr.mu.Lock()
	bNow := tr.assigns["b"]
	tr.mu.Unlock()
	if a2Gen != bGen || bGenNow != bGen || bNow != bAssigns || !slices.Equal(tr.ownership()["b"], before["b"]) {
		t.Fatalf("the leader's restart rebalanced: generation %d -> a2 %d, b %d; b's assignments %d -> %d",
			bGen, a2Gen, bGenNow, bAssigns, bNow)
	}
	c := dialRaw(t, g.Addr)
	wantCode(t, "heartbeat of the replaced leader", hb(t, c, group, ids["inst-a"], kmsg.StringPtr("inst-a"), bGen), kerr.FencedInstanceID)
	wantCode(t, "heartbeat of the restarted leader's id", hb(t, c, group, now["inst-a"], kmsg.StringPtr("inst-a"), bGen), nil)

	// The restarted leader closes (no LeaveGroup) and an admin removes it by instance id.
	a2.Close()
	tr.revoke("a2", map[string][]int32{topic: before["a"]})
	resps, err := adm.LeaveGroup(ctx, kadm.LeaveGroup(group).InstanceIDs("inst-a", "inst-x").Reason("scaled in"))
	if err != nil {
		t.Fatalf("LeaveGroup by instance id: %v", err)
	}
	if r := resps["inst-a"]; r.Err != nil {
		t.Fatalf("LeaveGroup of inst-a: %v", r.Err)
	}
	if r := resps["inst-x"]; !errors.Is(r.Err, kerr.UnknownMemberID) {
		t.Fatalf("LeaveGroup of an unknown instance id: %v, want UNKNOWN_MEMBER_ID", r.Err)
	}
	// Within half the 30 s session timeout, which alone would have removed a2 otherwise.
	waitFor(t, 15*time.Second, "b to own every partition", func() bool { return tr.balanced([]string{"b"}, parts) })
	waitFor(t, 10*time.Second, "a Stable group of b alone", func() bool {
		m := instanceMembers()
		return len(m) == 1 && m["inst-b"] == ids["inst-b"]
	})
	wantCode(t, "heartbeat of the removed leader", hb(t, c, group, now["inst-a"], kmsg.StringPtr("inst-a"), bGen), kerr.UnknownMemberID)
	tr.check(t)
}

// TestGroupDescribeStates walks a group through every state with raw requests and checks what
// DescribeGroups and ListGroups report in each, as Apache does: the protocol and the members' metadata
// and assignments only once Stable; a heartbeat during CompletingRebalance answered NONE and a commit
// REBALANCE_IN_PROGRESS; a join with another protocol type, or with no protocol every member
// supports, INCONSISTENT_GROUP_PROTOCOL; Empty once everyone left, Dead once deleted.
func TestGroupDescribeStates(t *testing.T) {
	t.Parallel()
	const group, topic = "states", "states-topic"
	g := startGateway(t, backends()[0])
	ctx := testCtx(t, 60*time.Second)
	grpCreateTopic(t, ctx, newAdmin(t, g), topic, 2)
	c := dialRaw(t, g.Addr)
	listed := func() string {
		resp := roundTrip[*kmsg.ListGroupsResponse](c, 4, kmsg.NewPtrListGroupsRequest())
		for _, lg := range resp.Groups {
			if lg.Group == group {
				return lg.GroupState
			}
		}
		return ""
	}
	// expect checks the group's DescribeGroups and ListGroups answers; members lists the member ids
	// expected in join order, assigned whether the group is Stable (metadata and assignments shown).
	expect := func(state string, members ...string) kmsg.DescribeGroupsResponseGroup {
		t.Helper()
		d := describeRaw(t, c, group)
		if d.State != state || d.ProtocolType != "consumer" || len(d.Members) != len(members) {
			t.Fatalf("describe: state %q type %q %d members, want %s with %v", d.State, d.ProtocolType, len(d.Members), state, members)
		}
		if stable := state == "Stable"; (d.Protocol == "range") != stable || (!stable && d.Protocol != "") {
			t.Fatalf("describe in %s: protocol %q", state, d.Protocol)
		}
		for i, m := range d.Members {
			if m.MemberID != members[i] || m.ClientID != rawClientID || m.ClientHost != "/127.0.0.1" {
				t.Fatalf("describe in %s: member %d is %q (%s, %s), want %q", state, i, m.MemberID, m.ClientID, m.ClientHost, members[i])
			}
			if shown := len(m.ProtocolMetadata) > 0 || len(m.MemberAssignment) > 0; shown != (state == "Stable") {
				t.Fatalf("describe in %s: member %s metadata %x assignment %x", state, m.MemberID, m.ProtocolMetadata, m.MemberAssignment)
			}
		}
		if got := listed(); got != state {
			t.Fatalf("ListGroups: %q, DescribeGroups %q", got, state)
		}
		return d
	}

	// a joins alone and leads.
	a, gen := joinAlone(t, c, group, topic, 10000)
	d := expect("Stable", a)
	if m := d.Members[0]; !bytes.Equal(m.ProtocolMetadata, consumerMeta(topic)) || !bytes.Equal(m.MemberAssignment, consumerAssignment(topic, 0)) {
		t.Fatalf("Stable member: metadata %x assignment %x", m.ProtocolMetadata, m.MemberAssignment)
	}

	// Joins the group cannot take: another protocol type, no protocol in common.
	other := joinReq(group, "", nil, 10000, topic)
	other.ProtocolType = "connect"
	wantCode(t, "join with another protocol type", roundTrip[*kmsg.JoinGroupResponse](c, 3, other).ErrorCode, kerr.InconsistentGroupProtocol)
	other = joinReq(group, "", nil, 10000, topic)
	other.Protocols[0].Name = "roundrobin"
	wantCode(t, "join with no protocol in common", roundTrip[*kmsg.JoinGroupResponse](c, 3, other).ErrorCode, kerr.InconsistentGroupProtocol)
	expect("Stable", a)

	// b joins: PreparingRebalance until a rejoins.
	bj := asyncRoundTrip[*kmsg.JoinGroupResponse](dialRaw(t, g.Addr), 3, joinReq(group, "", nil, 10000, topic))
	waitFor(t, 10*time.Second, "PreparingRebalance", func() bool { return describeRaw(t, c, group).State == "PreparingRebalance" })
	d = describeRaw(t, c, group)
	if len(d.Members) != 2 || d.Members[0].MemberID != a {
		t.Fatalf("PreparingRebalance: members %+v", d.Members)
	}
	b := d.Members[1].MemberID
	expect("PreparingRebalance", a, b)
	wantCode(t, "a's heartbeat", hb(t, c, group, a, nil, gen), kerr.RebalanceInProgress)
	wantCode(t, "a's commit of its generation", commitAs(t, c, group, a, nil, gen, topic, 1), nil)

	// a rejoins: the join phase ends, CompletingRebalance until the leader's SyncGroup.
	ja := awaitRT(t, asyncRoundTrip[*kmsg.JoinGroupResponse](dialRaw(t, g.Addr), 3, joinReq(group, a, nil, 10000, topic)))
	jb := awaitRT(t, bj)
	if ja.ErrorCode != 0 || jb.ErrorCode != 0 || ja.Generation != gen+1 || jb.MemberID != b || ja.LeaderID != a {
		t.Fatalf("rejoin: a %d gen %d leader %q, b %d %q", ja.ErrorCode, ja.Generation, ja.LeaderID, jb.ErrorCode, jb.MemberID)
	}
	gen++
	expect("CompletingRebalance", a, b)
	wantCode(t, "b's first heartbeat, before any SyncGroup", hb(t, c, group, b, nil, gen), nil)
	wantCode(t, "a's heartbeat", hb(t, c, group, a, nil, gen), nil)
	wantCode(t, "b's heartbeat with the previous generation", hb(t, c, group, b, nil, gen-1), kerr.IllegalGeneration)
	wantCode(t, "b's commit before its assignment", commitAs(t, c, group, b, nil, gen, topic, 1), kerr.RebalanceInProgress)
	expect("CompletingRebalance", a, b)

	bs := asyncRoundTrip[*kmsg.SyncGroupResponse](dialRaw(t, g.Addr), 3, syncReq(group, b, nil, gen, nil))
	wantCode(t, "leader's SyncGroup", roundTrip[*kmsg.SyncGroupResponse](c, 3, syncReq(group, a, nil, gen,
		map[string][]byte{a: consumerAssignment(topic, 0), b: consumerAssignment(topic, 1)})).ErrorCode, nil)
	wantCode(t, "b's SyncGroup", awaitRT(t, bs).ErrorCode, nil)
	expect("Stable", a, b)
	wantCode(t, "b's commit", commitAs(t, c, group, b, nil, gen, topic, 2), nil)

	// Everyone leaves: Empty; deleted: Dead.
	l := kmsg.NewPtrLeaveGroupRequest()
	l.Group = group
	for _, id := range []string{a, b} {
		m := kmsg.NewLeaveGroupRequestMember()
		m.MemberID = id
		l.Members = append(l.Members, m)
	}
	if lr := roundTrip[*kmsg.LeaveGroupResponse](c, 3, l); lr.ErrorCode != 0 || lr.Members[0].ErrorCode != 0 || lr.Members[1].ErrorCode != 0 {
		t.Fatalf("leave: %+v", lr)
	}
	d = describeRaw(t, c, group)
	if d.State != "Empty" || d.ProtocolType != "consumer" || d.Protocol != "" || len(d.Members) != 0 || listed() != "Empty" {
		t.Fatalf("after everyone left: %+v", d)
	}
	del := kmsg.NewPtrDeleteGroupsRequest()
	del.Groups = []string{group}
	if dr := roundTrip[*kmsg.DeleteGroupsResponse](c, 2, del); len(dr.Groups) != 1 || dr.Groups[0].ErrorCode != 0 {
		t.Fatalf("delete: %+v", dr.Groups)
	}
	d = describeRaw(t, c, group)
	if d.State != "Dead" || d.ProtocolType != "" || len(d.Members) != 0 || listed() != "" {
		t.Fatalf("after the deletion: %+v (listed %q)", d, listed())
	}
}

// saramaMember is a Sarama ConsumerGroup in a consume loop whose sessions are tracked in tr: a session's
// claims are assigned at Setup and revoked at Cleanup (Sarama is eager: every claim ends before it
// rejoins).
type saramaMember struct {
	name   string
	tr     *grpTracker
	cg     sarama.ConsumerGroup
	cancel context.CancelFunc
	done   chan struct{}
	errs   chan error
	once   sync.Once
}

func (m *saramaMember) Setup(s sarama.ConsumerGroupSession) error {
	m.tr.assign(m.name, s.Claims())
	return nil
}

func (m *saramaMember) Cleanup(s sarama.ConsumerGroupSession) error {
	m.tr.revoke(m.name, s.Claims())
	return nil
}

func (m *saramaMember) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for msg := range claim.Messages() {
		m.tr.consume(m.name, []*kgo.Record{{Topic: msg.Topic, Partition: msg.Partition, Offset: msg.Offset}})
		s.MarkMessage(msg, "")
	}
	return nil
}

func startSaramaMember(t *testing.T, g *testGateway, tr *grpTracker, group, topic, name string) *saramaMember {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_8_0_0
	cfg.ClientID = name
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	cfg.Consumer.Group.Session.Timeout = 6 * time.Second
	cfg.Consumer.Group.Heartbeat.Interval = 200 * time.Millisecond
	cfg.Consumer.Group.Rebalance.Timeout = 5 * time.Second
	cfg.Consumer.MaxWaitTime = 200 * time.Millisecond
	cfg.Consumer.Return.Errors = true
	cg, err := sarama.NewConsumerGroup([]string{g.Addr}, group, cfg)
	if err != nil {
		t.Fatalf("sarama consumer group %s: %v", name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &saramaMember{name: name, tr: tr, cg: cg, cancel: cancel, done: make(chan struct{}), errs: make(chan error, 1)}
	go func() {
		defer close(m.done)
		for ctx.Err() == nil {
			if err := cg.Consume(ctx, []string{topic}, m); err != nil && !errors.Is(err, sarama.ErrClosedConsumerGroup) {
				tr.fail("%s: consume: %v", name, err)
				return
			}
		}
	}()
	go func() {
		for err := range cg.Errors() {
			tr.fail("%s: %v", name, err)
		}
	}()
	t.Cleanup(m.stop)
	return m
}

// stop closes the consumer group: its session ends (committing what it marked) and it leaves.
func (m *saramaMember) stop() {
	m.once.Do(func() {
		m.cancel()
		if err := m.cg.Close(); err != nil {
			m.tr.fail("%s: close: %v", m.name, err)
		}
		<-m.done
	})
}

// TestGroupSaramaRebalances: Sarama ConsumerGroups (range, eager) and a franz-go member with the range
// balancer share a group through joins and leaves, with Sarama leading franz-go and franz-go leading Sarama. Sarama runs its own
// heartbeat and rejoin logic against the coordinator's answers: no error reaches it, no partition is
// held by two members at once, every record is consumed and, once all stopped, committed.
func TestGroupSaramaRebalances(t *testing.T) {
	t.Parallel()
	const (
		topic = "sarama-reb"
		group = "sarama-reb-group"
		parts = int32(6)
	)
	g := startGateway(t, backends()[0])
	ctx := testCtx(t, 120*time.Second)
	adm := newAdmin(t, g)
	grpCreateTopic(t, ctx, adm, topic, parts)
	prod := grpProducer(t, g)
	tr := newGrpTracker()
	st := &rebStats{}
	tag := 'a'
	phase := func(what string, members ...string) {
		t.Helper()
		waitFor(t, 30*time.Second, what, func() bool { return tr.balanced(members, parts) })
		waitFor(t, 15*time.Second, what+" (DescribeGroups Stable)", func() bool {
			d := grpDescribe(t, ctx, adm, group)
			return d.State == "Stable" && len(d.Members) == len(members)
		})
		grpProduce(t, ctx, prod, topic, parts, 5, string(tag))
		tag++
		ends := grpEndOffsets(t, ctx, adm, topic)
		waitFor(t, 30*time.Second, "every record consumed: "+what, func() bool { return tr.consumedBelow(ends) })
		tr.check(t)
		st.check(t)
		t.Logf("%s: %v", what, tr.ownership())
	}

	s1 := startSaramaMember(t, g, tr, group, topic, "s1")
	phase("s1 alone", "s1")
	s2 := startSaramaMember(t, g, tr, group, topic, "s2")
	phase("s1 and s2", "s1", "s2")
	k := startRebMember(t, g, tr, st, group, topic, "k", kgo.Balancers(kgo.RangeBalancer()), kgo.RebalanceTimeout(5*time.Second))
	phase("s1, s2 and k", "s1", "s2", "k")
	s1.stop() // s1 led: s2, the next to have joined, leads
	phase("s2 and k", "s2", "k")
	s2.stop() // franz-go leads
	phase("k alone", "k")
	s3 := startSaramaMember(t, g, tr, group, topic, "s3")
	phase("k and s3", "k", "s3")
	k.stop()
	phase("s3 alone", "s3")
	s3.stop()

	ends := grpEndOffsets(t, ctx, adm, topic)
	if got := grpOffsets(t, ctx, adm, group, topic); !mapsEqual(got, ends) {
		t.Fatalf("committed %v once everyone stopped, want the ends %v", got, ends)
	}
	tr.check(t)
}

// TestGroupInitialDelayAfterEmpty: a group that went Empty after a generation rebalances from Empty
// with the initial delay (group.initial.rebalance.delay.ms) extended while new members keep coming, as
// Apache 4.x's coordinator does at any generation (kgate extended it at generation 0 only): franz-go
// members A and B join within the first delay, so the join phase is still open once it has passed, and
// C, joining then, is in the same generation, the first after the Empty one.
//
// The join phase lasts two delays from A's join. C starts a quarter delay after the first has surely
// ended (A joined before opened), which leaves it about three quarters of a delay to join, less the
// time the test took to see A joined.
func TestGroupInitialDelayAfterEmpty(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const delay = 3 * time.Second
		g := startGateway(t, b, gatewayOpts{mutate: func(c *gateway.Config) { c.Groups.InitialRebalanceDelay = delay }})
		ctx := testCtx(t, 60*time.Second)
		adm := newAdmin(t, g)
		grpCreateTopic(t, ctx, adm, "late", 3)
		member := func() *kgo.Client {
			return newClient(t, g, kgo.ConsumerGroup("late"), kgo.ConsumeTopics("late"),
				kgo.SessionTimeout(10*time.Second), kgo.HeartbeatInterval(500*time.Millisecond))
		}
		generation := func(cl *kgo.Client) int32 { _, gen := cl.GroupMetadata(); return gen }

		first := member()
		waitFor(t, 15*time.Second, "the first member in a generation", func() bool { return generation(first) > 0 })
		firstGen := generation(first)
		first.Close() // leaves: the group is Empty at the next generation
		waitFor(t, 10*time.Second, "the group Empty", func() bool { return grpDescribe(t, ctx, adm, "late").State == "Empty" })

		a := member()
		waitFor(t, 10*time.Second, "A joining", func() bool { return len(grpDescribe(t, ctx, adm, "late").Members) == 1 })
		opened := time.Now() // A's JoinGroup arrived before this: the first delay ends before opened+delay
		bm := member()
		waitFor(t, 10*time.Second, "B joining", func() bool { return len(grpDescribe(t, ctx, adm, "late").Members) == 2 })
		if time.Since(opened) > delay/2 {
			t.Fatalf("B joined %v after A: too late to be in the first delay for sure", time.Since(opened))
		}
		time.Sleep(time.Until(opened.Add(delay + delay/4))) // past the first delay, well within its extension
		if d := grpDescribe(t, ctx, adm, "late"); d.State != "PreparingRebalance" {
			t.Fatalf("after the first delay with a member added in it: %s with %d members, want PreparingRebalance (extended)", d.State, len(d.Members))
		}
		c := member()
		want := firstGen + 2 // the Empty generation, then the one all three join
		waitFor(t, 30*time.Second, "A, B and C in one generation", func() bool {
			return generation(a) == want && generation(bm) == want && generation(c) == want
		})
		if d := grpDescribe(t, ctx, adm, "late"); len(d.Members) != 3 {
			t.Fatalf("group: %s with %d members, want 3", d.State, len(d.Members))
		}
	})
}
