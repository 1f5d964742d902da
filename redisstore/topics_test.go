package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestTopics(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		id := [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
		// A creation time past 2^53 / 1000 would lose digits if anything re-encoded the JSON as a float.
		want := Topic{Name: "orders.v1", ID: id, Partitions: 3, Configs: map[string]string{"retention.ms": "1000"},
			Created: 1732912345678}
		if err := s.CreateTopic(ctx, want); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateTopic(ctx, Topic{Name: "orders.v1", Partitions: 9}); !errors.Is(err, ErrTopicExists) {
			t.Fatalf("duplicate CreateTopic: %v, want ErrTopicExists", err)
		}
		for _, n := range []int32{0, -1} {
			if err := s.CreateTopic(ctx, Topic{Name: "bad", Partitions: n}); !errors.Is(err, ErrInvalidPartitions) {
				t.Errorf("CreateTopic with %d partitions: %v, want ErrInvalidPartitions", n, err)
			}
		}
		mustCreateTopic(t, s, "other", 1)

		got, err := s.Topic(ctx, "orders.v1")
		if err != nil {
			t.Fatal(err)
		}
		if got.Name != want.Name || got.ID != want.ID || got.Partitions != 3 || got.Created != want.Created ||
			got.Configs["retention.ms"] != "1000" || len(got.Configs) != 1 {
			t.Fatalf("Topic = %+v, want %+v", got, want)
		}
		if _, err := s.Topic(ctx, "nope"); !errors.Is(err, ErrUnknownTopic) {
			t.Fatalf("Topic(nope): %v, want ErrUnknownTopic", err)
		}
		all, err := s.Topics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if names := strings.Join(TopicNames(all), ","); names != "orders.v1,other" {
			t.Fatalf("TopicNames = %s", names)
		}
		if all["orders.v1"].Name != "orders.v1" || all["orders.v1"].Partitions != 3 {
			t.Fatalf("Topics[orders.v1] = %+v", all["orders.v1"])
		}

		// Grow, never shrink; the rest of the entry is untouched.
		if err := s.SetPartitions(ctx, "orders.v1", 5); err != nil {
			t.Fatal(err)
		}
		for _, n := range []int32{5, 4, 1} {
			if err := s.SetPartitions(ctx, "orders.v1", n); !errors.Is(err, ErrInvalidPartitions) {
				t.Errorf("SetPartitions(%d) from 5: %v, want ErrInvalidPartitions", n, err)
			}
		}
		if err := s.SetPartitions(ctx, "nope", 5); !errors.Is(err, ErrUnknownTopic) {
			t.Errorf("SetPartitions(nope): %v, want ErrUnknownTopic", err)
		}
		got, err = s.Topic(ctx, "orders.v1")
		if err != nil {
			t.Fatal(err)
		}
		if got.Partitions != 5 || got.Created != want.Created || got.ID != id || got.Configs["retention.ms"] != "1000" {
			t.Fatalf("after SetPartitions: %+v", got)
		}
		raw, err := s.Client().HGet(ctx, s.keys.topics(), "orders.v1").Result()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(raw, `"created":1732912345678`) || !strings.Contains(raw, `"partitions":5`) {
			t.Fatalf("registry entry %s", raw)
		}

		if err := s.SetTopicConfigs(ctx, "orders.v1", map[string]string{"cleanup.policy": "delete"}); err != nil {
			t.Fatal(err)
		}
		got, _ = s.Topic(ctx, "orders.v1")
		if got.Configs["cleanup.policy"] != "delete" || len(got.Configs) != 1 || got.Partitions != 5 || got.Created != want.Created {
			t.Fatalf("after SetTopicConfigs: %+v", got)
		}
		if err := s.SetTopicConfigs(ctx, "nope", nil); !errors.Is(err, ErrUnknownTopic) {
			t.Fatalf("SetTopicConfigs(nope): %v, want ErrUnknownTopic", err)
		}
	})
}

