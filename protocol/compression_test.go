package protocol

import "testing"

// TestZstdDecoderPoolsBounded: decoders are pooled by a power-of-two memory bound, so the limits a
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
