package coordinator

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/twmb/franz-go/pkg/kerr"
)

// A panic on a group's goroutine drops that group's membership, as a coordinator failover would, and
// leaves the process and the other groups serving: the members' parked requests are answered, the
// request whose event panicked gets a retriable error, and the group's next members start it afresh.
func TestPanicInGroupDropsThatGroupOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var panicked []string
		c := newCoordinator(t, Config{OnPanic: func(g string) { panicked = append(panicked, g) }})
		cls := stableGroup(t, c, "g", 2, 5)
		others := stableGroup(t, c, "other", 1, 5)

		// A rejoin parks the member's JoinGroup until the other member rejoins too.
		parked := async(cls[0].join)
		blocked(t, parked)

		_, err := call(context.Background(), c, "g", false, func(*group, chan<- int) { panic("boom") })
		if !errors.Is(err, errClosed) {
			t.Fatalf("the panicking event's call: %v, want errClosed (COORDINATOR_NOT_AVAILABLE)", err)
		}
		if code := errCode(err, 0); code != kerr.CoordinatorNotAvailable.Code {
			t.Errorf("its code %s, want COORDINATOR_NOT_AVAILABLE", codeName(code))
		}
		wantCode(t, "the parked join", ready(t, parked).ErrorCode, kerr.NotCoordinator.Code)
		if len(panicked) != 1 || panicked[0] != "g" {
			t.Errorf("OnPanic calls %q, want [g]", panicked)
		}

		wantCode(t, "the other group's heartbeat", others[0].heartbeat(), 0)
		wantCode(t, "a dropped member's heartbeat", cls[1].heartbeat(), kerr.UnknownMemberID.Code)
		fresh := newClient(t, c, "g", "fresh", 5, "t")
		resp := fresh.join()
		wantCode(t, "a new member's join", resp.ErrorCode, 0)
		if resp.Generation != 1 {
			t.Errorf("the group's new generation %d, want 1 (a new group)", resp.Generation)
		}
	})
}
