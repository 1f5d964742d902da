package gateway

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/coordinator"
	"github.com/kgate/kgate/redisstore"
)

// holdWrites is a go-redis hook that, once armed, holds the first write (HSET, SET, or a script) naming
// key, with the rest of its pipeline, until released: a write on its way to Redis, delayed (a stalled
// connection, an asymmetric network partition).
type holdWrites struct {
	key      string
	mu       sync.Mutex
	armed    bool
	held     chan struct{} // closed when a command is held
	released chan struct{} // closed by release
}

func newHoldWrites(key string) *holdWrites {
	return &holdWrites{key: key, held: make(chan struct{}), released: make(chan struct{})}
}

func (h *holdWrites) arm() {
	h.mu.Lock()
	h.armed = true
	h.mu.Unlock()
}

func (h *holdWrites) release() { close(h.released) }

// hold holds the caller when armed and cmds name the key (once).
func (h *holdWrites) hold(ctx context.Context, cmds ...redis.Cmder) {
	h.mu.Lock()
	hit := false
	for _, c := range cmds {
		switch c.Name() {
		case "hset", "evalsha", "eval", "set":
		default:
			continue
		}
		for _, a := range c.Args() {
			if fmt.Sprint(a) == h.key {
				hit = true
			}
		}
	}
	hit = hit && h.armed
	if hit {
		h.armed = false
		close(h.held)
	}
	h.mu.Unlock()
	if hit {
		select {
		case <-h.released:
		case <-ctx.Done():
		}
	}
}

func (h *holdWrites) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *holdWrites) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.hold(ctx, cmd)
		return next(ctx, cmd)
	}
}
func (h *holdWrites) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.hold(ctx, cmds...)
		return next(ctx, cmds)
	}
}

// joinAndSync makes a new consumer the only member of group on c (joined and assigned) and returns
// its member id and generation.
func joinAndSync(t *testing.T, ctx context.Context, c *conn, group string) (string, int32) {
	t.Helper()
	jr := joinMember(t, ctx, c, 5, group)
	req := kmsg.NewPtrSyncGroupRequest()
	req.Version, req.Group, req.Generation, req.MemberID = 5, group, jr.Generation, jr.MemberID
	consumer, rangeName := "consumer", "range"
	req.ProtocolType, req.Protocol = &consumer, &rangeName
	a := kmsg.NewSyncGroupRequestGroupAssignment()
	a.MemberID = jr.MemberID
	req.GroupAssignment = append(req.GroupAssignment, a)
	r, err := c.syncGroup(ctx, req)
	if err != nil || r.(*kmsg.SyncGroupResponse).ErrorCode != 0 {
		t.Fatalf("sync: %v %+v", err, r)
	}
	return jr.MemberID, jr.Generation
}

// committedOffset is group's committed offset of topic's partition 0 as an OffsetFetch on c answers it.
func committedOffset(t *testing.T, ctx context.Context, c *conn, group, topic string) int64 {
	t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version, req.Group = 7, group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = topic, []int32{0}
	req.Topics = append(req.Topics, rt)
	r, err := c.offsetFetch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	resp := r.(*kmsg.OffsetFetchResponse)
	if resp.ErrorCode != 0 || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("offset fetch: %+v", resp)
	}
	return resp.Topics[0].Partitions[0].Offset
}

