package gateway

import (
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
	m := startMiniredis(t)
	p := redistest.StartProxy(t, m.Addr())
	const cmdTimeout = time.Second
	store := openStoreAt(t, p.Addr(), redisstore.Options{CommandTimeout: cmdTimeout, DialTimeout: cmdTimeout})
	ctx := t.Context()
	createTopic(t, store, "dr", 8)
	g := New(Config{}, store, zerolog.Nop())
	holdTopicView(t, ctx, g)
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
