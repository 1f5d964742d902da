package integration

import (
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/gateway"
)

// Issue 4, metrics: /metrics is scraped and parsed as Prometheus text after real traffic. Counters are
// process-wide and shared with every test of the binary, so the assertions use label values (topics,
// groups) only this test uses, or compare a counter before and after this test's own traffic.

// metricsScrape is one parsed scrape of /metrics.
type metricsScrape struct {
	raw  string
	fams map[string]*dto.MetricFamily
}

func scrapeMetrics(t *testing.T, g *testGateway) metricsScrape {
	t.Helper()
	status, body := admCall(t, http.MethodGet, g.AdminURL+"/metrics", nil)
	if status != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", status, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return metricsScrape{raw: string(body), fams: fams}
}

// value sums the samples of family name whose labels include want: counter and gauge values,
// histogram sample counts. found is false when no sample matched.
func (s metricsScrape) value(name string, want map[string]string) (v float64, found bool) {
	fam := s.fams[name]
	if fam == nil {
		return 0, false
	}
next:
	for _, m := range fam.GetMetric() {
		have := map[string]string{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for k, w := range want {
			if have[k] != w {
				continue next
			}
		}
		found = true
		switch {
		case m.Counter != nil:
			v += m.GetCounter().GetValue()
		case m.Gauge != nil:
			v += m.GetGauge().GetValue()
		case m.Histogram != nil:
			v += float64(m.GetHistogram().GetSampleCount())
		case m.Untyped != nil:
			v += m.GetUntyped().GetValue()
		}
	}
	return v, found
}

// must returns the value of a series that has to exist.
func (s metricsScrape) must(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	v, ok := s.value(name, want)
	if !ok {
		t.Fatalf("/metrics has no %s%v", name, want)
	}
	return v
}

// TestMetrics: after produce, fetch, commit and a provoked error, /metrics carries each family the
// issue names with the values this traffic implies.
func TestMetrics(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b, gatewayOpts{mutate: func(c *gateway.Config) { c.LagMetrics = true }})
		ctx := testCtx(t, 60*time.Second)
		topic, group := "metrics-"+b.name, "metrics-group-"+b.name // label values only this test uses
		missing := "metrics-missing-" + b.name
		const produced, committed = 7, 4

		before := scrapeMetrics(t, g)
		rebalancesBefore := before.must(t, "kgate_group_rebalances_total", nil)
		errLabels := map[string]string{"api": "ListOffsets", "code": "3"} // UNKNOWN_TOPIC_OR_PARTITION
		errorsBefore, _ := before.value("kgate_error_responses_total", errLabels)

		admCreateTopics(t, ctx, newAdmin(t, g), 1, nil, topic)
		admProduce(t, ctx, admProducer(t, g), topic, 0, produced, nil)
		c := admConsumer(t, g, group, topic)
		got := admPoll(t, ctx, c, map[string]int{topic: produced})
		admCommit(t, ctx, c, got[topic][committed-1])
		admWaitState(t, g, group, "Stable")

		// A provoked error: ListOffsets of a topic that does not exist, sent straight to the gateway.
		req := kmsg.NewPtrListOffsetsRequest()
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = missing
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = 0, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		raw, err := c.SeedBrokers()[0].Request(ctx, req)
		if err != nil {
			t.Fatalf("list offsets: %v", err)
		}
		if code := raw.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0].ErrorCode; code != kerr.UnknownTopicOrPartition.Code {
			t.Fatalf("list offsets of a missing topic: code %d, want %d", code, kerr.UnknownTopicOrPartition.Code)
		}

		s := scrapeMetrics(t, g)
		for _, fam := range []struct {
			name string
			typ  dto.MetricType
		}{
			{"kgate_requests_total", dto.MetricType_COUNTER},
			{"kgate_request_duration_seconds", dto.MetricType_HISTOGRAM},
			{"kgate_bytes_in_total", dto.MetricType_COUNTER},
			{"kgate_bytes_out_total", dto.MetricType_COUNTER},
			{"kgate_records_produced_total", dto.MetricType_COUNTER},
			{"kgate_records_fetched_total", dto.MetricType_COUNTER},
			{"kgate_error_responses_total", dto.MetricType_COUNTER},
			{"kgate_open_connections", dto.MetricType_GAUGE},
			{"kgate_redis_command_duration_seconds", dto.MetricType_HISTOGRAM},
			{"kgate_groups", dto.MetricType_GAUGE},
			{"kgate_group_rebalances_total", dto.MetricType_COUNTER},
			{"kgate_group_lag", dto.MetricType_GAUGE},
		} {
			f := s.fams[fam.name]
			if f == nil || f.GetType() != fam.typ || f.GetHelp() == "" {
				t.Fatalf("family %s: %v, want type %v with help", fam.name, f, fam.typ)
			}
		}

		if v := s.must(t, "kgate_requests_total", map[string]string{"api": "Produce"}); v < 1 {
			t.Fatalf("kgate_requests_total{api=Produce} = %v", v)
		}
		if v := s.must(t, "kgate_requests_total", map[string]string{"api": "OffsetCommit"}); v < 1 {
			t.Fatalf("kgate_requests_total{api=OffsetCommit} = %v", v)
		}
		if !strings.Contains(s.raw, `kgate_request_duration_seconds_bucket{api="Fetch",le=`) {
			t.Fatalf("no kgate_request_duration_seconds_bucket{api=\"Fetch\"} line")
		}
		if v := s.must(t, "kgate_request_duration_seconds", map[string]string{"api": "Fetch"}); v < 1 {
			t.Fatalf("Fetch latency samples = %v", v)
		}
		if v := s.must(t, "kgate_bytes_in_total", nil); v <= 0 {
			t.Fatalf("kgate_bytes_in_total = %v", v)
		}
		if v := s.must(t, "kgate_bytes_out_total", nil); v <= 0 {
			t.Fatalf("kgate_bytes_out_total = %v", v)
		}
		if v := s.must(t, "kgate_records_produced_total", map[string]string{"topic": topic}); v != produced {
			t.Fatalf("kgate_records_produced_total{topic=%s} = %v, want %d", topic, v, produced)
		}
		// Records, not batches or bytes: the seven records went out in one batch.
		if v := s.must(t, "kgate_records_fetched_total", map[string]string{"topic": topic}); v != produced {
			t.Fatalf("kgate_records_fetched_total{topic=%s} = %v, want %d", topic, v, produced)
		}
		if v := s.must(t, "kgate_error_responses_total", errLabels); v < errorsBefore+1 {
			t.Fatalf("kgate_error_responses_total%v = %v, want at least %v", errLabels, v, errorsBefore+1)
		}
		if v := s.must(t, "kgate_open_connections", nil); v < 1 {
			t.Fatalf("kgate_open_connections = %v with clients connected", v)
		}
		if v := s.must(t, "kgate_redis_command_duration_seconds", nil); v < 1 {
			t.Fatalf("kgate_redis_command_duration_seconds samples = %v", v)
		}
		// Groups by state are this gateway's own: the one consumer group, Stable.
		if v := s.must(t, "kgate_groups", map[string]string{"state": "Stable"}); v != 1 {
			t.Fatalf("kgate_groups{state=Stable} = %v, want 1", v)
		}
		if v := s.must(t, "kgate_groups", map[string]string{"state": "Empty"}); v != 0 {
			t.Fatalf("kgate_groups{state=Empty} = %v, want 0", v)
		}
		if v := s.must(t, "kgate_group_rebalances_total", nil); v < rebalancesBefore+1 {
			t.Fatalf("kgate_group_rebalances_total = %v, want more than %v after a consumer joined", v, rebalancesBefore)
		}
		lag := map[string]string{"group": group, "topic": topic, "partition": "0"}
		if v := s.must(t, "kgate_group_lag", lag); v != produced-committed {
			t.Fatalf("kgate_group_lag%v = %v, want %d", lag, v, produced-committed)
		}
		if v := s.must(t, "kgate_group_lag_series_dropped", nil); v != 0 {
			t.Fatalf("kgate_group_lag_series_dropped = %v", v)
		}

		// The lag follows a commit.
		admCommit(t, ctx, c, got[topic][produced-1])
		if v := scrapeMetrics(t, g).must(t, "kgate_group_lag", lag); v != 0 {
			t.Fatalf("kgate_group_lag after committing everything = %v, want 0", v)
		}
	})
}

