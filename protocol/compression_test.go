package protocol

import (
	"bytes"
	"errors"
	"runtime"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// TestZstdDecoderPoolsBounded: decoders are pooled by a size class of their memory bound, so the limits a
// produce request passes (what is left of its budget, different for nearly every partition) make a
// few pools, not one each: every distinct limit used to leave a pool and a decoder behind for good.
func TestZstdDecoderPoolsBounded(t *testing.T) {
	src, err := compress(nil, []byte("a small zstd-compressed record set"), CodecZstd)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10000 {
		if _, err := decompress(CodecZstd, src, 1<<20+i*997); err != nil {
			t.Fatal(err)
		}
	}
	pools := 0
	zstdDecoders.Range(func(any, any) bool { pools++; return true })
	if pools > 40 {
		t.Fatalf("%d zstd decoder pools after 10,000 limits, want a few dozen at most", pools)
	}
}

// TestZstdDeclaredSizeRefusedFirst: a frame declaring more than the limit is refused from its header,
// before the decoder allocates what it declares: the decoder's bound is a size class above the limit,
// and a 30 MiB frame against a 20 MiB limit allocated 30 MiB before its output was refused.
func TestZstdDeclaredSizeRefusedFirst(t *testing.T) {
	src, err := compress(nil, make([]byte, 30<<20), CodecZstd)
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = decompress(CodecZstd, src, 20<<20+1)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrBatchTooLarge) {
		t.Fatalf("decompress: %v, want ErrBatchTooLarge", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
		t.Fatalf("refusing a %d-byte frame declaring 30 MiB allocated %d MiB", len(src), grew>>20)
	}
}

// TestZstdFramesWithoutSizeBounded: frames that declare no size, one after another, are refused
// once their output passes the limit: streamed, the output stops there (68 MiB allocated in all for a
// 20 MiB limit here, the doubling output buffer and the decoder's window); decoded whole, three
// frames grew past the limit first (177 MiB allocated).
func TestZstdFramesWithoutSizeBounded(t *testing.T) {
	var src []byte
	for range 3 {
		var b bytes.Buffer // a stream encoder writes no frame content size
		w, err := zstd.NewWriter(&b)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(make([]byte, 15<<20)); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		src = append(src, b.Bytes()...)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := decompress(CodecZstd, src, 20<<20)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrBatchTooLarge) {
		t.Fatalf("decompress: %v, want ErrBatchTooLarge", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 100<<20 {
		t.Fatalf("refusing %d bytes of frames without sizes allocated %d MiB for a 20 MiB limit", len(src), grew>>20)
	}
}
