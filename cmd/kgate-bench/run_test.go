package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kgate/kgate/internal/redistest"
)

// TestLatencyPhaseAtHalfMax runs the latency phase at "50%" end to end, on a redis-server of its own
// and an in-process gateway, with short timings: the rate is half of an end-to-end maximum measured in
// the same run, and every percentile has its baseline.
func TestLatencyPhaseAtHalfMax(t *testing.T) {
	if os.Getenv("KGATE_SKIP_REDIS") == "1" {
		t.Skip("KGATE_SKIP_REDIS=1")
	}
	if !redistest.Available() {
		t.Fatal("redis-server is not on PATH")
	}
	o, err := parseFlags([]string{"--phases", "latency", "--latency-rates", "50%", "--rounds", "1",
		"--duration", "500ms", "--latency-duration", "500ms", "--json"})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rep := &reporter{json: true, out: &out, table: io.Discard}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := runWith(ctx, o, rep); err != nil {
		t.Fatal(err)
	}
	metrics := map[string]result{}
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil || r.Phase != "latency" {
			continue
		}
		metrics[r.Metric] = r
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	p50, ok := metrics["p50"]
	if !ok {
		t.Fatalf("no latency p50 in the output:\n%s", out.String())
	}
	if !strings.HasPrefix(p50.Case, "50% max (") || !strings.Contains(p50.Notes, "rec/s end to end") {
		t.Fatalf("case %q, notes %q: want half of the end-to-end maximum", p50.Case, p50.Notes)
	}
	rate := leadingNumber(t, strings.TrimPrefix(p50.Case, "50% max ("))
	_, after, _ := strings.Cut(p50.Notes, "max = ")
	if top := leadingNumber(t, after); top <= 0 || rate < 0.49*top || rate > 0.51*top {
		t.Fatalf("rate %v is not half of the end-to-end maximum %v (notes %q)", rate, top, p50.Notes)
	}
	// Half of a true maximum is sustained: the consumer got about the rate asked for.
	_, after, _ = strings.Cut(p50.Notes, "delivered ")
	if got := leadingNumber(t, after); got < 0.75*rate || got > 1.25*rate {
		t.Fatalf("delivered %v rec/s at a target of %v (notes %q)", got, rate, p50.Notes)
	}
	if strings.Contains(p50.Notes, "producer alone") {
		t.Fatalf("notes name a produce-phase maximum, but that phase did not run: %q", p50.Notes)
	}
	for _, m := range []string{"p50", "p99", "p999"} {
		r := metrics[m]
		if r.Kgate <= 0 || r.Baseline == nil || *r.Baseline <= 0 {
			t.Fatalf("%s: kgate %v, baseline %v", m, r.Kgate, r.Baseline)
		}
	}
}

// leadingNumber parses the number s starts with, written with thousands separators ("98,363 rec/s").
func leadingNumber(t *testing.T, s string) float64 {
	t.Helper()
	end := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != ',' && r != '.' })
	if end < 0 {
		end = len(s)
	}
	v, err := strconv.ParseFloat(strings.ReplaceAll(s[:end], ",", ""), 64)
	if err != nil {
		t.Fatalf("no number at the start of %q", s)
	}
	return v
}

func TestParseFlagsBufferedRecords(t *testing.T) {
	if o, err := parseFlags(nil); err != nil || o.buffered != 10000 {
		t.Fatalf("default: %d, %v; want franz-go's 10000", o.buffered, err)
	}
	if o, err := parseFlags([]string{"--buffered-records", "100000"}); err != nil || o.buffered != 100000 {
		t.Fatalf("--buffered-records 100000: %d, %v", o.buffered, err)
	}
	if _, err := parseFlags([]string{"--buffered-records", "0"}); err == nil {
		t.Fatal("--buffered-records 0 accepted")
	}
}

// TestReplayPhase runs the replay phase briefly with two requests in flight: every request is
// acknowledged without an error (a wrong sequence or CRC patch would fail it), and the phase reports a
// rate next to its baseline.
func TestReplayPhase(t *testing.T) {
	if os.Getenv("KGATE_SKIP_REDIS") == "1" {
		t.Skip("KGATE_SKIP_REDIS=1")
	}
	if !redistest.Available() {
		t.Fatal("redis-server is not on PATH")
	}
	prof := filepath.Join(t.TempDir(), "replay.prof")
	o, err := parseFlags([]string{"--phases", "replay", "--sizes", "100", "--partitions", "4", "--rounds", "1",
		"--duration", "300ms", "--warmup", "100ms", "--replay-batch", "20", "--replay-inflight", "2", "--json",
		"--cpuprofile", prof, "--cpuprofile-phase", "replay"})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rep := &reporter{json: true, out: &out, table: io.Discard}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := runWith(ctx, o, rep); err != nil {
		t.Fatal(err)
	}
	var got *result
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r result
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.Phase == "replay" && r.Unit == "rec/s" {
			got = &r
		}
	}
	if got == nil || got.Kgate <= 0 || got.Baseline == nil || *got.Baseline <= 0 {
		t.Fatalf("replay result %+v in:\n%s", got, out.String())
	}
	if got.Case != "100B x 4p, 20/batch" {
		t.Fatalf("case %q", got.Case)
	}
	// --cpuprofile-phase names any phase, not only those that start the profile themselves.
	if fi, err := os.Stat(prof); err != nil || fi.Size() == 0 {
		t.Fatalf("no CPU profile of the replay phase: %v", err)
	}
}

// TestProducedTopicsDroppedAfterUse runs the produce phase, then the commits phase, on a Redis the
// test keeps: the produce phase's topics are deleted before the commits phase, and kept when no
// phase follows it.
func TestProducedTopicsDroppedAfterUse(t *testing.T) {
	if os.Getenv("KGATE_SKIP_REDIS") == "1" {
		t.Skip("KGATE_SKIP_REDIS=1")
	}
	if !redistest.Available() {
		t.Fatal("redis-server is not on PATH")
	}
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for _, tc := range []struct {
		phases string
		kept   bool
	}{{"produce", true}, {"produce,commits", false}} {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		o, err := parseFlags([]string{"--redis", srv.Addr, "--keep", "--phases", tc.phases, "--sizes", "100",
			"--partitions", "1", "--rounds", "1", "--duration", "300ms", "--commit-duration", "300ms"})
		if err != nil {
			t.Fatal(err)
		}
		if err := runWith(ctx, o, &reporter{out: io.Discard, table: io.Discard}); err != nil {
			t.Fatal(err)
		}
		keys, err := rdb.Keys(ctx, "*produce-100-1p*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if kept := len(keys) > 0; kept != tc.kept {
			t.Errorf("phases %s: produce topic's keys %q, want kept %v", tc.phases, keys, tc.kept)
		}
	}
}
