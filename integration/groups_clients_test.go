package integration

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// Issue 3 with other clients' group implementations: Sarama's ConsumerGroup (a current and an old
// protocol version) and librdkafka through kcat's balanced consumer, dynamic and static.

// saramaHandler consumes until want records arrived, marks each, then commits once and signals done.
type saramaHandler struct {
	want int
	mu   sync.Mutex
	got  map[int32][]int64
	n    int
	done chan struct{}
	once sync.Once
}

func (h *saramaHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *saramaHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h *saramaHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for msg := range claim.Messages() {
		sess.MarkMessage(msg, "")
		h.mu.Lock()
		h.got[msg.Partition] = append(h.got[msg.Partition], msg.Offset)
		h.n++
		complete := h.n == h.want
		h.mu.Unlock()
		if complete {
			sess.Commit() // synchronous with auto-commit off: every mark so far is stored
			h.once.Do(func() { close(h.done) })
		}
	}
	return nil
}

// TestGroupSarama: a Sarama ConsumerGroup at Kafka 2.8 and at 1.0 (JoinGroup v2, SyncGroup v1,
// OffsetCommit v3) consumes every record of a 3-partition topic once and commits; kadm reads the
// offsets back.
func TestGroupSarama(t *testing.T) {
	t.Parallel()
	b := backends()[0]
	g := startGateway(t, b)
	ctx := testCtx(t, 60*time.Second)
	adm := newAdmin(t, g)
	const topic, parts, per = "sarama", int32(3), 7
	grpCreateTopic(t, ctx, adm, topic, parts)
	grpProduce(t, ctx, grpProducer(t, g), topic, parts, per, "s")

	for _, v := range []sarama.KafkaVersion{sarama.V2_8_0_0, sarama.V1_0_0_0} {
		t.Run(v.String(), func(t *testing.T) {
			t.Parallel()
			group := "sarama-" + v.String()
			cfg := sarama.NewConfig()
			cfg.Version = v
			cfg.ClientID = "sarama-it"
			cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
			cfg.Consumer.Offsets.AutoCommit.Enable = false
			cfg.Consumer.Group.Session.Timeout = 6 * time.Second
			cfg.Consumer.Group.Heartbeat.Interval = 500 * time.Millisecond
			cfg.Consumer.MaxWaitTime = 200 * time.Millisecond
			cfg.Consumer.Return.Errors = true
			cg, err := sarama.NewConsumerGroup([]string{g.Addr}, group, cfg)
			if err != nil {
				t.Fatalf("sarama consumer group: %v", err)
			}
			h := &saramaHandler{want: int(parts) * per, got: map[int32][]int64{}, done: make(chan struct{})}
			cctx, cancel := context.WithCancel(ctx)
			var wg sync.WaitGroup
			errc := make(chan error, 16)
			wg.Add(2)
			go func() {
				defer wg.Done()
				for cctx.Err() == nil {
					if err := cg.Consume(cctx, []string{topic}, h); err != nil && !errors.Is(err, sarama.ErrClosedConsumerGroup) {
						select {
						case errc <- err:
						default:
						}
						return
					}
				}
			}()
			go func() {
				defer wg.Done()
				for err := range cg.Errors() {
					select {
					case errc <- err:
					default:
					}
				}
			}()
			select {
			case <-h.done:
			case err := <-errc:
				cancel()
				t.Fatalf("sarama %s: %v", v, err)
			case <-ctx.Done():
				cancel()
				t.Fatalf("sarama %s: consumed %d of %d records", v, h.n, h.want)
			}
			d := grpDescribe(t, ctx, adm, group)
			if d.State != "Stable" || len(d.Members) != 1 || d.Members[0].ClientID != "sarama-it" || d.Protocol != "range" {
				t.Fatalf("describe sarama group: state %q protocol %q members %+v", d.State, d.Protocol, d.Members)
			}
			cancel()
			if err := cg.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			wg.Wait()
			for p := int32(0); p < parts; p++ {
				if got := h.got[p]; len(got) != per || got[0] != 0 || got[per-1] != per-1 {
					t.Fatalf("partition %d consumed %v, want offsets 0..%d once", p, got, per-1)
				}
			}
			want := map[int32]int64{0: per, 1: per, 2: per}
			if got := grpOffsets(t, ctx, adm, group, topic); !mapsEqual(got, want) {
				t.Fatalf("sarama %s committed %v, want %v", v, got, want)
			}
		})
	}
}

