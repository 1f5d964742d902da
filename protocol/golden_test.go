package protocol

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// The files testdata/kgo-<codec>.bin are Produce requests, size prefix
// included, captured from the franz-go (kgo) producer by capture_test.go
// (go test -tags capture -run TestCaptureGolden ./protocol/). They are the
// records of goldenRecords, produced idempotently to partition 0 of topic
// goldenTopic, one file per compression codec.

const (
	goldenTopic      = "golden"
	goldenProducerID = 1000
)

// goldenRecords covers null and empty keys, values and header values and
// enough repetition that every codec actually compresses.
func goldenRecords() []Record {
	const ts = 1_700_000_000_000
	recs := []Record{
		{Timestamp: ts, Key: []byte("k0"), Value: []byte(strings.Repeat("hello kgate ", 20)), Headers: []Header{{Key: "h1", Value: []byte("v1")}}},
		{Timestamp: ts + 1, Key: nil, Value: []byte{}, Headers: []Header{{Key: "null-value", Value: nil}, {Key: "empty-value", Value: []byte{}}}},
		{Timestamp: ts + 2, Key: []byte{}, Value: nil},
	}
	for i := range 20 {
		recs = append(recs, Record{
			Timestamp: ts + 10 + int64(i),
			Key:       []byte("key-" + strings.Repeat("x", i)),
			Value:     bytes.Repeat([]byte("value "), 10+i),
			Headers:   []Header{{Key: "trace", Value: []byte("abc")}, {Key: "trace", Value: []byte("def")}},
		})
	}
	for i := range recs {
		recs[i].OffsetDelta = int32(i)
	}
	return recs
}

func goldenFiles(t testing.TB) map[Codec][]byte {
	t.Helper()
	files := make(map[Codec][]byte)
	for _, c := range allCodecs {
		raw, err := os.ReadFile(filepath.Join("testdata", "kgo-"+c.String()+".bin"))
		if err != nil {
			t.Fatal(err)
		}
		files[c] = raw
	}
	return files
}

func TestGoldenKgoProduce(t *testing.T) {
	for c, raw := range goldenFiles(t) {
		t.Run(c.String(), func(t *testing.T) {
			frame, err := ReadFrame(bytes.NewReader(raw), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			h, body, err := ParseRequestHeader(frame)
			if err != nil {
				t.Fatal(err)
			}
			if h.APIKey != 0 || h.ClientID != "kgate-capture" {
				t.Fatalf("header %+v", h)
			}
			req, err := DecodeRequest(h, body)
			if err != nil {
				t.Fatal(err)
			}
			produce := req.(*kmsg.ProduceRequest)
			if len(produce.Topics) != 1 || produce.Topics[0].Topic != goldenTopic || len(produce.Topics[0].Partitions) != 1 {
				t.Fatalf("unexpected request shape: %+v", produce.Topics)
			}
			batches, err := DecodeBatches(produce.Topics[0].Partitions[0].Records, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(batches) != 1 {
				t.Fatalf("%d batches", len(batches))
			}
			b := batches[0]
			want := Batch{
				PartitionLeaderEpoch: -1,
				Attributes:           int16(c),
				LastOffsetDelta:      b.LastOffsetDelta,
				FirstTimestamp:       1_700_000_000_000,
				MaxTimestamp:         b.MaxTimestamp,
				ProducerID:           goldenProducerID,
				NumRecords:           int32(len(goldenRecords())),
				Records:              goldenRecords(),
			}
			want.LastOffsetDelta = want.NumRecords - 1
			want.MaxTimestamp = want.Records[len(want.Records)-1].Timestamp
			equalBatch(t, b, want)
		})
	}
}
