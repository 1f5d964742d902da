package integration

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// kafka-python 2.0.2 (Debian bookworm's python3-kafka, installed by .ci/run) guesses the broker's age from
// the maximum versions kgate advertises and then speaks fixed, old versions: ApiVersions v0 with
// Metadata v0 to probe, then Metadata v1, Fetch v4, ListOffsets v1, FindCoordinator v0, JoinGroup v2,
// SyncGroup/Heartbeat/LeaveGroup v1, OffsetCommit v2, OffsetFetch v1. py/kafka_python_check.py
// produces, consumes with a group and manual commits, reopens the group and seeks into a batch; this
// test checks its summary line, the commits as kadm sees them and the versions it spoke.

const kpyClientID = "kgate-it-kafka-python" // the script's client ids are this plus "-producer" etc.

// kafkaPythonSetup returns a python3 that imports kafka (Debian's package lives in /usr/lib/python3, seen
// only by /usr/bin/python3, so that one is tried before a python3 earlier on the PATH) and kafka-python's
// version. Outside CI a missing kafka-python skips the test; in CI (env CI set) it fails.
func kafkaPythonSetup(t *testing.T) (python, version string) {
	t.Helper()
	var cands []string
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		cands = append(cands, "/usr/bin/python3")
	}
	if p, err := exec.LookPath("python3"); err == nil && p != "/usr/bin/python3" {
		cands = append(cands, p)
	}
	var tried []string
	for _, py := range cands {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, py, "-c", "import kafka; print(kafka.__version__)").CombinedOutput()
		cancel()
		if err == nil {
			return py, strings.TrimSpace(string(out))
		}
		tried = append(tried, py+": "+strings.TrimSpace(tail(string(out), 1)))
	}
	if len(tried) == 0 {
		tried = append(tried, "no python3 found")
	}
	if os.Getenv("CI") == "" {
		t.Skipf("kafka-python unavailable (CI unset; apt-get install python3-kafka): %s", strings.Join(tried, "; "))
	}
	t.Fatalf("kafka-python unavailable in CI (.ci/run installs python3-kafka): %s", strings.Join(tried, "; "))
	return "", ""
}

type kpySummary struct {
	OK          bool               `json:"ok"`
	Error       *string            `json:"error"`
	Step        string             `json:"step"`
	KafkaPython string             `json:"kafka_python"`
	APIVersion  string             `json:"api_version"`
	Produced    map[string][]int64 `json:"produced"`
	Group1      map[string][]int64 `json:"group1"`
	Committed1  map[string]int64   `json:"committed1"`
	Group2First map[string]int64   `json:"group2_first"`
	Committed2  map[string]int64   `json:"committed2"`
	Seek        []int64            `json:"seek"`
}

