package gateway

import (
	"hash/fnv"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"
)

// gatewayNode is one gateway of the cluster as this gateway sees it.
type gatewayNode struct {
	ID    int32
	Host  string
	Port  int32
	Admin string
	Alive bool
	// Sharded: the gateway hears append notices on the sharded channels (its registration says so).
	Sharded bool
}

func (n gatewayNode) addr() string { return net.JoinHostPort(n.Host, strconv.Itoa(int(n.Port))) }

// membership is this gateway's view of the gateway set: every registered gateway, alive or not,
// sorted by node id. Coordinator choice hashes over the full set so a restart does not reshuffle groups.
type membership struct {
	mu    sync.RWMutex
	self  int32
	nodes []gatewayNode
	// holdUntil: before it, this gateway coordinates nothing (see hold).
	holdUntil time.Time
	// joinHold: the hold a joining gateway takes at its first view of the registry that shows another
	// live gateway (holdOnJoin).
	joinHold time.Duration
	// leaseUntil: past it, this gateway coordinates nothing (see renew). Zero until the first
	// registration, before which nothing is served.
	leaseUntil time.Time
	// A change of the registered set moves keys between gateways that see it at their own refresh, up
	// to a refresh interval apart: until settleUntil (settle after the change), a key whose coordinator
	// under the previous set (prev, node ids) differs has none, so two gateways never both claim it
	// (see set). viewed: a view from the registry was set (the first one changes nothing).
	settle      time.Duration
	staleAfter  time.Duration
	prev        []int32
	settleUntil time.Time
	viewed      bool
	viewedAt    time.Time // when the last view from the registry was set
}

func newMembership(self int32, advertised string) *membership {
	host, port, _ := net.SplitHostPort(advertised)
	p, _ := strconv.Atoi(port)
	return &membership{self: self, nodes: []gatewayNode{{ID: self, Host: host, Port: int32(p), Alive: true}}}
}

// set replaces the view (self is always kept alive). When the registered set changed (a gateway
// registered, or its registration went), the keys the change moves from one existing gateway to
// another have no coordinator for settle: the others see the change at their own refresh, and until
// then the one that lost a key still claims it.
func (m *membership) set(nodes []gatewayNode) {
	sorted := append([]gatewayNode(nil), nodes...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].ID < sorted[j].ID })
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.settle > 0 && m.viewed && !sameIDs(m.nodes, sorted) {
		m.prev = m.prev[:0]
		for _, n := range m.nodes {
			m.prev = append(m.prev, n.ID)
		}
		m.settleUntil = time.Now().Add(m.settle)
	}
	if !m.viewed && m.joinHold > 0 {
		for _, n := range sorted {
			if n.Alive && n.ID != m.self {
				// The first view, whether registration's own read or a later one when that failed.
				m.holdUntil = time.Now().Add(m.joinHold)
				break
			}
		}
	}
	m.viewed, m.viewedAt = true, time.Now()
	m.nodes = sorted
}

// holdOnJoin makes the first view of the registry this gateway gets hold it for d (hold) when that view
// shows another live gateway: a joining gateway takes its groups back only once its peers had time to
// see it. Taken at the first view that succeeds, not at registration's read, which may fail.
func (m *membership) holdOnJoin(d time.Duration) {
	m.mu.Lock()
	m.joinHold = d
	m.mu.Unlock()
}

func sameIDs(a, b []gatewayNode) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID {
			return false
		}
	}
	return true
}

// staleLocked reports whether this gateway's view is too old to coordinate by (see choose): older
// than staleAfter, or never read from the registry; m.mu is held.
func (m *membership) staleLocked(now time.Time) bool {
	return m.staleAfter > 0 && (!m.viewed || now.Sub(m.viewedAt) > m.staleAfter)
}

// stale is staleLocked for the heartbeat: a gateway that cannot read the registry stops renewing its
// registration, so its peers take its groups over after a node timeout instead of sending their
// clients to a gateway that coordinates nothing.
func (m *membership) stale(now time.Time) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.staleLocked(now)
}

// settleAfterChanges has a change of the registered set hold the keys it moves for d (see set), and
// this gateway coordinate nothing while its view is older than stale (see choose).
func (m *membership) settleAfterChanges(d, stale time.Duration) {
	m.mu.Lock()
	m.settle, m.staleAfter = d, stale
	m.mu.Unlock()
}

func (m *membership) all() []gatewayNode {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return append([]gatewayNode(nil), m.nodes...)
}

// setSelfAlive marks this gateway up or down in its own view (self-fencing).
func (m *membership) setSelfAlive(alive bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range m.nodes {
		if m.nodes[i].ID == m.self {
			m.nodes[i].Alive = alive
		}
	}
}

// alive returns the live gateways, sorted by id.
func (m *membership) alive() []gatewayNode {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]gatewayNode, 0, len(m.nodes))
	for _, n := range m.nodes {
		if n.Alive {
			out = append(out, n)
		}
	}
	return out
}

// brokers are the gateways Metadata and DescribeCluster list: the live ones, or this one alone when
// none is (fenced with no live peer: it still serves produce and fetch, and clients need a broker to
// send them to, as leaders already fall back to it).
func (m *membership) brokers() []gatewayNode {
	if live := m.alive(); len(live) > 0 {
		return live
	}
	return []gatewayNode{m.selfNode()}
}

func (m *membership) selfNode() gatewayNode {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, n := range m.nodes {
		if n.ID == m.self {
			return n
		}
	}
	return gatewayNode{ID: m.self, Alive: true}
}

