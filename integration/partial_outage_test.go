package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kgate/kgate/gateway"
	"github.com/kgate/kgate/internal/redistest"
	"github.com/kgate/kgate/redisstore"
)

// outageCluster is a 3-master cluster of its own that keeps serving the slots of its live masters
// while one is down (cluster-require-full-coverage no), with a namespace whose gateway-wide keys (the
// topic registry, the gateways, the producer id counter, the groups set) are all off one master, the
// victim, and a topic of 6 partitions, 2 on each master.
type outageCluster struct {
	rc        *redistest.Cluster
	cc        *redis.ClusterClient // the cluster's slot map, for masterOf
	ns, topic string
	victim    *redistest.Server
	onVictim  map[int32]bool
}

// masterOf is the address of the master holding key.
func (oc *outageCluster) masterOf(t *testing.T, ctx context.Context, key string) string {
	t.Helper()
	m, err := oc.cc.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return m.Options().Addr
}

// forEachStop runs fn as two subtests, the victim paused in one (it takes connections and answers
// nothing) and killed in the other.
func forEachStop(t *testing.T, fn func(t *testing.T, paused bool)) {
	for _, paused := range []bool{true, false} {
		t.Run(map[bool]string{true: "paused", false: "killed"}[paused], func(t *testing.T) { fn(t, paused) })
	}
}

func startOutageCluster(t *testing.T, ctx context.Context) *outageCluster {
	t.Helper()
	rc, err := redistest.StartPartialCluster(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Stop)
	oc := &outageCluster{rc: rc, cc: redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs()})}
	t.Cleanup(func() { oc.cc.Close() })
	masterOf := func(key string) string { return oc.masterOf(t, ctx, key) }
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
	forEachStop(t, consumeThroughMasterDown)
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

	// One ListOffsets, not retried: the client re-sends one whose partitions answer NOT_LEADER (after
	// 0.25, 0.5, 1 and 2 s, each with jitter) until its context ends, and one in flight at that
	// deadline fails whole with the context's error: 6 of 60 such calls did, 20 clients at once, though
	// the gateway answered every try at once.
	lctx, cancel := context.WithTimeout(ctx, commandTimeout-time.Second)
	defer cancel()
	ends, err := kadm.NewClient(newClient(t, g, kgo.RequestRetries(0))).ListEndOffsets(lctx, oc.topic)
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

// TestAdminReportsThroughMasterDown: on a Redis Cluster with one master down, the admin API's offset
// and lag reports answer 200 with every partition a live master holds, as before, and for each of the
// down master's an "error", its log offsets, lag, records and memory null; totals leave those out and
// GET /api/v1/groups counts them (partitionErrors). A report of which no partition could be read
// still answers 503. Each report read every partition in one call that failed whole: 503 for all,
// once the first partition's read failed.
func TestAdminReportsThroughMasterDown(t *testing.T) {
	forEachStop(t, adminReportsThroughMasterDown)
}

