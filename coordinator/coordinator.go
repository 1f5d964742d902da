package coordinator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Defaults applied by New to zero Config fields (Apache's broker defaults where one exists).
const (
	DefaultInitialRebalanceDelay = 3 * time.Second  // group.initial.rebalance.delay.ms
	DefaultMinSessionTimeout     = 6 * time.Second  // group.min.session.timeout.ms
	DefaultMaxSessionTimeout     = 30 * time.Minute // group.max.session.timeout.ms
	DefaultEmptyGroupRetention   = 10 * time.Minute // offsets.retention.check.interval.ms
)

// Group states, spelled as Kafka reports them.
const (
	StateEmpty               = "Empty"
	StatePreparingRebalance  = "PreparingRebalance"
	StateCompletingRebalance = "CompletingRebalance"
	StateStable              = "Stable"
	StateDead                = "Dead"
)

// newMemberJoinTimeout bounds how long a brand-new member may sit in the join
// phase without being answered (Apache's GroupCoordinator.NewMemberJoinTimeoutMs).
const newMemberJoinTimeout = 5 * time.Minute

// Config is the coordinator's configuration. New fills zero fields with defaults.
type Config struct {
	// InitialRebalanceDelay is group.initial.rebalance.delay.ms: how long a
	// rebalance of an Empty group (at any generation) waits for more members
	// (extended by this much while new members keep coming, up to the rebalance
	// timeout), as Apache 4.x's coordinator does. Zero means
	// DefaultInitialRebalanceDelay; negative means no delay.
	InitialRebalanceDelay time.Duration
	// MinSessionTimeout and MaxSessionTimeout bound a JoinGroup's session timeout
	// (outside: INVALID_SESSION_TIMEOUT). Zero means the default.
	MinSessionTimeout, MaxSessionTimeout time.Duration
	// EmptyGroupRetention is how long an Empty group without pending members stays
	// in memory. Zero means DefaultEmptyGroupRetention; negative means forever.
	EmptyGroupRetention time.Duration
	// Logger receives the coordinator's logs; the zero Logger discards them.
	Logger zerolog.Logger
	// OnRebalance, if set, is called with the group id each time a group enters
	// PreparingRebalance. It runs on the group's goroutine: it must not block and
	// must not call back into the Coordinator.
	OnRebalance func(group string)
	// OnPanic, if set, is called with the group id when the group's goroutine panicked and the group
	// was dropped (the panic is logged). It runs on that goroutine and must not block.
	OnPanic func(group string)
}

func (cfg *Config) setDefaults() {
	switch {
	case cfg.InitialRebalanceDelay == 0:
		cfg.InitialRebalanceDelay = DefaultInitialRebalanceDelay
	case cfg.InitialRebalanceDelay < 0:
		cfg.InitialRebalanceDelay = 0
	}
	if cfg.MinSessionTimeout == 0 {
		cfg.MinSessionTimeout = DefaultMinSessionTimeout
	}
	if cfg.MaxSessionTimeout == 0 {
		cfg.MaxSessionTimeout = DefaultMaxSessionTimeout
	}
	if cfg.EmptyGroupRetention == 0 {
		cfg.EmptyGroupRetention = DefaultEmptyGroupRetention
	}
}

// Coordinator holds the groups this gateway coordinates. Its methods are safe
// for concurrent use.
type Coordinator struct {
	cfg Config
	log zerolog.Logger

	mu     sync.Mutex // guards groups and closed, nothing else
	groups map[string]*group
	closed bool

	wg sync.WaitGroup // one per running group goroutine
}

var (
	errClosed       = errors.New("coordinator: closed")
	errUnknownGroup = errors.New("coordinator: unknown group")
)

// New returns a Coordinator; it starts no goroutine until a group is created.
func New(cfg Config) *Coordinator {
	cfg.setDefaults()
	c := &Coordinator{
		cfg:    cfg,
		log:    cfg.Logger.With().Str("component", "coordinator").Logger(),
		groups: make(map[string]*group),
	}
	if cfg.MinSessionTimeout > cfg.MaxSessionTimeout {
		c.log.Warn().Dur("min_session_timeout", cfg.MinSessionTimeout).
			Dur("max_session_timeout", cfg.MaxSessionTimeout).
			Msg("min session timeout above max: every JoinGroup will fail with INVALID_SESSION_TIMEOUT")
	}
	return c
}

// Config is the configuration in effect, defaults filled in.
func (c *Coordinator) Config() Config { return c.cfg }

// Close stops every group, answers their parked JoinGroup/SyncGroup requests
// with NOT_COORDINATOR and waits for the group goroutines to exit. Later calls
// get COORDINATOR_NOT_AVAILABLE. Close is idempotent.
func (c *Coordinator) Close() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		for _, g := range c.groups {
			close(g.quit)
		}
	}
	c.mu.Unlock()
	c.wg.Wait()
}