// SetTopicConfigs must not write back a partition count another gateway has grown meanwhile.
func TestSetTopicConfigsKeepsConcurrentGrowth(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "grow", 1)
		const final = 40
		var wg sync.WaitGroup
		wg.Go(func() {
			for n := int32(2); n <= final; n++ {
				if err := s.SetPartitions(ctx, "grow", n); err != nil {
					t.Errorf("SetPartitions(%d): %v", n, err)
					return
				}
				// Nobody may ever lower the count again.
				if got, err := s.Topic(ctx, "grow"); err != nil || got.Partitions < n {
					t.Errorf("partitions %d after growing to %d (%v)", got.Partitions, n, err)
					return
				}
			}
		})
		wg.Go(func() {
			for i := range final {
				if err := s.SetTopicConfigs(ctx, "grow", map[string]string{"i": fmt.Sprint(i)}); err != nil {
					t.Errorf("SetTopicConfigs: %v", err)
					return
				}
			}
		})
		wg.Wait()
		got, err := s.Topic(ctx, "grow")
		if err != nil {
			t.Fatal(err)
		}
		if got.Partitions != final || got.Configs["i"] != fmt.Sprint(final-1) {
			t.Fatalf("after concurrent updates: partitions %d configs %v; want %d, i=%d", got.Partitions, got.Configs, final, final-1)
		}
	})
}

func TestDeleteTopic(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "doomed", 2)
		mustCreateTopic(t, s, "kept", 1)
		for p := int32(0); p < 2; p++ {
			mustAppend(t, s, &Batch{Topic: "doomed", Partition: p, Records: plain("v", 3), ProducerID: 7})
		}
		appendOne(t, s, "kept", 0, plain("k", 1)...)
		var partKeys []string
		for p := int32(0); p < 2; p++ {
			partKeys = append(partKeys, s.keys.stream("doomed", p), s.keys.meta("doomed", p),
				s.keys.tindex("doomed", p), s.keys.producers("doomed", p), s.keys.bindex("doomed", p))
			// Producer state as an older kgate kept it, outside the meta hash.
			s.Client().HSet(ctx, s.keys.producers("doomed", p), "8", "0,2,0:2:0")
		}
		for _, k := range partKeys {
			if n := s.Client().Exists(ctx, k).Val(); n != 1 {
				t.Fatalf("before DeleteTopic: EXISTS %s = %d", k, n)
			}
		}
		commits := []OffsetCommit{{Topic: "doomed", Partition: 0, Offset: 3, Metadata: "m"}, {Topic: "doomed", Partition: 1, Offset: 2}, {Topic: "kept", Partition: 0, Offset: 1}}
		for _, group := range []string{"g1", "g2"} {
			for _, err := range s.CommitOffsets(ctx, group, "", commits, time.Now()) {
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := s.DeleteTopic(ctx, "doomed"); err != nil {
			t.Fatal(err)
		}
		// Every group's offsets on the topic went with it (as on Apache), the other topic's stayed.
		for _, group := range []string{"g1", "g2"} {
			cs, err := s.CommittedOffsets(ctx, group)
			if err != nil || len(cs) != 1 || cs[0].Topic != "kept" {
				t.Errorf("group %s after DeleteTopic: %+v, %v; want the offset on kept alone", group, cs, err)
			}
			for _, k := range []string{s.keys.offsetsTS(group), s.keys.offsetsMD(group)} {
				if fs := s.Client().HKeys(ctx, k).Val(); slices.ContainsFunc(fs, func(f string) bool { return strings.Contains(f, "doomed") }) {
					t.Errorf("%s after DeleteTopic: %v", k, fs)
				}
			}
		}
		for _, k := range partKeys {
			if n, err := s.Client().Exists(ctx, k).Result(); err != nil || n != 0 {
				t.Errorf("after DeleteTopic: EXISTS %s = %d, %v", k, n, err)
			}
		}
		if s.Client().HExists(ctx, s.keys.topics(), "doomed").Val() {
			t.Error("registry entry survived DeleteTopic")
		}
		if _, err := s.Topic(ctx, "doomed"); !errors.Is(err, ErrUnknownTopic) {
			t.Errorf("Topic after delete: %v", err)
		}
		if err := s.DeleteTopic(ctx, "doomed"); !errors.Is(err, ErrUnknownTopic) {
			t.Errorf("second DeleteTopic: %v, want ErrUnknownTopic", err)
		}
		if n := s.Client().Exists(ctx, s.keys.stream("kept", 0)).Val(); n != 1 {
			t.Error("DeleteTopic removed another topic's stream")
		}
		// Recreated under the same name, the topic starts empty at offset 0.
		mustCreateTopic(t, s, "doomed", 1)
		if base := appendOne(t, s, "doomed", 0, plain("new", 1)...); base != 0 {
			t.Fatalf("recreated topic: first base offset %d", base)
		}
		if res := mustRead(t, s, "doomed", 0, 0, 10); len(res.Records) != 1 || string(res.Records[0].Value) != "new-0" {
			t.Fatalf("recreated topic reads %+v", res.Records)
		}
	})
}

