package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kgate/kgate/gateway"
	"github.com/kgate/kgate/internal/redistest"
	"github.com/kgate/kgate/redisstore"
	"net"
	"sync"
	"sync/atomic"
)

// Issue 4, the admin HTTP API end to end: a real franz-go group consumer commits through the gateway,
// the API is read over HTTP, Redis is inspected and written directly.

// admHTTP is the admin API client of the tests; every call is bounded.
var admHTTP = &http.Client{Timeout: 15 * time.Second}

// admCall sends one request to the admin API and returns the status and body. A string body is sent as
// is (to send malformed JSON); anything else is marshalled.
func admCall(t *testing.T, method, u string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatalf("marshal %T: %v", body, err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := admHTTP.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, u, err)
	}
	return resp.StatusCode, data
}

// admJSON calls the admin API, fails unless the status is want, and decodes the answer into out.
func admJSON(t *testing.T, method, u string, body any, want int, out any) {
	t.Helper()
	status, data := admCall(t, method, u, body)
	if status != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, u, status, want, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, u, data, err)
		}
	}
}

// admWantError checks an error answer: the status and a JSON {"error": "..."} body.
func admWantError(t *testing.T, method, u string, body any, want int) string {
	t.Helper()
	status, data := admCall(t, method, u, body)
	if status != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, u, status, want, data)
	}
	var e struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(data, &e); err != nil || e.Error == "" {
		t.Fatalf("%s %s: error body %q is not {\"error\": \"...\"} (%v)", method, u, data, err)
	}
	return e.Error
}

// The JSON shapes of the admin API as a client reads them; pointers tell null from 0.
type admOffset struct {
	Topic               string `json:"topic"`
	Partition           int32  `json:"partition"`
	CommittedOffset     int64  `json:"committedOffset"`
	Metadata            string `json:"metadata"`
	LogStartOffset      int64  `json:"logStartOffset"`
	LogEndOffset        int64  `json:"logEndOffset"`
	Lag                 int64  `json:"lag"`
	LastCommitTimestamp *int64 `json:"lastCommitTimestamp"`
	SidecarOffset       *int64 `json:"sidecarOffset"`
}

type admGroupSummary struct {
	Group       string `json:"group"`
	State       string `json:"state"`
	Members     int    `json:"members"`
	TotalLag    int64  `json:"totalLag"`
	Coordinator int32  `json:"coordinator"`
	Source      string `json:"source"`
}

type admMember struct {
	MemberID   string             `json:"memberId"`
	InstanceID *string            `json:"instanceId"`
	ClientID   string             `json:"clientId"`
	ClientHost string             `json:"clientHost"`
	Assigned   map[string][]int32 `json:"assignedPartitions"`
}

type admGroupDetail struct {
	Group        string      `json:"group"`
	State        string      `json:"state"`
	ProtocolType string      `json:"protocolType"`
	Protocol     string      `json:"protocol"`
	Generation   int32       `json:"generation"`
	Coordinator  int32       `json:"coordinator"`
	Source       string      `json:"source"`
	Members      []admMember `json:"members"`
	Offsets      []admOffset `json:"offsets"`
	TotalLag     int64       `json:"totalLag"`
}

type admResetAnswer struct {
	DryRun  bool `json:"dryRun"`
	Offsets []struct {
		Topic     string `json:"topic"`
		Partition int32  `json:"partition"`
		Previous  *int64 `json:"previousOffset"`
		Offset    int64  `json:"newOffset"`
	} `json:"offsets"`
}

type admPartition struct {
	Partition      int32 `json:"partition"`
	Leader         int32 `json:"leader"`
	LogStartOffset int64 `json:"logStartOffset"`
	LogEndOffset   int64 `json:"logEndOffset"`
	Records        int64 `json:"records"`
	MemoryBytes    int64 `json:"memoryBytes"`
}

type admTopic struct {
	Name       string            `json:"name"`
	ID         string            `json:"id"`
	Partitions []admPartition    `json:"partitions"`
	Configs    map[string]string `json:"configs"`
	Records    int64             `json:"records"`
}

type admGatewayView struct {
	NodeID            int32  `json:"nodeId"`
	Advertised        string `json:"advertised"`
	Admin             string `json:"admin"`
	Alive             bool   `json:"alive"`
	CoordinatedGroups int    `json:"coordinatedGroups"`
}

type admClusterView struct {
	ClusterID    string           `json:"clusterId"`
	Self         int32            `json:"self"`
	Gateways     []admGatewayView `json:"gateways"`
	RedisMode    string           `json:"redisMode"`
	RedisVersion string           `json:"redisVersion"`
}

// admCreateTopics creates topics through Kafka (CreateTopics) and fails on any error.
func admCreateTopics(t *testing.T, ctx context.Context, adm *kadm.Client, partitions int32, configs map[string]*string, topics ...string) {
	t.Helper()
	resp, err := adm.CreateTopics(ctx, partitions, 1, configs, topics...)
	if err != nil {
		t.Fatalf("create topics %v: %v", topics, err)
	}
	if err := resp.Error(); err != nil {
		t.Fatalf("create topics %v: %v", topics, err)
	}
}

// admOffsetsURL is GET/POST /api/v1/groups/{group}/offsets.
func admOffsetsURL(g *testGateway, group string) string {
	return g.AdminURL + "/api/v1/groups/" + url.PathEscape(group) + "/offsets"
}

func admGroupURL(g *testGateway, group string) string {
	return g.AdminURL + "/api/v1/groups/" + url.PathEscape(group)
}

// admOffsets reads a group's offsets, optionally filtered by topic.
func admOffsets(t *testing.T, g *testGateway, group, topic string) []admOffset {
	t.Helper()
	u := admOffsetsURL(g, group)
	if topic != "" {
		u += "?topic=" + url.QueryEscape(topic)
	}
	var out []admOffset
	admJSON(t, http.MethodGet, u, nil, http.StatusOK, &out)
	return out
}

// admFindOffset returns the entry of topic/partition or fails.
func admFindOffset(t *testing.T, offs []admOffset, topic string, p int32) admOffset {
	t.Helper()
	for _, o := range offs {
		if o.Topic == topic && o.Partition == p {
			return o
		}
	}
	t.Fatalf("no offset entry for %s/%d in %+v", topic, p, offs)
	return admOffset{}
}

// admProduce produces n records to one partition with values "<topic>-<i>" and record timestamps
// ts(i) (zero: now), in one synchronous call.
func admProduce(t *testing.T, ctx context.Context, cl *kgo.Client, topic string, p int32, n int, ts func(i int) time.Time) {
	t.Helper()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "%s-%d", topic, i)}
		if ts != nil {
			recs[i].Timestamp = ts(i)
		}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce %d records to %s/%d: %v", n, topic, p, err)
	}
}

