package integration

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/kgate/kgate/gateway"
	"github.com/kgate/kgate/protocol"
	"github.com/kgate/kgate/redisstore"
)

// Fetch: long-poll wake-up by appends, v13 topic IDs, OFFSET_OUT_OF_RANGE, byte limits.

// TestFetchLongPollWakesOnAppend: a consumer long-polling with a 5 s max wait receives a record
// produced 300 ms into its wait well within 2 s, so the fetch was woken by the append, not by its
// timeout. The consumer is franz-go, which fetches by topic ID (Fetch v13) against kgate.
func TestFetchLongPollWakesOnAppend(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 30*time.Second)
		mustCreateTopics(t, ctx, newAdmin(t, g), 1, nil, "poll")
		p := newClient(t, g, kgo.DefaultProduceTopic("poll"))
		versions := &requestVersions{}
		c := newClient(t, g, kgo.ConsumeTopics("poll"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchMaxWait(5*time.Second), kgo.WithLogger(versions))

		// Prime: once the consumer has record 0, its next fetch (from offset 1) is already waiting, started
		// at most a few milliseconds before PollFetches returned.
		if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte("prime")}).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		consumeRecords(t, ctx, c, 1)
		for i := 1; i <= 2; i++ {
			time.Sleep(300 * time.Millisecond) // part of the scenario: the record arrives mid-wait
			sent := time.Now()
			if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte("late")}).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
			got := consumeRecords(t, ctx, c, 1)
			took := time.Since(sent)
			if got[0].Offset != int64(i) || string(got[0].Value) != "late" {
				t.Fatalf("got offset %d %q, want offset %d", got[0].Offset, got[0].Value, i)
			}
			if took > 2*time.Second {
				t.Fatalf("record %d reached the waiting consumer %v after it was produced: the fetch was not woken by the append", i, took)
			}
		}
		// franz-go fetched by topic ID: every Fetch it read back was v13.
		if got := versions.of("Fetch"); len(got) == 0 || slices.ContainsFunc(got, func(v string) bool { return v != "v13" }) {
			t.Fatalf("franz-go read Fetch responses of versions %v, want only v13", got)
		}
	})
}

// requestVersions is a kgo.Logger that keeps the "read <Request> v<N>" debug lines franz-go logs for
// every response it reads, to tell which protocol versions it used.
type requestVersions struct {
	mu   sync.Mutex
	read map[string][]string
}

func (l *requestVersions) Level() kgo.LogLevel { return kgo.LogLevelDebug }

func (l *requestVersions) Log(_ kgo.LogLevel, msg string, _ ...any) {
	rest, ok := strings.CutPrefix(msg, "read ")
	if !ok {
		return
	}
	name, version, ok := strings.Cut(rest, " ")
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.read == nil {
		l.read = map[string][]string{}
	}
	l.read[name] = append(l.read[name], version)
}

// of returns the versions of every name response read so far.
func (l *requestVersions) of(name string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.read[name])
}