// TestDeleteTopicID: a delete by topic ID removes the topic only while its registry entry has that
// ID. A topic deleted and created again under the same name (through another gateway, whose
// registry view this one's may lag by a second) keeps its entry and its records.
func TestDeleteTopicID(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		oldID, newID := [16]byte{'o', 'l', 'd'}, [16]byte{'n', 'e', 'w'}
		if err := s.CreateTopic(ctx, Topic{Name: "orders", ID: oldID, Partitions: 2, Created: 1}); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteTopic(ctx, "orders"); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateTopic(ctx, Topic{Name: "orders", ID: newID, Partitions: 1, Created: 2}); err != nil {
			t.Fatal(err)
		}
		appendOne(t, s, "orders", 0, plain("kept", 1)...)

		for _, id := range [][16]byte{oldID, {}} {
			if err := s.DeleteTopicID(ctx, "orders", id); !errors.Is(err, ErrUnknownTopic) {
				t.Fatalf("DeleteTopicID(orders, %x) of the topic with ID %x: %v, want ErrUnknownTopic", id, newID, err)
			}
		}
		if got, err := s.Topic(ctx, "orders"); err != nil || got.ID != newID {
			t.Fatalf("after deletes by other IDs: %+v, %v; want the topic with ID %x", got, err, newID)
		}
		if res := mustRead(t, s, "orders", 0, 0, 10); len(res.Records) != 1 {
			t.Fatalf("after deletes by other IDs: %d records, want 1", len(res.Records))
		}

		if err := s.DeleteTopicID(ctx, "orders", newID); err != nil {
			t.Fatalf("DeleteTopicID with the topic's own ID: %v", err)
		}
		if _, err := s.Topic(ctx, "orders"); !errors.Is(err, ErrUnknownTopic) {
			t.Fatalf("Topic after DeleteTopicID: %v, want ErrUnknownTopic", err)
		}
		if n, err := s.Client().Exists(ctx, s.keys.stream("orders", 0), s.keys.meta("orders", 0)).Result(); err != nil || n != 0 {
			t.Fatalf("%d keys of the deleted topic left (%v)", n, err)
		}
		if err := s.DeleteTopicID(ctx, "orders", newID); !errors.Is(err, ErrUnknownTopic) {
			t.Fatalf("second DeleteTopicID: %v, want ErrUnknownTopic", err)
		}
	})
}

