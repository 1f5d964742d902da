package coordinator

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

func TestValidateCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCoordinator(t, Config{})
		ctx := context.Background()

		// Unknown group (offsets only, no group management here).
		wantCode(t, "unknown group simple", c.ValidateCommit(ctx, "none", "", nil, -1), 0)
		wantCode(t, "unknown group with generation", c.ValidateCommit(ctx, "none", "m", nil, 3), kerr.IllegalGeneration.Code)
		wantCode(t, "unknown group txn simple", c.ValidateTxnCommit(ctx, "none", "", nil, -1), 0)
		wantCode(t, "unknown group txn member", c.ValidateTxnCommit(ctx, "none", "m", nil, 3), kerr.UnknownMemberID.Code)
		if _, ok := c.Describe(ctx, "none"); ok {
			t.Error("a commit created a group")
		}

		cls := stableGroup(t, c, "g", 2, 5)
		a, b := cls[0], cls[1]
		wantCode(t, "simple commit to an active group", c.ValidateCommit(ctx, "g", "", nil, -1), kerr.UnknownMemberID.Code)
		wantCode(t, "txn simple commit to an active group", c.ValidateTxnCommit(ctx, "g", "", nil, -1), 0)
		wantCode(t, "member", a.commit(), 0)
		wantCode(t, "member txn", c.ValidateTxnCommit(ctx, "g", a.memberID, nil, a.gen), 0)
		wantCode(t, "old generation", c.ValidateCommit(ctx, "g", a.memberID, nil, 0), kerr.IllegalGeneration.Code)
		wantCode(t, "member without generation", c.ValidateCommit(ctx, "g", a.memberID, nil, -1), kerr.IllegalGeneration.Code)
		wantCode(t, "stranger", c.ValidateCommit(ctx, "g", "stranger", nil, 1), kerr.UnknownMemberID.Code)
		wantCode(t, "unregistered instance", c.ValidateCommit(ctx, "g", a.memberID, ptr("nobody"), 1), kerr.UnknownMemberID.Code)

		// Commits count as heartbeats: a only commits, b does nothing and is
		// evicted; a survives the rebalance that follows without heartbeating.
		for range 10 { // 30s, three session timeouts
			time.Sleep(3 * time.Second)
			wantCode(t, "commit as heartbeat", a.commit(), 0)
		}
		gi := describe(t, c, "g")
		if len(gi.Members) != 1 || gi.Members[0].MemberID != a.memberID || gi.State != StatePreparingRebalance {
			t.Fatalf("after 30s of commits: %+v", gi)
		}
		wantCode(t, "zombie (evicted member)", b.commit(), kerr.UnknownMemberID.Code)

		// CompletingRebalance: members must wait for their assignment.
		wantCode(t, "rejoin", a.join().ErrorCode, 0)
		wantCode(t, "completing rebalance", a.commit(), kerr.RebalanceInProgress.Code)
		wantCode(t, "completing rebalance txn", c.ValidateTxnCommit(ctx, "g", a.memberID, nil, a.gen), 0)
		wantCode(t, "previous generation", c.ValidateCommit(ctx, "g", a.memberID, nil, 1), kerr.IllegalGeneration.Code)
		wantCode(t, "sync", a.sync(nil).ErrorCode, 0)
		wantCode(t, "stable", a.commit(), 0)

		// Empty again: simple commits pass, the departed member's do not.
		wantCode(t, "leave", c.LeaveGroup(ctx, leaveReq(3, "g", leaving(a.memberID, nil))).Members[0].ErrorCode, 0)
		wantCode(t, "simple commit to an empty group", c.ValidateCommit(ctx, "g", "", nil, -1), 0)
		wantCode(t, "member id, no generation, empty group", c.ValidateCommit(ctx, "g", a.memberID, nil, -1), 0)
		wantCode(t, "departed member", a.commit(), kerr.UnknownMemberID.Code)
	})
}