// commitCode is the error code of an OffsetCommit of offset on topic's partition 0 by member of
// generation gen, through c.
func commitCode(t *testing.T, ctx context.Context, c *conn, group string, gen int32, member, topic string, offset int64) int16 {
	t.Helper()
	r, err := c.offsetCommit(ctx, commitRequest(group, gen, member, topic, offset, 0))
	if err != nil {
		t.Error(err)
		return -1
	}
	return r.(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode
}

// TestStaleCommitFencedAfterTakeover: a commit that gateway A validated while it coordinated the group,
// but whose Redis write was held up until gateway B had taken the group over (a scale-out here) and B's
// member had committed a newer offset, is refused in Redis: the newer offset stays and A answers
// NOT_COORDINATOR. Before, nothing ordered the two gateways' writes, and A's older offset overwrote B's.
func TestStaleCommitFencedAfterTakeover(t *testing.T) {
	ctx, storeA, storeB := takeoverStores(t)
	const topic = "fenced"
	createTopic(t, storeA, topic, 1)
	group := groupOn([]int32{1, 2}, 1) // on B once B runs; on A while A is alone

	a, _ := serveOn(t, storeA, takeoverConfig(1))
	waitFor(t, 10*time.Second, "A to coordinate "+group, func() bool { return a.notCoordinator(group) == 0 })
	ca := fetchConn(t, a)
	memberA, genA := joinAndSync(t, ctx, ca, group)
	if code := commitCode(t, ctx, ca, group, genA, memberA, topic, 3); code != 0 {
		t.Fatalf("commit of 3 through A: error %d", code)
	}

	// A's next commit passes its validation and is held on its way to Redis.
	offsetsKey, _, _ := storeA.OffsetKeys(group)
	hold := newHoldWrites(offsetsKey)
	storeA.Client().AddHook(hold)
	hold.arm()
	staleCode := make(chan int16, 1)
	go func() { staleCode <- commitCode(t, ctx, ca, group, genA, memberA, topic, 5) }()
	select {
	case <-hold.held:
	case <-ctx.Done():
		t.Fatal("A's commit never reached Redis")
	}

	// B joins; the group moves to it; a member joins through B and commits 10.
	b, _ := serveOn(t, storeB, takeoverConfig(2))
	waitFor(t, 10*time.Second, "B to coordinate "+group, func() bool { return b.notCoordinator(group) == 0 })
	cb := fetchConn(t, b)
	memberB, genB := joinAndSync(t, ctx, cb, group)
	if code := commitCode(t, ctx, cb, group, genB, memberB, topic, 10); code != 0 {
		t.Fatalf("commit of 10 through B: error %d", code)
	}

	// A's held commit of 5 lands now.
	hold.release()
	if code := <-staleCode; code != kerr.NotCoordinator.Code {
		t.Errorf("A's commit held past the takeover: error %d, want NOT_COORDINATOR (%d)", code, kerr.NotCoordinator.Code)
	}
	if got := committedOffset(t, ctx, cb, group, topic); got != 10 {
		t.Fatalf("committed offset after A's held commit landed: %d, want 10 (B's member's)", got)
	}
}

// TestRefusedWriteUnloadsAndReclaims: a write of a group's offsets that Redis refuses because another
// gateway claimed the group since (here that claim is made on Redis directly) stores nothing and
// answers NOT_COORDINATOR, and the group leaves this gateway's memory; the next request claims the
// group again, so a gateway that got a group back before it unloaded it is not refused for ever. The
// same for a commit, a group's deletion and an admin reset.
func TestRefusedWriteUnloadsAndReclaims(t *testing.T) {
	srv := redisServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	store := openStoreAt(t, srv.Addr, redisstore.Options{})
	other := openStoreAt(t, srv.Addr, redisstore.Options{}) // the gateway taking the groups over
	g, _ := serveOn(t, store, Config{Groups: coordinator.Config{InitialRebalanceDelay: -1}})
	const topic = "reclaimed"
	createTopic(t, store, topic, 1)
	c := fetchConn(t, g)
	takenOver := func(group string) {
		t.Helper()
		holder, err := other.ClaimGroup(ctx, group, "another-gateway/1", "")
		if err == nil && holder != "" {
			holder, err = other.ClaimGroup(ctx, group, "another-gateway/1", holder) // taken over
		}
		if err != nil || holder != "" {
			t.Fatalf("another gateway's claim: held by %q (%v)", holder, err)
		}
	}

	// A member's commit.
	member, gen := joinAndSync(t, ctx, c, "members")
	if code := commitCode(t, ctx, c, "members", gen, member, topic, 3); code != 0 {
		t.Fatalf("commit of 3: error %d", code)
	}
	takenOver("members")
	if code := commitCode(t, ctx, c, "members", gen, member, topic, 4); code != kerr.NotCoordinator.Code {
		t.Fatalf("commit after another gateway claimed the group: error %d, want NOT_COORDINATOR", code)
	}
	if got := committedOffset(t, ctx, c, "members", topic); got != 3 {
		t.Fatalf("committed after the refused commit: %d, want 3", got)
	}
	if _, err := g.coord.Lookup(ctx, "members"); err == nil {
		t.Fatal("the group is still in memory after its commit was refused")
	}
	// Unknown here now, the member rejoins, and its commits are stored again.
	if code := commitCode(t, ctx, c, "members", gen, member, topic, 4); code != kerr.IllegalGeneration.Code {
		t.Fatalf("commit of the unloaded group's member: error %d, want ILLEGAL_GENERATION", code)
	}
	member, gen = joinAndSync(t, ctx, c, "members")
	if code := commitCode(t, ctx, c, "members", gen, member, topic, 4); code != 0 {
		t.Fatalf("commit after the rejoin: error %d", code)
	}
	if got := committedOffset(t, ctx, c, "members", topic); got != 4 {
		t.Fatalf("committed after the rejoin: %d, want 4", got)
	}

	// A group's deletion.
	if code := commitCode(t, ctx, c, "deleted", -1, "", topic, 7); code != 0 {
		t.Fatalf("simple commit: error %d", code)
	}
	takenOver("deleted")
	if code := g.deleteGroup(ctx, "deleted"); code != kerr.NotCoordinator.Code {
		t.Fatalf("deletion after another gateway claimed the group: error %d, want NOT_COORDINATOR", code)
	}
	if exists, err := store.GroupExists(ctx, "deleted"); err != nil || !exists {
		t.Fatalf("offsets after the refused deletion: exist %v (%v)", exists, err)
	}
	if code := g.deleteGroup(ctx, "deleted"); code != 0 {
		t.Fatalf("deletion sent again: error %d", code)
	}
	if exists, err := store.GroupExists(ctx, "deleted"); err != nil || exists {
		t.Fatalf("offsets after the deletion: exist %v (%v)", exists, err)
	}

	// An admin reset.
	if code := commitCode(t, ctx, c, "reset", -1, "", topic, 7); code != 0 {
		t.Fatalf("simple commit: error %d", code)
	}
	takenOver("reset")
	if rec, out := adminPost(g, "/api/v1/groups/reset/offsets", `{"topic":"reclaimed","to":"offset","value":0}`); rec.Code != 503 {
		t.Fatalf("reset after another gateway claimed the group: %d %v, want 503", rec.Code, out)
	}
	if got := committedOffset(t, ctx, c, "reset", topic); got != 7 {
		t.Fatalf("committed after the refused reset: %d, want 7", got)
	}
	if rec, out := adminPost(g, "/api/v1/groups/reset/offsets", `{"topic":"reclaimed","to":"offset","value":0}`); rec.Code != 200 {
		t.Fatalf("reset sent again: %d %v", rec.Code, out)
	}
	if got := committedOffset(t, ctx, c, "reset", topic); got != 0 {
		t.Fatalf("committed after the reset: %d, want 0", got)
	}
}

// TestGroupClaimsPrune: the membership loop forgets the claims of groups that moved away and of those
// unused for claimIdle; a group claimed again gets a new token, and a refusal under the old token
// (forget) leaves the new claim alone.
func TestGroupClaimsPrune(t *testing.T) {
	ctx, _, store := embeddedGateway(t, Config{})
	g, _ := serveOn(t, store, Config{}) // coordinating: a claim is made only then
	claim := func(group string) string {
		t.Helper()
		token, err := g.claimGroup(ctx, group)
		if err != nil || token == "" {
			t.Fatalf("claim %s: %q, %v", group, token, err)
		}
		return token
	}
	kept, idle, moved := claim("kept"), claim("idle"), claim("moved")
	if again := claim("kept"); again != kept {
		t.Fatalf("a held claim was made again: %s, then %s", kept, again)
	}
	v, _ := g.claims.m.Load("idle")
	v.(*groupClaim).used.Store(time.Now().Add(-claimIdle - time.Minute).UnixNano())
	g.claims.prune(func(group string) bool { return group != "moved" })
	if claim("kept") != kept {
		t.Fatal("a claim in use and of a group still here was forgotten")
	}
	if claim("idle") == idle || claim("moved") == moved {
		t.Fatal("an idle claim, or one of a group that moved away, was kept")
	}
	if g.claims.forget("idle", idle) {
		t.Fatal("a refusal under a forgotten claim's token forgot the new claim")
	}
	if n := g.claims.n.Load(); n != 3 {
		t.Fatalf("%d claims counted, want 3", n)
	}
}

// groupsOn is n distinct group ids that groupOn's rule places at index idx of ids.
func groupsOn(ids []int32, idx, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		if g := "group-" + strconv.Itoa(i); int(fnv32a(g)%uint32(len(ids))) == idx {
			out = append(out, g)
		}
	}
	return out
}

