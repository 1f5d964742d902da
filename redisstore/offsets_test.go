package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisGroup returns the XINFO GROUPS entry of group on a partition stream (found false when absent).
func redisGroup(t *testing.T, s *Store, topic string, p int32, group string) (redis.XInfoGroup, bool) {
	t.Helper()
	gs, err := s.Client().XInfoGroups(t.Context(), s.keys.stream(topic, p)).Result()
	if err != nil && !strings.Contains(err.Error(), "no such key") {
		t.Fatalf("XINFO GROUPS: %v", err)
	}
	for _, g := range gs {
		if g.Name == group {
			return g, true
		}
	}
	return redis.XInfoGroup{}, false
}

func mustCommit(t *testing.T, s *Store, group string, now time.Time, commits ...OffsetCommit) {
	t.Helper()
	for i, err := range s.CommitOffsets(t.Context(), group, "", commits, now) {
		if err != nil {
			t.Fatalf("CommitOffsets %+v: %v", commits[i], err)
		}
	}
}

func mustCommitted(t *testing.T, s *Store, group string) map[string]Committed {
	t.Helper()
	cs, err := s.CommittedOffsets(t.Context(), group)
	if err != nil {
		t.Fatalf("CommittedOffsets: %v", err)
	}
	out := map[string]Committed{}
	for i, c := range cs {
		if i > 0 && (cs[i-1].Topic > c.Topic || cs[i-1].Topic == c.Topic && cs[i-1].Partition >= c.Partition) {
			t.Errorf("CommittedOffsets not sorted: %+v", cs)
		}
		out[fmt.Sprintf("%s/%d", c.Topic, c.Partition)] = c
	}
	return out
}

func TestCommitOffsets(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		rdb := s.Client()
		const group = "billing.consumers"
		mustCreateTopic(t, s, "c", 2)
		appendOne(t, s, "c", 0, plain("r", 5)...)
		canon, side, meta := s.OffsetKeys(group)
		f0, f1 := s.StreamKey("c", 0), s.StreamKey("c", 1)

		now := time.Now()
		mustCommit(t, s, group, now,
			OffsetCommit{Topic: "c", Partition: 0, Offset: 3, Metadata: "m0"},
			OffsetCommit{Topic: "c", Partition: 1, Offset: 0}) // partition 1 has no stream yet
		if v := rdb.HGet(ctx, canon, f0).Val(); v != "3" {
			t.Fatalf("canonical %s = %q, want \"3\"", f0, v)
		}
		if v := rdb.HGet(ctx, canon, f1).Val(); v != "0" {
			t.Fatalf("canonical %s = %q, want \"0\"", f1, v)
		}
		sc := rdb.HGet(ctx, side, f0).Val()
		o, ms, ok := strings.Cut(sc, "|")
		msN, err := strconv.ParseInt(ms, 10, 64)
		if !ok || o != "3" || err != nil || time.Since(time.UnixMilli(msN)).Abs() > time.Second {
			t.Fatalf("sidecar %q, want \"3|<now ms>\"", sc)
		}
		if v := rdb.HGet(ctx, meta, f0).Val(); v != "m0" {
			t.Fatalf("metadata %q", v)
		}
		if rdb.HExists(ctx, meta, f1).Val() {
			t.Fatal("empty metadata was stored")
		}

		// The Redis consumer group mirrors the commit.
		// (The embedded store reports neither entries-read nor a true lag.)
		real := !s.Embedded()
		g, ok := redisGroup(t, s, "c", 0, group)
		if !ok || g.LastDeliveredID != "0-3" || g.Pending != 0 || real && (g.EntriesRead != 3 || g.Lag != 2) {
			t.Fatalf("XINFO GROUPS c/0: %+v (found %v); want last-delivered-id 0-3, entries-read 3, lag 2", g, ok)
		}
		if g, ok := redisGroup(t, s, "c", 1, group); !ok || g.LastDeliveredID != "0-0" || real && g.EntriesRead != 0 {
			t.Fatalf("XINFO GROUPS c/1: %+v (found %v)", g, ok)
		}

		cs := mustCommitted(t, s, group)
		c0 := cs["c/0"]
		if len(cs) != 2 || c0.Offset != 3 || c0.Metadata != "m0" || c0.SidecarOffset != 3 || c0.CommitTime != now.UnixMilli() {
			t.Fatalf("CommittedOffsets = %+v", cs)
		}
		if c1 := cs["c/1"]; c1.Offset != 0 || c1.Metadata != "" || c1.SidecarOffset != 0 {
			t.Fatalf("CommittedOffsets c/1 = %+v", c1)
		}

		// Moving on: the group follows, empty metadata clears, lag shrinks.
		later := now.Add(time.Minute)
		mustCommit(t, s, group, later, OffsetCommit{Topic: "c", Partition: 0, Offset: 5})
		if rdb.HExists(ctx, meta, f0).Val() {
			t.Fatal("empty metadata did not clear the old one")
		}
		if g, _ := redisGroup(t, s, "c", 0, group); g.LastDeliveredID != "0-5" || real && (g.EntriesRead != 5 || g.Lag != 0) {
			t.Fatalf("after commit 5: %+v", g)
		}
		if c0 := mustCommitted(t, s, group)["c/0"]; c0.Offset != 5 || c0.CommitTime != later.UnixMilli() || c0.Metadata != "" {
			t.Fatalf("after commit 5: %+v", c0)
		}

		// A zero time writes no timestamp and clears the sidecar.
		mustCommit(t, s, group, time.Time{}, OffsetCommit{Topic: "c", Partition: 0, Offset: 1})
		if rdb.HExists(ctx, side, f0).Val() {
			t.Fatal("untimestamped commit left a sidecar entry")
		}
		if c0 := mustCommitted(t, s, group)["c/0"]; c0.Offset != 1 || c0.CommitTime != -1 || c0.SidecarOffset != -1 {
			t.Fatalf("after untimestamped commit: %+v", c0)
		}
		if g, _ := redisGroup(t, s, "c", 0, group); g.LastDeliveredID != "0-1" || real && g.Lag != 4 {
			t.Fatalf("after rewinding to 1: %+v", g)
		}
	})
}

