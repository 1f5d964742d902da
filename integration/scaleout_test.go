package integration

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/internal/redistest"
	"github.com/kgate/kgate/redisstore"
)

// Issue 5, proved with real kgate processes: three gateways on one Redis Cluster share membership,
// leadership and group coordination; kill -9 of the coordinator gateway and of a Redis master.

// soNamespace is a fresh Redis namespace for one test.
func soNamespace(t *testing.T) string {
	return fmt.Sprintf("so%d-%s", nsSeq.Add(1), sanitize(t.Name()))
}

// soClient is a franz-go client seeded with addrs, closed at cleanup.
func soClient(t *testing.T, addrs []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	base := []kgo.Opt{kgo.SeedBrokers(addrs...), kgo.RetryTimeout(30 * time.Second),
		kgo.RequestTimeoutOverhead(5 * time.Second)}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		t.Fatalf("kgo client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// soCreateTopic creates topic with n partitions through adm.
func soCreateTopic(t *testing.T, ctx context.Context, adm *kadm.Client, topic string, n int32) {
	t.Helper()
	resp, err := adm.CreateTopics(ctx, n, 1, nil, topic)
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	if r := resp[topic]; r.Err != nil {
		t.Fatalf("create topic %s: %v (%s)", topic, r.Err, r.ErrMessage)
	}
}

// fnvNode is the node a group hashes to over n registered gateways (ids 0..n-1).
func fnvNode(group string, n int) int32 {
	h := fnv.New32a()
	h.Write([]byte(group))
	return int32(h.Sum32() % uint32(n))
}

// TestScaleOutMembership: three gateway processes on the shared Redis Cluster agree on the brokers and
// on partition leadership, each admin API sees all three alive, and a fourth process claiming a live
// node id refuses to start.
func TestScaleOutMembership(t *testing.T) {
	t.Parallel()
	ns := soNamespace(t)
	base := procConfig{redis: cluster.Addrs(), cluster: true, namespace: ns}
	ps := startKgates(t, base, 0, 1, 2)
	took := waitAllSeeAlive(t, 10*time.Second, []int32{0, 1, 2}, ps...)
	t.Logf("3 gateways see each other alive %v after serving", took.Round(time.Millisecond))

	ctx := testCtx(t, 40*time.Second)
	const topic = "spread"
	soCreateTopic(t, ctx, kadm.NewClient(soClient(t, procAddrs(ps...))), topic, 12)

	// Ask each gateway itself (its seed broker), not whichever broker the client picks.
	var first map[int32]int32
	for _, p := range ps {
		cl := soClient(t, []string{p.Kafka})
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl.SeedBrokers()[0])
		if err != nil {
			t.Fatalf("metadata from node %d: %v", p.ID, err)
		}
		brokers := map[int32]string{}
		for _, b := range resp.Brokers {
			brokers[b.NodeID] = fmt.Sprintf("%s:%d", b.Host, b.Port)
		}
		for _, q := range ps {
			if brokers[q.ID] != q.Kafka {
				t.Errorf("node %d lists brokers %v; want node %d at %s", p.ID, brokers, q.ID, q.Kafka)
			}
		}
		if len(brokers) != 3 {
			t.Errorf("node %d lists %d brokers, want 3: %v", p.ID, len(brokers), brokers)
		}
		if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 || len(resp.Topics[0].Partitions) != 12 {
			t.Fatalf("node %d: metadata for %s: %+v", p.ID, topic, resp.Topics)
		}
		leaders := map[int32]int32{}
		perNode := map[int32]int{}
		for _, mp := range resp.Topics[0].Partitions {
			leaders[mp.Partition] = mp.Leader
			perNode[mp.Leader]++
		}
		if len(perNode) != 3 {
			t.Errorf("node %d: leaders of %s not spread over all 3 gateways: %v", p.ID, topic, perNode)
		}
		if first == nil {
			first = leaders
			t.Logf("partition leaders: %v (per node %v)", leaders, perNode)
		} else if fmt.Sprint(leaders) != fmt.Sprint(first) {
			t.Errorf("node %d reports leaders %v, node %d reported %v", p.ID, leaders, ps[0].ID, first)
		}
	}

	// A second process with a live node id is refused at start.
	dup := launchKgate(t, procConfig{nodeID: 1, redis: base.redis, cluster: true, namespace: ns})
	code, exited := dup.waitExit(20 * time.Second)
	switch {
	case !exited:
		t.Errorf("a second process with live node id 1 still runs after 20s:\n%s", dup.tail(10))
	case code == 0:
		t.Errorf("a second process with live node id 1 exited with status 0:\n%s", dup.tail(10))
	case !strings.Contains(dup.output(), `"message":"kgate stopped"`) || !strings.Contains(dup.output(), "node id in use"):
		t.Errorf("exit status %d, but the log does not say it stopped because the node id is in use:\n%s", code, dup.tail(10))
	default:
		t.Logf("duplicate node id refused: exit status %d", code)
	}
	// ... and leaves the live registration alone.
	waitAllSeeAlive(t, 5*time.Second, []int32{0, 1, 2}, ps...)
	for _, p := range ps {
		if !p.Running() {
			t.Errorf("gateway %d exited: %v", p.ID, p.waitErr)
		}
	}

	// A gateway restarted right after kill -9 finds its own heartbeat still fresh: it waits that out
	// instead of refusing its own id.
	victim := ps[2]
	victim.Kill()
	restart := time.Now()
	ps[2] = startKgate(t, procConfig{nodeID: victim.ID, redis: base.redis, cluster: true, namespace: ns,
		kafka: victim.Kafka, admin: strings.TrimPrefix(victim.AdminURL, "http://")})
	took = time.Since(restart)
	t.Logf("node %d restarted right after kill -9: serving %v later", victim.ID, took.Round(time.Millisecond))
	if bound := procNodeTimeout + 5*time.Second; took > bound {
		t.Errorf("restart took %v, want within the node timeout + margin (%v)", took, bound)
	}
	waitAllSeeAlive(t, 5*time.Second, []int32{0, 1, 2}, ps...)
}

// soLedger records what a producer had acknowledged and what consumers saw.
type soLedger struct {
	mu       sync.Mutex
	acked    map[int32]map[int64]string // partition -> offset -> value
	consumed map[int32]map[int64]string
	dupes    int // a record consumed more than once (allowed: at least once)
	mismatch []string
}

func newSoLedger() *soLedger {
	return &soLedger{acked: map[int32]map[int64]string{}, consumed: map[int32]map[int64]string{}}
}

func soPut(m map[int32]map[int64]string, p int32, off int64, v string) (old string, had bool) {
	if m[p] == nil {
		m[p] = map[int64]string{}
	}
	old, had = m[p][off]
	m[p][off] = v
	return old, had
}

func (l *soLedger) ack(r *kgo.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	soPut(l.acked, r.Partition, r.Offset, string(r.Value))
}

func (l *soLedger) consume(r *kgo.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	old, had := soPut(l.consumed, r.Partition, r.Offset, string(r.Value))
	if had {
		l.dupes++
		if old != string(r.Value) && len(l.mismatch) < 10 {
			l.mismatch = append(l.mismatch, fmt.Sprintf("p%d@%d read as %q and %q", r.Partition, r.Offset, old, r.Value))
		}
	}
}

// missing returns how many acknowledged records were not consumed (with up to 10 examples) and how
// many were acknowledged in all.
func (l *soLedger) missing() (n, total int, examples []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for p, offs := range l.acked {
		for off, v := range offs {
			total++
			got, ok := l.consumed[p][off]
			if ok && got == v {
				continue
			}
			n++
			if len(examples) < 10 {
				examples = append(examples, fmt.Sprintf("p%d@%d=%q (consumed %q, %t)", p, off, v, got, ok))
			}
		}
	}
	return n, total, examples
}

// soCommitted reads a group's committed offsets straight from Redis (no gateway involved).
func soCommitted(ctx context.Context, st *redisstore.Store, group string) (map[int32]int64, error) {
	cs, err := st.CommittedOffsets(ctx, group)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	for _, c := range cs {
		out[c.Partition] = c.Offset
	}
	return out, nil
}

// soAdvanced reports whether now has a partition committed beyond base.
func soAdvanced(base, now map[int32]int64) bool {
	for p, off := range now {
		if b, ok := base[p]; !ok || off > b {
			return true
		}
	}
	return false
}

// waitCommitAdvance polls Redis until a committed offset of group moves past base; it returns when.
func waitCommitAdvance(t *testing.T, st *redisstore.Store, group string, base map[int32]int64, d time.Duration, what string) time.Time {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		now, err := soCommitted(ctx, st, group)
		cancel()
		if err == nil && soAdvanced(base, now) {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no committed offset of %s advanced within %v (base %v, now %v, err %v)", what, group, d, base, now, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// soAdmin runs fn with a short-lived admin client seeded with seeds. A long-lived one would not do:
// franz-go keeps a group's coordinator cached for sharded admin requests (DescribeGroups, OffsetFetch)
// across dial failures, so after the coordinator gateway dies it would keep dialing the dead one.
func soAdmin(ctx context.Context, seeds []string, fn func(*kadm.Client) error) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RetryTimeout(3*time.Second), kgo.DialTimeout(time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	return fn(kadm.NewClient(cl))
}

// describeCoordinator returns the group's coordinator, state and member count as kadm describes it.
// A failed answer (COORDINATOR_NOT_AVAILABLE while a gateway's view of the gateway set settles after
// one joined, which clients retry) is asked again, for up to 10 s.
func describeCoordinator(ctx context.Context, seeds []string, group string) (coord int32, state string, members int, err error) {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		coord, state, members, err = describeCoordinatorOnce(ctx, seeds, group)
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return coord, state, members, err
		}
	}
}

func describeCoordinatorOnce(ctx context.Context, seeds []string, group string) (coord int32, state string, members int, err error) {
	coord = -1
	err = soAdmin(ctx, seeds, func(adm *kadm.Client) error {
		dg, err := adm.DescribeGroups(ctx, group)
		if err != nil {
			return err
		}
		d, ok := dg[group]
		if !ok {
			return errors.New("group missing from DescribeGroups")
		}
		if d.Err != nil {
			return d.Err
		}
		coord, state, members = d.Coordinator.NodeID, d.State, len(d.Members)
		return nil
	})
	return coord, state, members, err
}

// TestCoordinatorFailover: a 3-member franz-go group consumes while a producer writes through all three
// gateways; the coordinator gateway is killed with SIGKILL, the group moves to the next live gateway
// and resumes from its committed offsets; the gateway restarts under its node id and the group moves
// back. No committed offset goes backwards and every acknowledged record is consumed.
func TestCoordinatorFailover(t *testing.T) {
	t.Parallel()
	const (
		topic          = "orders"
		group          = "billing"
		sessionTimeout = 3 * time.Second
	)
	ns := soNamespace(t)
	base := procConfig{redis: cluster.Addrs(), cluster: true, namespace: ns}
	ps := startKgates(t, base, 0, 1, 2)
	waitAllSeeAlive(t, 10*time.Second, []int32{0, 1, 2}, ps...)
	seeds := procAddrs(ps...)

	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	st, err := redisstore.Open(sctx, redisstore.Options{Addrs: cluster.Addrs(), Cluster: true, Namespace: ns})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })

	ctx := testCtx(t, 80*time.Second)
	var seedsNow atomic.Pointer[[]string] // the live processes' addresses, for short-lived admin clients
	seedsNow.Store(&seeds)
	soCreateTopic(t, ctx, kadm.NewClient(soClient(t, seeds)), topic, 6)
	ledger := newSoLedger()

	// The producer: 10 numbered records every 10 ms, keyed so they spread over the partitions.
	prod := soClient(t, seeds, kgo.DefaultProduceTopic(topic))
	var produceErrs atomic.Int64
	pctx, pstop := context.WithCancel(ctx)
	defer pstop()
	var pwg sync.WaitGroup
	pwg.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; {
			select {
			case <-pctx.Done():
				return
			case <-tick.C:
			}
			for range 10 {
				v := strconv.Itoa(n)
				n++
				prod.Produce(pctx, &kgo.Record{Key: []byte(v), Value: []byte(v)}, func(r *kgo.Record, err error) {
					if err != nil {
						if pctx.Err() == nil {
							produceErrs.Add(1)
							t.Logf("produce %s: %v", r.Value, err)
						}
						return
					}
					ledger.ack(r)
				})
			}
		}
	})

	// The group: three members, manual commits after every poll.
	cctx, cstop := context.WithCancel(ctx)
	defer cstop()
	var cwg sync.WaitGroup
	var commitErrs atomic.Int64
	for i := range 3 {
		opts := []kgo.Opt{kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.SessionTimeout(sessionTimeout), kgo.HeartbeatInterval(300 * time.Millisecond),
			kgo.RebalanceTimeout(5 * time.Second), kgo.DisableAutoCommit(),
			kgo.FetchMaxWait(time.Second), kgo.ClientID(fmt.Sprintf("member-%d", i))}
		if l := soDebugLog(t, fmt.Sprintf("member-%d", i)); l != nil {
			opts = append(opts, kgo.WithLogger(l))
		}
		cl := soClient(t, seeds, opts...)
		cwg.Go(func() {
			defer cl.LeaveGroup()
			for cctx.Err() == nil {
				fs := cl.PollFetches(cctx)
				fs.EachRecord(ledger.consume)
				if cctx.Err() != nil {
					return
				}
				commitCtx, cancel := context.WithTimeout(cctx, 5*time.Second)
				if err := cl.CommitUncommittedOffsets(commitCtx); err != nil && cctx.Err() == nil {
					commitErrs.Add(1)
				}
				cancel()
			}
		})
	}
	t.Cleanup(func() { cstop(); cwg.Wait() }) // members stop before their clients close

	// The watcher: committed offsets as the gateways report them must never go backwards.
	var (
		wmu        sync.Mutex
		backwards  []string
		maxSeen    = map[int32]int64{}
		watchPolls int
	)
	wctx, wstop := context.WithCancel(ctx)
	defer wstop()
	var wwg sync.WaitGroup
	wwg.Go(func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		var wcl *kgo.Client // replaced after an error: see soAdmin
		defer func() {
			if wcl != nil {
				wcl.Close()
			}
		}()
		for {
			select {
			case <-wctx.Done():
				return
			case <-tick.C:
			}
			if wcl == nil {
				var err error
				if wcl, err = kgo.NewClient(kgo.SeedBrokers(*seedsNow.Load()...), kgo.RetryTimeout(time.Second),
					kgo.DialTimeout(time.Second)); err != nil {
					continue
				}
			}
			fctx, cancel := context.WithTimeout(wctx, 2*time.Second)
			resp, err := kadm.NewClient(wcl).FetchOffsets(fctx, group)
			cancel()
			if err != nil {
				wcl.Close()
				wcl = nil
				continue
			}
			wmu.Lock()
			watchPolls++
			resp.Each(func(o kadm.OffsetResponse) {
				if o.Err != nil || o.Topic != topic || o.At < 0 {
					return
				}
				if prev, ok := maxSeen[o.Partition]; ok && o.At < prev {
					backwards = append(backwards, fmt.Sprintf("p%d: %d after %d", o.Partition, o.At, prev))
				}
				maxSeen[o.Partition] = max(maxSeen[o.Partition], o.At)
			})
			wmu.Unlock()
		}
	})

	// Steady state: every partition has a commit, and commits keep coming.
	waitFor(t, 30*time.Second, "commits on all 6 partitions", func() bool {
		c, err := soCommitted(ctx, st, group)
		return err == nil && len(c) == 6
	})
	coord, state, members, err := describeCoordinator(ctx, *seedsNow.Load(), group)
	if err != nil {
		t.Fatalf("describe %s: %v", group, err)
	}
	want := fnvNode(group, 3)
	t.Logf("group %s: coordinator %d (FNV-1a %% 3 = %d), %s with %d members", group, coord, want, state, members)
	if coord != want {
		t.Fatalf("coordinator of %s is node %d, want FNV-1a(group) %% 3 = %d", group, coord, want)
	}

	// kill -9 the coordinator mid-consumption.
	victim := ps[coord]
	killAt := time.Now()
	victim.Kill()
	// Commits the dead process had already sent may still land in Redis for a moment: the baseline is
	// taken once they have.
	time.Sleep(300 * time.Millisecond)
	baseline, err := soCommitted(ctx, st, group)
	if err != nil {
		t.Fatalf("committed offsets after the kill: %v", err)
	}
	resumed := waitCommitAdvance(t, st, group, baseline, sessionTimeout+10*time.Second, "after killing the coordinator")
	recovery := resumed.Sub(killAt)
	t.Logf("coordinator failover: kill -9 of node %d -> first commit advance on the new coordinator in %v",
		victim.ID, recovery.Round(time.Millisecond))
	if bound := sessionTimeout + 5*time.Second; recovery > bound {
		t.Errorf("consumption resumed %v after the kill; want within the session timeout + margin (%v)", recovery, bound)
	}
	next := (coord + 1) % 3
	var last string
	defer func() {
		if t.Failed() {
			t.Logf("last describe: %s", last)
		}
	}()
	waitFor(t, sessionTimeout+15*time.Second, fmt.Sprintf("%s stable with 3 members on node %d", group, next), func() bool {
		c, state, members, err := describeCoordinator(ctx, *seedsNow.Load(), group)
		last = fmt.Sprintf("coordinator %d, %s with %d members, err %v", c, state, members, err)
		return err == nil && c == next && state == "Stable" && members == 3
	})
	t.Logf("all 3 members stable on node %d %v after the kill", next, time.Since(killAt).Round(time.Millisecond))
	for _, p := range ps {
		if p != victim && !p.Running() {
			t.Fatalf("surviving gateway %d exited: %v", p.ID, p.waitErr)
		}
	}

	// Restart it under the same node id: the views converge and the group moves back.
	restartAt := time.Now()
	back := startKgate(t, procConfig{nodeID: victim.ID, redis: base.redis, cluster: true, namespace: ns,
		kafka: victim.Kafka, admin: strings.TrimPrefix(victim.AdminURL, "http://")})
	ps[coord] = back
	seeds2 := procAddrs(ps...)
	seedsNow.Store(&seeds2)
	took := waitAllSeeAlive(t, 5*time.Second, []int32{0, 1, 2}, ps...)
	t.Logf("restart of node %d: every gateway sees 3 alive %v after it served (%v after exec)", back.ID,
		took.Round(time.Millisecond), time.Since(restartAt).Round(time.Millisecond))
	var movedBack time.Duration
	waitFor(t, 10*time.Second, fmt.Sprintf("%s back on node %d and stable with 3 members", group, back.ID), func() bool {
		c, state, members, err := describeCoordinator(ctx, *seedsNow.Load(), group)
		last = fmt.Sprintf("coordinator %d, %s with %d members, err %v", c, state, members, err)
		if err == nil && c == back.ID && state == "Stable" && members == 3 {
			movedBack = time.Since(restartAt)
			return true
		}
		return false
	})
	now, err := soCommitted(ctx, st, group)
	if err != nil {
		t.Fatalf("committed offsets: %v", err)
	}
	advanced := waitCommitAdvance(t, st, group, now, 10*time.Second, "after the group moved back")
	t.Logf("group moved back to node %d stable with 3 members %v after the restart; commits advancing %v later",
		back.ID, movedBack.Round(time.Millisecond), advanced.Sub(restartAt.Add(movedBack)).Round(time.Millisecond))

	// Stop producing, drain, and account for every acknowledged record.
	pstop()
	pwg.Wait()
	fctx, fcancel := context.WithTimeout(ctx, 20*time.Second)
	if err := prod.Flush(fctx); err != nil {
		t.Errorf("flush producer: %v", err)
	}
	fcancel()
	var missing, total int
	var examples []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		missing, total, examples = ledger.missing()
		if missing == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	cstop()
	cwg.Wait()
	wstop()
	wwg.Wait()

	ledger.mu.Lock()
	dupes, mismatch := ledger.dupes, ledger.mismatch
	ledger.mu.Unlock()
	t.Logf("%d records acknowledged, %d consumed more than once, %d produce errors, %d failed commits (expected during failover), %d watcher polls",
		total, dupes, produceErrs.Load(), commitErrs.Load(), watchPolls)
	if total == 0 {
		t.Fatal("nothing was produced")
	}
	if n := produceErrs.Load(); n > 0 {
		t.Errorf("the producer gave up on %d records: the gateways' errors must be retriable", n)
	}
	if missing > 0 {
		t.Errorf("%d of %d acknowledged records were never consumed, e.g. %v", missing, total, examples)
	}
	if len(mismatch) > 0 {
		t.Errorf("an offset read back with two different values: %v", mismatch)
	}
	if len(backwards) > 0 {
		t.Errorf("committed offsets went backwards: %v", backwards)
	}
	for _, p := range ps {
		if !p.Running() {
			t.Errorf("gateway %d exited: %v", p.ID, p.waitErr)
		}
	}
}

