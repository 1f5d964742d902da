package redisstore

import (
	"fmt"
	"testing"
	"unsafe"
)

// The argument builders size their slabs up front: a slab that grows copies every argument built so far
// (a megabyte at 8,000 records) and leaves the earlier arguments pointing into the old copy.
func TestArgSlabsSizedExactly(t *testing.T) {
	s := &Store{keys: keys{ns: "kgate"}}
	for _, n := range []int{1, 2, 127, 128, 129, 300, 8000} {
		for _, hdrs := range []int{0, 2} {
			b := benchBatch(n, hdrs)
			b.Records[n/2].Key = nil
			b.Records[n-1].Value = nil
			b.Records[0].Timestamp += 10_000 // out of order: the time index picks differ from a sorted run
			t.Run(fmt.Sprintf("records=%d/headers=%d", n, hdrs), func(t *testing.T) {
				xadds, eval := s.multiArgs(b, s.partKeys(b))
				if len(eval) != cap(eval) {
					t.Errorf("multiArgs: EVAL has %d args in a slab of %d: the slab was sized wrong", len(eval), cap(eval))
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
				if args := s.appendArgs(b); len(args) != cap(args) {
					t.Errorf("appendArgs: %d args in a slab of %d: the slab was sized wrong", len(args), cap(args))
				}
			})
		}
	}
}