// admProducer returns a client that produces to the partition each record names.
func admProducer(t *testing.T, g *testGateway) *kgo.Client {
	return newClient(t, g, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.AllowAutoTopicCreation())
}

// admConsumer starts a franz-go group consumer of topics that commits only by hand.
func admConsumer(t *testing.T, g *testGateway, group string, topics ...string) *kgo.Client {
	t.Helper()
	return newClient(t, g, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topics...), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.ClientID("kgate-admin-it"),
		kgo.FetchMaxWait(200*time.Millisecond))
}

// admPoll polls cl until want records per topic have arrived and returns them by topic.
func admPoll(t *testing.T, ctx context.Context, cl *kgo.Client, want map[string]int) map[string][]*kgo.Record {
	t.Helper()
	got := map[string][]*kgo.Record{}
	done := func() bool {
		for topic, n := range want {
			if len(got[topic]) < n {
				return false
			}
		}
		return true
	}
	for !done() {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("poll: %v (got %d topics of %v)", err, len(got), want)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) { got[r.Topic] = append(got[r.Topic], r) })
	}
	return got
}

// admCommit commits recs through cl and returns the wall-clock window around the commit call.
func admCommit(t *testing.T, ctx context.Context, cl *kgo.Client, recs ...*kgo.Record) (before, after time.Time) {
	t.Helper()
	before = time.Now()
	if err := cl.CommitRecords(ctx, recs...); err != nil {
		t.Fatalf("commit: %v", err)
	}
	return before, time.Now()
}

// admWaitState polls GET /api/v1/groups/{group} until the group is in state.
func admWaitState(t *testing.T, g *testGateway, group, state string) admGroupDetail {
	t.Helper()
	var d admGroupDetail
	waitFor(t, 20*time.Second, "group "+group+" "+state, func() bool {
		status, data := admCall(t, http.MethodGet, admGroupURL(g, group), nil)
		d = admGroupDetail{}
		return status == http.StatusOK && json.Unmarshal(data, &d) == nil && d.State == state
	})
	return d
}

// admCheckCommitTime asserts a lastCommitTimestamp lies within a second of the commit call.
func admCheckCommitTime(t *testing.T, o admOffset, before, after time.Time) {
	t.Helper()
	if o.LastCommitTimestamp == nil {
		t.Fatalf("%s/%d: lastCommitTimestamp is null, want the commit time", o.Topic, o.Partition)
	}
	ts := *o.LastCommitTimestamp
	if lo, hi := before.Add(-time.Second).UnixMilli(), after.Add(time.Second).UnixMilli(); ts < lo || ts > hi {
		t.Fatalf("%s/%d: lastCommitTimestamp %d not within 1s of the commit [%d, %d]",
			o.Topic, o.Partition, ts, before.UnixMilli(), after.UnixMilli())
	}
}

// TestAdminGroupOffsets: committed offset, lag, lastCommitTimestamp and the sidecar offset after a
// franz-go commit; the topic filter; an older gateway's canonical-only write; a malformed sidecar.
func TestAdminGroupOffsets(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 60*time.Second)
		const topic, other, group = "adm-offsets", "adm-offsets-other", "adm-offsets-group"
		const total, committed = 10, 6 // M records, offset N committed
		admCreateTopics(t, ctx, newAdmin(t, g), 1, nil, topic, other)
		p := admProducer(t, g)
		admProduce(t, ctx, p, topic, 0, total, nil)
		admProduce(t, ctx, p, other, 0, 3, nil)

		c := admConsumer(t, g, group, topic, other)
		got := admPoll(t, ctx, c, map[string]int{topic: total, other: 3})
		before, after := admCommit(t, ctx, c, got[topic][committed-1], got[other][2])

		// The raw answer has every documented field.
		status, raw := admCall(t, http.MethodGet, admOffsetsURL(g, group), nil)
		if status != http.StatusOK {
			t.Fatalf("GET offsets: %d %s", status, raw)
		}
		var shape []map[string]json.RawMessage
		if err := json.Unmarshal(raw, &shape); err != nil || len(shape) == 0 {
			t.Fatalf("offsets %s: %v", raw, err)
		}
		for _, f := range []string{"topic", "partition", "committedOffset", "metadata", "logStartOffset",
			"logEndOffset", "lag", "lastCommitTimestamp", "sidecarOffset"} {
			if _, ok := shape[0][f]; !ok {
				t.Errorf("offset entry %s has no field %q", raw, f)
			}
		}

		all := admOffsets(t, g, group, "")
		if len(all) != 2 {
			t.Fatalf("offsets: %d entries, want 2 (one per committed partition): %+v", len(all), all)
		}
		o := admFindOffset(t, all, topic, 0)
		if o.CommittedOffset != committed || o.LogEndOffset != total || o.LogStartOffset != 0 || o.Lag != total-committed {
			t.Fatalf("offset %+v: want committed %d, end %d, start 0, lag %d", o, committed, total, total-committed)
		}
		admCheckCommitTime(t, o, before, after)
		if o.SidecarOffset == nil || *o.SidecarOffset != committed {
			t.Fatalf("sidecarOffset %v, want %d", o.SidecarOffset, committed)
		}
		if oo := admFindOffset(t, all, other, 0); oo.CommittedOffset != 3 || oo.Lag != 0 {
			t.Fatalf("other topic offset %+v: want committed 3, lag 0", oo)
		}

		// ?topic= keeps only that topic.
		filtered := admOffsets(t, g, group, topic)
		if len(filtered) != 1 || filtered[0].Topic != topic {
			t.Fatalf("?topic=%s: %+v", topic, filtered)
		}
		if f := admOffsets(t, g, group, other); len(f) != 1 || f[0].Topic != other {
			t.Fatalf("?topic=%s: %+v", other, f)
		}
		admWantError(t, http.MethodGet, admOffsetsURL(g, group)+"?topic=adm-no-such-topic", nil, http.StatusNotFound)

		// An older gateway moves only the canonical offset: the timestamp stays that of the last
		// timestamped commit, and the sidecar still names the offset it belongs to.
		canonical, sidecar, _ := g.Store.OffsetKeys(group)
		field := g.Store.StreamKey(topic, 0)
		rdb := g.Store.Client()
		if err := rdb.HSet(ctx, canonical, field, committed+1).Err(); err != nil {
			t.Fatalf("raw HSET: %v", err)
		}
		o2 := admFindOffset(t, admOffsets(t, g, group, topic), topic, 0)
		if o2.CommittedOffset != committed+1 || o2.Lag != total-committed-1 {
			t.Fatalf("after the canonical-only write: %+v, want committed %d lag %d", o2, committed+1, total-committed-1)
		}
		if o2.LastCommitTimestamp == nil || *o2.LastCommitTimestamp != *o.LastCommitTimestamp {
			t.Fatalf("lastCommitTimestamp %v after a canonical-only write, want unchanged %d", o2.LastCommitTimestamp, *o.LastCommitTimestamp)
		}
		if o2.SidecarOffset == nil || *o2.SidecarOffset != committed {
			t.Fatalf("sidecarOffset %v after a canonical-only write, want still %d", o2.SidecarOffset, committed)
		}

		// A malformed sidecar value never fails the read; it reads as no timestamp.
		for _, bad := range []string{"garbage", "6|", "|123", "-1|5", "6|x"} {
			if err := rdb.HSet(ctx, sidecar, field, bad).Err(); err != nil {
				t.Fatalf("raw HSET sidecar: %v", err)
			}
			o3 := admFindOffset(t, admOffsets(t, g, group, ""), topic, 0)
			if o3.LastCommitTimestamp != nil || o3.SidecarOffset != nil || o3.CommittedOffset != committed+1 {
				t.Fatalf("sidecar %q: %+v, want committed %d and null timestamp/sidecar offset", bad, o3, committed+1)
			}
		}
		// The group summary and detail read through the same path.
		var d admGroupDetail
		admJSON(t, http.MethodGet, admGroupURL(g, group), nil, http.StatusOK, &d)
		if len(d.Offsets) != 2 || d.TotalLag != total-committed-1 {
			t.Fatalf("group detail with a malformed sidecar: %+v", d)
		}
	})
}

