package gateway

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/internal/redistest"
	"github.com/kgate/kgate/redisstore"
)

// TestDeleteRecordsTimeoutBoundsRequest: with Redis stalled, a DeleteRecords of eight partitions
// answers within its timeout_ms, each partition with an error, not after a command timeout per
// partition (eight here, the partitions being trimmed one after the other).
func TestDeleteRecordsTimeoutBoundsRequest(t *testing.T) {
	const cmdTimeout = time.Second
	ctx, g, p := proxiedGateway(t, cmdTimeout, func(store *redisstore.Store) { createTopic(t, store, "dr", 8) })
	c := &conn{g: g}
	req := kmsg.NewPtrDeleteRecordsRequest()
	req.Version, req.TimeoutMillis = 2, 500
	rt := kmsg.NewDeleteRecordsRequestTopic()
	rt.Topic = "dr"
	for i := range int32(8) {
		rp := kmsg.NewDeleteRecordsRequestTopicPartition()
		rp.Partition, rp.Offset = i, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	p.Freeze(true)
	defer p.Freeze(false)
	start := time.Now()
	r, err := c.deleteRecords(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*cmdTimeout {
		t.Fatalf("answered after %v: timeout_ms 500, command timeout %v", took, cmdTimeout)
	}
	for _, sp := range r.(*kmsg.DeleteRecordsResponse).Topics[0].Partitions {
		if sp.ErrorCode == 0 {
			t.Fatalf("partition %d trimmed with Redis stalled", sp.Partition)
		}
	}
}

// proxiedGateway is a gateway (not serving) on a store that reaches Redis through a proxy the test can
// stall, with commands timing out after cmdTimeout; setup prepares the store first, and the gateway's
// topic view is then held (holdTopicView), so a stalled Redis is met by the request's own commands.
func proxiedGateway(t *testing.T, cmdTimeout time.Duration, setup func(*redisstore.Store)) (context.Context, *Gateway, *redistest.Proxy) {
	t.Helper()
	m := startMiniredis(t)
	p := redistest.StartProxy(t, m.Addr())
	store := openStoreAt(t, p.Addr(), redisstore.Options{CommandTimeout: cmdTimeout, DialTimeout: cmdTimeout})
	ctx := t.Context()
	if setup != nil {
		setup(store)
	}
	g := New(Config{}, store, zerolog.Nop())
	holdTopicView(t, ctx, g)
	return ctx, g, p
}

// TestDeleteRecordsRoundTrips: a DeleteRecords of a topic's partitions trims them in one round trip to
// Redis (two the first time, when Redis has yet to load the script), not one per partition, with each
// partition's answer its own: the new low watermark, OFFSET_OUT_OF_RANGE past the high watermark,
// UNKNOWN_TOPIC_OR_PARTITION for a partition the topic does not have.
func TestDeleteRecordsRoundTrips(t *testing.T) {
	srv := redisServer(t)
	store := openStoreAt(t, srv.Addr, redisstore.Options{})
	ctx := t.Context()
	const partitions = 8
	createTopic(t, store, "drt", partitions)
	for p := range int32(partitions) {
		appendValues(t, ctx, store, "drt", p, 10, 10)
	}
	g := New(Config{}, store, zerolog.Nop())
	holdTopicView(t, ctx, g)
	var trips atomic.Int64
	store.Observe(func(string, time.Duration, error) { trips.Add(1) })
	c := &conn{g: g}
	deleteAll := func(before int64) []kmsg.DeleteRecordsResponseTopicPartition {
		req := kmsg.NewPtrDeleteRecordsRequest()
		req.Version, req.TimeoutMillis = 2, 5000
		rt := kmsg.NewDeleteRecordsRequestTopic()
		rt.Topic = "drt"
		for p := range int32(partitions) {
			rp := kmsg.NewDeleteRecordsRequestTopicPartition()
			rp.Partition, rp.Offset = p, before
			if p == partitions-1 {
				rp.Offset = 11 // past the high watermark
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		missing := kmsg.NewDeleteRecordsRequestTopicPartition()
		missing.Partition, missing.Offset = partitions, 1
		rt.Partitions = append(rt.Partitions, missing)
		req.Topics = append(req.Topics, rt)
		r, err := c.deleteRecords(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return r.(*kmsg.DeleteRecordsResponse).Topics[0].Partitions
	}
	for _, step := range []struct {
		before int64
		most   int64
	}{{4, 2}, {6, 1}} {
		start := trips.Load()
		got := deleteAll(step.before)
		n := trips.Load() - start
		t.Logf("DeleteRecords of %d partitions: %d round trips", partitions+1, n)
		if n > step.most {
			t.Errorf("DeleteRecords of %d partitions to %d took %d round trips, want %d at most", partitions+1, step.before, n, step.most)
		}
		for _, sp := range got {
			want := struct {
				code int16
				lw   int64
			}{0, step.before}
			switch sp.Partition {
			case partitions - 1:
				want.code, want.lw = kerr.OffsetOutOfRange.Code, -1
			case partitions:
				want.code, want.lw = kerr.UnknownTopicOrPartition.Code, -1
			}
			if sp.ErrorCode != want.code || sp.LowWatermark != want.lw {
				t.Errorf("to %d, partition %d: error %d low watermark %d; want %d and %d", step.before, sp.Partition, sp.ErrorCode, sp.LowWatermark, want.code, want.lw)
			}
		}
	}
}
