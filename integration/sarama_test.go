package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// TestSarama: Sarama's SyncProducer (idempotence off) writes records with keys and headers to two
// partitions, and its partition consumer reads them back with dense offsets, the same keys, values,
// headers and timestamps. With Kafka 4.0 protocol versions (an ApiVersions version kgate does not
// know, answered as Apache answers one, with the versions it does), with 2.8's (Produce v9, Fetch
// v12) and with 0.11's, the oldest with record headers (Produce v3, Fetch v5); below 0.11 Sarama sends
// Produce v2, which kgate does not serve (docs/COMPATIBILITY.md).
func TestSarama(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		for _, v := range []sarama.KafkaVersion{sarama.V4_0_0_0, sarama.V2_8_0_0, sarama.V0_11_0_0} {
			t.Run(v.String(), func(t *testing.T) { testSarama(t, g, v) })
		}
	})
}

func testSarama(t *testing.T, g *testGateway, version sarama.KafkaVersion) {
	ctx := testCtx(t, 30*time.Second)
	topic := "sarama-" + version.String()
	mustCreateTopics(t, ctx, newAdmin(t, g), 2, nil, topic)

	cfg := sarama.NewConfig()
	cfg.Version = version
	cfg.ClientID = "kgate-it-sarama"
	cfg.Net.DialTimeout, cfg.Net.ReadTimeout, cfg.Net.WriteTimeout = 5*time.Second, 10*time.Second, 10*time.Second
	cfg.Metadata.Retry.Max = 3
	cfg.Producer.Idempotent = false
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Consumer.MaxWaitTime = 500 * time.Millisecond

	prod, err := sarama.NewSyncProducer([]string{g.Addr}, cfg)
	if err != nil {
		t.Fatalf("sarama producer: %v", err)
	}
	defer prod.Close()
	const n = 6
	base := time.UnixMilli(1_700_000_000_000)
	var msgs []*sarama.ProducerMessage
	for i := 0; i < n; i++ {
		msgs = append(msgs, &sarama.ProducerMessage{
			Topic: topic, Partition: int32(i % 2),
			Key:       sarama.StringEncoder(fmt.Sprintf("k%d", i)),
			Value:     sarama.StringEncoder(fmt.Sprintf("v%d", i)),
			Headers:   []sarama.RecordHeader{{Key: []byte("h"), Value: []byte(fmt.Sprint(i))}, {Key: []byte("h"), Value: []byte("again")}},
			Timestamp: base.Add(time.Duration(i) * time.Second),
		})
	}
	if err := prod.SendMessages(msgs); err != nil {
		t.Fatalf("sarama SendMessages: %v", err)
	}
	for i, m := range msgs {
		if m.Offset != int64(i/2) {
			t.Fatalf("message %d: partition %d offset %d, want %d", i, m.Partition, m.Offset, i/2)
		}
	}

	cons, err := sarama.NewConsumer([]string{g.Addr}, cfg)
	if err != nil {
		t.Fatalf("sarama consumer: %v", err)
	}
	defer cons.Close()
	for p := int32(0); p < 2; p++ {
		pc, err := cons.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatalf("consume partition %d: %v", p, err)
		}
		for j := 0; j < n/2; j++ {
			i := int(p) + 2*j
			var m *sarama.ConsumerMessage
			select {
			case m = <-pc.Messages():
			case err := <-pc.Errors():
				t.Fatalf("partition %d: %v", p, err)
			case <-ctx.Done():
				t.Fatalf("partition %d: timed out waiting for offset %d", p, j)
			}
			var hdrs string
			for k, h := range m.Headers {
				if k > 0 {
					hdrs += ","
				}
				hdrs += string(h.Key) + "=" + string(h.Value)
			}
			switch {
			case m.Offset != int64(j):
				t.Errorf("partition %d: offset %d, want %d", p, m.Offset, j)
			case string(m.Key) != fmt.Sprintf("k%d", i) || string(m.Value) != fmt.Sprintf("v%d", i):
				t.Errorf("partition %d offset %d: %q=%q", p, j, m.Key, m.Value)
			case hdrs != fmt.Sprintf("h=%d,h=again", i):
				t.Errorf("partition %d offset %d: headers %s", p, j, hdrs)
			case !m.Timestamp.Equal(msgs[i].Timestamp):
				t.Errorf("partition %d offset %d: timestamp %v, want %v", p, j, m.Timestamp, msgs[i].Timestamp)
			}
		}
		if err := pc.Close(); err != nil {
			t.Fatalf("close partition consumer %d: %v", p, err)
		}
	}
}
