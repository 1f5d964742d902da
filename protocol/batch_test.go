package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

var allCodecs = []Codec{CodecNone, CodecGzip, CodecSnappy, CodecLZ4, CodecZstd}

// testBatch is a producer-style batch: offset deltas 0..n-1, create time.
func testBatch(n, valueSize int) Batch {
	b := Batch{
		BaseOffset:           0,
		PartitionLeaderEpoch: -1,
		FirstTimestamp:       1_700_000_000_000,
		ProducerID:           4000,
		ProducerEpoch:        2,
		BaseSequence:         17,
	}
	for i := range n {
		ts := b.FirstTimestamp + int64(i*3)
		b.MaxTimestamp = max(b.MaxTimestamp, ts)
		value := bytes.Repeat([]byte{byte('a' + i%26)}, valueSize)
		b.Records = append(b.Records, Record{
			OffsetDelta: int32(i),
			Timestamp:   ts,
			Key:         fmt.Appendf(nil, "key-%d", i),
			Value:       value,
			Headers:     []Header{{Key: "trace", Value: fmt.Appendf(nil, "t%d", i)}},
		})
	}
	b.NumRecords = int32(n)
	b.LastOffsetDelta = int32(n - 1)
	return b
}

// nullEmptyRecords covers every null/empty combination of keys, values and
// header values, and a record with several headers including a repeat.
func nullEmptyRecords(first int64) []Record {
	return []Record{
		{Timestamp: first, Key: nil, Value: nil},
		{Timestamp: first + 1, Key: []byte{}, Value: []byte{}},
		{Timestamp: first - 5, Key: []byte("k"), Value: nil, Headers: []Header{{Key: "null", Value: nil}}},
		{Timestamp: first + 1<<40, Key: nil, Value: []byte("v"), Headers: []Header{{Key: "empty", Value: []byte{}}}},
		{Timestamp: first, Key: []byte("k"), Value: []byte("v"), Headers: []Header{
			{Key: "", Value: []byte("empty key")}, {Key: "a", Value: []byte("1")}, {Key: "a", Value: []byte("2")}, {Key: "n", Value: nil},
		}},
	}
}

func nullEmptyBatch() Batch {
	b := Batch{PartitionLeaderEpoch: 5, FirstTimestamp: 1000, MaxTimestamp: 1000 + 1<<40, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}
	b.Records = nullEmptyRecords(b.FirstTimestamp)
	for i := range b.Records {
		b.Records[i].OffsetDelta = int32(i)
	}
	b.NumRecords = int32(len(b.Records))
	b.LastOffsetDelta = b.NumRecords - 1
	return b
}

// equalBatch compares batches, telling nil from empty in every byte field.
func equalBatch(t *testing.T, got, want Batch) {
	t.Helper()
	gotRecs, wantRecs := got.Records, want.Records
	got.Records, want.Records = nil, nil
	if c := got.Compression(); c == CodecNone && got.Decompressed != 0 || c != CodecNone && got.NumRecords > 0 && got.Decompressed == 0 {
		t.Fatalf("%v batch of %d records with %d bytes decompressed", c, got.NumRecords, got.Decompressed)
	}
	if got.Held < got.Decompressed+len(gotRecs)*recordMemory {
		t.Fatalf("held %d for %d records and %d bytes decompressed", got.Held, len(gotRecs), got.Decompressed)
	}
	got.Decompressed, want.Decompressed = 0, 0 // want may be a batch built by hand
	got.Held, want.Held = 0, 0
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("batch header\n got %+v\nwant %+v", got, want)
	}
	if len(gotRecs) != len(wantRecs) {
		t.Fatalf("%d records, want %d", len(gotRecs), len(wantRecs))
	}
	for i := range wantRecs {
		g, w := gotRecs[i], wantRecs[i]
		if g.OffsetDelta != w.OffsetDelta || g.Timestamp != w.Timestamp ||
			!sameBytes(g.Key, w.Key) || !sameBytes(g.Value, w.Value) || len(g.Headers) != len(w.Headers) {
			t.Fatalf("record %d\n got %+v\nwant %+v", i, g, w)
		}
		for j := range w.Headers {
			if g.Headers[j].Key != w.Headers[j].Key || !sameBytes(g.Headers[j].Value, w.Headers[j].Value) {
				t.Fatalf("record %d header %d: got %+v, want %+v", i, j, g.Headers[j], w.Headers[j])
			}
		}
	}
}

