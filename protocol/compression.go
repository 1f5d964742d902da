package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"runtime"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// Codec is a record batch compression codec, the low three bits of the
// batch attributes.
type Codec int8

// The codecs Kafka defines.
const (
	CodecNone   Codec = 0
	CodecGzip   Codec = 1
	CodecSnappy Codec = 2
	CodecLZ4    Codec = 3
	CodecZstd   Codec = 4
)

func (c Codec) String() string {
	switch c {
	case CodecNone:
		return "none"
	case CodecGzip:
		return "gzip"
	case CodecSnappy:
		return "snappy"
	case CodecLZ4:
		return "lz4"
	case CodecZstd:
		return "zstd"
	}
	return fmt.Sprintf("codec(%d)", int8(c))
}

// xerialMagic starts snappy data framed the way snappy-java's
// SnappyOutputStream writes it, which is what the Java producer sends: the
// magic, an int32 version and an int32 minimum compatible version, then
// blocks of an int32 length and a raw snappy block.
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

const xerialHeaderLen = 16

// zstdMinMemory is the least output a zstd decoder is allowed. zstd bounds
// a frame's window by the decoder's memory limit, and the Java producer
// declares a window of up to 8 MiB (level 3: 2 MiB) whatever the batch
// size, so a smaller caller limit is applied to the output instead.
const zstdMinMemory = 8 << 20

// Decoders are pooled with the bytes.Reader they read from so that a
// decompress allocates only its output.
type gzipDecoder struct {
	src bytes.Reader
	r   gzip.Reader
}

type lz4Decoder struct {
	src bytes.Reader
	r   *lz4.Reader
}

type zstdDecoder struct {
	src bytes.Reader
	d   *zstd.Decoder
}

var (
	gzipDecoders = sync.Pool{New: func() any { return new(gzipDecoder) }}
	lz4Decoders  = sync.Pool{New: func() any { return &lz4Decoder{r: lz4.NewReader(nil)} }}

	// zstdDecoders holds one *sync.Pool per memory bound: the bound is
	// fixed when a decoder is made. Bounds are size classes (zstdBound),
	// so the limits callers pass, which vary with what is left of a
	// request's budget, make a few dozen pools at most, not one each.
	zstdDecoders sync.Map
)

// zstdBound is the decoder memory bound used for limit: limit rounded up to
// an eighth of the power of two below it (at most 12.5% over, eight classes
// per doubling), and at least zstdMinMemory. decompress still refuses output
// over limit, and a frame declaring a larger size before decoding it.
func zstdBound(limit int) int {
	if limit <= zstdMinMemory {
		return zstdMinMemory
	}
	step := 1 << (bits.Len(uint(limit)) - 1) / 8
	if limit > math.MaxInt-step {
		return limit
	}
	return (limit + step - 1) / step * step
}

func getZstdDecoder(bound int) (*zstdDecoder, *sync.Pool, error) {
	p, ok := zstdDecoders.Load(bound)
	if !ok {
		p, _ = zstdDecoders.LoadOrStore(bound, new(sync.Pool))
	}
	pool := p.(*sync.Pool)
	if d, ok := pool.Get().(*zstdDecoder); ok {
		return d, pool, nil
	}
	d, err := zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(1), // streams decode synchronously: no goroutines
		zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxMemory(uint64(bound)),
	)
	if err != nil {
		return nil, nil, err
	}
	zd := &zstdDecoder{d: d}
	runtime.AddCleanup(zd, func(d *zstd.Decoder) { d.Close() }, d)
	return zd, pool, nil
}

// decompress returns src decompressed with c into a new buffer of at most
// limit bytes. Corrupt input wraps ErrCorruptBatch; output over limit wraps
// ErrBatchTooLarge.
func decompress(c Codec, src []byte, limit int) ([]byte, error) {
	var (
		out []byte
		err error
	)
	switch c {
	case CodecGzip:
		gz := gzipDecoders.Get().(*gzipDecoder)
		gz.src.Reset(src)
		if err = gz.r.Reset(&gz.src); err == nil {
			out, err = readLimited(&gz.r, len(src), limit)
		}
		gz.src.Reset(nil)
		gzipDecoders.Put(gz)
	case CodecLZ4:
		lz := lz4Decoders.Get().(*lz4Decoder)
		lz.src.Reset(src)
		lz.r.Reset(&lz.src)
		out, err = readLimited(lz.r, len(src), limit)
		lz.src.Reset(nil)
		lz.r.Reset(nil)
		lz4Decoders.Put(lz)
	case CodecSnappy:
		if len(src) >= xerialHeaderLen && bytes.HasPrefix(src, xerialMagic) {
			out, err = decodeXerial(src[xerialHeaderLen:], limit)
		} else {
			out, err = decodeSnappy(nil, src, limit)
		}
	case CodecZstd:
		var (
			zd   *zstdDecoder
			pool *sync.Pool
		)
		var h zstd.Header
		if h.Decode(src) == nil && h.HasFCS && h.FrameContentSize > uint64(limit) {
			// Refused from its header, before anything is decoded.
			err = ErrBatchTooLarge
		} else if zd, pool, err = getZstdDecoder(zstdBound(limit)); err == nil {
			// Streamed, as gzip and lz4 are, so the output stops at limit: decoded whole, frames
			// that declare no size (or several of them) allocated about twice the limit and more
			// before the size was checked.
			zd.src.Reset(src)
			if err = zd.d.Reset(&zd.src); err == nil {
				out, err = readLimited(zd.d, len(src), limit)
			}
			_ = zd.d.Reset(nil)
			zd.src.Reset(nil)
			pool.Put(zd)
			if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) {
				err = ErrBatchTooLarge
			}
		}
	default:
		return nil, fmt.Errorf("%w: %d", ErrUnsupportedCompression, int8(c))
	}
	if err == nil && len(out) > limit {
		err = ErrBatchTooLarge
	}
	switch {
	case err == nil:
		return out, nil
	case errors.Is(err, ErrBatchTooLarge):
		return nil, fmt.Errorf("%w: %s, limit %d", ErrBatchTooLarge, c, limit)
	default:
		return nil, fmt.Errorf("%w: %s: %w", ErrCorruptBatch, c, err)
	}
}

