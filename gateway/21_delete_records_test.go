package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"
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
