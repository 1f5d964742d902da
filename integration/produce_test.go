package integration

import (
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/gateway"
	"github.com/kgate/kgate/internal/redistest"
	"github.com/kgate/kgate/protocol"
)

// Produce-path behaviour: max.message.bytes, LogAppendTime, idempotence over the wire, acks=0, produce
// requests queued on one connection.

// TestMessageTooLarge: a 5 KB record on a topic with max.message.bytes=1000 fails with
// MESSAGE_TOO_LARGE and nothing is stored; a small record still goes through.
func TestMessageTooLarge(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 30*time.Second)
		adm := newAdmin(t, g)
		mustCreateTopics(t, ctx, adm, 1, map[string]*string{"max.message.bytes": kadm.StringPtr("1000")}, "small")
		p := newClient(t, g, kgo.DefaultProduceTopic("small"))
		big := make([]byte, 5000)
		rand.New(rand.NewSource(1)).Read(big) // incompressible: the batch stays above the limit
		err := p.ProduceSync(ctx, &kgo.Record{Value: big}).FirstErr()
		if !errors.Is(err, kerr.MessageTooLarge) {
			t.Fatalf("produce 5 KB to max.message.bytes=1000: %v, want MESSAGE_TOO_LARGE", err)
		}
		// The same idempotent producer carries on (franz-go resets its sequence after a failed batch).
		rec := &kgo.Record{Value: []byte("fits")}
		if err := p.ProduceSync(ctx, rec).FirstErr(); err != nil || rec.Offset != 0 {
			t.Fatalf("small record after the refused one: offset %d, %v (want offset 0: nothing was stored)", rec.Offset, err)
		}
	})
}

// TestLogAppendTime: on a message.timestamp.type=LogAppendTime topic the consumer sees the broker's
// append time (and the LogAppendTime attribute), not the producer's timestamp.
func TestLogAppendTime(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 30*time.Second)
		adm := newAdmin(t, g)
		mustCreateTopics(t, ctx, adm, 1, map[string]*string{"message.timestamp.type": kadm.StringPtr("LogAppendTime")}, "lat")
		p := newClient(t, g, kgo.DefaultProduceTopic("lat"))
		before := time.Now().Add(-time.Millisecond) // ms truncation
		for i := 0; i < 3; i++ {
			if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte{byte(i)}, Timestamp: time.UnixMilli(1000 + int64(i))}).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
		}
		after := time.Now().Add(time.Millisecond)
		c := newClient(t, g, kgo.ConsumeTopics("lat"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500*time.Millisecond))
		for i, r := range consumeRecords(t, ctx, c, 3) {
			if r.Timestamp.Before(before) || r.Timestamp.After(after) {
				t.Errorf("record %d: timestamp %v, want the append time in [%v, %v]", i, r.Timestamp, before, after)
			}
			if r.Attrs.TimestampType() != 1 {
				t.Errorf("record %d: timestamp type %d, want 1 (LogAppendTime)", i, r.Attrs.TimestampType())
			}
		}
	})
}

