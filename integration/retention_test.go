package integration

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kgate/kgate/gateway"
)

// TestRetentionByTime: records older than retention.ms are deleted (log start moves past them), newer
// ones stay, and a topic with retention.ms=-1 keeps everything.
func TestRetentionByTime(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b, gatewayOpts{mutate: func(c *gateway.Config) { c.RetentionCheckInterval = 100 * time.Millisecond }})
		ctx := testCtx(t, 30*time.Second)
		adm := newAdmin(t, g)
		short, forever := "1000", "-1"
		if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"retention.ms": &short}, "short"); err != nil {
			t.Fatal(err)
		}
		if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"retention.ms": &forever}, "forever"); err != nil {
			t.Fatal(err)
		}
		cl := newClient(t, g)
		old := time.Now().Add(-time.Hour)
		for _, topic := range []string{"short", "forever"} {
			for i := 0; i < 3; i++ {
				if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("old"), Timestamp: old}).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			// A record stamped in the future stays past the short retention for the whole test.
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("new"), Timestamp: time.Now().Add(time.Hour)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		var starts kadm.ListedOffsets
		waitFor(t, 10*time.Second, "retention to delete the old records", func() bool {
			var err error
			starts, err = adm.ListStartOffsets(ctx, "short")
			if err != nil {
				return false
			}
			o, _ := starts.Lookup("short", 0)
			return o.Offset == 3
		})
		ends, err := adm.ListEndOffsets(ctx, "short")
		if err != nil {
			t.Fatal(err)
		}
		if o, _ := ends.Lookup("short", 0); o.Offset != 4 {
			t.Fatalf("short end offset %d, want 4", o.Offset)
		}
		fs, err := adm.ListStartOffsets(ctx, "forever")
		if err != nil {
			t.Fatal(err)
		}
		if o, _ := fs.Lookup("forever", 0); o.Offset != 0 {
			t.Fatalf("retention.ms=-1 topic lost records: start %d", o.Offset)
		}
	})
}
