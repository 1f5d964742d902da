package gateway

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestListOffsetsAsApacheRefuses: as on Apache, a partition listed twice in one ListOffsets answers
// INVALID_REQUEST each time, and a special timestamp the request's version does not have (-3 before
// v7, -4 before v8, anything below -4) answers UNSUPPORTED_VERSION.
func TestListOffsetsAsApacheRefuses(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{})
	createTopic(t, store, "lo", 2)
	c := &conn{g: g}
	codes := func(version int16, parts []int32, ts []int64) []int16 {
		t.Helper()
		req := kmsg.NewPtrListOffsetsRequest()
		req.Version, req.ReplicaID = version, -1
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "lo"
		for i, p := range parts {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition, rp.Timestamp = p, ts[i]
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		r, err := c.listOffsets(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		var out []int16
		for _, sp := range r.(*kmsg.ListOffsetsResponse).Topics[0].Partitions {
			out = append(out, sp.ErrorCode)
		}
		return out
	}
	inv, unsup := kerr.InvalidRequest.Code, kerr.UnsupportedVersion.Code
	for _, tc := range []struct {
		name    string
		version int16
		parts   []int32
		ts      []int64
		want    []int16
	}{
		{"repeated partition", 8, []int32{0, 1, 0}, []int64{-1, -1, -2}, []int16{inv, 0, inv}},
		{"max timestamp at v6", 6, []int32{0}, []int64{-3}, []int16{unsup}},
		{"max timestamp at v7", 7, []int32{0}, []int64{-3}, []int16{0}},
		{"earliest local at v7", 7, []int32{0}, []int64{-4}, []int16{unsup}},
		{"earliest local at v8", 8, []int32{0}, []int64{-4}, []int16{0}},
		{"below -4", 8, []int32{0}, []int64{-5}, []int16{unsup}},
	} {
		if got := codes(tc.version, tc.parts, tc.ts); !slices.Equal(got, tc.want) {
			t.Errorf("%s: codes %v, want %v", tc.name, got, tc.want)
		}
	}
}
