package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/redisstore"
)

// Issue 3 end to end: franz-go group consumers (assignment, rebalances, resume from commits), what a
// commit leaves in Redis, OffsetFetch across gateways, and group administration with kadm.
// Sarama and kcat are in groups_clients_test.go, raw error paths in groups_errors_test.go.

// ---- helpers shared by the group tests ----

// grpCreateTopic creates a topic with kadm and fails the test on any error.
func grpCreateTopic(t *testing.T, ctx context.Context, adm *kadm.Client, topic string, partitions int32) {
	t.Helper()
	resp, err := adm.CreateTopics(ctx, partitions, 1, nil, topic)
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	if r := resp[topic]; r.Err != nil {
		t.Fatalf("create topic %s: %v (%s)", topic, r.Err, r.ErrMessage)
	}
}

// grpProducer returns a producer that honours Record.Partition.
func grpProducer(t *testing.T, g *testGateway) *kgo.Client {
	t.Helper()
	return newClient(t, g, kgo.RecordPartitioner(kgo.ManualPartitioner()))
}

// grpProduce writes perPartition records to every partition of topic and returns how many it wrote.
func grpProduce(t *testing.T, ctx context.Context, p *kgo.Client, topic string, partitions int32, perPartition int, tag string) int {
	t.Helper()
	var recs []*kgo.Record
	for part := int32(0); part < partitions; part++ {
		for i := 0; i < perPartition; i++ {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: part, Value: fmt.Appendf(nil, "%s-%d-%d", tag, part, i)})
		}
	}
	if err := p.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce %s to %s: %v", tag, topic, err)
	}
	return len(recs)
}

// grpEndOffsets returns the high watermark of every partition of topic.
func grpEndOffsets(t *testing.T, ctx context.Context, adm *kadm.Client, topic string) map[int32]int64 {
	t.Helper()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("list end offsets of %s: %v", topic, err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("end offset of %s/%d: %v", o.Topic, o.Partition, o.Err)
		}
		out[o.Partition] = o.Offset
	})
	return out
}

// grpCommitted returns the committed offsets of group (kadm FetchOffsets), failing on any error.
func grpCommitted(t *testing.T, ctx context.Context, adm *kadm.Client, group string) map[string]map[int32]kadm.OffsetResponse {
	t.Helper()
	resp, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatalf("fetch offsets of %s: %v", group, err)
	}
	if err := resp.Error(); err != nil {
		t.Fatalf("fetch offsets of %s: partition error %v", group, err)
	}
	return resp
}

// grpOffsets is grpCommitted for one topic as partition -> offset.
func grpOffsets(t *testing.T, ctx context.Context, adm *kadm.Client, group, topic string) map[int32]int64 {
	t.Helper()
	out := map[int32]int64{}
	for p, o := range grpCommitted(t, ctx, adm, group)[topic] {
		out[p] = o.At
	}
	return out
}

// grpDescribe describes one group with kadm.
func grpDescribe(t *testing.T, ctx context.Context, adm *kadm.Client, group string) kadm.DescribedGroup {
	t.Helper()
	ds, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		t.Fatalf("describe group %s: %v", group, err)
	}
	d, ok := ds[group]
	if !ok {
		t.Fatalf("describe group %s: not in the response", group)
	}
	return d
}

// grpTracker follows what every group member owns (from its partition callbacks) and consumes, and
// records invariant violations: a partition assigned to two members at once, or a record polled from
// a partition its member does not own.
type grpTracker struct {
	mu       sync.Mutex
	owned    map[string]map[int32]bool // member -> partitions it owns
	consumed map[int32]map[int64]int   // partition -> offset -> times consumed
	assigns  map[string]int            // member -> number of assignment callbacks
	errs     []string
}

func newGrpTracker() *grpTracker {
	return &grpTracker{owned: map[string]map[int32]bool{}, consumed: map[int32]map[int64]int{}, assigns: map[string]int{}}
}

func (tr *grpTracker) fail(format string, args ...any) {
	tr.mu.Lock()
	tr.errs = append(tr.errs, fmt.Sprintf(format, args...))
	tr.mu.Unlock()
}

// check fails the test with every recorded violation.
func (tr *grpTracker) check(t *testing.T) {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.errs) > 0 {
		t.Fatalf("group invariant violations:\n%s", strings.Join(tr.errs, "\n"))
	}
}

func (tr *grpTracker) assign(member string, ps map[string][]int32) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.assigns[member]++
	if tr.owned[member] == nil {
		tr.owned[member] = map[int32]bool{}
	}
	for _, parts := range ps {
		for _, p := range parts {
			for other, owned := range tr.owned {
				if other != member && owned[p] {
					tr.errs = append(tr.errs, fmt.Sprintf("partition %d assigned to %s while %s owns it", p, member, other))
				}
			}
			tr.owned[member][p] = true
		}
	}
}

func (tr *grpTracker) revoke(member string, ps map[string][]int32) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, parts := range ps {
		for _, p := range parts {
			delete(tr.owned[member], p)
		}
	}
}

func (tr *grpTracker) consume(member string, recs []*kgo.Record) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, r := range recs {
		if !tr.owned[member][r.Partition] {
			tr.errs = append(tr.errs, fmt.Sprintf("%s polled %s/%d@%d without owning the partition", member, r.Topic, r.Partition, r.Offset))
		}
		if tr.consumed[r.Partition] == nil {
			tr.consumed[r.Partition] = map[int64]int{}
		}
		tr.consumed[r.Partition][r.Offset]++
	}
}

// ownership returns member -> sorted partitions.
func (tr *grpTracker) ownership() map[string][]int32 {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := map[string][]int32{}
	for m, ps := range tr.owned {
		for p := range ps {
			out[m] = append(out[m], p)
		}
		slices.Sort(out[m])
	}
	return out
}

// balanced reports whether exactly the given members own partitions, each at least one, disjointly,
// together every partition below n.
func (tr *grpTracker) balanced(members []string, n int32) bool {
	own := tr.ownership()
	seen := map[int32]bool{}
	for m, ps := range own {
		if len(ps) > 0 && !slices.Contains(members, m) {
			return false
		}
		for _, p := range ps {
			if seen[p] {
				return false
			}
			seen[p] = true
		}
	}
	for _, m := range members {
		if len(own[m]) == 0 {
			return false
		}
	}
	return len(seen) == int(n)
}