// TestFetchRaw covers what franz-go hides: Fetch v13 by topic ID (and UNKNOWN_TOPIC_ID), an offset
// beyond the high watermark (OFFSET_OUT_OF_RANGE), byte limits smaller than one record still
// returning that record (KIP-74), and batches rebuilt uncompressed without producer fields.
func TestFetchRaw(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 30*time.Second)
		cr := mustCreateTopics(t, ctx, newAdmin(t, g), 1, nil, "raw")
		id := [16]byte(cr["raw"].ID)
		p := newClient(t, g, kgo.DefaultProduceTopic("raw"), kgo.ProducerBatchCompression(kgo.GzipCompression()))
		value := strings.Repeat("v", 200)
		for i := 0; i < 5; i++ {
			if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte(value)}).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
		}
		c := dialRaw(t, g.Addr)
		count := func(sp kmsg.FetchResponseTopicPartition) (n int, first int64) {
			first = -1
			for _, b := range fetchedRecords(t, sp) {
				if first < 0 {
					first = b.BaseOffset
				}
				n += len(b.Records)
			}
			return n, first
		}

		// v13 by topic ID only (no name).
		resp := roundTrip[*kmsg.FetchResponse](c, 13, fetchReq("", id, 0, 2, 1<<20))
		sp := fetchPart(t, resp)
		if resp.Topics[0].TopicID != id || sp.ErrorCode != 0 || sp.HighWatermark != 5 || sp.LogStartOffset != 0 {
			t.Fatalf("fetch v13 by id: id %x error %d hw %d start %d", resp.Topics[0].TopicID, sp.ErrorCode, sp.HighWatermark, sp.LogStartOffset)
		}
		if n, first := count(sp); n != 3 || first != 2 {
			t.Fatalf("fetch v13 from offset 2: %d records from %d, want 3 from 2", n, first)
		}
		// Batches are rebuilt from the stream entries: the five records, produced as five gzip batches of
		// an idempotent producer, come back as one uncompressed batch without producer fields.
		bs := fetchedRecords(t, fetchPart(t, roundTrip[*kmsg.FetchResponse](c, 12, fetchReq("raw", [16]byte{}, 0, 0, 1<<20))))
		if len(bs) != 1 {
			t.Fatalf("fetch from 0: %d batches, want one", len(bs))
		}
		if b := bs[0]; len(b.Records) != 5 || b.Compression() != protocol.CodecNone || b.ProducerID != -1 || b.ProducerEpoch != -1 || b.BaseSequence != -1 {
			t.Fatalf("fetch from 0: a batch of %d records, codec %d, producer %d/%d/%d; want 5, uncompressed, -1/-1/-1",
				len(b.Records), b.Compression(), b.ProducerID, b.ProducerEpoch, b.BaseSequence)
		}
		if e := bs[0].PartitionLeaderEpoch; e != -1 { // librdkafka validates positions whose epoch is known
			t.Fatalf("fetch from 0: partition leader epoch %d, want -1", e)
		}
		sp = fetchPart(t, roundTrip[*kmsg.FetchResponse](c, 13, fetchReq("", [16]byte{1, 2, 3}, 0, 0, 1<<20)))
		if sp.ErrorCode != kerr.UnknownTopicID.Code {
			t.Fatalf("fetch v13 with an unknown topic id: error %d, want UNKNOWN_TOPIC_ID", sp.ErrorCode)
		}

		// At the high watermark: no records, no error. Beyond it: OFFSET_OUT_OF_RANGE.
		sp = fetchPart(t, roundTrip[*kmsg.FetchResponse](c, 12, fetchReq("raw", [16]byte{}, 0, 5, 1<<20)))
		if n, _ := count(sp); sp.ErrorCode != 0 || n != 0 {
			t.Fatalf("fetch at the high watermark: error %d, %d records", sp.ErrorCode, n)
		}
		for _, off := range []int64{6, 1000, -5} {
			sp = fetchPart(t, roundTrip[*kmsg.FetchResponse](c, 12, fetchReq("raw", [16]byte{}, 0, off, 1<<20)))
			if sp.ErrorCode != kerr.OffsetOutOfRange.Code || sp.HighWatermark != 5 {
				t.Fatalf("fetch at %d: error %d hw %d, want OFFSET_OUT_OF_RANGE and 5", off, sp.ErrorCode, sp.HighWatermark)
			}
		}
		// Unknown partition.
		sp = fetchPart(t, roundTrip[*kmsg.FetchResponse](c, 12, fetchReq("raw", [16]byte{}, 7, 0, 1<<20)))
		if sp.ErrorCode != kerr.UnknownTopicOrPartition.Code {
			t.Fatalf("fetch partition 7 of 1: error %d", sp.ErrorCode)
		}

		// Partition max bytes below one record: exactly the first record, whole.
		sp = fetchPart(t, roundTrip[*kmsg.FetchResponse](c, 12, fetchReq("raw", [16]byte{}, 0, 1, 10)))
		bs = fetchedRecords(t, sp)
		if n, first := count(sp); sp.ErrorCode != 0 || n != 1 || first != 1 || string(bs[0].Records[0].Value) != value {
			t.Fatalf("fetch with partition max bytes 10: error %d, %d records from %d", sp.ErrorCode, n, first)
		}
		// The same with a response max bytes of 1.
		req := fetchReq("raw", [16]byte{}, 0, 0, 1<<20)
		req.MaxBytes = 1
		sp = fetchPart(t, roundTrip[*kmsg.FetchResponse](c, 12, req))
		if n, first := count(sp); sp.ErrorCode != 0 || n != 1 || first != 0 {
			t.Fatalf("fetch with response max bytes 1: error %d, %d records from %d", sp.ErrorCode, n, first)
		}
		// A limit of about two records returns fewer than all five.
		sp = fetchPart(t, roundTrip[*kmsg.FetchResponse](c, 12, fetchReq("raw", [16]byte{}, 0, 0, 600)))
		if n, first := count(sp); sp.ErrorCode != 0 || n < 1 || n >= 5 || first != 0 || len(sp.RecordBatches) > 600 {
			t.Fatalf("fetch with partition max bytes 600: error %d, %d records from %d in %d bytes", sp.ErrorCode, n, first, len(sp.RecordBatches))
		}

		// min_bytes above what is there: the fetch waits out max_wait_ms, then answers with what it has.
		req = fetchReq("raw", [16]byte{}, 0, 3, 1<<20)
		req.MinBytes, req.MaxWaitMillis = 1<<20, 300
		start := time.Now()
		sp = fetchPart(t, roundTrip[*kmsg.FetchResponse](c, 12, req))
		if took := time.Since(start); took < 250*time.Millisecond {
			t.Fatalf("fetch with min_bytes 1 MiB answered after %v, before max_wait_ms 300", took)
		}
		if n, first := count(sp); sp.ErrorCode != 0 || n != 2 || first != 3 {
			t.Fatalf("fetch with min_bytes 1 MiB: error %d, %d records from %d, want 2 from 3", sp.ErrorCode, n, first)
		}

		// franz-go fetches with partition max bytes smaller than a record and still makes progress.
		cl := newClient(t, g, kgo.ConsumeTopics("raw"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchMaxPartitionBytes(10), kgo.FetchMaxBytes(10), kgo.FetchMaxWait(500*time.Millisecond))
		for i, r := range consumeRecords(t, ctx, cl, 5) {
			if r.Offset != int64(i) {
				t.Fatalf("tiny-limit consumer: record %d has offset %d", i, r.Offset)
			}
		}
	})
}