// TestAppendToDeletedTopic: an append still in flight when its topic is deleted (the gateway's view of
// the registry up to a second old) is refused with ErrUnknownPartition and leaves no key behind, alone
// or merged into a run; the topic created again under the same name starts empty, and an idempotent
// producer starts over there. Partitions added later are appendable at once; a topic registered by an
// earlier kgate (no partition meta at creation) still gets its meta from its first append.
func TestAppendToDeletedTopic(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "gone", 1)
		batch := func(pid int64, seq int32, n int) *Batch {
			return &Batch{Topic: "gone", Partition: 0, Records: plain("r", n), ProducerID: pid, ProducerEpoch: 0, BaseSequence: seq, KnownPartition: true}
		}
		if res := s.Append(ctx, []*Batch{batch(5, 0, 2)}); res[0].Err != nil {
			t.Fatal(res[0].Err)
		}
		if err := s.DeleteTopic(ctx, "gone"); err != nil {
			t.Fatal(err)
		}
		for i, r := range s.Append(ctx, []*Batch{batch(5, 2, 3), batch(5, 5, 1)}) {
			if !errors.Is(r.Err, ErrUnknownPartition) {
				t.Fatalf("batch %d to the deleted topic: %+v, want ErrUnknownPartition", i, r)
			}
		}
		keys := []string{s.keys.stream("gone", 0), s.keys.meta("gone", 0), s.keys.tindex("gone", 0), s.keys.producers("gone", 0)}
		if n, err := s.Client().Exists(ctx, keys...).Result(); err != nil || n != 0 {
			t.Fatalf("%d keys of the deleted topic exist (%v)", n, err)
		}
		mustCreateTopic(t, s, "gone", 1)
		res := s.Append(ctx, []*Batch{batch(5, 0, 1)})
		if res[0].Err != nil || res[0].BaseOffset != 0 || res[0].Duplicate {
			t.Fatalf("first append to the topic created again: %+v, want offset 0, not a duplicate", res[0])
		}

		if err := s.SetPartitions(ctx, "gone", 3); err != nil {
			t.Fatal(err)
		}
		added := &Batch{Topic: "gone", Partition: 2, Records: plain("p2", 1), ProducerID: -1, KnownPartition: true}
		if res := s.Append(ctx, []*Batch{added}); res[0].Err != nil || res[0].BaseOffset != 0 {
			t.Fatalf("append to an added partition: %+v", res[0])
		}

		// A topic as an earlier kgate registered it: no "pmeta", no meta hashes until appended to.
		legacy, _ := json.Marshal(Topic{ID: [16]byte{9}, Partitions: 1, Created: 1})
		if err := s.Client().HSet(ctx, s.keys.topics(), "legacy", legacy).Err(); err != nil {
			t.Fatal(err)
		}
		lt, err := s.Topic(ctx, "legacy")
		if err != nil || lt.PartitionMeta != 0 {
			t.Fatalf("legacy topic: %+v, %v", lt, err)
		}
		old := &Batch{Topic: "legacy", Partition: 0, Records: plain("l", 2), ProducerID: -1, KnownPartition: 0 < lt.PartitionMeta}
		if res := s.Append(ctx, []*Batch{old}); res[0].Err != nil || res[0].BaseOffset != 0 {
			t.Fatalf("append to a legacy topic: %+v", res[0])
		}

		// An earlier kgate adds a partition (no meta, pmeta unchanged): appends there create it, and
		// partitions this version adds afterwards are not marked either.
		gt, err := s.Topic(ctx, "gone")
		if err != nil || gt.PartitionMeta != 3 {
			t.Fatalf("topic grown to 3: pmeta %d, %v; want 3", gt.PartitionMeta, err)
		}
		raw := s.Client().HGet(ctx, s.keys.topics(), "gone").Val()
		raw = strings.Replace(raw, `"partitions":3`, `"partitions":4`, 1)
		if err := s.Client().HSet(ctx, s.keys.topics(), "gone", raw).Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.SetPartitions(ctx, "gone", 6); err != nil {
			t.Fatal(err)
		}
		if gt, _ = s.Topic(ctx, "gone"); gt.Partitions != 6 || gt.PartitionMeta != 3 {
			t.Fatalf("after an earlier kgate's partition: %d partitions, pmeta %d; want 6 and 3", gt.Partitions, gt.PartitionMeta)
		}
		for _, p := range []int32{3, 5} {
			b := &Batch{Topic: "gone", Partition: p, Records: plain("x", 1), ProducerID: -1, KnownPartition: p < gt.PartitionMeta}
			if res := s.Append(ctx, []*Batch{b}); res[0].Err != nil {
				t.Fatalf("append to partition %d: %v", p, res[0].Err)
			}
		}

		// A partition whose meta is lost while its stream holds records (not a deleted topic): the
		// refused append takes back only its own entries.
		if err := s.Client().Del(ctx, s.keys.meta("gone", 0)).Err(); err != nil {
			t.Fatal(err)
		}
		if res := s.Append(ctx, []*Batch{batch(6, 0, 4)}); !errors.Is(res[0].Err, ErrUnknownPartition) {
			t.Fatalf("append to a partition without meta: %+v", res[0])
		}
		if n, err := s.Client().XLen(ctx, s.keys.stream("gone", 0)).Result(); err != nil || n != 1 {
			t.Fatalf("the stream holds %d entries (%v), want its 1 record", n, err)
		}
	})
}