// consumedBelow reports whether every offset below ends[p] of every partition was consumed.
func (tr *grpTracker) consumedBelow(ends map[int32]int64) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for p, end := range ends {
		for o := int64(0); o < end; o++ {
			if tr.consumed[p][o] == 0 {
				return false
			}
		}
	}
	return true
}

// grpMember is one franz-go group consumer with a poll / process / commit loop: BlockRebalanceOnPoll
// keeps a rebalance out while a polled batch is processed and committed (CommitRecords), and the
// revoke callback commits what is left, the pattern kgo documents for DisableAutoCommit.
type grpMember struct {
	name   string
	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func startGrpMember(t *testing.T, g *testGateway, tr *grpTracker, group, topic, name string) *grpMember {
	t.Helper()
	return startMember(t, g, tr, nil, group, topic, name)
}

// startMember starts a grpMember with opts added (after the defaults, so they override them). With st,
// every commit's outcome is counted in st (the poll loop's and the revoke callback's) instead of a
// failed commit on revoke failing the test and one in the loop being logged.
func startMember(t *testing.T, g *testGateway, tr *grpTracker, st *rebStats, group, topic, name string, opts ...kgo.Opt) *grpMember {
	t.Helper()
	m := &grpMember{name: name, done: make(chan struct{})}
	base := []kgo.Opt{
		kgo.SeedBrokers(g.Addr),
		kgo.ClientID(name),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SessionTimeout(6 * time.Second),
		kgo.HeartbeatInterval(500 * time.Millisecond),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.FetchMaxWait(200 * time.Millisecond),
		kgo.RetryTimeout(20 * time.Second),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { tr.assign(name, ps) }),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, ps map[string][]int32) {
			err := cl.CommitUncommittedOffsets(ctx)
			switch {
			case st != nil:
				st.commit(name, err)
				st.revoke(name, ps)
			case err != nil:
				tr.fail("%s: commit on revoke: %v", name, err)
			}
			tr.revoke(name, ps)
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
			// Lost, not revoked: the client was told UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION.
			tr.fail("%s lost partitions %v", name, ps)
			tr.revoke(name, ps)
		}),
	}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		t.Fatalf("kgo client %s: %v", name, err)
	}
	m.cl = cl
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go func() {
		defer close(m.done)
		for {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			fs.EachError(func(tp string, p int32, err error) {
				if !errors.Is(err, context.Canceled) && !errors.Is(err, kgo.ErrClientClosed) {
					tr.fail("%s: fetch %s/%d: %v", name, tp, p, err)
				}
			})
			recs := fs.Records()
			tr.consume(name, recs)
			if len(recs) > 0 {
				err := cl.CommitRecords(ctx, recs...)
				switch {
				case ctx.Err() != nil:
				case st != nil:
					st.commit(name, err)
				case err != nil:
					// A commit racing a rebalance may fail (REBALANCE_IN_PROGRESS): the records are
					// then consumed again, which is allowed; the resume check reads what was stored.
					t.Logf("%s: commit: %v", name, err)
				}
			}
			cl.AllowRebalance()
		}
	}()
	t.Cleanup(m.stop)
	return m
}

// stop ends the poll loop and closes the client, which revokes (committing) and leaves the group.
func (m *grpMember) stop() {
	m.once.Do(func() {
		m.cancel()
		<-m.done
		m.cl.AllowRebalance()
		m.cl.Close()
	})
}

// ---- 1. franz-go consumer groups ----