// TestFetchReadAhead: after a fetch that leaves records behind, the gateway reads the next ones in the
// background; the next fetch at exactly those offsets is answered from that read but with the
// partition's current offsets. So a DeleteRecords made after the read-ahead still turns the next fetch
// into OFFSET_OUT_OF_RANGE, records appended after it are delivered by a later fetch without a gap,
// and a topic deleted and created again under the same name never gets the old topic's records. That
// the read-ahead answers at all shows in a fetch with room for every record getting only the few the
// read-ahead read (sized by the previous fetch's limit).
func TestFetchReadAhead(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 30*time.Second)
		adm := newAdmin(t, g)
		value := strings.Repeat("v", 200)
		produce := func(topic, v string, n int) {
			t.Helper()
			p := newClient(t, g, kgo.DefaultProduceTopic(topic))
			for i := 0; i < n; i++ {
				if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
					t.Fatalf("produce: %v", err)
				}
			}
		}
		mustCreateTopics(t, ctx, adm, 1, nil, "ahead")
		produce("ahead", value, 10)
		c := dialRaw(t, g.Addr)
		// fetch answers one request of about three records from offset and returns the offsets of the
		// records it got.
		fetch := func(topic string, offset int64) (kmsg.FetchResponseTopicPartition, []int64) {
			t.Helper()
			sp := fetchPart(t, roundTrip[*kmsg.FetchResponse](c, 12, fetchReq(topic, [16]byte{}, 0, offset, 700)))
			return sp, fetchedOffsets(t, sp)
		}
		// A fetch cut at about three records starts a read-ahead of about as many; the next fetch at
		// exactly that offset, with room for all ten records, is answered from it: a fresh read would
		// return every record left.
		sp, got := fetch("ahead", 0)
		next := got[len(got)-1] + 1
		sp = fetchPart(t, roundTrip[*kmsg.FetchResponse](c, 12, fetchReq("ahead", [16]byte{}, 0, next, 1<<20)))
		ahead := fetchedOffsets(t, sp)
		if sp.ErrorCode != 0 || len(ahead) == 0 || ahead[0] != next || int64(len(ahead)) >= 10-next {
			t.Fatalf("fetch at %d with room for every record: error %d, offsets %v; want fewer than the %d left, from the read-ahead", next, sp.ErrorCode, ahead, 10-next)
		}
		next = ahead[len(ahead)-1] + 1

		// Catching up: every fetch starts where the last one ended; no gaps, no repeats.
		for next < 6 {
			sp, got := fetch("ahead", next)
			if sp.ErrorCode != 0 || len(got) == 0 || got[0] != next || sp.HighWatermark != 10 {
				t.Fatalf("fetch at %d: error %d, offsets %v, hw %d", next, sp.ErrorCode, got, sp.HighWatermark)
			}
			next = got[len(got)-1] + 1
		}

		// The read-ahead for offset next is done by now; the log start moves past it.
		time.Sleep(100 * time.Millisecond)
		var trim kadm.Offsets
		trim.AddOffset("ahead", 0, next+1, -1)
		if del, err := adm.DeleteRecords(ctx, trim); err != nil || del.Error() != nil {
			t.Fatalf("delete records: %v %v", err, del.Error())
		}
		if sp, got := fetch("ahead", next); sp.ErrorCode != kerr.OffsetOutOfRange.Code || sp.LogStartOffset != next+1 {
			t.Fatalf("fetch at %d below the new log start %d: error %d, log start %d, offsets %v", next, next+1, sp.ErrorCode, sp.LogStartOffset, got)
		}

		// Appends after a read-ahead come with a later fetch, in order.
		next++
		sp, got = fetch("ahead", next)
		if sp.ErrorCode != 0 || len(got) == 0 || got[0] != next {
			t.Fatalf("fetch at the new log start %d: error %d, offsets %v", next, sp.ErrorCode, got)
		}
		next = got[len(got)-1] + 1
		time.Sleep(100 * time.Millisecond)
		produce("ahead", value, 5)
		for next < 15 {
			sp, got := fetch("ahead", next)
			if sp.ErrorCode != 0 || len(got) == 0 || got[0] != next {
				t.Fatalf("fetch at %d after appends: error %d, offsets %v (hw %d)", next, sp.ErrorCode, got, sp.HighWatermark)
			}
			next = got[len(got)-1] + 1
		}

		// A topic deleted and created again: the old topic's read-ahead is not used.
		mustCreateTopics(t, ctx, adm, 1, nil, "again")
		produce("again", "old"+value, 10)
		_, got = fetch("again", 0)
		next = got[len(got)-1] + 1
		time.Sleep(100 * time.Millisecond)
		if _, err := adm.DeleteTopics(ctx, "again"); err != nil {
			t.Fatalf("delete topic: %v", err)
		}
		waitFor(t, 10*time.Second, "topic again recreated", func() bool {
			r, err := adm.CreateTopics(ctx, 1, 1, nil, "again")
			return err == nil && r["again"].Err == nil
		})
		produce("again", "new"+value, 10)
		sp = fetchPart(t, roundTrip[*kmsg.FetchResponse](c, 12, fetchReq("again", [16]byte{}, 0, next, 700)))
		for _, bt := range fetchedRecords(t, sp) {
			for _, r := range bt.Records {
				if !strings.HasPrefix(string(r.Value), "new") {
					t.Fatalf("recreated topic: fetch at %d returned %.3q..., a record of the deleted topic", next, r.Value)
				}
			}
		}
		if sp.ErrorCode != 0 || len(sp.RecordBatches) == 0 {
			t.Fatalf("recreated topic: fetch at %d: error %d, %d bytes", next, sp.ErrorCode, len(sp.RecordBatches))
		}
	})
}

