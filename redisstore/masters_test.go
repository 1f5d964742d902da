package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kgate/kgate/internal/redistest"
)

// serverTrips counts the pipelines s sends to each Redis server (a cluster client's node clients, one
// per master it reaches), single commands counted as pipelines of one: the round trips. A new
// connection's handshake (HELLO, CLIENT SETINFO) is not counted: whether a call finds its connections
// open is the pool's timing, not the call's round trips.
func serverTrips(t *testing.T, s *Store) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	hook := pipelineHook(func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
		if len(cmds) == 0 || !handshake(cmds[0]) {
			n.Add(1)
		}
		return next(ctx, cmds)
	})
	single := processHook(func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if !handshake(cmd) {
			n.Add(1)
		}
		return next(ctx, cmd)
	})
	hookServers(t, s, func() []redis.Hook { return []redis.Hook{hook, single} })
	return &n
}

// handshake reports whether cmd is one the client library sends on a new connection.
func handshake(cmd redis.Cmder) bool {
	name := cmd.Name()
	return name == "hello" || name == "client" && len(cmd.Args()) > 1 && strings.EqualFold(fmt.Sprint(cmd.Args()[1]), "setinfo")
}

// hookServers adds the hooks hooks makes, called once per server, to the client of each Redis server s
// reaches (a cluster client's node clients, which send the commands; its own hooks see the calls, not
// the round trips).
func hookServers(t *testing.T, s *Store, hooks func() []redis.Hook) {
	t.Helper()
	add := func(_ context.Context, c *redis.Client) error {
		for _, h := range hooks() {
			c.AddHook(h)
		}
		return nil
	}
	var err error
	if cc, ok := s.Client().(*redis.ClusterClient); ok {
		err = cc.ForEachShard(t.Context(), add)
	} else {
		err = add(t.Context(), s.Client().(*redis.Client))
	}
	if err != nil {
		t.Fatal(err)
	}
}

// mastersOf is how many masters hold the partitions of topic.
func mastersOf(t *testing.T, s *Store, topic string, partitions []int32) int {
	t.Helper()
	cc, ok := s.Client().(*redis.ClusterClient)
	if !ok {
		return 1
	}
	seen := map[string]bool{}
	for _, p := range partitions {
		m, err := cc.MasterForKey(t.Context(), s.keys.meta(topic, p))
		if err != nil {
			t.Fatal(err)
		}
		seen[m.Options().Addr] = true
	}
	return len(seen)
}

