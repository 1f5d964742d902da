package gateway

import (
	"testing"
	"time"

	"github.com/kgate/kgate/redisstore"
)

// TestRetentionKeepsRecordsAppendedDuringItsScan: when every record is past retention, the partition
// is trimmed up to the high watermark read before the scan, so a record appended while retention ran
// (acknowledged to its producer) stays.
func TestRetentionKeepsRecordsAppendedDuringItsScan(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{Listen: "127.0.0.1:0"})
	if err := store.CreateTopic(ctx, redisstore.Topic{Name: "ret", Partitions: 1, Configs: map[string]string{"retention.ms": "1000"}}); err != nil {
		t.Fatal(err)
	}
	if err := g.Listen(ctx); err != nil {
		t.Fatal(err)
	}
	defer g.ln.Close()
	now := time.Now()
	old := now.Add(-time.Hour).UnixMilli()
	batch := func(ts int64) []*redisstore.Batch {
		return []*redisstore.Batch{{Topic: "ret", Partition: 0, ProducerID: -1, KnownPartition: true,
			Records: []redisstore.Record{{Timestamp: ts, Value: []byte("v")}, {Timestamp: ts, Value: []byte("v")}}}}
	}
	if res := store.Append(ctx, batch(old)); res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
	afterRetentionScan = func() {
		if res := store.Append(ctx, batch(now.UnixMilli())); res[0].Err != nil {
			t.Error(res[0].Err)
		}
	}
	defer func() { afterRetentionScan = nil }()
	g.enforceRetention(ctx, now)
	offs, err := store.PartitionOffsets(ctx, "ret", []int32{0})
	if err != nil {
		t.Fatal(err)
	}
	if offs[0].Start != 2 || offs[0].End != 4 {
		t.Fatalf("after retention: log start %d, high watermark %d; want 2 and 4 (the old records gone, the new ones kept)", offs[0].Start, offs[0].End)
	}
}