// grpKcatPath returns kcat's path, skipping the test when it is missing outside CI.
func grpKcatPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("kcat")
	if err != nil {
		if os.Getenv("CI") == "" {
			t.Skip("kcat not installed (CI unset)")
		}
		t.Fatalf("kcat not installed: %v", err)
	}
	return p
}

// TestGroupKcat: kcat's balanced consumer (librdkafka: JoinGroup with KIP-394, its own assignor,
// OffsetCommit on close) consumes every record once and its commits are visible through kadm; with
// group.instance.id set, DescribeGroups shows the static member's instance id.
func TestGroupKcat(t *testing.T) {
	t.Parallel()
	kcat := grpKcatPath(t)
	g := startGateway(t, backends()[0])
	ctx := testCtx(t, 60*time.Second)
	adm := newAdmin(t, g)
	const topic, parts, per = "kcat", int32(3), 5
	grpCreateTopic(t, ctx, adm, topic, parts)
	grpProduce(t, ctx, grpProducer(t, g), topic, parts, per, "k")

	t.Run("Balanced", func(t *testing.T) {
		t.Parallel()
		cctx, cancel := context.WithTimeout(ctx, 45*time.Second)
		defer cancel()
		n := int(parts) * per
		cmd := exec.CommandContext(cctx, kcat, "-b", g.Addr, "-G", "kcat-group", "-q",
			"-X", "auto.offset.reset=earliest", "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500",
			"-c", strconv.Itoa(n), "-f", "%p:%o\n", topic)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("kcat -G: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
		}
		seen := map[string]bool{}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "" {
				continue
			}
			if seen[line] {
				t.Fatalf("kcat consumed %s twice", line)
			}
			seen[line] = true
		}
		if len(seen) != n {
			t.Fatalf("kcat consumed %d distinct records, want %d:\n%s", len(seen), n, out)
		}
		want := map[int32]int64{0: per, 1: per, 2: per}
		waitFor(t, 10*time.Second, "kcat's commits", func() bool {
			return mapsEqual(grpOffsets(t, ctx, adm, "kcat-group", topic), want)
		})
	})

	t.Run("StaticMember", func(t *testing.T) {
		t.Parallel()
		cctx, cancel := context.WithCancel(ctx)
		cmd := exec.CommandContext(cctx, kcat, "-b", g.Addr, "-G", "kcat-static", "-q",
			"-X", "group.instance.id=inst1", "-X", "auto.offset.reset=earliest", "-X", "session.timeout.ms=6000",
			"-f", "%p:%o\n", topic)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			cancel()
			t.Fatalf("start kcat: %v", err)
		}
		t.Cleanup(func() {
			cancel()
			_ = cmd.Wait()
		})
		waitFor(t, 30*time.Second, "kcat's static member in DescribeGroups", func() bool {
			d := grpDescribe(t, ctx, adm, "kcat-static")
			return d.State == "Stable" && len(d.Members) == 1 && d.Members[0].InstanceID != nil && *d.Members[0].InstanceID == "inst1"
		})
		d := grpDescribe(t, ctx, adm, "kcat-static")
		m := d.Members[0]
		if !strings.HasPrefix(m.MemberID, "inst1-") || m.ClientHost != "/127.0.0.1" || m.ClientID == "" {
			t.Fatalf("static member: %+v", m)
		}
		if a, ok := m.Assigned.AsConsumer(); !ok || len(a.Topics) != 1 || len(a.Topics[0].Partitions) != int(parts) {
			t.Fatalf("static member assignment: %+v\nkcat stderr:\n%s", m.Assigned, stderr.String())
		}
	})
}