// TestCommitToDeletedTopic: a commit that reaches Redis after its topic was deleted (a gateway's topic
// cache lags by up to a second) stores the offset but does not bring the partition's stream key back
// with a Redis consumer group on it, which nothing would ever remove.
func TestCommitToDeletedTopic(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "gone", 2)
		appendOne(t, s, "gone", 0, plain("r", 2)...)
		if err := s.DeleteTopic(ctx, "gone"); err != nil {
			t.Fatal(err)
		}
		mustCommit(t, s, "late", time.Now(),
			OffsetCommit{Topic: "gone", Partition: 0, Offset: 1}, OffsetCommit{Topic: "gone", Partition: 1, Offset: 0})
		if n := s.Client().Exists(ctx, s.StreamKey("gone", 0), s.StreamKey("gone", 1)).Val(); n != 0 {
			t.Fatalf("%d stream keys of the deleted topic exist after the commit, want none", n)
		}
		if c := mustCommitted(t, s, "late")["gone/0"]; c.Offset != 1 {
			t.Fatalf("committed %+v, want offset 1 stored", c)
		}
	})
}

// A Redis-native consumer in the group reads entries; a Kafka commit acknowledges them.
func TestCommitAcknowledgesNativeReads(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		const group, n = "native", 1205 // more than one XPENDING page of the commit script
		mustCreateTopic(t, s, "nat", 1)
		appendOne(t, s, "nat", 0, plain("r", n)...)
		key := s.StreamKey("nat", 0)
		mustCommit(t, s, group, time.Now(), OffsetCommit{Topic: "nat", Offset: 0})
		streams, err := s.Client().XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: group, Consumer: "worker-1", Streams: []string{key, ">"}, Count: 2 * n,
		}).Result()
		if err != nil || len(streams) != 1 || len(streams[0].Messages) != n {
			t.Fatalf("XREADGROUP: %v, %v", streams, err)
		}
		if p := s.Client().XPending(ctx, key, group).Val(); p.Count != n {
			t.Fatalf("pending %d after XREADGROUP, want %d", p.Count, n)
		}
		mustCommit(t, s, group, time.Now(), OffsetCommit{Topic: "nat", Offset: n - 2})
		below, err := s.Client().XPendingExt(ctx, &redis.XPendingExtArgs{
			Stream: key, Group: group, Start: "-", End: EntryID(n - 3), Count: 10,
		}).Result()
		if err != nil || len(below) != 0 {
			t.Fatalf("XPENDING below the committed offset: %v, %v; want none", below, err)
		}
		p := s.Client().XPending(ctx, key, group).Val()
		if p.Count != 2 || p.Lower != EntryID(n-2) || p.Higher != EntryID(n-1) {
			t.Fatalf("XPENDING after commit %d: %+v; want the last two entries", n-2, p)
		}
		if g, _ := redisGroup(t, s, "nat", 0, group); g.LastDeliveredID != fmt.Sprintf("0-%d", n-2) || g.EntriesRead != n-2 {
			t.Fatalf("group after commit: %+v", g)
		}
	})
}