// readLimited reads r to EOF into a new buffer, growing it as data arrives
// and failing with ErrBatchTooLarge past limit bytes.
func readLimited(r io.Reader, srcLen, limit int) ([]byte, error) {
	// Records compress a few times over; start near the likely size.
	buf := make([]byte, 0, min(max(4*srcLen, 512), limit+1))
	for {
		if len(buf) == cap(buf) {
			if len(buf) > limit {
				return nil, ErrBatchTooLarge
			}
			next := make([]byte, len(buf), min(2*cap(buf), limit+1))
			copy(next, buf)
			buf = next
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			if len(buf) > limit {
				return nil, ErrBatchTooLarge
			}
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// decodeSnappy appends the raw snappy block src, decoded, to dst, checking
// the length it claims against limit before anything is allocated.
func decodeSnappy(dst, src []byte, limit int) ([]byte, error) {
	n, err := s2.DecodedLen(src)
	if err != nil {
		return nil, err
	}
	if n > limit-len(dst) {
		return nil, ErrBatchTooLarge
	}
	if cap(dst)-len(dst) < n {
		next := make([]byte, len(dst), len(dst)+n)
		copy(next, dst)
		dst = next
	}
	// s2 decodes in place when given exactly the room for n bytes.
	if _, err := s2.Decode(dst[len(dst):len(dst)+n], src); err != nil {
		return nil, err
	}
	return dst[:len(dst)+n], nil
}

var errXerialFraming = errors.New("malformed xerial snappy framing")

// decodeXerial decodes xerial framed snappy blocks (after the header). The
// block headers are walked first so the output is allocated once, bounded
// by limit.
func decodeXerial(src []byte, limit int) ([]byte, error) {
	total := 0
	for rem := src; len(rem) > 0; {
		if len(rem) < 4 {
			return nil, errXerialFraming
		}
		size := binary.BigEndian.Uint32(rem)
		rem = rem[4:]
		if uint64(size) > uint64(len(rem)) {
			return nil, errXerialFraming
		}
		n, err := s2.DecodedLen(rem[:size])
		if err != nil {
			return nil, err
		}
		if total += n; total > limit {
			return nil, ErrBatchTooLarge
		}
		rem = rem[size:]
	}
	out := make([]byte, 0, total)
	for len(src) > 0 {
		size := binary.BigEndian.Uint32(src)
		var err error
		if out, err = decodeSnappy(out, src[4:4+size], limit); err != nil {
			return nil, err
		}
		src = src[4+size:]
	}
	return out, nil
}

// zstdEncoder is shared: EncodeAll is safe for concurrent use.
var zstdEncoder = sync.OnceValues(func() (*zstd.Encoder, error) {
	return zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithZeroFrames(true))
})

// compress appends src compressed with c to dst. Snappy is written raw, as
// franz-go, librdkafka and sarama write it; the Java framing is read but
// not written.
func compress(dst, src []byte, c Codec) ([]byte, error) {
	switch c {
	case CodecNone:
		return append(dst, src...), nil
	case CodecGzip:
		w := bytes.NewBuffer(dst)
		gz := gzip.NewWriter(w)
		if _, err := gz.Write(src); err != nil {
			return nil, err
		}
		if err := gz.Close(); err != nil {
			return nil, err
		}
		return w.Bytes(), nil
	case CodecSnappy:
		return append(dst, s2.EncodeSnappy(nil, src)...), nil
	case CodecLZ4:
		w := bytes.NewBuffer(dst)
		lz := lz4.NewWriter(w)
		if _, err := lz.Write(src); err != nil {
			return nil, err
		}
		if err := lz.Close(); err != nil {
			return nil, err
		}
		return w.Bytes(), nil
	case CodecZstd:
		enc, err := zstdEncoder()
		if err != nil {
			return nil, err
		}
		return enc.EncodeAll(src, dst), nil
	}
	return nil, fmt.Errorf("%w: %d", ErrUnsupportedCompression, int8(c))
}