// TestClaimAnsweredAfterTakeoverWritesNothing: a claim is itself a write, as open to delay as the
// writes it fences. Gateway A, coordinating, claims a group for a simple commit, for DeleteGroups and
// for a JoinGroup (its first request of each group), and each claim's SET is held on its way until
// gateway B has taken the groups over (a scale-out), claimed them and stored its own commits. The SETs
// then land over B's claims. Before, A went on under the claims it had just made: the simple commit
// (generation -1, valid whatever A's memory holds) put A's older offset over B's, the deletion deleted
// the offsets B's committer had just stored, and the join admitted a member to a group A no longer
// coordinates. A claim answered when its gateway no longer coordinates the group now stores nothing
// and answers NOT_COORDINATOR.
func TestClaimAnsweredAfterTakeoverWritesNothing(t *testing.T) {
	ctx, storeA, storeB := takeoverStores(t)
	const topic = "claimed-late"
	createTopic(t, storeA, topic, 1)
	groups := groupsOn([]int32{1, 2}, 1, 3) // on B once B runs; on A while A is alone
	committed, deleted, joined := groups[0], groups[1], groups[2]

	a, _ := serveOn(t, storeA, takeoverConfig(1))
	for _, group := range groups {
		waitFor(t, 10*time.Second, "A to coordinate "+group, func() bool { return a.notCoordinator(group) == 0 })
	}
	ca := fetchConn(t, a)
	held := map[string]*holdWrites{}
	for _, group := range groups {
		held[group] = newHoldWrites(storeA.OwnerKey(group))
		storeA.Client().AddHook(held[group])
		held[group].arm()
	}
	commitCodeA, deleteCodeA, joinA := make(chan int16, 1), make(chan int16, 1), make(chan *kmsg.JoinGroupResponse, 1)
	go func() { commitCodeA <- commitCode(t, ctx, ca, committed, -1, "", topic, 5) }()
	go func() { deleteCodeA <- a.deleteGroup(ctx, deleted) }()
	go func() {
		r, err := ca.joinGroup(ctx, joinRequest(3, joined))
		if err != nil {
			t.Error(err)
			r = kmsg.NewPtrJoinGroupResponse()
		}
		joinA <- r.(*kmsg.JoinGroupResponse)
	}()
	for _, group := range groups {
		select {
		case <-held[group].held:
		case <-ctx.Done():
			t.Fatal("A's claim of " + group + " never reached Redis")
		}
	}

	// B joins and the groups move to it; A sees it too. B's committer stores 10 in two of them.
	b, _ := serveOn(t, storeB, takeoverConfig(2))
	cb := fetchConn(t, b)
	for _, group := range groups {
		waitFor(t, 10*time.Second, "B to coordinate "+group, func() bool { return b.notCoordinator(group) == 0 })
		waitFor(t, 10*time.Second, "A to hand "+group+" over", func() bool { return a.notCoordinator(group) != 0 })
	}
	for _, group := range []string{committed, deleted} {
		if code := commitCode(t, ctx, cb, group, -1, "", topic, 10); code != 0 {
			t.Fatalf("commit of 10 to %s through B: error %d", group, code)
		}
	}

	// A's claims land now.
	for _, group := range groups {
		held[group].release()
	}
	if code := <-commitCodeA; code != kerr.NotCoordinator.Code {
		t.Errorf("A's commit whose claim landed after the takeover: error %d, want NOT_COORDINATOR (%d)", code, kerr.NotCoordinator.Code)
	}
	if code := <-deleteCodeA; code != kerr.NotCoordinator.Code {
		t.Errorf("A's deletion whose claim landed after the takeover: error %d, want NOT_COORDINATOR (%d)", code, kerr.NotCoordinator.Code)
	}
	if r := <-joinA; r.ErrorCode != kerr.NotCoordinator.Code {
		t.Errorf("A's join whose claim landed after the takeover: error %d, generation %d, want NOT_COORDINATOR (%d)", r.ErrorCode, r.Generation, kerr.NotCoordinator.Code)
	}
	if _, err := a.coord.Lookup(ctx, joined); err == nil {
		t.Error("A holds a group it no longer coordinates, admitted by a join whose claim landed after the takeover")
	}
	for _, group := range []string{committed, deleted} {
		if got := committedOffset(t, ctx, cb, group, topic); got != 10 {
			t.Errorf("%s: committed offset after A's claim landed: %d, want 10 (B's committer's)", group, got)
		}
	}
}