// TestAdminResetOffsets: POST /api/v1/groups/{g}/offsets on an Empty group, every target, dry-run,
// the cleared sidecar, and the errors.
func TestAdminResetOffsets(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 60*time.Second)
		const topic, group = "adm-reset", "adm-reset-group"
		adm := newAdmin(t, g)
		admCreateTopics(t, ctx, adm, 2, nil, topic)
		base := time.Now().Add(-time.Hour).Truncate(time.Second)
		at := func(i int) time.Time { return base.Add(time.Duration(i) * time.Second) }
		p := admProducer(t, g)
		admProduce(t, ctx, p, topic, 0, 10, at)
		admProduce(t, ctx, p, topic, 1, 4, at)
		// Log start 2 on partition 0, so earliest is not simply 0.
		var trim kadm.Offsets
		trim.AddOffset(topic, 0, 2, -1)
		del, err := adm.DeleteRecords(ctx, trim)
		if err != nil || del.Error() != nil {
			t.Fatalf("delete records: %v %v", err, del.Error())
		}

		c := admConsumer(t, g, group, topic)
		got := admPoll(t, ctx, c, map[string]int{topic: 12})
		var last0, last1 *kgo.Record
		for _, r := range got[topic] {
			if r.Partition == 0 && r.Offset == 7 {
				last0 = r
			}
			if r.Partition == 1 && r.Offset == 2 {
				last1 = r
			}
		}
		if last0 == nil || last1 == nil {
			t.Fatalf("did not consume offsets 0/7 and 1/2")
		}
		admCommit(t, ctx, c, last0, last1) // committed 8 and 3
		admWaitState(t, g, group, "Stable")
		admWantError(t, http.MethodPost, admOffsetsURL(g, group), map[string]any{"topic": topic, "to": "earliest"}, http.StatusConflict)
		c.Close()
		admWaitState(t, g, group, "Empty")

		committed := func() map[int32]admOffset {
			out := map[int32]admOffset{}
			for _, o := range admOffsets(t, g, group, topic) {
				out[o.Partition] = o
			}
			return out
		}
		if cm := committed(); cm[0].CommittedOffset != 8 || cm[1].CommittedOffset != 3 || cm[0].LastCommitTimestamp == nil {
			t.Fatalf("before the resets: %+v", cm)
		}

		// Dry run: the answer says what would happen; nothing is written.
		var dry admResetAnswer
		admJSON(t, http.MethodPost, admOffsetsURL(g, group), map[string]any{"topic": topic, "to": "latest", "dryRun": true}, http.StatusOK, &dry)
		if !dry.DryRun || len(dry.Offsets) != 2 {
			t.Fatalf("dry run answer %+v", dry)
		}
		for _, r := range dry.Offsets {
			wantPrev, wantNew := map[int32]int64{0: 8, 1: 3}[r.Partition], map[int32]int64{0: 10, 1: 4}[r.Partition]
			if r.Previous == nil || *r.Previous != wantPrev || r.Offset != wantNew {
				t.Fatalf("dry run partition %d: previous %v new %d, want %d -> %d", r.Partition, r.Previous, r.Offset, wantPrev, wantNew)
			}
		}
		if cm := committed(); cm[0].CommittedOffset != 8 || cm[1].CommittedOffset != 3 || cm[0].LastCommitTimestamp == nil {
			t.Fatalf("a dry run wrote: %+v", cm)
		}

		for _, tc := range []struct {
			name string
			body map[string]any
			want map[int32]int64
		}{
			{"earliest", map[string]any{"topic": topic, "to": "earliest"}, map[int32]int64{0: 2, 1: 0}},
			{"latest", map[string]any{"topic": topic, "to": "latest"}, map[int32]int64{0: 10, 1: 4}},
			{"offset one partition", map[string]any{"topic": topic, "to": "offset", "value": 7, "partitions": []int32{0}}, map[int32]int64{0: 7, 1: 4}},
			{"shift back", map[string]any{"topic": topic, "to": "shift", "value": -3}, map[int32]int64{0: 4, 1: 1}},
			{"shift forward", map[string]any{"topic": topic, "to": "shift", "value": 2, "partitions": []int32{1}}, map[int32]int64{0: 4, 1: 3}},
			{"offset clamped to the log end", map[string]any{"topic": topic, "to": "offset", "value": 100}, map[int32]int64{0: 10, 1: 4}},
			{"shift by the most there is: the log end", map[string]any{"topic": topic, "to": "shift", "value": int64(math.MaxInt64)}, map[int32]int64{0: 10, 1: 4}},
			{"offset clamped to the log start", map[string]any{"topic": topic, "to": "offset", "value": 0}, map[int32]int64{0: 2, 1: 0}},
			// Partition 0 has record i at base+i s (offsets 0-1 deleted); partition 1 has none that late.
			{"timestamp", map[string]any{"topic": topic, "to": "timestamp", "value": at(5).UnixMilli()}, map[int32]int64{0: 5, 1: 4}},
			{"timestamp before every record", map[string]any{"topic": topic, "to": "timestamp", "value": at(-10).UnixMilli()}, map[int32]int64{0: 2, 1: 0}},
		} {
			var ans admResetAnswer
			admJSON(t, http.MethodPost, admOffsetsURL(g, group), tc.body, http.StatusOK, &ans)
			if ans.DryRun {
				t.Fatalf("%s: answered as a dry run", tc.name)
			}
			cm := committed()
			for part, want := range tc.want {
				o := cm[part]
				if o.CommittedOffset != want {
					t.Fatalf("%s: partition %d committed %d, want %d (%+v)", tc.name, part, o.CommittedOffset, want, cm)
				}
				if o.LastCommitTimestamp != nil || o.SidecarOffset != nil {
					t.Fatalf("%s: partition %d lastCommitTimestamp %v sidecarOffset %v after an admin reset, want null",
						tc.name, part, o.LastCommitTimestamp, o.SidecarOffset)
				}
				if o.Lag != o.LogEndOffset-want {
					t.Fatalf("%s: partition %d lag %d, want %d", tc.name, part, o.Lag, o.LogEndOffset-want)
				}
			}
		}
		// A shift needs a committed offset to shift from, as in Apache's tool.
		admJSON(t, http.MethodPost, admOffsetsURL(g, "never-committed"), map[string]any{"topic": topic, "to": "shift", "value": 1}, http.StatusBadRequest, nil)
		// The reset cleared the sidecar entries in Redis, not just in the answer.
		_, sidecar, _ := g.Store.OffsetKeys(group)
		if n, err := g.Store.Client().HLen(ctx, sidecar).Result(); err != nil || n != 0 {
			t.Fatalf("sidecar hash after resets: %d entries (%v), want none", n, err)
		}

		// Bad input.
		u := admOffsetsURL(g, group)
		admWantError(t, http.MethodPost, u, `{"topic":`, http.StatusBadRequest)
		admWantError(t, http.MethodPost, u, `{"topic":"`+topic+`","to":"earliest","bogus":1}`, http.StatusBadRequest)
		admWantError(t, http.MethodPost, u, map[string]any{"topic": topic, "to": "sideways"}, http.StatusBadRequest)
		admWantError(t, http.MethodPost, u, map[string]any{"topic": topic, "to": "offset", "value": 1, "partitions": []int32{5}}, http.StatusBadRequest)
		admWantError(t, http.MethodPost, u, map[string]any{"to": "earliest"}, http.StatusBadRequest)
		admWantError(t, http.MethodPost, u, map[string]any{"topic": "adm-no-such-topic", "to": "earliest"}, http.StatusNotFound)
		if cm := committed(); cm[0].CommittedOffset != 2 || cm[1].CommittedOffset != 0 {
			t.Fatalf("a rejected reset wrote: %+v", cm)
		}

		// Unknown group and topic.
		admWantError(t, http.MethodGet, admGroupURL(g, "adm-no-such-group"), nil, http.StatusNotFound)
		admWantError(t, http.MethodGet, admOffsetsURL(g, "adm-no-such-group"), nil, http.StatusNotFound)
		admWantError(t, http.MethodDelete, admGroupURL(g, "adm-no-such-group"), nil, http.StatusNotFound)
		admWantError(t, http.MethodGet, g.AdminURL+"/api/v1/topics/adm-no-such-topic", nil, http.StatusNotFound)
	})
}

