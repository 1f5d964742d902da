package redisstore

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestOwnerFencesOffsetWrites: the writes of a group's offsets (commits, an offset's deletion, the
// group's deletion) are stored only while the group's owner record names the writer, or the group has
// none (a group only gateways of an earlier version wrote); a refused write changes nothing, sidecar
// and metadata included. On every store: the scripts run on Redis, a Redis Cluster (the owner record
// and the offset hashes share the group's slot) and the embedded store.
func TestOwnerFencesOffsetWrites(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		mustCreateTopic(t, s, "owned", 2)
		commit := func(group, owner string, offset int64, md string) error {
			errs := s.CommitOffsets(ctx, group, owner, []OffsetCommit{
				{Topic: "owned", Partition: 0, Offset: offset, Metadata: md},
				{Topic: "owned", Partition: 1, Offset: offset + 1},
			}, time.UnixMilli(offset*1000))
			if (errs[0] == nil) != (errs[1] == nil) || errors.Is(errs[0], ErrNotOwner) != errors.Is(errs[1], ErrNotOwner) {
				t.Fatalf("commit of %d by %q: partitions answered apart: %v / %v", offset, owner, errs[0], errs[1])
			}
			return errs[0]
		}
		wantOffsets := func(group string, offset int64, md string) {
			t.Helper()
			got := mustCommitted(t, s, group)
			p0, p1 := got["owned/0"], got["owned/1"]
			if len(got) != 2 || p0.Offset != offset || p0.Metadata != md || p0.CommitTime != offset*1000 || p1.Offset != offset+1 {
				t.Fatalf("%s: %+v, want offsets %d and %d, metadata %q, commit time %d", group, got, offset, offset+1, md, offset*1000)
			}
		}

		// No owner record: any writer (gateways of an earlier version wrote the group).
		if err := commit("g", "gw-a/1", 3, "a"); err != nil {
			t.Fatal(err)
		}
		wantOffsets("g", 3, "a")

		// Claimed by A: A writes, B is refused and changes nothing.
		mustClaim(t, s, "g", "gw-a/1", "")
		if err := commit("g", "gw-a/1", 4, "a4"); err != nil {
			t.Fatal(err)
		}
		if err := commit("g", "gw-b/1", 2, "b"); !errors.Is(err, ErrNotOwner) {
			t.Fatalf("commit by B while A owns the group: %v, want ErrNotOwner", err)
		}
		wantOffsets("g", 4, "a4")

		// B claims: A's write, validated under its claim, is refused now.
		mustClaim(t, s, "g", "gw-b/1", "gw-a/1")
		if err := commit("g", "gw-a/1", 5, ""); !errors.Is(err, ErrNotOwner) {
			t.Fatalf("commit by A after B claimed: %v, want ErrNotOwner", err)
		}
		if err := s.DeleteOffsets(ctx, "g", "gw-a/1", []OffsetCommit{{Topic: "owned", Partition: 0}}); !errors.Is(err, ErrNotOwner) {
			t.Fatalf("offset deletion by A after B claimed: %v, want ErrNotOwner", err)
		}
		if err := s.DeleteGroup(ctx, "g", "gw-a/1"); !errors.Is(err, ErrNotOwner) {
			t.Fatalf("group deletion by A after B claimed: %v, want ErrNotOwner", err)
		}
		wantOffsets("g", 4, "a4")

		// B's deletions go through; the owner record stays, so A's late commit does not bring the
		// deleted offsets back.
		if err := s.DeleteOffsets(ctx, "g", "gw-b/1", []OffsetCommit{{Topic: "owned", Partition: 1}}); err != nil {
			t.Fatal(err)
		}
		if got := mustCommitted(t, s, "g"); len(got) != 1 || got["owned/0"].Offset != 4 {
			t.Fatalf("after B deleted partition 1's offset: %+v", got)
		}
		if err := s.DeleteGroup(ctx, "g", "gw-b/1"); err != nil {
			t.Fatal(err)
		}
		if err := commit("g", "gw-a/1", 6, ""); !errors.Is(err, ErrNotOwner) {
			t.Fatalf("commit by A after B deleted the group: %v, want ErrNotOwner", err)
		}
		if exists, err := s.GroupExists(ctx, "g"); err != nil || exists {
			t.Fatalf("group after B deleted it and A's commit was refused: exists %v (%v)", exists, err)
		}
		ownerKey := s.keys.owner("g")
		if ttl, err := s.Client().PTTL(ctx, ownerKey).Result(); err != nil || ttl <= 0 || ttl > ownerFor {
			t.Fatalf("owner record's time to live: %v (%v), want up to %v", ttl, err, ownerFor)
		}
		// The record shares the offsets' slot.
		if !strings.Contains(ownerKey, "{"+GroupTag("g")+"}") {
			t.Fatalf("owner key %q lacks the group's hash tag", ownerKey)
		}

		// An empty owner writes whatever the record says (tools, tests).
		if err := commit("g", "", 7, "tool"); err != nil {
			t.Fatal(err)
		}
		wantOffsets("g", 7, "tool")
	})
}