// TestReadsAcrossMastersRoundTrips: the reads that span partitions, each master's share sent on its
// own on a Redis Cluster, take one round trip per master, as the cluster client's one pipeline did
// (it sends one per master): a fetch's read, the offsets of ListOffsets, DeleteRecords' trims.
func TestReadsAcrossMastersRoundTrips(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		all := []int32{0, 1, 2, 3, 4, 5}
		mustCreateTopic(t, s, "trips", 6)
		var reqs []ReadRequest
		for _, p := range all {
			appendOne(t, s, "trips", p, plain("r", 3)...)
			reqs = append(reqs, ReadRequest{Topic: "trips", Partition: p, Count: 10, MaxBytes: 1 << 20, KnownPartition: true})
		}
		masters := int64(mastersOf(t, s, "trips", all))
		_ = s.Read(ctx, reqs) // its first read looks the bytes index up; the trims' first use loads their script
		_ = s.DeleteRecordsOf(ctx, "trips", []Trim{{Partition: 0, Before: 0}, {Partition: 1, Before: 0}, {Partition: 2, Before: 0}, {Partition: 3, Before: 0}, {Partition: 4, Before: 0}, {Partition: 5, Before: 0}})
		trips := serverTrips(t, s)
		for _, step := range []struct {
			name string
			call func() error
		}{
			{"Read", func() error {
				for _, r := range s.Read(ctx, reqs) {
					if r.Err != nil || len(r.Records) != 3 {
						return errors.Join(r.Err, errors.New(strconv.Itoa(len(r.Records))+" records"))
					}
				}
				return nil
			}},
			{"PartitionOffsets", func() error { _, err := s.PartitionOffsets(ctx, "trips", all); return err }},
			{"DeleteRecordsOf", func() error {
				for _, r := range s.DeleteRecordsOf(ctx, "trips", []Trim{{Partition: 0, Before: 1}, {Partition: 1, Before: 1}, {Partition: 2, Before: 1}, {Partition: 3, Before: 1}, {Partition: 4, Before: 1}, {Partition: 5, Before: 1}}) {
					if r.Err != nil {
						return r.Err
					}
				}
				return nil
			}},
		} {
			before := trips.Load()
			if err := step.call(); err != nil {
				t.Fatalf("%s: %v", step.name, err)
			}
			if n := trips.Load() - before; n != masters {
				t.Errorf("%s of 6 partitions on %d masters: %d round trips, want %d", step.name, masters, n, masters)
			}
		}
		// LookUpTimes takes two round trips per master, the index and meta reads and then the scans'
		// reads, where each lookup alone takes its own.
		before := trips.Load()
		for _, p := range all {
			if _, _, _, err := s.OffsetForTime(ctx, "trips", p, 1001); err != nil {
				t.Fatal(err)
			}
			if _, _, _, err := s.MaxTimestamp(ctx, "trips", p); err != nil {
				t.Fatal(err)
			}
		}
		alone := trips.Load() - before
		var lookups []TimeLookup
		for _, p := range all {
			lookups = append(lookups, TimeLookup{Partition: p, Timestamp: 1001, Known: true}, TimeLookup{Partition: p, Timestamp: -3, Known: true})
		}
		before = trips.Load()
		for i, a := range s.LookUpTimes(ctx, "trips", lookups) {
			if a.Err != nil || !a.Found || a.Offset != 1 && lookups[i].Timestamp == 1001 || a.Offset != 2 && lookups[i].Timestamp == -3 {
				t.Errorf("lookup %+v: %+v", lookups[i], a)
			}
		}
		if n := trips.Load() - before; n != 2*masters {
			t.Errorf("LookUpTimes of 12 lookups on %d masters: %d round trips, want %d (each alone: %d in all)", masters, n, 2*masters, alone)
		}
	})
}