// TestGroupFranzConsumers: three kgo group members on a 6-partition topic get disjoint assignments
// covering every partition and consume every record; a member that leaves has its partitions taken
// over, a member that joins gets some; after everyone stops, a new member of the group resumes at the
// committed offsets exactly (nothing below them again, nothing above them lost).
func TestGroupFranzConsumers(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const (
			topic = "orders"
			group = "franz-group"
			parts = int32(6)
		)
		g := startGateway(t, b)
		ctx := testCtx(t, 75*time.Second)
		adm := newAdmin(t, g)
		grpCreateTopic(t, ctx, adm, topic, parts)
		prod := grpProducer(t, g)
		grpProduce(t, ctx, prod, topic, parts, 20, "a")

		tr := newGrpTracker()
		m1 := startGrpMember(t, g, tr, group, topic, "m1")
		m2 := startGrpMember(t, g, tr, group, topic, "m2")
		m3 := startGrpMember(t, g, tr, group, topic, "m3")

		waitBalanced := func(what string, members ...string) {
			t.Helper()
			waitFor(t, 30*time.Second, what, func() bool { return tr.balanced(members, parts) })
			tr.check(t)
			// The coordinator's view agrees: Stable, these members, the same assignment.
			waitFor(t, 15*time.Second, what+" (DescribeGroups)", func() bool {
				d := grpDescribe(t, ctx, adm, group)
				if d.State != "Stable" || len(d.Members) != len(members) {
					return false
				}
				own := tr.ownership()
				for _, dm := range d.Members {
					a, ok := dm.Assigned.AsConsumer()
					if !ok {
						return false
					}
					var got []int32
					for _, at := range a.Topics {
						got = append(got, at.Partitions...)
					}
					slices.Sort(got)
					if !slices.Equal(got, own[dm.ClientID]) {
						return false
					}
				}
				return true
			})
			t.Logf("%s: %v", what, tr.ownership())
		}
		waitBalanced("three members balanced", "m1", "m2", "m3")
		for m, ps := range tr.ownership() {
			if len(ps) != 2 {
				t.Fatalf("member %s owns %v; three members on six partitions should own two each", m, ps)
			}
		}
		waitFor(t, 30*time.Second, "every record of phase a consumed", func() bool {
			return tr.consumedBelow(grpEndOffsets(t, ctx, adm, topic))
		})

		// A member leaves: the other two take its partitions.
		left := tr.ownership()["m3"]
		m3.stop()
		waitBalanced("m3 left, m1+m2 cover its partitions", "m1", "m2")
		grpProduce(t, ctx, prod, topic, parts, 10, "b")
		waitFor(t, 30*time.Second, "every record of phase b consumed", func() bool {
			return tr.consumedBelow(grpEndOffsets(t, ctx, adm, topic))
		})
		t.Logf("m3's partitions %v moved", left)

		// A member joins: the group rebalances and gives it partitions.
		m4 := startGrpMember(t, g, tr, group, topic, "m4")
		waitBalanced("m4 joined", "m1", "m2", "m4")
		grpProduce(t, ctx, prod, topic, parts, 10, "c")
		ends := grpEndOffsets(t, ctx, adm, topic)
		waitFor(t, 30*time.Second, "every record of phase c consumed", func() bool { return tr.consumedBelow(ends) })
		tr.check(t)

		// Stop everyone (revoke commits), then check what is stored.
		m1.stop()
		m2.stop()
		m4.stop()
		tr.check(t)
		waitFor(t, 15*time.Second, "group Empty after every member left", func() bool {
			return grpDescribe(t, ctx, adm, group).State == "Empty"
		})
		// Every record was processed and committed (in the poll loop or on revoke).
		committed := grpOffsets(t, ctx, adm, group, topic)
		if !mapsEqual(committed, ends) {
			t.Fatalf("committed %v after everyone stopped, want the ends %v", committed, ends)
		}
		// Rewind half the partitions (the group is Empty, so a simple commit is allowed), so the
		// restarted member must follow the commits, not the log end.
		rewind := kadm.Offsets{}
		for p := int32(0); p < parts; p += 2 {
			committed[p] -= 3 + int64(p)
			rewind.Add(kadm.Offset{Topic: topic, Partition: p, At: committed[p], LeaderEpoch: -1})
		}
		if err := adm.CommitAllOffsets(ctx, group, rewind); err != nil {
			t.Fatalf("rewind commits: %v", err)
		}
		t.Logf("committed %v, ends %v", committed, ends)

		// Restart: a new member resumes at the commits.
		grpProduce(t, ctx, prod, topic, parts, 5, "d")
		ends = grpEndOffsets(t, ctx, adm, topic)
		var want int64
		for p := int32(0); p < parts; p++ {
			want += ends[p] - committed[p]
		}
		re := newClient(t, g, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
			kgo.SessionTimeout(6*time.Second), kgo.HeartbeatInterval(500*time.Millisecond),
			kgo.FetchMaxWait(200*time.Millisecond))
		got := map[int32][]int64{}
		var n int64
		for n < want {
			fs := re.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("resumed consumer: %v after %d of %d records", ctx.Err(), n, want)
			}
			fs.EachError(func(tp string, p int32, err error) { t.Fatalf("resumed fetch %s/%d: %v", tp, p, err) })
			for _, r := range fs.Records() {
				if r.Offset < committed[r.Partition] {
					t.Fatalf("resumed consumer read %d/%d below the commit %d", r.Partition, r.Offset, committed[r.Partition])
				}
				got[r.Partition] = append(got[r.Partition], r.Offset)
				n++
			}
		}
		for p := int32(0); p < parts; p++ {
			var exp []int64
			for o := committed[p]; o < ends[p]; o++ {
				exp = append(exp, o)
			}
			if !slices.Equal(got[p], exp) {
				t.Fatalf("partition %d resumed with offsets %v, want %v", p, got[p], exp)
			}
		}
		if err := re.CommitUncommittedOffsets(ctx); err != nil {
			t.Fatalf("commit after resume: %v", err)
		}
		if after := grpOffsets(t, ctx, adm, group, topic); !mapsEqual(after, ends) {
			t.Fatalf("after resume committed %v, want the ends %v", after, ends)
		}
	})
}