// TestFetchTailCache: a consumer at the end of a partition is answered from the records its gateway
// appended (shown by an entry deleted natively still being served), and never misses what another
// gateway appended: with two gateways on one namespace, records produced through the second are
// fetched through the first in order, whether they come after the first gateway's cached records or
// between two of its appends.
func TestFetchTailCache(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g1 := startGateway(t, b)
		g2 := startPeer(t, b, g1, 1)
		ctx := testCtx(t, 30*time.Second)
		mustCreateTopics(t, ctx, newAdmin(t, g1), 1, nil, "tail")
		c1, c2 := dialRaw(t, g1.Addr), dialRaw(t, g2.Addr)
		produce := func(c *rawConn, values ...string) { t.Helper(); produceValues(t, c, "tail", values...) }
		fetchOn := func(c *rawConn, offset int64) []string {
			t.Helper()
			sp := fetchPart(t, roundTrip[*kmsg.FetchResponse](c, 12, fetchReq("tail", [16]byte{}, 0, offset, 1<<20)))
			if sp.ErrorCode != 0 {
				t.Fatalf("fetch at %d: error %d", offset, sp.ErrorCode)
			}
			return fetchedValues(t, sp)
		}
		expect := func(offset int64, want ...string) {
			t.Helper()
			if got := fetchOn(c1, offset); !slices.Equal(got, want) {
				t.Fatalf("fetch at %d through the first gateway: %v, want %v", offset, got, want)
			}
		}

		// A consumer at the end of the partition: from now on the first gateway keeps its appends.
		expect(0)
		produce(c1, "a0", "a1", "a2")
		expect(1, "1:a1", "2:a2")
		expect(3)
		// The second gateway appends after the first gateway's cached records.
		produce(c2, "b3", "b4")
		expect(1, "1:a1", "2:a2", "3:b3", "4:b4")
		expect(3, "3:b3", "4:b4")
		// ... and between two appends of the first.
		produce(c1, "a5")
		produce(c2, "b6")
		produce(c1, "a7")
		expect(4, "4:b4", "5:a5", "6:b6", "7:a7")
		expect(7, "7:a7")
		// The cache answers: an entry deleted natively (XDEL, outside Kafka's API) is still served
		// from the first gateway's copy of its own append (a documented deviation); Redis no longer
		// has it.
		if err := g1.Store.Client().XDel(ctx, g1.Store.StreamKey("tail", 0), redisstore.EntryID(7)).Err(); err != nil {
			t.Fatal(err)
		}
		expect(7, "7:a7")

		// A gateway without a tail cache appends and reads Redis alone: the deleted entry is gone.
		g3 := startGateway(t, b, gatewayOpts{namespace: g1.Namespace, mutate: func(c *gateway.Config) {
			c.NodeID, c.TailCacheBytes = 2, -1
		}})
		c3 := dialRaw(t, g3.Addr)
		produce(c3, "c8")
		if got := fetchOn(c3, 7); !slices.Equal(got, []string{"8:c8"}) {
			t.Fatalf("fetch at 7 through the gateway without a tail cache: %v, want [8:c8]", got)
		}
	})
}