// TestReadsOfLiveMastersWhileOneIsDown: on a Redis Cluster of 3 masters (cluster-require-full-coverage
// no) with one of them paused (it takes connections and answers nothing, as a master cut off), the
// calls that span partitions (the reads, a commit moving the streams' consumer groups) answer the
// partitions of the live masters, masterLag after their answer (the first; those after at once), not
// after the command timeout, and fail those of the paused one alone, retriably. A pipeline across
// masters gave every command of it the deadline's error: nothing was answered.
func TestReadsOfLiveMastersWhileOneIsDown(t *testing.T) {
	if standalone == nil {
		t.Skip("KGATE_SKIP_REDIS=1")
	}
	ctx := t.Context()
	rc, err := redistest.StartPartialCluster(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Stop)
	const commandTimeout = 5 * time.Second
	s := openStore(t, Options{Addrs: rc.Addrs(), Cluster: true, CommandTimeout: commandTimeout})
	all := []int32{0, 1, 2, 3, 4, 5}
	mustCreateTopic(t, s, "outage", 6)
	var reqs []ReadRequest
	var trims []Trim
	var lookups []TimeLookup
	for _, p := range all {
		appendOne(t, s, "outage", p, plain("r", 3)...)
		reqs = append(reqs, ReadRequest{Topic: "outage", Partition: p, Offset: 1, Count: 10, MaxBytes: 1 << 20, KnownPartition: true})
		trims = append(trims, Trim{Partition: p, Before: 1, Known: true})
		lookups = append(lookups, TimeLookup{Partition: p, Timestamp: 1002, Known: true})
	}
	if mastersOf(t, s, "outage", all) != 3 {
		t.Skip("the 6 partitions are not on every master")
	}
	// The master to pause: not that of the groups set and of the group's offsets (a commit fails
	// whole without them), holding some of the partitions (each holds some).
	cc := s.Client().(*redis.ClusterClient)
	masterOf := func(key string) *redis.Client {
		t.Helper()
		m, err := cc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	var group string
	for n := 0; group == ""; n++ {
		if g := "g" + strconv.Itoa(n); masterOf(s.keys.offsets(g)) == masterOf(s.keys.groups()) {
			group = g
		}
	}
	var victim *redis.Client
	for _, p := range all {
		if m := masterOf(s.keys.meta("outage", p)); m != masterOf(s.keys.groups()) {
			victim = m
		}
	}
	down := map[int32]bool{}
	for _, p := range all {
		m, _ := cc.MasterForKey(ctx, s.keys.meta("outage", p))
		down[p] = m == victim
	}
	// Groups with offsets committed on the master to pause and on the others.
	var groups []string
	groupDown := map[string]bool{}
	for n, on, off := 0, 0, 0; on < 3 || off < 3; n++ {
		g := "cg" + strconv.Itoa(n)
		switch onVictim := masterOf(s.keys.offsets(g)) == victim; {
		case onVictim && on < 3:
			on++
		case !onVictim && off < 3:
			off++
		default:
			continue
		}
		if errs := s.CommitOffsets(ctx, g, "", []OffsetCommit{{Topic: "outage", Partition: 0, Offset: int64(n)}}, time.Now()); errs[0] != nil {
			t.Fatal(errs[0])
		}
		groups, groupDown[g] = append(groups, g), masterOf(s.keys.offsets(g)) == victim
	}
	// An idle producer's state on each partition, for ExpireProducers to drop.
	idle := time.Now().Add(-48 * time.Hour).UnixMilli()
	for _, p := range all {
		if err := s.Client().HSet(ctx, s.keys.meta("outage", p), "p:7", "0,4", "t:7", idle).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range rc.Masters {
		if m.Addr == victim.Options().Addr {
			if err := m.Pause(); err != nil {
				t.Skipf("cannot pause a redis-server here: %v", err)
			}
			t.Cleanup(func() { _ = m.Resume() })
		}
	}

	var round int
	timed := func(what string, took time.Duration) {
		t.Helper()
		// The first call waits masterLag for the master down, once the others have answered; those
		// after wait for it no more.
		if most := []time.Duration{masterLag + commandTimeout/4, masterLag / 2}[min(round, 1)]; took > most {
			t.Errorf("%s (call %d) took %v, want %v at most (command timeout %v)", what, round+1, took, most, commandTimeout)
		}
		round++
	}
	check := func(what string, errs []error, took time.Duration, live func(i int) error) {
		t.Helper()
		timed(what, took)
		for i, err := range errs {
			switch p := all[i]; {
			case down[p] && (err == nil || !IsUnavailable(err)):
				t.Errorf("%s of partition %d, its master paused: %v; want a Redis failure", what, p, err)
			case !down[p] && err != nil:
				t.Errorf("%s of partition %d, its master up: %v", what, p, err)
			case !down[p]:
				if err := live(i); err != nil {
					t.Errorf("%s of partition %d: %v", what, p, err)
				}
			}
		}
	}
	for call := range 2 {
		start := time.Now()
		res := s.Read(ctx, reqs)
		errs := make([]error, len(res))
		for i, r := range res {
			errs[i] = r.Err
		}
		check("Read", errs, time.Since(start), func(i int) error {
			if r := res[i]; len(r.Records) != 2 || r.End != 3 {
				return errors.New("read " + strconv.Itoa(len(r.Records)) + " records, high watermark " + strconv.FormatInt(r.End, 10))
			}
			return nil
		})

		start = time.Now()
		offs, errs := s.EachPartitionOffsets(ctx, "outage", all)
		check("EachPartitionOffsets", errs, time.Since(start), func(i int) error {
			if offs[i].End != 3 {
				return errors.New("high watermark " + strconv.FormatInt(offs[i].End, 10))
			}
			return nil
		})

		start = time.Now()
		answers := s.LookUpTimes(ctx, "outage", lookups)
		for i, a := range answers {
			errs[i] = a.Err
		}
		check("LookUpTimes", errs, time.Since(start), func(i int) error {
			if a := answers[i]; !a.Found || a.Offset != 2 {
				return errors.New("offset " + strconv.FormatInt(a.Offset, 10))
			}
			return nil
		})

		start = time.Now()
		var commits []OffsetCommit
		for _, p := range all {
			commits = append(commits, OffsetCommit{Topic: "outage", Partition: p, Offset: 2})
		}
		errs = s.CommitOffsets(ctx, group, "", commits, time.Now())
		check("CommitOffsets", errs, time.Since(start), func(int) error { return nil })

		start = time.Now()
		mem, errs := s.StreamMemory(ctx, "outage", all)
		check("StreamMemory", errs, time.Since(start), func(i int) error {
			if mem[i] <= 0 {
				return errors.New("memory " + strconv.FormatInt(mem[i], 10))
			}
			return nil
		})

		// The live masters' partitions drop their idle producer (the first call; none is left after),
		// and the call fails for the paused master's.
		start = time.Now()
		now := time.Now()
		dropped, err := s.ExpireProducers(ctx, "outage", all, now.Add(-24*time.Hour), now)
		wantDropped := 0
		if call == 0 {
			for _, p := range all {
				if !down[p] {
					wantDropped++
				}
			}
		}
		if took := time.Since(start); dropped != wantDropped || !IsUnavailable(err) || took > masterLag+commandTimeout/4 {
			t.Errorf("ExpireProducers with a master paused (call %d): %d dropped, %v, in %v; want %d (the live masters' partitions) and a Redis failure within %v",
				call+1, dropped, err, took, wantDropped, masterLag+commandTimeout/4)
		}

		// Each group's offsets are read but those of the master paused, and every group is listed.
		start = time.Now()
		committed, errs := s.CommittedOffsetsOf(ctx, groups)
		timed("CommittedOffsetsOf", time.Since(start))
		for i, g := range groups {
			n, _ := strconv.Atoi(strings.TrimPrefix(g, "cg"))
			switch err := errs[i]; {
			case groupDown[g] && (err == nil || !IsUnavailable(err)):
				t.Errorf("CommittedOffsetsOf %s, its master paused: %v; want a Redis failure", g, err)
			case !groupDown[g] && (err != nil || len(committed[i]) != 1 || committed[i][0].Offset != int64(n)):
				t.Errorf("CommittedOffsetsOf %s, its master up: %+v, %v; want offset %d", g, committed[i], err, n)
			}
		}
		start = time.Now()
		listed, unchecked, err := s.Groups(ctx)
		timed("Groups", time.Since(start))
		var wantListed, wantUnchecked []string
		for _, g := range append([]string{group}, groups...) {
			if groupDown[g] {
				wantUnchecked = append(wantUnchecked, g)
			} else {
				wantListed = append(wantListed, g)
			}
		}
		slices.Sort(wantUnchecked)
		if err != nil || !containsAll(listed, wantListed) || !slices.Equal(unchecked, wantUnchecked) {
			t.Errorf("Groups with a master paused: %v, unchecked %v, %v; want %v among them, unchecked %v", listed, unchecked, err, wantListed, wantUnchecked)
		}

		start = time.Now()
		trimmed := s.DeleteRecordsOf(ctx, "outage", trims)
		for i, r := range trimmed {
			errs[i] = r.Err
		}
		check("DeleteRecordsOf", errs, time.Since(start), func(i int) error {
			if trimmed[i].Start != 1 {
				return errors.New("log start " + strconv.FormatInt(trimmed[i].Start, 10))
			}
			return nil
		})
	}
}

// A panic on a master's share of a call reaches the caller while it waits for that share (a
// connection recovers it, and closes); once the caller no longer waits (the master left behind), it
// goes to the panic observer ("store_read"), and the call has answered that master's partitions with a
// retriable error.
func TestPanicOnMasterShare(t *testing.T) {
	s := openStore(t, backendOptions(t, "cluster"))
	all := []int32{0, 1, 2, 3, 4, 5}
	mustCreateTopic(t, s, "share-panics", 6)
	if mastersOf(t, s, "share-panics", all) < 2 {
		t.Skip("the 6 partitions are on one master")
	}
	var reqs []ReadRequest
	for _, p := range all {
		reqs = append(reqs, ReadRequest{Topic: "share-panics", Partition: p, Count: 10})
	}
	target := s.keys.meta("share-panics", 0)
	var mode atomic.Int32 // 1: panic at once; 2: wait for release, then panic
	release := make(chan struct{})
	s.Client().AddHook(pipelineHook(func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
		for _, c := range cmds {
			if key, ok := c.Args()[min(1, len(c.Args())-1)].(string); ok && key == target {
				switch mode.Load() {
				case 1:
					panic("a panic in a master's share")
				case 2:
					<-release
					panic("a panic in a share left behind")
				}
			}
		}
		return next(ctx, cmds)
	}))
	observed := make(chan string, 1)
	s.ObservePanics(func(where string, p any, _ []byte) { observed <- where + ": " + fmt.Sprint(p) })

	mode.Store(1)
	func() {
		defer func() {
			if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), "a panic in a master's share") {
				t.Errorf("Read: recovered %v", p)
			}
		}()
		s.Read(t.Context(), reqs)
	}()

	mode.Store(2)
	res := s.Read(t.Context(), reqs)
	if !errors.Is(res[0].Err, errMasterLagging) {
		t.Errorf("partition 0, its share held up: %v; want errMasterLagging", res[0].Err)
	}
	close(release)
	select {
	case got := <-observed:
		if got != "store_read: a panic in a share left behind" {
			t.Errorf("observed %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the panic of a share left behind was not observed")
	}
}