// TestAdminGroups: the group list and detail while a consumer runs, and DELETE.
func TestAdminGroups(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 60*time.Second)
		const topic, group = "adm-groups", "adm-groups-group"
		admCreateTopics(t, ctx, newAdmin(t, g), 2, nil, topic)
		p := admProducer(t, g)
		admProduce(t, ctx, p, topic, 0, 5, nil)
		admProduce(t, ctx, p, topic, 1, 3, nil)

		c := admConsumer(t, g, group, topic)
		got := admPoll(t, ctx, c, map[string]int{topic: 8})
		var at0 *kgo.Record
		for _, r := range got[topic] {
			if r.Partition == 0 && r.Offset == 1 {
				at0 = r
			}
		}
		admCommit(t, ctx, c, at0) // partition 0 at 2: lag 3; partition 1 not committed

		d := admWaitState(t, g, group, "Stable")
		if d.Source != "coordinator" || d.ProtocolType != "consumer" || d.Protocol == "" || d.Generation < 1 {
			t.Fatalf("group detail %+v: want source coordinator, protocol type consumer, a protocol and generation", d)
		}
		if len(d.Members) != 1 {
			t.Fatalf("members %+v, want 1", d.Members)
		}
		m := d.Members[0]
		if m.MemberID == "" || m.ClientID != "kgate-admin-it" || m.ClientHost != "/127.0.0.1" {
			t.Fatalf("member %+v: want a member id, client id kgate-admin-it, host /127.0.0.1", m)
		}
		if ps := slices.Sorted(slices.Values(m.Assigned[topic])); !slices.Equal(ps, []int32{0, 1}) {
			t.Fatalf("assigned partitions %v, want %s: [0 1]", m.Assigned, topic)
		}
		if len(d.Offsets) != 1 || d.Offsets[0].CommittedOffset != 2 || d.Offsets[0].Lag != 3 || d.TotalLag != 3 {
			t.Fatalf("detail offsets %+v total lag %d: want partition 0 at 2, lag 3", d.Offsets, d.TotalLag)
		}

		var list []admGroupSummary
		admJSON(t, http.MethodGet, g.AdminURL+"/api/v1/groups", nil, http.StatusOK, &list)
		var s *admGroupSummary
		for i := range list {
			if list[i].Group == group {
				s = &list[i]
			}
		}
		if s == nil || s.State != "Stable" || s.Members != 1 || s.TotalLag != 3 || s.Source != "coordinator" {
			t.Fatalf("group list %+v: want %s Stable, 1 member, total lag 3", list, group)
		}

		// A group with members is neither reset nor deleted.
		admWantError(t, http.MethodDelete, admGroupURL(g, group), nil, http.StatusConflict)
		admWantError(t, http.MethodPost, admOffsetsURL(g, group), map[string]any{"topic": topic, "to": "latest"}, http.StatusConflict)

		c.Close()
		d = admWaitState(t, g, group, "Empty")
		if len(d.Members) != 0 || d.Offsets[0].CommittedOffset != 2 {
			t.Fatalf("Empty group detail %+v", d)
		}
		status, body := admCall(t, http.MethodDelete, admGroupURL(g, group), nil)
		if status != http.StatusNoContent {
			t.Fatalf("DELETE Empty group: %d %s", status, body)
		}
		canonical, sidecar, metadata := g.Store.OffsetKeys(group)
		for _, k := range []string{canonical, sidecar, metadata} {
			if n, err := g.Store.Client().Exists(ctx, k).Result(); err != nil || n != 0 {
				t.Fatalf("key %s after DELETE: exists=%d err=%v", k, n, err)
			}
		}
		admWantError(t, http.MethodGet, admGroupURL(g, group), nil, http.StatusNotFound)
		admJSON(t, http.MethodGet, g.AdminURL+"/api/v1/groups", nil, http.StatusOK, &list)
		for _, s := range list {
			if s.Group == group {
				t.Fatalf("deleted group still listed: %+v", list)
			}
		}
	})
}

