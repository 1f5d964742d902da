package integration

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/gateway"
	"github.com/kgate/kgate/internal/redistest"
	"github.com/kgate/kgate/redisstore"
)

// TestGatewayFencesItselfWithoutRedis: a gateway that cannot refresh its registration for longer than
// the node timeout is down in its peers' eyes, so it stops coordinating groups itself
// (COORDINATOR_NOT_AVAILABLE instead of answering as coordinator) and resumes once its heartbeat
// succeeds again.
func TestGatewayFencesItselfWithoutRedis(t *testing.T) {
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	g := startGatewayWithStoreCfg(t, redisstore.Options{Addrs: []string{srv.Addr}, Namespace: "fence",
		CommandTimeout: 200 * time.Millisecond, DialTimeout: 200 * time.Millisecond},
		func(c *gateway.Config) {
			c.HeartbeatInterval = 100 * time.Millisecond
			c.NodeTimeout = 600 * time.Millisecond
		})
	c := dialRaw(t, g.Addr)
	find := func() int16 {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorKey = "fenced-group"
		return roundTrip[*kmsg.FindCoordinatorResponse](c, 3, req).ErrorCode
	}
	if code := find(); code != 0 {
		t.Fatalf("FindCoordinator with Redis up: %v", kerr.ErrorForCode(code))
	}
	if err := srv.Pause(); err != nil {
		t.Skipf("cannot pause redis-server here: %v", err)
	}
	paused := true
	t.Cleanup(func() {
		if paused {
			_ = srv.Resume()
		}
	})
	waitFor(t, 10*time.Second, "the gateway to stop coordinating without its registration", func() bool {
		return find() == kerr.CoordinatorNotAvailable.Code
	})
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	paused = false
	waitFor(t, 10*time.Second, "the gateway to coordinate again", func() bool { return find() == 0 })
}
