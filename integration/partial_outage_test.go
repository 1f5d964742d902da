package integration

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kgate/kgate/internal/redistest"
	"github.com/kgate/kgate/redisstore"
)

// outageCluster is a 3-master cluster of its own that keeps serving the slots of its live masters
// while one is down (cluster-require-full-coverage no), with a namespace whose gateway-wide keys (the
// topic registry, the gateways, the producer id counter, the groups set) are all off one master, the
// victim, and a topic of 6 partitions, 2 on each master.
type outageCluster struct {
	rc        *redistest.Cluster
	ns, topic string
	victim    *redistest.Server
	onVictim  map[int32]bool
}

func startOutageCluster(t *testing.T, ctx context.Context) *outageCluster {
	t.Helper()
	rc, err := redistest.StartPartialCluster(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Stop)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs()})
	defer cc.Close()
	masterOf := func(key string) string {
		t.Helper()
		m, err := cc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return m.Options().Addr
	}
	oc := &outageCluster{rc: rc}
	for n := 0; oc.victim == nil; n++ {
		if n == 1000 {
			t.Fatal("no namespace leaves a master without the gateway-wide keys")
		}
		ns := fmt.Sprintf("outage%d", n)
		taken := map[string]bool{}
		for _, k := range []string{ns + ":topics", "{" + ns + ":topics}:forms", "{" + ns + ":topics}:gen", ns + ":gateways", ns + ":producer-id", ns + ":groups"} {
			taken[masterOf(k)] = true
		}
		for _, m := range rc.Masters {
			if !taken[m.Addr] {
				oc.ns, oc.victim = ns, m
				break
			}
		}
	}
	for n := 0; oc.topic == ""; n++ {
		if n == 10000 {
			t.Fatal("no topic name puts 2 of 6 partitions on each master")
		}
		name := "spread" + strconv.Itoa(n)
		per := map[string]int{}
		on := map[int32]bool{}
		for p := range int32(6) {
			m := masterOf(oc.ns + ":stream:{" + name + ":" + strconv.Itoa(int(p)) + "}")
			per[m]++
			on[p] = m == oc.victim.Addr
		}
		if len(per) == 3 && per[rc.Masters[0].Addr] == 2 && per[rc.Masters[1].Addr] == 2 {
			oc.topic, oc.onVictim = name, on
		}
	}
	return oc
}

// stopVictim stops the victim master: paused (SIGSTOP: it takes connections and answers nothing, as a
// master cut off by the network) until the test ends or resume is called, or else killed (connections
// refused; resume is nil).
func (oc *outageCluster) stopVictim(t *testing.T, paused bool) (resume func()) {
	t.Helper()
	if !paused {
		oc.victim.Kill()
		return nil
	}
	if err := oc.victim.Pause(); err != nil {
		t.Skipf("cannot pause a redis-server here: %v", err)
	}
	resume = func() { _ = oc.victim.Resume() }
	t.Cleanup(resume)
	return resume
}

// TestConsumeThroughMasterDown: on a Redis Cluster with one master down (paused, or killed; the
// cluster keeps serving the others' slots), a consumer of a topic with partitions on every master keeps getting the
// records of the partitions the live masters hold, those produced before the master went down and
// those produced after, and ListOffsets answers for them; only the down master's partitions answer a
// retriable error. A fetch, or a ListOffsets, reads every partition in one pipeline, and the cluster
// client, its retries for the down master out of time, gave every command of it the deadline's error:
// no partition was served while the master stayed down, each request after a command timeout.
func TestConsumeThroughMasterDown(t *testing.T) {
	for _, paused := range []bool{true, false} {
		t.Run(map[bool]string{true: "paused", false: "killed"}[paused], func(t *testing.T) { consumeThroughMasterDown(t, paused) })
	}
}

