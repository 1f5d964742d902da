package protocol

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Record batch v2 layout (KIP-98): the fixed header, then the records.
//
//	baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 |
//	magic int8 | crc uint32 | attributes int16 | lastOffsetDelta int32 |
//	firstTimestamp int64 | maxTimestamp int64 | producerId int64 |
//	producerEpoch int16 | baseSequence int32 | numRecords int32 | records
//
// batchLength counts everything after itself; the CRC-32C covers everything
// from attributes to the end.
const (
	batchHeaderLen     = BatchHeaderLen
	batchLenOffset     = 8
	magicOffset        = 16
	crcOffset          = 17
	attrsOffset        = 21
	maxTimestampOffset = 35
	batchLenExtra      = 12 // baseOffset and batchLength, not counted in batchLength
	minBatchLength     = batchHeaderLen - batchLenExtra
	minRecordLength    = 7 // length, attributes, timestamp, offset, key, value, header count: a byte each
)

// Attribute bits.
const (
	attrCompression   = 0x07
	attrTimestampType = 0x08
	attrTransactional = 0x10
	attrControl       = 0x20
)

// TimestampType values for AppendBatch and Batch.TimestampType.
const (
	TimestampCreateTime    int8 = 0
	TimestampLogAppendTime int8 = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header is a record header. A nil Value is a null value.
type Header struct {
	Key   string
	Value []byte
}

// Record is one record of a batch. For Key and Value, nil is null and a
// non-nil empty slice is empty.
type Record struct {
	OffsetDelta int32
	// Timestamp is absolute, in milliseconds: the batch's FirstTimestamp
	// plus the record's delta, or the batch's MaxTimestamp for a
	// LogAppendTime batch, as Kafka's own reader does.
	Timestamp int64
	Key       []byte
	Value     []byte
	Headers   []Header
}

// Batch is a decoded magic 2 record batch.
type Batch struct {
	BaseOffset           int64
	PartitionLeaderEpoch int32
	Attributes           int16
	LastOffsetDelta      int32
	FirstTimestamp       int64
	MaxTimestamp         int64
	ProducerID           int64
	ProducerEpoch        int16
	BaseSequence         int32
	NumRecords           int32
	Records              []Record
	// Decompressed is the size of the records once decompressed, which they alias: memory beyond
	// the bytes received; 0 for an uncompressed batch.
	Decompressed int
	// Held is the memory the decoded batch takes beyond the bytes received: Decompressed, plus its
	// Record structs and their headers, which a batch of many tiny records makes several times its
	// size (a Record takes 88 bytes, a record on the wire as few as 7).
	Held int
}

// recordMemory and headerMemory are what a decoded record and header take in memory.
const (
	recordMemory = int(unsafe.Sizeof(Record{}))
	headerMemory = int(unsafe.Sizeof(Header{}))
)

// Compression returns the batch's compression codec.
func (b *Batch) Compression() Codec { return Codec(b.Attributes & attrCompression) }

// Transactional reports whether the batch is part of a transaction.
func (b *Batch) Transactional() bool { return b.Attributes&attrTransactional != 0 }

// Control reports whether the batch holds control records (transaction
// markers) rather than data.
func (b *Batch) Control() bool { return b.Attributes&attrControl != 0 }

// TimestampType returns TimestampCreateTime (0) or TimestampLogAppendTime (1).
func (b *Batch) TimestampType() int8 {
	if b.Attributes&attrTimestampType != 0 {
		return TimestampLogAppendTime
	}
	return TimestampCreateTime
}

// DecodeBatches decodes every record batch in data, the Records bytes of one
// Produce partition. Each batch must be whole, magic 2, match its CRC-32C,
// take (with the batches before it) at most maxDecompressed bytes of memory
// beyond data once decoded (DefaultMaxFrameBytes when maxDecompressed <= 0):
// their decompressed records, and the Record and Header structs (Batch.Held),
// hold exactly NumRecords well-formed records with increasing offset deltas,
// and end with the record at LastOffsetDelta.
// Empty data returns no batches and no error.
//
// Errors wrap ErrCorruptBatch, ErrBadCRC, ErrUnsupportedMagic,
// ErrUnsupportedCompression or ErrBatchTooLarge. No length field is trusted
// before it is checked against the bytes that back it, and records and headers
// are charged to the limit before they are allocated, so memory stays within
// len(data) + maxDecompressed plus a header slice's growth.
//
// Records alias data (uncompressed batches) or their batch's decompressed
// buffer; header keys are copied. Kafka accepts one batch per partition in
// a Produce request; enforcing that is the caller's business.
func DecodeBatches(data []byte, maxDecompressed int) ([]Batch, error) {
	return DecodeBatchesInto(data, maxDecompressed, nil)
}

// DecodeBatchesInto is DecodeBatches with the records decoded into slab's
// capacity while it has room (what it held is overwritten), so a caller that
// recycles its slabs allocates no records per request. The batches' records
// alias slab until the caller reuses it.
func DecodeBatchesInto(data []byte, maxDecompressed int, slab []Record) ([]Batch, error) {
	slab = slab[:0]
	if maxDecompressed <= 0 {
		maxDecompressed = DefaultMaxFrameBytes
	}
	var batches []Batch
	left := maxDecompressed // shared: every decoded batch is held until the last is decoded
	for len(data) > 0 {
		if len(data) <= magicOffset {
			return nil, fmt.Errorf("%w: %d trailing bytes", ErrCorruptBatch, len(data))
		}
		if magic := int8(data[magicOffset]); magic != 2 {
			return nil, fmt.Errorf("%w: %d", ErrUnsupportedMagic, magic)
		}
		length := int32(binary.BigEndian.Uint32(data[batchLenOffset:]))
		if length < minBatchLength || int64(length) > int64(len(data)-batchLenExtra) {
			return nil, fmt.Errorf("%w: batch length %d, %d bytes left", ErrCorruptBatch, length, len(data)-batchLenExtra)
		}
		end := batchLenExtra + int(length)
		if batches == nil {
			batches = make([]Batch, 0, 1) // Produce sends one batch per partition
		}
		b, err := decodeBatch(data[:end], left, &slab)
		if err != nil {
			return nil, err
		}
		left -= b.Held
		batches = append(batches, b)
		data = data[end:]
	}
	return batches, nil
}

// PeekBatch reads the first batch's base offset and attributes from data, the Records bytes of one
// Produce partition, without reading its records or checking its CRC: what a broker checks before
// them. The Batch returned has BaseOffset and Attributes set and nothing else; ok is false unless data
// begins with a whole magic 2 batch (DecodeBatches then says what is wrong with it).
func PeekBatch(data []byte) (b Batch, ok bool) {
	if len(data) < batchHeaderLen || int8(data[magicOffset]) != 2 {
		return Batch{}, false
	}
	if length := int32(binary.BigEndian.Uint32(data[batchLenOffset:])); length < minBatchLength ||
		int64(length) > int64(len(data)-batchLenExtra) {
		return Batch{}, false
	}
	b.BaseOffset = int64(binary.BigEndian.Uint64(data))
	b.Attributes = int16(binary.BigEndian.Uint16(data[attrsOffset:]))
	return b, true
}

// NextBatch reads the batch at the start of data as Kafka's batch iterator does
// (ByteBufferLogInputStream.nextBatch), from its length and magic alone: size is the whole batch's
// bytes, its length plus the 12 bytes before it, or 0 when data does not hold one (fewer bytes than
// the length and the magic take, or than the length counts: the iteration ends there, and a broker
// ignores the bytes). corrupt is set instead when the length is below a magic 0 message's overhead or
// the magic is not one Kafka knows (0-2), where the iterator throws CorruptRecordException; the length
// is checked as soon as it is there, the magic before the bytes the length counts. magic is the whole
// batch's.
func NextBatch(data []byte) (size int, magic int8, corrupt bool) {
	if len(data) < batchLenExtra {
		return 0, 0, false
	}
	length := int32(binary.BigEndian.Uint32(data[batchLenOffset:]))
	if length < legacyMessageOverhead {
		return 0, 0, true
	}
	if len(data) <= magicOffset {
		return 0, 0, false
	}
	if magic = int8(data[magicOffset]); magic < 0 || magic > 2 {
		return 0, 0, true
	}
	if int64(length) > int64(len(data)-batchLenExtra) {
		return 0, 0, false
	}
	return batchLenExtra + int(length), magic, false
}

// TransactionalBatch reports whether batch, a whole batch as NextBatch sizes it, is of magic 2 and
// marked transactional. Its attributes alone are read, whatever its length: a batch that declares a
// length below a magic 2 header's still holds them (NextBatch's least is 26 bytes), and a broker reads
// them before anything else of the request.
func TransactionalBatch(batch []byte) bool {
	attrs, ok := BatchAttributes(batch)
	return ok && attrs&attrTransactional != 0
}

// BatchAttributes reads the attributes of batch, a whole batch as NextBatch sizes it, when it is of
// magic 2 (ok), whatever its length, as a broker reads them before anything else of the batch.
func BatchAttributes(batch []byte) (attrs int16, ok bool) {
	if len(batch) < attrsOffset+2 || int8(batch[magicOffset]) != 2 {
		return 0, false
	}
	return int16(binary.BigEndian.Uint16(batch[attrsOffset:])), true
}

// legacyMessageOverhead is the smallest length a batch of any magic can declare (a magic 0 message's
// CRC, magic, attributes and key and value lengths: Kafka's LegacyRecord.RECORD_OVERHEAD_V0).
const legacyMessageOverhead = 14

// decodeBatch decodes one whole batch, its records into *slab's capacity if it
// has room for them (appended); raw's length is already checked.
func decodeBatch(raw []byte, maxDecompressed int, slab *[]Record) (Batch, error) {
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(raw); err != nil {
		return Batch{}, fmt.Errorf("%w: %w", ErrCorruptBatch, err)
	}
	if crc := crc32.Checksum(raw[attrsOffset:], castagnoli); crc != uint32(rb.CRC) {
		return Batch{}, fmt.Errorf("%w: have %08x, computed %08x", ErrBadCRC, uint32(rb.CRC), crc)
	}
	b := Batch{
		BaseOffset:           rb.FirstOffset,
		PartitionLeaderEpoch: rb.PartitionLeaderEpoch,
		Attributes:           rb.Attributes,
		LastOffsetDelta:      rb.LastOffsetDelta,
		FirstTimestamp:       rb.FirstTimestamp,
		MaxTimestamp:         rb.MaxTimestamp,
		ProducerID:           rb.ProducerID,
		ProducerEpoch:        rb.ProducerEpoch,
		BaseSequence:         rb.FirstSequence,
		NumRecords:           rb.NumRecords,
	}
	recs := rb.Records
	if c := b.Compression(); c != CodecNone {
		if maxDecompressed <= 0 {
			return Batch{}, fmt.Errorf("%w: %s, nothing left of the limit", ErrBatchTooLarge, c)
		}
		var err error
		if recs, err = decompress(c, recs, maxDecompressed); err != nil {
			return Batch{}, err
		}
		b.Decompressed = len(recs)
	}
	// Bound the allocation by the bytes that must back the records.
	if b.NumRecords < 0 || int64(b.NumRecords) > int64(len(recs)/minRecordLength) {
		return Batch{}, fmt.Errorf("%w: %d records in %d bytes", ErrCorruptBatch, b.NumRecords, len(recs))
	}
	b.Held = b.Decompressed
	if b.NumRecords == 0 {
		if len(recs) != 0 {
			return Batch{}, fmt.Errorf("%w: %d bytes after the last record", ErrCorruptBatch, len(recs))
		}
		return b, nil
	}
	// The Record structs come on top of the bytes: charged before they are allocated, so a small batch
	// of many tiny records cannot take gigabytes.
	b.Held += int(b.NumRecords) * recordMemory
	if b.Held > maxDecompressed {
		return Batch{}, fmt.Errorf("%w: %d records take %d bytes, %d allowed", ErrBatchTooLarge, b.NumRecords, b.Held, maxDecompressed)
	}
	if n, have := int(b.NumRecords), len(*slab); cap(*slab)-have >= n {
		b.Records = (*slab)[have : have+n : have+n]
		clear(b.Records)
		*slab = (*slab)[:have+n]
	} else {
		b.Records = make([]Record, n)
	}
	var (
		headers     []Header // shared by the batch's records
		prevHeaders []Header
		prev        = int32(-1)
		err         error
	)
	for i := range b.Records {
		r := &b.Records[i]
		if recs, headers, err = decodeRecord(recs, r, headers, prevHeaders, &b); err != nil {
			return Batch{}, fmt.Errorf("%w: record %d: %w", ErrCorruptBatch, i, err)
		}
		if r.OffsetDelta <= prev {
			return Batch{}, fmt.Errorf("%w: record %d: offset delta %d after %d", ErrCorruptBatch, i, r.OffsetDelta, prev)
		}
		prev = r.OffsetDelta
		prevHeaders = r.Headers
		if b.Held+cap(headers)*headerMemory > maxDecompressed {
			return Batch{}, fmt.Errorf("%w: the headers of %d records take %d bytes, %d allowed", ErrBatchTooLarge, i+1, cap(headers)*headerMemory, maxDecompressed-b.Held)
		}
		if i == 0 && len(r.Headers) > 0 && headers != nil {
			// Records of a batch usually carry the same headers:
			// size the shared slice for all of them.
			want := min(len(r.Headers)*len(b.Records), len(recs)/2+len(r.Headers))
			headers = slices.Grow(headers, want-len(headers))
		}
	}
	if len(recs) != 0 {
		return Batch{}, fmt.Errorf("%w: %d bytes after the last record", ErrCorruptBatch, len(recs))
	}
	if prev != b.LastOffsetDelta {
		return Batch{}, fmt.Errorf("%w: last offset delta %d, last record at %d", ErrCorruptBatch, b.LastOffsetDelta, prev)
	}
	b.Held += cap(headers) * headerMemory
	return b, nil
}

type recordError string

func (e recordError) Error() string { return string(e) }

const (
	errRecordLength = recordError("bad record length")
	errRecordField  = recordError("bad record field")
	errHeaderCount  = recordError("bad header count")
)

// decodeRecord reads the record at the start of src into r and returns the
// rest of src. r's headers are appended to headers, which is returned; r
// keeps a capacity-limited sub-slice, still valid if headers later moves.
// A header key equal to the key at the same place in prevHeaders (the
// previous record's) reuses that string instead of allocating a copy.
func decodeRecord(src []byte, r *Record, headers, prevHeaders []Header, b *Batch) ([]byte, []Header, error) {
	length, n := kbin.Varint(src)
	if n <= 0 || length < minRecordLength-1 || int64(length) > int64(len(src)-n) {
		return nil, headers, errRecordLength
	}
	body := src[n : n+int(length)]
	rest := src[n+int(length):]

	body = body[1:] // attributes: unused
	tsDelta, n := kbin.Varlong(body)
	if n <= 0 {
		return nil, headers, errRecordField
	}
	body = body[n:]
	if b.Attributes&attrTimestampType != 0 {
		r.Timestamp = b.MaxTimestamp
	} else {
		r.Timestamp = b.FirstTimestamp + tsDelta
	}
	if r.OffsetDelta, n = kbin.Varint(body); n <= 0 {
		return nil, headers, errRecordField
	}
	body = body[n:]
	var ok bool
	if r.Key, body, ok = nullableBytes(body); !ok {
		return nil, headers, errRecordField
	}
	if r.Value, body, ok = nullableBytes(body); !ok {
		return nil, headers, errRecordField
	}
	count, n := kbin.Varint(body)
	// A header takes at least two bytes: key length and value length.
	if n <= 0 || count < 0 || int64(count) > int64(len(body)-n)/2 {
		return nil, headers, errHeaderCount
	}
	body = body[n:]
	if count > 0 {
		start := len(headers)
		for j := range int(count) {
			var key, value []byte
			if key, body, ok = nullableBytes(body); !ok || key == nil {
				return nil, headers, errRecordField
			}
			if value, body, ok = nullableBytes(body); !ok {
				return nil, headers, errRecordField
			}
			// Copied, not aliased: strings must not change when the
			// caller reuses data.
			var k string
			if j < len(prevHeaders) && prevHeaders[j].Key == string(key) {
				k = prevHeaders[j].Key
			} else {
				k = string(key)
			}
			headers = append(headers, Header{Key: k, Value: value})
		}
		r.Headers = headers[start:len(headers):len(headers)]
	}
	if len(body) != 0 {
		return nil, headers, errRecordLength
	}
	return rest, headers, nil
}

// nullableBytes reads a varint length and that many bytes: nil for length
// -1, a non-nil capacity-limited sub-slice of src otherwise.
func nullableBytes(src []byte) (v, rest []byte, ok bool) {
	l, n := kbin.Varint(src)
	switch {
	case n <= 0 || l < -1:
		return nil, nil, false
	case l == -1:
		return nil, src[n:], true
	case int64(l) > int64(len(src)-n):
		return nil, nil, false
	}
	end := n + int(l)
	return src[n:end:end], src[end:], true
}

// AppendBatch appends one uncompressed magic 2 batch holding recs, the
// record i at offset baseOffset+i, for a Fetch response. The producer id,
// epoch, base sequence and partition leader epoch are -1; FirstTimestamp is
// the first record's timestamp and MaxTimestamp the largest. timestampType
// (TimestampCreateTime or TimestampLogAppendTime) sets the attribute bit;
// with LogAppendTime, where the records' timestamps are their append times,
// clients report MaxTimestamp for every record of the batch, so a caller
// that wants each record's own append time splits batches where it changes.
// recs' OffsetDelta fields are ignored. No records appends nothing.
//
// It writes the records in one pass and fills in the header's length, maximum
// timestamp and CRC after them; it allocates only when dst lacks the room
// (BatchHeaderLen plus each record's RecordSize: a caller that sized the
// batch gives dst that capacity). The caller keeps the batch under 2 GiB (a
// Fetch response is far smaller).
func AppendBatch(dst []byte, baseOffset int64, timestampType int8, recs []Record) []byte {
	if len(recs) == 0 {
		return dst
	}
	first, maxTS := recs[0].Timestamp, recs[0].Timestamp
	var attrs int16
	if timestampType == TimestampLogAppendTime {
		attrs |= attrTimestampType
	}
	start := len(dst)
	dst = appendBatchHeader(dst, batchHeader{
		baseOffset:           baseOffset,
		partitionLeaderEpoch: -1,
		attributes:           attrs,
		lastOffsetDelta:      int32(len(recs) - 1),
		firstTimestamp:       first,
		producerID:           -1,
		producerEpoch:        -1,
		baseSequence:         -1,
		numRecords:           int32(len(recs)),
	})
	for i := range recs {
		r := &recs[i]
		maxTS = max(maxTS, r.Timestamp)
		dst = appendRecord(dst, r, int32(i), r.Timestamp-first)
	}
	batch := dst[start:]
	binary.BigEndian.PutUint32(batch[batchLenOffset:], uint32(len(batch)-batchLenExtra))
	binary.BigEndian.PutUint64(batch[maxTimestampOffset:], uint64(maxTS))
	putCRC(batch)
	return dst
}

// AppendCompressedBatch appends b as one magic 2 batch compressed with
// codec. The header fields are written as b holds them except: the
// compression bits of Attributes come from codec, NumRecords is
// len(b.Records) and LastOffsetDelta is the last record's OffsetDelta (b's
// own when there are no records). Record timestamp deltas are taken from
// b.FirstTimestamp. Snappy is written raw, as franz-go, librdkafka and
// sarama write it. Meant for tests, benchmarks and tools: Fetch responses
// use AppendBatch.
func AppendCompressedBatch(dst []byte, b Batch, codec Codec) ([]byte, error) {
	size := 0
	for i := range b.Records {
		r := &b.Records[i]
		size += recordSize(r, r.OffsetDelta, r.Timestamp-b.FirstTimestamp)
	}
	raw := make([]byte, 0, size)
	for i := range b.Records {
		r := &b.Records[i]
		raw = appendRecord(raw, r, r.OffsetDelta, r.Timestamp-b.FirstTimestamp)
	}
	body := raw
	if codec != CodecNone {
		var err error
		if body, err = compress(nil, raw, codec); err != nil {
			return dst, err
		}
	}
	last := b.LastOffsetDelta
	if len(b.Records) > 0 {
		last = b.Records[len(b.Records)-1].OffsetDelta
	}
	start := len(dst)
	dst = appendBatchHeader(dst, batchHeader{
		baseOffset:           b.BaseOffset,
		length:               int32(batchHeaderLen - batchLenExtra + len(body)),
		partitionLeaderEpoch: b.PartitionLeaderEpoch,
		attributes:           b.Attributes&^attrCompression | int16(codec)&attrCompression,
		lastOffsetDelta:      last,
		firstTimestamp:       b.FirstTimestamp,
		maxTimestamp:         b.MaxTimestamp,
		producerID:           b.ProducerID,
		producerEpoch:        b.ProducerEpoch,
		baseSequence:         b.BaseSequence,
		numRecords:           int32(len(b.Records)),
	})
	dst = append(dst, body...)
	putCRC(dst[start:])
	return dst, nil
}

type batchHeader struct {
	baseOffset           int64
	length               int32
	partitionLeaderEpoch int32
	attributes           int16
	lastOffsetDelta      int32
	firstTimestamp       int64
	maxTimestamp         int64
	producerID           int64
	producerEpoch        int16
	baseSequence         int32
	numRecords           int32
}

// appendBatchHeader appends the 61 byte header with a zero CRC, for putCRC
// to fill in once the records follow.
func appendBatchHeader(dst []byte, h batchHeader) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(h.baseOffset))
	dst = binary.BigEndian.AppendUint32(dst, uint32(h.length))
	dst = binary.BigEndian.AppendUint32(dst, uint32(h.partitionLeaderEpoch))
	dst = append(dst, 2, 0, 0, 0, 0) // magic, crc
	dst = binary.BigEndian.AppendUint16(dst, uint16(h.attributes))
	dst = binary.BigEndian.AppendUint32(dst, uint32(h.lastOffsetDelta))
	dst = binary.BigEndian.AppendUint64(dst, uint64(h.firstTimestamp))
	dst = binary.BigEndian.AppendUint64(dst, uint64(h.maxTimestamp))
	dst = binary.BigEndian.AppendUint64(dst, uint64(h.producerID))
	dst = binary.BigEndian.AppendUint16(dst, uint16(h.producerEpoch))
	dst = binary.BigEndian.AppendUint32(dst, uint32(h.baseSequence))
	dst = binary.BigEndian.AppendUint32(dst, uint32(h.numRecords))
	return dst
}

