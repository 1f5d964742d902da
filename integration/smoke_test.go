package integration

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestProduceConsumeSmoke is the shortest end-to-end path: produce three records, read them back with
// dense offsets.
func TestProduceConsumeSmoke(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 30*time.Second)
		p := newClient(t, g, kgo.DefaultProduceTopic("smoke"), kgo.AllowAutoTopicCreation())
		for i := 0; i < 3; i++ {
			if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte{byte('a' + i)}}).FirstErr(); err != nil {
				t.Fatalf("produce %d: %v", i, err)
			}
		}
		c := newClient(t, g, kgo.ConsumeTopics("smoke"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		var got []*kgo.Record
		for len(got) < 3 {
			fs := c.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				t.Fatalf("poll: %v (got %d records)", err, len(got))
			}
			fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch error: %v", err) })
			got = append(got, fs.Records()...)
		}
		for i, r := range got {
			if r.Offset != int64(i) || string(r.Value) != string(rune('a'+i)) {
				t.Fatalf("record %d: offset %d value %q", i, r.Offset, r.Value)
			}
		}
	})
}
