package gateway

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/kgate/kgate/redisstore"
)

// topicCacheTTL is how long a view of the registry is used without reloading it: about how long a
// gateway may act on a registry another gateway has changed, while Redis answers within staleWait
// (longer when it does not: see maxStaleView).
const topicCacheTTL = time.Second

// missReloadGap is how long after a reload a name or ID the registry did not hold is answered as
// unknown without asking Redis again: a request naming thousands of unknown topics reloads the
// registry once, not once per name. A topic created through another gateway that recently is
// unknown here for that long, as on a Kafka broker whose metadata has not caught up yet (clients
// retry); one created through this gateway is known at once (invalidate).
const missReloadGap = 100 * time.Millisecond

// A gateway that cannot reload the registry (Redis away, or on a cluster the master holding it failing
// over) goes on serving the topics it last read, as a Kafka broker serves from its cached metadata
// while the controller is away: the registry is one hash on one master, and without this a failover of
// that master stopped produce and fetch on every master's partitions. A lookup of a topic in a view
// past its TTL reloads in the background and waits for that at most staleWait (a healthy Redis answers
// in about a millisecond), then goes on with the view; after a failed reload the view is served for
// staleRetry before another is tried. A view is served that way for at most maxStaleView after it was
// read. Operations on a partition still check it in Redis (a deleted topic's partitions are refused
// there).
const (
	maxStaleView = 5 * time.Minute
	staleWait    = 50 * time.Millisecond
	staleRetry   = time.Second
)

// topicCache keeps the Redis topic registry in memory for the data path; a miss or an expired view
// reloads the whole registry (one HGETALL), one reload serving every lookup that began before it.
type topicCache struct {
	store  *redisstore.Store
	mu     sync.Mutex
	byName map[string]redisstore.Topic
	byID   map[[16]byte]string
	dots   dotCollisions // byName's names by their '.'/'_' form (collides)
	loaded time.Time     // when the reload that read the view began
	// readAt is when that reload ended: misses within missReloadGap of it do not reload again (from its
	// beginning, a reload slower than the gap left every miss after it reloading again).
	readAt  time.Time
	load    sync.Mutex // one reload at a time
	reloads int        // under load: registry reads so far
	// tried is when the last reload began, and failed its error (failedAt when it ended): lookups
	// waiting for a reload while Redis is away share its failure instead of each waiting out a command
	// timeout in turn, and so do those that come within missReloadGap after it (a request's lookups of
	// its topics, one after the other).
	tried    time.Time
	failed   error
	failedAt time.Time
	// pending is the background reload of a view past its TTL (backgroundReload), which bg waits for
	// at shutdown; it runs on ctx.
	pending *pendingReload
	bg      sync.WaitGroup
	ctx     context.Context
	log     zerolog.Logger // the zero Logger (tests) discards
	// invalidated is when invalidate last ran: a reload that began before it read a view without
	// the change that called it, and does not count as fresh.
	invalidated time.Time
}

func newTopicCache(s *redisstore.Store, log zerolog.Logger) *topicCache {
	return &topicCache{store: s, ctx: context.Background(), log: log}
}

// pendingReload is a background reload; err is set before done is closed. Lookups wait for it until
// patience (staleWait after it began), not each for staleWait: while Redis does not answer, only the
// lookups of its first moments wait.
type pendingReload struct {
	done     chan struct{}
	err      error
	patience time.Time
}

// fresh reports whether the view read is young enough at now; c.mu is held.
func (c *topicCache) fresh(now time.Time) bool {
	return c.byName != nil && now.Sub(c.loaded) < topicCacheTTL
}