func sameBytes(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }

func mustCompressed(t testing.TB, b Batch, c Codec) []byte {
	t.Helper()
	out, err := AppendCompressedBatch(nil, b, c)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRoundTripCodecs(t *testing.T) {
	batches := map[string]Batch{
		"100 records":      testBatch(100, 100),
		"null and empty":   nullEmptyBatch(),
		"one large record": testBatch(1, 200<<10), // over one 64 KiB lz4 block and one 32 KiB xerial block
		"transactional":    func() Batch { b := testBatch(3, 10); b.Attributes = attrTransactional; return b }(),
		"no records":       {FirstTimestamp: 1, MaxTimestamp: 1, LastOffsetDelta: -1},
		"offset delta gaps": func() Batch {
			b := testBatch(3, 10)
			b.Records[1].OffsetDelta, b.Records[2].OffsetDelta = 4, 9
			b.LastOffsetDelta = 9
			return b
		}(),
	}
	for name, want := range batches {
		for _, c := range allCodecs {
			t.Run(name+"/"+c.String(), func(t *testing.T) {
				raw := mustCompressed(t, want, c)
				got, err := DecodeBatches(raw, 0)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != 1 {
					t.Fatalf("%d batches", len(got))
				}
				want := want
				want.Attributes |= int16(c)
				equalBatch(t, got[0], want)
				if got[0].Compression() != c {
					t.Fatalf("Compression() = %v", got[0].Compression())
				}
			})
		}
	}
}

// The Java producer frames snappy with snappy-java's xerial format.
func TestDecodeXerialSnappy(t *testing.T) {
	want := testBatch(300, 200) // ~70 KiB: three xerial blocks of 32 KiB
	plain := mustCompressed(t, want, CodecNone)
	raw := bytes.Clone(plain[:batchHeaderLen])
	raw = appendXerial(raw, plain[batchHeaderLen:], 32<<10)
	binary.BigEndian.PutUint32(raw[batchLenOffset:], uint32(len(raw)-batchLenExtra))
	binary.BigEndian.PutUint16(raw[attrsOffset:], uint16(CodecSnappy))
	putCRC(raw)
	got, err := DecodeBatches(raw, 0)
	if err != nil {
		t.Fatal(err)
	}
	want.Attributes = int16(CodecSnappy)
	equalBatch(t, got[0], want)

	// A block length past the end, and a limit below the total.
	bad := bytes.Clone(raw)
	binary.BigEndian.PutUint32(bad[batchHeaderLen+xerialHeaderLen:], 1<<30)
	putCRC(bad)
	if _, err := DecodeBatches(bad, 0); !errors.Is(err, ErrCorruptBatch) {
		t.Fatalf("bad block length: err = %v", err)
	}
	if _, err := DecodeBatches(raw, 40<<10); !errors.Is(err, ErrBatchTooLarge) {
		t.Fatalf("over limit: err = %v", err)
	}
}

// appendXerial appends src as xerial framed snappy in blocks of blockSize
// bytes, the way snappy-java's SnappyOutputStream writes it.
func appendXerial(dst, src []byte, blockSize int) []byte {
	dst = append(dst, xerialMagic...)
	dst = binary.BigEndian.AppendUint32(dst, 1) // version
	dst = binary.BigEndian.AppendUint32(dst, 1) // minimum compatible version
	for len(src) > 0 {
		n := min(blockSize, len(src))
		block, _ := compress(nil, src[:n], CodecSnappy)
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(block)))
		dst = append(dst, block...)
		src = src[n:]
	}
	return dst
}

func TestDecodeBatchesMultiple(t *testing.T) {
	var raw []byte
	var want []Batch
	for i, c := range allCodecs {
		b := testBatch(i+1, 20)
		b.BaseOffset = int64(100 * i)
		raw = mustCompressedAppend(t, raw, b, c)
		b.Attributes = int16(c)
		want = append(want, b)
	}
	got, err := DecodeBatches(raw, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d batches, want %d", len(got), len(want))
	}
	for i := range want {
		equalBatch(t, got[i], want[i])
	}
	if got, err := DecodeBatches(nil, 0); got != nil || err != nil {
		t.Fatalf("empty input: %v, %v", got, err)
	}
}