// TestLogAppendTimeDuplicate: an idempotent retry on a LogAppendTime topic is answered with its
// original's log append time, the one its records carry, as on Apache (UnifiedLog answers a duplicate
// with the time its producer state kept for the original), not the retry's. Deliberate deviations:
// once the original's records are deleted, the retry's time; on a CreateTime topic -1, as for any
// append there (Apache answers a duplicate there with the original batch's largest timestamp).
func TestLogAppendTimeDuplicate(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 30*time.Second)
		adm := newAdmin(t, g)
		mustCreateTopics(t, ctx, adm, 1, map[string]*string{"message.timestamp.type": kadm.StringPtr("LogAppendTime")}, "lat-dup")
		mustCreateTopics(t, ctx, adm, 1, nil, "ct-dup")
		c := dialRaw(t, g.Addr)
		pid, _ := initProducerID(t, c, -1, -1)
		produce := func(topic string) kmsg.ProduceResponseTopicPartition {
			t.Helper()
			req := produceReq(topic, 0, -1, rawBatch(t, pid, 0, 0, 1000, "a", "b"))
			sp := producePart(t, roundTrip[*kmsg.ProduceResponse](c, 9, req))
			if sp.ErrorCode != 0 || sp.BaseOffset != 0 {
				t.Fatalf("%s: error %d base offset %d, want 0 and 0", topic, sp.ErrorCode, sp.BaseOffset)
			}
			return sp
		}

		appended := produce("lat-dup").LogAppendTime
		if appended <= 1000 {
			t.Fatalf("log append time %d, want the gateway's clock", appended)
		}
		waitFor(t, 5*time.Second, "the clock to pass the append time", func() bool { return time.Now().UnixMilli() > appended })
		if got := produce("lat-dup").LogAppendTime; got != appended {
			t.Fatalf("retry: log append time %d, want the original's %d", got, appended)
		}
		sp := fetchPart(t, roundTrip[*kmsg.FetchResponse](c, 11, fetchReq("lat-dup", [16]byte{}, 0, 0, 1<<20)))
		for _, pb := range fetchedRecords(t, sp) {
			for _, r := range pb.Records {
				if r.Timestamp != appended {
					t.Errorf("record %d: timestamp %d, want the answered append time %d", pb.BaseOffset+int64(r.OffsetDelta), r.Timestamp, appended)
				}
			}
		}

		if got := produce("ct-dup").LogAppendTime; got != -1 {
			t.Fatalf("CreateTime topic: log append time %d, want -1", got)
		}
		if got := produce("ct-dup").LogAppendTime; got != -1 {
			t.Fatalf("CreateTime topic, retry: log append time %d, want -1", got)
		}

		var os kadm.Offsets
		os.Add(kadm.Offset{Topic: "lat-dup", Partition: 0, At: 2})
		if _, err := adm.DeleteRecords(ctx, os); err != nil {
			t.Fatalf("DeleteRecords: %v", err)
		}
		before := time.Now().UnixMilli()
		if got := produce("lat-dup").LogAppendTime; got < before {
			t.Fatalf("retry after its records were deleted: log append time %d, want the retry's (>= %d)", got, before)
		}
	})
}

// TestProduceRepeatedPartition: a Produce request that lists a partition more than once (within one
// topic entry, or in a second entry for the same topic) has only its last entry for that partition
// appended and answered, as on Apache (its request handler keeps one entry per partition). Appending
// every entry stored repeated records twice.
func TestProduceRepeatedPartition(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 30*time.Second)
		mustCreateTopics(t, ctx, newAdmin(t, g), 2, nil, "repeated")
		c := dialRaw(t, g.Addr)
		ts := time.Now().UnixMilli()
		entry := func(p int32, values ...string) kmsg.ProduceRequestTopicPartition {
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Partition, rp.Records = p, rawBatch(t, -1, -1, -1, ts, values...)
			return rp
		}
		req := produceReq("repeated", 0, -1, rawBatch(t, -1, -1, -1, ts, "a", "b"))
		req.Topics[0].Partitions = append(req.Topics[0].Partitions, entry(1, "x"), entry(0, "c"))
		again := kmsg.NewProduceRequestTopic()
		again.Topic, again.Partitions = "repeated", []kmsg.ProduceRequestTopicPartition{entry(1, "y")}
		req.Topics = append(req.Topics, again)

		resp := roundTrip[*kmsg.ProduceResponse](c, 9, req)
		var answered []string
		for _, st := range resp.Topics {
			for _, sp := range st.Partitions {
				answered = append(answered, fmt.Sprintf("%s/%d@%d:%d", st.Topic, sp.Partition, sp.BaseOffset, sp.ErrorCode))
			}
		}
		if want := []string{"repeated/0@0:0", "repeated/1@0:0"}; !slices.Equal(answered, want) {
			t.Fatalf("answered %v, want %v (one answer per partition, for its last entry)", answered, want)
		}
		for p, want := range map[int32][]string{0: {"0:c"}, 1: {"0:y"}} {
			sp := fetchPart(t, roundTrip[*kmsg.FetchResponse](c, 11, fetchReq("repeated", [16]byte{}, p, 0, 1<<20)))
			if got := fetchedValues(t, sp); !slices.Equal(got, want) || sp.HighWatermark != 1 {
				t.Errorf("partition %d holds %v (high watermark %d), want %v", p, got, sp.HighWatermark, want)
			}
		}
	})
}