// TestCommittedOffsetsOfGroupsAtOnce: the committed offsets of many groups are read in a few pipelines
// per master side by side (a round trip's time, not one per group), each group's offsets,
// metadata and commit times as CommittedOffsets reads them alone; a group that committed nothing has
// none, without an error.
func TestCommittedOffsetsOfGroupsAtOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "many", 2)
		appendOne(t, s, "many", 0, plain("r", 30)...)
		appendOne(t, s, "many", 1, plain("r", 30)...)
		now := time.Now()
		var groups []string
		for i := range 24 {
			g := "many-" + strconv.Itoa(i)
			mustCommit(t, s, g, now.Add(time.Duration(i)*time.Millisecond),
				OffsetCommit{Topic: "many", Partition: 0, Offset: int64(i), Metadata: "m" + strconv.Itoa(i)},
				OffsetCommit{Topic: "many", Partition: 1, Offset: int64(i + 1)})
			groups = append(groups, g)
		}
		groups = append(groups, "many-none")
		trips := serverTrips(t, s)
		committed, errs := s.CommittedOffsetsOf(ctx, groups)
		n := trips.Load()
		masters := 1
		if cc, ok := s.Client().(*redis.ClusterClient); ok {
			seen := map[*redis.Client]bool{}
			for _, g := range groups {
				m, err := cc.MasterForKey(ctx, s.keys.offsets(g))
				if err != nil {
					t.Fatal(err)
				}
				seen[m] = true
			}
			masters = len(seen)
		}
		if most := int64(masters * committedPipelines); n > most {
			t.Errorf("%d groups: %d round trips, want %d at most (%d per master, side by side)", len(groups), n, most, committedPipelines)
		}
		for i, g := range groups {
			var want []Committed
			if g != "many-none" {
				ms := now.Add(time.Duration(i) * time.Millisecond).UnixMilli()
				want = []Committed{
					{Topic: "many", Partition: 0, Offset: int64(i), Metadata: "m" + strconv.Itoa(i), CommitTime: ms, SidecarOffset: int64(i)},
					{Topic: "many", Partition: 1, Offset: int64(i + 1), CommitTime: ms, SidecarOffset: int64(i + 1)},
				}
			}
			alone, err := s.CommittedOffsets(ctx, g)
			if errs[i] != nil || err != nil || !slices.Equal(committed[i], want) || !slices.Equal(alone, want) {
				t.Errorf("%s: %+v, %v (alone %+v, %v); want %+v", g, committed[i], errs[i], alone, err, want)
			}
		}
	})
}

