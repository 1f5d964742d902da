package integration

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// kafka-go (segmentio) pins old versions for its consumer groups (FindCoordinator v0, JoinGroup v1/v2,
// SyncGroup v0, Heartbeat v0, LeaveGroup v0, OffsetCommit v2, OffsetFetch v1); its Reader's Conn picks
// Fetch from v2/v5/v10 and Metadata from v1/v6, its Writer (the newer protocol package) the highest
// Produce it knows (v8). Every connection goes through a recording proxy, so the test also proves which
// versions it spoke.

const kgoClientID = "kgate-it-kafkago"

// kgoRecord is record i of the test: partition i%3, offset i/3 of its partition.
func kgoRecord(i int) kafka.Message {
	return kafka.Message{
		Key:   []byte(fmt.Sprintf("k%02d", i)),
		Value: []byte(fmt.Sprintf("v%02d-%s", i, strings.Repeat("x", i))),
		Headers: []kafka.Header{
			{Key: "i", Value: []byte(strconv.Itoa(i))},
			{Key: "dup", Value: []byte("a")},
			{Key: "dup", Value: []byte("b")},
			{Key: "empty", Value: []byte{}},
		},
		Time: time.UnixMilli(1_700_000_000_000 + int64(i)*1000),
	}
}

// kgoIndex is the record index encoded in a key ("k07" -> 7), -1 if it is not one of the test's keys.
func kgoIndex(key []byte) int {
	if len(key) != 3 || key[0] != 'k' {
		return -1
	}
	i, err := strconv.Atoi(string(key[1:]))
	if err != nil {
		return -1
	}
	return i
}

// kgoCheck compares a consumed message with record i, including where it must have landed.
func kgoCheck(m kafka.Message, i, partitions int) error {
	want := kgoRecord(i)
	switch {
	case m.Partition != i%partitions || m.Offset != int64(i/partitions):
		return fmt.Errorf("record %d at partition %d offset %d, want %d/%d", i, m.Partition, m.Offset, i%partitions, i/partitions)
	case !bytes.Equal(m.Key, want.Key) || !bytes.Equal(m.Value, want.Value):
		return fmt.Errorf("partition %d offset %d: %q=%q, want %q=%q", m.Partition, m.Offset, m.Key, m.Value, want.Key, want.Value)
	case m.Time.UnixMilli() != want.Time.UnixMilli():
		return fmt.Errorf("partition %d offset %d: timestamp %d, want %d", m.Partition, m.Offset, m.Time.UnixMilli(), want.Time.UnixMilli())
	case len(m.Headers) != len(want.Headers):
		return fmt.Errorf("partition %d offset %d: headers %v, want %v", m.Partition, m.Offset, m.Headers, want.Headers)
	}
	for k, h := range want.Headers {
		if m.Headers[k].Key != h.Key || !bytes.Equal(m.Headers[k].Value, h.Value) {
			return fmt.Errorf("partition %d offset %d: header %d is %s=%q, want %s=%q", m.Partition, m.Offset, k, m.Headers[k].Key, m.Headers[k].Value, h.Key, h.Value)
		}
	}
	return nil
}

// kgoLog collects kafka-go's error log, shown when the test fails.
type kgoLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *kgoLog) Printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) < 200 {
		l.lines = append(l.lines, fmt.Sprintf(format, args...))
	}
}

func (l *kgoLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// kgoWrite produces records from..to-1 (compressed with codec, 0 for none) with a keyed balancer that
// sends record i to partition i%n.
func kgoWrite(t *testing.T, ctx context.Context, addr, topic string, from, to int, codec kafka.Compression) {
	t.Helper()
	elog := &kgoLog{}
	w := &kafka.Writer{
		Addr:  kafka.TCP(addr),
		Topic: topic,
		Balancer: kafka.BalancerFunc(func(m kafka.Message, partitions ...int) int {
			return partitions[kgoIndex(m.Key)%len(partitions)]
		}),
		RequiredAcks: kafka.RequireAll,
		Compression:  codec,
		BatchTimeout: 10 * time.Millisecond,
		ReadTimeout:  10 * time.Second,
		WriteTimeout: 10 * time.Second,
		MaxAttempts:  3,
		ErrorLogger:  elog,
		Transport:    &kafka.Transport{ClientID: kgoClientID, DialTimeout: 5 * time.Second, MetadataTTL: time.Second},
	}
	var msgs []kafka.Message
	for i := from; i < to; i++ {
		msgs = append(msgs, kgoRecord(i))
	}
	err := w.WriteMessages(ctx, msgs...)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("kafka-go WriteMessages %d..%d: %v\nlog:\n%s", from, to-1, err, elog)
	}
	if st := w.Stats(); st.Errors != 0 {
		t.Fatalf("kafka-go writer stats: %d errors\nlog:\n%s", st.Errors, elog)
	}
}

