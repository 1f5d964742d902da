package coordinator

import (
	"bytes"
	"runtime/debug"
	"slices"
	"sort"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

type groupState int8

const (
	stateEmpty groupState = iota
	statePreparingRebalance
	stateCompletingRebalance
	stateStable
	stateDead
)

func (s groupState) String() string {
	switch s {
	case stateEmpty:
		return StateEmpty
	case statePreparingRebalance:
		return StatePreparingRebalance
	case stateCompletingRebalance:
		return StateCompletingRebalance
	case stateStable:
		return StateStable
	default:
		return StateDead
	}
}

type protocol struct {
	name     string
	metadata []byte
}

// joinResult is a JoinGroup answer before it is shaped for a request version.
type joinResult struct {
	code         int16
	memberID     string
	generation   int32
	protocolType *string
	protocol     *string
	leader       string
	skip         bool
	members      []kmsg.JoinGroupResponseMember
}

func joinError(memberID string, code int16) joinResult {
	return joinResult{code: code, memberID: memberID, generation: -1}
}

// syncResult is a SyncGroup answer before it is shaped for a request version.
type syncResult struct {
	code         int16
	protocolType *string
	protocol     *string
	assignment   []byte
}

func syncError(code int16) syncResult { return syncResult{code: code} }

type member struct {
	id               string
	instanceID       *string
	clientID         string
	clientHost       string
	protocolType     string
	protocols        []protocol
	sessionTimeout   time.Duration
	rebalanceTimeout time.Duration
	assignment       []byte
	order            uint64 // join order: leader fallback, protocol vote ties, member lists

	// isNew: added in the current join phase and not yet answered (Apache's isNew).
	isNew bool
	// join / sync are the parked replies of a JoinGroup / SyncGroup waiting on the
	// rebalance; nil when the member is not waiting.
	join chan<- joinResult
	sync chan<- syncResult

	hb    *time.Timer // session (heartbeat) expiry
	hbSeq uint64
}

func (m *member) metadataFor(name string) []byte {
	for _, p := range m.protocols {
		if p.name == name {
			return p.metadata
		}
	}
	return nil
}

func (m *member) supports(name string) bool {
	for _, p := range m.protocols {
		if p.name == name {
			return true
		}
	}
	return false
}

// matches reports whether protos equals the member's protocols, order included
// (Apache's MemberMetadata.matches).
func (m *member) matches(protos []protocol) bool {
	return slices.EqualFunc(m.protocols, protos, func(a, b protocol) bool {
		return a.name == b.name && bytes.Equal(a.metadata, b.metadata)
	})
}

type pendingMember struct{ timer *time.Timer }

// group is one consumer group. Every field below the channels is owned by the
// manage goroutine.
type group struct {
	c    *Coordinator
	name string
	log  zerolog.Logger
	in   chan func()   // requests and timer events, run in order
	quit chan struct{} // closed by Coordinator.Close
	done chan struct{} // closed when manage returns

	state        groupState
	generation   int32
	protocolType string // "" until the first member joins
	protocol     string // selected protocol; "" when none
	leader       string
	members      map[string]*member
	static       map[string]string         // group.instance.id -> member id
	pending      map[string]*pendingMember // KIP-394 ids handed out, awaiting the rejoin
	pendingSync  map[string]struct{}       // members of this generation yet to SyncGroup
	nextOrder    uint64

	// Join phase (PreparingRebalance). The initial join of an Empty group is
	// Apache's initial delayed join: it completes on its timer, or earlier only
	// when a session expiry leaves every remaining member joined (expiredDuringJoin).
	joinTimer        *time.Timer
	joinSeq          uint64
	initialJoin      bool
	initialDelay     time.Duration
	initialRemaining time.Duration
	newMemberAdded   bool

	syncTimer *time.Timer // Apache's DelayedSync: evicts members that never SyncGroup
	syncSeq   uint64

	emptyTimer *time.Timer // EmptyGroupRetention
	emptySeq   uint64

	removed bool // removed itself from the coordinator: manage returns
}

func newGroup(c *Coordinator, name string) *group {
	return &group{
		c:           c,
		name:        name,
		log:         c.log.With().Str("group", name).Logger(),
		in:          make(chan func()),
		quit:        make(chan struct{}),
		done:        make(chan struct{}),
		members:     make(map[string]*member),
		static:      make(map[string]string),
		pending:     make(map[string]*pendingMember),
		pendingSync: make(map[string]struct{}),
	}
}

// manage is the group's goroutine.
func (g *group) manage() {
	defer g.c.wg.Done()
	defer close(g.done)
	defer g.recoverPanic()
	g.afterEvent()
	for !g.removed {
		select {
		case fn := <-g.in:
			fn()
			g.afterEvent()
		case <-g.quit:
			g.shutdown()
			return
		}
	}
}

// afterEvent runs after every request or timer event: it finishes a join phase
// that no longer waits for anyone and keeps the bookkeeping timers in step.
func (g *group) afterEvent() {
	if g.removed {
		return
	}
	if g.state == statePreparingRebalance && !g.initialJoin && g.allJoined() {
		g.completeJoin()
	}
	if len(g.pendingSync) == 0 && g.syncTimer != nil {
		g.syncTimer.Stop()
		g.syncTimer = nil
		g.syncSeq++
	}
	idle := g.state == stateEmpty && len(g.pending) == 0
	switch {
	case idle && g.emptyTimer == nil && g.c.cfg.EmptyGroupRetention >= 0:
		g.emptySeq++
		seq := g.emptySeq
		g.emptyTimer = g.after(g.c.cfg.EmptyGroupRetention, func() { g.emptyExpired(seq) })
	case !idle && g.emptyTimer != nil:
		g.emptyTimer.Stop()
		g.emptyTimer = nil
		g.emptySeq++
	}
}

// after arms a timer whose expiry runs fn on the group goroutine. fn must check
// that it is still current: Stop can lose the race with an expiry.
func (g *group) after(d time.Duration, fn func()) *time.Timer {
	return time.AfterFunc(d, func() { g.post(fn) })
}

// post hands fn to the group goroutine unless the group has exited.
func (g *group) post(fn func()) {
	select {
	case g.in <- fn:
	case <-g.done:
	}
}

// shutdown answers everything parked and stops every timer (Coordinator.Close).
func (g *group) shutdown() {
	for _, m := range g.members {
		g.answerJoin(m, joinError(m.id, kerr.NotCoordinator.Code))
		g.answerSync(m, syncError(kerr.NotCoordinator.Code))
		stopTimer(m.hb)
	}
	g.stopGroupTimers()
	g.state = stateDead
}

// recoverPanic, deferred by manage, ends a group whose goroutine panicked instead of the process. The
// group's state may be half changed, so it goes as it would from a coordinator that failed over: the
// members' parked requests are answered NOT_COORDINATOR and their next request finds a new, empty group
// under the same name (they rejoin); committed offsets are in Redis and stay. A request whose event
// panicked gets COORDINATOR_NOT_AVAILABLE (its reply never comes; the group's done closes).
func (g *group) recoverPanic() {
	p := recover()
	if p == nil {
		return
	}
	g.log.Error().Interface("panic", p).Bytes("stack", debug.Stack()).Str("state", g.state.String()).
		Int32("generation", g.generation).Msg("panic in a group's goroutine; dropping the group's membership")
	g.c.forget(g)
	func() {
		// Answering what is parked reads the same state: a second panic leaves the rest to the callers'
		// own wait, which ends when done closes, and timers still armed to post, which gives up then.
		defer func() {
			if p := recover(); p != nil {
				g.log.Error().Interface("panic", p).Msg("panic answering the dropped group's parked requests")
			}
		}()
		g.shutdown()
	}()
	g.state = stateDead
	g.removed = true
	if g.c.cfg.OnPanic != nil {
		g.c.cfg.OnPanic(g.name)
	}
}

func (g *group) stopGroupTimers() {
	for _, p := range g.pending {
		p.timer.Stop()
	}
	stopTimer(g.joinTimer)
	stopTimer(g.syncTimer)
	stopTimer(g.emptyTimer)
}

func stopTimer(t *time.Timer) {
	if t != nil {
		t.Stop()
	}
}

// removeSelf takes the group out of the coordinator; manage returns after the
// current event. Only an Empty group (no members, so nothing parked) does this.
func (g *group) removeSelf() {
	g.c.forget(g)
	for _, m := range g.members { // none expected; be safe
		g.answerJoin(m, joinError(m.id, kerr.UnknownMemberID.Code))
		g.answerSync(m, syncError(kerr.UnknownMemberID.Code))
		stopTimer(m.hb)
	}
	g.stopGroupTimers()
	g.state = stateDead
	g.removed = true
}

func (g *group) emptyExpired(seq uint64) {
	if seq != g.emptySeq {
		return
	}
	g.emptyTimer = nil
	if g.state != stateEmpty || len(g.pending) > 0 {
		return
	}
	g.log.Debug().Int32("generation", g.generation).Msg("dropping idle empty group")
	g.removeSelf()
}

// ---- members ----

// sortedMembers returns the members in join order.
func (g *group) sortedMembers() []*member {
	ms := make([]*member, 0, len(g.members))
	for _, m := range g.members {
		ms = append(ms, m)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].order < ms[j].order })
	return ms
}

