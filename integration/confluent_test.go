package integration

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// A current librdkafka (2.11, bundled with confluent-kafka-go; kcat here has 2.0) through a recording
// proxy: an idempotent zstd producer with headers, then a consumer group that commits and, reopened,
// resumes from its commits. librdkafka 2.1 and later validate a consumer's position against the
// partition leader's epoch (KIP-320) with OffsetForLeaderEpoch, which kgate does not speak; they skip
// that while every epoch kgate reports is -1, which the test proves by the requests it never sent. It
// checks the versions librdkafka spoke too.

const cfkClientID = "kgate-it-confluent"

// cfkRecord is record i of the test: partition i%2, offset i/2 of its partition.
func cfkRecord(topic *string, i int) *kafka.Message {
	return &kafka.Message{
		TopicPartition: kafka.TopicPartition{Topic: topic, Partition: int32(i % 2)},
		Key:            []byte(fmt.Sprintf("k%02d", i)),
		Value:          bytes.Repeat([]byte{byte('a' + i)}, 100+i),
		Headers:        []kafka.Header{{Key: "i", Value: []byte(strconv.Itoa(i))}},
	}
}

func TestConfluentKafkaGo(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g, addr, wl := startRecordingGateway(t, b)
		ctx := testCtx(t, 90*time.Second)
		topic, group := "confluent", "confluent-group"
		mustCreateTopics(t, ctx, newAdmin(t, g), 2, nil, topic)
		const n, resumeAt = 10, 3 // records 0..9, 5 per partition; the group commits 3 on each

		p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": addr, "client.id": cfkClientID,
			"enable.idempotence": true, "acks": "all", "compression.type": "zstd", "log_level": 3})
		if err != nil {
			t.Fatal(err)
		}
		delivered := make(chan kafka.Event, n)
		for i := range n {
			if err := p.Produce(cfkRecord(&topic, i), delivered); err != nil {
				t.Fatalf("produce %d: %v", i, err)
			}
		}
		for range n {
			select {
			case e := <-delivered:
				m := e.(*kafka.Message)
				i, _ := strconv.Atoi(string(m.Key[1:]))
				if m.TopicPartition.Error != nil || m.TopicPartition.Offset != kafka.Offset(i/2) {
					t.Fatalf("record %d delivered at %v: %v", i, m.TopicPartition, m.TopicPartition.Error)
				}
			case <-ctx.Done():
				t.Fatal("records not delivered")
			}
		}
		p.Close()

		// consume reads until want records have come, checking each, and returns them by key.
		consume := func(c *kafka.Consumer, want int) map[string]*kafka.Message {
			t.Helper()
			got := map[string]*kafka.Message{}
			for len(got) < want && ctx.Err() == nil {
				e := c.Poll(100)
				switch m := e.(type) {
				case *kafka.Message:
					i, _ := strconv.Atoi(string(m.Key[1:]))
					w := cfkRecord(&topic, i)
					if m.TopicPartition.Partition != w.TopicPartition.Partition || m.TopicPartition.Offset != kafka.Offset(i/2) ||
						!bytes.Equal(m.Value, w.Value) || len(m.Headers) != 1 || string(m.Headers[0].Value) != strconv.Itoa(i) {
						t.Fatalf("record %q at %v: %d bytes, headers %v", m.Key, m.TopicPartition, len(m.Value), m.Headers)
					}
					got[string(m.Key)] = m
				case kafka.Error:
					t.Logf("librdkafka: %v", m)
				}
			}
			if len(got) < want {
				t.Fatalf("%d of %d records consumed", len(got), want)
			}
			return got
		}
		newConsumer := func() *kafka.Consumer {
			t.Helper()
			c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": addr, "client.id": cfkClientID,
				"group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": false, "log_level": 3})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Subscribe(topic, nil); err != nil {
				t.Fatal(err)
			}
			return c
		}

		c := newConsumer()
		consume(c, n)
		commits := []kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: resumeAt}, {Topic: &topic, Partition: 1, Offset: resumeAt}}
		if _, err := c.CommitOffsets(commits); err != nil {
			t.Fatalf("commit: %v", err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}

		c = newConsumer()
		defer c.Close()
		got := consume(c, 2*(n/2-resumeAt))
		for key, m := range got {
			if m.TopicPartition.Offset < resumeAt {
				t.Fatalf("reopened group read %s at %v, before its commit at %d", key, m.TopicPartition, resumeAt)
			}
		}

		if k := wl.count(cfkClientID, 23); k > 0 {
			t.Fatalf("librdkafka sent OffsetForLeaderEpoch %d times, which kgate does not speak\n%s", k, wl)
		}
		t.Logf("versions sent:\n%s", wl)
		// What librdkafka spoke: the highest version both sides list (docs/COMPATIBILITY.md).
		for _, c := range []struct {
			name string
			key  int16
			want []int16
		}{
			{"Produce", 0, []int16{9}},
			{"Fetch", 1, []int16{13}},
			{"ListOffsets", 2, []int16{7}},
			{"Metadata", 3, []int16{12}},
			{"OffsetCommit", 8, []int16{9}},
			{"OffsetFetch", 9, []int16{9}},
			{"JoinGroup", 11, []int16{5}},
			{"InitProducerId", 22, []int16{4}}, // the idempotent producer's
		} {
			if got := wl.versions(cfkClientID, c.key); !slices.Equal(got, c.want) {
				t.Errorf("librdkafka sent %s versions %v, want %v", c.name, got, c.want)
			}
		}
	})
}
