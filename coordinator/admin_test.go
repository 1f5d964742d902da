package coordinator

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestDescribeListDelete(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCoordinator(t, Config{})
		ctx := context.Background()
		stableGroup(t, c, "busy", 1, 5)
		idle := stableGroup(t, c, "idle", 1, 5)[0]
		wantCode(t, "leave", c.LeaveGroup(ctx, leaveReq(0, "idle", leaving(idle.memberID, nil))).ErrorCode, 0)

		got := c.List(ctx)
		if len(got) != 2 || got[0].Group != "busy" || got[0].State != StateStable || got[1].Group != "idle" || got[1].State != StateEmpty {
			t.Fatalf("list: %+v", got)
		}
		for _, gi := range got {
			if gi.Members != nil || gi.ProtocolType != "consumer" {
				t.Errorf("list entry %+v", gi)
			}
		}
		if _, ok := c.Describe(ctx, "unknown"); ok {
			t.Error("unknown group described")
		}

		wantCode(t, "delete active", c.Delete(ctx, "busy"), kerr.NonEmptyGroup.Code)
		wantCode(t, "delete unknown", c.Delete(ctx, "unknown"), kerr.GroupIDNotFound.Code)
		wantCode(t, "delete empty", c.Delete(ctx, "idle"), 0)
		if _, ok := c.Describe(ctx, "idle"); ok {
			t.Error("deleted group still described")
		}
		if got := c.List(ctx); len(got) != 1 || got[0].Group != "busy" {
			t.Errorf("list after delete: %+v", got)
		}
		// A deleted group can be created again from scratch.
		again := newClient(t, c, "idle", "again", 5, "t")
		if resp := again.join(); resp.ErrorCode != 0 || resp.Generation != 1 {
			t.Errorf("recreate: %v generation %d", codeName(resp.ErrorCode), resp.Generation)
		}
	})
}

func TestEmptyGroupRetention(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCoordinator(t, Config{})
		forever := newCoordinator(t, Config{EmptyGroupRetention: -1})
		ctx := context.Background()
		for _, co := range []*Coordinator{c, forever} {
			cl := stableGroup(t, co, "g", 1, 5)[0]
			wantCode(t, "leave", co.LeaveGroup(ctx, leaveReq(0, "g", leaving(cl.memberID, nil))).ErrorCode, 0)
		}
		time.Sleep(DefaultEmptyGroupRetention - time.Minute)
		describe(t, c, "g")
		time.Sleep(2 * time.Minute)
		if _, ok := c.Describe(ctx, "g"); ok {
			t.Error("empty group kept past its retention")
		}
		time.Sleep(time.Hour)
		describe(t, forever, "g")
	})
}

func TestContextCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCoordinator(t, Config{})

		// A new member's JoinGroup, cancelled during the initial delay, returns
		// at once and the member is withdrawn.
		a := newClient(t, c, "g", "a", 3, "t")
		ctx, cancel := context.WithCancel(t.Context())
		start := time.Now()
		ch := async(func() *kmsg.JoinGroupResponse { return c.JoinGroup(ctx, a.joinRequest(), "a", "host") })
		time.Sleep(time.Second)
		cancel()
		resp := ready(t, ch)
		wantCode(t, "cancelled join", resp.ErrorCode, kerr.RebalanceInProgress.Code)
		if time.Since(start) != time.Second || resp.Version != 3 {
			t.Errorf("cancelled join returned after %v, version %d", time.Since(start), resp.Version)
		}
		if gi := describe(t, c, "g"); len(gi.Members) != 0 {
			t.Errorf("abandoned new member still in the group: %+v", gi.Members)
		}

		// An existing member's cancelled JoinGroup: it stays, not rejoined.
		cls := stableGroup(t, c, "s", 2, 5)
		leader, follower := cls[0], cls[1]
		ctx, cancel = context.WithCancel(t.Context())
		ch = async(func() *kmsg.JoinGroupResponse { return c.JoinGroup(ctx, leader.joinRequest(), "c0", "host") })
		blocked(t, ch)
		cancel()
		wantCode(t, "cancelled rejoin", ready(t, ch).ErrorCode, kerr.RebalanceInProgress.Code)
		if gi := describe(t, c, "s"); len(gi.Members) != 2 || gi.State != StatePreparingRebalance {
			t.Errorf("after cancelled rejoin: %+v", gi)
		}
		lj := async(leader.join)
		blocked(t, lj)
		wantCode(t, "follower rejoin", follower.join().ErrorCode, 0)
		wantCode(t, "leader rejoin", (<-lj).ErrorCode, 0)

		// A follower's SyncGroup cancelled while it waits for the leader.
		ctx, cancel = context.WithCancel(t.Context())
		sch := async(func() *kmsg.SyncGroupResponse { return c.SyncGroup(ctx, follower.syncRequest(nil)) })
		blocked(t, sch)
		cancel()
		wantCode(t, "cancelled sync", ready(t, sch).ErrorCode, kerr.RebalanceInProgress.Code)
		wantCode(t, "leader sync", leader.sync(map[string][]byte{follower.memberID: consumerAssignment("t", 7)}).ErrorCode, 0)
		if resp := follower.sync(nil); resp.ErrorCode != 0 || len(resp.MemberAssignment) == 0 {
			t.Errorf("follower resync: %v", codeName(resp.ErrorCode))
		}

		// Already-cancelled contexts.
		done, cancelDone := context.WithCancel(t.Context())
		cancelDone()
		hb := kmsg.NewPtrHeartbeatRequest()
		hb.Group, hb.MemberID, hb.Generation = "s", follower.memberID, follower.gen
		wantCode(t, "heartbeat", c.Heartbeat(done, hb).ErrorCode, kerr.CoordinatorNotAvailable.Code)
		wantCode(t, "commit", c.ValidateCommit(done, "s", follower.memberID, nil, follower.gen), kerr.CoordinatorNotAvailable.Code)
		if _, ok := c.Describe(done, "s"); ok {
			t.Error("describe with a cancelled context")
		}
		if got := c.List(done); len(got) != 0 {
			t.Errorf("list with a cancelled context: %d groups", len(got))
		}
	})
}

func TestCloseAnswersWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCoordinator(t, Config{})
		ctx := context.Background()
		cls := stableGroup(t, c, "s", 2, 5)
		leader, follower := cls[0], cls[1]
		lj := async(leader.join)
		blocked(t, lj)
		wantCode(t, "follower rejoin", follower.join().ErrorCode, 0)
		<-lj
		sch := async(func() *kmsg.SyncGroupResponse { return follower.sync(nil) })
		jch := async(newClient(t, c, "j", "new", 5, "t").join)
		blocked(t, sch)
		blocked(t, jch)

		c.Close()
		wantCode(t, "parked sync", ready(t, sch).ErrorCode, kerr.NotCoordinator.Code)
		wantCode(t, "parked join", ready(t, jch).ErrorCode, kerr.NotCoordinator.Code)

		na := kerr.CoordinatorNotAvailable.Code
		wantCode(t, "heartbeat", follower.heartbeat(), na)
		wantCode(t, "join", newClient(t, c, "x", "x", 5, "t").joinOnce(ctx).ErrorCode, na)
		wantCode(t, "sync", follower.sync(nil).ErrorCode, na)
		wantCode(t, "commit", follower.commit(), na)
		wantCode(t, "leave", c.LeaveGroup(ctx, leaveReq(3, "s", leaving(follower.memberID, nil))).ErrorCode, na)
		wantCode(t, "delete", c.Delete(ctx, "s"), na)
		if _, ok := c.Describe(ctx, "s"); ok || len(c.List(ctx)) != 0 {
			t.Error("groups visible after Close")
		}
		c.Close() // idempotent
		// synctest.Test fails if any goroutine of the bubble is still running.
	})
}

// TestCloseStopsGoroutines checks with real time that Close leaves no
// goroutine behind.
func TestCloseStopsGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	c := New(Config{InitialRebalanceDelay: -1})
	for i := range 5 {
		cl := newClient(t, c, fmt.Sprintf("g%d", i), "c", 5, "t")
		if resp := cl.join(); resp.ErrorCode != 0 {
			t.Fatalf("join: %v", codeName(resp.ErrorCode))
		}
		wantCode(t, "sync", cl.sync(map[string][]byte{cl.memberID: consumerAssignment("t", 0)}).ErrorCode, 0)
	}
	late := async(newClient(t, c, "g0", "late", 3, "t").join) // parks until the leader rejoins
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if gi, _ := c.Describe(context.Background(), "g0"); len(gi.Members) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("late member never joined")
		}
	}
	if n := runtime.NumGoroutine(); n < before+5 {
		t.Fatalf("%d goroutines running, want at least %d", n, before+5)
	}
	c.Close()
	wantCode(t, "parked join", (<-late).ErrorCode, kerr.NotCoordinator.Code)
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}
