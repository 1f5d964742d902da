package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// seedRequests are valid request frames (without the size prefix).
func seedRequests(t testing.TB) [][]byte {
	batch := mustCompressed(t, testBatch(3, 20), CodecLZ4)
	produce := kmsg.NewPtrProduceRequest()
	produce.Acks = -1
	produce.Topics = []kmsg.ProduceRequestTopic{{Topic: "t", Partitions: []kmsg.ProduceRequestTopicPartition{{Records: batch}}}}
	fetch := kmsg.NewPtrFetchRequest()
	fetch.Topics = []kmsg.FetchRequestTopic{{Topic: "t", Partitions: []kmsg.FetchRequestTopicPartition{{FetchOffset: 10}}}}
	metadata := kmsg.NewPtrMetadataRequest()
	metadata.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("orders")}}
	join := kmsg.NewPtrJoinGroupRequest()
	join.Group = "g"
	join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0, 1}}}
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Group = "g"
	commit.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "t", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Offset: 5}}}}

	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID("fuzz"))
	var seeds [][]byte
	for _, req := range []kmsg.Request{produce, fetch, metadata, join, commit, kmsg.NewPtrApiVersionsRequest()} {
		for _, v := range []int16{0, req.MaxVersion() / 2, req.MaxVersion()} {
			req.SetVersion(v)
			seeds = append(seeds, f.AppendRequest(nil, req, 1)[4:])
		}
	}
	// ApiVersions from a client newer than kmsg.
	seeds = append(seeds, encodeHeader(18, 99, 2, strp("new"), true, nil))
	// Produce requests captured from kgo.
	for _, raw := range goldenFiles(t) {
		seeds = append(seeds, raw[4:])
	}
	return seeds
}

func FuzzParseRequest(f *testing.F) {
	for _, s := range seedRequests(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		h, body, err := ParseRequestHeader(frame)
		if err != nil {
			if errors.Is(err, ErrUnsupportedVersion) && h.Flexible {
				t.Fatal("unsupported version parsed as flexible")
			}
			return
		}
		if len(body) > len(frame) {
			t.Fatalf("body %d bytes from a %d byte frame", len(body), len(frame))
		}
		req, err := DecodeRequest(h, body)
		if err != nil {
			if !errors.Is(err, ErrMalformedRequest) {
				t.Fatalf("DecodeRequest error not classified: %v", err)
			}
			return
		}
		if req.Key() != h.APIKey || req.GetVersion() != h.APIVersion {
			t.Fatalf("request %d v%d for header %+v", req.Key(), req.GetVersion(), h)
		}
		// What we read must be writable: the gateway echoes fields back.
		_ = req.AppendTo(nil)
	})
}

// fixCRCs recomputes the CRC of every whole batch in data, so the fuzzer
// can reach the record decoder past the checksum.
func fixCRCs(data []byte) {
	for len(data) > magicOffset {
		length := int32(binary.BigEndian.Uint32(data[batchLenOffset:]))
		if length < minBatchLength || int64(length) > int64(len(data)-batchLenExtra) {
			return
		}
		end := batchLenExtra + int(length)
		putCRC(data[:end])
		data = data[end:]
	}
}

func FuzzDecodeBatches(f *testing.F) {
	for _, c := range allCodecs {
		f.Add(mustCompressed(f, testBatch(3, 20), c), false)
		f.Add(mustCompressed(f, nullEmptyBatch(), c), false)
	}
	plain := mustCompressed(f, testBatch(4, 40), CodecNone)
	xerial := appendXerial(bytes.Clone(plain[:batchHeaderLen]), plain[batchHeaderLen:], 64)
	binary.BigEndian.PutUint32(xerial[batchLenOffset:], uint32(len(xerial)-batchLenExtra))
	binary.BigEndian.PutUint16(xerial[attrsOffset:], uint16(CodecSnappy))
	putCRC(xerial)
	f.Add(xerial, false)
	f.Add(AppendBatch(AppendBatch(nil, 0, 0, nullEmptyRecords(1)), 5, 1, testBatch(2, 3).Records), false)
	for _, raw := range goldenFiles(f) {
		h, body, err := ParseRequestHeader(raw[4:])
		if err != nil {
			f.Fatal(err)
		}
		req, err := DecodeRequest(h, body)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(req.(*kmsg.ProduceRequest).Topics[0].Partitions[0].Records, false)
	}

	const limit = 1 << 20
	f.Fuzz(func(t *testing.T, data []byte, fixCRC bool) {
		if fixCRC {
			fixCRCs(data)
		}
		peek, peeked := PeekBatch(data)
		batches, err := DecodeBatches(data, limit)
		if err != nil {
			return
		}
		// Decoded whole, the batches are the ones Kafka's iterator reads, one after the other.
		rest := data
		for i := range batches {
			size, magic, corrupt := NextBatch(rest)
			if size == 0 || magic != 2 || corrupt {
				t.Fatalf("batch %d: NextBatch size %d magic %d corrupt %v", i, size, magic, corrupt)
			}
			rest = rest[size:]
		}
		// What a broker checks before the records, read from the header alone, is what decoding finds.
		if len(batches) > 0 && (!peeked || peek.BaseOffset != batches[0].BaseOffset || peek.Attributes != batches[0].Attributes) {
			t.Fatalf("PeekBatch %+v (ok %v), decoded base offset %d attributes %d", peek, peeked, batches[0].BaseOffset, batches[0].Attributes)
		}
		for i := range batches {
			b := &batches[i]
			if int(b.NumRecords) != len(b.Records) {
				t.Fatalf("batch %d: NumRecords %d, %d records", i, b.NumRecords, len(b.Records))
			}
			// Decoding what we encode gives the same batch back.
			again, err := AppendCompressedBatch(nil, *b, b.Compression())
			if err != nil {
				t.Fatal(err)
			}
			back, err := DecodeBatches(again, 0)
			if err != nil {
				t.Fatalf("batch %d: re-encoded batch does not decode: %v", i, err)
			}
			equalBatch(t, back[0], *b)
		}
	})
}
