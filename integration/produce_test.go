package integration

import (
	"errors"
	"math/rand"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Produce-path behaviour: max.message.bytes, LogAppendTime, idempotence over the wire, acks=0.

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
