package gateway

import (
	"context"
	"errors"
	"math"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/kgate/kgate/internal/redistest"
	"github.com/kgate/kgate/redisstore"
)

// TestRetentionKeepsRecordsAppendedDuringItsScan: when every record is past retention, the partition
// is trimmed up to the high watermark read before the scan, so a record appended while retention ran
// (acknowledged to its producer) stays.
func TestRetentionKeepsRecordsAppendedDuringItsScan(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{Listen: "127.0.0.1:0"})
	if err := store.CreateTopic(ctx, redisstore.Topic{Name: "ret", Partitions: 1, Configs: map[string]string{"retention.ms": "1000"}}); err != nil {
		t.Fatal(err)
	}
	if err := g.Listen(ctx); err != nil {
		t.Fatal(err)
	}
	defer g.ln.Close()
	now := time.Now()
	old := now.Add(-time.Hour).UnixMilli()
	batch := func(ts int64) []*redisstore.Batch {
		return []*redisstore.Batch{{Topic: "ret", Partition: 0, ProducerID: -1, KnownPartition: true,
			Records: []redisstore.Record{{Timestamp: ts, Value: []byte("v")}, {Timestamp: ts, Value: []byte("v")}}}}
	}
	if res := store.Append(ctx, batch(old)); res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
	afterRetentionScan = func() {
		if res := store.Append(ctx, batch(now.UnixMilli())); res[0].Err != nil {
			t.Error(res[0].Err)
		}
	}
	defer func() { afterRetentionScan = nil }()
	g.enforceRetention(ctx, now)
	offs, err := store.PartitionOffsets(ctx, "ret", []int32{0})
	if err != nil {
		t.Fatal(err)
	}
	if offs[0].Start != 2 || offs[0].End != 4 {
		t.Fatalf("after retention: log start %d, high watermark %d; want 2 and 4 (the old records gone, the new ones kept)", offs[0].Start, offs[0].End)
	}
}

// expiryGateway is a gateway listening (so it leads every partition) with producer state expiring after
// expiration, over a store holding topic, kept forever; produce appends one record of producer pid at
// sequence seq to its partition 0.
func expiryGateway(t *testing.T, expiration time.Duration, topic string) (g *Gateway, produce func(pid int64, seq int32) error) {
	t.Helper()
	ctx, g, store := embeddedGateway(t, Config{Listen: "127.0.0.1:0", ProducerIDExpiration: expiration})
	if err := store.CreateTopic(ctx, redisstore.Topic{Name: topic, Partitions: 1, Configs: map[string]string{"retention.ms": "-1"}}); err != nil {
		t.Fatal(err)
	}
	if err := g.Listen(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.ln.Close() })
	return g, func(pid int64, seq int32) error {
		b := &redisstore.Batch{Topic: topic, Partition: 0, ProducerID: pid, BaseSequence: seq, KnownPartition: true,
			Records: []redisstore.Record{{Timestamp: time.Now().UnixMilli(), Value: []byte("v")}}}
		return store.Append(ctx, []*redisstore.Batch{b})[0].Err
	}
}

// The retention pass drops the state of producers idle for ProducerIDExpiration in the partitions this
// gateway leads, on topics kept forever too; a producer active within it keeps its state.
func TestRetentionExpiresIdleProducers(t *testing.T) {
	g, produce := expiryGateway(t, time.Hour, "forever")
	ctx := t.Context()
	for _, pid := range []int64{21, 22} {
		if err := produce(pid, 0); err != nil {
			t.Fatal(err)
		}
	}
	g.enforceRetention(ctx, time.Now()) // within the hour: both kept
	if err := produce(21, 7); !errors.Is(err, redisstore.ErrOutOfOrderSequence) {
		t.Fatalf("producer 21 at seq 7 after 0, state kept: %v, want ErrOutOfOrderSequence", err)
	}
	g.enforceRetention(ctx, time.Now().Add(2*time.Hour)) // both idle for two hours by then
	if err := produce(22, 7); err != nil {
		t.Fatalf("producer 22 at seq 7 after its state expired: %v, want stored", err)
	}
}

