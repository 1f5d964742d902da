package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestExecReply(t *testing.T) {
	ids := "$3\r\n0-6\r\n$3\r\n0-7\r\n"
	for _, c := range []struct {
		name, raw string
		n         int
		want      AppendResult
		errPrefix string // a Redis error reply, seen as such by redis.HasErrorPrefix
		malformed bool
	}{
		{name: "stored", raw: "*3\r\n" + ids + "*3\r\n:5\r\n:2\r\n:0\r\n", n: 2, want: AppendResult{BaseOffset: 5, LogStartOffset: 2}},
		{name: "duplicate", raw: "*3\r\n" + ids + "*3\r\n:5\r\n:0\r\n:1\r\n", n: 2, want: AppendResult{BaseOffset: 5, Duplicate: true}},
		{name: "refused", raw: "*3\r\n" + ids + "*2\r\n:-1\r\n:47\r\n", n: 2, want: AppendResult{Err: ErrInvalidEpoch}},
		{name: "xadd error skipped", raw: "*3\r\n-WRONGTYPE Operation against a key holding the wrong kind of value\r\n$3\r\n0-7\r\n*3\r\n:5\r\n:0\r\n:0\r\n", n: 2, want: AppendResult{BaseOffset: 5}},
		{name: "empty ID", raw: "*2\r\n$0\r\n\r\n*3\r\n:0\r\n:0\r\n:0\r\n", n: 1, want: AppendResult{}},
		{name: "exec aborted", raw: "-EXECABORT Transaction discarded because of previous errors.\r\n", n: 2, errPrefix: "EXECABORT"},
		{name: "moved", raw: "-MOVED 3999 127.0.0.1:6381\r\n", n: 2, errPrefix: "MOVED"},
		{name: "function missing", raw: "*3\r\n" + ids + "-ERR Function not found\r\n", n: 2, errPrefix: "Function not found"},
		{name: "fewer replies", raw: "*2\r\n$3\r\n0-6\r\n*3\r\n:5\r\n:0\r\n:0\r\n", n: 2, malformed: true},
		{name: "null array", raw: "*-1\r\n", n: 2, malformed: true},
		{name: "script reply not an array", raw: "*3\r\n" + ids + ":5\r\n", n: 2, malformed: true},
		{name: "short script reply", raw: "*3\r\n" + ids + "*1\r\n:5\r\n", n: 2, malformed: true},
		{name: "script value not an integer", raw: "*3\r\n" + ids + "*2\r\n:5\r\n$1\r\n0\r\n", n: 2, malformed: true},
		{name: "ID longer than said", raw: "*3\r\n$2\r\n0-6\r\n$3\r\n0-7\r\n*3\r\n:5\r\n:0\r\n:0\r\n", n: 2, malformed: true},
		{name: "trailing bytes", raw: "*3\r\n" + ids + "*3\r\n:5\r\n:0\r\n:0\r\n+OK\r\n", n: 2, malformed: true},
		{name: "integer ID", raw: "*3\r\n:6\r\n$3\r\n0-7\r\n*3\r\n:5\r\n:0\r\n:0\r\n", n: 2, malformed: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := execReply([]byte(c.raw), c.n)
			switch {
			case c.errPrefix != "":
				if !redis.HasErrorPrefix(got.Err, c.errPrefix) {
					t.Fatalf("got %+v, want the Redis error %q", got, c.errPrefix)
				}
				var re redis.Error
				if !errors.As(got.Err, &re) {
					t.Fatalf("%v (%T) is not a redis.Error", got.Err, got.Err)
				}
			case c.malformed:
				if got.Err == nil {
					t.Fatalf("got %+v, want an error", got)
				}
				var re redis.Error
				if errors.As(got.Err, &re) {
					t.Fatalf("malformed reply read as the Redis error %v", got.Err)
				}
			case c.want.Err != nil:
				if !errors.Is(got.Err, c.want.Err) {
					t.Fatalf("got %+v, want %v", got, c.want.Err)
				}
			default:
				if got != c.want {
					t.Fatalf("got %+v, want %+v", got, c.want)
				}
			}
		})
	}
}