// putCRC computes the CRC-32C of the whole batch at the start of batch.
func putCRC(batch []byte) {
	binary.BigEndian.PutUint32(batch[crcOffset:], crc32.Checksum(batch[attrsOffset:], castagnoli))
}

// recordBodySize is the size of a record after its length varint.
func recordBodySize(r *Record, offsetDelta int32, tsDelta int64) int {
	n := 1 + kbin.VarlongLen(tsDelta) + kbin.VarintLen(offsetDelta) +
		bytesSize(r.Key) + bytesSize(r.Value) + kbin.VarintLen(int32(len(r.Headers)))
	for i := range r.Headers {
		h := &r.Headers[i]
		n += kbin.VarintLen(int32(len(h.Key))) + len(h.Key) + bytesSize(h.Value)
	}
	return n
}

// BatchHeaderLen is the size of a record batch before its records.
const BatchHeaderLen = 61

// RecordSize is the size of r encoded as the record offsetDelta and tsDelta into its batch: what
// AppendBatch writes for it, length varint included. A batch AppendBatch writes is BatchHeaderLen
// plus its records' sizes, so a response can be sized before it is encoded.
func RecordSize(r *Record, offsetDelta int32, tsDelta int64) int {
	return recordSize(r, offsetDelta, tsDelta)
}