// TestProducerExpiryEveryTenMinutes: idle producers' state is dropped at most every
// producerExpiryEvery, not at every retention pass: the expiry reads a partition's whole producer
// state in one script, which holds Redis for about a second at 200,000 producers.
func TestProducerExpiryEveryTenMinutes(t *testing.T) {
	g, produceAs := expiryGateway(t, time.Minute, "kept")
	ctx := t.Context()
	produce := func(seq int32) error { return produceAs(23, seq) }
	if err := produce(0); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	g.enforceRetention(ctx, now)                    // expires nothing yet
	g.enforceRetention(ctx, now.Add(5*time.Minute)) // idle past a minute, but within ten of the last expiry
	if err := produce(7); !errors.Is(err, redisstore.ErrOutOfOrderSequence) {
		t.Fatalf("seq 7 after 0, state kept: %v, want ErrOutOfOrderSequence", err)
	}
	g.enforceRetention(ctx, now.Add(11*time.Minute))
	if err := produce(7); err != nil {
		t.Fatalf("seq 7 after the state expired: %v, want stored", err)
	}
}

// A panic in a retention pass is logged and the loop runs again after a pause (goBackground), where it
// ended the process: the next pass trims what the panicking one did not.
func TestRetentionLoopRestartsAfterPanic(t *testing.T) {
	defer func(p, m time.Duration) { restartPause, maxRestartPause = p, m }(restartPause, maxRestartPause)
	restartPause, maxRestartPause = time.Millisecond, time.Millisecond
	ctx, _, store := embeddedGateway(t, Config{})
	if err := store.CreateTopic(ctx, redisstore.Topic{Name: "ret-panic", Partitions: 1, Configs: map[string]string{"retention.ms": "1000"}}); err != nil {
		t.Fatal(err)
	}
	old := []*redisstore.Batch{{Topic: "ret-panic", ProducerID: -1, KnownPartition: true,
		Records: []redisstore.Record{{Timestamp: time.Now().Add(-time.Hour).UnixMilli(), Value: []byte("v")}}}}
	if res := store.Append(ctx, old); res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
	var scans atomic.Int32
	afterRetentionScan = func() {
		if scans.Add(1) == 1 {
			panic("a bad retention pass")
		}
	}
	before := testutil.ToFloat64(mPanics.WithLabelValues("retention"))
	_, stop := serveOn(t, store, Config{RetentionCheckInterval: 10 * time.Millisecond})
	defer func() { afterRetentionScan = nil }()
	defer stop() // before the hook goes: the loop reads it
	waitFor(t, 10*time.Second, "retention after the panicking pass", func() bool {
		offs, err := store.PartitionOffsets(ctx, "ret-panic", []int32{0})
		return err == nil && offs[0].Start == 1
	})
	if got := testutil.ToFloat64(mPanics.WithLabelValues("retention")) - before; got != 1 {
		t.Errorf("kgate_panics_recovered_total{where=retention} grew by %v, want 1", got)
	}
}

