package redisstore

import (
	"context"
	"fmt"
	"testing"
	"unsafe"
)

// The argument builders size their slabs up front: a slab that grows copies every argument built so far
// (a megabyte at 8,000 records) and allocates it twice.
func TestArgSlabsSizedExactly(t *testing.T) {
	s := &Store{keys: keys{ns: "kgate"}}
	// The time-index candidates (ARGV pairs) vary with the timestamps: many for rising ones, one when
	// the first record is the batch's maximum or the topic uses log append time.
	shapes := map[string]func(b *Batch){
		"rising":     func(*Batch) {},
		"first-max":  func(b *Batch) { b.Records[0].Timestamp += 10_000 },
		"log-append": func(b *Batch) { b.LogAppendTime = 1_700_000_000_000 },
	}
	for _, n := range []int{1, 2, 127, 128, 129, 300, 8000} {
		for _, hdrs := range []int{0, 2} {
			for shape, apply := range shapes {
				b := benchBatch(n, hdrs)
				b.Records[n/2].Key = nil
				b.Records[n-1].Value = nil
				if hdrs > 0 {
					b.Records[n-1].Headers[1].Value = nil // an "hn:" field
				}
				apply(b)
				t.Run(fmt.Sprintf("records=%d/headers=%d/%s/candidates=%d", n, hdrs, shape, b.timeCandidates()), func(t *testing.T) {
					checkArgSlabs(t, s, b)
				})
			}
		}
	}
}

// A run (mergeRuns) adds its batches' sizes to the finish step's arguments.
func TestArgSlabsSizedExactlyForRuns(t *testing.T) {
	s := &Store{keys: keys{ns: "kgate"}}
	for _, n := range []int{1, 3} {
		var batches []*Batch
		for i := range n {
			b := benchBatch(40, 1)
			b.BaseSequence = int32(40 * i)
			batches = append(batches, b)
		}
		runs, _ := mergeRuns(batches)
		if len(runs) != 1 {
			t.Fatalf("%d batches made %d runs", n, len(runs))
		}
		t.Run(fmt.Sprintf("batches=%d", n), func(t *testing.T) { checkArgSlabs(t, s, runs[0]) })
	}
}

// checkArgSlabs builds b's arguments both ways and fails t if a slab grew.
func checkArgSlabs(t *testing.T, s *Store, b *Batch) {
	t.Helper()
	keys := s.partKeys(b)
	sc := new(appendScratch)
	xadds, eval := s.multiArgs(b, keys, sc, 1, &emptyValue, &emptyValue)
	nstrs, nints, nargs := b.multiArgCounts(len(keys), b.timeCandidates())
	// Strings may be sized a few over (a header without a value takes none).
	if len(sc.args.ints) != nints || len(sc.args.args) != nargs || len(sc.args.strs) > nstrs {
		t.Errorf("multiArgs built %d integers, %d arguments and %d strings, sized for %d, %d and %d",
			len(sc.args.ints), len(sc.args.args), len(sc.args.strs), nints, nargs, nstrs)
	}
	// One slab: the XADDs and the EVAL follow each other in it.
	at := unsafe.Pointer(unsafe.SliceData(xadds[0]))
	for i, x := range xadds {
		if unsafe.Pointer(unsafe.SliceData(x)) != at {
			t.Fatalf("multiArgs: XADD %d is not where XADD %d ends in the slab", i, i-1)
		}
		at = unsafe.Add(at, uintptr(len(x))*unsafe.Sizeof(any(nil)))
	}
	if unsafe.Pointer(unsafe.SliceData(eval)) != at {
		t.Errorf("multiArgs: EVAL is not in the XADDs' slab: it grew")
	}
	if args := s.appendArgs(b, &emptyValue, &emptyValue); len(args) != cap(args) {
		t.Errorf("appendArgs: %d args in a slab of %d: the slab was sized wrong", len(args), cap(args))
	}
}

