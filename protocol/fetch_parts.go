package protocol

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A fetch response is mostly its record sets, which the gateway has already encoded into buffers of
// its own; AppendResponse would copy every byte of them into the frame once more (for a response of
// 1 KB records, the largest single cost of writing it). AppendFetchParts lets kmsg encode everything
// else and leaves the large record sets where they are, for a vectored write.
//
// kmsg encodes a byte field as its length then its bytes and offers no way to encode around one, so
// each record set left out is replaced, for the encoding, by a marker: markerSecret (random per
// process, beginning with a byte no topic name may hold) and the record set's index. Fields come out
// in order, so each marker is looked for after the previous one; a client would have to learn the
// process's secret to put one anywhere in the encoding, and a marker not found where expected, or not
// behind its own length, makes the whole response fall back to AppendResponse.

// MinFetchPart is the smallest record set AppendFetchParts leaves out of the frame: below it, copying
// is cheaper than another piece for the vectored write.
const MinFetchPart = 16 << 10

// markerLen is a marker's length: markerSecret, then the record set's index (uint32).
const markerLen = 16

var markerSecret = func() (s [markerLen - 4]byte) {
	_, _ = rand.Read(s[:]) // never fails (crypto/rand)
	s[0] = 0xff            // no topic name (ASCII letters, digits, '.', '_', '-') holds it
	return s
}()

// AppendFetchParts appends resp's frame to dst as AppendResponse does, but for the record sets of
// MinFetchPart bytes or more, which it does not copy. It returns dst and the frame as pieces in
// order (appended to parts): pieces of dst and the record sets themselves. resp's version must be
// set; resp is left as it was found. With no record set that large, the frame is one piece.
func AppendFetchParts(dst []byte, parts [][]byte, correlationID int32, resp *kmsg.FetchResponse) ([]byte, [][]byte) {
	start := len(dst)
	n := 0
	for i := range resp.Topics {
		for j := range resp.Topics[i].Partitions {
			if len(resp.Topics[i].Partitions[j].RecordBatches) >= MinFetchPart {
				n++
			}
		}
	}
	if n == 0 {
		dst = AppendResponse(dst, correlationID, resp)
		return dst, append(parts, dst[start:])
	}
	// Each record set left out, in encoding order: its field, its bytes, and once the frame is encoded,
	// the frame's bytes before its length (dst[from:to]) and its real length (dst[prefixAt:prefixEnd]).
	type leftOut struct {
		field                         *[]byte
		set                           []byte
		from, to, prefixAt, prefixEnd int
	}
	out := make([]leftOut, 0, n)
	markers := make([]byte, markerLen*n) // kmsg keeps no reference to them
	for i := range resp.Topics {
		for j := range resp.Topics[i].Partitions {
			if f := &resp.Topics[i].Partitions[j].RecordBatches; len(*f) >= MinFetchPart {
				out = append(out, leftOut{field: f, set: *f})
				m := markers[(len(out)-1)*markerLen : len(out)*markerLen]
				copy(m, markerSecret[:])
				binary.BigEndian.PutUint32(m[len(markerSecret):], uint32(len(out)-1))
				*f = m
			}
		}
	}
	dst = AppendResponse(dst, correlationID, resp)
	for _, o := range out {
		*o.field = o.set
	}

	// Locate each marker behind the length kmsg gave it, and append the record set's real length.
	flexible := resp.IsFlexible()
	markerPrefix := lengthPrefix(nil, markerLen, flexible)
	end := len(dst)
	at, size := start, end-start-4
	for i := range out {
		o := &out[i]
		k := bytes.Index(dst[at:end], markers[i*markerLen:(i+1)*markerLen])
		if k < 0 || !bytes.HasSuffix(dst[at:at+k], markerPrefix) {
			dst = AppendResponse(dst[:start], correlationID, resp) // cannot happen; never send a frame unsure
			return dst, append(parts, dst[start:])
		}
		k += at
		o.from, o.to, o.prefixAt = at, k-len(markerPrefix), len(dst)
		dst = lengthPrefix(dst, len(o.set), flexible)
		o.prefixEnd = len(dst)
		size += o.prefixEnd - o.prefixAt + len(o.set) - len(markerPrefix) - markerLen
		at = k + markerLen
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(size))
	for _, o := range out {
		parts = append(parts, dst[o.from:o.to], dst[o.prefixAt:o.prefixEnd], o.set)
	}
	return dst, append(parts, dst[at:end])
}

// lengthPrefix appends the length of a record set of n bytes as the fetch response encodes it: a
// compact (uvarint, length + 1) field from v12, the first flexible version, an int32 before.
func lengthPrefix(dst []byte, n int, flexible bool) []byte {
	if flexible {
		return kbin.AppendUvarint(dst, uint32(n)+1)
	}
	return kbin.AppendInt32(dst, int32(n))
}