func mapsEqual[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// ---- 2. what a commit leaves in Redis ----

// rawCommitReq builds an OffsetCommit of one partition (simple commit unless member/generation set).
func rawCommitReq(group, member string, generation int32, topic string, partition int32, offset int64, metadata *string) *kmsg.OffsetCommitRequest {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.MemberID, req.Generation = group, member, generation
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset, rp.Metadata, rp.LeaderEpoch = partition, offset, metadata, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

// commitCode returns the error code of the only partition of an OffsetCommit response.
func commitCode(t *testing.T, resp *kmsg.OffsetCommitResponse) int16 {
	t.Helper()
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("offset commit response: want one partition, got %+v", resp.Topics)
	}
	return resp.Topics[0].Partitions[0].ErrorCode
}

// sidecarOf parses "N|ms".
func sidecarOf(t *testing.T, raw string) (int64, int64) {
	t.Helper()
	o, ms, ok := strings.Cut(raw, "|")
	n, err1 := strconv.ParseInt(o, 10, 64)
	m, err2 := strconv.ParseInt(ms, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		t.Fatalf("sidecar value %q is not N|ms", raw)
	}
	return n, m
}

// redisGroup returns the XINFO GROUPS entry of group on stream, if any.
func redisGroup(t *testing.T, ctx context.Context, rdb redis.UniversalClient, stream, group string) (redis.XInfoGroup, bool) {
	t.Helper()
	gs, err := rdb.XInfoGroups(ctx, stream).Result()
	if err != nil {
		t.Fatalf("XINFO GROUPS %s: %v", stream, err)
	}
	for _, g := range gs {
		if g.Name == group {
			return g, true
		}
	}
	return redis.XInfoGroup{}, false
}

// TestGroupCommitRedisState: a commit of offset N writes the canonical hash (N), the sidecar (N|ms,
// fresh) and the metadata hash, and moves the Redis consumer group on the stream to last-delivered
// 0-N / entries-read N with lag end-N; entries a Redis-native XREADGROUP delivered are acked below N.
// An older gateway's canonical-only write leaves the sidecar alone; a kgate re-commit refreshes it.
func TestGroupCommitRedisState(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const (
			topic = "ledger"
			group = "redis-view"
		)
		g := startGateway(t, b)
		ctx := testCtx(t, 40*time.Second)
		grpCreateTopic(t, ctx, newAdmin(t, g), topic, 2)
		grpProduce(t, ctx, grpProducer(t, g), topic, 2, 10, "x")
		rdb := g.Store.Client()
		canon, side, meta := g.Store.OffsetKeys(group)
		stream := g.Store.StreamKey(topic, 1)
		if !strings.Contains(canon, "{"+redisstore.GroupTag(group)+"}") || !strings.Contains(side, "{"+redisstore.GroupTag(group)+"}") {
			t.Fatalf("offset keys %q, %q do not share the group's hash tag", canon, side)
		}

		c := dialRaw(t, g.Addr)
		commit := func(n int64, md *string) {
			t.Helper()
			resp := roundTrip[*kmsg.OffsetCommitResponse](c, 8, rawCommitReq(group, "", -1, topic, 1, n, md))
			if code := commitCode(t, resp); code != 0 {
				t.Fatalf("commit %d: error %d", n, code)
			}
		}
		hget := func(key string) (string, bool) {
			t.Helper()
			v, err := rdb.HGet(ctx, key, stream).Result()
			if errors.Is(err, redis.Nil) {
				return "", false
			}
			if err != nil {
				t.Fatalf("HGET %s %s: %v", key, stream, err)
			}
			return v, true
		}
		checkGroup := func(n, end int64) {
			t.Helper()
			xg, ok := redisGroup(t, ctx, rdb, stream, group)
			if !ok {
				t.Fatalf("XINFO GROUPS %s: no group %q", stream, group)
			}
			if want := redisstore.EntryID(n - 1); xg.LastDeliveredID != want || xg.EntriesRead != n || xg.Lag != end-n {
				t.Fatalf("XINFO GROUPS after commit %d: last-delivered %s entries-read %d lag %d; want %s, %d, %d",
					n, xg.LastDeliveredID, xg.EntriesRead, xg.Lag, want, n, end-n)
			}
		}

		before := time.Now().UnixMilli()
		commit(4, kmsg.StringPtr("m1"))
		if v, _ := hget(canon); v != "4" {
			t.Fatalf("canonical %s[%s] = %q, want \"4\"", canon, stream, v)
		}
		raw, ok := hget(side)
		if !ok {
			t.Fatalf("sidecar %s has no field %s", side, stream)
		}
		n, ms1 := sidecarOf(t, raw)
		if now := time.Now().UnixMilli(); n != 4 || ms1 < before-2000 || ms1 > now+2000 {
			t.Fatalf("sidecar %q: want 4|<ms within 2s of now (%d)>", raw, now)
		}
		if v, _ := hget(meta); v != "m1" {
			t.Fatalf("metadata %s[%s] = %q, want m1", meta, stream, v)
		}
		checkGroup(4, 10)
		// The other partition was never committed: no Redis group there.
		if _, ok := redisGroup(t, ctx, rdb, g.Store.StreamKey(topic, 0), group); ok {
			t.Fatalf("partition 0 has a Redis group without a commit")
		}

		// A Redis-native reader in the same group takes entries 4..9 (pending); committing 8 acks those below 8.
		res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "native", Streams: []string{stream, ">"}, Count: 100}).Result()
		if err != nil || len(res) != 1 || len(res[0].Messages) != 6 || res[0].Messages[0].ID != redisstore.EntryID(4) {
			t.Fatalf("XREADGROUP after commit 4: %v %+v; want the 6 entries from offset 4", err, res)
		}
		if p, err := rdb.XPending(ctx, stream, group).Result(); err != nil || p.Count != 6 {
			t.Fatalf("XPENDING before commit: %+v %v, want 6", p, err)
		}
		commit(8, nil)
		pend, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: group, Start: "-", End: "+", Count: 100}).Result()
		if err != nil {
			t.Fatalf("XPENDING: %v", err)
		}
		var ids []string
		for _, p := range pend {
			ids = append(ids, p.ID)
		}
		if want := []string{redisstore.EntryID(8), redisstore.EntryID(9)}; !slices.Equal(ids, want) {
			t.Fatalf("XPENDING after commit 8: %v, want only %v (nothing below the commit)", ids, want)
		}
		checkGroup(8, 10)
		if v, ok := hget(meta); ok {
			t.Fatalf("metadata after a commit with empty metadata: %q, want the field cleared", v)
		}
		if raw, _ := hget(side); !strings.HasPrefix(raw, "8|") {
			t.Fatalf("sidecar after commit 8: %q", raw)
		}
		_, ms8 := sidecarOf(t, mustHGet(t, hget, side))

		// An older gateway writes only the canonical hash: the sidecar keeps kgate's last commit,
		// including when it re-commits the same offset. Reads follow the canonical hash.
		for _, v := range []string{"9", "8"} {
			if err := rdb.HSet(ctx, canon, stream, v).Err(); err != nil {
				t.Fatalf("raw HSET: %v", err)
			}
			if raw := mustHGet(t, hget, side); raw != fmt.Sprintf("8|%d", ms8) {
				t.Fatalf("sidecar after a canonical-only write of %s: %q, want unchanged 8|%d", v, raw, ms8)
			}
		}
		if err := rdb.HSet(ctx, canon, stream, "9").Err(); err != nil {
			t.Fatalf("raw HSET: %v", err)
		}
		fresp := roundTrip[*kmsg.OffsetFetchResponse](c, 5, offsetFetchReq(group, topic, 1))
		if o := fresp.Topics[0].Partitions[0].Offset; o != 9 {
			t.Fatalf("OffsetFetch after canonical-only write of 9: %d", o)
		}

		// A re-commit of the same offset through kgate refreshes the timestamp.
		waitFor(t, 5*time.Second, "the clock to pass the last commit", func() bool { return time.Now().UnixMilli() > ms8+5 })
		commit(8, nil)
		n, ms := sidecarOf(t, mustHGet(t, hget, side))
		if n != 8 || ms <= ms8 {
			t.Fatalf("sidecar after re-commit of 8: %d|%d, want 8|>%d", n, ms, ms8)
		}
		if v := mustHGet(t, hget, canon); v != "8" {
			t.Fatalf("canonical after re-commit: %q", v)
		}

		// An untimestamped write through the store (an admin reset) clears the field's sidecar entry.
		for _, err := range g.Store.CommitOffsets(ctx, group, "", []redisstore.OffsetCommit{{Topic: topic, Partition: 1, Offset: 6}}, time.Time{}) {
			if err != nil {
				t.Fatalf("untimestamped store commit: %v", err)
			}
		}
		if v, ok := hget(side); ok {
			t.Fatalf("sidecar after an untimestamped write: %q, want the field cleared", v)
		}
		if v := mustHGet(t, hget, canon); v != "6" {
			t.Fatalf("canonical after the untimestamped write: %q", v)
		}

		// The sidecar is advisory: malformed (a bad value, then a key of the wrong type) it fails
		// neither a commit nor a fetch.
		if err := rdb.HSet(ctx, side, stream, "garbage").Err(); err != nil {
			t.Fatalf("HSET garbage: %v", err)
		}
		if o := roundTrip[*kmsg.OffsetFetchResponse](c, 5, offsetFetchReq(group, topic, 1)).Topics[0].Partitions[0].Offset; o != 6 {
			t.Fatalf("OffsetFetch with a malformed sidecar value: %d, want 6", o)
		}
		commit(7, nil)
		if raw := mustHGet(t, hget, side); !strings.HasPrefix(raw, "7|") {
			t.Fatalf("sidecar after a commit over a malformed value: %q", raw)
		}
		if err := rdb.Del(ctx, side).Err(); err != nil {
			t.Fatalf("DEL sidecar: %v", err)
		}
		if err := rdb.Set(ctx, side, "not a hash", 0).Err(); err != nil {
			t.Fatalf("SET sidecar: %v", err)
		}
		commit(9, kmsg.StringPtr("m9"))
		if v := mustHGet(t, hget, canon); v != "9" {
			t.Fatalf("canonical after a commit with a wrong-type sidecar: %q, want 9", v)
		}
		fr := roundTrip[*kmsg.OffsetFetchResponse](c, 5, offsetFetchReq(group, topic, 1))
		if p := fr.Topics[0].Partitions[0]; fr.ErrorCode != 0 || p.ErrorCode != 0 || p.Offset != 9 || p.Metadata == nil || *p.Metadata != "m9" {
			t.Fatalf("OffsetFetch with a wrong-type sidecar: %+v", fr)
		}
		checkGroup(9, 10)
	})
}