// recordSize is the size of a record with its length varint.
func recordSize(r *Record, offsetDelta int32, tsDelta int64) int {
	n := recordBodySize(r, offsetDelta, tsDelta)
	return kbin.VarintLen(int32(n)) + n
}

func bytesSize(b []byte) int {
	if b == nil {
		return 1 // varint -1
	}
	return kbin.VarintLen(int32(len(b))) + len(b)
}

func appendRecord(dst []byte, r *Record, offsetDelta int32, tsDelta int64) []byte {
	dst = kbin.AppendVarint(dst, int32(recordBodySize(r, offsetDelta, tsDelta)))
	dst = append(dst, 0) // attributes
	dst = kbin.AppendVarlong(dst, tsDelta)
	dst = kbin.AppendVarint(dst, offsetDelta)
	dst = appendNullableBytes(dst, r.Key)
	dst = appendNullableBytes(dst, r.Value)
	dst = kbin.AppendVarint(dst, int32(len(r.Headers)))
	for i := range r.Headers {
		h := &r.Headers[i]
		dst = kbin.AppendVarint(dst, int32(len(h.Key)))
		dst = append(dst, h.Key...)
		dst = appendNullableBytes(dst, h.Value)
	}
	return dst
}

func appendNullableBytes(dst, b []byte) []byte {
	if b == nil {
		return append(dst, 1) // varint -1
	}
	dst = kbin.AppendVarint(dst, int32(len(b)))
	return append(dst, b...)
}
