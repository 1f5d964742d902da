package gateway

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Metrics live in one registry per process; kgate runs one gateway per process, tests run several and
// share the counters, which only ever go up.
var (
	metricsRegistry = prometheus.NewRegistry()

	mRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kgate_requests_total", Help: "Kafka requests handled, by API and version.",
	}, []string{"api", "version"})
	mLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "kgate_request_duration_seconds", Help: "Kafka request latency by API (includes long-poll waits).",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"api"})
	mErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kgate_error_responses_total", Help: "Error codes in responses, by API and Kafka error code.",
	}, []string{"api", "code"})
	mBytesIn = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kgate_bytes_in_total", Help: "Bytes read from Kafka clients.",
	})
	mBytesOut = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kgate_bytes_out_total", Help: "Bytes written to Kafka clients.",
	})
	mProduced = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kgate_records_produced_total", Help: "Records appended, by topic.",
	}, []string{"topic"})
	mFetched = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kgate_records_fetched_total", Help: "Record batches bytes returned by Fetch, by topic.",
	}, []string{"topic"})
	mConnections = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kgate_open_connections", Help: "Open Kafka client connections.",
	})
)

func init() {
	metricsRegistry.MustRegister(mRequests, mLatency, mErrors, mBytesIn, mBytesOut, mProduced, mFetched,
		mConnections, prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
}

func connectionsOpened() { mConnections.Inc() }
func connectionsClosed() { mConnections.Dec() }
func bytesIn(n int)      { mBytesIn.Add(float64(n)) }
func bytesOut(n int)     { mBytesOut.Add(float64(n)) }

func recordsProduced(topic string, n int) { mProduced.WithLabelValues(topic).Add(float64(n)) }

func recordsFetched(topic string, p *kmsg.FetchResponseTopicPartition) {
	mFetched.WithLabelValues(topic).Add(float64(len(p.RecordBatches)))
}

// producePartitionOutcome counts a produce partition error.
func producePartitionOutcome(_ string, code int16, _ int) {
	if code != 0 {
		mErrors.WithLabelValues("Produce", strconv.Itoa(int(code))).Inc()
	}
}

var versionLabels = func() [64]string {
	var v [64]string
	for i := range v {
		v[i] = strconv.Itoa(i)
	}
	return v
}()

func observeRequest(key, version int16, took time.Duration, resp kmsg.Response) {
	name := kmsg.NameForKey(key)
	vl := "other"
	if version >= 0 && int(version) < len(versionLabels) {
		vl = versionLabels[version]
	}
	mRequests.WithLabelValues(name, vl).Inc()
	mLatency.WithLabelValues(name).Observe(took.Seconds())
	if resp == nil {
		return
	}
	if ec, ok := topLevelError(resp); ok && ec != 0 {
		mErrors.WithLabelValues(name, strconv.Itoa(int(ec))).Inc()
	}
}

// topLevelError extracts a response's top-level error code, where it has one.
func topLevelError(resp kmsg.Response) (int16, bool) {
	switch r := resp.(type) {
	case *kmsg.FetchResponse:
		return r.ErrorCode, true
	case *kmsg.JoinGroupResponse:
		return r.ErrorCode, true
	case *kmsg.SyncGroupResponse:
		return r.ErrorCode, true
	case *kmsg.HeartbeatResponse:
		return r.ErrorCode, true
	case *kmsg.LeaveGroupResponse:
		return r.ErrorCode, true
	case *kmsg.FindCoordinatorResponse:
		return r.ErrorCode, true
	case *kmsg.InitProducerIDResponse:
		return r.ErrorCode, true
	}
	return 0, false
}

var mCommits = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "kgate_offset_commits_total", Help: "Partition offsets committed, by group.",
}, []string{"group"})

func init() { metricsRegistry.MustRegister(mCommits) }

func offsetsCommitted(group string, n int) { mCommits.WithLabelValues(group).Add(float64(n)) }

var (
	mRedisLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "kgate_redis_command_duration_seconds", Help: "Redis command (or pipeline) latency.",
		Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .5, 1, 5},
	}, []string{"command"})
	mRedisErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kgate_redis_errors_total", Help: "Redis commands that failed.",
	}, []string{"command"})
	mRebalances = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kgate_group_rebalances_total", Help: "Group rebalances started by this gateway's coordinator.",
	})
	descGroupsByState = prometheus.NewDesc("kgate_groups", "Groups coordinated by this gateway, by state.", []string{"node", "state"}, nil)
	descGroupLag      = prometheus.NewDesc("kgate_group_lag", "Consumer-group lag in records per partition (bounded by metrics.lag_max_series).",
		[]string{"node", "group", "topic", "partition"}, nil)
	descLagTruncated = prometheus.NewDesc("kgate_group_lag_series_dropped", "Lag series not exported because of metrics.lag_max_series.", []string{"node"}, nil)

	gatewaysMu sync.Mutex
	gateways   = map[*Gateway]struct{}{}
)

func init() {
	metricsRegistry.MustRegister(mRedisLatency, mRedisErrors, mRebalances, groupCollector{})
}

func observeRedis(cmd string, took time.Duration, err error) {
	mRedisLatency.WithLabelValues(cmd).Observe(took.Seconds())
	if err != nil {
		mRedisErrors.WithLabelValues(cmd).Inc()
	}
}

// groupCollector reports group states and lag at scrape time for every gateway in the process.
type groupCollector struct{}

func (groupCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descGroupsByState
	ch <- descGroupLag
	ch <- descLagTruncated
}

func (groupCollector) Collect(ch chan<- prometheus.Metric) {
	gatewaysMu.Lock()
	gs := make([]*Gateway, 0, len(gateways))
	for g := range gateways {
		gs = append(gs, g)
	}
	gatewaysMu.Unlock()
	for _, g := range gs {
		g.collectGroups(ch)
	}
}

func (g *Gateway) collectGroups(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(g.bgCtx, 5*time.Second)
	defer cancel()
	node := strconv.Itoa(int(g.cfg.NodeID))
	states := map[string]int{}
	for _, info := range g.coord.List(ctx) {
		states[info.State]++
	}
	for _, s := range []string{"Empty", "PreparingRebalance", "CompletingRebalance", "Stable"} {
		ch <- prometheus.MustNewConstMetric(descGroupsByState, prometheus.GaugeValue, float64(states[s]), node, s)
	}
	if !g.cfg.LagMetrics {
		return
	}
	names, err := g.store.Groups(ctx)
	if err != nil {
		return
	}
	series, dropped := 0, 0
	for _, name := range names {
		if !g.nodes.isCoordinator(name) {
			continue // the coordinating gateway exports it, so each series has one source
		}
		offs, err := g.groupOffsets(ctx, name, "")
		if err != nil {
			continue
		}
		for _, o := range offs {
			if series >= g.cfg.LagMaxSeries {
				dropped++
				continue
			}
			series++
			ch <- prometheus.MustNewConstMetric(descGroupLag, prometheus.GaugeValue, float64(o.Lag),
				node, name, o.Topic, strconv.Itoa(int(o.Partition)))
		}
	}
	ch <- prometheus.MustNewConstMetric(descLagTruncated, prometheus.GaugeValue, float64(dropped), node)
}