func mustCompressedAppend(t *testing.T, dst []byte, b Batch, c Codec) []byte {
	t.Helper()
	out, err := AppendCompressedBatch(dst, b, c)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDecodeBatchesTruncated(t *testing.T) {
	for _, c := range allCodecs {
		raw := mustCompressed(t, testBatch(5, 30), c)
		for n := 1; n < len(raw); n++ { // 0 bytes is no batches, not an error
			if _, err := DecodeBatches(raw[:n], 0); err == nil {
				t.Fatalf("%v: %d of %d bytes decoded without error", c, n, len(raw))
			}
		}
	}
}

func TestDecodeBatchesErrors(t *testing.T) {
	// edit changes a valid uncompressed 3 record batch; fixCRC then
	// recomputes the CRC so that the edit itself is what is caught.
	tests := []struct {
		name    string
		edit    func(raw []byte) []byte
		fixCRC  bool
		limit   int
		wantErr error
	}{
		{"crc flipped", func(r []byte) []byte { r[crcOffset] ^= 1; return r }, false, 0, ErrBadCRC},
		{"record byte flipped", func(r []byte) []byte { r[len(r)-1] ^= 0xff; return r }, false, 0, ErrBadCRC},
		{"attributes flipped", func(r []byte) []byte { r[attrsOffset+1] ^= 0x10; return r }, false, 0, ErrBadCRC},
		{"magic 0", func(r []byte) []byte { r[magicOffset] = 0; return r }, false, 0, ErrUnsupportedMagic},
		{"magic 1", func(r []byte) []byte { r[magicOffset] = 1; return r }, false, 0, ErrUnsupportedMagic},
		{"magic 3", func(r []byte) []byte { r[magicOffset] = 3; return r }, false, 0, ErrUnsupportedMagic},
		{"codec 5", func(r []byte) []byte { r[attrsOffset+1] |= 5; return r }, true, 0, ErrUnsupportedCompression},
		{"codec 7", func(r []byte) []byte { r[attrsOffset+1] |= 7; return r }, true, 0, ErrUnsupportedCompression},
		{"length too small", func(r []byte) []byte { putU32(r, batchLenOffset, 48); return r }, false, 0, ErrCorruptBatch},
		{"length negative", func(r []byte) []byte { putU32(r, batchLenOffset, 0xffffffff); return r }, false, 0, ErrCorruptBatch},
		{"length past end", func(r []byte) []byte { putU32(r, batchLenOffset, uint32(len(r))); return r }, false, 0, ErrCorruptBatch},
		{"trailing garbage", func(r []byte) []byte { return append(r, 1, 2, 3) }, false, 0, ErrCorruptBatch},
		{"more records claimed", func(r []byte) []byte { putU32(r, 57, 4); return r }, true, 0, ErrCorruptBatch},
		{"fewer records claimed", func(r []byte) []byte { putU32(r, 57, 2); return r }, true, 0, ErrCorruptBatch},
		{"negative records", func(r []byte) []byte { putU32(r, 57, 0xffffffff); return r }, true, 0, ErrCorruptBatch},
		{"huge record count", func(r []byte) []byte { putU32(r, 57, 1<<30); return r }, true, 0, ErrCorruptBatch},
		{"last offset delta high", func(r []byte) []byte { putU32(r, 23, 3); return r }, true, 0, ErrCorruptBatch},
		{"last offset delta low", func(r []byte) []byte { putU32(r, 23, 1); return r }, true, 0, ErrCorruptBatch},
		{"record length longer", func(r []byte) []byte { r[batchHeaderLen] += 2; return r }, true, 0, ErrCorruptBatch},
		{"record length shorter", func(r []byte) []byte { r[batchHeaderLen] -= 2; return r }, true, 0, ErrCorruptBatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := tt.edit(mustCompressed(t, testBatch(3, 10), CodecNone))
			if tt.fixCRC {
				putCRC(raw)
			}
			got, err := DecodeBatches(raw, tt.limit)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if got != nil {
				t.Fatalf("batches returned with error: %v", got)
			}
		})
	}
}