// TestFetchWokenByOwnAppend: a fetch long-polling at the end of a partition and woken by the gateway's
// own append answers with that append's records, high watermark and log start offset, without reading
// Redis (on standalone Redis, MONITOR shows no HMGET of the partition's offsets between the append and
// the response; the cluster run checks the answers only); the log start includes a DeleteRecords made
// outside this gateway before the append. An append that began before a fetch arrived never answers
// it, and one that answered a fetch still waiting does not hide another gateway's appends from it.
func TestFetchWokenByOwnAppend(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		g2 := startPeer(t, b, g, 1)
		ctx := testCtx(t, 30*time.Second)
		mustCreateTopics(t, ctx, newAdmin(t, g), 1, nil, "own")
		prod, prod2, cons := dialRaw(t, g.Addr), dialRaw(t, g2.Addr), dialRaw(t, g.Addr)
		produce := func(values ...string) { t.Helper(); produceValues(t, prod, "own", values...) }
		fetched := func(sp kmsg.FetchResponseTopicPartition) []string { t.Helper(); return fetchedValues(t, sp) }
		produce("a0", "a1")
		// The consumer reads up to the end: from now on the gateway keeps its appends.
		if sp := fetchPart(t, roundTrip[*kmsg.FetchResponse](cons, 12, fetchReq("own", [16]byte{}, 0, 0, 1<<20))); sp.HighWatermark != 2 {
			t.Fatalf("first fetch: high watermark %d, want 2", sp.HighWatermark)
		}
		// Records below 2 deleted elsewhere, without this gateway knowing.
		if start, err := g.Store.DeleteRecords(ctx, "own", 0, 2); err != nil || start != 2 {
			t.Fatalf("DeleteRecords: %d, %v", start, err)
		}

		metaKey := g.Namespace + ":meta:{own:0}"
		var mon *redisMonitor
		if !b.cluster {
			mon = startMonitor(t, b.addrs[0])
		}
		req := fetchReq("own", [16]byte{}, 0, 2, 1<<20)
		req.MaxWaitMillis, req.MinBytes = 5_000, 1
		req.SetVersion(12)
		corr := cons.send(req)
		if mon != nil {
			// The fetch read the offsets, found nothing and waits.
			mon.await(func(line string) bool { return isHMGET(line, metaKey) })
			mon.mark("appending")
		} else {
			time.Sleep(200 * time.Millisecond)
		}
		produce("a2")
		resp := kmsg.NewPtrFetchResponse()
		resp.SetVersion(12)
		if got := cons.read(resp); got != corr {
			t.Fatalf("fetch response correlation id %d, want %d", got, corr)
		}
		sp := fetchPart(t, resp)
		got := fetched(sp)
		if sp.ErrorCode != 0 || sp.HighWatermark != 3 || sp.LogStartOffset != 2 || !slices.Equal(got, []string{"2:a2"}) {
			t.Fatalf("woken fetch: error %d, high watermark %d, log start %d, records %v; want 0, 3, 2, [2:a2]",
				sp.ErrorCode, sp.HighWatermark, sp.LogStartOffset, got)
		}
		if mon != nil {
			for _, line := range mon.mark("answered") {
				if isHMGET(line, metaKey) {
					t.Fatalf("the woken fetch read the offsets from Redis: %s", line)
				}
			}
		}

		// The append of a2 began before these fetches arrived: after a DeleteRecords elsewhere they
		// read the new log start from Redis, not the one a2's append saw.
		if start, err := g.Store.DeleteRecords(ctx, "own", 0, 3); err != nil || start != 3 {
			t.Fatalf("DeleteRecords: %d, %v", start, err)
		}
		if sp := fetchPart(t, roundTrip[*kmsg.FetchResponse](cons, 12, fetchReq("own", [16]byte{}, 0, 2, 1<<20))); sp.ErrorCode != kerr.OffsetOutOfRange.Code {
			t.Fatalf("fetch at 2 after DeleteRecords: error %d, records %v; want OFFSET_OUT_OF_RANGE", sp.ErrorCode, fetched(sp))
		}
		if sp := fetchPart(t, roundTrip[*kmsg.FetchResponse](cons, 12, fetchReq("own", [16]byte{}, 0, 3, 1<<20))); sp.ErrorCode != 0 || sp.LogStartOffset != 3 || sp.HighWatermark != 3 {
			t.Fatalf("fetch at 3 after DeleteRecords: error %d, log start %d, high watermark %d; want 0, 3, 3", sp.ErrorCode, sp.LogStartOffset, sp.HighWatermark)
		}

		// A fetch wanting more than one append gives: this gateway's append answers its first read,
		// another gateway's append (a pub/sub wake) must then be read from Redis.
		req = fetchReq("own", [16]byte{}, 0, 3, 1<<20)
		req.MaxWaitMillis, req.MinBytes = 1_000, 1<<20
		req.SetVersion(12)
		corr = cons.send(req)
		time.Sleep(100 * time.Millisecond)
		produce("a3")
		time.Sleep(100 * time.Millisecond)
		produceValues(t, prod2, "own", "b4")
		resp = kmsg.NewPtrFetchResponse()
		resp.SetVersion(12)
		if got := cons.read(resp); got != corr {
			t.Fatalf("fetch response correlation id %d, want %d", got, corr)
		}
		if sp := fetchPart(t, resp); sp.HighWatermark != 5 || !slices.Equal(fetched(sp), []string{"3:a3", "4:b4"}) {
			t.Fatalf("fetch at 3 after its max wait: high watermark %d, records %v; want 5, [3:a3 4:b4]", sp.HighWatermark, fetched(sp))
		}
	})
}