// TestClaimRefusedOnceCoordinatorMoved: a gateway asked to claim a group it no longer coordinates (a
// request checked before the group moved, then held up before its claim: waiting for the group's
// writes, say) claims nothing. Before, its SET replaced the new coordinator's claim, whose next
// commit was refused (NOT_COORDINATOR, the group unloaded there: a needless rebalance), while the
// request went on under the new claim.
func TestClaimRefusedOnceCoordinatorMoved(t *testing.T) {
	ctx, storeA, storeB := takeoverStores(t)
	const topic = "claimed-moved"
	createTopic(t, storeA, topic, 1)
	group := groupOn([]int32{1, 2}, 1)
	a, _ := serveOn(t, storeA, takeoverConfig(1))
	waitFor(t, 10*time.Second, "A to coordinate "+group, func() bool { return a.notCoordinator(group) == 0 })
	b, _ := serveOn(t, storeB, takeoverConfig(2))
	waitFor(t, 10*time.Second, "B to coordinate "+group, func() bool { return b.notCoordinator(group) == 0 })
	waitFor(t, 10*time.Second, "A to hand "+group+" over", func() bool { return a.notCoordinator(group) != 0 })
	cb := fetchConn(t, b)
	if code := commitCode(t, ctx, cb, group, -1, "", topic, 10); code != 0 {
		t.Fatalf("commit of 10 through B: error %d", code)
	}
	record, err := storeB.Client().Get(ctx, storeB.OwnerKey(group)).Result()
	if err != nil {
		t.Fatal(err)
	}

	if token, err := a.claimGroup(ctx, group); groupErrCode(err) != kerr.NotCoordinator.Code {
		t.Errorf("A's claim of a group B coordinates: token %q, error %v, want NOT_COORDINATOR", token, err)
	}
	if now, err := storeB.Client().Get(ctx, storeB.OwnerKey(group)).Result(); err != nil || now != record {
		t.Errorf("owner record after A's refused claim: %q (%v), want B's %q", now, err, record)
	}
	if code := commitCode(t, ctx, cb, group, -1, "", topic, 11); code != 0 {
		t.Errorf("B's commit after A's refused claim: error %d", code)
	}
}