func putU32(b []byte, at int, v uint32) { binary.BigEndian.PutUint32(b[at:], v) }

func TestDecodeOffsetDeltaOrder(t *testing.T) {
	for _, deltas := range [][]int32{{0, 0, 1}, {1, 0, 2}, {-1, 0, 1}} {
		b := testBatch(3, 5)
		for i := range b.Records {
			b.Records[i].OffsetDelta = deltas[i]
		}
		if _, err := DecodeBatches(mustCompressed(t, b, CodecNone), 0); !errors.Is(err, ErrCorruptBatch) {
			t.Fatalf("deltas %v: err = %v", deltas, err)
		}
	}
}

func TestDecodeLimit(t *testing.T) {
	b := testBatch(100, 100) // about 12 KiB of records
	for _, c := range allCodecs[1:] {
		raw := mustCompressed(t, b, c)
		if _, err := DecodeBatches(raw, 1<<10); !errors.Is(err, ErrBatchTooLarge) {
			t.Fatalf("%v: err = %v, want ErrBatchTooLarge", c, err)
		}
		if _, err := DecodeBatches(raw, 1<<20); err != nil {
			t.Fatalf("%v: %v", c, err)
		}
	}
}

func TestDecodeCorruptCompressed(t *testing.T) {
	for _, c := range allCodecs[1:] {
		raw := mustCompressed(t, testBatch(20, 50), c)
		// Garble the middle of the compressed data, keeping the CRC right.
		mid := batchHeaderLen + (len(raw)-batchHeaderLen)/2
		for i := mid; i < mid+8 && i < len(raw); i++ {
			raw[i] ^= 0x5a
		}
		putCRC(raw)
		if _, err := DecodeBatches(raw, 0); err == nil {
			t.Fatalf("%v: garbled data decoded without error", c)
		}
	}
}

func TestDecodeLogAppendTime(t *testing.T) {
	b := testBatch(3, 5)
	b.Attributes = attrTimestampType
	b.MaxTimestamp = 1_800_000_000_000
	got, err := DecodeBatches(mustCompressed(t, b, CodecNone), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].TimestampType() != TimestampLogAppendTime {
		t.Fatalf("TimestampType() = %d", got[0].TimestampType())
	}
	for i, r := range got[0].Records {
		if r.Timestamp != b.MaxTimestamp {
			t.Fatalf("record %d timestamp %d, want the batch's log append time %d", i, r.Timestamp, b.MaxTimestamp)
		}
	}
}

func TestBatchAttributes(t *testing.T) {
	tests := []struct {
		attrs        int16
		codec        Codec
		txn, control bool
		tsType       int8
	}{
		{0, CodecNone, false, false, 0},
		{0x04, CodecZstd, false, false, 0},
		{0x0b, CodecLZ4, false, false, 1},
		{0x31, CodecGzip, true, true, 0},
		{0x7a, CodecSnappy, true, true, 1},
	}
	for _, tt := range tests {
		b := Batch{Attributes: tt.attrs}
		if b.Compression() != tt.codec || b.Transactional() != tt.txn || b.Control() != tt.control || b.TimestampType() != tt.tsType {
			t.Fatalf("attributes %#x: %v %v %v %d", tt.attrs, b.Compression(), b.Transactional(), b.Control(), b.TimestampType())
		}
	}
}

func TestAppendBatch(t *testing.T) {
	recs := nullEmptyRecords(5000)
	for _, tsType := range []int8{TimestampCreateTime, TimestampLogAppendTime} {
		raw := AppendBatch([]byte("prefix"), 1234, tsType, recs)[len("prefix"):]
		got, err := DecodeBatches(raw, 0)
		if err != nil {
			t.Fatal(err)
		}
		want := Batch{
			BaseOffset: 1234, PartitionLeaderEpoch: -1, LastOffsetDelta: int32(len(recs) - 1),
			FirstTimestamp: 5000, MaxTimestamp: 5000 + 1<<40,
			ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, NumRecords: int32(len(recs)),
		}
		for i, r := range recs {
			r.OffsetDelta = int32(i)
			if tsType == TimestampLogAppendTime {
				want.Attributes = attrTimestampType
				r.Timestamp = want.MaxTimestamp
			}
			want.Records = append(want.Records, r)
		}
		equalBatch(t, got[0], want)
	}
	if out := AppendBatch([]byte{1}, 0, 0, nil); !bytes.Equal(out, []byte{1}) {
		t.Fatalf("no records appended %x", out)
	}
}

