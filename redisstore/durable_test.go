package redisstore

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kgate/kgate/internal/redistest"
)

// startReplicated starts a master with one replica of its own (not the shared servers: WAIT counts
// replicas) and waits until the replica is in sync.
func startReplicated(t *testing.T) (master, replica *redistest.Server) {
	t.Helper()
	if standalone == nil {
		t.Skip("KGATE_SKIP_REDIS=1")
	}
	master, err := redistest.Start("--repl-diskless-sync-delay", "0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(master.Stop)
	host, port, _ := net.SplitHostPort(master.Addr)
	replica, err = redistest.Start("--replicaof", host, port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(replica.Stop)
	s := openStore(t, Options{Addrs: []string{replica.Addr}})
	checkFor(t, 10*time.Second, func() error {
		info := s.Client().Info(t.Context(), "replication").Val()
		if !strings.Contains(info, "master_link_status:up") {
			return fmt.Errorf("replica not in sync: %s", info)
		}
		return nil
	})
	return master, replica
}

// replicatedStores starts a master with a replica of its own (startReplicated) and opens s, waiting for
// that replica on the master, and onReplica, reading the replica's copy of the same keys.
func replicatedStores(t *testing.T) (master, replica *redistest.Server, s, onReplica *Store) {
	t.Helper()
	master, replica = startReplicated(t)
	s = openStore(t, Options{Addrs: []string{master.Addr}, WaitReplicas: 1, WaitTimeout: 5 * time.Second})
	return master, replica, s, openStore(t, Options{Addrs: []string{replica.Addr}, Namespace: s.Namespace()})
}

func TestDurableAppendStandalone(t *testing.T) {
	t.Parallel()
	master, replica, s, onReplica := replicatedStores(t)
	ctx, ns := t.Context(), s.Namespace() // every store below works on the same keys
	mustCreateTopic(t, s, "dur", 3)

	// Confirmed by the replica: when Append returns, the replica holds the records.
	for round := range 3 {
		var batches []*Batch
		for p := range int32(3) {
			batches = append(batches, &Batch{Topic: "dur", Partition: p, Records: plain("r", 2), ProducerID: -1, Durable: true})
		}
		for i, res := range s.Append(ctx, batches) {
			if res.Err != nil || res.BaseOffset != int64(2*round) {
				t.Fatalf("round %d batch %d: %+v", round, i, res)
			}
		}
		for p := range int32(3) {
			if n := onReplica.Client().XLen(ctx, s.keys.stream("dur", p)).Val(); n != int64(2*round+2) {
				t.Fatalf("round %d: replica has %d records of partition %d right after Append", round, n, p)
			}
		}
	}

	// More replicas than exist: written, but not confirmed.
	two := openStore(t, Options{Addrs: []string{master.Addr}, Namespace: ns, WaitReplicas: 2, WaitTimeout: 50 * time.Millisecond})
	res := two.Append(ctx, []*Batch{{Topic: "dur", Records: plain("x", 1), ProducerID: -1, Durable: true}})[0]
	if !errors.Is(res.Err, ErrNotDurable) || IsUnavailable(res.Err) {
		t.Fatalf("WaitReplicas 2 with one replica: %+v, want ErrNotDurable", res)
	}
	if offs, _ := s.PartitionOffsets(ctx, "dur", []int32{0}); offs[0].End != 7 {
		t.Fatalf("the unconfirmed write is missing: %+v", offs)
	}
	// Only Durable batches (acks=all) wait: beside one that is not confirmed, a batch that is not
	// Durable (acks=1) succeeds once Redis applied it, and alone it does not wait at all. (It was told
	// NOT_ENOUGH_REPLICAS_AFTER_APPEND, and a retry stored it twice.)
	mixed := two.Append(ctx, []*Batch{
		{Topic: "dur", Partition: 1, Records: plain("d", 1), ProducerID: -1, Durable: true},
		{Topic: "dur", Partition: 2, Records: plain("n", 1), ProducerID: -1},
	})
	if !errors.Is(mixed[0].Err, ErrNotDurable) || mixed[1].Err != nil || mixed[1].BaseOffset != 6 {
		t.Fatalf("a Durable and a plain batch, WaitReplicas 2 with one replica: %+v", mixed)
	}
	if res := two.Append(ctx, []*Batch{{Topic: "dur", Partition: 2, Records: plain("n", 1), ProducerID: -1}})[0]; res.Err != nil || res.BaseOffset != 7 {
		t.Fatalf("a plain batch alone, WaitReplicas 2: %+v", res)
	}

	// A stalled replica confirms nothing, also under concurrent appends sharing the pool. (WAIT must
	// run on the connection that wrote: on a connection that has not written since the stall it would
	// return at once with the replica counted. The pool's LIFO order usually hands back the writing
	// connection anyway, so this cannot reliably catch an unpinned WAIT; appendDurable pins by design.)
	if err := replica.Pause(); err != nil {
		t.Skip("cannot pause a server here:", err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			replica.Resume()
		}
	}
	t.Cleanup(resume)
	stalled := openStore(t, Options{Addrs: []string{master.Addr}, Namespace: ns, WaitReplicas: 1, WaitTimeout: 100 * time.Millisecond})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var confirmed int
	for w := range 4 {
		wg.Go(func() {
			for range 2 {
				res := stalled.Append(ctx, []*Batch{{Topic: "dur", Partition: int32(w % 3), Records: plain("s", 1), ProducerID: -1, Durable: true}})[0]
				if !errors.Is(res.Err, ErrNotDurable) {
					mu.Lock()
					confirmed++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	resume()
	if confirmed > 0 {
		t.Fatalf("%d appends were confirmed while the replica was stalled", confirmed)
	}
}

// On a cluster, batches are grouped by master and each group waits on its own connection; with no
// replicas every batch is written but none is confirmed, and results keep the order of the batches.
func TestDurableAppendCluster(t *testing.T) {
	t.Parallel()
	s := openStore(t, backendOptions(t, "cluster"))
	s.opts.WaitReplicas = 1
	s.opts.WaitTimeout = 30 * time.Millisecond
	const parts = 8
	mustCreateTopic(t, s, "durc", parts)
	var batches []*Batch
	for p := range int32(parts) {
		batches = append(batches, &Batch{Topic: "durc", Partition: p, Records: plain("r", int(p)+1), ProducerID: -1, Durable: true})
	}
	batches = append(batches, &Batch{Topic: "durc", Partition: 3, Records: plain("again", 1), ProducerID: -1, Durable: true})
	res := s.Append(t.Context(), batches)
	for i, r := range res {
		if !errors.Is(r.Err, ErrNotDurable) {
			t.Errorf("batch %d: %+v, want ErrNotDurable", i, r)
		}
	}
	parts32 := make([]int32, parts)
	for p := range parts32 {
		parts32[p] = int32(p)
	}
	offs, err := s.PartitionOffsets(t.Context(), "durc", parts32)
	if err != nil {
		t.Fatal(err)
	}
	for p, o := range offs {
		want := int64(p) + 1
		if p == 3 {
			want++
		}
		if o.End != want {
			t.Errorf("partition %d: end %d, want %d", p, o.End, want)
		}
	}
	if last := mustRead(t, s, "durc", 3, 4, 1); len(last.Records) != 1 || string(last.Records[0].Value) != "again-0" {
		t.Errorf("second batch of partition 3 not after the first: %+v", last.Records)
	}
}

// With WaitReplicas a commit is confirmed as an append is: when CommitOffsets returns, the replica
// holds the offsets, and an unconfirmed commit reports ErrNotDurable (the client commits again) while
// the master keeps it. Before, commits never waited: a failover right after lost commits the group
// was told were stored.
func TestDurableCommitStandalone(t *testing.T) {
	t.Parallel()
	master, replica, s, onReplica := replicatedStores(t)
	ctx, ns := t.Context(), s.Namespace() // every store below works on the same keys
	mustCreateTopic(t, s, "durcommit", 2)
	commits := []OffsetCommit{{Topic: "durcommit", Partition: 0, Offset: 5}, {Topic: "durcommit", Partition: 1, Offset: 7}}
	for i, err := range s.CommitOffsets(ctx, "g", "", commits, time.Now()) {
		if err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	// Read straight from the replica's copy of the canonical hash, with no wait of its own.
	if got := onReplica.Client().HGet(ctx, s.keys.offsets("g"), s.keys.stream("durcommit", 1)).Val(); got != "7" {
		t.Fatalf("the replica holds %q for partition 1 right after the commit, want 7", got)
	}

	if err := replica.Pause(); err != nil {
		t.Skip("cannot pause a server here:", err)
	}
	defer replica.Resume()
	stalled := openStore(t, Options{Addrs: []string{master.Addr}, Namespace: ns, WaitReplicas: 1, WaitTimeout: 100 * time.Millisecond})
	for i, err := range stalled.CommitOffsets(ctx, "g", "", []OffsetCommit{{Topic: "durcommit", Partition: 0, Offset: 9}}, time.Now()) {
		if !errors.Is(err, ErrNotDurable) {
			t.Fatalf("commit %d with the replica stalled: %v, want ErrNotDurable", i, err)
		}
	}
	// A group's first commit, stored but not confirmed, is listed all the same (ListGroups, and the
	// deletion of a topic's offsets, find groups through the index).
	for i, err := range stalled.CommitOffsets(ctx, "new-group", "", []OffsetCommit{{Topic: "durcommit", Partition: 1, Offset: 2}}, time.Now()) {
		if !errors.Is(err, ErrNotDurable) {
			t.Fatalf("new group's commit %d with the replica stalled: %v, want ErrNotDurable", i, err)
		}
	}
	if ok, err := s.Client().SIsMember(ctx, s.keys.groups(), "new-group").Result(); err != nil || !ok {
		t.Fatalf("a group whose commit is stored but not confirmed is not in the groups index (%v)", err)
	}
	got, err := s.CommittedOffsets(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range got {
		if c.Partition == 0 && c.Offset != 9 {
			t.Fatalf("the master holds offset %d for partition 0, want the unconfirmed 9", c.Offset)
		}
	}
}

// On a cluster the commit waits on a connection to the group's master: with no replicas it is
// written but never confirmed.
func TestDurableCommitCluster(t *testing.T) {
	t.Parallel()
	s := openStore(t, backendOptions(t, "cluster"))
	s.opts.WaitReplicas = 1
	s.opts.WaitTimeout = 30 * time.Millisecond
	mustCreateTopic(t, s, "durcc", 1)
	for i, err := range s.CommitOffsets(t.Context(), "g", "", []OffsetCommit{{Topic: "durcc", Partition: 0, Offset: 3}}, time.Now()) {
		if !errors.Is(err, ErrNotDurable) {
			t.Fatalf("commit %d: %v, want ErrNotDurable", i, err)
		}
	}
}

// A durable commit goes to the group's master on a node client, which does not follow MOVED: after
// the group's slot moved, the first commit fails (retriable) and reloads the slot map, so the next
// one reaches the new master rather than failing until some periodic reload.
func TestDurableCommitAfterSlotMoved(t *testing.T) {
	s := openStore(t, Options{Addrs: cluster.Addrs(), Cluster: true, WaitReplicas: 1, WaitTimeout: 30 * time.Millisecond})
	ctx := t.Context()
	mustCreateTopic(t, s, "durmoved", 1)
	commit := func(offset int64) error {
		return s.CommitOffsets(ctx, "moving-group", "", []OffsetCommit{{Topic: "durmoved", Partition: 0, Offset: offset}}, time.Now())[0]
	}
	// No replicas in the test cluster: a commit that reached its master reports ErrNotDurable.
	if err := commit(1); !errors.Is(err, ErrNotDurable) {
		t.Fatalf("commit before the move: %v", err)
	}
	startSlotMove(t, s.keys.offsets("moving-group")).finish()
	if err := commit(2); !redis.HasErrorPrefix(err, "MOVED") || !IsUnavailable(err) {
		t.Fatalf("first commit after the move: %v, want a retriable MOVED", err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for err := commit(3); !errors.Is(err, ErrNotDurable); err = commit(3) {
		if time.Now().After(deadline) {
			t.Fatalf("commits still fail 2 s after the slot moved: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDurableAOF: with WaitAOF, a durable append and a commit are confirmed by the server's AOF fsync
// (WAITAOF, Redis 7.2+: here valkey-server); with the AOF turned off the server refuses WAITAOF, and
// the append and the commit, written all the same, are reported not durable (the producer's retry is
// answered as a duplicate), not as a Redis failure.
func TestDurableAOF(t *testing.T) {
	if _, err := exec.LookPath("valkey-server"); err != nil {
		if os.Getenv("CI") == "" {
			t.Skip("valkey-server not installed")
		}
		t.Fatal("valkey-server not installed")
	}
	srv, err := redistest.StartBinary("valkey-server", "--appendonly", "yes", "--appendfsync", "always")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	ctx := t.Context()
	s := openStore(t, Options{Addrs: []string{srv.Addr}, WaitAOF: true, WaitTimeout: 2 * time.Second})
	mustCreateTopic(t, s, "aof", 1)
	var seq int32
	b := idempotentBatch("aof", 0, &seq, 3)
	b.Durable = true
	if res := mustAppend(t, s, b); res.BaseOffset != 0 {
		t.Fatalf("confirmed append at %d, want 0", res.BaseOffset)
	}
	for i, err := range s.CommitOffsets(ctx, "aofgroup", "", []OffsetCommit{{Topic: "aof", Partition: 0, Offset: 3}}, time.Now()) {
		if err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}

	if err := s.Client().ConfigSet(ctx, "appendonly", "no").Err(); err != nil {
		t.Fatal(err)
	}
	next := idempotentBatch("aof", 0, &seq, 2)
	next.Durable = true
	if res := s.Append(ctx, []*Batch{next})[0]; !errors.Is(res.Err, ErrNotDurable) {
		t.Fatalf("append with the AOF off: %v, want ErrNotDurable", res.Err)
	}
	checkDense(t, s, "aof", 0, 5) // written all the same
	retry := &Batch{Topic: "aof", ProducerID: next.ProducerID, BaseSequence: next.BaseSequence, Records: plain("v", 2)}
	if res := mustAppend(t, s, retry); !res.Duplicate || res.BaseOffset != 3 {
		t.Fatalf("the producer's retry: %+v, want a duplicate at 3", res)
	}
	for i, err := range s.CommitOffsets(ctx, "aofgroup", "", []OffsetCommit{{Topic: "aof", Partition: 0, Offset: 5}}, time.Now()) {
		if !errors.Is(err, ErrNotDurable) {
			t.Fatalf("commit %d with the AOF off: %v, want ErrNotDurable", i, err)
		}
	}
	if got, err := s.CommittedOffsets(ctx, "aofgroup"); err != nil || len(got) != 1 || got[0].Offset != 5 {
		t.Fatalf("committed %+v (%v), want 5: written, not confirmed", got, err)
	}
}

// TestDurableDeleteStandalone: with WaitReplicas, DeleteOffsets and DeleteGroup are confirmed by the
// replica as a commit is: once they return, the replica no longer holds the offsets; with the replica
// stalled they report ErrNotDurable (deleted on the master, not confirmed). Before, a deletion was not
// waited for, and a failover right after it could bring the offsets back.
func TestDurableDeleteStandalone(t *testing.T) {
	t.Parallel()
	master, replica, s, onReplica := replicatedStores(t)
	ctx, ns := t.Context(), s.Namespace() // every store below works on the same keys
	mustCreateTopic(t, s, "durdel", 2)
	commits := []OffsetCommit{{Topic: "durdel", Partition: 0, Offset: 5}, {Topic: "durdel", Partition: 1, Offset: 7}}
	for _, group := range []string{"g", "stalled"} {
		for i, err := range s.CommitOffsets(ctx, group, "", commits, time.Now()) {
			if err != nil {
				t.Fatalf("commit %s %d: %v", group, i, err)
			}
		}
	}
	if err := s.DeleteOffsets(ctx, "g", "", commits[:1]); err != nil {
		t.Fatal(err)
	}
	// Read straight from the replica's copy, with no wait of its own.
	if got := onReplica.Client().HExists(ctx, s.keys.offsets("g"), s.keys.stream("durdel", 0)).Val(); got {
		t.Fatal("the replica still holds partition 0's offset right after DeleteOffsets")
	}
	if err := s.DeleteGroup(ctx, "g", ""); err != nil {
		t.Fatal(err)
	}
	if n := onReplica.Client().Exists(ctx, s.keys.offsets("g")).Val(); n != 0 {
		t.Fatal("the replica still holds the group's offsets right after DeleteGroup")
	}

	if err := replica.Pause(); err != nil {
		t.Skip("cannot pause a server here:", err)
	}
	defer replica.Resume()
	stalled := openStore(t, Options{Addrs: []string{master.Addr}, Namespace: ns, WaitReplicas: 1, WaitTimeout: 100 * time.Millisecond})
	if err := stalled.DeleteOffsets(ctx, "stalled", "", commits[:1]); !errors.Is(err, ErrNotDurable) {
		t.Fatalf("DeleteOffsets with the replica stalled: %v, want ErrNotDurable", err)
	}
	if err := stalled.DeleteGroup(ctx, "stalled", ""); !errors.Is(err, ErrNotDurable) {
		t.Fatalf("DeleteGroup with the replica stalled: %v, want ErrNotDurable", err)
	}
	if ok, err := s.GroupExists(ctx, "stalled"); err != nil || ok {
		t.Fatalf("the group's offsets are still on the master (%v)", err)
	}
}
