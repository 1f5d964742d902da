package integration

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// kcatPath returns kcat's path. Outside CI a missing kcat skips the test; in CI (env CI set) it fails.
func kcatPath(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("kcat")
	if err != nil {
		if os.Getenv("CI") == "" {
			t.Skip("kcat not on PATH (install it, or set CI to make this a failure)")
		}
		t.Fatalf("kcat not on PATH in CI: %v", err)
	}
	return path
}

// runKcat runs kcat with args and stdin, bounded by a timeout, and returns its stdout.
func runKcat(t *testing.T, path, stdin string, args ...string) string {
	t.Helper()
	stdout, _ := runKcatOutputs(t, path, stdin, args...)
	return stdout
}

// runKcatLog is runKcat returning what kcat logged (stderr: librdkafka's debug output with -d).
func runKcatLog(t *testing.T, path, stdin string, args ...string) string {
	t.Helper()
	_, stderr := runKcatOutputs(t, path, stdin, args...)
	return stderr
}

func runKcatOutputs(t *testing.T, path, stdin string, args ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kcat %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), stderr.String()
}

// TestKcat drives kcat (librdkafka): metadata lists the topic; keyed records with headers produced
// uncompressed and with zstd come back with exact offsets, keys, values and headers.
func TestKcat(t *testing.T) {
	path := kcatPath(t)
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 60*time.Second)
		mustCreateTopics(t, ctx, newAdmin(t, g), 2, nil, "kcat")
		common := []string{"-b", g.Addr, "-q", "-m", "10", "-X", "topic.metadata.refresh.interval.ms=1000"}
		args := func(more ...string) []string { return append(append([]string{}, common...), more...) }

		md := runKcat(t, path, "", args("-L", "-t", "kcat")...)
		if !strings.Contains(md, `topic "kcat" with 2 partitions:`) || !strings.Contains(md, g.Addr) {
			t.Fatalf("kcat -L does not list the topic and the broker:\n%s", md)
		}

		runKcat(t, path, "k1:v1\nk2:v2\n", args("-P", "-t", "kcat", "-p", "1", "-K:", "-H", "a=1", "-H", "b=2", "-H", "a=3")...)
		runKcat(t, path, "k3:v3\n", args("-P", "-t", "kcat", "-p", "1", "-K:", "-z", "zstd", "-H", "z=zz")...)
		got := runKcat(t, path, "", args("-C", "-t", "kcat", "-p", "1", "-o", "beginning", "-e", "-f", `%o %k %s %h\n`)...)
		want := "0 k1 v1 a=1,b=2,a=3\n1 k2 v2 a=1,b=2,a=3\n2 k3 v3 z=zz\n"
		if got != want {
			t.Fatalf("kcat consume:\n%s\nwant:\n%s", got, want)
		}
		// Partition 0 is empty: kcat ends at once with nothing.
		if got := runKcat(t, path, "", args("-C", "-t", "kcat", "-p", "0", "-o", "beginning", "-e", "-f", `%o %s\n`)...); got != "" {
			t.Fatalf("kcat consume of the empty partition: %q", got)
		}
		// librdkafka's idempotent producer (InitProducerId, sequences, lz4) into it.
		runKcat(t, path, "i1\ni2\ni3\n", args("-P", "-t", "kcat", "-p", "0", "-z", "lz4", "-X", "enable.idempotence=true")...)
		if got := runKcat(t, path, "", args("-C", "-t", "kcat", "-p", "0", "-o", "beginning", "-e", "-f", `%o %K %s\n`)...); got != "0 -1 i1\n1 -1 i2\n2 -1 i3\n" {
			t.Fatalf("kcat consume of the idempotently produced records: %q", got)
		}
		// Offsets from the end, as tools compute them.
		if got := runKcat(t, path, "", args("-C", "-t", "kcat", "-p", "1", "-o", "-1", "-e", "-f", `%o %s\n`)...); got != "2 v3\n" {
			t.Fatalf("kcat -o -1: %q, want \"2 v3\\n\"", got)
		}
		// Every codec is sent compressed: librdkafka sends gzip, snappy and lz4 uncompressed, saying so
		// only in its debug log, to a broker whose Produce range does not reach below v3.
		for _, codec := range []string{"gzip", "snappy", "lz4", "zstd"} {
			log := runKcatLog(t, path, "c-"+codec+"\n", args("-P", "-t", "kcat", "-p", "0", "-z", codec, "-d", "msg")...)
			if strings.Contains(log, "does not support compression") || !strings.Contains(log, codec) {
				t.Fatalf("kcat -z %s did not compress:\n%s", codec, log)
			}
		}
		if got := runKcat(t, path, "", args("-C", "-t", "kcat", "-p", "0", "-o", "3", "-e", "-f", `%s\n`)...); got != "c-gzip\nc-snappy\nc-lz4\nc-zstd\n" {
			t.Fatalf("kcat consume of the compressed records: %q", got)
		}
	})
}