// TestMetricsLagBounded: lag series stop at metrics.lag_max_series (the rest are counted as dropped)
// and disappear with the switch off.
func TestMetricsLagBounded(t *testing.T) {
	g := startGateway(t, backends()[0], gatewayOpts{mutate: func(c *gateway.Config) { c.LagMetrics, c.LagMaxSeries = true, 2 }})
	off := startGateway(t, backends()[0])
	ctx := testCtx(t, 60*time.Second)
	const topic, group = "metrics-bounded", "metrics-bounded-group"
	for _, gw := range []*testGateway{g, off} {
		admCreateTopics(t, ctx, newAdmin(t, gw), 5, nil, topic)
		// Commits through the admin API: five partitions at offset 0.
		admJSON(t, http.MethodPost, admOffsetsURL(gw, group), map[string]any{"topic": topic, "to": "earliest"}, http.StatusOK, nil)
	}
	s := scrapeMetrics(t, g)
	n := 0
	for _, m := range s.fams["kgate_group_lag"].GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == "group" && lp.GetValue() == group {
				n++
			}
		}
	}
	if n != 2 {
		t.Fatalf("%d lag series for %s, want 2 (lag_max_series)", n, group)
	}
	if v := s.must(t, "kgate_group_lag_series_dropped", nil); v != 3 {
		t.Fatalf("kgate_group_lag_series_dropped = %v, want 3", v)
	}
	if _, ok := scrapeMetrics(t, off).value("kgate_group_lag", nil); ok {
		t.Fatalf("lag exported with LagMetrics off")
	}
}
