package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kgate/kgate/internal/redistest"
	"github.com/kgate/kgate/redisstore"
)

// A group id that is no valid Prometheus label value (Kafka group ids are any bytes, not necessarily
// UTF-8) is left out of the metrics: its commit is not failed, and the scrape still serves the rest,
// including a valid group's lag.
func TestMetricsWithNonUTF8Group(t *testing.T) {
	ctx, _, store := embeddedGateway(t, Config{})
	g, _ := serveOn(t, store, Config{LagMetrics: true, LagMaxSeries: 10})
	createTopic(t, store, "t", 1)
	for _, group := range []string{"bad\xffgroup", "good-group"} {
		if errs := store.CommitOffsets(ctx, group, "", []redisstore.OffsetCommit{{Topic: "t", Partition: 0, Offset: 0}}, time.Now()); errs[0] != nil {
			t.Fatal(errs[0])
		}
		offsetsCommitted(group, 1) // as OffsetCommit counts it: must not panic
	}
	rec := httptest.NewRecorder()
	g.metricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	if rec.Code != http.StatusOK || !strings.Contains(body, `kgate_group_lag{group="good-group"`) || !strings.Contains(body, "kgate_groups{") {
		t.Fatalf("scrape: %d\n%s", rec.Code, body)
	}
}

// DeleteTopics drops the groups' offsets on the topic; offsets written for it after all (a commit that
// raced the delete, or one an earlier kgate kept) are marked unknownTopic, with log offsets -1 and no
// lag, and left out of the lag metrics; once the name is created again with fewer partitions, those it
// has are read again and the others stay unknown.
func TestGroupOffsetsOfDeletedTopic(t *testing.T) {
	ctx, _, store := embeddedGateway(t, Config{})
	g, _ := serveOn(t, store, Config{LagMetrics: true, LagMaxSeries: 10})
	created := func(partitions int32) {
		t.Helper()
		createTopic(t, store, "gone", partitions)
		g.topics.invalidate()
	}
	created(2)
	commits := []redisstore.OffsetCommit{{Topic: "gone", Partition: 0, Offset: 5000}, {Topic: "gone", Partition: 1, Offset: 7}}
	if errs := store.CommitOffsets(ctx, "grp", "", commits, time.Now()); errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	if err := g.deleteTopic(ctx, "gone", [16]byte{}); err != nil {
		t.Fatal(err)
	}
	if offs, err := g.groupOffsets(ctx, "grp", ""); err != nil || len(offs) != 0 {
		t.Fatalf("offsets after the topic's deletion: %v, %+v; want none", err, offs)
	}
	if errs := store.CommitOffsets(ctx, "grp", "", commits, time.Now()); errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	offs, err := g.groupOffsets(ctx, "grp", "")
	if err != nil || len(offs) != 2 {
		t.Fatalf("offsets: %v, %+v", err, offs)
	}
	for _, o := range offs {
		if !o.UnknownTopic || *o.LogEndOffset != -1 || *o.Lag != 0 {
			t.Errorf("deleted topic: %+v, want unknown with log offsets -1 and no lag", o)
		}
	}
	rec := httptest.NewRecorder()
	g.metricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if strings.Contains(rec.Body.String(), `topic="gone"`) {
		t.Errorf("lag of the deleted topic exported:\n%s", rec.Body.String())
	}

	created(1)
	offs, err = g.groupOffsets(ctx, "grp", "")
	if err != nil || len(offs) != 2 {
		t.Fatalf("offsets: %v, %+v", err, offs)
	}
	for _, o := range offs {
		if unknown := o.Partition == 1; o.UnknownTopic != unknown || !unknown && *o.LogEndOffset != 0 {
			t.Errorf("topic created again with 1 partition: %+v", o)
		}
	}
}

// A deleted topic's and a deleted group's series leave the metrics, so the process does not export
// every topic and group it ever served.
func TestMetricsForgetDeletedTopicsAndGroups(t *testing.T) {
	ctx, _, store := embeddedGateway(t, Config{})
	g, _ := serveOn(t, store, Config{})
	createTopic(t, store, "fleeting", 1)
	// The group has an offset on another topic too, so it outlives the topic's deletion (which drops
	// the group's offsets on it).
	commits := []redisstore.OffsetCommit{{Topic: "fleeting", Partition: 0, Offset: 0}, {Topic: "lasting", Partition: 0, Offset: 0}}
	if errs := store.CommitOffsets(ctx, "fleeting-group", "", commits, time.Now()); errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	recordsProduced("fleeting", 1)
	mFetched.WithLabelValues("fleeting").Add(1) // as recordsFetched counts a fetch's records
	offsetsCommitted("fleeting-group", 1)
	scrape := func() string {
		rec := httptest.NewRecorder()
		g.metricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		return rec.Body.String()
	}
	if m := scrape(); !strings.Contains(m, `kgate_records_produced_total{topic="fleeting"}`) ||
		!strings.Contains(m, `kgate_records_fetched_total{topic="fleeting"}`) || !strings.Contains(m, `group="fleeting-group"`) {
		t.Fatalf("series missing before the deletes:\n%s", m)
	}
	if err := g.deleteTopic(ctx, "fleeting", [16]byte{}); err != nil {
		t.Fatal(err)
	}
	if code := g.deleteGroup(ctx, "fleeting-group"); code != 0 {
		t.Fatalf("delete group: %d", code)
	}
	if m := scrape(); strings.Contains(m, `topic="fleeting"`) || strings.Contains(m, `group="fleeting-group"`) {
		t.Fatalf("series left after the deletes:\n%s", m)
	}
}