// TestCreatePartitionsRacingCreateTopic: partitions added by a call that read the topic before it was
// marked (so wrote no meta for them) are not marked by the count it raises, and take appends.
func TestCreatePartitionsRacingCreateTopic(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "race", 3) // marked: pmeta 3
		// The other gateway's SetPartitions read the topic before the mark: no meta written (-1).
		if err := setPartitionsScript.Run(ctx, s.rdb, []string{s.keys.topics()}, "race", 6, -1, 3).Err(); err != nil {
			t.Fatal(err)
		}
		tp, err := s.Topic(ctx, "race")
		if err != nil || tp.Partitions != 6 || tp.PartitionMeta != 3 {
			t.Fatalf("topic: %d partitions, pmeta %d, %v; want 6 and 3", tp.Partitions, tp.PartitionMeta, err)
		}
		for p := int32(0); p < 6; p++ {
			b := &Batch{Topic: "race", Partition: p, Records: plain("r", 1), ProducerID: -1, KnownPartition: p < tp.PartitionMeta}
			if res := s.Append(ctx, []*Batch{b}); res[0].Err != nil {
				t.Fatalf("append to partition %d: %v", p, res[0].Err)
			}
		}
	})
}

// TestDeleteTopicManyGroups: the groups' offsets on a deleted topic are dropped a batch of groups at a
// time, each within a command timeout: in one pipeline, many groups made every attempt time out after
// the partitions were gone, and the topic stayed listed for good.
func TestDeleteTopicManyGroups(t *testing.T) {
	if standalone == nil {
		t.Skip("KGATE_SKIP_REDIS=1")
	}
	ctx := t.Context()
	s := openStore(t, Options{Addrs: []string{standalone.Addr}, CommandTimeout: 300 * time.Millisecond})
	mustCreateTopic(t, s, "crowded", 32)
	mustCommit(t, s, "real", time.Now(), OffsetCommit{Topic: "crowded", Partition: 7, Offset: 5})
	const groups = 20_000
	names := make([]any, groups)
	for i := range names {
		names[i] = fmt.Sprintf("idle-%d", i)
	}
	if err := s.Client().SAdd(ctx, s.keys.groups(), names...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTopic(ctx, "crowded"); err != nil {
		t.Fatalf("DeleteTopic with %d groups: %v", groups, err)
	}
	if _, err := s.Topic(ctx, "crowded"); !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("topic after DeleteTopic: %v", err)
	}
	if cs, err := s.CommittedOffsets(ctx, "real"); err != nil || len(cs) != 0 {
		t.Fatalf("offsets on the deleted topic: %+v, %v", cs, err)
	}
}

// slowDrops slows each pipeline of HDELs (a deleted topic's offsets being dropped) and calls change
// once, during the first.
type slowDrops struct {
	change func()
	once   sync.Once
}