// TestMasterBackAfterOutageIsWaitedFor: a master paused for longer than the command timeout is left
// behind, and its connections go with their timed-out reads; once it answers again, a read across
// masters answers its partitions within a few calls. A share of a master left behind must dial it
// again, and the call ended (its context cancelled) as soon as the other masters answered: the dial
// was cancelled each time, the master stayed behind, its partitions failed for as long as nothing
// else reached it.
func TestMasterBackAfterOutageIsWaitedFor(t *testing.T) {
	if standalone == nil {
		t.Skip("KGATE_SKIP_REDIS=1")
	}
	ctx := t.Context()
	rc, err := redistest.StartPartialCluster(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Stop)
	s := openStore(t, Options{Addrs: rc.Addrs(), Cluster: true, CommandTimeout: 2 * masterLag})
	all := []int32{0, 1, 2, 3, 4, 5}
	mustCreateTopic(t, s, "back", 6)
	var reqs []ReadRequest
	for _, p := range all {
		appendOne(t, s, "back", p, plain("r", 3)...)
		reqs = append(reqs, ReadRequest{Topic: "back", Partition: p, Count: 10, MaxBytes: 1 << 20, KnownPartition: true})
	}
	if mastersOf(t, s, "back", all) != 3 {
		t.Skip("the 6 partitions are not on every master")
	}
	cc := s.Client().(*redis.ClusterClient)
	victim, err := cc.MasterForKey(ctx, s.keys.meta("back", 0))
	if err != nil {
		t.Fatal(err)
	}
	var server *redistest.Server
	for _, m := range rc.Masters {
		if m.Addr == victim.Options().Addr {
			server = m
		}
	}
	if err := server.Pause(); err != nil {
		t.Skipf("cannot pause a redis-server here: %v", err)
	}
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			_ = server.Resume()
		}
	})
	if r := s.Read(ctx, reqs); !errors.Is(r[0].Err, errMasterLagging) {
		t.Fatalf("partition 0, its master paused: %v; want errMasterLagging", r[0].Err)
	}
	s.lagging.Wait() // the share left to the paused master has timed out, its connection dropped
	if _, ok := s.behind.Load(victim); !ok {
		t.Fatal("the paused master is not marked behind")
	}
	if err := server.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	// The first read after does not wait for it (it is behind), but its share, left to finish, must
	// reach it and clear the mark; the read after then answers its partitions.
	_ = s.Read(ctx, reqs)
	s.lagging.Wait()
	if _, ok := s.behind.Load(victim); ok {
		t.Fatal("the master, answering again, is still marked behind after a read's share to it ended")
	}
	if r := s.Read(ctx, reqs); r[0].Err != nil {
		t.Fatalf("partition 0, its master answering again: %v", r[0].Err)
	}
}

// containsAll reports whether every one of want is in have.
func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}
