package integration

import (
	"hash/fnv"
	"strconv"
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

// TestFenceBeforePeerTakeover: gateway 1 loses Redis while gateway 2 keeps it, with
// redis.command_timeout equal to the node timeout (as with the defaults). Gateway 2 takes gateway 1's
// groups over once Redis shows gateway 1's heartbeat past the node timeout; by then gateway 1 must have
// stopped coordinating them. Each sample asks gateway 2 first, then gateway 1: once gateway 2 answers
// that it coordinates the group, gateway 1 must not answer that it does.
func TestFenceBeforePeerTakeover(t *testing.T) {
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	bh := redistest.StartProxy(t, srv.Addr) // frozen: a partition between gateway 1 and Redis
	const hb, nodeTimeout = 200 * time.Millisecond, time.Second
	cfg := func(id int32) func(*gateway.Config) {
		return func(c *gateway.Config) { c.NodeID, c.HeartbeatInterval, c.NodeTimeout = id, hb, nodeTimeout }
	}
	opts := redisstore.Options{Namespace: "fence-takeover", CommandTimeout: nodeTimeout, DialTimeout: 300 * time.Millisecond}
	o1, o2 := opts, opts
	o1.Addrs, o2.Addrs = []string{bh.Addr()}, []string{srv.Addr}
	g1 := startGatewayWithStoreCfg(t, o1, cfg(1))
	g2 := startGatewayWithStoreCfg(t, o2, cfg(2))
	key := ""
	for i := 0; key == ""; i++ { // a group placed on node 1 of the set {1, 2}
		h := fnv.New32a()
		h.Write([]byte("grp" + strconv.Itoa(i)))
		if h.Sum32()%2 == 0 {
			key = "grp" + strconv.Itoa(i)
		}
	}
	c1, c2 := dialRaw(t, g1.Addr), dialRaw(t, g2.Addr)
	coordinator := func(c *rawConn) int32 {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorKey = key
		r := roundTrip[*kmsg.FindCoordinatorResponse](c, 3, req)
		if r.ErrorCode != 0 {
			return -1
		}
		return r.NodeID
	}
	for trial := range 2 {
		waitFor(t, 15*time.Second, "both gateways to place the group on node 1", func() bool {
			return coordinator(c2) == 1 && coordinator(c1) == 1
		})
		time.Sleep(time.Duration(trial) * 97 * time.Millisecond) // another phase against the heartbeat
		bh.Freeze(true)
		taken := 0
		waitFor(t, 15*time.Second, "gateway 2 to take the group over", func() bool {
			if coordinator(c2) != 2 {
				return false
			}
			if coordinator(c1) == 1 {
				t.Fatalf("trial %d: gateway 2 coordinates %s and gateway 1 still answers that it does", trial, key)
			}
			taken++
			return taken >= 10 // and for a while after
		})
		bh.Freeze(false)
	}
}