// currentMember is Apache's validateCurrentMember: an instance id must map to
// memberID (else FENCED_INSTANCE_ID, or UNKNOWN_MEMBER_ID if it maps to nothing)
// and memberID must be a member.
func (g *group) currentMember(memberID string, instanceID *string) (*member, int16) {
	if instanceID != nil {
		cur, ok := g.static[*instanceID]
		if !ok {
			return nil, kerr.UnknownMemberID.Code
		}
		if cur != memberID {
			g.log.Info().Str("member", memberID).Str("instance", *instanceID).Str("current_member", cur).
				Msg("fencing request from replaced static member")
			return nil, kerr.FencedInstanceID.Code
		}
	}
	m := g.members[memberID]
	if m == nil {
		return nil, kerr.UnknownMemberID.Code
	}
	return m, 0
}

// add is Apache's GroupMetadata.add.
func (g *group) add(m *member) {
	if len(g.members) == 0 {
		g.protocolType = m.protocolType
	}
	if g.leader == "" {
		g.leader = m.id
	}
	g.nextOrder++
	m.order = g.nextOrder
	g.members[m.id] = m
	if m.instanceID != nil {
		g.static[*m.instanceID] = m.id
	}
	g.removePending(m.id)
}

// detach is Apache's GroupMetadata.remove plus answering anything the member
// has parked (UNKNOWN_MEMBER_ID, as removeMemberAndUpdateGroup does).
func (g *group) detach(m *member) {
	g.answerJoin(m, joinError("", kerr.UnknownMemberID.Code))
	g.answerSync(m, syncError(kerr.UnknownMemberID.Code))
	stopTimer(m.hb)
	m.hb = nil
	m.hbSeq++
	delete(g.members, m.id)
	if m.instanceID != nil && g.static[*m.instanceID] == m.id {
		delete(g.static, *m.instanceID)
	}
	delete(g.pendingSync, m.id)
	if g.leader == m.id {
		g.leader = ""
		if ms := g.sortedMembers(); len(ms) > 0 {
			g.leader = ms[0].id
		}
	}
}

