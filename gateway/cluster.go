package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/kgate/kgate/redisstore"
)

// Gateway membership: each gateway registers itself in Redis and refreshes a heartbeat; every gateway
// reads the registrations on the same interval and considers a gateway down when its heartbeat is older
// than the node timeout (by Redis's clock, so gateway clocks need not agree). The registered set only
// grows, which keeps group placement (FNV-1a over the full set) stable across restarts. A gateway
// coordinates groups only while its lease runs (leaseTerm from the sending of its last heartbeat that
// succeeded), which ends before any peer can consider it down and take its groups over.

func (g *Gateway) registration() redisstore.GatewayInfo {
	info := redisstore.GatewayInfo{
		NodeID: g.cfg.NodeID, Instance: g.instance, Advertised: g.AdvertisedAddr(), Started: g.started.UnixMilli(),
		ShardedAppends: g.hearsSharded.Load(),
	}
	if a := g.AdminAddr(); a != nil {
		info.Admin = advertisedAdmin(a.String(), g.advHost)
		if g.cfg.AdminAdvertised != "" {
			info.Admin = g.cfg.AdminAdvertised
		}
	}
	return info
}

// advertisedAdmin replaces an unspecified admin host with the advertised Kafka host.
func advertisedAdmin(bound, advHost string) string {
	host, port, err := net.SplitHostPort(bound)
	if err != nil {
		return bound
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = advHost
	}
	return net.JoinHostPort(host, port)
}

// leaseTerm is how long after sending a heartbeat that succeeds this gateway may coordinate groups.
// Redis stamps the heartbeat after it was sent, so peers consider this gateway alive until at least
// send time + node timeout; the lease ends a margin before that: one heartbeat interval, or half of
// what the node timeout leaves after an interval when that is less, so the lease still outlasts the
// wait for the next heartbeat.
func (g *Gateway) leaseTerm() time.Duration {
	nt, hb := g.cfg.NodeTimeout, g.cfg.HeartbeatInterval
	return nt - max(0, min(hb, (nt-hb)/2))
}

// register claims this gateway's node id at start-up.
//
// A gateway restarted right after a crash finds its predecessor's heartbeat still fresh: the id is
// only in use when that heartbeat is still being refreshed one node timeout later. A gateway joining
// running peers holds off coordinating until they have all refreshed their view and handed its groups
// back (two heartbeat intervals).
func (g *Gateway) register(ctx context.Context) error {
	g.started = time.Now()
	deadline := g.started.Add(g.cfg.NodeTimeout + g.cfg.HeartbeatInterval)
	for {
		sent := time.Now()
		err := g.store.RegisterGateway(ctx, g.registration(), g.cfg.NodeTimeout)
		if err == nil {
			g.nodes.renew(sent.Add(g.leaseTerm()), 2*g.cfg.HeartbeatInterval)
			break
		}
		if !errors.Is(err, redisstore.ErrNodeIDInUse) || time.Now().After(deadline) {
			return err
		}
		g.log.Warn().Int32("node_id", g.cfg.NodeID).Dur("node_timeout", g.cfg.NodeTimeout).
			Msg("node id in use by a fresh heartbeat: waiting one node timeout in case it was this gateway before a crash")
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (%w)", ctx.Err(), err)
		case <-time.After(g.cfg.HeartbeatInterval):
		}
	}
	g.nodes.holdOnJoin(2 * g.cfg.HeartbeatInterval)
	g.refreshMembership(ctx)
	return nil
}