// mustClaim claims group with token, having seen seen hold it, and fails the test unless it did.
func mustClaim(t *testing.T, s *Store, group, token, seen string) {
	t.Helper()
	if holder, err := s.ClaimGroup(t.Context(), group, token, seen); err != nil || holder != "" {
		t.Fatalf("claim of %s by %s (seen %q): held by %q (%v)", group, token, seen, holder, err)
	}
}

// TestClaimGroupYieldsOnlyToWhatItSaw: a claim replaces no claim its claimant did not see, except an
// older one of its own instance, so that a claim held up on its way lands over no claim made after it
// was sent; a claimant that saw the holder (its last refusal) takes the group over at once, without
// waiting for the record to expire. On every store.
func TestClaimGroupYieldsOnlyToWhatItSaw(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		refused := func(token, seen, want string) {
			t.Helper()
			holder, err := s.ClaimGroup(ctx, "g", token, seen)
			if err != nil || holder != want {
				t.Fatalf("claim by %s (seen %q): held by %q (%v), want refused for %q", token, seen, holder, err, want)
			}
			if now := s.Client().Get(ctx, s.OwnerKey("g")).Val(); now != want {
				t.Fatalf("record after a refused claim: %q, want %q", now, want)
			}
		}
		mustClaim(t, s, "g", "gw-a/2", "")        // no record
		mustClaim(t, s, "g", "gw-a/2", "")        // its own (sent again)
		mustClaim(t, s, "g", "gw-a/10", "")       // an older claim of its instance (10 > 2 as numbers)
		refused("gw-a/9", "", "gw-a/10")          // a newer claim of its instance: held up on its way
		refused("gw-b/1", "", "gw-a/10")          // another instance's claim, not seen
		refused("gw-b/2", "gw-a/9", "gw-a/10")    // another claim than the one seen
		mustClaim(t, s, "g", "gw-b/3", "gw-a/10") // the claim seen: taken over
		refused("gw-a/11", "", "gw-b/3")          // A's claim sent before B's, landing after it
		refused("gw-a/11", "gw-a/10", "gw-b/3")   // A's, having seen its own earlier claim
		if ttl := s.Client().PTTL(ctx, s.OwnerKey("g")).Val(); ttl <= ownerFor-time.Minute || ttl > ownerFor {
			t.Fatalf("record's time to live after the takeover: %v, want %v", ttl, ownerFor)
		}
		if err := s.Client().Set(ctx, s.OwnerKey("g"), "unparsed", 0).Err(); err != nil {
			t.Fatal(err)
		}
		refused("gw-b/4", "", "unparsed") // not a claim of this version's form: taken over only seen
		mustClaim(t, s, "g", "gw-b/4", "unparsed")
	})
}

// TestCommitOffsetsManyPartitions: a commit (and a deletion) of thousands of partitions is written
// whole by its script: more than Lua's unpack takes at once, were they passed to one variadic call.
func TestCommitOffsetsManyPartitions(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Store) {
		const n = 5000
		commits := make([]OffsetCommit, n)
		for i := range commits {
			commits[i] = OffsetCommit{Topic: "wide", Partition: int32(i), Offset: int64(i), Metadata: "m"}
		}
		mustCommit(t, s, "wide-group", time.Now(), commits...)
		got := mustCommitted(t, s, "wide-group")
		if len(got) != n || got["wide/4999"].Offset != 4999 || got["wide/4999"].Metadata != "m" || got["wide/0"].CommitTime < 0 {
			t.Fatalf("%d partitions committed, last %+v", len(got), got["wide/4999"])
		}
		if err := s.DeleteOffsets(t.Context(), "wide-group", "", commits); err != nil {
			t.Fatal(err)
		}
		if got := mustCommitted(t, s, "wide-group"); len(got) != 0 {
			t.Fatalf("%d partitions left after deleting all", len(got))
		}
	})
}

// TestEmbeddedKeysExpire: the embedded store counts key TTLs down with real time, as Redis does, so a
// group's owner record (a day's TTL) goes in time there too; it kept every group ever claimed for the
// life of the process.
func TestEmbeddedKeysExpire(t *testing.T) {
	s := openEmbedded(t)
	ctx := t.Context()
	mustClaim(t, s, "g", "gw/1", "")
	if ttl := s.Client().PTTL(ctx, s.OwnerKey("g")).Val(); ttl <= 0 {
		t.Fatalf("owner record TTL %v, want one", ttl)
	}
	if err := s.Client().Set(ctx, "short", "v", 100*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	s.probes.Go(func() { s.expireEmbedded(20 * time.Millisecond) }) // Open's runs once a minute
	checkFor(t, 5*time.Second, func() error {
		if n := s.Client().Exists(ctx, "short").Val(); n != 0 {
			return fmt.Errorf("a key past its TTL is still there")
		}
		return nil
	})
}