// refreshSince reloads the registry unless a reload that began at or after since has already done so,
// or failed (one that began earlier may have missed what the caller looks for).
func (c *topicCache) refreshSince(ctx context.Context, since time.Time) error {
	c.load.Lock()
	defer c.load.Unlock()
	c.mu.Lock()
	done := !since.IsZero() && !c.tried.IsZero() && !c.tried.Before(since)
	failed := c.failed
	if failed != nil && time.Since(c.failedAt) < missReloadGap {
		done = true
	}
	c.mu.Unlock()
	if done {
		return failed
	}
	began := time.Now()
	c.reloads++
	all, err := c.store.Topics(ctx)
	if err != nil && ctx.Err() != nil {
		// The caller's own context ended (its client went away, its request's timeout): not Redis's
		// failure, and not to be shared with other lookups.
		return err
	}
	c.mu.Lock()
	c.tried, c.failed, c.failedAt = began, err, time.Now()
	c.mu.Unlock()
	if err != nil {
		return err
	}
	byID := make(map[[16]byte]string, len(all))
	for n, t := range all {
		byID[t.ID] = n
	}
	dots := newDotCollisions(all)
	c.mu.Lock()
	old := c.byName
	c.byName, c.byID, c.dots, c.loaded, c.readAt = all, byID, dots, began, time.Now()
	if began.Before(c.invalidated) {
		c.loaded, c.readAt = time.Time{}, time.Time{}
	}
	c.mu.Unlock()
	for name, t := range old {
		now, ok := all[name]
		if !ok || now.ID != t.ID {
			forgetSizing(name) // deleted, or created again, through any gateway
			c.store.ForgetReadBounds(name)
		}
		if !ok {
			forgetTopicMetrics(name) // deleted through another gateway too: its series go
		}
	}
	return nil
}

// get returns a topic, reloading on a miss or when stale.
func (c *topicCache) get(ctx context.Context, name string) (redisstore.Topic, error) {
	return c.lookup(ctx, func() (redisstore.Topic, bool) {
		t, ok := c.byName[name]
		return t, ok
	})
}

// byTopicID resolves a topic ID (Fetch v13, DeleteTopics v6).
func (c *topicCache) byTopicID(ctx context.Context, id [16]byte) (redisstore.Topic, error) {
	return c.lookup(ctx, func() (redisstore.Topic, bool) {
		name, ok := c.byID[id]
		return c.byName[name], ok
	})
}

// servable reports whether the view may be served while it cannot be reloaded, at now; c.mu is held.
// An invalidated view (loaded zero) is known to be wrong, and is not.
func (c *topicCache) servable(now time.Time) bool {
	return c.byName != nil && !c.loaded.IsZero() && now.Sub(c.loaded) < maxStaleView
}

// backgroundReload joins the background reload in flight or starts one, unless a reload failed within
// staleRetry (nil then); c.mu is held.
func (c *topicCache) backgroundReload(now time.Time) *pendingReload {
	if c.pending != nil {
		return c.pending
	}
	if c.failed != nil && now.Sub(c.failedAt) < staleRetry {
		return nil
	}
	r := &pendingReload{done: make(chan struct{}), patience: now.Add(staleWait)}
	c.pending = r
	c.bg.Go(func() {
		defer func() {
			// A panic (a registry entry the parsing trips on) fails this reload as an unreachable Redis
			// would (IsUnavailable), rather than the process: the lookups waiting for it go on with the
			// view, and the next reload waits staleRetry.
			p := recover()
			if p != nil {
				r.err = fmt.Errorf("%w: %v", errPanic, p)
				notePanic(c.log, "topic_reload", p, debug.Stack(), "panic reloading the topic registry")
			}
			c.mu.Lock()
			if p != nil {
				c.failed, c.failedAt = r.err, time.Now()
			}
			c.pending = nil
			c.mu.Unlock()
			close(r.done)
		}()
		r.err = c.refreshSince(c.ctx, now)
	})
	return r
}

// wait returns once the background reloads have ended (their context is cancelled first).
func (c *topicCache) wait() { c.bg.Wait() }