func TestCommittedSidecar(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		rdb := s.Client()
		const group = "sidecar"
		mustCreateTopic(t, s, "sc", 1)
		appendOne(t, s, "sc", 0, plain("r", 10)...)
		now := time.Now()
		mustCommit(t, s, group, now, OffsetCommit{Topic: "sc", Offset: 3})
		canon, side, _ := s.OffsetKeys(group)
		field := s.StreamKey("sc", 0)

		// An older gateway writes only the canonical hash: the sidecar keeps the old pair.
		if err := rdb.HSet(ctx, canon, field, "7").Err(); err != nil {
			t.Fatal(err)
		}
		if v := rdb.HGet(ctx, side, field).Val(); v != fmt.Sprintf("3|%d", now.UnixMilli()) {
			t.Fatalf("sidecar %q changed by a canonical-only write", v)
		}
		c := mustCommitted(t, s, group)["sc/0"]
		if c.Offset != 7 || c.SidecarOffset != 3 || c.CommitTime != now.UnixMilli() {
			t.Fatalf("after canonical-only write: %+v; want offset 7, sidecar offset 3", c)
		}

		for _, bad := range []string{"garbage", "5|", "|7", "", "5|x", "-1|7", "5|-7", "5|7|9"} {
			if err := rdb.HSet(ctx, side, field, bad).Err(); err != nil {
				t.Fatal(err)
			}
			cs, err := s.CommittedOffsets(ctx, group)
			if err != nil || len(cs) != 1 {
				t.Fatalf("sidecar %q: %+v, %v", bad, cs, err)
			}
			if cs[0].Offset != 7 || cs[0].CommitTime != -1 || cs[0].SidecarOffset != -1 {
				t.Errorf("sidecar %q: %+v; want commit time -1", bad, cs[0])
			}
		}
		// A sidecar or metadata key of another type is read as empty, not as a failure.
		_, _, md := s.OffsetKeys(group)
		for _, key := range []string{side, md} {
			if err := rdb.Del(ctx, key).Err(); err != nil {
				t.Fatal(err)
			}
			if err := rdb.Set(ctx, key, "not a hash", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if cs, err := s.CommittedOffsets(ctx, group); err != nil || len(cs) != 1 || cs[0].Offset != 7 || cs[0].CommitTime != -1 || cs[0].Metadata != "" {
			t.Errorf("sidecar and metadata of another type: %+v, %v; want offset 7, no commit time or metadata", cs, err)
		}
		// Foreign fields and non-numeric canonical values are not commits.
		rdb.HSet(ctx, canon, "not-a-stream-key", "1", s.StreamKey("sc", 1), "x")
		if cs := mustCommitted(t, s, group); len(cs) != 1 {
			t.Fatalf("foreign fields read as commits: %+v", cs)
		}
		if cs, err := s.CommittedOffsets(ctx, "never-committed"); err != nil || len(cs) != 0 {
			t.Fatalf("unknown group: %+v, %v", cs, err)
		}
	})
}

