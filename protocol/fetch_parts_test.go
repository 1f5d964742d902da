package protocol

import (
	"bytes"
	"math/rand"
	"reflect"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// randomFetchResponse is a fetch response of every field kind the gateway fills, its record sets of
// sizes around MinFetchPart (some left out of the frame, some copied, some empty).
func randomFetchResponse(r *rand.Rand, version int16) *kmsg.FetchResponse {
	resp := kmsg.NewPtrFetchResponse()
	resp.SetVersion(version)
	resp.ThrottleMillis = r.Int31n(100)
	resp.SessionID = r.Int31()
	for t := range r.Intn(4) + 1 {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic = string(rune('a'+t)) + "-topic"
		r.Read(rt.TopicID[:])
		for p := range r.Intn(5) + 1 {
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.Partition = int32(p)
			rp.HighWatermark = r.Int63n(1 << 40)
			rp.LastStableOffset = rp.HighWatermark
			rp.LogStartOffset = r.Int63n(10)
			if r.Intn(5) == 0 {
				rp.ErrorCode = 1
			}
			if r.Intn(4) == 0 {
				a := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
				a.ProducerID, a.FirstOffset = 7, 9
				rp.AbortedTransactions = append(rp.AbortedTransactions, a)
			}
			rp.PreferredReadReplica = -1
			sizes := []int{0, 1, MinFetchPart - 1, MinFetchPart, MinFetchPart + 1, 300 << 10}
			rp.RecordBatches = make([]byte, sizes[r.Intn(len(sizes))])
			r.Read(rp.RecordBatches)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// AppendFetchParts must give the frame AppendResponse gives, byte for byte, at every version, and leave
// the response as it found it.
func TestAppendFetchPartsMatchesAppendResponse(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	maxV := kmsg.NewPtrFetchResponse().MaxVersion()
	left := 0
	for v := int16(4); v <= maxV; v++ {
		for range 40 {
			resp := randomFetchResponse(r, v)
			want := AppendResponse(nil, 77, resp)
			before := reflect.ValueOf(*resp).Interface()

			prefix := []byte("kept")
			dst, parts := AppendFetchParts(prefix, nil, 77, resp)
			if !bytes.Equal(dst[:len(prefix)], []byte("kept")) {
				t.Fatalf("v%d: dst's bytes before the frame changed", v)
			}
			got := bytes.Join(parts, nil)
			if !bytes.Equal(got, want) {
				t.Fatalf("v%d: frame differs from AppendResponse's (%d bytes against %d)", v, len(got), len(want))
			}
			if !reflect.DeepEqual(*resp, before) {
				t.Fatalf("v%d: the response was changed", v)
			}
			for i := range resp.Topics {
				for _, rp := range resp.Topics[i].Partitions {
					if len(rp.RecordBatches) < MinFetchPart {
						continue
					}
					if !slices.ContainsFunc(parts, func(p []byte) bool { return len(p) > 0 && &p[0] == &rp.RecordBatches[0] }) {
						t.Fatalf("v%d: a record set of %d bytes was copied", v, len(rp.RecordBatches))
					}
					left++
				}
			}
		}
	}
	if left == 0 {
		t.Fatal("no record set was left out of the frame")
	}
}

// A marker that turns up where it should not (only a field holding the process's secret can do that)
// makes the frame fall back to AppendResponse's, never a wrong one.
func TestAppendFetchPartsFallsBack(t *testing.T) {
	for _, v := range []int16{11, 13, kmsg.NewPtrFetchResponse().MaxVersion()} {
		resp := kmsg.NewPtrFetchResponse()
		resp.SetVersion(v)
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic = "t"
		copy(rt.TopicID[:], markerSecret[:]) // marker 0 in the topic ID (v13+), its index 0 following
		rp := kmsg.NewFetchResponseTopicPartition()
		rp.RecordBatches = bytes.Repeat([]byte{1}, MinFetchPart)
		rt.Partitions = append(rt.Partitions, rp)
		resp.Topics = append(resp.Topics, rt)
		want := AppendResponse(nil, 5, resp)
		_, parts := AppendFetchParts(nil, nil, 5, resp)
		if got := bytes.Join(parts, nil); !bytes.Equal(got, want) {
			t.Fatalf("v%d: frame differs from AppendResponse's", v)
		}
		if v >= 13 && len(parts) != 1 { // topic IDs from v13
			t.Fatalf("v%d: %d pieces, want the one AppendResponse frame", v, len(parts))
		}
	}
}

// AppendFetchParts allocates the same few times whatever the number of record sets it leaves out:
// none per record set, none per record.
func TestAppendFetchPartsAllocations(t *testing.T) {
	allocs := func(sets int) float64 {
		resp := kmsg.NewPtrFetchResponse()
		resp.SetVersion(13)
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic = "t"
		for p := range sets {
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.Partition = int32(p)
			rp.RecordBatches = make([]byte, MinFetchPart)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
		dst, parts := make([]byte, 0, 1<<20), make([][]byte, 0, 4*sets)
		return testing.AllocsPerRun(20, func() { _, parts = AppendFetchParts(dst[:0], parts[:0], 1, resp) })
	}
	if one, many := allocs(1), allocs(64); one > 3 || many != one {
		t.Fatalf("allocations: %v with one record set left out, %v with 64; want the same, at most 3", one, many)
	}
}
