package protocol

import (
	"encoding/binary"
	"fmt"
	"io"
)

// DefaultMaxFrameBytes is the frame limit used when ReadFrame is given a
// maxSize of zero or less. Kafka's socket.request.max.bytes defaults to 100 MiB.
const DefaultMaxFrameBytes = 100 << 20

// minRequestFrame is the smallest request that can be parsed: api key,
// api version and correlation id.
const minRequestFrame = 8

// frameGrowStep bounds how far ReadFrame allocates ahead of the bytes that
// have actually arrived, so a peer cannot make us allocate max bytes by
// sending a four byte size prefix and nothing else.
const frameGrowStep = 1 << 20

// ReadFrame reads one size-prefixed frame from r and returns its body. The
// body is read into buf, grown as needed, and returned as a slice of it; a
// caller loops with buf = body to reuse the memory. A size < 8 (too small
// for a request header) or above maxSize (DefaultMaxFrameBytes when maxSize <= 0)
// returns ErrFrameTooSmall or ErrFrameTooLarge and the connection must be
// closed, as it is no longer in step with the peer.
//
// A clean close before the first byte of a frame returns io.EOF; a close in
// the middle of one returns io.ErrUnexpectedEOF.
func ReadFrame(r io.Reader, buf []byte, maxSize int32) ([]byte, error) {
	if maxSize <= 0 {
		maxSize = DefaultMaxFrameBytes
	}
	// The size prefix is read into buf rather than a local array, which
	// would escape through the io.Reader call and allocate per frame.
	if cap(buf) < 4 {
		buf = make([]byte, 0, 512)
	}
	if _, err := io.ReadFull(r, buf[:4]); err != nil {
		return buf[:0], err
	}
	size := int32(binary.BigEndian.Uint32(buf[:4]))
	switch {
	case size < minRequestFrame:
		return buf[:0], fmt.Errorf("%w: %d bytes", ErrFrameTooSmall, size)
	case size > maxSize:
		return buf[:0], fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, size, maxSize)
	}
	n := int(size)
	if n <= cap(buf) {
		buf = buf[:n]
		_, err := io.ReadFull(r, buf)
		return buf, noEOF(err)
	}
	// Grow with the data: at most frameGrowStep (or the bytes already
	// read, doubling) beyond what has arrived.
	buf = buf[:0]
	for len(buf) < n {
		if len(buf) == cap(buf) {
			grow := max(len(buf), frameGrowStep)
			next := make([]byte, len(buf), min(n, len(buf)+grow))
			copy(next, buf)
			buf = next
		}
		m, err := io.ReadFull(r, buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if err != nil {
			return buf, noEOF(err)
		}
	}
	return buf, nil
}

// noEOF turns an EOF inside a frame into io.ErrUnexpectedEOF: the peer
// closed mid-frame, which is not a clean close.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