// lookup returns the named group, creating it (and its goroutine) if create is set.
func (c *Coordinator) lookup(name string, create bool) (*group, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errClosed
	}
	g := c.groups[name]
	if g == nil {
		if !create {
			return nil, errUnknownGroup
		}
		g = newGroup(c, strings.Clone(name))
		c.groups[g.name] = g
		c.wg.Add(1)
		go g.manage()
	}
	return g, nil
}

// forget removes g from the map if it is still the group registered under its name.
func (c *Coordinator) forget(g *group) {
	c.mu.Lock()
	if c.groups[g.name] == g {
		delete(c.groups, g.name)
	}
	c.mu.Unlock()
}

// snapshot returns the current groups sorted by name.
func (c *Coordinator) snapshot() []*group {
	c.mu.Lock()
	gs := make([]*group, 0, len(c.groups))
	for _, g := range c.groups {
		gs = append(gs, g)
	}
	c.mu.Unlock()
	sort.Slice(gs, func(i, j int) bool { return gs[i].name < gs[j].name })
	return gs
}

// send runs fn on the named group's goroutine. A group that removed itself
// (deleted or expired) between lookup and send is looked up again.
func (c *Coordinator) send(ctx context.Context, name string, create bool, fn func(*group)) (*group, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		g, err := c.lookup(name, create)
		if err != nil {
			return nil, err
		}
		select {
		case g.in <- func() { fn(g) }:
			return g, nil
		case <-g.done:
			// Removed from the map before done closed: the next lookup sees that.
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// call sends fn, which must write exactly one value to its reply channel, and
// waits for that value.
func call[T any](ctx context.Context, c *Coordinator, name string, create bool, fn func(*group, chan<- T)) (T, error) {
	reply := make(chan T, 1)
	g, err := c.send(ctx, name, create, func(g *group) { fn(g, reply) })
	if err != nil {
		var zero T
		return zero, err
	}
	r, ok := await(ctx, g, reply)
	if !ok {
		var zero T
		if ctx.Err() != nil {
			return zero, ctx.Err()
		}
		return zero, errClosed
	}
	return r, nil
}

// await waits for a reply, the end of ctx, or the group's exit. A reply that is
// ready wins over the other two.
func await[T any](ctx context.Context, g *group, reply <-chan T) (T, bool) {
	select {
	case r := <-reply:
		return r, true
	case <-ctx.Done():
	case <-g.done:
	}
	select {
	case r := <-reply:
		return r, true
	default:
		var zero T
		return zero, false
	}
}

// errCode maps a send/call error to the Kafka code answered instead; ctxCode is
// what the API answers when its context ends.
func errCode(err error, ctxCode int16) int16 {
	switch {
	case errors.Is(err, errUnknownGroup):
		return kerr.UnknownMemberID.Code
	case errors.Is(err, errClosed):
		return kerr.CoordinatorNotAvailable.Code
	default:
		return ctxCode
	}
}

// newMemberID returns prefix-<random UUID v4>, as Apache's GroupMetadata.generateMemberId.
func newMemberID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return prefix + "-" + string(s[:])
}

func millis(ms int32) time.Duration { return time.Duration(ms) * time.Millisecond }

func cloneStringPtr(s *string) *string {
	if s == nil {
		return nil
	}
	c := strings.Clone(*s)
	return &c
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