func mustHGet(t *testing.T, hget func(string) (string, bool), key string) string {
	t.Helper()
	v, ok := hget(key)
	if !ok {
		t.Fatalf("HGET %s: missing", key)
	}
	return v
}

// offsetFetchReq builds a pre-v8 OffsetFetch of the given partitions of one topic.
func offsetFetchReq(group, topic string, partitions ...int32) *kmsg.OffsetFetchRequest {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = topic, partitions
	req.Topics = append(req.Topics, rt)
	return req
}

// grpCommitOK makes a simple commit over c and fails the test unless it succeeds.
func grpCommitOK(t *testing.T, c *rawConn, group, topic string, partition int32, offset int64, metadata string) {
	t.Helper()
	var md *string
	if metadata != "" {
		md = &metadata
	}
	if code := commitCode(t, roundTrip[*kmsg.OffsetCommitResponse](c, 8, rawCommitReq(group, "", -1, topic, partition, offset, md))); code != 0 {
		t.Fatalf("commit %s %s/%d@%d: error %d", group, topic, partition, offset, code)
	}
}

// ---- 3. OffsetFetch ----

// TestGroupOffsetFetch: a group without commits answers -1 with no error (kadm, raw v1, raw v8 with
// several groups and require_stable); retention_time_ms is ignored; null topics return every committed
// partition; a manual-assignment consumer on a second gateway of the same namespace commits with kadm
// (generation -1) and both gateways' clients read those offsets back.
func TestGroupOffsetFetch(t *testing.T) {
	b := backends()[0]
	t.Parallel()
	g0 := startGateway(t, b)
	ctx := testCtx(t, 45*time.Second)
	adm0 := newAdmin(t, g0)
	grpCreateTopic(t, ctx, adm0, "fa", 3)
	grpCreateTopic(t, ctx, adm0, "fb", 1)
	grpProduce(t, ctx, grpProducer(t, g0), "fa", 3, 4, "v")

	// Unknown group through kadm: no error, nothing committed; -1 for requested partitions.
	if got, err := adm0.FetchOffsets(ctx, "nobody"); err != nil || got.Error() != nil || len(got) != 0 {
		t.Fatalf("kadm FetchOffsets of an unknown group: %v %v %+v", err, got.Error(), got)
	}
	c := dialRaw(t, g0.Addr)
	v1 := roundTrip[*kmsg.OffsetFetchResponse](c, 1, offsetFetchReq("nobody", "fa", 0, 2))
	if len(v1.Topics) != 1 || len(v1.Topics[0].Partitions) != 2 {
		t.Fatalf("OffsetFetch v1 unknown group: %+v", v1.Topics)
	}
	for _, p := range v1.Topics[0].Partitions {
		if p.Offset != -1 || p.ErrorCode != 0 {
			t.Fatalf("OffsetFetch v1 unknown group partition %d: offset %d error %d, want -1 / 0", p.Partition, p.Offset, p.ErrorCode)
		}
	}

	// Commits for "known" on two topics (simple commits, the group has no members).
	grpCommitOK(t, c, "known", "fa", 0, 3, "")
	grpCommitOK(t, c, "known", "fa", 2, 1, "md2")
	grpCommitOK(t, c, "known", "fb", 0, 0, "")

	// retention_time_ms (v2-v4) is ignored: the offset stays and its hash gets no expiry.
	rreq := rawCommitReq("retained", "", -1, "fa", 0, 2, nil)
	rreq.RetentionTimeMillis = 1
	if code := commitCode(t, roundTrip[*kmsg.OffsetCommitResponse](c, 2, rreq)); code != 0 {
		t.Fatalf("commit v2 with retention_time_ms 1: error %d", code)
	}
	key := g0.Namespace + ":offsets:{" + redisstore.GroupTag("retained") + "}:retained"
	if ttl, err := g0.Store.Client().PTTL(ctx, key).Result(); err != nil || ttl != -1 {
		t.Fatalf("PTTL %s after a commit with retention_time_ms 1: %v, %v; want -1 (no expiry)", key, ttl, err)
	}

	// v8: several groups in one request; one unknown, one with listed partitions, one with null topics.
	req := kmsg.NewPtrOffsetFetchRequest()
	for _, name := range []string{"nobody", "known", "known"} {
		rg := kmsg.NewOffsetFetchRequestGroup()
		rg.Group = name
		req.Groups = append(req.Groups, rg)
	}
	ft := kmsg.NewOffsetFetchRequestGroupTopic()
	ft.Topic, ft.Partitions = "fa", []int32{0, 1}
	req.Groups[0].Topics = []kmsg.OffsetFetchRequestGroupTopic{ft}
	req.Groups[1].Topics = []kmsg.OffsetFetchRequestGroupTopic{ft}
	req.Groups[2].Topics = nil // every committed partition
	req.RequireStable = true   // accepted: without transactions no offset is ever pending
	v8 := roundTrip[*kmsg.OffsetFetchResponse](c, 8, req)
	if len(v8.Groups) != 3 {
		t.Fatalf("OffsetFetch v8: %d groups, want 3", len(v8.Groups))
	}
	flat := func(rg kmsg.OffsetFetchResponseGroup) string {
		var parts []string
		for _, rt := range rg.Topics {
			for _, p := range rt.Partitions {
				md := ""
				if p.Metadata != nil {
					md = *p.Metadata
				}
				parts = append(parts, fmt.Sprintf("%s/%d=%d:%s:e%d:le%d", rt.Topic, p.Partition, p.Offset, md, p.ErrorCode, p.LeaderEpoch))
			}
		}
		sort.Strings(parts)
		return fmt.Sprintf("err=%d %s", rg.ErrorCode, strings.Join(parts, " "))
	}
	for i, want := range []string{
		"err=0 fa/0=-1::e0:le-1 fa/1=-1::e0:le-1",
		"err=0 fa/0=3::e0:le-1 fa/1=-1::e0:le-1",
		"err=0 fa/0=3::e0:le-1 fa/2=1:md2:e0:le-1 fb/0=0::e0:le-1",
	} {
		if got := flat(v8.Groups[i]); got != want {
			t.Fatalf("OffsetFetch v8 group %d (%s): %s, want %s", i, v8.Groups[i].Group, got, want)
		}
	}
	// v7 null topics, the pre-v8 shape.
	nreq := kmsg.NewPtrOffsetFetchRequest()
	nreq.Group = "known"
	v7 := roundTrip[*kmsg.OffsetFetchResponse](c, 7, nreq)
	if n := len(v7.Topics); v7.ErrorCode != 0 || n != 2 {
		t.Fatalf("OffsetFetch v7 null topics: error %d, %d topics", v7.ErrorCode, n)
	}

	// A second gateway on the same namespace; a manual-assignment consumer there.
	g1 := startPeer(t, b, g0, 1)
	waitTwoGateways(t, g0, g1)
	cons := newClient(t, g1, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		"fa": {0: kgo.NewOffset().AtStart(), 1: kgo.NewOffset().AtStart(), 2: kgo.NewOffset().AtStart()},
	}))
	adm1 := newAdmin(t, g1)
	recs := grpPollN(t, ctx, cons, 12)
	offs := kadm.Offsets{}
	for _, r := range recs {
		if cur, ok := offs.Lookup(r.Topic, r.Partition); !ok || cur.At < r.Offset+1 {
			offs.Add(kadm.NewOffsetFromRecord(r))
		}
	}
	want := map[int32]int64{0: 4, 1: 4, 2: 4}
	// Groups coordinated by either gateway: kadm follows FindCoordinator from both.
	for _, group := range groupsOnEach(2) {
		if err := adm1.CommitAllOffsets(ctx, group, offs); err != nil {
			t.Fatalf("kadm commit %s via gateway 1: %v", group, err)
		}
		for i, adm := range []*kadm.Client{adm0, adm1} {
			if got := grpOffsets(t, ctx, adm, group, "fa"); !mapsEqual(got, want) {
				t.Fatalf("group %s via gateway %d: committed %v, want %v", group, i, got, want)
			}
		}
	}
	// ListGroups asks every gateway; each lists the groups it coordinates, so each group shows once.
	for i, adm := range []*kadm.Client{adm0, adm1} {
		listed, err := adm.ListGroups(ctx)
		if err != nil {
			t.Fatalf("ListGroups via gateway %d: %v", i, err)
		}
		for node, group := range groupsOnEach(2) {
			if lg, ok := listed[group]; !ok || lg.State != "Empty" || lg.Coordinator != int32(node) {
				t.Fatalf("ListGroups via gateway %d: %s = %+v (present %v), want Empty on node %d", i, group, lg, ok, node)
			}
		}
	}
}