func adminReportsThroughMasterDown(t *testing.T, paused bool) {
	ctx := testCtx(t, 180*time.Second)
	oc := startOutageCluster(t, ctx)
	const commandTimeout = 5 * time.Second // the default
	g := startGatewayWithStoreCfg(t, redisstore.Options{Addrs: oc.rc.Addrs(), Cluster: true, Namespace: oc.ns,
		CommandTimeout: commandTimeout}, func(c *gateway.Config) { c.AdminListen, c.LagMetrics = "127.0.0.1:0", true })
	onVictim := func(key string) bool { return oc.masterOf(t, ctx, key) == oc.victim.Addr }
	// Two groups whose offsets are off the victim: one committing oc.topic, the other a topic of one
	// partition on the victim alone.
	name := func(prefix string, want func(string) bool) string {
		for n := 0; ; n++ {
			if s := prefix + strconv.Itoa(n); want(s) {
				return s
			}
		}
	}
	offKey := func(group string) string { return oc.ns + ":offsets:{" + redisstore.GroupTag(group) + "}:" + group }
	group := name("reported", func(s string) bool { return !onVictim(offKey(s)) })
	downGroup := name("downreported", func(s string) bool { return !onVictim(offKey(s)) })
	downTopic := name("downtopic", func(s string) bool { return onVictim(oc.ns + ":stream:{" + s + ":0}") })
	adm := newAdmin(t, g)
	mustCreateTopics(t, ctx, adm, 6, nil, oc.topic)
	mustCreateTopics(t, ctx, adm, 1, nil, downTopic)
	prod := newClient(t, g, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for p := range int32(6) {
		for range 3 {
			recs = append(recs, &kgo.Record{Topic: oc.topic, Partition: p, Value: []byte("v")})
		}
	}
	recs = append(recs, &kgo.Record{Topic: downTopic, Value: []byte("v")})
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	offs := kadm.Offsets{}
	for p := range int32(6) {
		offs.Add(kadm.Offset{Topic: oc.topic, Partition: p, At: 1, LeaderEpoch: -1})
	}
	if resp, err := adm.CommitOffsets(ctx, group, offs); err != nil || resp.Error() != nil {
		t.Fatalf("commit for %s: %v %v", group, err, resp.Error())
	}
	downOffs := kadm.Offsets{}
	downOffs.Add(kadm.Offset{Topic: downTopic, Partition: 0, At: 0, LeaderEpoch: -1})
	if resp, err := adm.CommitOffsets(ctx, downGroup, downOffs); err != nil || resp.Error() != nil {
		t.Fatalf("commit for %s: %v %v", downGroup, err, resp.Error())
	}

	oc.stopVictim(t, paused)
	// get reads a report, its body as JSON, numbers kept raw. One that reads a partition of the down
	// master's alone (downGroup's, downTopic's) waits the command timeout: a call within one master
	// does not run apart from the caller as one across masters does. The others answer well within it.
	get := func(path string, want int, out any) {
		t.Helper()
		most := commandTimeout - time.Second
		if strings.Contains(path, "down") || path == "/api/v1/groups" || path == "/api/v1/topics" {
			most = commandTimeout + 2*time.Second
		}
		start := time.Now()
		status, data := admCall(t, http.MethodGet, g.AdminURL+path, nil)
		took := time.Since(start)
		if took > most {
			t.Errorf("GET %s took %v with a master down, want %v at most", path, took, most)
		}
		t.Logf("GET %s: %d in %v", path, status, took.Round(time.Millisecond))
		if status != want {
			t.Fatalf("GET %s: status %d, want %d: %s", path, status, want, data)
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		if err := dec.Decode(out); err != nil {
			t.Fatalf("GET %s: decode %s: %v", path, data, err)
		}
	}
	// checkPart checks one partition of a report: numeric fields null and an error when its master is
	// down, else the values in want and no error.
	checkPart := func(what string, p int32, got map[string]any, down bool, want map[string]int64) {
		t.Helper()
		msg, _ := got["error"].(string)
		if down != (msg != "") {
			t.Errorf("%s partition %d (master down %v): error %q", what, p, down, msg)
		}
		for field, v := range want {
			raw, present := got[field]
			switch {
			case !present:
				t.Errorf("%s partition %d: no %q field: %v", what, p, field, got)
			case down && raw != nil:
				t.Errorf("%s partition %d, its master down: %s %v, want null", what, p, field, raw)
			case !down && raw != json.Number(strconv.FormatInt(v, 10)):
				t.Errorf("%s partition %d: %s %v, want %d", what, p, field, raw, v)
			}
		}
	}
	// wantLag is the lag of the live masters' partitions of oc.topic (3 records, committed at 1).
	wantLag := int64(0)
	for p := range int32(6) {
		if !oc.onVictim[p] {
			wantLag += 2
		}
	}
	checkOffsets := func(what string, list []map[string]any) {
		t.Helper()
		if len(list) != 6 {
			t.Fatalf("%s: %d partitions, want 6: %v", what, len(list), list)
		}
		for _, o := range list {
			p64, _ := o["partition"].(json.Number).Int64()
			p := int32(p64)
			checkPart(what, p, o, oc.onVictim[p], map[string]int64{"logStartOffset": 0, "logEndOffset": 3, "lag": 2})
			if o["committedOffset"] != json.Number("1") {
				t.Errorf("%s partition %d: committed offset %v, want 1 (read from the group's master, up)", what, p, o["committedOffset"])
			}
		}
	}

	var list []map[string]any
	get("/api/v1/groups/"+group+"/offsets", http.StatusOK, &list)
	checkOffsets("GET offsets", list)

	var detail struct {
		Offsets  []map[string]any `json:"offsets"`
		TotalLag int64            `json:"totalLag"`
	}
	get("/api/v1/groups/"+group, http.StatusOK, &detail)
	checkOffsets("GET group", detail.Offsets)
	if detail.TotalLag != wantLag {
		t.Errorf("GET group: total lag %d, want %d (the live masters' partitions)", detail.TotalLag, wantLag)
	}

	var groups []struct {
		Group           string `json:"group"`
		TotalLag        *int64 `json:"totalLag"`
		PartitionErrors int    `json:"partitionErrors"`
	}
	get("/api/v1/groups", http.StatusOK, &groups)
	for _, gs := range groups {
		switch gs.Group {
		case group:
			if gs.TotalLag == nil || *gs.TotalLag != wantLag || gs.PartitionErrors != 2 {
				t.Errorf("GET groups: %s total lag %v, partition errors %d; want %d, 2", group, gs.TotalLag, gs.PartitionErrors, wantLag)
			}
		case downGroup: // none of its lag read: null, not 0, which would look caught up
			if gs.TotalLag != nil || gs.PartitionErrors != 1 {
				t.Errorf("GET groups: %s total lag %v, partition errors %d; want null, 1", downGroup, *gs.TotalLag, gs.PartitionErrors)
			}
		}
	}
	if len(groups) != 2 {
		t.Errorf("GET groups: %d groups, want 2", len(groups))
	}

	checkTopic := func(what string, d map[string]any, memory bool) {
		t.Helper()
		parts, _ := d["partitions"].([]any)
		if len(parts) != 6 {
			t.Fatalf("%s: %d partitions, want 6: %v", what, len(parts), d)
		}
		for p, raw := range parts {
			want := map[string]int64{"logStartOffset": 0, "logEndOffset": 3, "records": 3}
			pd := raw.(map[string]any)
			checkPart(what, int32(p), pd, oc.onVictim[int32(p)], want)
			mem, _ := pd["memoryBytes"].(json.Number)
			n, _ := mem.Int64()
			switch {
			case oc.onVictim[int32(p)] && pd["memoryBytes"] != nil:
				t.Errorf("%s partition %d, its master down: memory %v, want null", what, p, pd["memoryBytes"])
			case !oc.onVictim[int32(p)] && (mem == "" || memory && n <= 0):
				t.Errorf("%s partition %d: memory %v, want a number (of bytes: more than 0)", what, p, pd["memoryBytes"])
			}
		}
		if d["records"] != json.Number(strconv.FormatInt(wantLag/2*3, 10)) { // 3 records a live partition
			t.Errorf("%s: records %v, want those of the live masters' partitions", what, d["records"])
		}
	}
	var topic map[string]any
	get("/api/v1/topics/"+oc.topic, http.StatusOK, &topic)
	checkTopic("GET topic", topic, true)
	var topics []map[string]any
	get("/api/v1/topics", http.StatusOK, &topics)
	for _, d := range topics {
		if d["name"] == oc.topic {
			checkTopic("GET topics", d, false)
		}
	}

	// Nothing of these could be read: the outage stays a 503.
	var e struct {
		Error string `json:"error"`
	}
	get("/api/v1/topics/"+downTopic, http.StatusServiceUnavailable, &e)
	get("/api/v1/groups/"+downGroup+"/offsets", http.StatusServiceUnavailable, &e)
	get("/api/v1/groups/"+downGroup, http.StatusServiceUnavailable, &e)
}

// TestAdminReportsWaitForAMasterDownOnce: the reports that read many topics (the topics' list, a
// group's offsets) read them all in one call, so a master that does not answer (paused) is waited for
// once per report. Read topic by topic, each topic whose partitions are all on it waited the whole
// command timeout on its own (a read within one master is not compared with the others'): k such
// topics made the report take k command timeouts.
func TestAdminReportsWaitForAMasterDownOnce(t *testing.T) {
	ctx := testCtx(t, 180*time.Second)
	oc := startOutageCluster(t, ctx)
	const commandTimeout = 5 * time.Second
	g := startGatewayWithStoreCfg(t, redisstore.Options{Addrs: oc.rc.Addrs(), Cluster: true, Namespace: oc.ns,
		CommandTimeout: commandTimeout}, func(c *gateway.Config) { c.AdminListen, c.LagMetrics = "127.0.0.1:0", true })
	onVictim := func(key string) bool { return oc.masterOf(t, ctx, key) == oc.victim.Addr }
	// partsOnVictim says whether all partitions of a topic of n are on the victim (want true) or all
	// off it (want false). (The down topics have one partition: a key's slot is a CRC16, so the slots of
	// two names that differ in one character are a fixed XOR apart, which the victim's range of slots
	// may never hold both ends of.)
	partsOnVictim := func(n int, want bool) func(string) bool {
		return func(topic string) bool {
			for p := range n {
				if onVictim(oc.ns+":meta:{"+topic+":"+strconv.Itoa(p)+"}") != want {
					return false
				}
			}
			return true
		}
	}
	taken := map[string]bool{}
	name := func(prefix string, want func(string) bool) string {
		for n := 0; ; n++ {
			if s := prefix + strconv.Itoa(n); !taken[s] && want(s) {
				taken[s] = true
				return s
			}
		}
	}
	partitions := map[string]int32{}
	upTopic := name("uptopic", partsOnVictim(2, false))
	partitions[upTopic] = 2
	down := map[string]bool{}
	for range 3 {
		topic := name("downtopic", partsOnVictim(1, true))
		down[topic], partitions[topic] = true, 1
	}
	groupOnVictim := func(s string) bool { return onVictim(oc.ns + ":offsets:{" + redisstore.GroupTag(s) + "}:" + s) }
	group := name("spanning", func(s string) bool { return !groupOnVictim(s) })
	// Groups whose offsets are on the victim, each committed on the up topic alone.
	var downGroups []string
	for range 3 {
		downGroups = append(downGroups, name("downgroup", groupOnVictim))
	}
	adm := newAdmin(t, g)
	all := []string{upTopic}
	for topic := range down {
		all = append(all, topic)
	}
	mustCreateTopics(t, ctx, adm, 2, nil, upTopic)
	mustCreateTopics(t, ctx, adm, 1, nil, all[1:]...)
	prod := newClient(t, g, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for _, topic := range all {
		for p := range partitions[topic] {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: []byte("v")})
		}
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	offs := kadm.Offsets{}
	for _, topic := range all {
		for p := range partitions[topic] {
			offs.Add(kadm.Offset{Topic: topic, Partition: p, At: 0, LeaderEpoch: -1})
		}
	}
	if resp, err := adm.CommitOffsets(ctx, group, offs); err != nil || resp.Error() != nil {
		t.Fatalf("commit for %s: %v %v", group, err, resp.Error())
	}
	upOffs := kadm.Offsets{}
	for p := range partitions[upTopic] {
		upOffs.Add(kadm.Offset{Topic: upTopic, Partition: p, At: 0, LeaderEpoch: -1})
	}
	for _, dg := range downGroups {
		if resp, err := adm.CommitOffsets(ctx, dg, upOffs); err != nil || resp.Error() != nil {
			t.Fatalf("commit for %s: %v %v", dg, err, resp.Error())
		}
	}

	oc.stopVictim(t, true)
	// One command timeout and some margin: the 3 topics on the victim, each waited for, take 3.
	const most = commandTimeout + 3*time.Second
	get := func(path string, out any) {
		t.Helper()
		start := time.Now()
		status, data := admCall(t, http.MethodGet, g.AdminURL+path, nil)
		took := time.Since(start)
		t.Logf("GET %s: %d in %v", path, status, took.Round(time.Millisecond))
		if took > most {
			t.Errorf("GET %s took %v with a master down, want %v at most", path, took, most)
		}
		if status != http.StatusOK {
			t.Fatalf("GET %s: status %d, want 200: %s", path, status, data)
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		if err := dec.Decode(out); err != nil {
			t.Fatalf("GET %s: decode %s: %v", path, data, err)
		}
	}
	// checkPart checks a partition of topic: an error and numbers null when topic is on the victim,
	// else the numbers of want and no error.
	checkPart := func(what, topic string, got map[string]any, want map[string]string) {
		t.Helper()
		msg, _ := got["error"].(string)
		if down[topic] != (msg != "") {
			t.Errorf("%s %s partition %v (on the victim %v): error %q", what, topic, got["partition"], down[topic], msg)
		}
		for field, v := range want {
			raw, present := got[field]
			switch {
			case !present:
				t.Errorf("%s %s: no %q field: %v", what, topic, field, got)
			case down[topic] && raw != nil:
				t.Errorf("%s %s partition %v, on the victim: %s %v, want null", what, topic, got["partition"], field, raw)
			case !down[topic] && raw != json.Number(v):
				t.Errorf("%s %s partition %v: %s %v, want %s", what, topic, got["partition"], field, raw, v)
			}
		}
	}

	var topics []map[string]any
	get("/api/v1/topics", &topics)
	if len(topics) != len(all) {
		t.Errorf("GET topics: %d topics, want %d: %v", len(topics), len(all), topics)
	}
	for _, d := range topics {
		topic, _ := d["name"].(string)
		parts, _ := d["partitions"].([]any)
		if len(parts) != int(partitions[topic]) {
			t.Fatalf("GET topics: %s has %d partitions, want %d: %v", topic, len(parts), partitions[topic], d)
		}
		for _, raw := range parts {
			checkPart("GET topics", topic, raw.(map[string]any), map[string]string{"logStartOffset": "0", "logEndOffset": "1", "records": "1"})
		}
	}

	var list []map[string]any
	get("/api/v1/groups/"+group+"/offsets", &list)
	if len(list) != 2+len(down) {
		t.Errorf("GET offsets: %d partitions, want %d: %v", len(list), 2+len(down), list)
	}
	for _, o := range list {
		topic, _ := o["topic"].(string)
		checkPart("GET offsets", topic, o, map[string]string{"logStartOffset": "0", "logEndOffset": "1", "lag": "1"})
		if o["committedOffset"] != json.Number("0") {
			t.Errorf("GET offsets: %s partition %v committed %v, want 0", topic, o["partition"], o["committedOffset"])
		}
	}

	// The group list: the victim's groups listed with their error, the spanning group with the lag of
	// the partitions read and the others counted. (Every group's offsets are read at once: the groups'
	// existence was checked in one pipeline across masters, which failed whole, 503 after the command
	// timeout.)
	var groups []map[string]any
	start := time.Now()
	get("/api/v1/groups", &groups)
	// Not a command timeout: the victim's groups wait for it as the other masters' do, a second at most.
	if took := time.Since(start); took > commandTimeout/2 {
		t.Errorf("GET /api/v1/groups took %v, want %v at most", took, commandTimeout/2)
	}
	byName := map[string]map[string]any{}
	for _, gl := range groups {
		name, _ := gl["group"].(string)
		byName[name] = gl
	}
	if gl := byName[group]; gl == nil || gl["totalLag"] != json.Number("2") || gl["partitionErrors"] != json.Number(strconv.Itoa(len(down))) {
		t.Errorf("GET groups: %s %v; want totalLag 2 (the up topic's), partitionErrors %d", group, gl, len(down))
	}
	for _, dg := range downGroups {
		if gl := byName[dg]; gl == nil || gl["totalLag"] != nil || gl["error"] == nil || gl["error"] == "" {
			t.Errorf("GET groups: %s (offsets on the victim) %v; want listed with an error, totalLag null", dg, gl)
		}
	}

	// Kafka's ListGroups: the groups a live master holds, without those on the victim (their
	// coordinator cannot serve them, as Apache leaves out the groups of an offsets partition without a
	// leader); it failed whole before, as the group list did.
	lctx, lcancel := context.WithTimeout(ctx, most)
	defer lcancel()
	kafkaGroups, err := adm.ListGroups(lctx)
	if err != nil {
		t.Fatalf("ListGroups with a master down: %v", err)
	}
	if !slices.Contains(kafkaGroups.Groups(), group) {
		t.Errorf("ListGroups: %v, want %s among them", kafkaGroups.Groups(), group)
	}
	for _, dg := range downGroups {
		if slices.Contains(kafkaGroups.Groups(), dg) {
			t.Errorf("ListGroups: %v lists %s, whose offsets are on the victim", kafkaGroups.Groups(), dg)
		}
	}

	// The lag metrics: the partitions read, and the groups not read whole counted.
	start = time.Now()
	m := scrapeMetrics(t, g)
	if took := time.Since(start); took > most {
		t.Errorf("GET /metrics took %v with a master down, want %v at most", took, most)
	}
	for p := range partitions[upTopic] {
		lag := map[string]string{"group": group, "topic": upTopic, "partition": strconv.Itoa(int(p))}
		if v, ok := m.value("kgate_group_lag", lag); !ok || v != 1 {
			t.Errorf("kgate_group_lag%v = %v (found %v), want 1", lag, v, ok)
		}
	}
	if v := m.must(t, "kgate_group_lag_groups_unread", nil); v != float64(1+len(downGroups)) {
		t.Errorf("kgate_group_lag_groups_unread = %v, want %d (the spanning group and the victim's)", v, 1+len(downGroups))
	}
}