// A scrape reads the groups' offsets a few at a time: one group whose read waits (here, forever: its
// Redis connection stalls) costs the scrape its deadline but not the other groups' lag series, which a
// scrape reading one group after another lost with the deadline; kgate_group_lag_groups_unread counts
// it.
func TestLagMetricsNotHeldUpByOneGroup(t *testing.T) {
	m := startMiniredis(t)
	p := redistest.StartProxy(t, m.Addr())
	// Commands wait longer than the scrape's 5 s: the stalled read ends with the scrape's deadline.
	store := openStoreAt(t, p.Addr(), redisstore.Options{CommandTimeout: 10 * time.Second, DialTimeout: time.Second})
	g, _ := serveOn(t, store, Config{LagMetrics: true, LagMaxSeries: 100})
	ctx := t.Context()
	createTopic(t, store, "t", 1)
	groups := []string{"lag-a", "lag-b", "lag-c", "lag-d", "lag-e", "lag-f"}
	for _, group := range groups {
		if errs := store.CommitOffsets(ctx, group, "", []redisstore.OffsetCommit{{Topic: "t", Partition: 0, Offset: 0}}, time.Now()); errs[0] != nil {
			t.Fatal(errs[0])
		}
	}
	// The first group in the scrape's order; its timestamp sidecar, which only reading its offsets touches.
	p.Stall("kgate:offsets-ts:{" + redisstore.GroupTag("lag-a") + "}:lag-a")
	rec := httptest.NewRecorder()
	g.metricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	select {
	case <-p.Stalled():
	default:
		t.Fatal("the scrape never read the stalled group's offsets")
	}
	for _, group := range groups[1:] {
		if !strings.Contains(body, `kgate_group_lag{group="`+group+`"`) {
			t.Errorf("no lag series for %s while lag-a's read stalled:\n%s", group, body)
		}
	}
	// The group left without series is counted, not silently missing.
	unread := ""
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "kgate_group_lag_groups_unread{") {
			unread = line
		}
	}
	if !strings.HasSuffix(unread, " 1") {
		t.Errorf("kgate_group_lag_groups_unread: %q, want 1 (lag-a)", unread)
	}
}

// TestCommitMetricGroupsBounded: kgate_offset_commits_total has a series for at most
// maxCommitGroupSeries groups; the commits of the groups after them are counted under "_other", so
// throwaway group ids do not add a series each for the life of the process.
func TestCommitMetricGroupsBounded(t *testing.T) {
	for i := range maxCommitGroupSeries + 50 {
		offsetsCommitted(fmt.Sprintf("bounded-%d", i), 1)
	}
	if n := testutil.CollectAndCount(mCommits); n > maxCommitGroupSeries+1 {
		t.Fatalf("%d series of kgate_offset_commits_total, want at most %d", n, maxCommitGroupSeries+1)
	}
	if v := testutil.ToFloat64(mCommits.WithLabelValues(otherGroups)); v < 50 {
		t.Fatalf("%v commits counted as %q, want at least 50", v, otherGroups)
	}
	t.Cleanup(func() {
		for i := range maxCommitGroupSeries + 50 {
			forgetGroupMetrics(fmt.Sprintf("bounded-%d", i))
		}
	})
}

// TestMetricsForgetTopicsDeletedElsewhere: a topic deleted through another gateway leaves this
// gateway's per-topic series once its topic cache sees it gone, not at the process's end.
func TestMetricsForgetTopicsDeletedElsewhere(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{})
	createTopic(t, store, "gone-elsewhere", 1)
	if _, err := g.topics.get(ctx, "gone-elsewhere"); err != nil {
		t.Fatal(err)
	}
	recordsProduced("gone-elsewhere", 1)
	if err := store.DeleteTopic(ctx, "gone-elsewhere"); err != nil { // as another gateway does
		t.Fatal(err)
	}
	if _, err := g.topics.all(ctx); err != nil {
		t.Fatal(err)
	}
	if mProduced.DeleteLabelValues("gone-elsewhere") { // true: the series was still there
		t.Fatal(`kgate_records_produced_total{topic="gone-elsewhere"} kept after the topic was deleted elsewhere`)
	}
}