// Every cut and every changed byte of a valid reply is an error or a well-formed answer, never a panic,
// and a cut reply is never read as complete.
func TestExecReplyDamaged(t *testing.T) {
	valid := "*4\r\n$3\r\n0-6\r\n-ERR x\r\n$4\r\n0-10\r\n*3\r\n:5\r\n:-1\r\n:0\r\n"
	if r := execReply([]byte(valid), 3); r.Err != nil || r.BaseOffset != 5 || r.LogStartOffset != -1 {
		t.Fatalf("valid reply: %+v", r)
	}
	for cut := range len(valid) {
		if r := execReply([]byte(valid[:cut]), 3); r.Err == nil {
			t.Fatalf("reply cut at %d read as %+v", cut, r)
		}
	}
	for i := range len(valid) {
		for _, b := range []byte{0, '\r', '\n', '-', '*', '$', ':', '9', 'x'} {
			raw := []byte(valid)
			raw[i] = b
			_ = execReply(raw, 3)
		}
	}
}

func TestRespInt(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "7": 7, "-1": -1, "123456789": 123456789,
		"9223372036854775807":  math.MaxInt64,
		"-9223372036854775808": math.MinInt64,
	} {
		if got, ok := respInt([]byte(in)); !ok || got != want {
			t.Errorf("respInt(%q) = %d, %v; want %d", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "-", "+1", "1.5", " 1", "9223372036854775808", "-9223372036854775809", "99999999999999999999", "1e3"} {
		if got, ok := respInt([]byte(in)); ok {
			t.Errorf("respInt(%q) = %d, want refused", in, got)
		}
	}
	for _, v := range []int64{1, 42, 1 << 40, math.MaxInt64 - 1} {
		if got, _ := respInt([]byte(strconv.FormatInt(v, 10))); got != v {
			t.Errorf("respInt(%d) = %d", v, got)
		}
	}
}

// An XADD that fails inside the MULTI block (its stream is not a stream) fails that batch and leaves the
// pipeline in step: the other partitions of the same request, before and after it, are stored.
func TestAppendWithAFailingXADD(t *testing.T) {
	s := openStore(t, Options{Addrs: []string{standalone.Addr}})
	topic := mustCreateTopic(t, s, "failing-xadd", 3).Name
	ctx := t.Context()
	if err := s.rdb.Set(ctx, s.keys.stream(topic, 1), "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var batches []*Batch
	for p := range int32(3) {
		batches = append(batches, &Batch{Topic: topic, Partition: p, ProducerID: -1, Records: plain("r", 4)})
	}
	res := s.Append(ctx, batches)
	if res[0].Err != nil || res[2].Err != nil {
		t.Fatalf("partitions 0 and 2: %+v, %+v", res[0], res[2])
	}
	if !redis.HasErrorPrefix(res[1].Err, "WRONGTYPE") || !IsUnavailable(res[1].Err) {
		t.Fatalf("partition 1: %+v, want a retriable WRONGTYPE error", res[1])
	}
	for _, p := range []int32{0, 2} {
		if got := mustRead(t, s, topic, p, 0, 10); len(got.Records) != 4 {
			t.Fatalf("partition %d holds %d records, want 4", p, len(got.Records))
		}
	}
	// Reading it fails alike (read raw, then again as values: readAgain), and the others still read.
	read := s.Read(ctx, []ReadRequest{{Topic: topic, Partition: 0, Count: 10}, {Topic: topic, Partition: 1, Count: 10}})
	if len(read[0].Records) != 4 || !redis.HasErrorPrefix(read[1].Err, "WRONGTYPE") {
		t.Fatalf("read: %d records and %v; %v, want 4 records; WRONGTYPE", len(read[0].Records), read[0].Err, read[1].Err)
	}
}

// An append allocates a small constant per record on top of its per-batch cost: the Redis replies
// (a "+QUEUED" and an entry ID per record) are read without values (raw_reply.go).
func TestAppendAllocationsPerRecord(t *testing.T) {
	s := openStore(t, Options{Addrs: []string{standalone.Addr}})
	topic := mustCreateTopic(t, s, "append-allocs", 4).Name
	ctx := t.Context()
	perBatch := func(n int) float64 {
		build := func() []*Batch {
			bs := make([]*Batch, 4)
			for p := range bs {
				recs := make([]Record, n)
				for i := range recs {
					recs[i] = Record{Timestamp: time.Now().UnixMilli(), Key: []byte("k0000001"), Value: make([]byte, 100)}
				}
				bs[p] = &Batch{Topic: topic, Partition: int32(p), ProducerID: -1, Records: recs}
			}
			return bs
		}
		var total float64 // AllocsPerRun appends bs twice, a warm-up and the one counted
		const runs = 20
		for range runs {
			bs := build()
			total += testing.AllocsPerRun(1, func() {
				for _, r := range s.Append(ctx, bs) {
					if r.Err != nil {
						t.Fatal(r.Err)
					}
				}
			})
		}
		return total / runs
	}
	small, large := perBatch(10), perBatch(210)
	perRecord := (large - small) / (4 * 200)
	t.Logf("allocations per append of 4 batches: %.0f at 10 records each, %.0f at 210: %.2f per record", small, large, perRecord)
	if perRecord > 1.5 {
		t.Fatalf("%.2f allocations per record, want at most 1.5 (one command object each)", perRecord)
	}
}

func TestParseEntriesRaw(t *testing.T) {
	reply := "*4\r\n" +
		"*2\r\n$3\r\n0-1\r\n*6\r\n$2\r\nts\r\n$3\r\n100\r\n$3\r\nkey\r\n$0\r\n\r\n$5\r\nvalue\r\n$2\r\nv0\r\n" +
		"*2\r\n$15\r\n1700000000000-0\r\n*2\r\n$5\r\nother\r\n$1\r\nx\r\n" + // not kgate's: skipped
		"*2\r\n$3\r\n0-3\r\n*6\r\n$5\r\nvalue\r\n$2\r\nv2\r\n$2\r\nts\r\n$3\r\n102\r\n$3\r\nh:a\r\n$1\r\n1\r\n" +
		"*2\r\n$3\r\n0-4\r\n*4\r\n$2\r\nts\r\n$3\r\n103\r\n$4\r\nhn:b\r\n$0\r\n\r\n"
	recs, err := parseEntries([]byte(reply))
	if err != nil || len(recs) != 3 {
		t.Fatalf("%d records, %v", len(recs), err)
	}
	r0, r2, r3 := recs[0], recs[1], recs[2]
	if r0.Offset != 0 || r0.Timestamp != 100 || r0.Key == nil || len(r0.Key) != 0 || string(r0.Value) != "v0" || r0.Headers != nil {
		t.Errorf("record 0: %+v (an empty key is not a null key)", r0)
	}
	if r2.Offset != 2 || r2.Timestamp != 102 || r2.Key != nil || string(r2.Value) != "v2" || len(r2.Headers) != 1 || r2.Headers[0].Key != "a" || string(r2.Headers[0].Value) != "1" {
		t.Errorf("record 2: %+v", r2)
	}
	if r3.Offset != 3 || r3.Value != nil || len(r3.Headers) != 1 || r3.Headers[0].Key != "b" || r3.Headers[0].Value != nil {
		t.Errorf("record 3: %+v", r3)
	}
	if cap(r0.Value) != len(r0.Value) {
		t.Errorf("a value's capacity reaches into the rest of the reply")
	}
	if _, err := parseEntries([]byte("*0\r\n")); err != nil {
		t.Errorf("empty reply: %v", err)
	}
	if _, err := parseEntries([]byte("-WRONGTYPE Operation against a key holding the wrong kind of value\r\n")); !redis.HasErrorPrefix(err, "WRONGTYPE") {
		t.Errorf("error reply read as %v", err)
	}
	for cut := range len(reply) {
		if recs, err := parseEntries([]byte(reply[:cut])); err == nil {
			t.Fatalf("reply cut at %d read as %d records", cut, len(recs))
		}
	}
	for i := range len(reply) {
		for _, b := range []byte{0, '\r', '\n', '-', '*', '$', '9', 'x'} {
			raw := []byte(reply)
			raw[i] = b
			_, _ = parseEntries(raw)
		}
	}
}

// A read allocates no more per record than the client library's reader takes per bulk string (the
// entry's ID, field names and values): the XRANGE reply is one buffer the records view, where reading
// it as values took twice that.
func TestReadAllocationsPerRecord(t *testing.T) {
	s := openStore(t, Options{Addrs: []string{standalone.Addr}})
	topic := mustCreateTopic(t, s, "read-allocs", 1).Name
	recs := make([]Record, 1000)
	for i := range recs {
		recs[i] = Record{Timestamp: int64(i), Key: []byte("k0000001"), Value: make([]byte, 100), Headers: []Header{{Key: "h", Value: []byte("v")}}}
	}
	mustAppend(t, s, &Batch{Topic: topic, Partition: 0, ProducerID: -1, Records: recs})
	ctx := t.Context()
	allocs := func(n int64) float64 {
		return testing.AllocsPerRun(20, func() {
			res := s.Read(ctx, []ReadRequest{{Topic: topic, Partition: 0, Offset: 0, Count: n, RecordBytes: 120}})[0]
			if res.Err != nil || int64(len(res.Records)) != n {
				t.Fatalf("read %d: %d records, %v", n, len(res.Records), res.Err)
			}
		})
	}
	small, large := allocs(10), allocs(1000)
	perRecord := (large - small) / 990
	t.Logf("allocations per read: %.0f of 10 records, %.0f of 1,000: %.3f per record", small, large, perRecord)
	const bulks = 1 + 2*4 // ID; ts, key, value and a header, each a name and a value
	if perRecord > bulks+0.5 {
		t.Fatalf("%.3f allocations per record, want at most one per bulk string (%d)", perRecord, bulks)
	}
}

// slotMove moves the cluster slot of a key from its master to another, keys first, and hands it back
// when the test ends.
type slotMove struct {
	t              *testing.T
	ctx            context.Context
	slot           int64
	from, to       *redis.Client
	fromID, toID   string
	moved, started bool
}

func startSlotMove(t *testing.T, key string) *slotMove {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // the cleanup hands the slot back
	t.Cleanup(cancel)
	m := &slotMove{t: t, ctx: ctx}
	probe := m.node(cluster.Masters[0].Addr)
	var err error
	if m.slot, err = probe.ClusterKeySlot(ctx, key).Result(); err != nil {
		t.Fatal(err)
	}
	for _, s := range cluster.Masters {
		c := m.node(s.Addr)
		if n, err := c.ClusterCountKeysInSlot(ctx, int(m.slot)).Result(); err == nil && n > 0 {
			m.from = c
		} else if m.to == nil {
			m.to = c
		}
	}
	if m.from == nil || m.to == nil {
		t.Fatalf("slot %d: no master holds its keys, or no other master", m.slot)
	}
	m.fromID, m.toID = m.id(m.from), m.id(m.to)
	t.Cleanup(func() {
		if m.moved {
			m.from, m.to, m.fromID, m.toID = m.to, m.from, m.toID, m.fromID
			m.begin()
			m.finish()
			return
		}
		// The test failed half way: keys already migrated go back (the importing master takes
		// commands for the slot after ASKING), and the migration ends.
		conn := m.to.Conn()
		defer conn.Close()
		host, port, _ := strings.Cut(m.from.Options().Addr, ":")
		keys, _ := conn.ClusterGetKeysInSlot(ctx, int(m.slot), 1000).Result()
		for _, k := range keys {
			conn.Do(ctx, "ASKING")
			conn.Do(ctx, "MIGRATE", host, port, k, 0, 5000)
		}
		for _, s := range cluster.Masters {
			m.node(s.Addr).Do(ctx, "CLUSTER", "SETSLOT", m.slot, "STABLE")
		}
	})
	m.begin()
	return m
}

func (m *slotMove) node(addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	m.t.Cleanup(func() { c.Close() })
	return c
}

func (m *slotMove) id(c *redis.Client) string {
	return strings.TrimSpace(c.Do(m.ctx, "CLUSTER", "MYID").Val().(string))
}

func (m *slotMove) must(c *redis.Client, args ...any) {
	m.t.Helper()
	if err := c.Do(m.ctx, args...).Err(); err != nil {
		m.t.Fatalf("%v: %v", args, err)
	}
}

func (m *slotMove) begin() {
	m.must(m.to, "CLUSTER", "SETSLOT", m.slot, "IMPORTING", m.fromID)
	m.must(m.from, "CLUSTER", "SETSLOT", m.slot, "MIGRATING", m.toID)
}

// migrate moves one key of the slot: its old master answers ASK for it from then on.
func (m *slotMove) migrate(key string) {
	m.t.Helper()
	host, port, _ := strings.Cut(m.to.Options().Addr, ":")
	m.must(m.from, "MIGRATE", host, port, key, 0, 5000)
}

// finish moves the slot's other keys and hands the slot over on every master: clients whose slot map
// names the old master get MOVED.
func (m *slotMove) finish() {
	m.t.Helper()
	keys, err := m.from.ClusterGetKeysInSlot(m.ctx, int(m.slot), 1000).Result()
	if err != nil {
		m.t.Fatal(err)
	}
	for _, k := range keys {
		m.migrate(k)
	}
	for _, s := range cluster.Masters {
		m.must(m.node(s.Addr), "CLUSTER", "SETSLOT", m.slot, "NODE", m.toID)
	}
	m.moved = true
}

// Reads follow a slot on the move: a partition's stream migrated ahead of its other keys (its master
// answers ASK) and then the slot handed over (the client's slot map is stale: MOVED). The raw XRANGE
// replies are error replies the client library does not redirect; readAgain reads them as values.
func TestReadFollowsSlotMigration(t *testing.T) {
	s := openStore(t, Options{Addrs: cluster.Addrs(), Cluster: true})
	topic := mustCreateTopic(t, s, "migrating", 1).Name
	mustAppend(t, s, &Batch{Topic: topic, Partition: 0, ProducerID: -1, Records: plain("m", 3)})
	read := func(when string) {
		t.Helper()
		res := s.Read(t.Context(), []ReadRequest{{Topic: topic, Partition: 0, Offset: 0, Count: 10}})[0]
		if res.Err != nil || len(res.Records) != 3 || res.End != 3 {
			t.Fatalf("%s: %d records, high watermark %d, %v; want the 3 appended", when, len(res.Records), res.End, res.Err)
		}
	}
	m := startSlotMove(t, s.keys.stream(topic, 0))
	m.migrate(s.keys.stream(topic, 0)) // the stream moved, its meta not yet: XRANGE gets ASK
	read("stream migrating")
	m.finish()
	read("slot moved")
}

// An append to a slot that moved answers a retriable MOVED (the append's node clients do not
// redirect) and has the cluster client reload its slot map, so the producer's retry is stored; before,
// appends failed until the client's periodic reload, a minute later. Both append paths: Redis 7's
// transaction, and the script of Redis below 7 (taken here by turning the former off).
func TestAppendAfterSlotMoved(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		t.Run(map[bool]string{false: "transaction", true: "script"}[legacy], func(t *testing.T) {
			s := openStore(t, Options{Addrs: cluster.Addrs(), Cluster: true})
			if legacy {
				s.multiAppend.Store(false)
			}
			appendAfterSlotMoved(t, s, map[bool]string{false: "moved", true: "moved-legacy"}[legacy])
		})
	}
}

func appendAfterSlotMoved(t *testing.T, s *Store, name string) {
	topic := mustCreateTopic(t, s, name, 1).Name
	mustAppend(t, s, &Batch{Topic: topic, Partition: 0, ProducerID: -1, Records: plain("a", 2)})
	startSlotMove(t, s.keys.stream(topic, 0)).finish()
	first := s.Append(t.Context(), []*Batch{{Topic: topic, Partition: 0, ProducerID: -1, Records: plain("b", 2)}})[0]
	if !redis.HasErrorPrefix(first.Err, "MOVED") || !IsUnavailable(first.Err) {
		t.Fatalf("first append after the move: %+v, want a retriable MOVED", first)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := s.Append(t.Context(), []*Batch{{Topic: topic, Partition: 0, ProducerID: -1, Records: plain("b", 2)}})[0]
		if r.Err == nil {
			if r.BaseOffset != 2 {
				t.Fatalf("retry stored at offset %d, want 2", r.BaseOffset)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("appends still fail 5 s after the slot moved: %v", r.Err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// An error reply read raw (an EXEC refused: EXECABORT, MOVED) counts as the pipeline's error for the
// command observer (metrics), as the client library's own errors do.
func TestObserverSeesRawErrorReplies(t *testing.T) {
	ctx := t.Context()
	var seen []error
	hook := observeHook{fn: func(_ string, _ time.Duration, err error) { seen = append(seen, err) }}
	run := hook.ProcessPipelineHook(func(context.Context, []redis.Cmder) error { return nil })
	ok, refused := redis.NewRawCmd(ctx, "EXEC"), redis.NewRawCmd(ctx, "EXEC")
	ok.SetVal([]byte("*1\r\n*3\r\n:0\r\n:0\r\n:0\r\n"))
	refused.SetVal([]byte("-EXECABORT Transaction discarded because of previous errors.\r\n"))
	_ = run(ctx, []redis.Cmder{ok})
	_ = run(ctx, []redis.Cmder{ok, refused})
	if len(seen) != 2 || seen[0] != nil || !redis.HasErrorPrefix(seen[1], "EXECABORT") {
		t.Fatalf("observed %v, want nil then the EXECABORT", seen)
	}
}

// One record with many headers among plain ones does not size the header slab for them all: the slab
// is bounded by what the rest of the reply can hold.
func TestParseEntriesHeaderSlabBounded(t *testing.T) {
	raw := rangeReply(2001, func(i int) []string {
		fields := []string{"ts", "1", "value", "v"}
		if i == 0 {
			for h := range 1000 {
				fields = append(fields, fmt.Sprintf("h:%d", h), "x")
			}
		}
		return fields
	})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	recs, err := parseEntries(raw)
	runtime.ReadMemStats(&after)
	if err != nil || len(recs) != 2001 || len(recs[0].Headers) != 1000 || recs[1].Headers != nil {
		t.Fatalf("%d records, %v", len(recs), err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 4<<20 {
		t.Fatalf("parsing a %d KB reply allocated %d MB", len(raw)>>10, grew>>20)
	}
}

// On a cluster the appends run on node clients, outside the cluster client's hooks: they are reported
// to the observer all the same.
func TestObserverSeesClusterAppends(t *testing.T) {
	s := openStore(t, Options{Addrs: cluster.Addrs(), Cluster: true})
	needMultiAppend(t, s)
	topic := mustCreateTopic(t, s, "observed", 1).Name
	var mu sync.Mutex
	var seen []string
	s.Observe(func(cmd string, _ time.Duration, _ error) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, cmd)
	})
	mustAppend(t, s, &Batch{Topic: topic, Partition: 0, ProducerID: -1, Records: plain("o", 2)})
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(seen, "pipeline") {
		t.Fatalf("observed %v, want the append's pipeline", seen)
	}
}