// TestLateClaimKeepsNewCoordinator: gateway A, coordinating, claims a group as a member joins it, and
// the claim is held on its way until gateway B has taken the group over (a scale-out), admitted a
// member and claimed the group; A's claim then lands. Before, it replaced B's claim, and B's member's
// next commit was refused (NOT_COORDINATOR, the group unloaded from B: a rebalance for nothing). The
// late claim now stores nothing: B's record, group and commits stand.
func TestLateClaimKeepsNewCoordinator(t *testing.T) {
	ctx, storeA, storeB := takeoverStores(t)
	const topic = "claimed-stale"
	createTopic(t, storeA, topic, 1)
	group := groupOn([]int32{1, 2}, 1) // on B once B runs; on A while A is alone

	a, _ := serveOn(t, storeA, takeoverConfig(1))
	waitFor(t, 10*time.Second, "A to coordinate "+group, func() bool { return a.notCoordinator(group) == 0 })
	hold := newHoldWrites(storeA.OwnerKey(group))
	storeA.Client().AddHook(hold)
	hold.arm()
	joinA := make(chan int16, 1)
	go func() {
		r, err := fetchConn(t, a).joinGroup(ctx, joinRequest(3, group))
		if err != nil {
			t.Error(err)
			joinA <- -1
			return
		}
		joinA <- r.(*kmsg.JoinGroupResponse).ErrorCode
	}()
	select {
	case <-hold.held:
	case <-ctx.Done():
		t.Fatal("A's claim never reached Redis")
	}

	b, _ := serveOn(t, storeB, takeoverConfig(2))
	waitFor(t, 10*time.Second, "B to coordinate "+group, func() bool { return b.notCoordinator(group) == 0 })
	waitFor(t, 10*time.Second, "A to hand "+group+" over", func() bool { return a.notCoordinator(group) != 0 })
	cb := fetchConn(t, b)
	member, gen := joinAndSync(t, ctx, cb, group)
	if code := commitCode(t, ctx, cb, group, gen, member, topic, 10); code != 0 {
		t.Fatalf("commit of 10 through B: error %d", code)
	}
	record, err := storeB.Client().Get(ctx, storeB.OwnerKey(group)).Result()
	if err != nil {
		t.Fatal(err)
	}

	hold.release()
	if code := <-joinA; code != kerr.NotCoordinator.Code {
		t.Errorf("A's join whose claim landed after the takeover: error %d, want NOT_COORDINATOR (%d)", code, kerr.NotCoordinator.Code)
	}
	if now, err := storeB.Client().Get(ctx, storeB.OwnerKey(group)).Result(); err != nil || now != record {
		t.Errorf("owner record after A's late claim: %q (%v), want B's %q", now, err, record)
	}
	if code := commitCode(t, ctx, cb, group, gen, member, topic, 11); code != 0 {
		t.Errorf("B's member's commit after A's late claim: error %d, want none", code)
	}
	if _, err := b.coord.Lookup(ctx, group); err != nil {
		t.Errorf("B dropped the group after A's late claim: %v", err)
	}
	if got := committedOffset(t, ctx, cb, group, topic); got != 11 {
		t.Errorf("committed offset: %d, want 11", got)
	}
}