// soKgoLog counts the produce errors franz-go retried, from its debug summary of each produce
// response ("retrying@<offset>,<records>(<error>)" per partition).
type soKgoLog struct {
	mu      sync.Mutex
	retried map[string]int // error -> partition batches retried
	debug   kgo.Logger     // nil, or everything franz-go logs (see soDebugLog)
}

func (l *soKgoLog) Level() kgo.LogLevel { return kgo.LogLevelDebug }

// count returns how many batches were retried after an error whose text starts with prefix.
func (l *soKgoLog) count(prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for e, c := range l.retried {
		if strings.HasPrefix(e, prefix) {
			n += c
		}
	}
	return n
}

func (l *soKgoLog) Log(lvl kgo.LogLevel, msg string, kv ...any) {
	if l.debug != nil {
		l.debug.Log(lvl, msg, kv...)
	}
	if msg != "produced" {
		return
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] != "to" {
			continue
		}
		s, _ := kv[i+1].(string)
		for {
			_, rest, ok := strings.Cut(s, "retrying@")
			if !ok {
				break
			}
			_, rest, _ = strings.Cut(rest, "(")
			errText, rest, _ := strings.Cut(rest, ")")
			l.mu.Lock()
			if l.retried == nil {
				l.retried = map[string]int{}
			}
			l.retried[errText]++
			l.mu.Unlock()
			s = rest
		}
	}
}