func (h *slowDrops) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *slowDrops) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *slowDrops) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() == "hdel" {
			h.once.Do(h.change)
			time.Sleep(150 * time.Millisecond)
		}
		return next(ctx, cmds)
	}
}

// TestDeleteTopicEntryChangedDuringDrop: a topic deletion whose registry entry changes while the
// groups' offsets are dropped (partitions added) reads it again with time bounds of its own; sharing
// the first pass's, which the drop had used up, it failed, the topic left listed without partitions.
func TestDeleteTopicEntryChangedDuringDrop(t *testing.T) {
	if standalone == nil {
		t.Skip("KGATE_SKIP_REDIS=1")
	}
	ctx := t.Context()
	s := openStore(t, Options{Addrs: []string{standalone.Addr}, CommandTimeout: 300 * time.Millisecond})
	mustCreateTopic(t, s, "busy", 1)
	names := make([]any, 600) // three batches of groups, each slowed
	for i := range names {
		names[i] = fmt.Sprintf("g-%d", i)
	}
	if err := s.Client().SAdd(ctx, s.keys.groups(), names...).Err(); err != nil {
		t.Fatal(err)
	}
	s.Client().AddHook(&slowDrops{change: func() {
		if err := s.SetPartitions(context.Background(), "busy", 2); err != nil {
			t.Error(err)
		}
	}})
	if err := s.DeleteTopic(ctx, "busy"); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	if _, err := s.Topic(ctx, "busy"); !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("topic after DeleteTopic: %v", err)
	}
}

// TestDeleteTopicNameTakenDuringDrop: the groups' offsets on a deleted topic are dropped while its
// name is still registered, so no topic can be created under it meanwhile and have its fresh commits
// dropped with the old topic's.
func TestDeleteTopicNameTakenDuringDrop(t *testing.T) {
	if standalone == nil {
		t.Skip("KGATE_SKIP_REDIS=1")
	}
	ctx := t.Context()
	s := openStore(t, Options{Addrs: []string{standalone.Addr}})
	mustCreateTopic(t, s, "renamed", 1)
	mustCommit(t, s, "old-group", time.Now(), OffsetCommit{Topic: "renamed", Offset: 3})
	var createErr error
	s.Client().AddHook(&slowDrops{change: func() {
		createErr = s.CreateTopic(context.Background(), Topic{Name: "renamed", Partitions: 1, Created: time.Now().UnixMilli()})
	}})
	if err := s.DeleteTopic(ctx, "renamed"); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(createErr, ErrTopicExists) {
		t.Fatalf("create under the name while its offsets were dropped: %v, want ErrTopicExists", createErr)
	}
	// The refused create wrote no meta: left after the deletion's UNLINK, it would take appends through
	// a view of the deleted topic, for the topic created next under the name.
	if n, err := s.Client().Exists(ctx, s.keys.meta("renamed", 0)).Result(); err != nil || n != 0 {
		t.Fatalf("the deleted topic's meta hash is back (%d, %v)", n, err)
	}
}

// resendRegistryScripts runs every script on the topic registry twice while on, as go-redis's cluster
// client resends a command whose connection failed after Redis ran it (its first reply lost).
type resendRegistryScripts struct {
	key    string
	on     atomic.Bool
	resent atomic.Int32
}

func (h *resendRegistryScripts) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *resendRegistryScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *resendRegistryScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if h.on.Load() && (cmd.Name() == "evalsha" || cmd.Name() == "eval") && len(args) > 3 && args[3] == h.key {
			if err := next(ctx, cmd); err != nil {
				return err
			}
			h.resent.Add(1)
		}
		return next(ctx, cmd)
	}
}

