package coordinator

import (
	"bytes"
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

func TestStaticMemberRejoin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rebalances atomic.Int32
		c := newCoordinator(t, Config{OnRebalance: func(string) { rebalances.Add(1) }})
		ctx := context.Background()
		a := newClient(t, c, "g", "a", 5, "t").static("ia")
		b := newClient(t, c, "g", "b", 5, "t").static("ib")
		cls := stabilize(t, []*tclient{a, b})
		leader, follower := cls[0], cls[1]
		old := *follower

		// The follower restarts: a new member id, the same generation, no rebalance.
		fresh := newClient(t, c, "g", follower.clientID, 5, "t").static(*follower.instance)
		resp := ready(t, async(fresh.join))
		wantCode(t, "static rejoin", resp.ErrorCode, 0)
		if resp.MemberID == old.memberID || !strings.HasPrefix(resp.MemberID, *follower.instance+"-") {
			t.Errorf("member id %q (old %q)", resp.MemberID, old.memberID)
		}
		if resp.Generation != 1 || resp.LeaderID != leader.memberID || len(resp.Members) != 0 {
			t.Errorf("static rejoin: %+v", resp)
		}
		sresp := fresh.sync(nil)
		wantCode(t, "static resync", sresp.ErrorCode, 0)
		if !bytes.Equal(sresp.MemberAssignment, old.assignment) || len(old.assignment) == 0 {
			t.Error("restarted member did not get its cached assignment")
		}
		gi := describe(t, c, "g")
		if gi.State != StateStable || gi.Generation != 1 || rebalances.Load() != 1 {
			t.Errorf("after static rejoin: state %s generation %d rebalances %d", gi.State, gi.Generation, rebalances.Load())
		}
		for _, m := range gi.Members {
			if m.MemberID == old.memberID {
				t.Error("old member id still listed")
			}
		}

		// The old incarnation is fenced everywhere.
		wantCode(t, "old heartbeat", old.heartbeat(), kerr.FencedInstanceID.Code)
		wantCode(t, "old sync", old.sync(nil).ErrorCode, kerr.FencedInstanceID.Code)
		wantCode(t, "old commit", old.commit(), kerr.FencedInstanceID.Code)
		wantCode(t, "old join", old.joinOnce(ctx).ErrorCode, kerr.FencedInstanceID.Code)
		lresp := c.LeaveGroup(ctx, leaveReq(4, "g", leaving(old.memberID, old.instance)))
		wantCode(t, "old leave", lresp.Members[0].ErrorCode, kerr.FencedInstanceID.Code)
		noInstance := old
		noInstance.instance = nil
		wantCode(t, "old id without instance", noInstance.heartbeat(), kerr.UnknownMemberID.Code)
		wantCode(t, "new heartbeat", fresh.heartbeat(), 0)

		// The leader restarts below v9: it is told the old leader id so it does
		// not compute an assignment the Stable group would ignore.
		oldLeader := *leader
		freshLeader := newClient(t, c, "g", leader.clientID, 5, "t").static(*leader.instance)
		resp = ready(t, async(freshLeader.join))
		wantCode(t, "leader static rejoin", resp.ErrorCode, 0)
		if resp.LeaderID != oldLeader.memberID || resp.MemberID == oldLeader.memberID || len(resp.Members) != 0 || resp.SkipAssignment {
			t.Errorf("leader static rejoin v5: %+v", resp)
		}
		if sresp := freshLeader.sync(nil); !bytes.Equal(sresp.MemberAssignment, oldLeader.assignment) {
			t.Error("restarted leader lost its assignment")
		}
		if gi := describe(t, c, "g"); gi.Leader != freshLeader.memberID {
			t.Errorf("leadership did not move to the new member id: %s", gi.Leader)
		}

		// At v9 the restarted leader learns it leads, with the members, and is
		// told to skip the assignment (KIP-814).
		v9 := newClient(t, c, "g", leader.clientID, 9, "t").static(*leader.instance)
		resp = ready(t, async(v9.join))
		if resp.ErrorCode != 0 || resp.LeaderID != resp.MemberID || len(resp.Members) != 2 || !resp.SkipAssignment || resp.Generation != 1 {
			t.Errorf("leader static rejoin v9: %+v", resp)
		}
		for _, m := range resp.Members {
			if m.InstanceID == nil {
				t.Errorf("v9 member %s without instance id", m.MemberID)
			}
		}
		if rebalances.Load() != 1 {
			t.Errorf("static rejoins caused %d rebalances", rebalances.Load()-1)
		}

		// A restart with a changed subscription rebalances.
		changed := newClient(t, c, "g", follower.clientID, 5, "t", "u").static(*follower.instance)
		cj := async(changed.join)
		blocked(t, cj)
		if gi := describe(t, c, "g"); gi.State != StatePreparingRebalance || rebalances.Load() != 2 {
			t.Errorf("changed subscription: state %s, rebalances %d", gi.State, rebalances.Load())
		}
	})
}

func TestStaticMemberSurvivesRebalanceTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCoordinator(t, Config{})
		a := newClient(t, c, "g", "a", 5, "t").static("ia")
		b := newClient(t, c, "g", "b", 5, "t").static("ib")
		for _, cl := range []*tclient{a, b} {
			cl.rebalance = 5 * time.Second
		}
		cls := stabilize(t, []*tclient{a, b})
		// The leader rejoins; the other static member neither rejoins nor
		// heartbeats. Unlike a dynamic member it is not dropped when the join
		// phase times out: it is part of generation 2 (Apache).
		start := time.Now()
		resp := cls[0].join()
		if time.Since(start) != 5*time.Second || resp.Generation != 2 || len(resp.Members) != 2 {
			t.Errorf("rejoin after %v: generation %d, %d members", time.Since(start), resp.Generation, len(resp.Members))
		}
		wantCode(t, "leader sync", cls[0].sync(nil).ErrorCode, 0)
		// It goes when it misses its SyncGroup deadline (the rebalance timeout).
		time.Sleep(6 * time.Second)
		gi := describe(t, c, "g")
		if len(gi.Members) != 1 || gi.State != StatePreparingRebalance {
			t.Errorf("after the sync deadline: %d members, state %s", len(gi.Members), gi.State)
		}
	})
}

func TestStaticMemberFencedOnJoinWithStaleID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCoordinator(t, Config{})
		a := newClient(t, c, "g", "a", 5, "t").static("ia")
		stabilize(t, []*tclient{a})
		// A member id that is not the one registered for the instance id.
		dup := newClient(t, c, "g", "a", 5, "t").static("ia")
		dup.memberID = "ia-not-current"
		wantCode(t, "stale member id", dup.joinOnce(context.Background()).ErrorCode, kerr.FencedInstanceID.Code)
		// An instance id nobody holds, with a member id: UNKNOWN_MEMBER_ID.
		ghost := newClient(t, c, "g", "a", 5, "t").static("nobody")
		ghost.memberID = a.memberID
		wantCode(t, "unregistered instance", ghost.joinOnce(context.Background()).ErrorCode, kerr.UnknownMemberID.Code)
	})
}

// TestUnloadDropsGroupsCoordinatedElsewhere: groups whose coordination moved are dropped from memory and
// the others kept; a static member that rejoined elsewhere meanwhile is then not fenced here when the
// group comes back.
func TestUnloadDropsGroupsCoordinatedElsewhere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCoordinator(t, Config{})
		a := newClient(t, c, "moved", "a", 5, "t").static("ia")
		stabilize(t, []*tclient{a})
		b := newClient(t, c, "kept", "b", 5, "t")
		stabilize(t, []*tclient{b})
		c.Unload(context.Background(), func(group string) bool { return group == "kept" })
		if _, live := c.Describe(context.Background(), "moved"); live {
			t.Fatal("the moved group is still in memory")
		}
		if info, live := c.Describe(context.Background(), "kept"); !live || info.State != "Stable" {
			t.Fatalf("the kept group: %+v, live %v", info, live)
		}
		// The member rejoined on the other gateway with a new member id, and the group came back.
		back := newClient(t, c, "moved", "a", 5, "t").static("ia")
		back.memberID = "ia-from-elsewhere"
		if code := back.joinOnce(context.Background()).ErrorCode; code == kerr.FencedInstanceID.Code {
			t.Fatal("a static member that rejoined elsewhere is fenced after the group came back")
		}
		wantCode(t, "kept member heartbeat", b.heartbeat(), 0)
	})
}