// isHMGET reports whether a MONITOR line is a client's HMGET of key (not one a script ran, shown as
// "[0 lua]").
func isHMGET(line, key string) bool {
	return strings.Contains(strings.ToLower(line), `"hmget"`) && strings.Contains(line, `"`+key+`"`) && !strings.Contains(line, " lua]")
}

// redisMonitor follows a Redis server's MONITOR output, read off its own connection.
type redisMonitor struct {
	t     *testing.T
	rdb   *redis.Client // sends the markers
	lines chan string
}

func startMonitor(t *testing.T, addr string) *redisMonitor {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	m := &redisMonitor{t: t, rdb: redis.NewClient(&redis.Options{Addr: addr}), lines: make(chan string, 100_000)}
	var wg sync.WaitGroup
	t.Cleanup(func() { nc.Close(); wg.Wait(); m.rdb.Close() })
	if _, err := nc.Write([]byte("*1\r\n$7\r\nMONITOR\r\n")); err != nil {
		t.Fatalf("MONITOR: %v", err)
	}
	wg.Go(func() { // ends when the connection is closed
		rd := bufio.NewReader(nc)
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			select {
			case m.lines <- line:
			default: // nobody is reading this far; drop
			}
		}
	})
	m.mark("monitoring") // the server shows commands from here on
	return m
}