// foRun is one gateway of TestRedisMasterFailover with the producer writing through it.
type foRun struct {
	name string
	proc *kgateProc
	cl   *kgo.Client
	klog *soKgoLog

	mu         sync.Mutex
	acked      map[int32]map[int64]string
	ackedAt    map[int32]map[int64]time.Time
	killAt     time.Time // zero until the master is killed
	firstAfter time.Time // first ack on the victim's partition of a record produced after the kill
	errs       []string  // errors the client gave up on (non-retriable)
	dataLoss   atomic.Int64
	victimAcks int
}

// produce writes one numbered record per partition every 10 ms until ctx is done.
func (r *foRun) produce(ctx context.Context, topic string, parts int32, victimPart int32) {
	seq := make([]int, parts)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for p := range parts {
			v := fmt.Sprintf("%d-%d", p, seq[p])
			seq[p]++
			enq := time.Now()
			r.cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte(v)}, func(rec *kgo.Record, err error) {
				at := time.Now()
				r.mu.Lock()
				defer r.mu.Unlock()
				if err != nil {
					if ctx.Err() == nil && len(r.errs) < 20 {
						r.errs = append(r.errs, fmt.Sprintf("p%d %s: %v", rec.Partition, rec.Value, err))
					}
					return
				}
				if soPut(r.acked, rec.Partition, rec.Offset, string(rec.Value)); r.ackedAt[rec.Partition] == nil {
					r.ackedAt[rec.Partition] = map[int64]time.Time{}
				}
				r.ackedAt[rec.Partition][rec.Offset] = at
				if rec.Partition != victimPart {
					return
				}
				r.victimAcks++
				if !r.killAt.IsZero() && enq.After(r.killAt) && r.firstAfter.IsZero() {
					r.firstAfter = at
				}
			})
		}
	}
}

