package gateway

import (
	"fmt"
	"hash/fnv"
	"testing"
	"time"
)

func nodes(alive ...bool) []gatewayNode {
	out := make([]gatewayNode, len(alive))
	for i, a := range alive {
		out[i] = gatewayNode{ID: int32(i), Host: "127.0.0.1", Port: int32(9092 + i), Alive: a}
	}
	return out
}

// TestCoordinatorForHashesOverFullSet: the coordinator is FNV-1a-32(group) modulo the full registered
// set, so a dead gateway does not reshuffle groups on the live ones; a group whose gateway is down
// falls back to the next live gateway in node-id order, wrapping around.
func TestCoordinatorForHashesOverFullSet(t *testing.T) {
	m := &membership{self: 0}
	m.set(nodes(true, true, true))
	want := map[string]int32{}
	for _, group := range []string{"orders", "payments", "g1", "g2", "g3", "analytics", ""} {
		h := fnv.New32a()
		h.Write([]byte(group))
		idx := int32(h.Sum32() % 3)
		want[group] = idx
		got, ok := m.coordinatorFor(group)
		if !ok || got.ID != idx {
			t.Fatalf("coordinatorFor(%q) = %d, want %d", group, got.ID, idx)
		}
	}
	// Node 1 dies: its groups move to node 2; nobody else's group moves.
	m.set(nodes(true, false, true))
	for group, idx := range want {
		got, _ := m.coordinatorFor(group)
		expect := idx
		if idx == 1 {
			expect = 2
		}
		if got.ID != expect {
			t.Fatalf("with node 1 down, coordinatorFor(%q) = %d, want %d", group, got.ID, expect)
		}
	}
	// Node 2 dies too: wrap around to node 0.
	m.set(nodes(true, false, false))
	for group := range want {
		if got, _ := m.coordinatorFor(group); got.ID != 0 {
			t.Fatalf("only node 0 alive, coordinatorFor(%q) = %d", group, got.ID)
		}
	}
	m.set(nodes(false, false, false))
	if _, ok := m.coordinatorFor("x"); ok {
		t.Fatal("no live gateway must give no coordinator")
	}
}

// TestLeaderForIsDeterministicAndSpread: every gateway with the same view gives the same leader, and
// partitions spread over all live gateways.
func TestLeaderForIsDeterministicAndSpread(t *testing.T) {
	a, b := &membership{self: 0}, &membership{self: 2}
	a.set(nodes(true, true, true))
	b.set(nodes(true, true, true))
	seen := map[int32]int{}
	for p := int32(0); p < 12; p++ {
		la, lb := a.leaderFor("t", p), b.leaderFor("t", p)
		if la.ID != lb.ID {
			t.Fatalf("partition %d: leader %d vs %d from two gateways", p, la.ID, lb.ID)
		}
		seen[la.ID]++
	}
	if len(seen) != 3 {
		t.Fatalf("12 partitions led by %v, want all 3 gateways", seen)
	}
	a.set(nodes(true, false, true))
	for p := int32(0); p < 12; p++ {
		if l := a.leaderFor("t", p); !l.Alive {
			t.Fatalf("partition %d led by dead gateway %d", p, l.ID)
		}
	}
}

func TestValidTopicName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"orders", true}, {"a.b_c-D9", true}, {"", false}, {".", false}, {"..", false},
		{"bad name", false}, {"braces{x}", false}, {"colon:x", false}, {string(make([]byte, 250)), false},
	} {
		if got := validTopicName(tc.name) == nil; got != tc.ok {
			t.Errorf("validTopicName(%q) = %v, want %v", tc.name, got, tc.ok)
		}
	}
}

// TestCoordinatedElsewhere: a group moved away only when another live gateway coordinates it; a
// gateway that is fenced and alone keeps its groups (nobody took them).
func TestCoordinatedElsewhere(t *testing.T) {
	m := newMembership(1, "127.0.0.1:9092")
	if m.coordinatedElsewhere("g") {
		t.Fatal("alone and alive: coordinated elsewhere")
	}
	m.setSelfAlive(false)
	if m.coordinatedElsewhere("g") {
		t.Fatal("fenced and alone: coordinated elsewhere, though no gateway took the group")
	}
	m.set([]gatewayNode{{ID: 1, Alive: false}, {ID: 2, Alive: true}})
	if !m.coordinatedElsewhere("g") {
		t.Fatal("fenced with a live peer: the group did not move")
	}
}