// mark sends a marker command and returns the lines MONITOR showed before it.
func (m *redisMonitor) mark(name string) []string {
	m.t.Helper()
	marker := fmt.Sprintf("kgate-test-%s-%d", name, time.Now().UnixNano())
	deadline := time.After(10 * time.Second)
	for {
		if err := m.rdb.Echo(m.t.Context(), marker).Err(); err != nil {
			m.t.Fatalf("ECHO: %v", err)
		}
		lines, ok := m.collect(func(line string) bool { return strings.Contains(line, marker) }, 200*time.Millisecond)
		if ok {
			return lines
		}
		select {
		case <-deadline:
			m.t.Fatalf("MONITOR never showed the marker %s", marker)
		default: // not monitoring yet: the ECHO went unseen
		}
	}
}

// await waits until MONITOR shows a line matching pred.
func (m *redisMonitor) await(pred func(string) bool) {
	m.t.Helper()
	if _, ok := m.collect(pred, 10*time.Second); !ok {
		m.t.Fatal("MONITOR never showed the expected command")
	}
}

// collect returns the lines up to the first one matching pred, and whether one did within d.
func (m *redisMonitor) collect(pred func(string) bool, d time.Duration) ([]string, bool) {
	timeout := time.After(d)
	var seen []string
	for {
		select {
		case line := <-m.lines:
			if pred(line) {
				return seen, true
			}
			seen = append(seen, line)
		case <-timeout:
			return seen, false
		}
	}
}

// TestFetchWokenByDuplicate: an idempotent retry of a batch that is already stored, but whose append
// woke nobody (its answer lost with its Redis connection; here, stored behind the gateway's back),
// wakes the fetches waiting on the partition instead of leaving them to their max wait.
func TestFetchWokenByDuplicate(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 30*time.Second)
		mustCreateTopics(t, ctx, newAdmin(t, g), 1, nil, "dupwake")
		producer := dialRaw(t, g.Addr)
		pid, epoch := initProducerID(t, producer, -1, -1)
		consumer := dialRaw(t, g.Addr)
		fr := fetchReq("dupwake", [16]byte{}, 0, 0, 1<<20)
		fr.MaxWaitMillis, fr.MinBytes = 5000, 1
		fr.SetVersion(12)
		consumer.send(fr)
		time.Sleep(200 * time.Millisecond) // the fetch is waiting

		now := time.Now().UnixMilli()
		stored := &redisstore.Batch{Topic: "dupwake", Partition: 0, ProducerID: pid, ProducerEpoch: epoch, BaseSequence: 0,
			Records: []redisstore.Record{{Timestamp: now, Value: []byte("once")}}, KnownPartition: true}
		if res := g.Store.Append(ctx, []*redisstore.Batch{stored}); res[0].Err != nil {
			t.Fatal(res[0].Err)
		}
		sent := time.Now()
		retry := roundTrip[*kmsg.ProduceResponse](producer, 9, produceReq("dupwake", 0, -1, rawBatch(t, pid, epoch, 0, now, "once")))
		if sp := producePart(t, retry); sp.ErrorCode != 0 || sp.BaseOffset != 0 {
			t.Fatalf("retry: error %d base offset %d, want 0 and 0", sp.ErrorCode, sp.BaseOffset)
		}
		resp := kmsg.NewPtrFetchResponse()
		resp.SetVersion(12)
		consumer.read(resp)
		if took := time.Since(sent); took > 2*time.Second {
			t.Fatalf("the waiting fetch answered %v after the retry: not woken", took)
		}
		if got := fetchedValues(t, fetchPart(t, resp)); len(got) != 1 || !strings.HasSuffix(got[0], "once") {
			t.Fatalf("fetched %v", got)
		}
	})
}

