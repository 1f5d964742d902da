package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/coordinator"
	"github.com/kgate/kgate/internal/redistest"
	"github.com/kgate/kgate/redisstore"
)

// TestDeleteGroupOrderedWithCommits: a DeleteGroups racing a commit of the same group runs wholly
// before or wholly after it, as under Apache's group lock. Interleaved, the commit's Redis consumer
// group outlived the deleted offsets (or the offsets outlived the group's listing). After each race the
// group's offsets, its Redis consumer group and its listing agree.
func TestDeleteGroupOrderedWithCommits(t *testing.T) {
	ctx, _, store := embeddedGateway(t, Config{})
	g, _ := serveOn(t, store, Config{})
	createTopic(t, store, "raced", 1)
	const group = "racing"
	c := fetchConn(t, g)
	commit := func(offset int64) {
		resp, err := c.offsetCommit(ctx, commitRequest(group, -1, "", "raced", offset, 0))
		if err != nil {
			t.Error(err)
			return
		}
		if code := resp.(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode; code != 0 {
			t.Errorf("commit: error %d", code)
		}
	}
	redisGroup := func() bool {
		gs, _ := store.Client().XInfoGroups(ctx, store.StreamKey("raced", 0)).Result()
		return slices.ContainsFunc(gs, func(x redis.XInfoGroup) bool { return x.Name == group })
	}
	inconsistent := 0
	for i := range 300 {
		commit(int64(i)) // the group exists, so the deletion below has something to delete
		var wg sync.WaitGroup
		wg.Go(func() { commit(int64(i)) })
		wg.Go(func() {
			if code := g.deleteGroup(ctx, group); code != 0 {
				t.Errorf("delete: error %d", code)
			}
		})
		wg.Wait()
		offsets, err := store.GroupExists(ctx, group)
		if err != nil {
			t.Fatal(err)
		}
		listed, _, err := store.Groups(context.WithoutCancel(ctx))
		if err != nil {
			t.Fatal(err)
		}
		if rg, l := redisGroup(), slices.Contains(listed, group); rg != offsets || l != offsets {
			inconsistent++
			if inconsistent <= 3 {
				t.Errorf("race %d: offsets %v, Redis consumer group %v, listed %v; want all alike", i, offsets, rg, l)
			}
		}
	}
	if inconsistent > 0 {
		t.Fatalf("%d of 300 races left the group inconsistent", inconsistent)
	}
}

// offsetDeleteCodes runs an OffsetDelete of group on c and returns its top-level error and each
// partition's ("topic/partition" -> code).
func offsetDeleteCodes(t *testing.T, c *conn, group string, parts map[string][]int32) (int16, map[string]int16) {
	t.Helper()
	req := kmsg.NewPtrOffsetDeleteRequest()
	req.Group = group
	for topic, ps := range parts {
		rt := kmsg.NewOffsetDeleteRequestTopic()
		rt.Topic = topic
		for _, p := range ps {
			rp := kmsg.NewOffsetDeleteRequestTopicPartition()
			rp.Partition = p
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	resp, err := c.offsetDelete(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	r := resp.(*kmsg.OffsetDeleteResponse)
	codes := map[string]int16{}
	for _, st := range r.Topics {
		for _, sp := range st.Partitions {
			codes[fmt.Sprintf("%s/%d", st.Topic, sp.Partition)] = sp.ErrorCode
		}
	}
	return r.ErrorCode, codes
}

// TestOffsetDeleteUnknownPartitions: OffsetDelete of a partition of no known topic answers
// UNKNOWN_TOPIC_OR_PARTITION, as Apache, instead of success; but an offset the group has there (a
// deleted topic's, which kgate keeps) is deleted.
func TestOffsetDeleteUnknownPartitions(t *testing.T) {
	ctx, _, store := embeddedGateway(t, Config{})
	g, _ := serveOn(t, store, Config{})
	createTopic(t, store, "od", 2)
	commits := []redisstore.OffsetCommit{{Topic: "od", Partition: 0, Offset: 1}, {Topic: "od-deleted", Partition: 0, Offset: 2}}
	for _, err := range store.CommitOffsets(ctx, "od-group", "", commits, time.Now()) {
		if err != nil {
			t.Fatal(err)
		}
	}
	top, codes := offsetDeleteCodes(t, fetchConn(t, g), "od-group", map[string][]int32{"od": {0, 7}, "no-such-topic": {0}, "od-deleted": {0}})
	want := map[string]int16{"od/0": 0, "od/7": kerr.UnknownTopicOrPartition.Code, "no-such-topic/0": kerr.UnknownTopicOrPartition.Code, "od-deleted/0": 0}
	if top != 0 || !maps.Equal(codes, want) {
		t.Fatalf("OffsetDelete: error %d, %v; want 0, %v", top, codes, want)
	}
	if cs, err := store.CommittedOffsets(ctx, "od-group"); err != nil || len(cs) != 0 {
		t.Fatalf("committed after the delete: %+v, %v; want none", cs, err)
	}
}

// TestOffsetDeleteCoordinatorClosed: while the coordinator is closing (the gateway shutting down, its
// lease not yet handed over) it cannot tell whether a group has members, and OffsetDelete answers
// COORDINATOR_NOT_AVAILABLE instead of taking the group for one without members and deleting offsets
// a live group may be using. DescribeGroups answers the same instead of "Empty".
func TestOffsetDeleteCoordinatorClosed(t *testing.T) {
	ctx, _, store := embeddedGateway(t, Config{})
	g, _ := serveOn(t, store, Config{})
	createTopic(t, store, "cc", 1)
	if errs := store.CommitOffsets(ctx, "cc-group", "", []redisstore.OffsetCommit{{Topic: "cc", Partition: 0, Offset: 3}}, time.Now()); errs[0] != nil {
		t.Fatal(errs[0])
	}
	g.coord.Close()
	c := fetchConn(t, g)
	if top, codes := offsetDeleteCodes(t, c, "cc-group", map[string][]int32{"cc": {0}}); top != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("OffsetDelete: error %d, %v; want COORDINATOR_NOT_AVAILABLE (%d)", top, codes, kerr.CoordinatorNotAvailable.Code)
	}
	if cs, err := store.CommittedOffsets(ctx, "cc-group"); err != nil || len(cs) != 1 {
		t.Fatalf("committed after the refused delete: %+v, %v; want the offset kept", cs, err)
	}
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{"cc-group"}
	resp, err := c.describeGroups(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if dg := resp.(*kmsg.DescribeGroupsResponse).Groups[0]; dg.ErrorCode != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("DescribeGroups: error %d state %q; want COORDINATOR_NOT_AVAILABLE", dg.ErrorCode, dg.State)
	}
}

// blockingWriter is a ResponseWriter whose body writes wait until release is closed: a client that
// does not read its answer.
type blockingWriter struct {
	header  http.Header
	writing chan struct{} // closed at the first body write
	release chan struct{}
	once    sync.Once
}

func (w *blockingWriter) Header() http.Header { return w.header }
func (w *blockingWriter) WriteHeader(int)     {}
func (w *blockingWriter) Write(b []byte) (int, error) {
	w.once.Do(func() { close(w.writing) })
	<-w.release
	return len(b), nil
}

// TestAdminResetReleasesGroupBeforeAnswering: an admin offset reset holds the group's writes from its
// check of the group to its commit, not while its answer goes to the client. A client that did not
// read a large answer kept the lock, and a deletion waiting for it held up the commits of every group
// sharing its stripe.
func TestAdminResetReleasesGroupBeforeAnswering(t *testing.T) {
	_, _, store := embeddedGateway(t, Config{})
	g, _ := serveOn(t, store, Config{})
	createTopic(t, store, "reset", 1)
	w := &blockingWriter{header: http.Header{}, writing: make(chan struct{}), release: make(chan struct{})}
	defer close(w.release)
	req := httptest.NewRequest(http.MethodPost, "/api/v1/groups/resetting/offsets", strings.NewReader(`{"topic":"reset","to":"earliest"}`))
	req.Header.Set("Content-Type", "application/json")
	go g.adminHandler().ServeHTTP(w, req)
	select {
	case <-w.writing:
	case <-time.After(10 * time.Second):
		t.Fatal("the reset did not answer")
	}
	locked := make(chan struct{})
	go func() {
		g.writes.delete("resetting")()
		close(locked)
	}()
	select {
	case <-locked:
	case <-time.After(5 * time.Second):
		t.Fatal("the group's writes are still held while the answer waits for its client")
	}
}

// TestOffsetFetchErrorListsNoPartitions: an OffsetFetch the coordinator cannot answer (here Redis is
// gone) carries its error with no partitions from v2 on, as on Apache; listed with offset -1 and no
// error of their own, they read as "no commit" to Sarama, which starts them over from its initial
// offset. v0-v1 have no group-level error, and carry it on each partition.
func TestOffsetFetchErrorListsNoPartitions(t *testing.T) {
	ctx := t.Context()
	m := startMiniredis(t)
	store := openStoreAt(t, m.Addr(), redisstore.Options{CommandTimeout: 500 * time.Millisecond})
	g, _ := serveOn(t, store, Config{})
	createTopic(t, store, "of", 1)
	if errs := store.CommitOffsets(ctx, "of-group", "", []redisstore.OffsetCommit{{Topic: "of", Partition: 0, Offset: 42}}, time.Now()); errs[0] != nil {
		t.Fatal(errs[0])
	}
	m.Close()
	c := fetchConn(t, g)
	for _, v := range []int16{1, 5, 8} {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Version = v
		rt := kmsg.NewOffsetFetchRequestTopic()
		rt.Topic, rt.Partitions = "of", []int32{0}
		req.Group, req.Topics = "of-group", []kmsg.OffsetFetchRequestTopic{rt}
		if v >= 8 {
			rg := kmsg.NewOffsetFetchRequestGroup()
			gt := kmsg.NewOffsetFetchRequestGroupTopic()
			gt.Topic, gt.Partitions = "of", []int32{0}
			rg.Group, rg.Topics = "of-group", []kmsg.OffsetFetchRequestGroupTopic{gt}
			req.Groups = []kmsg.OffsetFetchRequestGroup{rg}
		}
		r, err := c.offsetFetch(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		resp := r.(*kmsg.OffsetFetchResponse)
		want := kerr.CoordinatorNotAvailable.Code
		switch {
		case v >= 8:
			if gr := resp.Groups[0]; gr.ErrorCode != want || len(gr.Topics) != 0 {
				t.Errorf("v%d: group error %d with %d topics; want %d and none", v, gr.ErrorCode, len(gr.Topics), want)
			}
		case v >= 2:
			if resp.ErrorCode != want || len(resp.Topics) != 0 {
				t.Errorf("v%d: error %d with %d topics; want %d and none", v, resp.ErrorCode, len(resp.Topics), want)
			}
		default:
			if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 || resp.Topics[0].Partitions[0].ErrorCode != want {
				t.Errorf("v%d: %+v; want the partition with error %d", v, resp.Topics, want)
			}
		}
	}
}

// TestOffsetCommitUnknownTopicBeforeMember: a commit's unknown topics and partitions answer
// UNKNOWN_TOPIC_OR_PARTITION whatever the committer's generation, as Apache checks them before asking
// the coordinator; the known partitions of the same request get the coordinator's verdict.
func TestOffsetCommitUnknownTopicBeforeMember(t *testing.T) {
	ctx, _, store := embeddedGateway(t, Config{})
	g, _ := serveOn(t, store, Config{})
	createTopic(t, store, "oc", 1)
	req := commitRequest("oc-group", 5, "stale", "no-such-topic", 1, 0)
	req.Topics = append(req.Topics, commitRequest("", 0, "", "oc", 1, 3).Topics[0], commitRequest("", 0, "", "oc", 1, 0).Topics[0])
	r, err := fetchConn(t, g).offsetCommit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var got []int16
	for _, rt := range r.(*kmsg.OffsetCommitResponse).Topics {
		got = append(got, rt.Partitions[0].ErrorCode)
	}
	want := []int16{kerr.UnknownTopicOrPartition.Code, kerr.UnknownTopicOrPartition.Code, kerr.IllegalGeneration.Code}
	if !slices.Equal(got, want) {
		t.Fatalf("codes %v, want %v", got, want)
	}
}

// TestOffsetCommitV9UnknownGroupIllegalGeneration pins a deliberate deviation: a commit of generation
// >= 0 to a group the coordinator does not know is ILLEGAL_GENERATION at v9 too, where Apache answers
// GROUP_ID_NOT_FOUND from v9 on. Membership lives in memory, so that is every group after a coordinator
// restart, and ILLEGAL_GENERATION makes a classic consumer rejoin (docs/COMPATIBILITY.md).
func TestOffsetCommitV9UnknownGroupIllegalGeneration(t *testing.T) {
	ctx, _, store := embeddedGateway(t, Config{})
	g, _ := serveOn(t, store, Config{})
	createTopic(t, store, "oc9", 1)
	for _, v := range []int16{8, 9} {
		req := commitRequest("oc9-group", 3, "member", "oc9", 1, 0)
		req.Version = v
		r, err := fetchConn(t, g).offsetCommit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode; got != kerr.IllegalGeneration.Code {
			t.Errorf("v%d: error %d, want ILLEGAL_GENERATION", v, got)
		}
	}
}

// TestCommitMetadataCountedAsApache: commit metadata is limited to 4096 UTF-16 code units, the length
// of a Java string, which Apache compares with offset.metadata.max.bytes: non-ASCII metadata of more
// bytes but fewer units is accepted, as there.
func TestCommitMetadataCountedAsApache(t *testing.T) {
	for _, tc := range []struct {
		name string
		md   string
		want bool
	}{
		{"4096 ASCII", strings.Repeat("a", 4096), false},
		{"4097 ASCII", strings.Repeat("a", 4097), true},
		{"3000 two-byte letters", strings.Repeat("é", 3000), false},
		{"4097 two-byte letters", strings.Repeat("é", 4097), true},
		{"2048 emoji, two units each", strings.Repeat("😀", 2048), false},
		{"2049 emoji", strings.Repeat("😀", 2049), true},
	} {
		if got := commitMetadataTooLarge(tc.md); got != tc.want {
			t.Errorf("%s (%d bytes): too large %v, want %v", tc.name, len(tc.md), got, tc.want)
		}
	}
}

// TestAdminResetRefusedWhenMemberJoined: an admin offset reset checks again, as the coordinator checks
// a commit of generation -1, just before it commits: a consumer that joined while the reset read
// Redis goes on from the offsets it fetched, and the reset answered 200 for offsets it would never see
// and overwrite at its next commit.
func TestAdminResetRefusedWhenMemberJoined(t *testing.T) {
	ctx := t.Context()
	m := startMiniredis(t)
	p := redistest.StartProxy(t, m.Addr())
	store := openStoreAt(t, p.Addr(), redisstore.Options{})
	g, _ := serveOn(t, store, Config{Groups: coordinator.Config{InitialRebalanceDelay: -1}})
	createTopic(t, store, "rt", 1)
	holdTopicView(t, ctx, g)
	// The group is claimed already (a commit or a join here would have), so the reset's first Redis
	// round trip is one of its reads, after its first check of the group.
	if _, err := g.claimGroup(ctx, "joined"); err != nil {
		t.Fatal(err)
	}
	p.Hold() // the reset's reads of Redis wait
	answered := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		w, _ := adminPost(g, "/api/v1/groups/joined/offsets", `{"topic":"rt","to":"latest"}`)
		answered <- w
	}()
	time.Sleep(100 * time.Millisecond) // the reset has checked the group (Empty) and reads Redis
	joinMember(t, ctx, fetchConn(t, g), 5, "joined")
	if d, _ := g.coord.Describe(ctx, "joined"); len(d.Members) != 1 {
		t.Fatalf("members after the join: %+v", d.Members)
	}
	p.Release()
	select {
	case w := <-answered:
		if w.Code != http.StatusConflict {
			t.Fatalf("reset answered %d (%s) with a member in the group, want 409", w.Code, w.Body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the reset did not answer")
	}
	if cs, err := store.CommittedOffsets(ctx, "joined"); err != nil || len(cs) != 0 {
		t.Fatalf("committed: %+v, %v; want nothing", cs, err)
	}
}

// TestAdminPostsNeedJSON: the admin API's POSTs take a body sent as application/json only (415
// otherwise), which a web page cannot have a browser send without asking first: an operator's browser
// on a hostile page cannot reset offsets or create topics. A reset lists each partition once.
func TestAdminPostsNeedJSON(t *testing.T) {
	ctx, _, store := embeddedGateway(t, Config{})
	g, _ := serveOn(t, store, Config{})
	createTopic(t, store, "pj", 2)
	post := func(path, contentType, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		w := httptest.NewRecorder()
		g.adminHandler().ServeHTTP(w, req)
		return w
	}
	for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded"} {
		if w := post("/api/v1/groups/pj-group/offsets", ct, `{"topic":"pj","to":"latest"}`); w.Code != http.StatusUnsupportedMediaType {
			t.Errorf("reset sent as %q: %d, want 415", ct, w.Code)
		}
		if w := post("/api/v1/topics", ct, `{"name":"pj-new","partitions":1}`); w.Code != http.StatusUnsupportedMediaType {
			t.Errorf("topic created from a body sent as %q: %d, want 415", ct, w.Code)
		}
	}
	if cs, err := store.CommittedOffsets(ctx, "pj-group"); err != nil || len(cs) != 0 {
		t.Fatalf("committed: %+v, %v; want nothing", cs, err)
	}
	if _, err := store.Topic(ctx, "pj-new"); err == nil {
		t.Fatal("topic created")
	}
	w := post("/api/v1/groups/pj-group/offsets", "application/json; charset=utf-8", `{"topic":"pj","to":"latest","dryRun":true,"partitions":[1,0,1,1,0]}`)
	if w.Code != http.StatusOK || strings.Count(w.Body.String(), `"partition"`) != 2 {
		t.Fatalf("reset of partitions [1,0,1,1,0]: %d %s; want 200 with two partitions", w.Code, w.Body)
	}
}

// TestAskPeerGroupIDsAndSilence: a peer is asked for the live state of groups "." and ".." too (legal
// group ids, which an unescaped path turns into a redirect), and counts as silent, its other groups
// then shown from Redis alone, only when it does not answer: a 404 for a group deleted meanwhile did
// so for every group it coordinates.
func TestAskPeerGroupIDsAndSilence(t *testing.T) {
	ctx, _, store := embeddedGateway(t, Config{})
	peer, _ := serveOn(t, store, Config{Groups: coordinator.Config{InitialRebalanceDelay: -1}})
	srv := httptest.NewServer(peer.adminHandler())
	defer srv.Close()
	for _, group := range []string{".", ".."} {
		if r, err := fetchConn(t, peer).joinGroup(ctx, joinRequest(3, group)); err != nil || r.(*kmsg.JoinGroupResponse).ErrorCode != 0 {
			t.Fatalf("join %q: %v %+v", group, err, r)
		}
	}
	asker, _ := serveOn(t, store, Config{NodeID: 7})
	n := gatewayNode{ID: peer.cfg.NodeID, Admin: srv.Listener.Addr().String()}
	for _, group := range []string{".", ".."} {
		if d, ok, _ := asker.askPeerAnswered(ctx, n, group); !ok || len(d.Members) != 1 {
			t.Errorf("group %q: ok %v, %+v; want its one member", group, ok, d)
		}
	}
	if _, ok, answered := asker.askPeerAnswered(ctx, n, "no-such-group"); ok || !answered {
		t.Errorf("unknown group: ok %v answered %v; want a peer that answered without it", ok, answered)
	}
	// In the group list: a group the peer no longer has (404) leaves the peer's next group asked.
	var silent sync.Map
	heldBy := map[string]gatewayNode{"no-such-group": n, ".": n}
	for _, group := range []string{"no-such-group", "."} {
		gs := asker.groupSummary(ctx, group, nil, heldBy, &silent, nil, nil)
		if gs.err != nil {
			t.Fatal(gs.err)
		}
		if want := group == "."; (gs.Source == "coordinator") != want || want && gs.Members != 1 {
			t.Errorf("summary of %q after the peer answered 404 for the one before: %+v", group, gs)
		}
	}
	srv.Close()
	if _, ok, answered := asker.askPeerAnswered(ctx, n, "."); ok || answered {
		t.Errorf("closed peer: ok %v answered %v; want silent", ok, answered)
	}
}

// TestFailedCommitNotCounted: kgate_offset_commits_total counts the partitions stored, not those a
// Redis failure kept out.
func TestFailedCommitNotCounted(t *testing.T) {
	ctx := t.Context()
	m := startMiniredis(t)
	store := openStoreAt(t, m.Addr(), redisstore.Options{CommandTimeout: 300 * time.Millisecond})
	g, _ := serveOn(t, store, Config{})
	createTopic(t, store, "nc", 1)
	holdTopicView(t, ctx, g)
	m.Close()
	resp, err := fetchConn(t, g).offsetCommit(ctx, commitRequest("not-counted", -1, "", "nc", 1, 0))
	if err != nil || resp.(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode == 0 {
		t.Fatalf("commit with Redis gone: %v %+v", err, resp)
	}
	commitGroups.Lock()
	counted := commitGroups.labelled["not-counted"]
	commitGroups.Unlock()
	if counted {
		t.Fatal("commits counted for a commit Redis refused")
	}
}

// commitRequest is a v8 OffsetCommit by a committer of generation gen (-1: a simple commit) of offset
// on each of the given partitions of topic.
func commitRequest(group string, gen int32, member, topic string, offset int64, partitions ...int32) *kmsg.OffsetCommitRequest {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version, req.Group, req.Generation, req.MemberID = 8, group, gen, member
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = topic
	for _, p := range partitions {
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = p, offset
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	return req
}

// joinMember joins a new consumer to group on c with a JoinGroup of version (v4+: MEMBER_ID_REQUIRED
// first, then the join with the member id it gave), failing the test unless both answer as expected.
func joinMember(t *testing.T, ctx context.Context, c *conn, version int16, group string) *kmsg.JoinGroupResponse {
	t.Helper()
	join := joinRequest(version, group)
	r, err := c.joinGroup(ctx, join)
	if err != nil {
		t.Fatal(err)
	}
	if jr := r.(*kmsg.JoinGroupResponse); jr.ErrorCode != kerr.MemberIDRequired.Code {
		t.Fatalf("first join: error %d", jr.ErrorCode)
	} else {
		join.MemberID = jr.MemberID
	}
	if r, err = c.joinGroup(ctx, join); err != nil || r.(*kmsg.JoinGroupResponse).ErrorCode != 0 {
		t.Fatalf("join: %v, %+v", err, r)
	}
	return r.(*kmsg.JoinGroupResponse)
}

// joinRequest is a JoinGroup of a new consumer (no member id yet) with one protocol, "range".
func joinRequest(version int16, group string) *kmsg.JoinGroupRequest {
	join := kmsg.NewPtrJoinGroupRequest()
	join.Version, join.Group, join.ProtocolType = version, group, "consumer"
	join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = 10_000, 10_000
	jp := kmsg.NewJoinGroupRequestProtocol()
	jp.Name = "range"
	join.Protocols = append(join.Protocols, jp)
	return join
}

// An admin offset reset whose commit Redis stored but its replicas did not confirm (redis.wait_replicas)
// answers 200 with a warning: answered with an error, it would be sent again, and a relative reset
// ("shift") sent again moves the offsets twice.
func TestAdminResetNotConfirmedWarns(t *testing.T) {
	srv := redisServer(t)
	// No replica: WAIT confirms nothing.
	store := openStoreAt(t, srv.Addr, redisstore.Options{WaitReplicas: 1, WaitTimeout: 20 * time.Millisecond})
	g, _ := serveOn(t, store, Config{})
	createTopic(t, store, "unconfirmed", 1)
	appendValues(t, t.Context(), store, "unconfirmed", 0, 100, 10)
	reset := func(body string) (int, map[string]any) {
		rec, out := adminPost(g, "/api/v1/groups/shifted/offsets", body)
		return rec.Code, out
	}
	if code, out := reset(`{"topic":"unconfirmed","to":"offset","value":50}`); code != http.StatusOK || out["warning"] == nil {
		t.Fatalf("reset to 50: %d %v, want 200 with a warning", code, out)
	}
	if code, out := reset(`{"topic":"unconfirmed","to":"shift","value":-10}`); code != http.StatusOK || out["warning"] == nil {
		t.Fatalf("shift by -10: %d %v, want 200 with a warning", code, out)
	}
	got, err := store.CommittedOffsets(t.Context(), "shifted")
	if err != nil || len(got) != 1 || got[0].Offset != 40 {
		t.Fatalf("committed %+v (%v), want offset 40", got, err)
	}
}

// An admin reset whose offsets were stored but whose follow-up failed (the streams' consumer groups,
// here refused by an ACL; on a cluster, another master away) answers 200 with a warning: a 503 had
// the operator send a relative reset again, which moved the offsets twice.
func TestAdminResetStoredThenFailedWarns(t *testing.T) {
	srv := redisServer(t)
	admin := openStoreAt(t, srv.Addr, redisstore.Options{})
	user := fmt.Sprintf("noscripts-%d", time.Now().UnixNano())
	if err := admin.Client().Do(t.Context(), "ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all").Err(); err != nil {
		t.Skip("ACL not available:", err)
	}
	t.Cleanup(func() { admin.Client().Do(context.Background(), "ACL", "DELUSER", user) })
	store := openStoreAt(t, srv.Addr, redisstore.Options{Username: user, Password: "pw", Namespace: admin.Namespace()})
	g, _ := serveOn(t, store, Config{})
	createTopic(t, store, "stored", 1)
	appendValues(t, t.Context(), store, "stored", 0, 100, 10)
	// From now on the streams' consumer groups cannot be moved (the offsets themselves are written by
	// a script that needs no XGROUP).
	if err := admin.Client().Do(t.Context(), "ACL", "SETUSER", user, "-xgroup").Err(); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{`{"topic":"stored","to":"offset","value":50}`, `{"topic":"stored","to":"shift","value":-10}`} {
		rec, out := adminPost(g, "/api/v1/groups/half-done/offsets", body)
		if rec.Code != http.StatusOK || out["warning"] == nil {
			t.Fatalf("reset %s: %d %v, want 200 with a warning", body, rec.Code, out)
		}
	}
	got, err := store.CommittedOffsets(t.Context(), "half-done")
	if err != nil || len(got) != 1 || got[0].Offset != 40 {
		t.Fatalf("committed %+v (%v), want offset 40", got, err)
	}
}

// adminPost posts body as JSON to the admin API's path, and returns the answer and its body decoded.
func adminPost(g *Gateway, path, body string) (*httptest.ResponseRecorder, map[string]any) {
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	g.adminHandler().ServeHTTP(rec, req)
	var out map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &out)
	return rec, out
}

// TestResetDryRunHoldsNoLock: a dry-run reset writes nothing and takes none of the group's write lock,
// so its lookups (one per partition for a timestamp) cannot stall the commits of the groups sharing
// the lock's stripe behind a deletion waiting for it. Here a deletion holds the lock: a dry run still
// answers, and a real reset waits for it.
func TestResetDryRunHoldsNoLock(t *testing.T) {
	ctx, _, store := embeddedGateway(t, Config{})
	g, _ := serveOn(t, store, Config{})
	createTopic(t, store, "dry", 2)
	appendValues(t, ctx, store, "dry", 0, 5, 10)
	release := sync.OnceFunc(g.writes.delete("dry-group")) // a DeleteGroups of it, in progress
	t.Cleanup(release)
	answered := make(chan int, 2)
	go func() {
		w, _ := adminPost(g, "/api/v1/groups/dry-group/offsets", `{"topic":"dry","to":"latest","dryRun":true}`)
		answered <- w.Code
	}()
	select {
	case code := <-answered:
		if code != http.StatusOK {
			t.Fatalf("dry run: %d, want 200", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a dry-run reset waited for the group's write lock")
	}
	go func() {
		w, _ := adminPost(g, "/api/v1/groups/dry-group/offsets", `{"topic":"dry","to":"latest"}`)
		answered <- w.Code
	}()
	select {
	case code := <-answered:
		t.Fatalf("a reset answered %d while the group's deletion held its lock", code)
	case <-time.After(200 * time.Millisecond):
	}
	release()
	if code := <-answered; code != http.StatusOK {
		t.Fatalf("reset after the deletion: %d, want 200", code)
	}
}

// TestAdminResetAnswerLostIsUnknown: an offset reset whose write Redis carried out but whose answer
// was lost (a command timeout) answers 504, outcome unknown, not 503 "retry": a shift sent again
// moves the offsets twice. A write refused before it was sent (no connection) stays 503.
func TestAdminResetAnswerLostIsUnknown(t *testing.T) {
	srv := redisServer(t)
	store := openStoreAt(t, srv.Addr, redisstore.Options{})
	g, _ := serveOn(t, store, Config{})
	createTopic(t, store, "lost-answer", 1)
	appendValues(t, t.Context(), store, "lost-answer", 0, 100, 10)
	if rec, out := adminPost(g, "/api/v1/groups/lost/offsets", `{"topic":"lost-answer","to":"offset","value":50}`); rec.Code != http.StatusOK {
		t.Fatalf("reset to 50: %d %v", rec.Code, out)
	}
	lose := &loseOffsetsAnswer{key: "lost"}
	store.Client().AddHook(lose)
	lose.armed.Store(true)
	rec, out := adminPost(g, "/api/v1/groups/lost/offsets", `{"topic":"lost-answer","to":"shift","value":-10}`)
	if rec.Code != http.StatusGatewayTimeout || !strings.Contains(fmt.Sprint(out["error"]), "outcome is unknown") {
		t.Fatalf("shift with its answer lost: %d %v, want 504, outcome unknown", rec.Code, out)
	}
	if lose.armed.Load() {
		t.Fatal("the reset's write was not seen")
	}
	got, err := store.CommittedOffsets(t.Context(), "lost")
	if err != nil || len(got) != 1 || got[0].Offset != 40 {
		t.Fatalf("committed %+v (%v), want offset 40: the shift applied once", got, err)
	}
	// Not sent at all: Redis unreachable.
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer down.Close()
	if err := down.HSet(t.Context(), "k", "f", "v").Err(); err == nil || redisstore.OutcomeUnknown(err) {
		t.Fatalf("a write that could not connect (%v) counted as an unknown outcome", err)
	}
}

// loseOffsetsAnswer, armed, lets the next pipeline writing a group's offsets (a command naming its
// hashes, which end in "}:<group>") reach Redis, then reports it timed out, as a lost answer would be.
type loseOffsetsAnswer struct {
	key   string
	armed atomic.Bool
}

func (*loseOffsetsAnswer) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *loseOffsetsAnswer) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.lose(next(ctx, cmd), cmd)
	}
}
func (h *loseOffsetsAnswer) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return h.lose(next(ctx, cmds), cmds...)
	}
}

// lose replaces the outcome (err) of cmds, sent, with a timeout if they write the group's offsets.
func (h *loseOffsetsAnswer) lose(err error, cmds ...redis.Cmder) error {
	writes := false
	for _, c := range cmds {
		switch c.Name() {
		case "hset", "evalsha", "eval", "fcall":
			if script := fmt.Sprint(c.Args()[1]); c.Name() == "eval" && !strings.Contains(script, "HSET") {
				continue // the committed offsets' read (a script writing nothing)
			}
			for _, a := range c.Args()[1:] {
				writes = writes || strings.HasSuffix(fmt.Sprint(a), "}:"+h.key)
			}
		}
	}
	if !writes || !h.armed.CompareAndSwap(true, false) {
		return err
	}
	lost := fmt.Errorf("read tcp: i/o timeout: %w", context.DeadlineExceeded)
	for _, c := range cmds {
		c.SetErr(lost)
	}
	return lost
}