func (r *foRun) victimAcked() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.victimAcks
}

func (r *foRun) recoveredAt() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.firstAfter
}

// soReadAll consumes every partition of topic from offset 0 up to its end offset.
func soReadAll(t *testing.T, ctx context.Context, addr, topic string, parts int32) map[int32]map[int64]string {
	t.Helper()
	adm := kadm.NewClient(soClient(t, []string{addr}))
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("list end offsets of %s: %v", topic, err)
	}
	want := map[int32]int64{}
	from := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("end offset %s/%d: %v", o.Topic, o.Partition, o.Err)
		}
		want[o.Partition] = o.Offset
		from[o.Partition] = kgo.NewOffset().At(0)
	})
	if len(want) != int(parts) {
		t.Fatalf("end offsets for %d partitions, want %d", len(want), parts)
	}
	cl := soClient(t, []string{addr}, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}))
	out := map[int32]map[int64]string{}
	next := map[int32]int64{}
	done := func() bool {
		for p, end := range want {
			if next[p] < end {
				return false
			}
		}
		return true
	}
	for !done() {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read back %s: %v (at %v of %v)", topic, ctx.Err(), next, want)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("read back %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			soPut(out, r.Partition, r.Offset, string(r.Value))
			next[r.Partition] = r.Offset + 1
		})
	}
	return out
}

