package main

import (
	"context"
	"testing"
	"time"
)

// TestPaceStampsDueTimes: a record's latency counts from when it was due, not from when the pacer got
// to it: a pacer held up for 30 ms (a producer's full buffer, a GC pause) leaves the records due
// meanwhile stamped with their due times, so the wait shows in their latencies; stamped when emitted,
// it was hidden (coordinated omission).
func TestPaceStampsDueTimes(t *testing.T) {
	const rate, total = 10_000.0, 1_000
	var first time.Time
	lateness := time.Duration(0) // the most a record was emitted after it was due
	blocked := false
	err := pace(context.Background(), rate, total, func(from, to int64, dueAt func(int64) time.Time) {
		now := time.Now()
		if first.IsZero() {
			first = dueAt(0)
		}
		for i := from; i < to; i++ {
			if d := dueAt(i); d.After(now.Add(time.Millisecond)) {
				t.Fatalf("record %d emitted at %v, due only at %v", i, now, d)
			} else {
				lateness = max(lateness, now.Sub(d))
			}
			if want := first.Add(time.Duration(float64(i) / rate * float64(time.Second))); !dueAt(i).Equal(want) {
				t.Fatalf("record %d due at %v, want %v (i/rate after the start)", i, dueAt(i), want)
			}
		}
		if !blocked && from <= 500 && 500 < to {
			blocked = true
			time.Sleep(30 * time.Millisecond)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if lateness < 25*time.Millisecond {
		t.Fatalf("records due while the pacer was held up 30 ms were at most %v late by their stamps", lateness)
	}
}

// TestBaselineSplit: the produce baseline writes a request as the gateway does: a request of one
// partition's batch, or of fewer than 256 records, as one pipeline; larger ones of several partitions
// as up to four at once, of 128 records or more each.
func TestBaselineSplit(t *testing.T) {
	for _, tc := range []struct{ perReq, perBatch, want int }{
		{1, 4000, 1}, {8, 669, 4}, {62, 96, 4}, {3, 50, 1}, {2, 128, 2}, {3, 100, 2},
	} {
		if got := baselineSplit(tc.perReq, tc.perBatch); got != tc.want {
			t.Errorf("%d batches of %d records: %d pipelines, want %d", tc.perReq, tc.perBatch, got, tc.want)
		}
	}
}
