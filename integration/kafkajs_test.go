package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// kafkajs 2.2.4 (pinned in js/package.json, installed with `npm ci` in integration/js) tries ApiVersions
// v2, then v1, then v0, and sends min(its max, the broker's max) of everything, ignoring the broker's
// minimum: a floor above its versions breaks it. js/kafkajs_check.js produces, consumes with a group and
// commits; this test checks its JSON summary, the committed offsets and the versions it spoke.

const kjsClientID = "kgate-it-kafkajs"

// kafkajsSetup returns node's path and the js directory. Outside CI a missing node or an uninstalled
// js/node_modules skips the test; in CI (env CI set) it fails.
func kafkajsSetup(t *testing.T) (node, dir string) {
	t.Helper()
	dir, err := filepath.Abs("js")
	if err != nil {
		t.Fatal(err)
	}
	node, err = exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "node_modules", "kafkajs", "package.json"))
	}
	if err != nil {
		if os.Getenv("CI") == "" {
			t.Skipf("kafkajs check unavailable (CI unset; install node and run `npm ci` in integration/js): %v", err)
		}
		t.Fatalf("kafkajs check unavailable in CI (.ci/run runs `npm ci` in integration/js): %v", err)
	}
	return node, dir
}

type kjsMessage struct {
	Partition int32           `json:"partition"`
	Offset    string          `json:"offset"`
	Key       *string         `json:"key"`
	Value     *string         `json:"value"`
	Headers   json.RawMessage `json:"headers"`
	Timestamp string          `json:"timestamp"`
}

type kjsSummary struct {
	OK         bool    `json:"ok"`
	Error      *string `json:"error"`
	Step       string  `json:"step"`
	Partitions int     `json:"partitions"`
	Produced   [][]struct {
		Partition  int32  `json:"partition"`
		BaseOffset string `json:"baseOffset"`
		ErrorCode  int    `json:"errorCode"`
	} `json:"produced"`
	Consumed   []kjsMessage      `json:"consumed"`
	Committed  map[string]string `json:"committed"`
	Heartbeats int               `json:"heartbeats"`
}

