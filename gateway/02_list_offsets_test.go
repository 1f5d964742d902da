package gateway

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/redisstore"
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

// TestListOffsetsTopicDeletedElsewhere: a topic deleted through another gateway, while this one's
// topic view still lists it, answers ListOffsets (every kind of lookup) and DeleteRecords with
// UNKNOWN_TOPIC_OR_PARTITION, as Apache answers for a topic it no longer has, and as Fetch does here
// (TestFetchTopicDeletedElsewhere). Its partitions' keys were gone, and the lookups answered an empty
// partition's offsets (0 for earliest and latest: a consumer resetting there took them) and
// DeleteRecords 0 or OFFSET_OUT_OF_RANGE.
func TestListOffsetsTopicDeletedElsewhere(t *testing.T) {
	ctx, g, store := redisGateway(t, Config{})
	const name = "lo-deleted"
	createTopic(t, store, name, 1)
	appendValues(t, ctx, store, name, 0, 6, 10)
	c := &conn{g: g}
	list := func(ts int64) *kmsg.ListOffsetsResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrListOffsetsRequest()
		req.Version, req.ReplicaID = 8, -1
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = name
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Timestamp = ts
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		r, err := c.listOffsets(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return &r.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
	}
	deleteRecords := func(offset int64) *kmsg.DeleteRecordsResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrDeleteRecordsRequest()
		req.Version, req.TimeoutMillis = 2, 5000
		rt := kmsg.NewDeleteRecordsRequestTopic()
		rt.Topic = name
		rp := kmsg.NewDeleteRecordsRequestTopicPartition()
		rp.Offset = offset
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		r, err := c.deleteRecords(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return &r.(*kmsg.DeleteRecordsResponse).Topics[0].Partitions[0]
	}
	if sp := list(-1); sp.ErrorCode != 0 || sp.Offset != 6 {
		t.Fatalf("before the delete: latest error %d, offset %d", sp.ErrorCode, sp.Offset)
	}
	if err := store.DeleteTopic(ctx, name); err != nil { // as another gateway does: this one's view still has it
		t.Fatal(err)
	}
	if _, err := g.topics.get(ctx, name); err != nil {
		t.Fatalf("the gateway's view lost the topic already (%v): the test needs it stale", err)
	}
	unknown := kerr.UnknownTopicOrPartition.Code
	for _, ts := range []int64{-1, -2, -3, -4, 0} {
		if sp := list(ts); sp.ErrorCode != unknown {
			t.Errorf("ListOffsets %d after the delete: error %d, offset %d; want UNKNOWN_TOPIC_OR_PARTITION (%d)", ts, sp.ErrorCode, sp.Offset, unknown)
		}
	}
	for _, off := range []int64{-1, 0, 3} {
		if sp := deleteRecords(off); sp.ErrorCode != unknown {
			t.Errorf("DeleteRecords %d after the delete: error %d, low watermark %d; want UNKNOWN_TOPIC_OR_PARTITION (%d)", off, sp.ErrorCode, sp.LowWatermark, unknown)
		}
	}
	if keys, err := store.Client().Keys(ctx, "*"+name+"*").Result(); err != nil || len(keys) != 0 {
		t.Fatalf("keys of the deleted topic after the requests: %v, %v", keys, err)
	}
}

// TestListOffsetsByTimeIsItsLookupAlone: a ListOffsets of timestamp lookups (a time, -3) costs Redis
// the round trips of the store's lookups and no more: they check themselves that a topic this
// gateway's view lists still has its partitions (TestListOffsetsTopicDeletedElsewhere). The check
// was a round trip of its own after them, one per topic.
func TestListOffsetsByTimeIsItsLookupAlone(t *testing.T) {
	ctx, g, store := redisGateway(t, Config{})
	const name = "lo-trips"
	createTopic(t, store, name, 2)
	for p := range int32(2) {
		appendValues(t, ctx, store, name, p, 6, 10)
	}
	var trips atomic.Int64
	store.Observe(func(string, time.Duration, error) { trips.Add(1) })
	// count is the round trips f takes; it is asked again when the gateway's topic view was reloaded
	// meanwhile (a round trip of no lookup's).
	count := func(f func()) int64 {
		t.Helper()
		for range 5 {
			if _, err := g.topics.get(ctx, name); err != nil {
				t.Fatal(err)
			}
			g.topics.load.Lock()
			reloads := g.topics.reloads
			g.topics.load.Unlock()
			before := trips.Load()
			f()
			n := trips.Load() - before
			g.topics.load.Lock()
			again := g.topics.reloads != reloads
			g.topics.load.Unlock()
			if !again {
				return n
			}
		}
		t.Fatal("the topic view reloaded during every try")
		return 0
	}
	c := &conn{g: g}
	for _, ts := range []int64{0, -3} {
		lookups := count(func() {
			for _, a := range store.LookUpTimes(ctx, name, []redisstore.TimeLookup{{Partition: 0, Timestamp: ts, Known: true}, {Partition: 1, Timestamp: ts, Known: true}}) {
				if a.Err != nil {
					t.Fatal(a.Err)
				}
			}
		})
		var resp *kmsg.ListOffsetsResponse
		listed := count(func() {
			req := kmsg.NewPtrListOffsetsRequest()
			req.Version, req.ReplicaID = 8, -1
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = name
			for p := range int32(2) {
				rp := kmsg.NewListOffsetsRequestTopicPartition()
				rp.Partition, rp.Timestamp = p, ts
				rt.Partitions = append(rt.Partitions, rp)
			}
			req.Topics = append(req.Topics, rt)
			r, err := c.listOffsets(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			resp = r.(*kmsg.ListOffsetsResponse)
		})
		for _, sp := range resp.Topics[0].Partitions {
			if sp.ErrorCode != 0 || sp.Offset != 0 || sp.Timestamp != 1 {
				t.Errorf("ListOffsets %d, partition %d: error %d, offset %d, timestamp %d; want 0, 0, 1", ts, sp.Partition, sp.ErrorCode, sp.Offset, sp.Timestamp)
			}
		}
		if listed != lookups {
			t.Errorf("ListOffsets %d of 2 partitions: %d Redis round trips; the store's lookups take %d", ts, listed, lookups)
		}
		t.Logf("ListOffsets %d of 2 partitions: %d round trips (the lookups alone: %d)", ts, listed, lookups)
	}
}