// TestAdminTopics: create, list, describe (offsets, records, memory, configs) and delete topics.
func TestAdminTopics(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b, gatewayOpts{mutate: func(c *gateway.Config) { c.AutoCreateTopics = false }})
		ctx := testCtx(t, 60*time.Second)
		const topic = "adm-topics"
		topicsURL := g.AdminURL + "/api/v1/topics"

		var created admTopic
		admJSON(t, http.MethodPost, topicsURL, map[string]any{"name": topic, "partitions": 3,
			"configs": map[string]string{"retention.ms": "60000"}}, http.StatusCreated, &created)
		if created.Name != topic || len(created.Partitions) != 3 || created.ID == "" || created.Configs["retention.ms"] != "60000" {
			t.Fatalf("created %+v", created)
		}
		admWantError(t, http.MethodPost, topicsURL, map[string]any{"name": topic, "partitions": 1}, http.StatusConflict)
		// Kafka's '.'/'_' collision rule, as CreateTopics applies it.
		admJSON(t, http.MethodPost, topicsURL, map[string]any{"name": "adm_dots"}, http.StatusCreated, nil)
		admWantError(t, http.MethodPost, topicsURL, map[string]any{"name": "adm.dots"}, http.StatusBadRequest)
		if status, body := admCall(t, http.MethodDelete, topicsURL+"/adm_dots", nil); status != http.StatusNoContent {
			t.Fatalf("delete adm_dots: %d %s", status, body)
		}
		for _, bad := range []any{
			map[string]any{"name": "bad name!"},
			map[string]any{"name": ""},
			map[string]any{"name": ".."},
			map[string]any{"name": strings.Repeat("x", 250)},
			map[string]any{"name": "adm-topics-neg", "partitions": -1},
			map[string]any{"name": "adm-topics-huge", "partitions": 100_001},
			map[string]any{"name": "adm-topics-cfg", "configs": map[string]string{"retention.ms": "soon"}},
			map[string]any{"name": "adm-topics-unknown", "replicas": 3},
			`{"name":`,
		} {
			admWantError(t, http.MethodPost, topicsURL, bad, http.StatusBadRequest)
		}

		p := admProducer(t, g)
		admProduce(t, ctx, p, topic, 1, 5, nil)

		var list []admTopic
		admJSON(t, http.MethodGet, topicsURL, nil, http.StatusOK, &list)
		if len(list) != 1 || list[0].Name != topic || len(list[0].Partitions) != 3 || list[0].Records != 5 {
			t.Fatalf("topic list %+v: want only %s with 3 partitions and 5 records", list, topic)
		}

		var d admTopic
		admJSON(t, http.MethodGet, topicsURL+"/"+topic, nil, http.StatusOK, &d)
		if d.Name != topic || d.ID != created.ID || len(d.Partitions) != 3 || d.Records != 5 {
			t.Fatalf("topic %+v", d)
		}
		for _, pd := range d.Partitions {
			want := int64(0)
			if pd.Partition == 1 {
				want = 5
			}
			if pd.LogStartOffset != 0 || pd.LogEndOffset != want || pd.Records != want {
				t.Fatalf("partition %+v: want start 0, end and records %d", pd, want)
			}
			if (pd.MemoryBytes > 0) != (want > 0) {
				t.Fatalf("partition %+v: memoryBytes should be > 0 exactly for the partition with records", pd)
			}
		}
		if d.Configs["retention.ms"] != "60000" || d.Configs["cleanup.policy"] == "" {
			t.Fatalf("configs %v: want retention.ms 60000 and the defaults", d.Configs)
		}

		status, body := admCall(t, http.MethodDelete, topicsURL+"/"+topic, nil)
		if status != http.StatusNoContent {
			t.Fatalf("DELETE topic: %d %s", status, body)
		}
		admWantError(t, http.MethodGet, topicsURL+"/"+topic, nil, http.StatusNotFound)
		admWantError(t, http.MethodDelete, topicsURL+"/"+topic, nil, http.StatusNotFound)
		admJSON(t, http.MethodGet, topicsURL, nil, http.StatusOK, &list)
		if len(list) != 0 {
			t.Fatalf("topics after delete: %+v", list)
		}
	})
}

// TestAdminCluster: one gateway reports itself and the Redis behind it.
func TestAdminCluster(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		var v admClusterView
		admJSON(t, http.MethodGet, g.AdminURL+"/api/v1/cluster", nil, http.StatusOK, &v)
		wantMode := "standalone"
		if b.cluster {
			wantMode = "cluster"
		}
		if v.RedisMode != wantMode || v.RedisVersion == "" || !strings.Contains(v.RedisVersion, ".") {
			t.Fatalf("cluster view %+v: want redis mode %s and a version", v, wantMode)
		}
		if v.ClusterID == "" || len(v.Gateways) != 1 {
			t.Fatalf("cluster view %+v: want a cluster id and one gateway", v)
		}
		gw := v.Gateways[0]
		if gw.NodeID != 0 || !gw.Alive || gw.Advertised != g.AdvertisedAddr() || "http://"+gw.Admin != g.AdminURL {
			t.Fatalf("gateway %+v: want node 0 alive at %s, admin %s", gw, g.AdvertisedAddr(), g.AdminURL)
		}
	})
}

// admCoordinatedBy returns a group id that the gateway set {0, 1} places on node, as the gateway's
// coordinator choice does (FNV-1a over the registered set, sorted by node id).
func admCoordinatedBy(prefix string, node uint32) string {
	for i := 0; ; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		h := fnv.New32a()
		h.Write([]byte(name))
		if h.Sum32()%2 == node {
			return name
		}
	}
}

