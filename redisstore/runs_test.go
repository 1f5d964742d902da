package redisstore

import (
	"errors"
	"testing"
)

func TestMergeRuns(t *testing.T) {
	b := func(p int32, pid int64, epoch int16, seq int32, n int) *Batch {
		return &Batch{Topic: "t", Partition: p, ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq, Records: make([]Record, n)}
	}
	wrap := b(0, 5, 0, 2147483647-2, 3) // ends at the largest sequence; the next starts at 0
	in := []*Batch{
		b(0, 5, 1, 0, 3), b(1, 5, 1, 0, 2),
		b(0, 5, 1, 3, 4),                     // continues partition 0
		b(1, 5, 1, 3, 1),                     // gap on partition 1: a new batch
		b(1, 5, 1, 4, 2),                     // continues the one above
		b(0, 5, 2, 7, 1),                     // another epoch
		b(2, -1, 0, 0, 2), b(2, -1, 0, 0, 3), // not idempotent: merged
		b(3, 5, 1, 0, 1), b(3, 6, 1, 1, 1), // another producer
		wrap, b(0, 5, 0, 0, 2),
	}
	runs, at := mergeRuns(in)
	sizes := func(r *Batch) []int {
		if r.runOf == nil {
			return []int{len(r.Records)}
		}
		var out []int
		for _, sub := range r.runOf {
			out = append(out, len(sub.Records))
		}
		return out
	}
	want := [][]int{{3, 4}, {2}, {1, 2}, {1}, {2, 3}, {1}, {1}, {3, 2}}
	if len(runs) != len(want) {
		t.Fatalf("%d runs, want %d", len(runs), len(want))
	}
	for i, r := range runs {
		got := sizes(r)
		if len(got) != len(want[i]) {
			t.Fatalf("run %d: batches of %v records, want %v", i, got, want[i])
		}
		total := 0
		for j := range got {
			if got[j] != want[i][j] {
				t.Fatalf("run %d: batches of %v records, want %v", i, got, want[i])
			}
			total += got[j]
		}
		if len(r.Records) != total {
			t.Fatalf("run %d: %d records, want %d", i, len(r.Records), total)
		}
	}
	wantAt := []runAt{{0, 0}, {1, 0}, {0, 3}, {2, 0}, {2, 1}, {3, 0}, {4, 0}, {4, 2}, {5, 0}, {6, 0}, {7, 0}, {7, 3}}
	for i, a := range at {
		if a != wantAt[i] {
			t.Fatalf("batch %d at %+v, want %+v", i, a, wantAt[i])
		}
	}
	// A different log append time ends a run.
	x, y := b(0, -1, 0, 0, 1), b(0, -1, 0, 0, 1)
	y.LogAppendTime = 9
	if runs, _ := mergeRuns([]*Batch{x, y}); len(runs) != 2 {
		t.Fatalf("batches with different log append times merged")
	}
}

// Consecutive batches of a partition in one Append (a connection's queued produce requests) are stored
// with one finish step per partition, and each stays known to the idempotence check: a retry of any of
// them is a duplicate with its own offsets.
func TestAppendRuns(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		const parts = 4
		mustCreateTopic(t, s, "runs", parts)
		var batches []*Batch
		for round := range 3 {
			for p := range int32(parts) {
				batches = append(batches, &Batch{Topic: "runs", Partition: p, ProducerID: 9, ProducerEpoch: 1,
					BaseSequence: int32(round * 5), Records: plain("r", 5)})
			}
		}
		calls0, _ := commandStats(t, s, "fcall")
		res := s.Append(ctx, batches)
		for i, r := range res {
			if want := int64(i/parts) * 5; r.Err != nil || r.BaseOffset != want || r.Duplicate {
				t.Fatalf("batch %d: %+v, want base %d", i, r, want)
			}
		}
		if calls, _ := commandStats(t, s, "fcall"); calls-calls0 != parts {
			t.Fatalf("%d FCALLs for %d partitions' runs, want one per partition", calls-calls0, parts)
		}
		for p := range int32(parts) {
			checkDense(t, s, "runs", p, 15)
		}
		// Every batch of the runs is recognised when retried, alone or as a run again.
		for i, r := range s.Append(ctx, batches) {
			if want := int64(i/parts) * 5; r.Err != nil || !r.Duplicate || r.BaseOffset != want {
				t.Fatalf("retry of batch %d: %+v, want duplicate at %d", i, r, want)
			}
		}
		retry := &Batch{Topic: "runs", Partition: 2, ProducerID: 9, ProducerEpoch: 1, BaseSequence: 5, Records: plain("r", 5)}
		if r := s.Append(ctx, []*Batch{retry})[0]; !r.Duplicate || r.BaseOffset != 5 {
			t.Fatalf("retry of the middle batch: %+v", r)
		}
		// A run that starts with a retry: the retry is a duplicate, the new batch is stored.
		tail := &Batch{Topic: "runs", Partition: 2, ProducerID: 9, ProducerEpoch: 1, BaseSequence: 15, Records: plain("n", 2)}
		res = s.Append(ctx, []*Batch{batches[2*parts+2], tail})
		if !res[0].Duplicate || res[0].BaseOffset != 10 || res[1].Err != nil || res[1].Duplicate || res[1].BaseOffset != 15 {
			t.Fatalf("retry then new batch: %+v", res)
		}
		checkDense(t, s, "runs", 2, 17)
		// A run out of sequence is refused batch by batch.
		gap := []*Batch{
			{Topic: "runs", Partition: 1, ProducerID: 9, ProducerEpoch: 1, BaseSequence: 30, Records: plain("g", 1)},
			{Topic: "runs", Partition: 1, ProducerID: 9, ProducerEpoch: 1, BaseSequence: 31, Records: plain("g", 1)},
		}
		for i, r := range s.Append(ctx, gap) {
			if !errors.Is(r.Err, ErrOutOfOrderSequence) {
				t.Fatalf("gap batch %d: %+v, want ErrOutOfOrderSequence", i, r)
			}
		}
		checkDense(t, s, "runs", 1, 15)
	})
}