// TestFetchLargeRecordSets: record sets of 16 KiB and more are written from the buffers they were
// encoded in, beside the frame kmsg encodes (protocol.AppendFetchParts). franz-go reads back every
// record of three partitions of such sets, byte for byte, at its newest Fetch version (flexible, by
// topic ID) and at Fetch v8 (before flexible versions), with write deadlines per chunk and without.
func TestFetchLargeRecordSets(t *testing.T) {
	for _, tc := range []struct {
		name string
		idle time.Duration
		max  *kversion.Versions
	}{
		{"newest", 0, nil},
		{"v8", 0, kversion.V2_0_0()},
		{"no-idle-timeout", -1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := startGateway(t, backends()[0], gatewayOpts{mutate: func(c *gateway.Config) { c.IdleTimeout = tc.idle }})
			ctx := testCtx(t, 60*time.Second)
			mustCreateTopics(t, ctx, newAdmin(t, g), 3, nil, "large")
			p := newClient(t, g, kgo.DefaultProduceTopic("large"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			want := map[int32][]*kgo.Record{}
			for i := range 300 {
				part := int32(i % 3)
				value := make([]byte, 1000+i*37%3000)
				for j := range value {
					value[j] = byte(i*7 + j)
				}
				r := &kgo.Record{Partition: part, Key: fmt.Appendf(nil, "k%d", i), Value: value,
					Headers: []kgo.RecordHeader{{Key: "h", Value: fmt.Appendf(nil, "%d", i)}}}
				want[part] = append(want[part], r)
				p.Produce(ctx, r, nil)
			}
			if err := p.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			opts := []kgo.Opt{kgo.ConsumeTopics("large"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200 * time.Millisecond)}
			if tc.max != nil {
				opts = append(opts, kgo.MaxVersions(tc.max))
			}
			c := newClient(t, g, opts...)
			got := map[int32][]*kgo.Record{}
			for n := 0; n < 300; {
				fs := c.PollFetches(ctx)
				if err := fs.Err(); err != nil {
					t.Fatalf("poll after %d records: %v", n, err)
				}
				fs.EachRecord(func(r *kgo.Record) { got[r.Partition] = append(got[r.Partition], r); n++ })
			}
			for part, ws := range want {
				gs := got[part]
				if len(gs) != len(ws) {
					t.Fatalf("partition %d: %d records, want %d", part, len(gs), len(ws))
				}
				for i, w := range ws {
					g := gs[i]
					if g.Offset != int64(i) || !bytes.Equal(g.Key, w.Key) || !bytes.Equal(g.Value, w.Value) ||
						len(g.Headers) != 1 || !bytes.Equal(g.Headers[0].Value, w.Headers[0].Value) {
						t.Fatalf("partition %d record %d: offset %d key %q, %d value bytes; want offset %d key %q, %d bytes", part, i, g.Offset, g.Key, len(g.Value), i, w.Key, len(w.Value))
					}
				}
			}
		})
	}
}

// fetchSizes is a franz-go hook noting the size of every Fetch response the client read.
type fetchSizes struct {
	mu    sync.Mutex
	sizes []int
}

func (f *fetchSizes) OnBrokerRead(_ kgo.BrokerMetadata, key int16, bytesRead int, _, _ time.Duration, err error) {
	if key == 1 && err == nil {
		f.mu.Lock()
		f.sizes = append(f.sizes, bytesRead)
		f.mu.Unlock()
	}
}

// TestFetchResponsesCappedByFetchMaxBytes: a fetch response carries at most the gateway's
// fetch.max.bytes of records (kafka.fetch_max_bytes), however much more max_bytes asks for (franz-go:
// 50 MB) and partition_max_bytes allows, and the consumer still gets every record, in order.
func TestFetchResponsesCappedByFetchMaxBytes(t *testing.T) {
	t.Parallel()
	const capBytes = 256 << 10
	g := startGateway(t, backends()[0], gatewayOpts{mutate: func(c *gateway.Config) { c.FetchMaxBytes = capBytes }})
	ctx := testCtx(t, 60*time.Second)
	mustCreateTopics(t, ctx, newAdmin(t, g), 4, nil, "capped")
	p := newClient(t, g, kgo.DefaultProduceTopic("capped"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	const perPartition = 400 // 400 KB of 1 KB records each: all four fit one 50 MB response
	for i := range 4 * perPartition {
		p.Produce(ctx, &kgo.Record{Partition: int32(i % 4), Value: fmt.Appendf(make([]byte, 0, 1000), "%01000d", i)}, nil)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var sizes fetchSizes
	c := newClient(t, g, kgo.ConsumeTopics("capped"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond), kgo.WithHooks(&sizes))
	next := map[int32]int64{}
	for n := 0; n < 4*perPartition; {
		fs := c.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			t.Fatalf("poll after %d records: %v", n, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset != next[r.Partition] {
				t.Fatalf("partition %d: offset %d, want %d", r.Partition, r.Offset, next[r.Partition])
			}
			next[r.Partition]++
			n++
		})
	}
	sizes.mu.Lock()
	defer sizes.mu.Unlock()
	// The cap counts records as stored; a response adds their batch headers and its own framing.
	const slack = 16 << 10
	largest := slices.Max(sizes.sizes)
	if largest > capBytes+slack || largest < capBytes/2 || len(sizes.sizes) < 6 {
		t.Fatalf("%d fetch responses, the largest %d bytes; want each below %d and 1.6 MB in six or more", len(sizes.sizes), largest, capBytes+slack)
	}
}
