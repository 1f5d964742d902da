package gateway

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"net"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf16"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kgate/kgate/coordinator"
	"github.com/kgate/kgate/redisstore"
)

// maxCommitMetadata is Apache's offset.metadata.max.bytes default, which it compares with the length
// of a Java string: UTF-16 code units, not bytes.
const maxCommitMetadata = 4096

// commitMetadataTooLarge reports whether md is over maxCommitMetadata as Apache counts it. A UTF-8
// string never has more UTF-16 units than bytes, so only a longer one is counted.
func commitMetadataTooLarge(md string) bool {
	if len(md) <= maxCommitMetadata {
		return false
	}
	units := 0
	for _, r := range md {
		units += utf16.RuneLen(r)
	}
	return units > maxCommitMetadata
}

// notCoordinator returns NOT_COORDINATOR when another gateway coordinates group (or
// COORDINATOR_NOT_AVAILABLE when no gateway can), 0 when this one does.
func (g *Gateway) notCoordinator(group string) int16 {
	n, ok := g.nodes.coordinatorFor(group)
	switch {
	case !ok:
		return kerr.CoordinatorNotAvailable.Code
	case n.ID != g.cfg.NodeID:
		return kerr.NotCoordinator.Code
	}
	select {
	case <-g.ready:
		return 0
	default:
		return kerr.CoordinatorLoadInProgress.Code
	}
}

// describeGroup is the coordinator's view of group: found false when the coordinator does not hold it
// (it has no members here), and code nonzero when that cannot be told: the coordinator is closing, ctx
// ended, or the group moved to another gateway since the caller's check of notCoordinator (its
// members are rejoining there). A caller that acts on a group having no members must not take those
// for "no members".
func (g *Gateway) describeGroup(ctx context.Context, group string) (info coordinator.GroupInfo, found bool, code int16) {
	info, err := g.coord.Lookup(ctx, group)
	switch {
	case err == nil:
		return info, true, 0
	case errors.Is(err, coordinator.ErrUnknownGroup):
		return info, false, g.notCoordinator(group)
	default:
		return info, false, kerr.CoordinatorNotAvailable.Code
	}
}

// groupWrites orders the writes of a group's committed offsets, as Apache does under its group lock:
// commits (validated by the coordinator, then stored in several Redis round trips) run together, and
// a deletion (DeleteGroups, OffsetDelete) runs alone, between its check of the group and the end of
// its Redis writes. Interleaved, a commit's Redis consumer group outlived the deletion of the group's
// offsets, or a deleted group's offsets came back after its check. Groups share a fixed set of
// stripes, so the guard takes no memory per group.
//
// Commits do not exclude each other: held across their Redis round trips, an exclusive lock made a
// stalled Redis cost the k-th commit of a stripe k command timeouts, other groups' included. Two
// commits of one partition at once (two consumers assigning it to themselves under one group id) can
// therefore leave its Redis consumer group at the other's offset until the next commit.
type groupWrites struct {
	seed    maphash.Seed
	stripes [64]sync.RWMutex
}

func newGroupWrites() *groupWrites { return &groupWrites{seed: maphash.MakeSeed()} }

func (w *groupWrites) of(group string) *sync.RWMutex {
	return &w.stripes[maphash.String(w.seed, group)%uint64(len(w.stripes))]
}

// commit holds group's writes for a commit; the returned function releases them.
func (w *groupWrites) commit(group string) func() {
	l := w.of(group)
	l.RLock()
	return l.RUnlock
}

// delete holds group's writes for a deletion, excluding commits and other deletions.
func (w *groupWrites) delete(group string) func() {
	l := w.of(group)
	l.Lock()
	return l.Unlock
}

// groupClaims are the groups whose owner record in Redis this gateway claimed (Store.ClaimGroup) and,
// as far as it knows, still holds. A group's writes (commits, deletions, admin resets) claim it first
// unless it is listed here, before they are checked against the coordinator's view: a write this
// gateway validated is then refused in Redis (ErrNotOwner) once another gateway claimed the group
// after it (redisstore/owner.go). A claim is forgotten when the group leaves this gateway (the
// membership loop's unload), when a write finds it lost (disowned) and after claimIdle unused; a group
// claimed by another gateway while this one still remembers its own claim costs one refused write.
//
// Each claim has a token of its own (the gateway's instance id and a sequence number), sent to Redis
// once: a write validated under a claim that was lost is refused even after this gateway claimed the
// group again, and a claim held up on its way and answered after the group moved names a token no
// write uses (claimGroup) and lands over no claim made after it (takeOver).
type groupClaims struct {
	m      sync.Map // group -> *groupClaim
	n      atomic.Int64
	seq    atomic.Uint64
	warned atomic.Int64   // when the last "claims full" warning was logged (unix ns)
	bg     sync.WaitGroup // claims made in the background (claimAtJoin); Serve waits for them
}