// AppendBatch must produce what kmsg, an independent encoder, produces.
func TestAppendBatchMatchesKmsg(t *testing.T) {
	recs := nullEmptyRecords(7000)
	var records []byte
	for i, r := range recs {
		kr := kmsg.Record{TimestampDelta64: r.Timestamp - 7000, OffsetDelta: int32(i), Key: r.Key, Value: r.Value}
		for _, h := range r.Headers {
			kr.Headers = append(kr.Headers, kmsg.Header{Key: h.Key, Value: h.Value})
		}
		kr.Length = int32(len(kr.AppendTo(nil)) - 1) // body size: all but the 1 byte length 0
		records = kr.AppendTo(records)
	}
	rb := kmsg.RecordBatch{
		FirstOffset: 99, Length: int32(49 + len(records)), PartitionLeaderEpoch: -1, Magic: 2,
		Attributes: attrTimestampType, LastOffsetDelta: int32(len(recs) - 1),
		FirstTimestamp: 7000, MaxTimestamp: 7000 + 1<<40, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1,
		NumRecords: int32(len(recs)), Records: records,
	}
	want := rb.AppendTo(nil)
	rb.CRC = int32(crc32.Checksum(want[attrsOffset:], castagnoli))
	want = rb.AppendTo(nil)
	if got := AppendBatch(nil, 99, TimestampLogAppendTime, recs); !bytes.Equal(got, want) {
		t.Fatalf("AppendBatch\n got %x\nwant %x", got, want)
	}
}

func TestAppendBatchNoAllocs(t *testing.T) {
	recs := testBatch(100, 100).Records
	dst := AppendBatch(nil, 0, 0, recs)
	allocs := testing.AllocsPerRun(50, func() {
		dst = AppendBatch(dst[:0], 0, 0, recs)
	})
	if allocs != 0 {
		t.Fatalf("AppendBatch allocated %v times with a large enough dst", allocs)
	}
}

// Decoded records alias the input instead of copying it.
func TestDecodeAliasesInput(t *testing.T) {
	raw := mustCompressed(t, testBatch(2, 10), CodecNone)
	got, err := DecodeBatches(raw, 0)
	if err != nil {
		t.Fatal(err)
	}
	v := got[0].Records[1].Value
	if cap(v) != len(v) {
		t.Fatalf("value capacity %d beyond its length %d", cap(v), len(v))
	}
	start := bytes.Index(raw, v)
	if start < 0 || &raw[start] != &v[0] {
		t.Fatal("value does not alias the input")
	}
}

// The decompression limit is shared by a record set's batches, since all of them are held until the
// last is decoded: 20 zstd batches of 64 KiB of zeros each fit a 2 MiB limit, not a 1 MiB one.
func TestDecodeBatchesLimitShared(t *testing.T) {
	var raw []byte
	for i := range 20 {
		b := Batch{BaseOffset: int64(i), NumRecords: 1, Records: []Record{{Value: make([]byte, 64<<10)}}}
		raw = mustCompressedAppend(t, raw, b, CodecZstd)
	}
	if len(raw) > 20<<10 {
		t.Fatalf("%d bytes compressed", len(raw))
	}
	if _, err := DecodeBatches(raw, 1<<20); !errors.Is(err, ErrBatchTooLarge) {
		t.Fatalf("1 MiB limit: err = %v, want ErrBatchTooLarge", err)
	}
	got, err := DecodeBatches(raw, 2<<20)
	if err != nil || len(got) != 20 {
		t.Fatalf("2 MiB limit: %d batches, err %v", len(got), err)
	}
}