// kgoGroupReader is a kafka-go consumer-group reader with synchronous commits, closed at cleanup (Close
// may be called before: it is idempotent).
func kgoGroupReader(t *testing.T, addr, group, topic string, elog *kgoLog) *kafka.Reader {
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:           []string{addr},
		GroupID:           group,
		Topic:             topic,
		Dialer:            &kafka.Dialer{ClientID: kgoClientID, Timeout: 5 * time.Second},
		MinBytes:          1,
		MaxBytes:          1 << 20,
		MaxWait:           300 * time.Millisecond,
		ReadBatchTimeout:  5 * time.Second,
		HeartbeatInterval: 300 * time.Millisecond,
		SessionTimeout:    6 * time.Second,
		RebalanceTimeout:  10 * time.Second,
		JoinGroupBackoff:  200 * time.Millisecond,
		ReadBackoffMin:    20 * time.Millisecond,
		ReadBackoffMax:    200 * time.Millisecond,
		ReadLagInterval:   -1,
		StartOffset:       kafka.FirstOffset,
		CommitInterval:    0, // CommitMessages commits synchronously
		ErrorLogger:       elog,
	})
	t.Cleanup(func() { r.Close() })
	return r
}

// kgoFetch fetches n messages from r, failing the test on an error or when ctx ends first.
func kgoFetch(t *testing.T, ctx context.Context, r *kafka.Reader, n int, elog *kgoLog) []kafka.Message {
	t.Helper()
	var got []kafka.Message
	for len(got) < n {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("kafka-go FetchMessage after %d of %d messages: %v\nlog:\n%s", len(got), n, err, elog)
		}
		got = append(got, m)
	}
	return got
}