// TestAdminClusterTwoGateways: two gateways on one namespace see each other alive, count the groups
// each coordinates, and answer for a group coordinated by the other one.
func TestAdminClusterTwoGateways(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		fast := func(id int32) func(*gateway.Config) {
			return func(c *gateway.Config) {
				c.NodeID, c.HeartbeatInterval, c.NodeTimeout = id, 200*time.Millisecond, time.Second
			}
		}
		g0 := startGateway(t, b, gatewayOpts{mutate: fast(0)})
		g1 := startGateway(t, b, gatewayOpts{namespace: g0.Namespace, mutate: fast(1)})
		bothAlive := func(g *testGateway) bool { known, alive := admGatewaysSeen(t, g); return known == 2 && alive == 2 }
		waitFor(t, 10*time.Second, "both gateways alive on gateway 0", func() bool { return bothAlive(g0) })
		waitFor(t, 10*time.Second, "both gateways alive on gateway 1", func() bool { return bothAlive(g1) })

		ctx := testCtx(t, 60*time.Second)
		topic, group := "adm-two", admCoordinatedBy("adm-two-group", 1)
		admCreateTopics(t, ctx, newAdmin(t, g0), 1, nil, topic)
		admProduce(t, ctx, admProducer(t, g0), topic, 0, 4, nil)
		c := admConsumer(t, g0, group, topic) // bootstraps on 0, FindCoordinator sends it to 1
		got := admPoll(t, ctx, c, map[string]int{topic: 4})
		// Live on gateway 1 with nothing committed yet, the group is in Redis nowhere: gateway 0 lists it
		// from gateway 1's memory.
		var early []admGroupSummary
		admJSON(t, http.MethodGet, g0.AdminURL+"/api/v1/groups", nil, http.StatusOK, &early)
		if len(early) != 1 || early[0].Group != group || early[0].Members != 1 || early[0].Source != "coordinator" {
			t.Fatalf("group list on gateway 0 before any commit: %+v, want %s with its member", early, group)
		}
		var cv admClusterView
		admJSON(t, http.MethodGet, g0.AdminURL+"/api/v1/cluster", nil, http.StatusOK, &cv)
		for _, gw := range cv.Gateways {
			if gw.NodeID == 1 && gw.CoordinatedGroups != 1 {
				t.Fatalf("groups coordinated by node 1 before any commit, seen by node 0: %d, want 1", gw.CoordinatedGroups)
			}
		}
		admCommit(t, ctx, c, got[topic][0])

		d1 := admWaitState(t, g1, group, "Stable")
		d0 := admWaitState(t, g0, group, "Stable") // gateway 0 has no such group in memory
		for _, d := range []admGroupDetail{d0, d1} {
			if d.Source != "coordinator" || d.Coordinator != 1 || len(d.Members) != 1 || d.Members[0].MemberID != d1.Members[0].MemberID ||
				d.Generation != d1.Generation || len(d.Offsets) != 1 || d.Offsets[0].CommittedOffset != 1 {
				t.Fatalf("group detail %+v, want the coordinator's (node 1) live state %+v", d, d1)
			}
		}
		var list []admGroupSummary
		admJSON(t, http.MethodGet, g0.AdminURL+"/api/v1/groups", nil, http.StatusOK, &list)
		if len(list) != 1 || list[0].State != "Stable" || list[0].Members != 1 || list[0].Coordinator != 1 || list[0].Source != "coordinator" {
			t.Fatalf("group list on gateway 0: %+v", list)
		}
		// A reset on the non-coordinator is forwarded and refused there: the group has a member.
		admWantError(t, http.MethodPost, admOffsetsURL(g0, group), map[string]any{"topic": topic, "to": "earliest"}, http.StatusConflict)

		for _, g := range []*testGateway{g0, g1} {
			var v admClusterView
			admJSON(t, http.MethodGet, g.AdminURL+"/api/v1/cluster", nil, http.StatusOK, &v)
			counts := map[int32]int{}
			for _, gw := range v.Gateways {
				counts[gw.NodeID] = gw.CoordinatedGroups
				if gw.Admin == "" || gw.Advertised == "" {
					t.Fatalf("gateway view %+v lacks addresses", gw)
				}
			}
			if counts[0] != 0 || counts[1] != 1 {
				t.Fatalf("coordinated groups seen by node %d: %v, want node 1: 1", v.Self, counts)
			}
		}

		// With the coordinator gone, gateway 0 takes the group over and answers from Redis.
		c.Close()
		admWaitState(t, g1, group, "Empty")
		g1.Stop()
		waitFor(t, 10*time.Second, "gateway 0 to see gateway 1 down", func() bool {
			var v admClusterView
			admJSON(t, http.MethodGet, g0.AdminURL+"/api/v1/cluster", nil, http.StatusOK, &v)
			for _, gw := range v.Gateways {
				if gw.NodeID == 1 {
					return !gw.Alive
				}
			}
			return false
		})
		var d admGroupDetail
		admJSON(t, http.MethodGet, admGroupURL(g0, group), nil, http.StatusOK, &d)
		if d.Source != "redis" || d.State != "Empty" || d.Coordinator != 0 || len(d.Offsets) != 1 || d.Offsets[0].CommittedOffset != 1 {
			t.Fatalf("group detail after the coordinator stopped: %+v, want Empty from redis on node 0", d)
		}
	})
}

// TestAdminHealth: /healthz, and /readyz following Redis.
func TestAdminHealth(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		for _, path := range []string{"/healthz", "/readyz"} {
			if status, body := admCall(t, http.MethodGet, g.AdminURL+path, nil); status != http.StatusOK {
				t.Fatalf("GET %s: %d %s", path, status, body)
			}
		}
	})
	t.Run("redis down", func(t *testing.T) {
		t.Parallel()
		srv, err := redistest.Start()
		if err != nil {
			t.Fatalf("redis-server: %v", err)
		}
		t.Cleanup(srv.Stop) // after the gateway's cleanup, which runs first
		g := startGateway(t, backend{name: "dedicated", addrs: []string{srv.Addr}})
		if status, body := admCall(t, http.MethodGet, g.AdminURL+"/readyz", nil); status != http.StatusOK {
			t.Fatalf("readyz with redis up: %d %s", status, body)
		}
		srv.Stop()
		waitFor(t, 20*time.Second, "readyz 503 with redis down", func() bool {
			status, _ := admCall(t, http.MethodGet, g.AdminURL+"/readyz", nil)
			return status == http.StatusServiceUnavailable
		})
		if status, body := admCall(t, http.MethodGet, g.AdminURL+"/healthz", nil); status != http.StatusOK {
			t.Fatalf("healthz with redis down: %d %s (the process is up)", status, body)
		}
	})
}

// admGatewaysSeen is how many gateways g's admin API lists, and how many of them alive.
func admGatewaysSeen(t *testing.T, g *testGateway) (known, alive int) {
	t.Helper()
	var v admClusterView
	admJSON(t, http.MethodGet, g.AdminURL+"/api/v1/cluster", nil, http.StatusOK, &v)
	for _, gw := range v.Gateways {
		if gw.Alive {
			alive++
		}
	}
	return len(v.Gateways), alive
}

