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
	var (
		fields []*[]byte // the record set fields left out, in encoding order
		sets   [][]byte  // their record sets
	)
	for i := range resp.Topics {
		t := &resp.Topics[i]
		for j := range t.Partitions {
			if f := &t.Partitions[j].RecordBatches; len(*f) >= MinFetchPart {
				fields, sets = append(fields, f), append(sets, *f)
			}
		}
	}
	if len(sets) == 0 {
		dst = AppendResponse(dst, correlationID, resp)
		return dst, append(parts, dst[start:])
	}
	markers := make([]byte, markerLen*len(sets)) // kmsg keeps no reference to them
	for i, f := range fields {
		*f = markers[i*markerLen : (i+1)*markerLen]
		copy(*f, markerSecret[:])
		binary.BigEndian.PutUint32((*f)[len(markerSecret):], uint32(i))
	}
	dst = AppendResponse(dst, correlationID, resp)
	for i, f := range fields {
		*f = sets[i]
	}

	// Locate each marker behind the length kmsg gave it, and append the record set's real length.
	flexible := resp.IsFlexible()
	markerPrefix := lengthPrefix(nil, markerLen, flexible)
	type cut struct{ from, to, prefixAt, prefixEnd int } // dst[from:to] precedes the set; its length is dst[prefixAt:prefixEnd]
	cuts := make([]cut, len(sets))
	end := len(dst)
	at, size := start, end-start-4
	for i, set := range sets {
		k := bytes.Index(dst[at:end], markers[i*markerLen:(i+1)*markerLen])
		if k < 0 || !bytes.HasSuffix(dst[at:at+k], markerPrefix) {
			dst = AppendResponse(dst[:start], correlationID, resp) // cannot happen; never send a frame unsure
			return dst, append(parts, dst[start:])
		}
		k += at
		prefixAt := len(dst)
		dst = lengthPrefix(dst, len(set), flexible)
		cuts[i] = cut{from: at, to: k - len(markerPrefix), prefixAt: prefixAt, prefixEnd: len(dst)}
		size += len(dst) - prefixAt + len(set) - len(markerPrefix) - markerLen
		at = k + markerLen
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(size))
	for i, c := range cuts {
		parts = append(parts, dst[c.from:c.to], dst[c.prefixAt:c.prefixEnd], sets[i])
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