func TestDeleteOffsetsAndGroups(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		rdb := s.Client()
		mustCreateTopic(t, s, "d", 2)
		for p := range int32(2) {
			appendOne(t, s, "d", p, plain("r", 4)...)
		}
		if gs, _, err := s.Groups(ctx); err != nil || len(gs) != 0 {
			t.Fatalf("Groups before any commit: %v, %v", gs, err)
		}
		now := time.Now()
		for _, g := range []string{"g2", "g1", "g3"} {
			mustCommit(t, s, g, now,
				OffsetCommit{Topic: "d", Partition: 0, Offset: 2, Metadata: "x"},
				OffsetCommit{Topic: "d", Partition: 1, Offset: 1, Metadata: "y"})
		}
		if gs, _, _ := s.Groups(ctx); strings.Join(gs, ",") != "g1,g2,g3" {
			t.Fatalf("Groups = %v", gs)
		}
		if ok, err := s.GroupExists(ctx, "g1"); !ok || err != nil {
			t.Fatalf("GroupExists(g1) = %v, %v", ok, err)
		}
		if ok, _ := s.GroupExists(ctx, "nope"); ok {
			t.Fatal("GroupExists(nope)")
		}

		// DeleteOffsets: one partition, from all three hashes and from the stream's groups.
		f0, f1 := s.StreamKey("d", 0), s.StreamKey("d", 1)
		if err := s.DeleteOffsets(ctx, "g1", "", []OffsetCommit{{Topic: "d", Partition: 0}}); err != nil {
			t.Fatal(err)
		}
		canon, side, meta := s.OffsetKeys("g1")
		for _, k := range []string{canon, side, meta} {
			if rdb.HExists(ctx, k, f0).Val() {
				t.Errorf("%s still holds %s", k, f0)
			}
			if !rdb.HExists(ctx, k, f1).Val() {
				t.Errorf("%s lost %s", k, f1)
			}
		}
		if _, ok := redisGroup(t, s, "d", 0, "g1"); ok {
			t.Error("DeleteOffsets left the Redis consumer group on d/0")
		}
		if _, ok := redisGroup(t, s, "d", 1, "g1"); !ok {
			t.Error("DeleteOffsets removed the Redis consumer group on d/1")
		}
		if _, ok := redisGroup(t, s, "d", 0, "g2"); !ok {
			t.Error("DeleteOffsets removed another group's Redis consumer group")
		}
		if cs := mustCommitted(t, s, "g1"); len(cs) != 1 || cs["d/1"].Offset != 1 {
			t.Fatalf("after DeleteOffsets: %+v", cs)
		}
		// With its last offset deleted a group is no longer listed.
		if err := s.DeleteOffsets(ctx, "g3", "", []OffsetCommit{{Topic: "d", Partition: 0}, {Topic: "d", Partition: 1}}); err != nil {
			t.Fatal(err)
		}
		if gs, _, _ := s.Groups(ctx); strings.Join(gs, ",") != "g1,g2" {
			t.Fatalf("Groups after deleting all of g3's offsets = %v", gs)
		}
		if err := s.DeleteOffsets(ctx, "g3", "", nil); err != nil {
			t.Fatal(err)
		}

		// DeleteGroup: every hash, every Redis consumer group, the listing.
		if err := s.DeleteGroup(ctx, "g2", ""); err != nil {
			t.Fatal(err)
		}
		canon, side, meta = s.OffsetKeys("g2")
		if n := rdb.Exists(ctx, canon).Val() + rdb.Exists(ctx, side).Val() + rdb.Exists(ctx, meta).Val(); n != 0 {
			t.Fatalf("DeleteGroup left %d of the offset hashes", n)
		}
		for p := range int32(2) {
			if _, ok := redisGroup(t, s, "d", p, "g2"); ok {
				t.Errorf("DeleteGroup left the Redis consumer group on d/%d", p)
			}
		}
		if _, ok := redisGroup(t, s, "d", 1, "g1"); !ok {
			t.Error("DeleteGroup(g2) removed g1's Redis consumer group")
		}
		if gs, _, _ := s.Groups(ctx); strings.Join(gs, ",") != "g1" {
			t.Fatalf("Groups after DeleteGroup = %v", gs)
		}
		if rdb.SIsMember(ctx, s.keys.groups(), "g2").Val() {
			t.Error("DeleteGroup left the group in the groups set")
		}
		if ok, _ := s.GroupExists(ctx, "g2"); ok {
			t.Error("GroupExists after DeleteGroup")
		}
		if err := s.DeleteGroup(ctx, "never-existed", ""); err != nil {
			t.Fatalf("DeleteGroup of an unknown group: %v", err)
		}
		// A group deleted after its topic still goes away cleanly.
		if err := s.DeleteTopic(ctx, "d"); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteGroup(ctx, "g1", ""); err != nil {
			t.Fatal(err)
		}
		if gs, _, _ := s.Groups(ctx); len(gs) != 0 {
			t.Fatalf("Groups at the end = %v", gs)
		}
	})
}

func TestCommitOffsetsCancelled(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		errs := s.CommitOffsets(ctx, "g", "", []OffsetCommit{{Topic: "x", Offset: 1}, {Topic: "x", Partition: 1, Offset: 1}}, time.Now())
		if len(errs) != 2 || errs[0] == nil || errs[1] == nil || !IsUnavailable(errs[0]) {
			t.Fatalf("commit on a cancelled context: %v", errs)
		}
		if errs := s.CommitOffsets(t.Context(), "g", "", nil, time.Now()); len(errs) != 0 {
			t.Fatalf("empty commit: %v", errs)
		}
	})
}