func consumeThroughMasterDown(t *testing.T, paused bool) {
	ctx := testCtx(t, 180*time.Second)
	oc := startOutageCluster(t, ctx)
	const commandTimeout = 5 * time.Second // the default
	g := startGatewayWithStore(t, redisstore.Options{Addrs: oc.rc.Addrs(), Cluster: true, Namespace: oc.ns,
		CommandTimeout: commandTimeout})
	mustCreateTopics(t, ctx, newAdmin(t, g), 6, nil, oc.topic)

	prod := newClient(t, g, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produce := func(partitions []int32, value string) {
		t.Helper()
		var recs []*kgo.Record
		for _, p := range partitions {
			recs = append(recs, &kgo.Record{Topic: oc.topic, Partition: p, Value: []byte(value)})
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	all := []int32{0, 1, 2, 3, 4, 5}
	var live []int32
	for _, p := range all {
		if !oc.onVictim[p] {
			live = append(live, p)
		}
	}
	produce(all, "before")
	fromStart := func() *kgo.Client {
		offs := map[int32]kgo.Offset{}
		for _, p := range all {
			offs[p] = kgo.NewOffset().AtStart()
		}
		return newClient(t, g, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{oc.topic: offs}), kgo.FetchMaxWait(time.Second))
	}
	var stopped time.Time
	// await polls cons until every partition of want has given it a record of value, within d.
	await := func(cons *kgo.Client, value string, want []int32, d time.Duration) {
		t.Helper()
		pctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		got := map[int32]bool{}
		missing := func() []int32 {
			var m []int32
			for _, p := range want {
				if !got[p] {
					m = append(m, p)
				}
			}
			return m
		}
		for len(missing()) > 0 {
			fs := cons.PollFetches(pctx)
			if pctx.Err() != nil {
				t.Fatalf("partitions %v had no record %q within %v (%v down for %v)", missing(), value, d, oc.victim.Addr, time.Since(stopped).Round(time.Millisecond))
			}
			fs.EachRecord(func(r *kgo.Record) {
				if string(r.Value) == value {
					got[r.Partition] = true
				}
			})
		}
	}
	tailing := fromStart()
	await(tailing, "before", all, 20*time.Second)

	resume := oc.stopVictim(t, paused)
	stopped = time.Now()
	// Within a command timeout: a fetch must not wait out the down master's timeout for the live
	// masters' answer. The tailing consumer's fetches name the down master's partitions.
	produce(live, "after")
	await(tailing, "after", live, commandTimeout-time.Second)
	t.Logf("records produced after the outage: fetched %v after it began", time.Since(stopped).Round(time.Millisecond))
	// A consumer starting now: ListOffsets, then fetches.
	late := fromStart()
	start := time.Now()
	await(late, "before", live, commandTimeout-time.Second)
	t.Logf("records produced before the outage: fetched %v after the consumer started", time.Since(start).Round(time.Millisecond))

	lctx, cancel := context.WithTimeout(ctx, commandTimeout-time.Second)
	defer cancel()
	ends, err := newAdmin(t, g).ListEndOffsets(lctx, oc.topic)
	if err != nil {
		t.Fatalf("ListOffsets with a master down: %v", err)
	}
	for _, p := range all {
		o, ok := ends.Lookup(oc.topic, p)
		switch {
		case !ok:
			t.Errorf("partition %d: not in the ListOffsets answer", p)
		case oc.onVictim[p]:
			if !errors.Is(o.Err, kerr.NotLeaderForPartition) && !errors.Is(o.Err, kerr.RequestTimedOut) {
				t.Errorf("partition %d (its master down): ListOffsets error %v; want a retriable one", p, o.Err)
			}
		case o.Err != nil || o.Offset != 2:
			t.Errorf("partition %d (its master up): ListOffsets offset %d, error %v; want 2", p, o.Offset, o.Err)
		}
	}

	if resume == nil {
		return
	}
	// The master back, its partitions are served again.
	resume()
	var down []int32
	for _, p := range all {
		if oc.onVictim[p] {
			down = append(down, p)
		}
	}
	await(late, "before", down, 30*time.Second)
}