// TestKafkaPython: kafka-python produces keyed records with headers (one batch per partition), a
// consumer group with manual commits reads them all back exactly with dense offsets from 0, commits the
// middle, closes and reopens to resume there, and a group-less consumer seeks into the middle of a
// batch and reads from exactly there. The summary, the commits kadm sees and the versions kafka-python
// sent must all match.
func TestKafkaPython(t *testing.T) {
	python, version := kafkaPythonSetup(t)
	t.Logf("kafka-python %s via %s", version, python)
	script, err := filepath.Abs(filepath.Join("py", "kafka_python_check.py"))
	if err != nil {
		t.Fatal(err)
	}
	forEachBackend(t, func(t *testing.T, b backend) {
		g, addr, wl := startRecordingGateway(t, b)
		ctx := testCtx(t, 120*time.Second)
		adm := newAdmin(t, g)
		const topic, group, parts, n = "kafka-python", "kafka-python-group", 2, 12
		const per, mid = n / parts, n / parts / 2
		mustCreateTopics(t, ctx, adm, parts, nil, topic)

		stdout, stderr, runErr := runClientCheck(t, ctx, "", python, script, addr, topic, strconv.Itoa(parts), strconv.Itoa(n), group, "75")
		var s kpySummary
		line, found := "", false
		for l := range strings.Lines(stdout.String()) {
			if rest, ok := strings.CutPrefix(l, "SUMMARY "); ok {
				line, found = rest, true
			}
		}
		decodeErr := json.Unmarshal([]byte(line), &s)
		if !found || decodeErr != nil || runErr != nil || !s.OK || s.Step != "done" {
			errText := "<none>"
			if s.Error != nil {
				errText = *s.Error
			}
			t.Fatalf("kafka_python_check.py: run %v, summary found %v, decode %v, step %q, error %s\nstdout:\n%s\nstderr (tail):\n%s",
				runErr, found, decodeErr, s.Step, errText, stdout.String(), tail(stderr.String(), 60))
		}

		// The script checks each step itself; the summary must say what it saw, so a script that
		// skipped a check cannot pass.
		dense := func(from, to int64) []int64 {
			var o []int64
			for i := from; i < to; i++ {
				o = append(o, i)
			}
			return o
		}
		for p := range parts {
			ps := strconv.Itoa(p)
			if got := s.Produced[ps]; !slices.Equal(got, dense(0, per)) {
				t.Errorf("partition %d: produce offsets %v, want %v", p, got, dense(0, per))
			}
			if got := s.Group1[ps]; !slices.Equal(got, dense(0, per)) {
				t.Errorf("partition %d: first group read offsets %v, want %v", p, got, dense(0, per))
			}
			if got, ok := s.Committed1[ps]; !ok || got != mid {
				t.Errorf("partition %d: first commit read back as %d (present %v), want %d", p, got, ok, mid)
			}
			if got, ok := s.Group2First[ps]; !ok || got != mid {
				t.Errorf("partition %d: reopened group resumed at %d (present %v), want %d", p, got, ok, mid)
			}
			if got, ok := s.Committed2[ps]; !ok || got != per {
				t.Errorf("partition %d: second commit read back as %d (present %v), want %d", p, got, ok, per)
			}
		}
		if !slices.Equal(s.Seek, dense(mid, per)) {
			t.Errorf("offsets after the seek to %d: %v, want %v", mid, s.Seek, dense(mid, per))
		}
		if got, want := grpOffsets(t, ctx, adm, group, topic), (map[int32]int64{0: per, 1: per}); !mapsEqual(got, want) {
			t.Errorf("kadm sees kafka-python's commits as %v, want %v", got, want)
		}
		if d := grpDescribe(t, ctx, adm, group); d.State != "Empty" || len(d.Members) != 0 {
			t.Errorf("group after kafka-python closed: state %q, %d members", d.State, len(d.Members))
		}
		// One Produce request for all the records: each partition's records went in one batch, so the
		// seek landed in the middle of a stored batch.
		if got := wl.count(kpyClientID+"-producer", 0); got != 1 {
			t.Errorf("kafka-python sent %d Produce requests, want 1 (one batch per partition)", got)
		}

		t.Logf("requests through the proxy:\n%s", wl)
		if version != "2.0.2" {
			t.Logf("kafka-python %s, not 2.0.2: the versions it spoke are not checked", version)
			return
		}
		if s.APIVersion != "2.4.0" {
			t.Errorf("kafka-python guessed broker version %s, want 2.4.0 (from Produce v8 advertised)", s.APIVersion)
		}
		// What kafka-python spoke, over all its clients.
		clients := []string{"-producer", "-group1", "-group2", "-verify", "-seek"}
		for _, c := range []struct {
			name string
			key  int16
			want []int16
		}{
			{"ApiVersions", 18, []int16{0}},
			{"Metadata", 3, []int16{0, 1}},
			{"Produce", 0, []int16{7}},
			{"Fetch", 1, []int16{4}},
			{"ListOffsets", 2, []int16{1}},
			{"FindCoordinator", 10, []int16{0}},
			{"JoinGroup", 11, []int16{2}},
			{"SyncGroup", 14, []int16{1}},
			{"LeaveGroup", 13, []int16{1}},
			{"OffsetCommit", 8, []int16{2}},
			{"OffsetFetch", 9, []int16{1}},
			{"Heartbeat", 12, []int16{1}}, // the script's 100 ms heartbeat interval has it send some
		} {
			var got []int16
			for _, suffix := range clients {
				got = append(got, wl.versions(kpyClientID+suffix, c.key)...)
			}
			slices.Sort(got)
			got = slices.Compact(got)
			if !slices.Equal(got, c.want) {
				t.Errorf("kafka-python sent %s versions %v, want %v", c.name, got, c.want)
			}
		}
	})
}