// groupClaim is one claim of a group: done is closed once Redis answered it, with err; used is when a
// write last took it (unix ns).
type groupClaim struct {
	token string
	done  chan struct{}
	err   error
	used  atomic.Int64
}

// maxClaims bounds the claims remembered. Past it (that many groups written through this gateway
// within claimIdle), the other groups' offsets are written unconditionally, as before owner records:
// claiming them at each write instead would have two commits of one group refuse each other's claim.
// claimIdle is how long an unused claim is kept: a write under a claim forgotten so is refused only if
// another claim came since, as any write is.
const (
	maxClaims = 100_000
	claimIdle = time.Hour
)

// forget drops group's claim if it is still the one of token ("": whichever). It reports false when
// group has a claim of another token: a newer one, made after the claim of token was forgotten.
func (c *groupClaims) forget(group, token string) bool {
	v, ok := c.m.Load(group)
	if !ok {
		return true
	}
	if token != "" && v.(*groupClaim).token != token {
		return false
	}
	if c.m.CompareAndDelete(group, v) {
		c.n.Add(-1)
	}
	return true
}

// prune forgets the claims keep rejects and those unused for claimIdle.
func (c *groupClaims) prune(keep func(group string) bool) {
	idle := time.Now().Add(-claimIdle).UnixNano()
	c.m.Range(func(k, v any) bool {
		if cl := v.(*groupClaim); !keep(k.(string)) || cl.used.Load() < idle {
			c.forget(k.(string), cl.token)
		}
		return true
	})
}

// errNotCoordinating refuses a claim of a group this gateway does not coordinate (any more): answered
// NOT_COORDINATOR (groupErrCode).
var errNotCoordinating = errors.New("gateway: this gateway does not coordinate the group")

// errClaimContended: the group's owner record changed under each of takeOver's attempts. Answered
// COORDINATOR_NOT_AVAILABLE, for the client to retry.
var errClaimContended = errors.New("gateway: the group's owner record changed under each claim")

// claimGroup returns the token of this gateway's claim on group's offsets in Redis, claiming it first
// unless it holds one (claims). Callers claim before they check a write against the coordinator's
// view of the group, hold the group's writes (groupWrites) across both, and write with the token ("":
// unconditionally, past maxClaims).
//
// The claim is a write of its own, so it is made only while this gateway coordinates the group, and
// kept only if it still does once Redis answered (errNotCoordinating otherwise;
// membership.isCoordinator checks the lease itself): answered while this gateway's lease runs, a claim
// landed before any peer could take the group over, so before its claim. Before, a claim whose SET
// was held up until another gateway had claimed the group went on under the claim that had just
// displaced the new coordinator's, and the write that followed it (a simple commit or a deletion,
// which no member of this gateway's memory checks) went through: the very write the record fences.
// Such a claim is now refused in Redis too (takeOver); a request checked before the group moved and
// held up on its way to the claim (waiting for the group's writes, say) sends none.
func (g *Gateway) claimGroup(ctx context.Context, group string) (string, error) {
	cl, err := g.claimFor(ctx, group, false)
	if cl == nil {
		return "", err
	}
	return awaitClaim(ctx, cl)
}

// claimFor returns group's claim: the one this gateway holds or is making, or a new one, made in the
// caller's goroutine, or with background in one that claims owns (not waited for). It returns nil
// with errNotCoordinating when this gateway does not coordinate the group, and nil, nil past
// maxClaims (unconditional writes).
func (g *Gateway) claimFor(ctx context.Context, group string, background bool) (*groupClaim, error) {
	c := &g.claims
	if v, ok := c.m.Load(group); ok {
		return v.(*groupClaim), nil
	}
	if !g.nodes.isCoordinator(group) {
		return nil, errNotCoordinating
	}
	if c.n.Load() >= maxClaims {
		mClaimsFull.Inc()
		if last := c.warned.Load(); time.Since(time.Unix(0, last)) > time.Minute && c.warned.CompareAndSwap(last, time.Now().UnixNano()) {
			g.log.Warn().Int("claims", maxClaims).Str("group", group).Msg("claims full: offsets of groups beyond them are written without the owner check (kgate_group_claims_full_total)")
		}
		return nil, nil
	}
	fresh := &groupClaim{token: g.instance + "/" + strconv.FormatUint(c.seq.Add(1), 10), done: make(chan struct{})}
	fresh.used.Store(time.Now().UnixNano())
	if v, loaded := c.m.LoadOrStore(group, fresh); loaded {
		return v.(*groupClaim), nil
	}
	c.n.Add(1)
	if background {
		c.bg.Go(func() { g.makeClaim(ctx, group, fresh) })
	} else {
		g.makeClaim(ctx, group, fresh)
	}
	return fresh, nil
}