// runMembership refreshes the heartbeat and the membership view until shutdown begins (quit), then
// marks this gateway down and returns. It does not wait for bgCtx, which ends only after the drain
// (up to shutdownGrace): meanwhile peers would still send clients to this closed listener and keep
// its groups from moving.
func (g *Gateway) runMembership(ctx context.Context) {
	t := time.NewTicker(g.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		// quit does not cancel a heartbeat in flight, which is waited for: cancelled, it could still
		// reach Redis after the deregistration and bring the registration back.
		select {
		case <-g.quit:
		case <-ctx.Done(): // bgCtx ends after quit, but with no connection to drain it may be seen first
		case <-t.C:
			g.heartbeat(ctx)
			// A registration read that hangs must not hold up the next heartbeat.
			rctx, cancel := context.WithTimeout(ctx, g.cfg.HeartbeatInterval)
			g.refreshMembership(rctx)
			cancel()
			keep := func(group string) bool { return !g.nodes.coordinatedElsewhere(group) }
			g.coord.Unload(ctx, keep)
			g.claims.prune(keep)
			continue
		}
		g.deregister()
		return
	}
}

var errViewStale = errors.New("gateway: the view of the gateway registry is stale; registration not renewed")

// deregister ends this gateway's lease, then marks its registration down (unless another process
// holds the node id now) so peers take over its groups at once. The lease ends first because peers
// may take the groups as soon as they read the registration. It runs on a context of its own: bgCtx
// may end meanwhile, once no connection is left.
func (g *Gateway) deregister() {
	g.nodes.resign()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := g.store.DeregisterGateway(ctx, g.registration()); err != nil {
		g.log.Warn().Err(err).Msg("could not mark this gateway down in Redis")
	}
}

// heartbeat refreshes this gateway's registration and, when Redis answers, its lease.
func (g *Gateway) heartbeat(ctx context.Context) {
	sent := time.Now()
	// An answer after the lease has ended comes too late to keep this gateway from being fenced, and
	// the loop must go on to hand its groups over; once fenced, it waits one interval.
	dl := g.nodes.leaseEnd()
	if !dl.After(sent) {
		dl = sent.Add(g.cfg.HeartbeatInterval)
	}
	var err error
	if g.nodes.stale(sent) {
		// Coordinating nothing (membership.choose), this gateway must not keep its peers sending
		// clients to it: unrenewed, its registration lets them take its groups over.
		err = errViewStale
	} else {
		hctx, cancel := context.WithDeadline(ctx, dl)
		err = g.store.RegisterGateway(hctx, g.registration(), g.cfg.NodeTimeout)
		cancel()
	}
	switch {
	case err == nil:
		g.nodes.renew(sent.Add(g.leaseTerm()), 2*g.cfg.HeartbeatInterval)
		if g.fenced.Swap(false) {
			g.log.Warn().Int32("node_id", g.cfg.NodeID).Msg("gateway registration restored: coordinating groups again")
		}
	case ctx.Err() != nil:
		return
	default:
		g.log.Error().Err(err).Int32("node_id", g.cfg.NodeID).Msg("gateway heartbeat failed")
	}
	// Peers may consider this gateway down once its lease has ended: coordinator decisions check the
	// lease themselves; here the view follows, and the membership loop's Unload, right after, hands
	// the groups in memory over.
	if !g.nodes.leased(time.Now()) {
		g.nodes.setSelfAlive(false)
		if !g.fenced.Swap(true) {
			g.log.Error().Int32("node_id", g.cfg.NodeID).Msg("gateway registration not refreshed in time: no longer coordinating groups")
		}
	}
}

// runTopologyRefresh has the Redis Cluster client reload its slot map every heartbeat interval, apart
// from the membership loop: that loop can wait on an unreachable master that holds the gateways key,
// and a replica promoted meanwhile must still be found within an interval (Store.RefreshTopology).
func (g *Gateway) runTopologyRefresh(ctx context.Context) {
	every(ctx, g.cfg.HeartbeatInterval, func() { g.store.RefreshTopology(ctx) })
}