// A reply's records share one header slab: parsing costs the same allocations at 10 records as at
// 1,000, headers or not, and each record sees only its own headers.
func TestParseEntriesAllocations(t *testing.T) {
	for _, hdrs := range []int{0, 1, 3} {
		small := benchReply(10, hdrs)
		// One record without headers in the middle, one with a null-valued header.
		large := rangeReply(1000, func(i int) []string {
			fields := []string{"ts", "1", "key", fmt.Sprintf("k%07d", i), "value", "v"}
			if hdrs > 0 && i == 500 {
				return fields
			}
			for h := range hdrs {
				fields = append(fields, fmt.Sprintf("h:h%d", h), "trace-0123")
			}
			if hdrs > 0 && i == 501 {
				fields = append(fields, "hn:gone", "")
			}
			return fields
		})
		a := testing.AllocsPerRun(20, func() { _, _ = parseEntries(small) })
		b := testing.AllocsPerRun(20, func() { _, _ = parseEntries(large) })
		if a != b || a > 2 {
			t.Errorf("headers=%d: %v allocations at 10 records, %v at 1,000; want the same, at most 2", hdrs, a, b)
		}
		recs, err := parseEntries(large)
		if err != nil || len(recs) != 1000 {
			t.Fatalf("headers=%d: %d records, %v", hdrs, len(recs), err)
		}
		for i, r := range recs {
			want := hdrs
			switch {
			case hdrs > 0 && i == 500:
				want = 0
			case hdrs > 0 && i == 501:
				want = hdrs + 1
			}
			if len(r.Headers) != want || cap(r.Headers) != want {
				t.Fatalf("headers=%d: record %d has %d headers (cap %d), want %d", hdrs, i, len(r.Headers), cap(r.Headers), want)
			}
			for h, hd := range r.Headers[:min(hdrs, len(r.Headers))] {
				if hd.Key != fmt.Sprintf("h%d", h) || string(hd.Value) != "trace-0123" {
					t.Fatalf("headers=%d: record %d header %d = %q: %q", hdrs, i, h, hd.Key, hd.Value)
				}
			}
			if i == 501 && hdrs > 0 {
				if last := r.Headers[hdrs]; last.Key != "gone" || last.Value != nil {
					t.Fatalf("record 501: null header parsed as %q: %q", last.Key, last.Value)
				}
			}
		}
	}
}

// A scratch reused for a smaller batch builds the same commands as a fresh one, and a reset one holds
// no pointer into the records it was built for.
func TestAppendScratchReused(t *testing.T) {
	s := &Store{keys: keys{ns: "kgate"}}
	big, small := benchBatch(8000, 2), benchBatch(10, 1)
	small.Topic, small.Records[3].Key = "other", []byte("another key")
	render := func(xadds [][]any, eval []any) string {
		var out []byte
		for _, args := range append(xadds, eval) {
			for _, a := range args {
				out = fmt.Appendf(out, "%v ", deref(a))
			}
			out = append(out, '\n')
		}
		return string(out)
	}
	want := render(s.multiArgs(small, s.partKeys(small), new(appendScratch), 1, &emptyValue, &emptyValue))
	sc := new(appendScratch)
	s.multiArgs(big, s.partKeys(big), sc, 1, &emptyValue, &emptyValue)
	sc.queueXADDs(context.Background(), sc.xadds)
	sc.reset()
	for i, a := range sc.args.args[:cap(sc.args.args)] {
		if a != nil {
			t.Fatalf("reset scratch: argument %d still set", i)
		}
	}
	for i, x := range sc.xadds[:cap(sc.xadds)] {
		if x != nil {
			t.Fatalf("reset scratch: XADD %d still set", i)
		}
	}
	if got := render(s.multiArgs(small, s.partKeys(small), sc, 1, &emptyValue, &emptyValue)); got != want {
		t.Errorf("reused scratch built\n%s\nwant\n%s", got, want)
	}
}

func deref(a any) any {
	switch v := a.(type) {
	case *string:
		return *v
	case *int64:
		return *v
	}
	return a
}