// TestSetPartitionsResent: a SetPartitions whose script runs twice (a resend after a lost reply)
// succeeds: the second run finds the count it asked for, grown from the one it read, and takes it as
// its own change, where it answered ErrInvalidPartitions (CreatePartitions' INVALID_PARTITIONS) for a
// change that was made. A request for no more than the count it read is still refused.
func TestSetPartitionsResent(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "resent", 3)
		h := &resendRegistryScripts{key: s.keys.topics()}
		s.Client().AddHook(h)
		h.on.Store(true)
		if err := s.SetPartitions(ctx, "resent", 5); err != nil {
			t.Fatalf("SetPartitions(5) run twice: %v", err)
		}
		if h.resent.Load() == 0 {
			t.Fatal("the script was not run twice")
		}
		tp, err := s.Topic(ctx, "resent")
		if err != nil || tp.Partitions != 5 || tp.PartitionMeta != 5 {
			t.Fatalf("topic: %d partitions, pmeta %d, %v; want 5 and 5", tp.Partitions, tp.PartitionMeta, err)
		}
		for _, n := range []int32{5, 4} {
			if err := s.SetPartitions(ctx, "resent", n); !errors.Is(err, ErrInvalidPartitions) {
				t.Errorf("SetPartitions(%d) from 5, run twice: %v, want ErrInvalidPartitions", n, err)
			}
		}
	})
}

// TestCreateTopicResent: a CreateTopic whose registration script runs twice (go-redis's cluster client
// resends it after a lost reply) succeeds, the topic registered whole: the second run finds the entry
// the first wrote, the request's own (its topic ID). It answered ErrTopicExists
// (TOPIC_ALREADY_EXISTS) for a topic it had created. Another request for the name is still refused.
func TestCreateTopicResent(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		h := &resendRegistryScripts{key: s.keys.topics()}
		s.Client().AddHook(h)
		h.on.Store(true)
		tp := Topic{Name: "resent", ID: [16]byte{1}, Partitions: 2, Created: time.Now().UnixMilli()}
		if err := s.CreateTopic(ctx, tp); err != nil {
			t.Fatalf("CreateTopic run twice: %v", err)
		}
		if h.resent.Load() == 0 {
			t.Fatal("the script was not run twice")
		}
		got, err := s.Topic(ctx, "resent")
		if err != nil || got.ID != tp.ID || got.Partitions != 2 || got.PartitionMeta != 2 {
			t.Fatalf("topic: %+v, %v; want ID 1, 2 partitions, pmeta 2", got, err)
		}
		tp.ID = [16]byte{2}
		if err := s.CreateTopic(ctx, tp); !errors.Is(err, ErrTopicExists) {
			t.Fatalf("CreateTopic of another topic under the name, run twice: %v, want ErrTopicExists", err)
		}
	})
}

// DeleteTopic frees a partition's keys with UNLINK, one per partition (its keys share a slot; sent
// alone, or by deletePartitionScript), never DEL: a stream of millions of entries is then freed on
// Redis's background thread, where DEL would stall Redis for every client while it frees them.
func TestDeleteTopicUnlinks(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Store) {
		mustCreateTopic(t, s, "unlinked", 3)
		for p := range int32(3) {
			appendOne(t, s, "unlinked", p, plain("u", 2)...)
		}
		var mu sync.Mutex
		var sent [][]string // every command's name and keys, during the delete
		s.Client().AddHook(pipelineHook(func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
			mu.Lock()
			for _, c := range cmds {
				var args []string
				for _, a := range c.Args() {
					args = append(args, fmt.Sprint(a))
				}
				sent = append(sent, args)
			}
			mu.Unlock()
			return next(ctx, cmds)
		}))
		if err := s.DeleteTopic(t.Context(), "unlinked"); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		unlinked := map[string]bool{}
		for _, args := range sent {
			switch strings.ToLower(args[0]) {
			case "unlink":
				for _, k := range args[1:] {
					unlinked[k] = true
				}
			case "eval":
				// The script's keys follow its text and their count.
				if script := args[1]; strings.Contains(script, "'UNLINK', unpack(KEYS)") && !strings.Contains(strings.ToUpper(script), "'DEL'") {
					for _, k := range args[3:] {
						unlinked[k] = true
					}
				}
			case "del":
				t.Errorf("DeleteTopic sent %v", args)
			}
		}
		for p := range int32(3) {
			for _, k := range []string{s.keys.stream("unlinked", p), s.keys.meta("unlinked", p), s.keys.tindex("unlinked", p),
				s.keys.producers("unlinked", p), s.keys.bindex("unlinked", p)} {
				if !unlinked[k] {
					t.Errorf("%s was not unlinked (commands sent: %q)", k, sent)
				}
			}
		}
	})
}

