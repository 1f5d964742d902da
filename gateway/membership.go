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
	// leaseUntil: past it, this gateway coordinates nothing (see renew). Zero until the first
	// registration, before which nothing is served.
	leaseUntil time.Time
}

func newMembership(self int32, advertised string) *membership {
	host, port, _ := net.SplitHostPort(advertised)
	p, _ := strconv.Atoi(port)
	return &membership{self: self, nodes: []gatewayNode{{ID: self, Host: host, Port: int32(p), Alive: true}}}
}

// set replaces the view (self is always kept alive).
func (m *membership) set(nodes []gatewayNode) {
	sorted := append([]gatewayNode(nil), nodes...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].ID < sorted[j].ID })
	m.mu.Lock()
	m.nodes = sorted
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
	m.mu.RLock()
	defer m.mu.RUnlock()
	n := len(m.nodes)
	if n == 0 {
		return gatewayNode{}, false
	}
	now := time.Now()
	out := (!m.holdUntil.IsZero() && now.Before(m.holdUntil)) || !m.leasedLocked(now)
	start := int(fnv32a(key) % uint32(n))
	for i := 0; i < n; i++ {
		if c := m.nodes[(start+i)%n]; c.Alive && !(out && c.ID == m.self) {
			return c, true
		}
	}
	return gatewayNode{}, false
}

// leaderFor spreads partition leadership over the live gateways deterministically.
func (m *membership) leaderFor(topic string, partition int32) gatewayNode {
	return m.leaderIn(m.alive(), topic, partition)
}

// leaderIn is leaderFor over live, a view of the live gateways taken once, so that a response listing
// brokers and leaders (Metadata) names only leaders among its brokers.
func (m *membership) leaderIn(live []gatewayNode, topic string, partition int32) gatewayNode {
	if len(live) == 0 {
		return m.selfNode()
	}
	return live[(fnv32a(topic)+uint32(partition))%uint32(len(live))]
}

// coordinatedElsewhere reports whether another gateway now coordinates key: a group this gateway
// holds in memory then moved away. With no live coordinator at all (this gateway fenced and alone)
// nothing moved, and the group stays.
func (m *membership) coordinatedElsewhere(key string) bool {
	c, ok := m.coordinatorFor(key)
	return ok && c.ID != m.self
}

// isCoordinator reports whether this gateway coordinates key.
func (m *membership) isCoordinator(key string) bool {
	c, ok := m.coordinatorFor(key)
	return ok && c.ID == m.self
}