// hold keeps this gateway out of coordinator choice until until. A gateway that joins a running
// cluster takes its groups back from peers that notice it only at their next membership refresh;
// claiming them at once would let two gateways accept joins and commits for one group meanwhile.
func (m *membership) hold(until time.Time) {
	m.mu.Lock()
	m.holdUntil = until
	m.mu.Unlock()
}

// renew extends this gateway's lease to until, a margin before its peers could at the earliest
// consider it down (Gateway.leaseTerm). The lease is checked on every coordinator decision, so a gateway cut off from
// Redis stops coordinating when it ends, not when a heartbeat call gives up. A lease renewed after it
// ran out means peers may have taken this gateway's groups meanwhile: while any other gateway is
// known, it then holds off for holdFor, until they have seen the fresh heartbeat (as at start).
func (m *membership) renew(until time.Time, holdFor time.Duration) {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.leaseUntil.IsZero() && !now.Before(m.leaseUntil) && len(m.nodes) > 1 {
		m.holdUntil = now.Add(holdFor)
	}
	if until.After(m.leaseUntil) {
		m.leaseUntil = until
	}
}

// resign ends the lease at shutdown, before the registration is marked down; nothing renews it
// afterwards (the membership loop has returned).
func (m *membership) resign() {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.leaseUntil = now
}

// leaseEnd is when this gateway's lease ends (zero before the first registration).
func (m *membership) leaseEnd() time.Time {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.leaseUntil
}

// leased reports whether this gateway's lease still runs at now.
func (m *membership) leased(now time.Time) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.leasedLocked(now)
}

func (m *membership) leasedLocked(now time.Time) bool {
	return m.leaseUntil.IsZero() || now.Before(m.leaseUntil)
}

// fnv32a is the hash that places groups (and transactional ids) on gateways.
func fnv32a(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}

// coordinatorFor is the one function that decides which gateway coordinates key: FNV-1a(key) modulo
// the full registered set; when that gateway is down (or is this one, held), the next live one in
// node-id order (wrapping). This gateway counts as down while held or once its lease has ended.
func (m *membership) coordinatorFor(key string) (gatewayNode, bool) {
	return m.choose(key, true)
}

// choose is coordinatorFor; settling says whether a key moving between gateways after a change of the
// registered set has none until the change settled (set). A gateway whose view is older than
// staleAfter (its registry reads failing or slow while its heartbeats get through), or that never
// read the registry, counts itself out: it cannot know whether a change moved its keys away. It also
// stops renewing its registration then (Gateway.heartbeat), so its groups fail over. (A view late by more than the settling
// time but less than staleAfter can still claim a moved key; staleAfter leaves room for slow
// refreshes, which would otherwise take a healthy gateway out of coordination.)
func (m *membership) choose(key string, settling bool) (gatewayNode, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	n := len(m.nodes)
	if n == 0 {
		return gatewayNode{}, false
	}
	now := time.Now()
	out := (!m.holdUntil.IsZero() && now.Before(m.holdUntil)) || !m.leasedLocked(now) || m.staleLocked(now)
	hash := fnv32a(key)
	start := int(hash % uint32(n))
	for i := 0; i < n; i++ {
		if c := m.nodes[(start+i)%n]; c.Alive && !(out && c.ID == m.self) {
			if settling && now.Before(m.settleUntil) {
				if was, ok := m.prevCoordinatorLocked(hash, out); ok && was != c.ID {
					return gatewayNode{}, false // moving between gateways: see set
				}
			}
			return c, true
		}
	}
	return gatewayNode{}, false
}

// prevCoordinatorLocked is the coordinator of a key of hash hash under the previous registered set,
// by the liveness the view has now; m.mu is held.
func (m *membership) prevCoordinatorLocked(hash uint32, out bool) (int32, bool) {
	n := len(m.prev)
	if n == 0 {
		return 0, false
	}
	start := int(hash % uint32(n))
	for i := 0; i < n; i++ {
		id := m.prev[(start+i)%n]
		for _, c := range m.nodes {
			if c.ID == id && c.Alive && !(out && id == m.self) {
				return id, true
			}
		}
	}
	return 0, false
}

// leaderFor spreads partition leadership over the live gateways deterministically.
func (m *membership) leaderFor(topic string, partition int32) gatewayNode {
	return m.leaderIn(m.brokers(), topic, partition)
}

// leaderIn is leaderFor over brokers, a view taken once (brokers, never empty), so that a response
// listing brokers and leaders (Metadata) names only leaders among its brokers.
func (m *membership) leaderIn(brokers []gatewayNode, topic string, partition int32) gatewayNode {
	return brokers[(fnv32a(topic)+uint32(partition))%uint32(len(brokers))]
}

// coordinatedElsewhere reports whether another gateway now coordinates key: a group this gateway
// holds in memory then moved away. With no live coordinator at all (this gateway fenced and alone)
// nothing moved, and the group stays. A group that a change of the registered set moves away goes at
// once, not once the change settled: its parked calls are answered NOT_COORDINATOR and no rebalance
// completes here meanwhile.
func (m *membership) coordinatedElsewhere(key string) bool {
	c, ok := m.choose(key, false)
	return ok && c.ID != m.self
}

// isCoordinator reports whether this gateway coordinates key.
func (m *membership) isCoordinator(key string) bool {
	c, ok := m.coordinatorFor(key)
	return ok && c.ID == m.self
}