// TestKafkaJS: kafkajs produces keyed records with headers and timestamps (acks=all, one send plain and
// one gzip), consumes them with a consumer group from the beginning, commits and reads the commits back.
// Offsets, keys, values, headers and timestamps must be exact, every record consumed once, the commits
// visible to kadm too, and kafkajs must have used the versions it prefers.
func TestKafkaJS(t *testing.T) {
	node, dir := kafkajsSetup(t)
	forEachBackend(t, func(t *testing.T, b backend) {
		g, addr, wl := startRecordingGateway(t, b)
		ctx := testCtx(t, 120*time.Second)
		adm := newAdmin(t, g)
		const topic, group, parts, n = "kafkajs", "kafkajs-group", 3, 12
		mustCreateTopics(t, ctx, adm, parts, nil, topic)

		stdout, stderr, runErr := runClientCheck(t, ctx, dir, node, "kafkajs_check.js", addr, topic, strconv.Itoa(n), group, "75000")
		var s kjsSummary
		if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &s); err != nil || runErr != nil || !s.OK {
			errText := "<none>"
			if s.Error != nil {
				errText = *s.Error
			}
			t.Fatalf("kafkajs_check.js: run %v, decode %v, step %q, error %s\nstdout:\n%s\nstderr (tail):\n%s",
				runErr, err, s.Step, errText, stdout.String(), tail(stderr.String(), 60))
		}

		if s.Partitions != parts {
			t.Fatalf("kafkajs saw %d partitions, want %d", s.Partitions, parts)
		}
		// Two sends of 6 records, 2 per partition each: base offsets 0, then 2.
		if len(s.Produced) != 2 {
			t.Fatalf("kafkajs produce results: %+v", s.Produced)
		}
		for k, send := range s.Produced {
			if len(send) != parts {
				t.Fatalf("kafkajs send %d: results for %d partitions, want %d: %+v", k, len(send), parts, send)
			}
			for _, r := range send {
				if r.ErrorCode != 0 || r.BaseOffset != strconv.Itoa(2*k) {
					t.Fatalf("kafkajs send %d partition %d: error %d base offset %s, want 0 and %d", k, r.Partition, r.ErrorCode, r.BaseOffset, 2*k)
				}
			}
		}

		if len(s.Consumed) != n {
			t.Fatalf("kafkajs consumed %d messages, want %d once each: %+v", len(s.Consumed), n, s.Consumed)
		}
		seen := map[int]bool{}
		last := map[int32]int64{0: -1, 1: -1, 2: -1}
		for _, m := range s.Consumed {
			if m.Key == nil || m.Value == nil {
				t.Fatalf("kafkajs message without key or value: %+v", m)
			}
			i := kgoIndex([]byte(*m.Key))
			if i < 0 || i >= n || seen[i] {
				t.Fatalf("kafkajs: unexpected or repeated key %q at %d/%s", *m.Key, m.Partition, m.Offset)
			}
			seen[i] = true
			off, _ := strconv.ParseInt(m.Offset, 10, 64)
			wantHeaders := fmt.Sprintf(`{"i":"%d","dup":["a","b"]}`, i)
			switch {
			case m.Partition != int32(i%parts) || off != int64(i/parts):
				t.Fatalf("kafkajs: record %d at %d/%s, want %d/%d", i, m.Partition, m.Offset, i%parts, i/parts)
			case off <= last[m.Partition]:
				t.Fatalf("kafkajs: partition %d offset %d after %d (out of order)", m.Partition, off, last[m.Partition])
			case *m.Value != fmt.Sprintf("v%02d-%s", i, strings.Repeat("x", i)):
				t.Fatalf("kafkajs: record %d value %q", i, *m.Value)
			case string(m.Headers) != wantHeaders:
				t.Fatalf("kafkajs: record %d headers %s, want %s", i, m.Headers, wantHeaders)
			case m.Timestamp != strconv.FormatInt(1_700_000_000_000+int64(i)*1000, 10):
				t.Fatalf("kafkajs: record %d timestamp %s", i, m.Timestamp)
			}
			last[m.Partition] = off
		}

		if s.Heartbeats < 1 {
			t.Fatalf("kafkajs saw no successful heartbeat")
		}
		wantCommitted := map[string]string{"0": "4", "1": "4", "2": "4"}
		if !mapsEqual(s.Committed, wantCommitted) {
			t.Fatalf("kafkajs fetchOffsets after its commit: %v, want %v", s.Committed, wantCommitted)
		}
		if got, want := grpOffsets(t, ctx, adm, group, topic), (map[int32]int64{0: 4, 1: 4, 2: 4}); !mapsEqual(got, want) {
			t.Fatalf("kadm sees kafkajs's commits as %v, want %v", got, want)
		}
		if d := grpDescribe(t, ctx, adm, group); d.State != "Empty" || len(d.Members) != 0 {
			t.Fatalf("group after kafkajs disconnected: state %q, %d members", d.State, len(d.Members))
		}

		t.Logf("requests through the proxy:\n%s", wl)
		// What kafkajs spoke: min(its max, kgate's max) of each API.
		for _, c := range []struct {
			name string
			key  int16
			want []int16
		}{
			{"ApiVersions", 18, []int16{2}}, // its first try, accepted
			{"Metadata", 3, []int16{6}},
			{"Produce", 0, []int16{7}},
			{"Fetch", 1, []int16{11}},
			{"ListOffsets", 2, []int16{3}},
			{"FindCoordinator", 10, []int16{2}},
			{"JoinGroup", 11, []int16{5}},
			{"SyncGroup", 14, []int16{3}},
			{"Heartbeat", 12, []int16{3}},
			{"LeaveGroup", 13, []int16{3}},
			{"OffsetCommit", 8, []int16{5}},
			{"OffsetFetch", 9, []int16{4}},
		} {
			if got := wl.versions(kjsClientID, c.key); !slices.Equal(got, c.want) {
				t.Errorf("kafkajs sent %s versions %v, want %v", c.name, got, c.want)
			}
		}
	})
}

// tail returns the last n lines of s.
// runClientCheck runs a client library's check script (a bounded 90 s; dir "" is the package's),
// logging its run time, and its stderr when KGATE_TEST_LOG is set.
func runClientCheck(t *testing.T, ctx context.Context, dir, interpreter, script string, args ...string) (stdout, stderr *bytes.Buffer, runErr error) {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, interpreter, append([]string{script}, args...)...)
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	stdout, stderr = &bytes.Buffer{}, &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	start := time.Now()
	runErr = cmd.Run()
	name := filepath.Base(script)
	t.Logf("%s ran in %v", name, time.Since(start).Round(time.Millisecond))
	if os.Getenv("KGATE_TEST_LOG") != "" {
		t.Logf("%s log:\n%s", name, stderr.String())
	}
	return stdout, stderr, runErr
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