// TestAdminGroupChangeNeedsItsCoordinator: a reset or delete of a group sent to a gateway that does not
// coordinate it, when the coordinator cannot be asked (it serves no admin API), is refused with 503
// instead of changing the offsets of a group that may have members.
func TestAdminGroupChangeNeedsItsCoordinator(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		fast := func(id int32, admin bool) func(*gateway.Config) {
			return func(c *gateway.Config) {
				c.NodeID, c.HeartbeatInterval, c.NodeTimeout = id, 200*time.Millisecond, time.Second
				if !admin {
					c.AdminListen = ""
				}
			}
		}
		g0 := startGateway(t, b, gatewayOpts{mutate: fast(0, true)})
		startGateway(t, b, gatewayOpts{namespace: g0.Namespace, mutate: fast(1, false)}) // coordinates the group, no admin API
		waitFor(t, 10*time.Second, "both gateways alive on gateway 0", func() bool { _, alive := admGatewaysSeen(t, g0); return alive == 2 })
		time.Sleep(600 * time.Millisecond) // gateway 0's view settles (two heartbeat intervals): gateway 1 coordinates
		ctx := testCtx(t, 60*time.Second)
		topic, group := "adm-far", admCoordinatedBy("adm-far-group", 1)
		admCreateTopics(t, ctx, newAdmin(t, g0), 1, nil, topic)
		admProduce(t, ctx, admProducer(t, g0), topic, 0, 3, nil)
		c := admConsumer(t, g0, group, topic)
		got := admPoll(t, ctx, c, map[string]int{topic: 3})
		admCommit(t, ctx, c, got[topic][2])

		admWantError(t, http.MethodPost, admOffsetsURL(g0, group), map[string]any{"topic": topic, "to": "earliest"}, http.StatusServiceUnavailable)
		admWantError(t, http.MethodDelete, admGroupURL(g0, group), nil, http.StatusServiceUnavailable)
		offs, err := newAdmin(t, g0).FetchOffsets(ctx, group)
		if err != nil {
			t.Fatal(err)
		}
		if o, ok := offs.Lookup(topic, 0); !ok || o.At != 3 {
			t.Fatalf("committed offset after the refused changes: %+v (found %v), want 3", o, ok)
		}
	})
}

// GET /api/v1/groups asks each group's coordinating peer for its live state, a second at most; a peer
// whose admin API takes connections and never answers costs that second about once, not once per
// group it coordinates (groups are summarised a few at a time, and a peer that did not answer is not
// asked again). The list still comes, from Redis.
func TestAdminGroupsPeerNotAnswering(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		stall := stallingPeer(t, nil) // accepts and never answers, until the test ends
		g0 := gatewaysWithStalledPeer(t, b, stall)
		ctx := testCtx(t, 60*time.Second)
		topic := "adm-stalled-peer"
		adm := newAdmin(t, g0)
		admCreateTopics(t, ctx, adm, 1, nil, topic)
		const groups = 6
		for k := range groups {
			group := admCoordinatedBy(fmt.Sprintf("adm-stalled-%d", k), 1)
			offs := kadm.Offsets{}
			offs.Add(kadm.Offset{Topic: topic, Partition: 0, At: 0, LeaderEpoch: -1})
			resp, err := adm.CommitOffsets(ctx, group, offs)
			if err == nil {
				err = resp.Error()
			}
			if err != nil {
				t.Fatalf("commit for %s: %v", group, err)
			}
		}
		start := time.Now()
		var list []admGroupSummary
		admJSON(t, http.MethodGet, g0.AdminURL+"/api/v1/groups", nil, http.StatusOK, &list)
		took := time.Since(start)
		if len(list) != groups {
			t.Fatalf("group list: %+v, want the %d groups", list, groups)
		}
		for _, gs := range list {
			if gs.Coordinator != 1 || gs.Source != "redis" {
				t.Fatalf("group %+v, want coordinated by 1 and read from Redis", gs)
			}
		}
		// One by one, each group waited out the peer's second: 6 s at least.
		if took > 4*time.Second {
			t.Fatalf("the list took %v with a peer that does not answer, want about one peer timeout", took)
		}
	})
}

// TestAdminForwardBrokenAnswer: a group request forwarded to its coordinator, which sends the headers
// of its answer and then stalls, is answered by the gateway asked, from Redis, once the forward times
// out; the reverse proxy used before aborted the request and the client got a dropped connection.
func TestAdminForwardBrokenAnswer(t *testing.T) {
	t.Parallel()
	b := backends()[0]
	stall := stallingPeer(t, func(c net.Conn) { // headers and the start of a body, then nothing
		buf := make([]byte, 4096)
		_, _ = c.Read(buf)
		_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"group\":"))
	})
	g0 := gatewaysWithStalledPeer(t, b, stall)
	group := admCoordinatedBy("adm-broken-answer", 1)
	ctx := testCtx(t, 30*time.Second)
	adm := newAdmin(t, g0)
	admCreateTopics(t, ctx, adm, 1, nil, "adm-broken-answer")
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "adm-broken-answer", Partition: 0, At: 0, LeaderEpoch: -1})
	if resp, err := adm.CommitOffsets(ctx, group, offs); err != nil || resp.Error() != nil {
		t.Fatalf("commit for %s: %v %v", group, err, resp.Error())
	}
	var d admGroupDetail
	start := time.Now()
	admJSON(t, http.MethodGet, admGroupURL(g0, group), nil, http.StatusOK, &d)
	if d.Group != group || d.Source != "redis" {
		t.Fatalf("group answer %+v, want %s read from Redis by gateway 0", d, group)
	}
	if took := time.Since(start); took < 4*time.Second {
		t.Fatalf("answered after %v: the request was not forwarded (the forward gives up after 5 s)", took)
	}
}

// stallingPeer listens on 127.0.0.1 as a peer's admin API that never finishes an answer: each
// connection is handed to talk (which may write part of an answer; nil: nothing), then held open
// until the test ends. It returns the listener's address.
func stallingPeer(t *testing.T, talk func(net.Conn)) string {
	stall, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepting, talking sync.WaitGroup
	var conns []net.Conn // appended by the accept loop alone, read once it is done
	accepting.Go(func() {
		for {
			c, err := stall.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			if talk != nil {
				talking.Go(func() { talk(c) })
			}
		}
	})
	t.Cleanup(func() {
		stall.Close()
		accepting.Wait()
		for _, c := range conns {
			c.Close()
		}
		talking.Wait()
	})
	return stall.Addr().String()
}

// gatewaysWithStalledPeer starts gateway 0 and gateway 1 (200 ms heartbeats), gateway 1 advertising
// stall as its admin API, and returns gateway 0 once its view holds both and has settled, so gateway
// 1 coordinates the groups that hash to it.
func gatewaysWithStalledPeer(t *testing.T, b backend, stall string) *testGateway {
	t.Helper()
	g0, _ := gatewayPairWithPeerAdmin(t, b, stall)
	return g0
}