// TestJoinRoundOverlapsClaim: a JoinGroup of a group this gateway has not claimed no longer waits for
// the claim's answer before the join round. With the claim held on its way to Redis (the group's
// master hung), a member's first join is answered MEMBER_ID_REQUIRED and its second is admitted to the
// round meanwhile; the answer that gives it a generation waits for the claim, so the member reads no
// offsets before the claim fenced the writes of the gateway that had the group before. Before, the
// first join waited for the claim (up to the command timeout).
func TestJoinRoundOverlapsClaim(t *testing.T) {
	srv := redisServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	store := openStoreAt(t, srv.Addr, redisstore.Options{CommandTimeout: 30 * time.Second})
	g, _ := serveOn(t, store, Config{Groups: coordinator.Config{InitialRebalanceDelay: -1}})
	const group = "overlapped"
	hold := newHoldWrites(store.OwnerKey(group))
	store.Client().AddHook(hold)
	release := sync.OnceFunc(hold.release)
	t.Cleanup(release)
	hold.arm()
	c := fetchConn(t, g)
	join := joinRequest(5, group)
	answer := func(to chan<- *kmsg.JoinGroupResponse) {
		r, err := c.joinGroup(ctx, join)
		if err != nil {
			t.Error(err)
			r = kmsg.NewPtrJoinGroupResponse()
		}
		to <- r.(*kmsg.JoinGroupResponse)
	}
	first := make(chan *kmsg.JoinGroupResponse, 1)
	go answer(first)
	select {
	case <-hold.held:
	case <-ctx.Done():
		t.Fatal("the claim never reached Redis")
	}
	select {
	case r := <-first:
		if r.ErrorCode != kerr.MemberIDRequired.Code {
			t.Fatalf("first join: error %d, want MEMBER_ID_REQUIRED", r.ErrorCode)
		}
		join.MemberID = r.MemberID
	case <-time.After(5 * time.Second): // a deadline for the failure, not a wait for a state
		t.Fatal("the first join waited for the claim's answer")
	}

	second := make(chan *kmsg.JoinGroupResponse, 1)
	go answer(second)
	waitFor(t, 10*time.Second, "the member admitted to a generation", func() bool {
		info, found, _ := g.describeGroup(ctx, group)
		return found && info.State == coordinator.StateCompletingRebalance
	})
	// A negative: the answer must not come while the claim is held. Looked for over a window, not at
	// one instant right after the state changed, which the answer could follow.
	select {
	case r := <-second:
		t.Fatalf("join answered (error %d, generation %d) before its claim was", r.ErrorCode, r.Generation)
	case <-time.After(300 * time.Millisecond):
	}
	release()
	var r *kmsg.JoinGroupResponse
	select {
	case r = <-second:
	case <-ctx.Done():
		t.Fatal("the join was never answered")
	}
	if r.ErrorCode != 0 || r.Generation != 1 || r.MemberID != join.MemberID {
		t.Fatalf("join after the claim: error %d, generation %d, member %q; want generation 1 of %q", r.ErrorCode, r.Generation, r.MemberID, join.MemberID)
	}
	if record := store.Client().Get(ctx, store.OwnerKey(group)).Val(); !strings.HasPrefix(record, g.instance+"/") {
		t.Fatalf("owner record %q, want this gateway's claim", record)
	}
}