// TestLeaderInOneView: leaders come from the view a Metadata response lists as its brokers, even when
// membership changes while the response is built.
func TestLeaderInOneView(t *testing.T) {
	m := newMembership(1, "127.0.0.1:9092")
	m.set([]gatewayNode{{ID: 1, Alive: true}, {ID: 2, Alive: true}, {ID: 3, Alive: true}})
	live := m.alive()
	m.set([]gatewayNode{{ID: 1, Alive: true}, {ID: 4, Alive: true}}) // changed after the brokers were listed
	for p := range int32(32) {
		l := m.leaderIn(live, "t", p)
		if l.ID != 1 && l.ID != 2 && l.ID != 3 {
			t.Fatalf("partition %d: leader %d is not among the listed brokers 1-3", p, l.ID)
		}
	}
}

// TestCoordinationNeedsLease: this gateway coordinates only while its lease runs, whatever its view
// says; renewed after it ran out, it holds off while another gateway is known (peers may have taken
// its groups meanwhile), and alone it keeps coordinating as before.
func TestCoordinationNeedsLease(t *testing.T) {
	m := newMembership(1, "127.0.0.1:9092")
	m.set([]gatewayNode{{ID: 1, Alive: true}, {ID: 2, Alive: true}})
	group := groupOn([]int32{1, 2}, 0)
	m.renew(time.Now().Add(time.Hour), time.Hour)
	if !m.isCoordinator(group) {
		t.Fatalf("leased: not coordinating %s", group)
	}

	m = newMembership(1, "127.0.0.1:9092")
	m.set([]gatewayNode{{ID: 1, Alive: true}, {ID: 2, Alive: true}})
	m.renew(time.Now().Add(-time.Millisecond), time.Hour) // the lease has ended
	if c, ok := m.coordinatorFor(group); !ok || c.ID != 2 {
		t.Fatalf("lease ended: coordinatorFor(%s) = %d, %v; want the next live gateway, 2", group, c.ID, ok)
	}
	if !m.coordinatedElsewhere(group) {
		t.Fatalf("lease ended: %s not handed over", group)
	}
	m.renew(time.Now().Add(time.Hour), time.Hour)
	if m.isCoordinator(group) {
		t.Fatalf("lease renewed after it ran out: coordinating %s at once, before peers saw the heartbeat", group)
	}
	m.hold(time.Time{})
	if !m.isCoordinator(group) {
		t.Fatalf("lease renewed, hold over: not coordinating %s", group)
	}

	alone := newMembership(1, "127.0.0.1:9092")
	alone.renew(time.Now().Add(-time.Millisecond), time.Hour)
	if _, ok := alone.coordinatorFor(group); ok {
		t.Fatal("alone, lease ended: still a coordinator")
	}
	alone.renew(time.Now().Add(time.Hour), time.Hour)
	if !alone.isCoordinator(group) {
		t.Fatal("alone, lease renewed: held back though no gateway could have taken the group")
	}
}

// TestLeaseTerm: the lease ends one heartbeat interval before peers may consider the gateway down, or
// earlier still with a node timeout close to the interval, so that it outlasts the next heartbeat.
func TestLeaseTerm(t *testing.T) {
	for _, tc := range []struct{ hb, nt, want time.Duration }{
		{time.Second, 5 * time.Second, 4 * time.Second},
		{100 * time.Millisecond, 400 * time.Millisecond, 300 * time.Millisecond},
		{time.Second, 1500 * time.Millisecond, 1250 * time.Millisecond},
		{time.Second, time.Second, time.Second}, // rejected by configs; never past the node timeout
	} {
		g := &Gateway{cfg: Config{HeartbeatInterval: tc.hb, NodeTimeout: tc.nt}}
		if got := g.leaseTerm(); got != tc.want {
			t.Errorf("heartbeat %v, node timeout %v: lease %v, want %v", tc.hb, tc.nt, got, tc.want)
		}
	}
}

