package coordinator

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestSessionTimeoutEviction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCoordinator(t, Config{})
		cls := stableGroup(t, c, "g", 2, 4)
		a, b := cls[0], cls[1]
		start := time.Now() // b's session timer restarted when its SyncGroup was answered

		// a heartbeats every 3s, b never does: b is evicted 10s in.
		var evictedBy time.Duration
		for evictedBy == 0 {
			time.Sleep(3 * time.Second)
			switch code := a.heartbeat(); code {
			case 0:
			case kerr.RebalanceInProgress.Code:
				evictedBy = time.Since(start)
			default:
				t.Fatalf("heartbeat: %v", codeName(code))
			}
		}
		if evictedBy != 12*time.Second {
			t.Errorf("rebalance seen at %v, want at the first heartbeat after 10s (12s)", evictedBy)
		}
		wantCode(t, "evicted member heartbeat", b.heartbeat(), kerr.UnknownMemberID.Code)

		// a is the only member left: its rejoin completes the join phase at once.
		rejoined := time.Now()
		resp := a.join()
		wantCode(t, "rejoin", resp.ErrorCode, 0)
		if resp.Generation != 2 || len(resp.Members) != 1 || time.Since(rejoined) != 0 {
			t.Errorf("rejoin: generation %d, %d members, after %v", resp.Generation, len(resp.Members), time.Since(rejoined))
		}
	})
}

func TestRebalanceTimeoutEvictsNonRejoiner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCoordinator(t, Config{})
		a := newClient(t, c, "g", "a", 5, "t")
		b := newClient(t, c, "g", "b", 5, "t")
		for _, cl := range []*tclient{a, b} {
			cl.session, cl.rebalance = 30*time.Second, 20*time.Second
		}
		cls := stabilize(t, []*tclient{a, b})
		leader, follower := cls[0], cls[1]

		// The leader's rejoin starts a rebalance; the follower keeps
		// heartbeating (told REBALANCE_IN_PROGRESS) but never rejoins.
		start := time.Now()
		var joinedAfter time.Duration
		lj := async(func() *kmsg.JoinGroupResponse {
			r := leader.join()
			joinedAfter = time.Since(start)
			return r
		})
		for range 6 { // 3s .. 18s
			time.Sleep(3 * time.Second)
			wantCode(t, "follower heartbeat", follower.heartbeat(), kerr.RebalanceInProgress.Code)
		}
		resp := <-lj
		wantCode(t, "leader rejoin", resp.ErrorCode, 0)
		if joinedAfter != 20*time.Second {
			t.Errorf("join phase ended after %v, want the rebalance timeout (20s)", joinedAfter)
		}
		if resp.Generation != 2 || len(resp.Members) != 1 || resp.Members[0].MemberID != leader.memberID {
			t.Errorf("new generation: %+v", resp)
		}
		wantCode(t, "evicted follower heartbeat", follower.heartbeat(), kerr.UnknownMemberID.Code)
	})
}

func TestHeartbeatErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCoordinator(t, Config{})
		cls := stableGroup(t, c, "g", 2, 4)
		a, b := cls[0], cls[1]

		noGroup := *b
		noGroup.group = ""
		wantCode(t, "empty group id", noGroup.heartbeat(), kerr.InvalidGroupID.Code)
		noGroup.group = "unknown"
		wantCode(t, "unknown group", noGroup.heartbeat(), kerr.UnknownMemberID.Code)
		stranger := *b
		stranger.memberID = "stranger"
		wantCode(t, "unknown member", stranger.heartbeat(), kerr.UnknownMemberID.Code)
		oldGen := *b
		oldGen.gen = 7
		wantCode(t, "wrong generation", oldGen.heartbeat(), kerr.IllegalGeneration.Code)
		wantCode(t, "stable", b.heartbeat(), 0)

		lj := async(a.join) // leader rejoin: PreparingRebalance
		blocked(t, lj)
		wantCode(t, "preparing rebalance", b.heartbeat(), kerr.RebalanceInProgress.Code)
		wantCode(t, "follower rejoin", b.join().ErrorCode, 0)
		wantCode(t, "leader rejoin", (<-lj).ErrorCode, 0)
		if gi := describe(t, c, "g"); gi.State != StateCompletingRebalance {
			t.Fatalf("state %s", gi.State)
		}
		wantCode(t, "completing rebalance", b.heartbeat(), 0)
		oldGen.gen = 1
		wantCode(t, "previous generation", oldGen.heartbeat(), kerr.IllegalGeneration.Code)
	})
}

