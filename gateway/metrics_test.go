package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kgate/kgate/redisstore"
)

// A group id that is no valid Prometheus label value (Kafka group ids are any bytes, not necessarily
// UTF-8) is left out of the metrics: its commit is not failed, and the scrape still serves the rest,
// including a valid group's lag.
func TestMetricsWithNonUTF8Group(t *testing.T) {
	ctx, _, store := embeddedGateway(t, Config{})
	g, _ := serveOn(t, store, Config{LagMetrics: true, LagMaxSeries: 10})
	if err := store.CreateTopic(ctx, redisstore.Topic{Name: "t", Partitions: 1, Created: time.Now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	for _, group := range []string{"bad\xffgroup", "good-group"} {
		if errs := store.CommitOffsets(ctx, group, []redisstore.OffsetCommit{{Topic: "t", Partition: 0, Offset: 0}}, time.Now()); errs[0] != nil {
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