// removeMember is Apache's removeMemberAndUpdateGroup.
func (g *group) removeMember(m *member, reason string) {
	g.log.Info().Str("member", m.id).Str("instance", deref(m.instanceID)).Str("reason", reason).
		Msg("removing member")
	g.detach(m)
	switch g.state {
	case stateStable, stateCompletingRebalance:
		g.maybePrepareRebalance(reason)
	case statePreparingRebalance:
		// afterEvent completes the join phase if m was the last one awaited.
	}
}

func (g *group) addPending(id string, session time.Duration) {
	p := new(pendingMember)
	p.timer = g.after(session, func() {
		if g.pending[id] == p {
			delete(g.pending, id)
			g.log.Debug().Str("member", id).Msg("pending member expired")
			g.expiredDuringJoin()
		}
	})
	g.pending[id] = p
}

func (g *group) removePending(id string) {
	if p := g.pending[id]; p != nil {
		p.timer.Stop()
		delete(g.pending, id)
	}
}

// scheduleSession (re)arms m's session timer (Apache's
// completeAndScheduleNextExpiration).
func (g *group) scheduleSession(m *member, d time.Duration) {
	stopTimer(m.hb)
	m.hbSeq++
	seq := m.hbSeq
	m.hb = g.after(d, func() { g.sessionExpired(m, seq) })
}

func (g *group) sessionExpired(m *member, seq uint64) {
	if m.hbSeq != seq || g.members[m.id] != m {
		return
	}
	m.hb = nil
	if !m.isNew && (m.join != nil || m.sync != nil) {
		// Waiting in a rebalance counts as alive (Apache's hasSatisfiedHeartbeat).
		g.scheduleSession(m, m.sessionTimeout)
		return
	}
	g.removeMember(m, "session timeout expired")
	g.expiredDuringJoin()
}

// expiredDuringJoin completes a join phase that a session expiry left waiting for no one, the initial
// delayed join too, as Apache 4.x's coordinator does (removeMemberAndUpdateClassicGroup,
// removePendingMemberAndUpdateClassicGroup). A LeaveGroup does not end an initial join early there
// (maybeCompleteJoinPhase), nor here: afterEvent completes only the other joins.
func (g *group) expiredDuringJoin() {
	if g.state == statePreparingRebalance && g.initialJoin && g.allJoined() {
		g.completeJoin()
	}
}