// makeClaim makes the claim cl of group (takeOver) and closes cl.done with its outcome; a claim that
// failed is forgotten.
func (g *Gateway) makeClaim(ctx context.Context, group string, cl *groupClaim) {
	defer func() {
		if p := recover(); p != nil {
			cl.err = fmt.Errorf("%w: %v", errPanic, p)
			notePanic(g.log, "group_claim", p, debug.Stack(), "panic claiming a group's offsets")
		}
		close(cl.done)
		if cl.err != nil {
			g.claims.forget(group, cl.token) // its SET may still land: the token is not used again
		}
	}()
	cl.err = g.takeOver(ctx, group, cl.token)
}

// claimAttempts bounds the claims takeOver sends: each refusal after the first means another claim
// landed between two of them, which only two gateways that both take themselves for the group's
// coordinator make (the hold and the lease prevent it).
const claimAttempts = 3

// takeOver claims group in Redis with token (Store.ClaimGroup), taking it over from the claim holding
// it while this gateway coordinates the group, and checks that it still does once Redis answered
// (errNotCoordinating otherwise). The first attempt claims only a group unclaimed or last claimed by
// this gateway: a claim held up until another gateway had taken the group over and claimed it then
// lands over nothing (the new coordinator's claim stands; before, its next write was refused and the
// group rejoined there). The attempts after it name the claim that refused the one before, which this
// coordinator replaces, however long its gateway has been down.
func (g *Gateway) takeOver(ctx context.Context, group, token string) error {
	seen := ""
	for range claimAttempts {
		holder, err := g.store.ClaimGroup(ctx, group, token, seen)
		switch {
		case err != nil:
			return err
		case !g.nodes.isCoordinator(group):
			return errNotCoordinating
		case holder == "":
			return nil
		}
		seen = holder
	}
	return errClaimContended
}

// claimAtJoin starts the claim of group as a member joins it here (JoinGroup), not only at its first
// write, so that a commit validated by the gateway that had the group before, landing after these
// members read their offsets, is refused then too. It does not wait: the join round (the other
// members, the initial rebalance delay) goes on while Redis answers, and only a join answered with a
// generation waits for the claim (joinClaimed). It returns the claim, nil past maxClaims, and
// NOT_COORDINATOR when the group moved away, for the join to answer.
func (g *Gateway) claimAtJoin(ctx context.Context, group string) (*groupClaim, int16) {
	cl, err := g.claimFor(ctx, group, true)
	return cl, groupErrCode(err)
}

// joinClaimed waits for cl, group's claim made or under way as a member joined (claimAtJoin), before
// the join is answered with a generation: so no member admitted here reads the group's offsets before
// the claim fenced the writes of the gateway that had the group before, and none is admitted by a
// gateway whose claim found the group moved away (NOT_COORDINATOR, and the group dropped from memory
// unless claimed anew since). A claim failing in Redis is best effort: the join is answered, and the
// first write claims again.
func (g *Gateway) joinClaimed(ctx context.Context, group string, cl *groupClaim) int16 {
	if cl == nil {
		return 0
	}
	_, err := awaitClaim(ctx, cl)
	switch {
	case errors.Is(err, errNotCoordinating):
		if g.claims.forget(group, cl.token) {
			g.coord.Unload(ctx, func(name string) bool { return name != group })
		}
		return kerr.NotCoordinator.Code
	case err != nil:
		g.log.Debug().Err(err).Str("group", group).Msg("could not claim the group's offsets at a join")
	}
	return 0
}

// awaitClaim waits for the claim cl, made by another request if still under way, and returns its
// outcome.
func awaitClaim(ctx context.Context, cl *groupClaim) (string, error) {
	select {
	case <-cl.done:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	cl.used.Store(time.Now().UnixNano())
	return cl.token, cl.err
}

// disowned handles a write of group's offsets under the claim of token that Redis refused because
// another gateway claimed the group since (ErrNotOwner): that gateway coordinates it now, or did after
// this one's claim, so this one's view of the group (members, generation) is stale. The group is
// dropped from memory, as when the membership loop finds it moved, and the claim forgotten: the next
// request for it here, if this gateway coordinates it again, starts it afresh and claims it anew. A
// write of a claim forgotten already (another write refused first) leaves the group as it is now.
func (g *Gateway) disowned(ctx context.Context, group, token string) {
	if !g.claims.forget(group, token) {
		return // claimed anew since, and the group started afresh then
	}
	g.log.Warn().Str("group", group).Msg("group's offsets claimed by another gateway: write refused, group unloaded")
	g.coord.Unload(ctx, func(name string) bool { return name != group })
}

// isDisowned reports whether err is a write refused for another gateway's claim (disowned).
func isDisowned(err error) bool { return errors.Is(err, redisstore.ErrNotOwner) }

// clientHost is the host part of a remote address, as Kafka reports it ("/127.0.0.1").
func clientHost(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	return "/" + host
}