// reloadOrStale reloads the registry (refreshSince); when that fails with Redis unreachable and the view
// is servable, the caller goes on with the view.
func (c *topicCache) reloadOrStale(ctx context.Context, since time.Time) error {
	err := c.refreshSince(ctx, since)
	if err == nil || ctx.Err() != nil || !redisstore.IsUnavailable(err) {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.servable(since) {
		return nil
	}
	return err
}

// lookup runs find (under the lock) on the cached registry, and again after a reload when the cache
// missed or is stale.
func (c *topicCache) lookup(ctx context.Context, find func() (redisstore.Topic, bool)) (redisstore.Topic, error) {
	asked := time.Now()
	c.mu.Lock()
	t, ok := find()
	fresh := c.fresh(asked)
	missedLately := c.byName != nil && !c.readAt.IsZero() && asked.Sub(c.readAt) < missReloadGap
	var reload *pendingReload
	servable := ok && !fresh && c.servable(asked)
	if servable {
		reload = c.backgroundReload(asked)
	}
	c.mu.Unlock()
	switch {
	case ok && fresh:
		return t, nil
	case servable:
		if reload == nil {
			return t, nil // reloads fail lately
		}
		timer := time.NewTimer(time.Until(reload.patience))
		defer timer.Stop()
		select {
		case <-reload.done:
		case <-timer.C:
			return t, nil // Redis is slow to answer: the view meanwhile
		case <-ctx.Done():
			return redisstore.Topic{}, ctx.Err()
		}
		if err := reload.err; err != nil {
			if redisstore.IsUnavailable(err) {
				return t, nil
			}
			return redisstore.Topic{}, err
		}
	case !ok && missedLately:
		return redisstore.Topic{}, redisstore.ErrUnknownTopic
	default:
		if err := c.refreshSince(ctx, asked); err != nil {
			return redisstore.Topic{}, err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := find(); ok {
		return t, nil
	}
	return redisstore.Topic{}, redisstore.ErrUnknownTopic
}

// collides reports whether name, which the cache does not hold, collides on '.'/'_' with a topic it
// holds. It reads the cached view, reloaded only when stale or invalidated: Metadata asks it for each
// unknown name, which clients retry every backoff, and a full reload each time would defeat
// missReloadGap. Like get, it can miss a topic another gateway created since the view was read.
func (c *topicCache) collides(ctx context.Context, name string) (bool, error) {
	asked := time.Now()
	c.mu.Lock()
	fresh := c.fresh(asked)
	c.mu.Unlock()
	if !fresh {
		if err := c.reloadOrStale(ctx, asked); err != nil {
			return false, err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, collides := c.dots.collides(name)
	return collides, nil
}

// all returns a copy of the registry as read by a reload that began after the call (one shared by
// every caller that came meanwhile: many clients asking for all topics at once read it once), or the
// last view read while reloads fail with Redis unreachable (maxStaleView).
func (c *topicCache) all(ctx context.Context) (map[string]redisstore.Topic, error) {
	out, _, err := c.allWithCollisions(ctx)
	return out, err
}

// allWithCollisions is all with its names by their '.'/'_' form (built by the reload; never changed
// after, so shared).
func (c *topicCache) allWithCollisions(ctx context.Context) (map[string]redisstore.Topic, dotCollisions, error) {
	if err := c.reloadOrStale(ctx, time.Now()); err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]redisstore.Topic, len(c.byName))
	for k, v := range c.byName {
		out[k] = v
	}
	return out, c.dots, nil
}

// invalidateStale forces the next lookup to reload unless the view is younger than missReloadGap: a
// topic half deleted (its partitions gone, its registry entry not) would otherwise have every failing
// read reload the whole registry.
func (c *topicCache) invalidateStale() {
	c.mu.Lock()
	if time.Since(c.loaded) >= missReloadGap {
		c.loaded, c.readAt = time.Time{}, time.Time{}
	}
	c.mu.Unlock()
}

// invalidate forces the next lookup to reload (after a create/delete through this gateway), and a
// reload already running to count as stale.
func (c *topicCache) invalidate() {
	c.mu.Lock()
	c.loaded, c.readAt, c.invalidated = time.Time{}, time.Time{}, time.Now()
	c.mu.Unlock()
}

// changed is invalidate after a create, delete or growth through this gateway that ended with err.
// One that failed with Redis unreachable may or may not have changed the registry: the next lookup
// reloads, but the view stays servable while reloads fail (a timed-out admin request must not stop
// produce and fetch on every topic while the registry's master is away).
func (c *topicCache) changed(err error) {
	if err == nil || !redisstore.IsUnavailable(err) {
		c.invalidate()
		return
	}
	c.mu.Lock()
	if expired := time.Now().Add(-topicCacheTTL); !c.loaded.IsZero() && c.loaded.After(expired) {
		c.loaded = expired
	}
	c.mu.Unlock()
}
