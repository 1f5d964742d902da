package protocol

import (
	"bytes"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// 100 records of 100 byte values, as a typical small producer batch.
func BenchmarkDecodeBatches(b *testing.B) {
	batch := testBatch(100, 100)
	for _, c := range allCodecs {
		raw := mustCompressed(b, batch, c)
		b.Run(c.String(), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if _, err := DecodeBatches(raw, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkAppendBatch(b *testing.B) {
	recs := testBatch(100, 100).Records
	dst := AppendBatch(nil, 0, 0, recs)
	b.ReportAllocs()
	b.SetBytes(int64(len(dst)))
	for b.Loop() {
		dst = AppendBatch(dst[:0], 1000, TimestampCreateTime, recs)
	}
}

func BenchmarkReadFrameParseHeader(b *testing.B) {
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(12)
	req.Topics = []kmsg.FetchRequestTopic{{Topic: "t", Partitions: []kmsg.FetchRequestTopicPartition{{FetchOffset: 10}}}}
	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("bench")).AppendRequest(nil, req, 1)
	r := bytes.NewReader(frame)
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		r.Reset(frame)
		var err error
		if buf, err = ReadFrame(r, buf, 0); err != nil {
			b.Fatal(err)
		}
		if _, _, err := ParseRequestHeader(buf); err != nil {
			b.Fatal(err)
		}
	}
}