// TestRetentionKeepsRecordsWithoutTimestamps: records stamped -1 (a producer that sets no time; Apache
// accepts them) are not taken for older than the cutoff: a topic kept for ever with retention.ms
// Long.MAX_VALUE keeps them, and so does one with an hour's retention, as nothing says how old they
// are. A partition whose records do carry old timestamps is still trimmed to its high watermark.
func TestRetentionKeepsRecordsWithoutTimestamps(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{Listen: "127.0.0.1:0"})
	for name, ms := range map[string]string{"forever": strconv.FormatInt(math.MaxInt64, 10), "hour": "3600000", "old": "3600000"} {
		if err := store.CreateTopic(ctx, redisstore.Topic{Name: name, Partitions: 1, Configs: map[string]string{"retention.ms": ms}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.Listen(ctx); err != nil {
		t.Fatal(err)
	}
	defer g.ln.Close()
	now := time.Now()
	for name, ts := range map[string]int64{"forever": -1, "hour": -1, "old": now.Add(-2 * time.Hour).UnixMilli()} {
		b := []*redisstore.Batch{{Topic: name, Partition: 0, ProducerID: -1, KnownPartition: true,
			Records: []redisstore.Record{{Timestamp: ts, Value: []byte("v")}, {Timestamp: ts, Value: []byte("v")}}}}
		if res := store.Append(ctx, b); res[0].Err != nil {
			t.Fatal(res[0].Err)
		}
	}
	g.enforceRetention(ctx, now)
	for name, want := range map[string]int64{"forever": 0, "hour": 0, "old": 2} {
		offs, err := store.PartitionOffsets(ctx, name, []int32{0})
		if err != nil {
			t.Fatal(err)
		}
		if offs[0].Start != want || offs[0].End != 2 {
			t.Errorf("%s: log start %d, high watermark %d; want log start %d", name, offs[0].Start, offs[0].End, want)
		}
	}
}

// TestRetentionRereadsTopicsDuringPass: a topic deleted and created again under its name while a
// retention pass runs is trimmed by the new topic's retention, not by the one the pass read at its
// start: the new one, kept for ever, keeps its records (stamped an hour ago), whichever topic's scan
// the change came in.
func TestRetentionRereadsTopicsDuringPass(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{Listen: "127.0.0.1:0"})
	hourly := map[string]string{"retention.ms": "1000"}
	for _, name := range []string{"first", "second"} {
		if err := store.CreateTopic(ctx, redisstore.Topic{Name: name, ID: [16]byte{1, name[0]}, Partitions: 1, Configs: hourly}); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.Listen(ctx); err != nil {
		t.Fatal(err)
	}
	defer g.ln.Close()
	now := time.Now()
	old := func(topic string) []*redisstore.Batch {
		return []*redisstore.Batch{{Topic: topic, Partition: 0, ProducerID: -1, KnownPartition: true,
			Records: []redisstore.Record{{Timestamp: now.Add(-time.Hour).UnixMilli(), Value: []byte("v")}, {Timestamp: now.Add(-time.Hour).UnixMilli(), Value: []byte("v")}}}}
	}
	for _, name := range []string{"first", "second"} {
		if res := store.Append(ctx, old(name)); res[0].Err != nil {
			t.Fatal(res[0].Err)
		}
	}
	if _, err := g.topics.all(ctx); err != nil { // the view the pass starts from
		t.Fatal(err)
	}
	var scans atomic.Int32
	afterRetentionScan = func() {
		if scans.Add(1) != 1 {
			return
		}
		for _, name := range []string{"first", "second"} {
			if err := store.DeleteTopic(ctx, name); err != nil {
				t.Error(err)
			}
			if err := store.CreateTopic(ctx, redisstore.Topic{Name: name, ID: [16]byte{2, name[0]}, Partitions: 1, Configs: map[string]string{"retention.ms": "-1"}}); err != nil {
				t.Error(err)
			}
			if res := store.Append(ctx, old(name)); res[0].Err != nil {
				t.Error(res[0].Err)
			}
		}
	}
	defer func() { afterRetentionScan = nil }()
	g.enforceRetention(ctx, now)
	if scans.Load() == 0 {
		t.Fatal("no partition scanned")
	}
	for _, name := range []string{"first", "second"} {
		offs, err := store.PartitionOffsets(ctx, name, []int32{0})
		if err != nil {
			t.Fatal(err)
		}
		if offs[0].Start != 0 || offs[0].End != 2 {
			t.Errorf("%s created again, kept for ever: log start %d, high watermark %d after retention; want 0 and 2", name, offs[0].Start, offs[0].End)
		}
	}
}

// TestRetentionRoundTripsPerTopic: a pass over a topic reads its registry entry twice, for the cutoff
// and once more after the scans of its partitions, and trims them in one round trip: it read the
// entry again, and trimmed, partition by partition (TestRetentionRereadsTopicsDuringPass keeps the
// check after the scans).
func TestRetentionRoundTripsPerTopic(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{Listen: "127.0.0.1:0"})
	const partitions = 4
	if err := store.CreateTopic(ctx, redisstore.Topic{Name: "ret-trips", Partitions: partitions, Configs: map[string]string{"retention.ms": "1000"}}); err != nil {
		t.Fatal(err)
	}
	if err := g.Listen(ctx); err != nil {
		t.Fatal(err)
	}
	defer g.ln.Close()
	now := time.Now()
	for p := range int32(partitions) {
		b := []*redisstore.Batch{{Topic: "ret-trips", Partition: p, ProducerID: -1, KnownPartition: true,
			Records: []redisstore.Record{{Timestamp: now.Add(-time.Hour).UnixMilli(), Value: []byte("v")}, {Timestamp: now.UnixMilli(), Value: []byte("v")}}}}
		if res := store.Append(ctx, b); res[0].Err != nil {
			t.Fatal(res[0].Err)
		}
	}
	if _, err := g.topics.all(ctx); err != nil { // the view the pass starts from
		t.Fatal(err)
	}
	var trips, entryReads atomic.Int64
	store.Observe(func(cmd string, _ time.Duration, _ error) {
		trips.Add(1)
		if cmd == "hget" {
			entryReads.Add(1)
		}
	})
	g.enforceRetention(ctx, now)
	t.Logf("a pass over %d partitions: %d round trips, %d registry entry reads", partitions, trips.Load(), entryReads.Load())
	if n := entryReads.Load(); n != 2 {
		t.Errorf("a pass over a topic of %d partitions read its registry entry %d times; want 2", partitions, n)
	}
	offs, err := store.PartitionOffsets(ctx, "ret-trips", []int32{0, 1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	for p, o := range offs {
		if o.Start != 1 || o.End != 2 {
			t.Errorf("partition %d after retention: log start %d, high watermark %d; want 1 and 2", p, o.Start, o.End)
		}
	}
}

// TestRetentionTrimsPartitionsOfLiveMasters: on Redis Cluster (cluster-require-full-coverage no), with
// the master of some of a topic's partitions down, a retention pass still trims the partitions the
// other masters hold. It read the high watermarks of all the partitions in one round trip and, when
// any one of them failed, skipped the whole topic: records past retention piled up on the masters
// still serving for as long as the other was down.
func TestRetentionTrimsPartitionsOfLiveMasters(t *testing.T) {
	if os.Getenv("KGATE_SKIP_REDIS") == "1" {
		t.Skip("KGATE_SKIP_REDIS=1")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cluster, err := redistest.StartPartialCluster(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Stop)
	store, err := redisstore.Open(ctx, redisstore.Options{Addrs: cluster.Addrs(), Cluster: true,
		CommandTimeout: time.Second, DialTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	g := New(Config{Listen: "127.0.0.1:0"}, store, zerolog.Nop())

	const name, partitions = "ret-live", 8
	if err := store.CreateTopic(ctx, redisstore.Topic{Name: name, Partitions: partitions, Configs: map[string]string{"retention.ms": "1000"}}); err != nil {
		t.Fatal(err)
	}
	if err := g.Listen(ctx); err != nil {
		t.Fatal(err)
	}
	defer g.ln.Close()
	now := time.Now()
	for p := range int32(partitions) {
		b := []*redisstore.Batch{{Topic: name, Partition: p, ProducerID: -1, KnownPartition: true,
			Records: []redisstore.Record{{Timestamp: now.Add(-time.Hour).UnixMilli(), Value: []byte("v")}, {Timestamp: now.UnixMilli(), Value: []byte("v")}}}}
		if res := store.Append(ctx, b); res[0].Err != nil {
			t.Fatal(res[0].Err)
		}
	}
	if _, err := g.topics.all(ctx); err != nil { // the view the pass starts from
		t.Fatal(err)
	}

	// The master to stop: not the registry's, and holding some of the partitions, not all.
	cc := store.Client().(*redis.ClusterClient)
	masterOf := func(key string) string {
		t.Helper()
		m, err := cc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return m.Options().Addr
	}
	registry := masterOf(store.Namespace() + ":topics")
	var down string
	var live []int32
	for _, m := range cluster.Masters {
		if m.Addr == registry {
			continue
		}
		var others []int32
		for p := range int32(partitions) {
			if masterOf(store.StreamKey(name, p)) != m.Addr {
				others = append(others, p)
			}
		}
		if len(others) < partitions && len(others) > 0 {
			down, live = m.Addr, others
			for _, s := range cluster.Masters {
				if s.Addr == down {
					s.Stop()
				}
			}
			break
		}
	}
	if down == "" {
		t.Fatalf("no master but the registry's holds some of the %d partitions", partitions)
	}

	g.enforceRetention(ctx, now)
	offs, err := store.PartitionOffsets(ctx, name, live)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range offs {
		if o.Start != 1 || o.End != 2 {
			t.Errorf("partition %d (its master up, %s down) after retention: log start %d, high watermark %d; want 1 and 2", live[i], down, o.Start, o.End)
		}
	}
}