// A recycled slab takes the records while it has room, left over from an earlier decode (headers
// included) or not; records that do not fit get their own.
func TestDecodeBatchesIntoSlab(t *testing.T) {
	slab := make([]Record, 0, 40)
	first, err := DecodeBatchesInto(mustCompressed(t, testBatch(40, 10), CodecNone), 0, slab)
	if err != nil {
		t.Fatal(err)
	}
	if &first[0].Records[0] != &slab[:1][0] {
		t.Fatal("40 records were not decoded into a slab of 40")
	}
	var raw []byte
	want := []Batch{nullEmptyBatch(), testBatch(3, 5)}
	raw = mustCompressedAppend(t, raw, want[0], CodecNone)
	raw = mustCompressedAppend(t, raw, want[1], CodecNone)
	got, err := DecodeBatchesInto(raw, 0, slab)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		equalBatch(t, got[i], want[i])
	}
	if &got[1].Records[0] != &slab[:6][5] {
		t.Error("the second batch's records were not decoded after the first's in the slab")
	}
	got, err = DecodeBatchesInto(mustCompressed(t, testBatch(41, 1), CodecNone), 0, slab)
	if err != nil {
		t.Fatal(err)
	}
	equalBatch(t, got[0], testBatch(41, 1))
	if &got[0].Records[0] == &slab[:1][0] {
		t.Error("41 records were decoded into a slab of 40")
	}
}

// TestDecodeChargesRecordsAndHeaders: the Record and Header structs a batch decodes to count against
// the limit with its decompressed bytes, before they are allocated: an uncompressed batch of many
// empty headers (two bytes each on the wire, 40 in memory) or of many tiny records is refused once
// they would pass it, and Held says what a batch let in takes.
func TestDecodeChargesRecordsAndHeaders(t *testing.T) {
	headers := make([]Header, 400)
	for i := range headers {
		headers[i] = Header{Key: ""}
	}
	batch := func(n int, hs []Header) []byte {
		recs := make([]Record, n)
		for i := range recs {
			recs[i] = Record{OffsetDelta: int32(i), Headers: hs}
		}
		raw, err := AppendCompressedBatch(nil, Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1,
			NumRecords: int32(n), LastOffsetDelta: int32(n - 1), Records: recs}, CodecNone)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	withHeaders := batch(100, headers) // 40,000 headers in about 80 KB
	if _, err := DecodeBatches(withHeaders, 1<<20); !errors.Is(err, ErrBatchTooLarge) {
		t.Fatalf("%d bytes of empty headers under a 1 MiB limit: err = %v, want ErrBatchTooLarge", len(withHeaders), err)
	}
	if bs, err := DecodeBatches(withHeaders, 4<<20); err != nil || bs[0].Held < 40_000*headerMemory {
		t.Fatalf("under a 4 MiB limit: err = %v, held %d", err, bs[0].Held)
	}
	tiny := batch(20_000, nil) // 1.76 MB of records in about 160 KB
	if _, err := DecodeBatches(tiny, 1<<20); !errors.Is(err, ErrBatchTooLarge) {
		t.Fatalf("20,000 tiny records under a 1 MiB limit: err = %v, want ErrBatchTooLarge", err)
	}
	if bs, err := DecodeBatches(tiny, 2<<20); err != nil || bs[0].Held != 20_000*recordMemory {
		t.Fatalf("under a 2 MiB limit: err = %v, held %d, want %d", err, bs[0].Held, 20_000*recordMemory)
	}
}

// TestPeekBatch: the base offset and attributes of a whole magic 2 batch are read from its header;
// anything that is not one (short, truncated, another magic, a length below the header's) is not.
func TestPeekBatch(t *testing.T) {
	b := testBatch(2, 3)
	b.BaseOffset, b.Attributes = 42, attrTransactional
	whole := mustCompressed(t, b, CodecZstd)
	magic1 := bytes.Clone(whole)
	magic1[magicOffset] = 1
	short := bytes.Clone(whole)
	binary.BigEndian.PutUint32(short[batchLenOffset:], minBatchLength-1)
	for _, tc := range []struct {
		name string
		data []byte
		ok   bool
	}{
		{"whole", whole, true},
		{"whole, then more", append(bytes.Clone(whole), 1, 2, 3), true},
		{"truncated", whole[:len(whole)-1], false},
		{"header only", whole[:batchHeaderLen], false},
		{"magic 1", magic1, false},
		{"length below the header", short, false},
		{"empty", nil, false},
	} {
		h, ok := PeekBatch(tc.data)
		if ok != tc.ok || ok && (h.BaseOffset != 42 || h.Compression() != CodecZstd || !h.Transactional()) {
			t.Errorf("%s: %+v, ok %v; want ok %v", tc.name, h, ok, tc.ok)
		}
	}
}