// TestIdempotentProduceWire drives idempotence with raw Produce requests: a retried batch (same
// producer, epoch and sequence) returns its original base offset and is stored once; a sequence gap is
// OUT_OF_ORDER_SEQUENCE_NUMBER; after an epoch bump through InitProducerID the old epoch is fenced
// with INVALID_PRODUCER_EPOCH.
func TestIdempotentProduceWire(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 30*time.Second)
		mustCreateTopics(t, ctx, newAdmin(t, g), 1, nil, "idem")
		c := dialRaw(t, g.Addr)
		xlen := func() int64 {
			t.Helper()
			n, err := g.Store.Client().XLen(ctx, g.Namespace+":stream:{idem:0}").Result()
			if err != nil {
				t.Fatalf("XLEN: %v", err)
			}
			return n
		}
		produce := func(pid int64, epoch int16, seq int32, values ...string) kmsg.ProduceResponseTopicPartition {
			t.Helper()
			req := produceReq("idem", 0, -1, rawBatch(t, pid, epoch, seq, time.Now().UnixMilli(), values...))
			return producePart(t, roundTrip[*kmsg.ProduceResponse](c, 9, req))
		}

		pid, epoch := initProducerID(t, c, -1, -1)
		if pid < 0 || epoch != 0 {
			t.Fatalf("InitProducerID: pid %d epoch %d", pid, epoch)
		}
		if pid2, _ := initProducerID(t, dialRaw(t, g.Addr), -1, -1); pid2 == pid {
			t.Fatalf("two InitProducerID calls returned the same producer id %d", pid)
		}
		for i := 0; i < 2; i++ { // the second send is a retry
			if sp := produce(pid, 0, 0, "a", "b"); sp.ErrorCode != 0 || sp.BaseOffset != 0 {
				t.Fatalf("send %d of seq 0: error %d base offset %d, want 0 and 0", i, sp.ErrorCode, sp.BaseOffset)
			}
		}
		if n := xlen(); n != 2 {
			t.Fatalf("after a retried batch of 2: XLEN %d, want 2 (stored once)", n)
		}
		if sp := produce(pid, 0, 2, "c"); sp.ErrorCode != 0 || sp.BaseOffset != 2 {
			t.Fatalf("seq 2: error %d base offset %d, want 0 and 2", sp.ErrorCode, sp.BaseOffset)
		}
		if sp := produce(pid, 0, 0, "a", "b"); sp.ErrorCode != 0 || sp.BaseOffset != 0 {
			t.Fatalf("retry of an older batch (seq 0): error %d base offset %d, want its original offset 0", sp.ErrorCode, sp.BaseOffset)
		}
		if sp := produce(pid, 0, 5, "gap"); sp.ErrorCode != kerr.OutOfOrderSequenceNumber.Code {
			t.Fatalf("seq 5 after 2: error %d, want OUT_OF_ORDER_SEQUENCE_NUMBER", sp.ErrorCode)
		}
		if n := xlen(); n != 3 {
			t.Fatalf("XLEN %d, want 3", n)
		}

		bpid, bepoch := initProducerID(t, c, pid, 0)
		if bpid != pid || bepoch != 1 {
			t.Fatalf("epoch bump: pid %d epoch %d, want %d and 1", bpid, bepoch, pid)
		}
		if sp := produce(pid, 1, 0, "d"); sp.ErrorCode != 0 || sp.BaseOffset != 3 {
			t.Fatalf("new epoch seq 0: error %d base offset %d, want 0 and 3", sp.ErrorCode, sp.BaseOffset)
		}
		if sp := produce(pid, 0, 3, "stale"); sp.ErrorCode != kerr.InvalidProducerEpoch.Code {
			t.Fatalf("old epoch after the bump: error %d, want INVALID_PRODUCER_EPOCH", sp.ErrorCode)
		}
		if n := xlen(); n != 4 {
			t.Fatalf("XLEN %d, want 4", n)
		}
	})
}

