// Package benchrec reports micro-benchmark figures per record, for benchmarks whose operation handles
// a batch of records.
package benchrec

import (
	"runtime"
	"testing"
)

// PerRecord runs fn b.N times and reports ns/record and allocs/record next to the usual per-op figures.
func PerRecord(b *testing.B, records int, fn func()) {
	b.Helper()
	b.ReportAllocs()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for b.Loop() {
		fn()
	}
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(records), "ns/record")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N)/float64(records), "allocs/record")
}