// every runs fn each interval until ctx ends.
func every(ctx context.Context, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// refreshMembership rebuilds the view from Redis (plus static peers) and logs what changed.
func (g *Gateway) refreshMembership(ctx context.Context) {
	regs, now, err := g.store.Gateways(ctx)
	if err != nil {
		if ctx.Err() == nil {
			g.log.Warn().Err(err).Msg("cannot read gateway registrations; keeping the last view")
		}
		return
	}
	byID := map[int32]gatewayNode{}
	for _, p := range g.cfg.Peers {
		host, port, err := net.SplitHostPort(p.Addr)
		if err != nil {
			continue
		}
		pn, _ := strconv.Atoi(port)
		byID[p.ID] = gatewayNode{ID: p.ID, Host: host, Port: int32(pn), Alive: true}
	}
	for _, r := range regs {
		host, port, err := net.SplitHostPort(r.Advertised)
		if err != nil {
			continue
		}
		pn, _ := strconv.Atoi(port)
		byID[r.NodeID] = gatewayNode{ID: r.NodeID, Host: host, Port: int32(pn), Admin: r.Admin,
			Alive:   r.Heartbeat > 0 && now-r.Heartbeat < g.cfg.NodeTimeout.Milliseconds(),
			Sharded: r.ShardedAppends}
	}
	self := g.registration()
	byID[g.cfg.NodeID] = gatewayNode{ID: g.cfg.NodeID, Host: g.advHost, Port: g.advPort, Admin: self.Admin,
		Alive: g.nodes.leased(time.Now()), Sharded: self.ShardedAppends}
	nodes := make([]gatewayNode, 0, len(byID))
	// Append notices go over the sharded channels only when every other live gateway hears them: one
	// of an older version (or a static peer, whose version is unknown) hears the global channel only.
	sharded := g.store.ShardedAppends()
	for _, n := range byID {
		nodes = append(nodes, n)
		if n.Alive && n.ID != g.cfg.NodeID && !n.Sharded {
			sharded = false
		}
	}
	if g.sharded.Swap(sharded) != sharded {
		g.log.Info().Bool("sharded", sharded).Msg("append notices: sharded pub/sub in use (false: global PUBLISH)")
	}
	old := map[int32]bool{}
	for _, n := range g.nodes.all() {
		old[n.ID] = n.Alive
	}
	g.nodes.set(nodes)
	for _, n := range g.nodes.all() {
		was, known := old[n.ID]
		switch {
		case !known || (!was && n.Alive):
			if n.Alive && n.ID != g.cfg.NodeID {
				g.log.Info().Int32("node_id", n.ID).Str("advertised", n.addr()).Msg("gateway joined")
			}
		case was && !n.Alive:
			g.log.Warn().Int32("node_id", n.ID).Str("advertised", n.addr()).Msg("gateway down: its groups move to the next live gateway")
		}
	}
	g.multi.Store(len(g.nodes.alive()) > 1)
}

// publishAppend tells other gateways that a partition grew, so their long-polling fetches wake up.
// With one live gateway there is no one to tell. The send never blocks the produce path: when the
// publisher is behind (its queue full), the partition is marked and published with its next batch.
func (g *Gateway) publishAppend(topic string, partition int32) {
	if !g.multi.Load() {
		return
	}
	m := redisstore.AppendMessage(topic, partition)
	select {
	case g.appends <- m:
		return
	default:
	}
	g.markUnsent(m)
	g.wakePublisher() // should it have emptied its queue meanwhile
}

// markUnsent keeps append notifications for the publisher's next batch.
func (g *Gateway) markUnsent(ms ...string) {
	g.unsentMu.Lock()
	for _, m := range ms {
		g.unsent[m] = struct{}{}
	}
	g.unsentMu.Unlock()
}

// runAppendPublisher batches append notifications into PUBLISH messages.
func (g *Gateway) runAppendPublisher(ctx context.Context) {
	// batch is what this pass took from the queue and has not yet published or marked unsent. A panic
	// before then puts it back (unsent) with a wake-up, which the loop, restarted by goBackground,
	// publishes: lost, the wake-ups left other gateways' long-polls on those partitions to wait out
	// their max_wait for records already stored.
	var batch map[string]struct{}
	defer func() {
		if batch != nil { // only while a pass is under way, so only on a panic
			for m := range batch {
				if m != "" {
					g.markUnsent(m)
				}
			}
			g.wakePublisher()
		}
	}()
	for {
		batch = nil
		var first string
		select {
		case <-ctx.Done():
			return
		case first = <-g.appends:
		}
		batch = map[string]struct{}{first: {}}
	drain:
		for len(batch) < 1024 {
			select {
			case m := <-g.appends:
				batch[m] = struct{}{}
			default:
				break drain
			}
		}
		g.takeUnsent(batch)
		delete(batch, "") // a wake-up only
		if len(batch) == 0 {
			continue
		}
		parts := make([]string, 0, len(batch))
		for m := range batch {
			parts = append(parts, m)
		}
		var err error
		if g.sharded.Load() {
			err = g.store.PublishShardedAppends(ctx, g.cfg.NodeID, parts)
			if err != nil && ctx.Err() == nil {
				// Every gateway hears the global channel too: a sharded channel whose master fails (or
				// is out of this gateway's reach) must not hold the notices back until it is back.
				g.log.Debug().Err(err).Msg("sharded publish of append notices failed; publishing on the global channel")
				err = g.store.PublishAppends(ctx, parts)
			}
		} else {
			err = g.store.PublishAppends(ctx, parts)
		}
		batch = nil
		if err != nil && ctx.Err() == nil {
			g.log.Debug().Err(err).Msg("publish appends")
			// Published with the next batch instead (the store's client does not resend), or after
			// publishRetry when no append comes meanwhile: remote long-polls would wait out their
			// max_wait for records already stored.
			g.markUnsent(parts...)
			select {
			case <-ctx.Done():
				return
			case <-time.After(publishRetry):
			}
			g.wakePublisher()
		}
	}
}

// takeUnsent moves the notifications marked unsent into batch.
func (g *Gateway) takeUnsent(batch map[string]struct{}) {
	g.unsentMu.Lock()
	defer g.unsentMu.Unlock()
	for m := range g.unsent {
		batch[m] = struct{}{}
	}
	clear(g.unsent)
}

// wakePublisher queues a wake-up for the publisher, which then publishes what is marked unsent; when
// its queue is full it comes round anyway.
func (g *Gateway) wakePublisher() {
	select {
	case g.appends <- "":
	default:
	}
}

// publishRetry is how long after a failed PUBLISH the append notifications it carried are sent again.
const publishRetry = 250 * time.Millisecond

// runShardedAppendSubscriber is runAppendSubscriber for the sharded channels (Redis Cluster): while all
// of them are subscribed, this gateway's registration says so, and its peers publish there when every
// live gateway's does. While one of them is not (its master unreachable, a refused SSUBSCRIBE), the
// registration withdraws it and peers publish on the global channel, which stays subscribed: older
// gateways publish there too.
func (g *Gateway) runShardedAppendSubscriber(ctx context.Context) {
	defer g.hearsSharded.Store(false) // a panic ended the subscriptions too
	for ctx.Err() == nil {
		err := g.store.SubscribeShardedAppends(ctx, func(topic string, p int32) {
			g.notify.notify(partKey{topic, p})
		}, g.notify.notifyAll, g.setHearsSharded)
		g.hearsSharded.Store(false)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			g.log.Warn().Err(err).Msg("sharded append subscription failed; retrying")
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// setHearsSharded records whether every sharded append channel is subscribed; the next heartbeat
// advertises it.
func (g *Gateway) setHearsSharded(all bool, err error) {
	g.hearsSharded.Store(all)
	if all {
		g.log.Info().Msg("append notices: every sharded channel subscribed; peers may publish there")
		return
	}
	g.log.Warn().Err(err).Msg("append notices: a sharded channel is not subscribed; peers are asked to publish on the global channel until it is")
}

// runAppendSubscriber wakes local fetches on other gateways' appends, resubscribing after failures.
func (g *Gateway) runAppendSubscriber(ctx context.Context) {
	for ctx.Err() == nil {
		err := g.store.SubscribeAppends(ctx, func(topic string, p int32) {
			g.notify.notify(partKey{topic, p})
		}, g.notify.notifyAll) // wake-ups published before the subscription was made are lost
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			g.log.Warn().Err(err).Msg("append subscription lost; retrying")
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}