// TestProduceAcksZero: an acks=0 Produce gets no response at all; the next request's response is the
// first thing the connection reads, and the record was stored. A failed acks=0 Produce closes the
// connection.
func TestProduceAcksZero(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 30*time.Second)
		mustCreateTopics(t, ctx, newAdmin(t, g), 1, nil, "acks0")
		c := dialRaw(t, g.Addr)
		pr := produceReq("acks0", 0, 0, rawBatch(t, -1, -1, -1, time.Now().UnixMilli(), "fire", "forget"))
		pr.SetVersion(9)
		produceCorr := c.send(pr)
		mreq := metadataReq("acks0", false)
		mreq.SetVersion(12)
		metaCorr := c.send(mreq)
		mresp := kmsg.NewPtrMetadataResponse()
		mresp.SetVersion(12)
		if got := c.read(mresp); got != metaCorr {
			t.Fatalf("first response has correlation id %d, want the Metadata's %d (the acks=0 Produce was %d)", got, metaCorr, produceCorr)
		}
		if len(mresp.Topics) != 1 || mresp.Topics[0].ErrorCode != 0 {
			t.Fatalf("metadata: %+v", mresp.Topics)
		}
		// Requests on a connection are handled in order, so the produce is done by now.
		n, err := g.Store.Client().XLen(ctx, g.Namespace+":stream:{acks0:0}").Result()
		if err != nil || n != 2 {
			t.Fatalf("XLEN after the acks=0 produce: %d, %v; want 2", n, err)
		}
		c.apiVersionsOK()

		// A failed acks=0 produce cannot answer, so the gateway closes the connection (as Apache does).
		bad := dialRaw(t, g.Addr)
		br := produceReq("no-such-topic", 0, 0, rawBatch(t, -1, -1, -1, time.Now().UnixMilli(), "lost"))
		br.SetVersion(9)
		bad.send(br)
		bad.expectClosed(5 * time.Second)
		c.apiVersionsOK()
	})
}