// grpPollN polls cl until it returned n records.
func grpPollN(t *testing.T, ctx context.Context, cl *kgo.Client, n int) []*kgo.Record {
	t.Helper()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("poll: %v after %d of %d records", ctx.Err(), len(out), n)
		}
		fs.EachError(func(tp string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", tp, p, err) })
		out = append(out, fs.Records()...)
	}
	return out
}

// ---- 6. group administration with kadm ----

// TestGroupAdmin: ListGroups (a group that only has committed offsets is listed Empty, protocol type
// ""; the v4 states filter), DescribeGroups (members with client id and host; Dead for an unknown group), DeleteGroups
// (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND; deletion removes the three hashes and the Redis consumer
// groups) and OffsetDelete (GROUP_SUBSCRIBED_TO_TOPIC while a consumer group subscribed to the topic
// is Stable; allowed once it is Empty; GROUP_ID_NOT_FOUND for an unknown group).
func TestGroupAdmin(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const topic = "adm"
		g := startGateway(t, b)
		ctx := testCtx(t, 60*time.Second)
		adm := newAdmin(t, g)
		grpCreateTopic(t, ctx, adm, topic, 2)
		grpProduce(t, ctx, grpProducer(t, g), topic, 2, 5, "r")
		rdb := g.Store.Client()
		streams := []string{g.Store.StreamKey(topic, 0), g.Store.StreamKey(topic, 1)}

		// A group that only exists as committed offsets.
		offs := kadm.Offsets{}
		offs.Add(kadm.Offset{Topic: topic, Partition: 0, At: 2, LeaderEpoch: -1, Metadata: "md"})
		offs.Add(kadm.Offset{Topic: topic, Partition: 1, At: 3, LeaderEpoch: -1})
		if err := adm.CommitAllOffsets(ctx, "offsets-only", offs); err != nil {
			t.Fatalf("commit offsets-only: %v", err)
		}

		// A live consumer group that consumes and commits.
		live := newClient(t, g, kgo.ClientID("live-client"), kgo.ConsumerGroup("live"), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
			kgo.SessionTimeout(6*time.Second), kgo.HeartbeatInterval(500*time.Millisecond), kgo.FetchMaxWait(200*time.Millisecond))
		grpPollN(t, ctx, live, 10)
		if err := live.CommitUncommittedOffsets(ctx); err != nil {
			t.Fatalf("live commit: %v", err)
		}
		waitFor(t, 15*time.Second, "live group Stable", func() bool { return grpDescribe(t, ctx, adm, "live").State == "Stable" })

		// ListGroups, through kadm and with the v4 states filter.
		listed, err := adm.ListGroups(ctx)
		if err != nil {
			t.Fatalf("list groups: %v", err)
		}
		// A group that never had members has no protocol type, as on Apache.
		if lg := listed["offsets-only"]; lg.State != "Empty" || lg.ProtocolType != "" {
			t.Fatalf("ListGroups offsets-only: %+v, want Empty with protocol type \"\"", lg)
		}
		if lg := listed["live"]; lg.State != "Stable" || lg.ProtocolType != "consumer" {
			t.Fatalf("ListGroups live: %+v, want Stable consumer", lg)
		}
		c := dialRaw(t, g.Addr)
		listRaw := func(states ...string) []string {
			req := kmsg.NewPtrListGroupsRequest()
			req.StatesFilter = states
			resp := roundTrip[*kmsg.ListGroupsResponse](c, 4, req)
			if resp.ErrorCode != 0 {
				t.Fatalf("ListGroups v4: error %d", resp.ErrorCode)
			}
			var out []string
			for _, lg := range resp.Groups {
				out = append(out, lg.Group+"="+lg.GroupState)
			}
			sort.Strings(out)
			return out
		}
		if got := listRaw("Empty"); !slices.Equal(got, []string{"offsets-only=Empty"}) {
			t.Fatalf("ListGroups v4 [Empty]: %v", got)
		}
		if got := listRaw("Stable"); !slices.Equal(got, []string{"live=Stable"}) {
			t.Fatalf("ListGroups v4 [Stable]: %v", got)
		}
		if got := listRaw("Dead"); len(got) != 0 {
			t.Fatalf("ListGroups v4 [Dead]: %v", got)
		}
		if got := listRaw(); !slices.Equal(got, []string{"live=Stable", "offsets-only=Empty"}) {
			t.Fatalf("ListGroups v4 unfiltered: %v", got)
		}

		// DescribeGroups.
		d := grpDescribe(t, ctx, adm, "live")
		if d.Err != nil || d.State != "Stable" || d.ProtocolType != "consumer" || d.Protocol == "" || len(d.Members) != 1 {
			t.Fatalf("describe live: %+v", d)
		}
		dm := d.Members[0]
		if a, ok := dm.Assigned.AsConsumer(); dm.ClientID != "live-client" || dm.ClientHost != "/127.0.0.1" || dm.MemberID == "" ||
			!ok || len(a.Topics) != 1 || len(a.Topics[0].Partitions) != 2 {
			t.Fatalf("describe live member: %+v", dm)
		}
		if md, ok := dm.Join.AsConsumer(); !ok || !slices.Equal(md.Topics, []string{topic}) {
			t.Fatalf("describe live member metadata: %+v", dm.Join)
		}
		if d := grpDescribe(t, ctx, adm, "no-such-group"); d.State != "Dead" || d.Err != nil || len(d.Members) != 0 {
			t.Fatalf("describe unknown group: state %q err %v", d.State, d.Err)
		}
		if d := grpDescribe(t, ctx, adm, "offsets-only"); d.State != "Empty" || d.Err != nil {
			t.Fatalf("describe offsets-only: state %q err %v", d.State, d.Err)
		}

		// OffsetDelete while the subscribed consumer group is Stable; unknown group.
		del, err := adm.DeleteOffsets(ctx, "live", kadm.TopicsSet{topic: {0: {}}})
		if err != nil || !errors.Is(del[topic][0], kerr.GroupSubscribedToTopic) {
			t.Fatalf("DeleteOffsets on a Stable subscribed group: %v %v, want GROUP_SUBSCRIBED_TO_TOPIC", err, del)
		}
		if _, err := adm.DeleteOffsets(ctx, "no-such-group", kadm.TopicsSet{topic: {0: {}}}); !errors.Is(err, kerr.GroupIDNotFound) {
			t.Fatalf("DeleteOffsets on an unknown group: %v, want GROUP_ID_NOT_FOUND", err)
		}
		if got := grpOffsets(t, ctx, adm, "live", topic); !mapsEqual(got, map[int32]int64{0: 5, 1: 5}) {
			t.Fatalf("live offsets: %v, want 5 and 5", got)
		}

		// DeleteGroups: members -> NON_EMPTY_GROUP; unknown -> GROUP_ID_NOT_FOUND; offsets only -> gone.
		dr, err := adm.DeleteGroups(ctx, "live", "no-such-group", "offsets-only")
		if err != nil {
			t.Fatalf("delete groups: %v", err)
		}
		if !errors.Is(dr["live"].Err, kerr.NonEmptyGroup) || !errors.Is(dr["no-such-group"].Err, kerr.GroupIDNotFound) || dr["offsets-only"].Err != nil {
			t.Fatalf("delete groups: live %v, unknown %v, offsets-only %v", dr["live"].Err, dr["no-such-group"].Err, dr["offsets-only"].Err)
		}
		assertGroupGone := func(group string) {
			t.Helper()
			canon, side, meta := g.Store.OffsetKeys(group)
			for _, k := range []string{canon, side, meta} {
				if n, err := rdb.Exists(ctx, k).Result(); err != nil || n != 0 {
					t.Fatalf("after deleting %s: EXISTS %s = %d %v", group, k, n, err)
				}
			}
			for _, s := range streams {
				if _, ok := redisGroup(t, ctx, rdb, s, group); ok {
					t.Fatalf("after deleting %s: XINFO GROUPS %s still lists it", group, s)
				}
			}
			if got := grpCommitted(t, ctx, adm, group); len(got) != 0 {
				t.Fatalf("after deleting %s: offsets %v", group, got)
			}
			listed, err := adm.ListGroups(ctx)
			if err != nil {
				t.Fatalf("list groups: %v", err)
			}
			if _, ok := listed[group]; ok {
				t.Fatalf("after deleting %s: still listed", group)
			}
		}
		assertGroupGone("offsets-only")
		if got := grpOffsets(t, ctx, adm, "live", topic); !mapsEqual(got, map[int32]int64{0: 5, 1: 5}) {
			t.Fatalf("live offsets after the refused delete: %v", got)
		}

		// Once the consumer leaves, the group is Empty: OffsetDelete and DeleteGroups work.
		live.Close()
		waitFor(t, 15*time.Second, "live group Empty", func() bool { return grpDescribe(t, ctx, adm, "live").State == "Empty" })
		if _, ok := redisGroup(t, ctx, rdb, streams[0], "live"); !ok {
			t.Fatalf("live group has no Redis group on partition 0 before OffsetDelete")
		}
		del, err = adm.DeleteOffsets(ctx, "live", kadm.TopicsSet{topic: {0: {}}})
		if err != nil || del.Error() != nil {
			t.Fatalf("DeleteOffsets on the Empty group: %v %v", err, del)
		}
		if got := grpOffsets(t, ctx, adm, "live", topic); !mapsEqual(got, map[int32]int64{1: 5}) {
			t.Fatalf("live offsets after OffsetDelete of partition 0: %v, want only partition 1", got)
		}
		canon, side, _ := g.Store.OffsetKeys("live")
		for _, k := range []string{canon, side} {
			if ok, err := rdb.HExists(ctx, k, streams[0]).Result(); err != nil || ok {
				t.Fatalf("after OffsetDelete: %s still has %s (%v)", k, streams[0], err)
			}
		}
		if _, ok := redisGroup(t, ctx, rdb, streams[0], "live"); ok {
			t.Fatalf("after OffsetDelete: XINFO GROUPS %s still lists live", streams[0])
		}
		if _, err := adm.DeleteGroup(ctx, "live"); err != nil {
			t.Fatalf("delete the Empty live group: %v", err)
		}
		assertGroupGone("live")
	})
}