// setJoin parks a JoinGroup reply on m, answering a superseded one.
func (g *group) setJoin(m *member, reply chan<- joinResult) {
	if m.join != nil {
		g.answerJoin(m, joinError(m.id, kerr.RebalanceInProgress.Code))
	}
	m.join = reply
}

func (g *group) setSync(m *member, reply chan<- syncResult) {
	if m.sync != nil {
		g.answerSync(m, syncError(kerr.RebalanceInProgress.Code))
	}
	m.sync = reply
}

// answerJoin answers m's parked JoinGroup, if any. Reply channels have room for
// their one answer, so this never blocks.
func (g *group) answerJoin(m *member, r joinResult) {
	if m.join != nil {
		m.join <- r
		m.join = nil
	}
}

func (g *group) answerSync(m *member, r syncResult) {
	if m.sync != nil {
		m.sync <- r
		m.sync = nil
	}
}

// ---- protocols ----

// supportsProtocols is Apache's GroupMetadata.supportsProtocols.
func (g *group) supportsProtocols(protocolType string, protos []protocol) bool {
	if g.state == stateEmpty {
		return protocolType != "" && len(protos) > 0
	}
	if protocolType != g.protocolType {
		return false
	}
	for _, p := range protos {
		if g.supportCount(p.name) == len(g.members) {
			return true
		}
	}
	return false
}

func (g *group) supportCount(name string) int {
	n := 0
	for _, m := range g.members {
		if m.supports(name) {
			n++
		}
	}
	return n
}

// selectProtocol is Apache's vote: among the protocols every member supports,
// each member votes for its most preferred; most votes wins, ties going to the
// protocol voted for by the earliest member.
func (g *group) selectProtocol() string {
	ms := g.sortedMembers()
	votes := make(map[string]int)
	var order []string
	for _, m := range ms {
		for _, p := range m.protocols {
			if g.supportCount(p.name) == len(ms) {
				if votes[p.name] == 0 {
					order = append(order, p.name)
				}
				votes[p.name]++
				break
			}
		}
	}
	best := ""
	for _, name := range order {
		if best == "" || votes[name] > votes[best] {
			best = name
		}
	}
	return best
}

func (g *group) rebalanceTimeout() time.Duration {
	var d time.Duration
	for _, m := range g.members {
		d = max(d, m.rebalanceTimeout)
	}
	return d
}

// ---- rebalance state machine ----

func (g *group) canRebalance() bool {
	return g.state == stateStable || g.state == stateCompletingRebalance || g.state == stateEmpty
}

func (g *group) maybePrepareRebalance(reason string) {
	if g.canRebalance() {
		g.prepareRebalance(reason)
	}
}

// prepareRebalance moves the group to PreparingRebalance (Apache's prepareRebalance).
func (g *group) prepareRebalance(reason string) {
	if g.state == stateCompletingRebalance {
		// Members waiting in SyncGroup must rejoin (resetAndPropagateAssignmentError).
		for _, m := range g.sortedMembers() {
			m.assignment = nil
			if m.sync != nil {
				g.answerSync(m, syncError(kerr.RebalanceInProgress.Code))
				g.scheduleSession(m, m.sessionTimeout)
			}
		}
	}
	g.clearPendingSync()

	rt := g.rebalanceTimeout()
	if g.state == stateEmpty {
		g.initialJoin = true
		g.newMemberAdded = false
		g.initialDelay = g.c.cfg.InitialRebalanceDelay
		g.initialRemaining = max(rt-g.initialDelay, 0)
		g.armJoin(g.initialDelay)
	} else {
		g.initialJoin = false
		g.armJoin(rt)
	}
	prev := g.state
	g.state = statePreparingRebalance
	g.log.Info().Stringer("from", prev).Int32("generation", g.generation).Str("reason", reason).
		Msg("preparing to rebalance")
	if g.c.cfg.OnRebalance != nil {
		g.c.cfg.OnRebalance(g.name)
	}
}

func (g *group) armJoin(d time.Duration) {
	stopTimer(g.joinTimer)
	g.joinSeq++
	seq := g.joinSeq
	g.joinTimer = g.after(d, func() { g.joinExpired(seq) })
}

// joinExpired is the join phase's timer: Apache's InitialDelayedJoin.onComplete
// or DelayedJoin.onExpiration.
func (g *group) joinExpired(seq uint64) {
	if seq != g.joinSeq || g.state != statePreparingRebalance {
		return
	}
	g.joinTimer = nil
	if g.initialJoin && g.newMemberAdded && g.initialRemaining > 0 {
		g.newMemberAdded = false
		d := min(g.c.cfg.InitialRebalanceDelay, g.initialRemaining)
		g.initialRemaining = max(g.initialRemaining-g.initialDelay, 0)
		g.initialDelay = d
		g.armJoin(d)
		return
	}
	g.completeJoin()
}