// TestProduceAcksZeroFailureAnswersItsRound: requests appended in the same round as a failed acks=0
// Produce are answered before the connection closes. The test holds Redis's writes back (CLIENT PAUSE,
// on a Redis of its own) while a first produce is appended, so the failing acks=0 request and a good
// acks=1 one behind it are appended together in the next round. Left unanswered, the good one's
// records, already stored, would be sent again by the producer.
func TestProduceAcksZeroFailureAnswersItsRound(t *testing.T) {
	t.Parallel()
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	// No heartbeat or retention pass during the test: the first append is the only write Redis holds.
	g := startGateway(t, backend{name: "paused", addrs: []string{srv.Addr}}, gatewayOpts{mutate: func(c *gateway.Config) {
		c.HeartbeatInterval, c.NodeTimeout, c.RetentionCheckInterval = time.Hour, 2*time.Hour, time.Hour
	}})
	ctx := testCtx(t, 30*time.Second)
	mustCreateTopics(t, ctx, newAdmin(t, g), 1, nil, "acks0round")
	c := dialRaw(t, g.Addr)
	const pause = 3 * time.Second // long enough that a loaded machine still writes the rest well inside it
	if err := g.Store.Client().Do(ctx, "CLIENT", "PAUSE", pause.Milliseconds(), "WRITE").Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	paused := time.Now()
	now := time.Now().UnixMilli()
	first := produceReq("acks0round", 0, -1, rawBatch(t, -1, -1, -1, now, "first"))
	bad := produceReq("acks0round", 7, 0, rawBatch(t, -1, -1, -1, now, "lost")) // no partition 7
	good := produceReq("acks0round", 0, 1, rawBatch(t, -1, -1, -1, now, "good"))
	var frames []byte
	for _, r := range []*kmsg.ProduceRequest{first, bad, good} {
		r.SetVersion(9)
		c.corr++
		frames = appendRequest(frames, c.corr, r)
		if r == first {
			c.write(frames) // appended alone, held by the pause while the other two arrive
			frames = nil
			waitFor(t, pause, "the first produce's append to be held by the pause", func() bool {
				return blockedClients(t, ctx, g.Store.Client()) > 0
			})
		}
	}
	c.write(frames)
	if held := time.Since(paused); held > pause/2 {
		t.Fatalf("the other requests written %v into the %v pause: too late to be sure they were read during it", held, pause)
	}
	for _, want := range []int64{0, 1} {
		resp := kmsg.NewPtrProduceResponse()
		resp.SetVersion(9)
		c.read(resp)
		if sp := producePart(t, resp); sp.ErrorCode != 0 || sp.BaseOffset != want {
			t.Fatalf("answer: error %d base offset %d, want 0 and %d", sp.ErrorCode, sp.BaseOffset, want)
		}
	}
	c.expectClosed(5 * time.Second)
	if n, err := g.Store.Client().XLen(ctx, g.Namespace+":stream:{acks0round:0}").Result(); err != nil || n != 2 {
		t.Fatalf("XLEN %d, %v; want 2", n, err)
	}
}

// TestProduceRequestsQueuedOnOneConnection: produce requests a producer sends while an earlier one is
// still being appended are answered in order, each with its own offsets, and are appended together.
// On a Redis of its own, whose writes the test holds back (CLIENT PAUSE) while the requests arrive,
// MONITOR shows one finish step per partition for all the queued requests.
func TestProduceRequestsQueuedOnOneConnection(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) { produceQueued(t, b, false) })
	t.Run("paused", func(t *testing.T) {
		t.Parallel()
		srv, err := redistest.Start()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Stop)
		produceQueued(t, backend{name: "paused", addrs: []string{srv.Addr}}, true)
	})
}