// TestNextBatch: a batch is read as Apache's batch iterator reads it: a whole batch of any magic Kafka
// knows has its size; too few bytes for the length and magic, or for what the length counts, are none;
// a length below a message's overhead (as soon as it is there) or an unknown magic (before the bytes
// the length counts) is corrupt.
func TestNextBatch(t *testing.T) {
	batch := mustCompressed(t, testBatch(1, 2), CodecZstd)
	withMagic := func(m byte) []byte { b := bytes.Clone(batch); b[magicOffset] = m; return b }
	withLength := func(n int, length int32) []byte {
		b := bytes.Clone(batch[:n])
		binary.BigEndian.PutUint32(b[batchLenOffset:], uint32(length))
		return b
	}
	whole := len(batch)
	for _, tc := range []struct {
		name    string
		data    []byte
		size    int
		magic   int8
		corrupt bool
	}{
		{"whole", batch, whole, 2, false},
		{"whole, then more", append(bytes.Clone(batch), 1, 2, 3), whole, 2, false},
		{"magic 1", withMagic(1), whole, 1, false},
		{"magic 0", withMagic(0), whole, 0, false},
		{"a message's overhead", withLength(batchLenExtra+legacyMessageOverhead, legacyMessageOverhead), batchLenExtra + legacyMessageOverhead, 2, false},
		{"empty", nil, 0, 0, false},
		{"11 bytes", batch[:batchLenExtra-1], 0, 0, false},
		{"up to the length", batch[:batchLenExtra], 0, 0, false},
		{"up to the magic", batch[:magicOffset], 0, 0, false},
		{"truncated", batch[:whole-1], 0, 0, false},
		{"a length past 2 GiB", withLength(magicOffset+1, 1<<31-1), 0, 0, false},
		{"a length below a message's overhead", withLength(whole, legacyMessageOverhead-1), 0, 0, true},
		{"a length below a message's overhead, 12 bytes", withLength(batchLenExtra, legacyMessageOverhead-1), 0, 0, true},
		{"a negative length", withLength(whole, -1), 0, 0, true},
		{"magic 3", withMagic(3), 0, 0, true},
		{"magic -1, up to the magic", withMagic(0xff)[:magicOffset+1], 0, 0, true},
	} {
		size, magic, corrupt := NextBatch(tc.data)
		if size != tc.size || magic != tc.magic || corrupt != tc.corrupt {
			t.Errorf("%s: size %d magic %d corrupt %v; want %d, %d, %v", tc.name, size, magic, corrupt, tc.size, tc.magic, tc.corrupt)
		}
	}
}

// TestTransactionalBatch: the transactional attribute of a magic 2 batch is read whatever its length
// (down to NextBatch's least, 26 bytes); a batch of another magic, or not marked, is not transactional.
func TestTransactionalBatch(t *testing.T) {
	b := testBatch(1, 2)
	b.Attributes = attrTransactional
	marked := mustCompressed(t, b, CodecNone)
	plain := mustCompressed(t, testBatch(1, 2), CodecNone)
	magic1 := bytes.Clone(marked)
	magic1[magicOffset] = 1
	short := bytes.Clone(marked[:batchLenExtra+legacyMessageOverhead])
	binary.BigEndian.PutUint32(short[batchLenOffset:], legacyMessageOverhead)
	for _, tc := range []struct {
		name string
		data []byte
		want bool
	}{
		{"marked", marked, true},
		{"26 bytes, marked", short, true},
		{"not marked", plain, false},
		{"magic 1", magic1, false},
		{"up to the attributes", marked[:attrsOffset+1], false},
		{"empty", nil, false},
	} {
		if got := TransactionalBatch(tc.data); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