// allJoined is Apache's hasAllMembersJoined.
func (g *group) allJoined() bool {
	if len(g.pending) > 0 {
		return false
	}
	for _, m := range g.members {
		if m.join == nil {
			return false
		}
	}
	return true
}

// completeJoin ends the join phase (Apache's onCompleteJoin).
func (g *group) completeJoin() {
	stopTimer(g.joinTimer)
	g.joinTimer = nil
	g.joinSeq++
	g.initialJoin = false

	// Dynamic members that did not rejoin are out; static ones stay until
	// their session expires.
	for _, m := range g.sortedMembers() {
		if m.join == nil && m.instanceID == nil {
			g.log.Info().Str("member", m.id).Msg("removing member that did not rejoin in time")
			g.detach(m)
		}
	}
	if !g.electJoinedLeader() && len(g.members) > 0 {
		g.log.Warn().Int32("generation", g.generation).
			Msg("no member rejoined; waiting another rebalance timeout")
		g.armJoin(g.rebalanceTimeout())
		return
	}

	g.generation++
	if len(g.members) == 0 {
		g.protocol = ""
		g.state = stateEmpty
		g.log.Info().Int32("generation", g.generation).Msg("group is now empty")
		return
	}
	g.protocol = g.selectProtocol()
	g.state = stateCompletingRebalance
	g.log.Info().Int32("generation", g.generation).Str("protocol", g.protocol).
		Str("leader", g.leader).Int("members", len(g.members)).Msg("join phase complete")

	for _, m := range g.sortedMembers() {
		if m.join != nil {
			g.answerJoin(m, g.joinSuccess(m.id, m.id == g.leader, g.leader, false))
		}
		g.scheduleSession(m, m.sessionTimeout)
		m.isNew = false
		g.pendingSync[m.id] = struct{}{}
	}
	g.syncSeq++
	seq, gen := g.syncSeq, g.generation
	stopTimer(g.syncTimer)
	g.syncTimer = g.after(g.rebalanceTimeout(), func() { g.syncExpired(seq, gen) })
}

// electJoinedLeader is Apache's maybeElectNewJoinedLeader.
func (g *group) electJoinedLeader() bool {
	leader := g.members[g.leader]
	if leader == nil {
		return false
	}
	if leader.join != nil {
		return true
	}
	for _, m := range g.sortedMembers() {
		if m.join != nil {
			g.log.Info().Str("old_leader", g.leader).Str("leader", m.id).Msg("leader did not rejoin; electing another")
			g.leader = m.id
			return true
		}
	}
	return false
}

// syncExpired evicts members that never sent SyncGroup for their generation
// (Apache's onExpirePendingSync).
func (g *group) syncExpired(seq uint64, gen int32) {
	if seq != g.syncSeq {
		return
	}
	g.syncTimer = nil
	if gen != g.generation || (g.state != stateCompletingRebalance && g.state != stateStable) || len(g.pendingSync) == 0 {
		return
	}
	for _, m := range g.sortedMembers() {
		if _, ok := g.pendingSync[m.id]; ok {
			g.log.Info().Str("member", m.id).Msg("removing member that did not sync in time")
			g.detach(m)
		}
	}
	g.prepareRebalance("members did not send SyncGroup in time")
}

func (g *group) clearPendingSync() {
	clear(g.pendingSync)
	stopTimer(g.syncTimer)
	g.syncTimer = nil
	g.syncSeq++
}

// joinSuccess is the answer to a member of the current generation.
func (g *group) joinSuccess(memberID string, withMembers bool, leader string, skip bool) joinResult {
	pt, p := g.protocolType, g.protocol
	r := joinResult{
		memberID:     memberID,
		generation:   g.generation,
		protocolType: &pt,
		protocol:     &p,
		leader:       leader,
		skip:         skip,
	}
	if withMembers {
		for _, m := range g.sortedMembers() {
			jm := kmsg.NewJoinGroupResponseMember()
			jm.MemberID = m.id
			jm.InstanceID = m.instanceID
			jm.ProtocolMetadata = m.metadataFor(g.protocol)
			r.members = append(r.members, jm)
		}
	}
	return r
}

func (g *group) syncSuccess(m *member) syncResult {
	pt, p := g.protocolType, g.protocol
	return syncResult{protocolType: &pt, protocol: &p, assignment: m.assignment}
}