func produceQueued(t *testing.T, b backend, paused bool) {
	var opts []gatewayOpts
	if paused { // no heartbeat or retention pass: the first append is the only write the pause holds
		opts = append(opts, gatewayOpts{mutate: func(c *gateway.Config) {
			c.HeartbeatInterval, c.NodeTimeout, c.RetentionCheckInterval = time.Hour, 2*time.Hour, time.Hour
		}})
	}
	g := startGateway(t, b, opts...)
	ctx := testCtx(t, 30*time.Second)
	mustCreateTopics(t, ctx, newAdmin(t, g), 2, nil, "queued")
	c := dialRaw(t, g.Addr)
	pid, _ := initProducerID(t, c, -1, -1)
	var mon *redisMonitor
	if paused {
		mon = startMonitor(t, b.addrs[0])
		if err := g.Store.Client().Do(ctx, "CLIENT", "PAUSE", queuedPause.Milliseconds(), "WRITE").Err(); err != nil {
			t.Fatalf("CLIENT PAUSE: %v", err)
		}
	}
	now := time.Now().UnixMilli()
	big := make([]string, 8000)
	for i := range big {
		big[i] = fmt.Sprintf("big%05d", i)
	}
	req := func(parts ...[]byte) *kmsg.ProduceRequest {
		r := produceReq("queued", 0, -1, parts[0])
		if len(parts) > 1 {
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Partition, rp.Records = 1, parts[1]
			r.Topics[0].Partitions = append(r.Topics[0].Partitions, rp)
		}
		r.SetVersion(9)
		return r
	}
	// All four go out at once; the first takes Redis a while (8,000 records, or the pause). Paused, the
	// first goes out alone and the others while Redis holds it, so that the next round takes all three:
	// written together, the first round could take the first two, as the read loop reads them.
	reqs := []*kmsg.ProduceRequest{
		req(rawBatch(t, pid, 0, 0, now, big...)),
		req(rawBatch(t, pid, 0, 8000, now, "a", "b"), rawBatch(t, pid, 0, 0, now, "x")),
		req(rawBatch(t, pid, 0, 8002, now, "c", "d"), rawBatch(t, pid, 0, 1, now, "y")),
		req(rawBatch(t, pid, 0, 8004, now, "e", "f")),
	}
	want := [][]int64{{0}, {8000, 0}, {8002, 1}, {8004}}
	var afterFirst func()
	if paused {
		paused := time.Now()
		afterFirst = func() {
			waitFor(t, queuedPause, "the first request's append to be held by the pause", func() bool {
				return blockedClients(t, ctx, g.Store.Client()) > 0
			})
			if held := time.Since(paused); held > queuedPause/2 {
				t.Fatalf("the first append held %v into the %v pause: too late to be sure the rest arrive during it", held, queuedPause)
			}
		}
	}
	for i, resp := range produceAtOnce(c, reqs, afterFirst) {
		sps := resp.Topics[0].Partitions
		if len(sps) != len(want[i]) {
			t.Fatalf("response %d: %d partitions, want %d", i, len(sps), len(want[i]))
		}
		for j, sp := range sps {
			if sp.ErrorCode != 0 || sp.BaseOffset != want[i][j] {
				t.Fatalf("response %d partition %d: error %d base offset %d, want 0 and %d", i, sp.Partition, sp.ErrorCode, sp.BaseOffset, want[i][j])
			}
		}
	}
	fetchResp := roundTrip[*kmsg.FetchResponse](c, 12, fetchReq("queued", [16]byte{}, 0, 8000, 1<<20))
	if got := fetchedValues(t, fetchPart(t, fetchResp)); !slices.Equal(got, []string{"8000:a", "8001:b", "8002:c", "8003:d", "8004:e", "8005:f"}) {
		t.Fatalf("partition 0 from 8000: %v", got)
	}
	// Every batch is still known to the idempotence check: a retry of the third request's is a
	// duplicate at its own offset.
	retry := roundTrip[*kmsg.ProduceResponse](c, 9, req(rawBatch(t, pid, 0, 8002, now, "c", "d")))
	if sp := producePart(t, retry); sp.ErrorCode != 0 || sp.BaseOffset != 8002 {
		t.Fatalf("retry of a queued batch: error %d base offset %d, want 0 and 8002", sp.ErrorCode, sp.BaseOffset)
	}
	if mon == nil || g.Store.AppendMode() != "transaction" {
		return // the finish steps below are the transactional append's (a server refusing its undo has scripts)
	}
	finishes := map[int32]int{}
	for _, line := range mon.mark("queued-done") {
		for p := range int32(2) {
			if strings.Contains(line, `"FCALL"`) && strings.Contains(line, fmt.Sprintf(":stream:{queued:%d}", p)) {
				finishes[p]++
			}
		}
	}
	// Partition 0: the queued requests together, with the first or after it (it may be taken alone
	// before the others are read), then the retry; partition 1: once. One per request would be five and
	// two.
	if finishes[0] < 2 || finishes[0] > 3 || finishes[1] != 1 {
		t.Fatalf("finish steps per partition %v, want 2-3 on partition 0 and 1 on partition 1 (queued requests appended together)", finishes)
	}
}