func leaveReq(version int16, group string, members ...kmsg.LeaveGroupRequestMember) *kmsg.LeaveGroupRequest {
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Version = version
	req.Group = group
	if version < 3 {
		req.MemberID = members[0].MemberID
	} else {
		req.Members = members
	}
	return req
}

func leaving(memberID string, instanceID *string) kmsg.LeaveGroupRequestMember {
	return kmsg.LeaveGroupRequestMember{MemberID: memberID, InstanceID: instanceID}
}

func TestLeaveGroupV0(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCoordinator(t, Config{})
		ctx := context.Background()
		cls := stableGroup(t, c, "g", 2, 1)
		a, b := cls[0], cls[1]

		resp := c.LeaveGroup(ctx, leaveReq(0, "g", leaving(b.memberID, nil)))
		wantCode(t, "leave", resp.ErrorCode, 0)
		if resp.Version != 0 || resp.Members != nil {
			t.Errorf("v0 response: %+v", resp)
		}
		wantCode(t, "after leave", a.heartbeat(), kerr.RebalanceInProgress.Code)
		wantCode(t, "unknown member", c.LeaveGroup(ctx, leaveReq(0, "g", leaving("nope", nil))).ErrorCode, kerr.UnknownMemberID.Code)
		wantCode(t, "unknown group", c.LeaveGroup(ctx, leaveReq(1, "nope", leaving("x", nil))).ErrorCode, kerr.UnknownMemberID.Code)
		wantCode(t, "empty group id", c.LeaveGroup(ctx, leaveReq(2, "", leaving("x", nil))).ErrorCode, kerr.InvalidGroupID.Code)

		resp2 := a.join()
		if resp2.Generation != 2 || len(resp2.Members) != 1 {
			t.Fatalf("rejoin: %+v", resp2)
		}
		wantCode(t, "last leave", c.LeaveGroup(ctx, leaveReq(2, "g", leaving(a.memberID, nil))).ErrorCode, 0)
		gi := describe(t, c, "g")
		if gi.State != StateEmpty || len(gi.Members) != 0 || gi.Generation != 3 || gi.Leader != "" || gi.Protocol != "" {
			t.Errorf("after the last member left: %+v", gi)
		}
	})
}

func TestLeaveGroupV3(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCoordinator(t, Config{})
		ctx := context.Background()
		s1 := newClient(t, c, "g", "s1", 5, "t").static("i1")
		s2 := newClient(t, c, "g", "s2", 5, "t").static("i2")
		d := newClient(t, c, "g", "d", 5, "t")
		stabilize(t, []*tclient{s1, s2, d})
		p := newClient(t, c, "g", "p", 5, "t")
		wantCode(t, "pending", p.joinOnce(ctx).ErrorCode, kerr.MemberIDRequired.Code)

		members := []kmsg.LeaveGroupRequestMember{
			leaving(d.memberID, nil),
			leaving("", ptr("i1")),
			leaving("bogus", nil),
			leaving("wrong-id", ptr("i2")),
			leaving(p.memberID, nil),
			leaving("", ptr("i9")),
		}
		members[1].Reason = ptr("shutting down")
		want := []int16{0, 0, kerr.UnknownMemberID.Code, kerr.FencedInstanceID.Code, 0, kerr.UnknownMemberID.Code}
		resp := c.LeaveGroup(ctx, leaveReq(5, "g", members...))
		wantCode(t, "top level", resp.ErrorCode, 0)
		if resp.Version != 5 || len(resp.Members) != len(want) {
			t.Fatalf("response: %+v", resp)
		}
		for i, m := range resp.Members {
			wantCode(t, "member "+m.MemberID, m.ErrorCode, want[i])
			if m.MemberID != members[i].MemberID || deref(m.InstanceID) != deref(members[i].InstanceID) {
				t.Errorf("member %d not echoed: %+v", i, m)
			}
		}
		gi := describe(t, c, "g")
		if gi.State != StatePreparingRebalance || len(gi.Members) != 1 || gi.Members[0].MemberID != s2.memberID {
			t.Errorf("after leave: %+v", gi)
		}

		resp = c.LeaveGroup(ctx, leaveReq(3, "nope", leaving("a", nil), leaving("", ptr("b"))))
		wantCode(t, "unknown group top level", resp.ErrorCode, 0)
		for _, m := range resp.Members {
			wantCode(t, "unknown group member", m.ErrorCode, kerr.UnknownMemberID.Code)
		}
	})
}

func TestSyncErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCoordinator(t, Config{})
		ctx := context.Background()
		cls := stableGroup(t, c, "g", 2, 5)
		a, b := cls[0], cls[1]
		assigned := b.assignment

		req := b.syncRequest(nil)
		req.Group = ""
		wantCode(t, "empty group id", c.SyncGroup(ctx, req).ErrorCode, kerr.InvalidGroupID.Code)
		req = b.syncRequest(nil)
		req.Group = "nope"
		wantCode(t, "unknown group", c.SyncGroup(ctx, req).ErrorCode, kerr.UnknownMemberID.Code)
		req = b.syncRequest(nil)
		req.MemberID = "stranger"
		wantCode(t, "unknown member", c.SyncGroup(ctx, req).ErrorCode, kerr.UnknownMemberID.Code)
		req = b.syncRequest(nil)
		req.Generation = 9
		wantCode(t, "wrong generation", c.SyncGroup(ctx, req).ErrorCode, kerr.IllegalGeneration.Code)
		req = b.syncRequest(nil)
		req.ProtocolType = ptr("connect")
		wantCode(t, "v5 protocol type", c.SyncGroup(ctx, req).ErrorCode, kerr.InconsistentGroupProtocol.Code)
		req = b.syncRequest(nil)
		req.Protocol = ptr("roundrobin")
		wantCode(t, "v5 protocol", c.SyncGroup(ctx, req).ErrorCode, kerr.InconsistentGroupProtocol.Code)
		req = b.syncRequest(nil)
		req.ProtocolType, req.Protocol = ptr("consumer"), ptr("range")
		wantCode(t, "v5 matching protocol", c.SyncGroup(ctx, req).ErrorCode, 0)
		req.Version = 4 // not checked below v5
		req.ProtocolType = ptr("connect")
		wantCode(t, "v4 ignores protocol type", c.SyncGroup(ctx, req).ErrorCode, 0)

		// Stable: the current assignment again.
		if resp := b.sync(nil); resp.ErrorCode != 0 || string(resp.MemberAssignment) != string(assigned) {
			t.Errorf("stable resync: %v %x", codeName(resp.ErrorCode), resp.MemberAssignment)
		}

		lj := async(a.join)
		blocked(t, lj)
		wantCode(t, "preparing rebalance", b.sync(nil).ErrorCode, kerr.RebalanceInProgress.Code)
		wantCode(t, "follower rejoin", b.join().ErrorCode, 0)
		wantCode(t, "leader rejoin", (<-lj).ErrorCode, 0)

		// A rebalance starting while a follower waits in SyncGroup releases it.
		bs := async(func() *kmsg.SyncGroupResponse { return b.sync(nil) })
		blocked(t, bs)
		n := newClient(t, c, "g", "n", 3, "t")
		nj := async(n.join)
		wantCode(t, "waiting follower", ready(t, bs).ErrorCode, kerr.RebalanceInProgress.Code)
		blocked(t, nj)
		// The old generation's assignment is gone.
		for _, m := range describe(t, c, "g").Members {
			if m.Assignment != nil {
				t.Errorf("member %s kept an assignment through the rebalance", m.MemberID)
			}
		}
	})
}

func TestPendingSyncExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCoordinator(t, Config{})
		a := newClient(t, c, "g", "a", 5, "t")
		b := newClient(t, c, "g", "b", 5, "t")
		ja, jb := async(a.join), async(b.join)
		<-ja
		<-jb
		start := time.Now()
		leader, follower := a, b
		if b.isLeader() {
			leader, follower = b, a
		}
		wantCode(t, "leader sync", leader.sync(nil).ErrorCode, 0)
		// The follower heartbeats but never syncs: after the rebalance timeout
		// it is removed and the group rebalances.
		for {
			time.Sleep(7 * time.Second)
			code := follower.heartbeat()
			if code == kerr.UnknownMemberID.Code {
				break
			}
			wantCode(t, "follower heartbeat", code, 0)
			wantCode(t, "leader heartbeat", leader.heartbeat(), 0)
			if time.Since(start) > 2*testRebalance {
				t.Fatal("follower never removed")
			}
		}
		if got := time.Since(start); got != 63*time.Second {
			t.Errorf("follower removed by %v, want 63s (first heartbeat after 60s)", got)
		}
		wantCode(t, "leader heartbeat", leader.heartbeat(), kerr.RebalanceInProgress.Code)
	})
}