// TestGroupClaimsFullCounted: past maxClaims a gateway writes offsets without the owner check, which
// an operator must be able to see (it was silent): counted, and the claim not made.
func TestGroupClaimsFullCounted(t *testing.T) {
	ctx, _, store := embeddedGateway(t, Config{})
	g, _ := serveOn(t, store, Config{})
	before := testutil.ToFloat64(mClaimsFull)
	g.claims.n.Store(maxClaims)
	token, err := g.claimGroup(ctx, "one-too-many")
	if err != nil || token != "" {
		t.Fatalf("claim past the limit: %q, %v; want an unconditional write", token, err)
	}
	if _, held := g.claims.m.Load("one-too-many"); held {
		t.Fatal("a claim past the limit was kept")
	}
	if got := testutil.ToFloat64(mClaimsFull) - before; got != 1 {
		t.Fatalf("kgate_group_claims_full_total rose by %v, want 1", got)
	}
}

// takeoverStores are two stores on one Redis for gateways A and B of a takeover test, A's commands
// allowed to be held far longer than a default command timeout, and a context bounding the test.
func takeoverStores(t *testing.T) (ctx context.Context, storeA, storeB *redisstore.Store) {
	srv := redisServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	storeA = openStoreAt(t, srv.Addr, redisstore.Options{CommandTimeout: 30 * time.Second})
	return ctx, storeA, openStoreAt(t, srv.Addr, redisstore.Options{})
}

// takeoverConfig is gateway id's configuration in a takeover test: membership settles in about a
// second, and groups start at the first join.
func takeoverConfig(id int32) Config {
	return Config{NodeID: id, HeartbeatInterval: 50 * time.Millisecond, NodeTimeout: time.Second,
		Groups: coordinator.Config{InitialRebalanceDelay: -1}}
}