// TestScaleOutNoDoubleCoordinator: a third gateway registers; the two running ones see it at their own
// refresh, up to an interval apart. Hashing over the new set moves keys between the two existing
// gateways too, and the one that has not refreshed yet still claims them: for as long as the change
// settles, a key moving between gateways has no coordinator, so no key has two. Afterwards the new set
// decides alone.
func TestScaleOutNoDoubleCoordinator(t *testing.T) {
	view := func(self int32, ids ...int32) *membership {
		m := newMembership(self, "127.0.0.1:9092")
		m.settleAfterChanges(time.Minute, time.Hour)
		var nodes []gatewayNode
		for _, id := range ids {
			nodes = append(nodes, gatewayNode{ID: id, Alive: true})
		}
		m.set(nodes)
		return m
	}
	m1, m2 := view(1, 1, 2), view(2, 1, 2)
	m2.set([]gatewayNode{{ID: 1, Alive: true}, {ID: 2, Alive: true}, {ID: 3, Alive: true}}) // m2 refreshed, m1 not yet
	both, moving := 0, 0
	for i := range 1000 {
		key := fmt.Sprintf("group-%d", i)
		if m1.isCoordinator(key) && m2.isCoordinator(key) {
			both++
		}
		if _, ok := m2.coordinatorFor(key); !ok {
			moving++
		}
	}
	if both > 0 {
		t.Fatalf("%d of 1,000 keys claimed by two gateways at once", both)
	}
	if moving == 0 || moving > 900 {
		t.Fatalf("%d of 1,000 keys without a coordinator while the change settles, want those that move", moving)
	}
	// Settled: the new set decides, every key has a coordinator.
	m2.mu.Lock()
	m2.settleUntil = time.Now()
	m2.mu.Unlock()
	for i := range 1000 {
		if _, ok := m2.coordinatorFor(fmt.Sprintf("group-%d", i)); !ok {
			t.Fatalf("group-%d without a coordinator once the change settled", i)
		}
	}
}

// TestScaleOutMovedGroupsUnloaded: a group a change of the registered set moves to another gateway
// leaves this one at once (its parked calls answered, no rebalance completing here), although the new
// coordinator claims it only once the change settled; a group that stays is kept.
func TestScaleOutMovedGroupsUnloaded(t *testing.T) {
	m := newMembership(1, "127.0.0.1:9092")
	m.settleAfterChanges(time.Minute, time.Hour)
	m.set([]gatewayNode{{ID: 1, Alive: true}, {ID: 2, Alive: true}})
	var mine []string
	for i := range 500 {
		if key := fmt.Sprintf("group-%d", i); m.isCoordinator(key) {
			mine = append(mine, key)
		}
	}
	grown := []gatewayNode{{ID: 1, Alive: true}, {ID: 2, Alive: true}, {ID: 3, Alive: true}}
	m.set(grown)
	settled := newMembership(1, "127.0.0.1:9092") // the new set alone, with nothing to settle
	settled.set(grown)
	moved, kept := 0, 0
	for _, key := range mine {
		c, ok := settled.coordinatorFor(key)
		switch {
		case ok && c.ID != 1:
			moved++
			if !m.coordinatedElsewhere(key) {
				t.Fatalf("%s moved to gateway %d but is kept here while the change settles", key, c.ID)
			}
		default:
			kept++
			if m.coordinatedElsewhere(key) {
				t.Fatalf("%s stays here but is unloaded", key)
			}
		}
	}
	if moved == 0 || kept == 0 {
		t.Fatalf("%d groups moved, %d kept: the test needs both", moved, kept)
	}
}

// TestStaleViewCoordinatesNothing: a gateway whose view of the registry is older than staleAfter (a
// node timeout and an interval: its registry reads failing while its heartbeats get through)
// coordinates nothing: it cannot know whether a change of the set moved its groups away.
func TestStaleViewCoordinatesNothing(t *testing.T) {
	m := newMembership(1, "127.0.0.1:9092")
	m.settleAfterChanges(time.Second, 2*time.Second)
	// Before the registry was ever read (its first read at registration failed), nothing either.
	if m.isCoordinator("g") || !m.stale(time.Now()) {
		t.Fatal("no view read yet: coordinates")
	}
	m.set([]gatewayNode{{ID: 1, Alive: true}})
	if !m.isCoordinator("g") {
		t.Fatal("fresh view: not the coordinator")
	}
	m.mu.Lock()
	m.viewedAt = time.Now().Add(-3 * time.Second)
	m.mu.Unlock()
	if m.isCoordinator("g") {
		t.Fatal("a view 3 s old (stale after 2 s) still coordinates")
	}
}