// TestCommitLargeOffsets: the Redis consumer group follows a commit of any offset Kafka allows, to
// the digit: the commit script kept it as a Lua number, which rounded one above 2^53 and printed one
// near 2^63 in exponent form; XGROUP refused that, and the script then destroyed the group, its
// consumers and their pending entries, and failed the commit on every retry.
func TestCommitLargeOffsets(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		const group = "large"
		mustCreateTopic(t, s, "big", 1)
		appendOne(t, s, "big", 0, plain("r", 3)...)
		key := s.StreamKey("big", 0)
		mustCommit(t, s, group, time.Now(), OffsetCommit{Topic: "big", Offset: 0})
		if _, err := s.Client().XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "c", Streams: []string{key, ">"}, Count: 3}).Result(); err != nil {
			t.Fatal(err)
		}
		for _, off := range []int64{1<<53 + 1, 99999999999999999, math.MaxInt64 - 1, math.MaxInt64} {
			mustCommit(t, s, group, time.Now(), OffsetCommit{Topic: "big", Offset: off})
			g, ok := redisGroup(t, s, "big", 0, group)
			if !ok || g.LastDeliveredID != fmt.Sprintf("0-%d", off) {
				t.Fatalf("group after a commit of %d: %+v (found %v)", off, g, ok)
			}
		}
	})
}

// countingHook counts the commands sent one by one, outside any pipeline.
type countingHook struct{ single atomic.Int64 }

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.single.Add(1)
		return next(ctx, cmd)
	}
}
func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestCommitAfterScriptFlush: a master that lost the commit script (restarted, failed over, flushed)
// gets it again for every partition of a commit in one more pipeline, not a round trip per partition,
// which made a large commit run out of its command timeout after a failover.
func TestCommitAfterScriptFlush(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Store) {
		const parts = 50
		mustCreateTopic(t, s, "flushed", parts)
		var commits []OffsetCommit
		for p := range int32(parts) {
			commits = append(commits, OffsetCommit{Topic: "flushed", Partition: p, Offset: 1})
		}
		mustCommit(t, s, "before", time.Now(), commits...) // the script is cached
		flushScripts(t, s)
		hook := &countingHook{}
		s.Client().AddHook(hook)
		mustCommit(t, s, "after", time.Now(), commits...)
		// Three: the new group's listing, before its offsets, and the offsets script, whose EVALSHA is
		// sent again as EVAL (one script for every partition).
		if n := hook.single.Load(); n > 3 {
			t.Fatalf("a commit of %d partitions after the script was flushed sent %d commands one by one", parts, n)
		}
		for p := range int32(parts) {
			if g, ok := redisGroup(t, s, "flushed", p, "after"); !ok || g.LastDeliveredID != "0-1" {
				t.Fatalf("partition %d: group %+v (found %v)", p, g, ok)
			}
		}
	})
}