// TestGroupFranzStatic: KIP-345 with franz-go. Two static members (kgo.InstanceID) share a topic; one
// closes (a static member sends no LeaveGroup) and restarts within the session timeout: it gets its
// old partitions back and the other member sees no rebalance.
func TestGroupFranzStatic(t *testing.T) {
	t.Parallel()
	g := startGateway(t, backends()[0])
	ctx := testCtx(t, 45*time.Second)
	adm := newAdmin(t, g)
	const topic, group, parts = "static-topic", "static-group", int32(4)
	grpCreateTopic(t, ctx, adm, topic, parts)

	tr := newGrpTracker()
	start := func(name, instance string) *kgo.Client {
		return newClient(t, g, kgo.ClientID(name), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.InstanceID(instance), kgo.SessionTimeout(20*time.Second), kgo.HeartbeatInterval(500*time.Millisecond),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { tr.assign(name, ps) }),
			kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { tr.revoke(name, ps) }),
			kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { tr.revoke(name, ps) }))
	}
	a := start("a", "inst-a")
	b := start("b", "inst-b")
	waitFor(t, 20*time.Second, "two static members balanced", func() bool { return tr.balanced([]string{"a", "b"}, parts) })
	waitFor(t, 10*time.Second, "group Stable", func() bool { return grpDescribe(t, ctx, adm, group).State == "Stable" })
	before := tr.ownership()
	tr.mu.Lock()
	bAssigns := tr.assigns["b"]
	tr.mu.Unlock()
	_, bGen := b.GroupMetadata()
	d := grpDescribe(t, ctx, adm, group)
	oldIDs := map[string]string{}
	for _, m := range d.Members {
		if m.InstanceID == nil {
			t.Fatalf("member %s without instance id", m.MemberID)
		}
		oldIDs[*m.InstanceID] = m.MemberID
	}

	a.Close() // static: no LeaveGroup, the member stays in the group
	tr.revoke("a", map[string][]int32{topic: before["a"]})
	if d := grpDescribe(t, ctx, adm, group); d.State != "Stable" || len(d.Members) != 2 {
		t.Fatalf("after the static member closed: %s with %d members, want Stable with 2", d.State, len(d.Members))
	}
	start("a2", "inst-a")
	waitFor(t, 20*time.Second, "the restarted static member to get its partitions", func() bool {
		return slices.Equal(tr.ownership()["a2"], before["a"])
	})
	d = grpDescribe(t, ctx, adm, group)
	if d.State != "Stable" || len(d.Members) != 2 {
		t.Fatalf("after the static rejoin: %s with %d members", d.State, len(d.Members))
	}
	for _, m := range d.Members {
		switch *m.InstanceID {
		case "inst-a":
			if m.MemberID == oldIDs["inst-a"] || m.ClientID != "a2" {
				t.Fatalf("restarted static member: id %s (old %s) client %s", m.MemberID, oldIDs["inst-a"], m.ClientID)
			}
		case "inst-b":
			if m.MemberID != oldIDs["inst-b"] {
				t.Fatalf("the other static member changed id: %s -> %s", oldIDs["inst-b"], m.MemberID)
			}
		}
	}
	tr.mu.Lock()
	bNow := tr.assigns["b"]
	tr.mu.Unlock()
	_, bGenNow := b.GroupMetadata()
	if got := tr.ownership()["b"]; !slices.Equal(got, before["b"]) || bNow != bAssigns || bGenNow != bGen {
		t.Fatalf("member b: partitions %v -> %v, assignment callbacks %d -> %d, generation %d -> %d; want no rebalance",
			before["b"], got, bAssigns, bNow, bGen, bGenNow)
	}
	tr.check(t)
}