// gatewayPairWithPeerAdmin is gatewaysWithStalledPeer, returning gateway 1 too: gateway 1 advertises
// admin as its admin API (its own listener serves on another address).
func gatewayPairWithPeerAdmin(t *testing.T, b backend, admin string) (g0, g1 *testGateway) {
	t.Helper()
	fast := func(id int32, advertise string) func(*gateway.Config) {
		return func(c *gateway.Config) {
			c.NodeID, c.HeartbeatInterval, c.NodeTimeout = id, 200*time.Millisecond, time.Second
			if advertise != "" {
				c.AdminAdvertised = advertise
			}
		}
	}
	g0 = startGateway(t, b, gatewayOpts{mutate: fast(0, "")})
	g1 = startGateway(t, b, gatewayOpts{namespace: g0.Namespace, mutate: fast(1, admin)})
	waitFor(t, 10*time.Second, "both gateways alive on gateway 0", func() bool { _, alive := admGatewaysSeen(t, g0); return alive == 2 })
	time.Sleep(600 * time.Millisecond) // gateway 0's view settles (two heartbeat intervals)
	return g0, g1
}

// answerLosingPeer listens on 127.0.0.1 in front of a peer's admin API (target, stored once known;
// until then connections are closed at once): each request goes through to the peer, and the
// connection is closed as soon as the peer's answer begins, that answer dropped, as when a network
// fails after the peer has acted. It returns the listener's address.
func answerLosingPeer(t *testing.T) (string, *atomic.Value) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var target atomic.Value
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				addr, _ := target.Load().(string)
				if addr == "" {
					return
				}
				up, err := net.Dial("tcp", addr)
				if err != nil {
					return
				}
				defer up.Close()
				wg.Go(func() { _, _ = io.Copy(up, c) }) // ends when either side is closed below
				var b [1]byte
				_, _ = up.Read(b[:]) // the answer begins: the request was handled
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln.Addr().String(), &target
}

// TestAdminResetForwardAnswerLost: a reset sent to a gateway that does not coordinate the group is
// forwarded to the coordinator, which applies it; when its answer is then lost, the outcome is unknown
// and the caller is told so (504, read the offsets before retrying). It was told 503, retry, and a
// "shift" sent again moved the offsets twice. Where the request surely did not reach the coordinator
// (its admin address refuses connections), the answer stays 503 and nothing moved.
func TestAdminResetForwardAnswerLost(t *testing.T) {
	t.Parallel()
	b := backends()[0]
	const topic = "adm-lost-answer"
	setUp := func(t *testing.T, peerAdmin string, group string) (g0, g1 *testGateway) {
		g0, g1 = gatewayPairWithPeerAdmin(t, b, peerAdmin)
		ctx := testCtx(t, 30*time.Second)
		adm := newAdmin(t, g0)
		admCreateTopics(t, ctx, adm, 1, nil, topic)
		admProduce(t, ctx, admProducer(t, g0), topic, 0, 5, nil)
		offs := kadm.Offsets{}
		offs.Add(kadm.Offset{Topic: topic, Partition: 0, At: 1, LeaderEpoch: -1})
		if resp, err := adm.CommitOffsets(ctx, group, offs); err != nil || resp.Error() != nil {
			t.Fatalf("commit for %s: %v %v", group, err, resp.Error())
		}
		return g0, g1
	}
	shift := map[string]any{"topic": topic, "to": "shift", "value": 1}

	t.Run("answer lost", func(t *testing.T) {
		peer, target := answerLosingPeer(t)
		group := admCoordinatedBy("adm-lost-answer", 1)
		g0, g1 := setUp(t, peer, group)
		target.Store(g1.AdminAddr().String())
		msg := admWantError(t, http.MethodPost, admOffsetsURL(g0, group), shift, http.StatusGatewayTimeout)
		if !strings.Contains(msg, "outcome is unknown") || !strings.Contains(msg, "offsets") {
			t.Fatalf("504 says %q; want that the outcome is unknown and to read the offsets", msg)
		}
		// The coordinator applied the shift once.
		if o := admFindOffset(t, admOffsets(t, g0, group, topic), topic, 0); o.CommittedOffset != 2 {
			t.Fatalf("committed offset after the forwarded shift: %d, want 2 (1 shifted by 1)", o.CommittedOffset)
		}
		// A deletion whose answer is lost is as unknown.
		msg = admWantError(t, http.MethodDelete, admGroupURL(g0, group), nil, http.StatusGatewayTimeout)
		if !strings.Contains(msg, "outcome is unknown") || !strings.Contains(msg, "read the group (") {
			t.Fatalf("504 says %q; want that the outcome is unknown and to read the group", msg)
		}
	})
	t.Run("connection refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		refused := ln.Addr().String()
		ln.Close()
		group := admCoordinatedBy("adm-refused", 1)
		g0, _ := setUp(t, refused, group)
		msg := admWantError(t, http.MethodPost, admOffsetsURL(g0, group), shift, http.StatusServiceUnavailable)
		if !strings.Contains(msg, "retry") {
			t.Fatalf("503 says %q; want retry", msg)
		}
		if o := admFindOffset(t, admOffsets(t, g0, group, topic), topic, 0); o.CommittedOffset != 1 {
			t.Fatalf("committed offset after the refused shift: %d, want 1, unmoved", o.CommittedOffset)
		}
	})
}

// TestAdminReportsRedisDown: with the one Redis down no partition of a report can be read, and the
// offset and topic reports answer 503, as before they answered partitions one by one, so health
// tooling still sees the outage.
func TestAdminReportsRedisDown(t *testing.T) {
	srv, err := redistest.Start()
	if err != nil {
		t.Fatalf("redis-server: %v", err)
	}
	t.Cleanup(srv.Stop) // after the gateway's cleanup, which runs first
	g := startGateway(t, backend{name: "dedicated", addrs: []string{srv.Addr}}, gatewayOpts{store: func(o *redisstore.Options) {
		o.CommandTimeout = time.Second
	}})
	ctx := testCtx(t, 60*time.Second)
	adm := newAdmin(t, g)
	admCreateTopics(t, ctx, adm, 3, nil, "adm-down")
	offs := kadm.Offsets{}
	for p := range int32(3) {
		offs.Add(kadm.Offset{Topic: "adm-down", Partition: p, At: 0, LeaderEpoch: -1})
	}
	if resp, err := adm.CommitOffsets(ctx, "adm-down-group", offs); err != nil || resp.Error() != nil {
		t.Fatalf("commit: %v %v", err, resp.Error())
	}
	admJSON(t, http.MethodGet, g.AdminURL+"/api/v1/topics/adm-down", nil, http.StatusOK, nil) // the topic's entry cached
	srv.Stop()
	for _, path := range []string{"/api/v1/topics/adm-down", "/api/v1/topics", "/api/v1/groups", "/api/v1/groups/adm-down-group",
		"/api/v1/groups/adm-down-group/offsets"} {
		admWantError(t, http.MethodGet, g.AdminURL+path, nil, http.StatusServiceUnavailable)
	}
}