// flushScripts empties the script cache of every master of s (SCRIPT FLUSH), as a restart or a
// failover does.
func flushScripts(t *testing.T, s *Store) {
	t.Helper()
	flush := func(ctx context.Context, c *redis.Client) error { return c.ScriptFlush(ctx).Err() }
	var err error
	if cc, ok := s.Client().(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(t.Context(), flush)
	} else {
		err = flush(t.Context(), s.Client().(*redis.Client))
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestDeleteOffsetsReportsRedisGroupFailures: a deletion whose Redis consumer groups could not be
// destroyed (here the key is not a stream; a timeout likewise) reports the failure instead of success,
// a Redis group left behind claiming a position, and keeps the offsets, so a retry finds what to
// destroy; a stream or group already gone is fine.
func TestDeleteOffsetsReportsRedisGroupFailures(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCommit(t, s, "dg", time.Now(), OffsetCommit{Topic: "gone-topic", Partition: 0, Offset: 1})
		if err := s.DeleteOffsets(ctx, "dg", "", []OffsetCommit{{Topic: "gone-topic", Partition: 0}}); err != nil {
			t.Fatalf("stream gone: %v", err)
		}
		mustCommit(t, s, "dg", time.Now(), OffsetCommit{Topic: "odd", Partition: 0, Offset: 1})
		if err := s.Client().Set(ctx, s.StreamKey("odd", 0), "not a stream", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteOffsets(ctx, "dg", "", []OffsetCommit{{Topic: "odd", Partition: 0}}); err == nil {
			t.Fatal("DeleteOffsets answered success with the Redis consumer group not destroyed")
		}
		// The offsets stay for a retry to find, and so does the group.
		if cs, err := s.CommittedOffsets(ctx, "dg"); err != nil || len(cs) != 1 {
			t.Fatalf("offsets after the failed deletion: %+v, %v; want the one kept", cs, err)
		}
		if err := s.DeleteGroup(ctx, "dg", ""); err == nil {
			t.Fatal("DeleteGroup answered success with the Redis consumer group not destroyed")
		}
		if ok, err := s.GroupExists(ctx, "dg"); err != nil || !ok {
			t.Fatalf("group after the failed deletion: exists %v, %v", ok, err)
		}
	})
}

// TestGroupIndexedFailure: a commit whose SADD to the groups set fails is failed only for a group this
// store has not listed yet: the set lives on one master, and while that one fails over, listed
// groups' commits (stored already) go on.
func TestGroupIndexedFailure(t *testing.T) {
	s := &Store{}
	down := errors.New("CLUSTERDOWN")
	if err := s.groupIndexed("g", down); err != down {
		t.Fatalf("unlisted group: %v, want the SADD's error", err)
	}
	if err := s.groupIndexed("g", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.groupIndexed("g", down); err != nil {
		t.Fatalf("listed group: %v, want none", err)
	}
	s.forgetIndexed("g") // deleted: listed again by its next commit
	if err := s.groupIndexed("g", down); err != down {
		t.Fatalf("deleted group: %v, want the SADD's error", err)
	}
	// Listed longer ago than indexedFor: it may have been deleted through another gateway since.
	if err := s.groupIndexed("h", nil); err != nil {
		t.Fatal(err)
	}
	at, _ := s.indexed.Load("h")
	at.(*atomic.Int64).Add(-int64(indexedFor))
	if err := s.groupIndexed("h", down); err != down {
		t.Fatalf("group listed %v ago: %v, want the SADD's error", indexedFor, err)
	}
}

// TestCommitListsGroupBeforeOffsets: a group's first commit adds it to the groups set before its
// offsets are written, so no gateway dying in between leaves offsets that ListGroups and a topic's
// deletion never see. Here the set cannot be written (its key holds another type): the commit fails
// and stores nothing, where it used to store the offsets and then fail.
func TestCommitListsGroupBeforeOffsets(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "listed", 1)
		if err := s.Client().Set(ctx, s.keys.groups(), "not a set", 0).Err(); err != nil {
			t.Fatal(err)
		}
		errs := s.CommitOffsets(ctx, "unlisted", "", []OffsetCommit{{Topic: "listed", Partition: 0, Offset: 0}}, time.Now())
		if !redis.HasErrorPrefix(errs[0], "WRONGTYPE") {
			t.Fatalf("commit with the groups set unwritable: %v, want WRONGTYPE", errs[0])
		}
		got, err := s.CommittedOffsets(ctx, "unlisted")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 0 {
			t.Fatalf("offsets stored for a group not listed: %+v", got)
		}
	})
}

// A group's committed offsets are read while its slot migrates. The read is one transaction on the
// group's slot, which Redis refuses with TRYAGAIN from the moment the slot is marked migrating when
// one of its keys does not exist (the metadata hash of a group that commits none, as Kafka clients
// usually do) or some have moved and others not: OffsetFetch failed for the whole migration, and a
// consumer could not start. The hashes are then read one by one, each redirected on its own.
func TestCommittedOffsetsWhileGroupSlotMigrates(t *testing.T) {
	s := openStore(t, Options{Addrs: cluster.Addrs(), Cluster: true})
	ctx := t.Context()
	mustCreateTopic(t, s, "gslot", 2)
	commits := []OffsetCommit{{Topic: "gslot", Partition: 0, Offset: 7}, {Topic: "gslot", Partition: 1, Offset: 9}}
	for i, err := range s.CommitOffsets(ctx, "movinggroup", "", commits, time.Now()) {
		if err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	read := func(when string) {
		t.Helper()
		got, err := s.CommittedOffsets(ctx, "movinggroup")
		if err != nil || len(got) != 2 || got[0].Offset != 7 || got[1].Offset != 9 || got[0].CommitTime < 0 {
			t.Fatalf("%s: %+v, %v; want offsets 7 and 9 with their commit times", when, got, err)
		}
	}
	m := startSlotMove(t, s.keys.offsets("movinggroup"))
	read("slot migrating, no key moved")
	m.migrate(s.keys.offsets("movinggroup"))
	read("offsets hash moved, sidecar not")
	m.finish()
	read("slot moved")
}