// TestKafkaGo: kafka-go's Writer (acks=all, keyed, headers; the second batch snappy) produces to a
// 3-partition topic; a group Reader consumes everything and commits; after it closes, a second Reader of
// the same group gets only the records produced since (no redelivery of committed ones) and commits
// those; partition Readers (no group) read every partition from offset 0 with exact offsets, keys,
// values, headers, timestamps and high watermarks. The recording proxy shows kafka-go used its pinned
// group versions.
func TestKafkaGo(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g, addr, wl := startRecordingGateway(t, b)
		ctx := testCtx(t, 90*time.Second)
		adm := newAdmin(t, g)
		const topic, group, parts = "kafkago", "kafkago-group", 3
		const first, second = 12, 18 // records 0..11, then 12..17
		mustCreateTopics(t, ctx, adm, parts, nil, topic)

		kgoWrite(t, ctx, addr, topic, 0, first, 0)

		// First group member: everything produced so far, committed synchronously.
		elog := &kgoLog{}
		r1 := kgoGroupReader(t, addr, group, topic, elog)
		got := kgoFetch(t, ctx, r1, first, elog)
		seen := map[int]bool{}
		next := map[int]int64{}
		for _, m := range got {
			i := kgoIndex(m.Key)
			if i < 0 || i >= first || seen[i] {
				t.Fatalf("first reader: unexpected or repeated record %q at %d/%d", m.Key, m.Partition, m.Offset)
			}
			seen[i] = true
			if err := kgoCheck(m, i, parts); err != nil {
				t.Fatalf("first reader: %v", err)
			}
			if m.Offset != next[m.Partition] {
				t.Fatalf("first reader: partition %d offset %d, want %d (in order)", m.Partition, m.Offset, next[m.Partition])
			}
			next[m.Partition]++
		}
		if err := r1.CommitMessages(ctx, got...); err != nil {
			t.Fatalf("kafka-go CommitMessages: %v\nlog:\n%s", err, elog)
		}
		// Heartbeats (v0) run every 300ms while the member is in the group: wait for one before leaving.
		waitFor(t, 10*time.Second, "a kafka-go heartbeat", func() bool { return len(wl.versions(kgoClientID, 12)) > 0 })
		if err := r1.Close(); err != nil {
			t.Fatalf("close first reader: %v", err)
		}
		want := map[int32]int64{0: first / parts, 1: first / parts, 2: first / parts}
		if got := grpOffsets(t, ctx, adm, group, topic); !mapsEqual(got, want) {
			t.Fatalf("committed after the first reader: %v, want %v", got, want)
		}

		// Second member, after the first left: resumes at the committed offsets. Each partition is read
		// in order, so a redelivered record (offset < 4) would come before the new ones.
		kgoWrite(t, ctx, addr, topic, first, second, kafka.Snappy) // xerial-framed, as kafka-go writes it
		elog2 := &kgoLog{}
		r2 := kgoGroupReader(t, addr, group, topic, elog2)
		got = kgoFetch(t, ctx, r2, second-first, elog2)
		for _, m := range got {
			i := kgoIndex(m.Key)
			if i < first || i >= second || seen[i] {
				t.Fatalf("second reader: got record %q at partition %d offset %d: committed records were redelivered (committed %v)", m.Key, m.Partition, m.Offset, want)
			}
			seen[i] = true
			if err := kgoCheck(m, i, parts); err != nil {
				t.Fatalf("second reader: %v", err)
			}
		}
		if err := r2.CommitMessages(ctx, got...); err != nil {
			t.Fatalf("kafka-go CommitMessages (second reader): %v\nlog:\n%s", err, elog2)
		}
		if err := r2.Close(); err != nil {
			t.Fatalf("close second reader: %v", err)
		}
		want = map[int32]int64{0: second / parts, 1: second / parts, 2: second / parts}
		if got := grpOffsets(t, ctx, adm, group, topic); !mapsEqual(got, want) {
			t.Fatalf("committed after the second reader: %v, want %v", got, want)
		}
		if d := grpDescribe(t, ctx, adm, group); d.State != "Empty" || len(d.Members) != 0 {
			t.Fatalf("group after both readers left: state %q, %d members (LeaveGroup v0 not honoured?)", d.State, len(d.Members))
		}

		// Partition readers, no group: every partition from offset 0.
		for p := 0; p < parts; p++ {
			elog := &kgoLog{}
			r := kafka.NewReader(kafka.ReaderConfig{
				Brokers:         []string{addr},
				Topic:           topic,
				Partition:       p,
				Dialer:          &kafka.Dialer{ClientID: kgoClientID, Timeout: 5 * time.Second},
				MinBytes:        1,
				MaxBytes:        1 << 20,
				MaxWait:         300 * time.Millisecond,
				ReadLagInterval: -1,
				ErrorLogger:     elog,
			})
			t.Cleanup(func() { r.Close() })
			if err := r.SetOffset(0); err != nil {
				t.Fatalf("SetOffset(0): %v", err)
			}
			msgs := kgoFetch(t, ctx, r, second/parts, elog)
			r.Close()
			for j, m := range msgs {
				if err := kgoCheck(m, p+parts*j, parts); err != nil {
					t.Fatalf("partition reader: %v", err)
				}
				if m.HighWaterMark != second/parts {
					t.Fatalf("partition %d offset %d: high watermark %d, want %d", p, m.Offset, m.HighWaterMark, second/parts)
				}
			}
		}

		t.Logf("requests through the proxy:\n%s", wl)
		// What kafka-go spoke (requests it sent on every connection, through the proxy).
		for _, c := range []struct {
			name string
			key  int16
			want []int16
		}{
			{"FindCoordinator", 10, []int16{0}},
			{"JoinGroup", 11, []int16{2}}, // the highest of its v1/v2
			{"SyncGroup", 14, []int16{0}},
			{"Heartbeat", 12, []int16{0}},
			{"LeaveGroup", 13, []int16{0}},
			{"OffsetCommit", 8, []int16{2}},
			{"OffsetFetch", 9, []int16{1}},
			{"Fetch", 1, []int16{10}},
			{"Produce", 0, []int16{8}}, // the Writer negotiates its highest (protocol package), the Reader's Conn pins the rest
		} {
			if got := wl.versions(kgoClientID, c.key); !slices.Equal(got, c.want) {
				t.Errorf("kafka-go sent %s versions %v, want %v", c.name, got, c.want)
			}
		}
	})
}