// TestCreateTopicCollides: CreateTopic refuses a name that differs from a registered topic's only in
// '.' and '_' (a *CollisionError naming it), checked and registered in one script on the registry's
// slot (the cluster too); deleting the topic frees the form, and so does an entry an earlier version
// deleted (the registry entry gone, the index's left).
func TestCreateTopicCollides(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "orders.v1", 2)
		var ce *CollisionError
		if err := s.CreateTopic(ctx, Topic{Name: "orders_v1", Partitions: 1}); !errors.As(err, &ce) || ce.Other != "orders.v1" || !errors.Is(err, ErrTopicCollides) {
			t.Fatalf("create orders_v1 beside orders.v1: %v, want a collision with orders.v1", err)
		}
		if err := s.CreateTopic(ctx, Topic{Name: "orders.v1", Partitions: 1}); !errors.Is(err, ErrTopicExists) {
			t.Fatalf("create orders.v1 again: %v, want ErrTopicExists", err)
		}
		if n, err := s.Client().Exists(ctx, s.keys.meta("orders_v1", 0)).Result(); err != nil || n != 0 {
			t.Fatalf("the refused name got a meta hash (%d, %v)", n, err)
		}
		if err := s.DeleteTopic(ctx, "orders.v1"); err != nil {
			t.Fatal(err)
		}
		mustCreateTopic(t, s, "orders_v1", 1)
		// An earlier version deletes the registry entry alone: the index entry left names a topic
		// that is gone, and does not hold the form.
		if err := s.Client().HDel(ctx, s.keys.topics(), "orders_v1").Err(); err != nil {
			t.Fatal(err)
		}
		mustCreateTopic(t, s, "orders.v1", 1)
		if err := s.CreateTopic(ctx, Topic{Name: "orders_v1", Partitions: 1}); !errors.As(err, &ce) || ce.Other != "orders.v1" {
			t.Fatalf("create orders_v1 after orders.v1 took the form over: %v", err)
		}
	})
}

// TestDeleteTopicPassAgainUnlinks: a deletion whose registry entry changed under it (so it runs a
// second pass) removes the partitions' keys again in that pass: an append that came between, through
// a view of the topic from an earlier version (no pmeta, so the append makes the partition's keys),
// left its records for the topic created next under the name.
func TestDeleteTopicPassAgainUnlinks(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		// As an earlier version registers a topic: no pmeta, no meta hashes.
		if err := s.Client().HSet(ctx, s.keys.topics(), "again", `{"id":[1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],"partitions":1,"created":1}`).Err(); err != nil {
			t.Fatal(err)
		}
		appendOne(t, s, "again", 0, plain("old", 1)...)
		var once sync.Once
		s.Client().AddHook(processHook(func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
			for _, a := range cmd.Args() {
				if a == s.keys.topicForms() { // the registry entry's removal: the first pass is done
					once.Do(func() {
						appendOne(t, s, "again", 0, plain("late", 1)...)
						if err := s.SetTopicConfigs(ctx, "again", map[string]string{"retention.ms": "1"}); err != nil {
							t.Error(err)
						}
					})
				}
			}
			return next(ctx, cmd)
		}))
		if err := s.DeleteTopic(ctx, "again"); err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{s.keys.stream("again", 0), s.keys.meta("again", 0)} {
			if n, err := s.Client().Exists(ctx, key).Result(); err != nil || n != 0 {
				t.Errorf("%s left after the deletion (%d, %v)", key, n, err)
			}
		}
	})
}