// TestProduceQueueBounded: more produce requests in flight than a connection queues (eight) are all
// answered, in order, with dense offsets: the read loop waits for room instead of failing or reading on.
func TestProduceQueueBounded(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 30*time.Second)
		mustCreateTopics(t, ctx, newAdmin(t, g), 1, nil, "bounded")
		c := dialRaw(t, g.Addr)
		pid, _ := initProducerID(t, c, -1, -1)
		reqs := make([]*kmsg.ProduceRequest, 20)
		for i := range reqs {
			reqs[i] = produceReq("bounded", 0, -1, rawBatch(t, pid, 0, int32(2*i), time.Now().UnixMilli(), "a", "b"))
			reqs[i].SetVersion(9)
		}
		for i, resp := range produceAtOnce(c, reqs, nil) {
			if sp := producePart(t, resp); sp.ErrorCode != 0 || sp.BaseOffset != int64(2*i) {
				t.Fatalf("response %d: error %d base offset %d, want 0 and %d", i, sp.ErrorCode, sp.BaseOffset, 2*i)
			}
		}
	})
}

// queuedPause is how long produceQueued's paused variant holds Redis's writes.
const queuedPause = 2 * time.Second

// produceAtOnce writes reqs (their versions set) in one write, as a producer with them all in flight
// does (or, with afterFirst, the first alone and the rest once afterFirst returns), and returns their
// responses, failing c's test unless they come back in request order.
func produceAtOnce(c *rawConn, reqs []*kmsg.ProduceRequest, afterFirst func()) []*kmsg.ProduceResponse {
	c.t.Helper()
	var frames []byte
	first := c.corr + 1
	for i, r := range reqs {
		c.corr++
		frames = appendRequest(frames, c.corr, r)
		if i == 0 && afterFirst != nil {
			c.write(frames)
			frames = nil
			afterFirst()
		}
	}
	if len(frames) > 0 {
		c.write(frames)
	}
	out := make([]*kmsg.ProduceResponse, len(reqs))
	for i, r := range reqs {
		out[i] = kmsg.NewPtrProduceResponse()
		out[i].SetVersion(r.GetVersion())
		if got := c.read(out[i]); got != first+int32(i) {
			c.t.Fatalf("response %d: correlation id %d, want %d (responses out of order)", i, got, first+int32(i))
		}
	}
	return out
}