// soRestartRedis starts a killed cluster node again from its directory and node config: it rejoins as
// a replica of the master that replaced it. It is killed at cleanup, before the cluster removes dir.
func soRestartRedis(t *testing.T, port, bus, dir, conf string) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "redis-restarted.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(redistest.ServerBinary(), "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--protected-mode", "no", "--cluster-port", bus, "--cluster-enabled", "yes",
		"--cluster-config-file", conf, "--cluster-node-timeout", "2000")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("restart redis-server on %s: %v", port, err)
	}
	logf.Close()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { // before the cluster's own cleanup removes dir
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			out, _ := os.ReadFile(logPath)
			t.Logf("--- restarted redis-server %s ---\n%s", port, out)
		}
	})
}

// TestRedisMasterFailover kills (SIGKILL) the Redis master that owns one partition while producers
// write with acks=-1 through two gateways, one with redis.wait_replicas=1 and one without. After the
// replica is promoted producing continues with retriable errors only; with WAIT no acknowledged record
// is lost, without it the loss is measured. (With one replica per master, the promoted master has no
// replica left, so the WAIT gateway can confirm nothing for that partition until the killed node
// comes back as its replica: NOT_ENOUGH_REPLICAS_AFTER_APPEND, retried by the client.)
func TestRedisMasterFailover(t *testing.T) {
	t.Parallel()
	const (
		topic = "ledger"
		parts = int32(6)
		vp    = int32(0) // the partition whose master is killed
	)
	ctx := testCtx(t, 85*time.Second)
	rc, err := redistest.StartCluster(ctx, 3, 1)
	if err != nil {
		t.Fatalf("redis cluster with replicas: %v", err)
	}
	t.Cleanup(rc.Stop)

	// The partitions' slots cover every master; the victim is the master of partition vp.
	raw := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs()})
	t.Cleanup(func() { raw.Close() })
	// The replicas attach after the cluster reports ok: wait until each is in sync with its master.
	var slots []redis.ClusterSlot
	waitFor(t, 30*time.Second, "every master to have a replica in sync", func() bool {
		slots, err = raw.ClusterSlots(ctx).Result()
		if err != nil || len(slots) != 3 {
			return false
		}
		for _, s := range slots {
			if len(s.Nodes) != 2 {
				return false
			}
			r := redis.NewClient(&redis.Options{Addr: s.Nodes[1].Addr})
			info, err := r.Info(ctx, "replication").Result()
			r.Close()
			if err != nil || !strings.Contains(info, "master_link_status:up") {
				return false
			}
		}
		return true
	})
	ownerOf := func(p int32) (master, replica string) {
		key := fmt.Sprintf("x:stream:{%s:%d}", topic, p) // the slot depends on the hash tag only
		slot, err := raw.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT %s: %v", key, err)
		}
		for _, s := range slots {
			if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) == 2 {
				return s.Nodes[0].Addr, s.Nodes[1].Addr
			}
		}
		t.Fatalf("no master with a replica for slot %d in %+v", slot, slots)
		return "", ""
	}
	masters := map[string]bool{}
	for p := range parts {
		m, _ := ownerOf(p)
		masters[m] = true
	}
	if len(masters) != 3 {
		t.Fatalf("partitions of %s live on %d masters, want all 3", topic, len(masters))
	}
	victimAddr, replicaAddr := ownerOf(vp)
	var victim *redistest.Server
	for _, s := range rc.Masters {
		if s.Addr == victimAddr {
			victim = s
		}
	}
	if victim == nil {
		t.Fatalf("master %s of partition %d is not one of %v", victimAddr, vp, rc.Addrs())
	}
	node := redis.NewClient(&redis.Options{Addr: victimAddr})
	conf, err := node.ConfigGet(ctx, "*").Result()
	node.Close()
	if err != nil {
		t.Fatalf("CONFIG GET on %s: %v", victimAddr, err)
	}
	_, port, _ := strings.Cut(victimAddr, ":")

	// Two gateways, each with its own namespace and producer.
	runs := []*foRun{
		{name: "wait_replicas=1", proc: startKgate(t, procConfig{redis: rc.Addrs(), cluster: true,
			namespace: soNamespace(t) + "-wait", env: []string{"KGATE_REDIS_WAIT_REPLICAS=1"}})},
		{name: "no wait", proc: startKgate(t, procConfig{redis: rc.Addrs(), cluster: true, namespace: soNamespace(t) + "-nowait"})},
	}
	pctx, pstop := context.WithCancel(ctx)
	defer pstop()
	var pwg sync.WaitGroup
	for _, r := range runs {
		r.acked, r.ackedAt, r.klog = map[int32]map[int64]string{}, map[int32]map[int64]time.Time{}, &soKgoLog{}
		r.klog.debug = soDebugLog(t, sanitize(r.name))
		soCreateTopic(t, ctx, kadm.NewClient(soClient(t, []string{r.proc.Kafka})), topic, parts)
		r.cl = soClient(t, []string{r.proc.Kafka}, kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.RequiredAcks(kgo.AllISRAcks()), kgo.WithLogger(r.klog),
			// franz-go parks a partition that got a retriable error until its next metadata refresh, by
			// default at most every 5 s: a short minimum age measures the gateway, not that pause.
			kgo.MetadataMinAge(250*time.Millisecond),
			kgo.ProducerOnDataLossDetected(func(string, int32) { r.dataLoss.Add(1) }))
		pwg.Go(func() { r.produce(pctx, topic, parts, vp) })
	}
	t.Cleanup(func() { pstop(); pwg.Wait() })
	waitFor(t, 20*time.Second, "100 acknowledged records on the victim's partition through each gateway", func() bool {
		return runs[0].victimAcked() >= 100 && runs[1].victimAcked() >= 100
	})

	// kill -9 the master.
	killAt := time.Now()
	for _, r := range runs {
		r.mu.Lock()
		r.killAt = killAt
		r.mu.Unlock()
	}
	victim.Kill()
	t.Logf("killed master %s (partition %d of %s; replica %s)", victimAddr, vp, topic, replicaAddr)

	replica := redis.NewClient(&redis.Options{Addr: replicaAddr})
	t.Cleanup(func() { replica.Close() })
	var promoted time.Duration
	waitFor(t, 20*time.Second, "the replica's promotion", func() bool {
		role, err := replica.Do(ctx, "ROLE").Slice()
		if err == nil && len(role) > 0 && role[0] == "master" {
			promoted = time.Since(killAt)
			return true
		}
		return false
	})
	t.Logf("replica %s promoted %v after the kill", replicaAddr, promoted.Round(time.Millisecond))
	// Redis 7 delays a diskless full sync by 5 s to batch replicas; the test has one.
	if err := replica.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Logf("CONFIG SET repl-diskless-sync-delay: %v", err)
	}

	nowait, wait := runs[1], runs[0]
	waitFor(t, 20*time.Second, "producing to the victim's partition through the gateway without WAIT", func() bool {
		return !nowait.recoveredAt().IsZero()
	})
	t.Logf("no WAIT: first acknowledged produce to partition %d %v after the kill (%v after the promotion)",
		vp, nowait.recoveredAt().Sub(killAt).Round(time.Millisecond), nowait.recoveredAt().Sub(killAt.Add(promoted)).Round(time.Millisecond))
	// The gateways find the promoted replica within a heartbeat interval; the client retries within
	// its backoff and metadata age.
	if late := nowait.recoveredAt().Sub(killAt.Add(promoted)); late > 5*time.Second {
		t.Errorf("no WAIT: producing resumed %v after the promotion, want within 5s", late)
	}

	// The promoted master has no replica: the WAIT gateway writes to it but confirms nothing.
	waitFor(t, 15*time.Second, "the WAIT gateway to answer NOT_ENOUGH_REPLICAS_AFTER_APPEND", func() bool {
		return wait.klog.count("NOT_ENOUGH_REPLICAS_AFTER_APPEND") > 0
	})
	if at := wait.recoveredAt(); !at.IsZero() {
		t.Errorf("wait_replicas=1 acknowledged a write to partition %d %v after the kill, with no replica to confirm it",
			vp, at.Sub(killAt))
	}
	// The killed node comes back and rejoins as the new master's replica.
	restartAt := time.Now()
	soRestartRedis(t, port, conf["cluster-port"], conf["dir"], conf["cluster-config-file"])
	back := redis.NewClient(&redis.Options{Addr: victimAddr})
	t.Cleanup(func() { back.Close() })
	waitFor(t, 20*time.Second, "the old master to sync as a replica", func() bool {
		info, err := back.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up")
	})
	synced := time.Now()
	t.Logf("old master back as a replica in sync %v after its restart", synced.Sub(restartAt).Round(time.Millisecond))
	waitFor(t, 20*time.Second, "producing to the victim's partition through the WAIT gateway", func() bool {
		return !wait.recoveredAt().IsZero()
	})
	t.Logf("wait_replicas=1: first acknowledged produce to partition %d %v after the kill (%v after the restart, %v after the replica synced)",
		vp, wait.recoveredAt().Sub(killAt).Round(time.Millisecond), wait.recoveredAt().Sub(restartAt).Round(time.Millisecond),
		wait.recoveredAt().Sub(synced).Round(time.Millisecond))
	if late := wait.recoveredAt().Sub(synced); late > 5*time.Second {
		t.Errorf("wait_replicas=1: producing resumed %v after the replica synced, want within 5s", late)
	}

	// Keep producing a little, then stop and account.
	time.Sleep(500 * time.Millisecond)
	pstop()
	pwg.Wait()
	for _, r := range runs {
		fctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		if err := r.cl.Flush(fctx); err != nil {
			t.Errorf("%s: flush: %v", r.name, err)
		}
		cancel()
	}
	for _, r := range runs {
		if !r.proc.Running() {
			t.Fatalf("%s: gateway exited: %v", r.name, r.proc.waitErr)
		}
		av := kmsg.NewPtrApiVersionsRequest()
		av.ClientSoftwareName, av.ClientSoftwareVersion = "kgate-test", "1.0"
		resp, err := av.RequestWith(ctx, r.cl.SeedBrokers()[0])
		if err != nil || resp.ErrorCode != 0 {
			t.Errorf("%s: ApiVersions after the failover: %v (code %v)", r.name, err, resp)
		}
		r.mu.Lock()
		errs := slices.Clone(r.errs)
		r.mu.Unlock()
		if len(errs) > 0 {
			t.Errorf("%s: the client gave up on %d records (non-retriable errors): %v", r.name, len(errs), errs)
		}
		r.klog.mu.Lock()
		t.Logf("%s: batches retried by the client, by error: %v; data loss detected %d times",
			r.name, r.klog.retried, r.dataLoss.Load())
		r.klog.mu.Unlock()
	}

	for _, r := range runs {
		got := soReadAll(t, ctx, r.proc.Kafka, topic, parts)
		r.mu.Lock()
		var lostBefore, before, lostAll, all int
		var examples []string
		for p, offs := range r.acked {
			for off, v := range offs {
				ok := got[p][off] == v
				all++
				if !ok {
					lostAll++
				}
				if r.ackedAt[p][off].Before(killAt) {
					before++
					if !ok {
						lostBefore++
						if len(examples) < 5 {
							examples = append(examples, fmt.Sprintf("p%d@%d=%q (now %q)", p, off, v, got[p][off]))
						}
					}
				}
			}
		}
		r.mu.Unlock()
		t.Logf("%s: %d records acknowledged before the kill, %d of them missing after the failover; %d of %d acknowledged overall missing",
			r.name, before, lostBefore, lostAll, all)
		if r == wait && lostAll > 0 {
			t.Errorf("%s: %d acknowledged records (%d from before the kill) are not readable, e.g. %v", r.name, lostAll, lostBefore, examples)
		}
	}
}

// soDebugLog returns a franz-go debug logger writing to <name>.kgo.log in KGATE_TEST_LOG_DIR, or nil
// when that is not set.
func soDebugLog(t *testing.T, name string) kgo.Logger {
	dir := os.Getenv("KGATE_TEST_LOG_DIR")
	if dir == "" {
		return nil
	}
	f, err := os.Create(filepath.Join(dir, sanitize(t.Name())+"-"+name+".kgo.log"))
	if err != nil {
		t.Fatalf("debug log: %v", err)
	}
	t.Cleanup(func() { f.Close() })
	return kgo.BasicLogger(f, kgo.LogLevelDebug, func() string { return time.Now().Format("15:04:05.000 ") })
}