// TestProduceTimestampBounds: on a CreateTime topic that sets message.timestamp.before.max.ms or
// message.timestamp.after.max.ms (or, as on Apache 3.x, message.timestamp.difference.max.ms alone), a
// batch with a record timestamped outside them is refused with INVALID_TIMESTAMP, its records listed in
// record_errors with Apache's message and the error message Apache gives (v8+), and nothing of it is
// stored; a record without a timestamp (-1) passes, and so does any timestamp on a LogAppendTime topic.
// The bounds were stored and reported but not enforced: a producer with a clock in microseconds wrote
// timestamps thousands of years ahead, which retention never reaches, so it kept the partition whole.
// franz-go's producer fails the record with INVALID_TIMESTAMP.
func TestProduceTimestampBounds(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 30*time.Second)
		adm := newAdmin(t, g)
		hour := kadm.StringPtr("3600000")
		mustCreateTopics(t, ctx, adm, 2, map[string]*string{"message.timestamp.before.max.ms": hour, "message.timestamp.after.max.ms": kadm.StringPtr("60000")}, "bounded")
		mustCreateTopics(t, ctx, adm, 1, map[string]*string{"message.timestamp.difference.max.ms": hour}, "difference")
		mustCreateTopics(t, ctx, adm, 1, map[string]*string{"message.timestamp.before.max.ms": kadm.StringPtr("1000"), "message.timestamp.type": kadm.StringPtr("LogAppendTime")}, "stamped")
		now := time.Now().UnixMilli()
		batch := func(ts ...int64) []byte {
			pb := protocol.Batch{PartitionLeaderEpoch: -1, FirstTimestamp: ts[0], MaxTimestamp: slices.Max(ts),
				ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}
			for i, s := range ts {
				pb.Records = append(pb.Records, protocol.Record{OffsetDelta: int32(i), Timestamp: s, Value: []byte{byte('a' + i)}})
			}
			out, err := protocol.AppendCompressedBatch(nil, pb, protocol.CodecNone)
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		c := dialRaw(t, g.Addr)
		xlen := func(topic string, p int) int64 {
			t.Helper()
			n, err := g.Store.Client().XLen(ctx, fmt.Sprintf("%s:stream:{%s:%d}", g.Namespace, topic, p)).Result()
			if err != nil {
				t.Fatalf("XLEN: %v", err)
			}
			return n
		}

		old, ahead := now-2*3600_000, now+3600_000 // two hours back, an hour ahead
		sp := producePart(t, roundTrip[*kmsg.ProduceResponse](c, 9, produceReq("bounded", 0, -1, batch(now, old, ahead, -1))))
		if sp.ErrorCode != kerr.InvalidTimestamp.Code || sp.BaseOffset != -1 {
			t.Fatalf("records two hours back and an hour ahead: error %d base offset %d, want INVALID_TIMESTAMP and -1", sp.ErrorCode, sp.BaseOffset)
		}
		if sp.ErrorMessage == nil || *sp.ErrorMessage != "One or more records have been rejected due to invalid timestamp" {
			t.Errorf("error message %v", sp.ErrorMessage)
		}
		var refused []int32
		for _, e := range sp.ErrorRecords {
			refused = append(refused, e.RelativeOffset)
			if e.ErrorMessage == nil || !strings.Contains(*e.ErrorMessage, fmt.Sprintf("of message with offset %d is out of range. The timestamp should be within [", e.RelativeOffset)) {
				t.Errorf("record %d: message %v", e.RelativeOffset, e.ErrorMessage)
			}
		}
		if !slices.Equal(refused, []int32{1, 2}) {
			t.Errorf("record errors for %v, want [1 2]", refused)
		}
		if n := xlen("bounded", 0); n != 0 {
			t.Errorf("XLEN %d after the refused batch, want 0", n)
		}
		if sp := producePart(t, roundTrip[*kmsg.ProduceResponse](c, 9, produceReq("bounded", 1, -1, batch(now, now-1800_000, now+30_000, -1)))); sp.ErrorCode != 0 || len(sp.ErrorRecords) != 0 {
			t.Errorf("records within the bounds: error %d, record errors %v", sp.ErrorCode, sp.ErrorRecords)
		}
		if sp := producePart(t, roundTrip[*kmsg.ProduceResponse](c, 9, produceReq("difference", 0, -1, batch(now, ahead+60_000)))); sp.ErrorCode != kerr.InvalidTimestamp.Code {
			t.Errorf("two hours ahead with message.timestamp.difference.max.ms an hour: error %d, want INVALID_TIMESTAMP", sp.ErrorCode)
		}
		if sp := producePart(t, roundTrip[*kmsg.ProduceResponse](c, 9, produceReq("stamped", 0, -1, batch(old)))); sp.ErrorCode != 0 {
			t.Errorf("an old timestamp on a LogAppendTime topic: error %d, want 0", sp.ErrorCode)
		}
		if got := []int64{xlen("bounded", 1), xlen("difference", 0), xlen("stamped", 0)}; !slices.Equal(got, []int64{4, 0, 1}) {
			t.Errorf("XLEN %v, want [4 0 1]", got)
		}

		p := newClient(t, g, kgo.DefaultProduceTopic("bounded"))
		err := p.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte("late"), Timestamp: time.UnixMilli(old)}).FirstErr()
		if !errors.Is(err, kerr.InvalidTimestamp) {
			t.Errorf("franz-go, a record two hours back: %v, want INVALID_TIMESTAMP", err)
		}
		c.apiVersionsOK()
	})
}
