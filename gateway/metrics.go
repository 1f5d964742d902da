package gateway

import (
	"cmp"
	"context"
	"encoding/binary"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Counters and histograms live in one registry per process; kgate runs one gateway per process, tests
// run several and share them (they only ever go up). Group states and lag belong to one gateway: each
// gateway's /metrics adds its own (metricsHandler), so two gateways of one process never export the
// same series twice, which would fail the whole scrape.
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
		Name: "kgate_records_fetched_total", Help: "Records returned by Fetch, by topic.",
	}, []string{"topic"})
	mReadAhead = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kgate_fetch_read_ahead_total",
		Help: "Background reads for a connection's next fetch, by outcome: used, or unused (the fetch asked for other offsets, or the read failed or expired); speculative counts those an earlier fetch started on a guess of where the responses before them would end (before it knew), that became the read-ahead (and then count as used or unused too).",
	}, []string{"outcome"})
	mTailCache = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kgate_fetch_tail_cache_total",
		Help: "Partition reads at the end of a partition, by outcome: hit (records from the gateway's tail cache) or miss (read from Redis).",
	}, []string{"outcome"})
	mConnections = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kgate_open_connections", Help: "Open Kafka client connections.",
	})
	mClaimsFull = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kgate_group_claims_full_total",
		Help: "Offset writes (commits, deletions, resets) made without the group's owner check, as this gateway already held the most claims it keeps (100,000 groups written within an hour): those are not fenced against a coordinator change.",
	})
)

func init() {
	metricsRegistry.MustRegister(mRequests, mLatency, mErrors, mBytesIn, mBytesOut, mProduced, mFetched,
		mReadAhead, mTailCache, mConnections, mClaimsFull, prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
}

func connectionsOpened() { mConnections.Inc() }
func connectionsClosed() { mConnections.Dec() }
func bytesIn(n int)      { mBytesIn.Add(float64(n)) }
func bytesOut(n int)     { mBytesOut.Add(float64(n)) }

// Counters of fixed label values, looked up once.
var (
	mReadAheadUsed   = mReadAhead.WithLabelValues("used")
	mReadAheadUnused = mReadAhead.WithLabelValues("unused")
	mReadAheadSpec   = mReadAhead.WithLabelValues("speculative")
	mTailCacheHit    = mTailCache.WithLabelValues("hit")
	mTailCacheMiss   = mTailCache.WithLabelValues("miss")
)

func readAheadOutcome(used bool) {
	if used {
		mReadAheadUsed.Inc()
	} else {
		mReadAheadUnused.Inc()
	}
}

func tailCacheOutcome(hit bool) {
	if hit {
		mTailCacheHit.Inc()
	} else {
		mTailCacheMiss.Inc()
	}
}

// forgetTopicMetrics drops a deleted topic's series, so the process does not export every topic it
// ever served.
func forgetTopicMetrics(topic string) {
	mProduced.DeleteLabelValues(topic)
	mFetched.DeleteLabelValues(topic)
}

// forgetGroupMetrics drops a deleted group's series: group ids come and go (throwaway consumers).
func forgetGroupMetrics(group string) {
	commitGroups.Lock()
	if commitGroups.labelled[group] {
		delete(commitGroups.labelled, group)
		mCommits.DeleteLabelValues(group)
	}
	commitGroups.Unlock()
}

func recordsProduced(topic string, n int) { mProduced.WithLabelValues(topic).Add(float64(n)) }

func recordsFetched(topic string, p *kmsg.FetchResponseTopicPartition) {
	if n := batchRecords(p.RecordBatches); n > 0 {
		mFetched.WithLabelValues(topic).Add(float64(n))
	}
}

// batchRecords sums the record counts in the headers of a record set's v2 batches. A trailing partial
// batch (cut at the fetch size limit) is not counted: the client drops it.
func batchRecords(b []byte) int {
	const countEnd = 61 // baseOffset 8, length 4, epoch 4, magic 1, crc 4, attrs 2, delta 4, ts 8+8, pid 8, epoch 2, seq 4, count 4
	n := 0
	for len(b) >= countEnd {
		size := 12 + int64(int32(binary.BigEndian.Uint32(b[8:12])))
		if size < countEnd || size > int64(len(b)) {
			break
		}
		if b[16] == 2 {
			n += int(int32(binary.BigEndian.Uint32(b[57:61])))
		}
		b = b[size:]
	}
	return n
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
	responseErrors(resp, func(code int16) {
		if code != 0 {
			mErrors.WithLabelValues(name, strconv.Itoa(int(code))).Inc()
		}
	})
}

// responseErrors calls fn with every error code of a response: the top-level one and those of each
// topic, partition, group or member, for every API in supportedAPIs.
func responseErrors(resp kmsg.Response, fn func(int16)) {
	switch r := resp.(type) {
	case *kmsg.ProduceResponse:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				fn(p.ErrorCode)
			}
		}
	case *kmsg.FetchResponse:
		fn(r.ErrorCode)
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				fn(p.ErrorCode)
			}
		}
	case *kmsg.ListOffsetsResponse:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				fn(p.ErrorCode)
			}
		}
	case *kmsg.MetadataResponse:
		for _, t := range r.Topics {
			fn(t.ErrorCode)
			for _, p := range t.Partitions {
				fn(p.ErrorCode)
			}
		}
	case *kmsg.OffsetCommitResponse:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				fn(p.ErrorCode)
			}
		}
	case *kmsg.OffsetFetchResponse:
		fn(r.ErrorCode)
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				fn(p.ErrorCode)
			}
		}
		for _, g := range r.Groups {
			fn(g.ErrorCode)
			for _, t := range g.Topics {
				for _, p := range t.Partitions {
					fn(p.ErrorCode)
				}
			}
		}
	case *kmsg.FindCoordinatorResponse:
		fn(r.ErrorCode)
		for _, c := range r.Coordinators {
			fn(c.ErrorCode)
		}
	case *kmsg.JoinGroupResponse:
		fn(r.ErrorCode)
	case *kmsg.HeartbeatResponse:
		fn(r.ErrorCode)
	case *kmsg.LeaveGroupResponse:
		fn(r.ErrorCode)
		for _, m := range r.Members {
			fn(m.ErrorCode)
		}
	case *kmsg.SyncGroupResponse:
		fn(r.ErrorCode)
	case *kmsg.DescribeGroupsResponse:
		for _, g := range r.Groups {
			fn(g.ErrorCode)
		}
	case *kmsg.ListGroupsResponse:
		fn(r.ErrorCode)
	case *kmsg.ApiVersionsResponse:
		fn(r.ErrorCode)
	case *kmsg.CreateTopicsResponse:
		for _, t := range r.Topics {
			fn(t.ErrorCode)
		}
	case *kmsg.DeleteTopicsResponse:
		for _, t := range r.Topics {
			fn(t.ErrorCode)
		}
	case *kmsg.DeleteRecordsResponse:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				fn(p.ErrorCode)
			}
		}
	case *kmsg.InitProducerIDResponse:
		fn(r.ErrorCode)
	case *kmsg.DescribeConfigsResponse:
		for _, res := range r.Resources {
			fn(res.ErrorCode)
		}
	case *kmsg.CreatePartitionsResponse:
		for _, t := range r.Topics {
			fn(t.ErrorCode)
		}
	case *kmsg.DeleteGroupsResponse:
		for _, g := range r.Groups {
			fn(g.ErrorCode)
		}
	case *kmsg.OffsetDeleteResponse:
		fn(r.ErrorCode)
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				fn(p.ErrorCode)
			}
		}
	case *kmsg.DescribeClusterResponse:
		fn(r.ErrorCode)
	}
}

var mCommits = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "kgate_offset_commits_total",
	Help: "Partition offsets committed, by group (the first " + strconv.Itoa(maxCommitGroupSeries) + " groups; the rest as group=\"" + otherGroups + "\").",
}, []string{"group"})

func init() { metricsRegistry.MustRegister(mCommits) }

// maxCommitGroupSeries bounds the groups kgate_offset_commits_total has a series of: throwaway group
// ids (a console consumer's, a stream processor's per query) would otherwise add one each for the life
// of the process. The commits of groups beyond it are counted under otherGroups; a deleted group's
// series frees its place.
const (
	maxCommitGroupSeries = 1000
	otherGroups          = "_other"
)

var commitGroups = struct {
	sync.Mutex
	labelled map[string]bool
}{labelled: map[string]bool{}}

// offsetsCommitted counts a group's commits; a group id that is no valid label value (not UTF-8:
// Kafka group ids are any bytes) is not counted, rather than failing the commit.
func offsetsCommitted(group string, n int) {
	if !utf8.ValidString(group) {
		return
	}
	commitGroups.Lock()
	if !commitGroups.labelled[group] {
		if len(commitGroups.labelled) < maxCommitGroupSeries && group != otherGroups {
			commitGroups.labelled[group] = true
		} else {
			group = otherGroups
		}
	}
	commitGroups.Unlock()
	if c, err := mCommits.GetMetricWithLabelValues(group); err == nil {
		c.Add(float64(n))
	}
}

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
	mPanics = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kgate_panics_recovered_total",
		Help: "Panics recovered, by what they ended: connection, read_ahead, group, a background loop by name, topic_reload, tail_copy, admin (a request), metrics (a scrape's group series), store_probe, store_read (a master's share of a store call left behind), group_claim (a claim of a group made in the background at JoinGroup).",
	}, []string{"where"})
	descGroupsByState = prometheus.NewDesc("kgate_groups", "Groups coordinated by this gateway, by state.", []string{"node", "state"}, nil)
	descGroupLag      = prometheus.NewDesc("kgate_group_lag", "Consumer-group lag in records per partition (bounded by metrics.lag_max_series).",
		[]string{"node", "group", "topic", "partition"}, nil)
	descLagTruncated = prometheus.NewDesc("kgate_group_lag_series_dropped", "Lag series not exported because of metrics.lag_max_series.", []string{"node"}, nil)
	descLagUnread    = prometheus.NewDesc("kgate_group_lag_groups_unread", "Groups this gateway coordinates whose lag could not be read whole in this scrape (a slow or failing Redis): the partitions not read have no lag series.", []string{"node"}, nil)
)

func init() {
	metricsRegistry.MustRegister(mRedisLatency, mRedisErrors, mRebalances, mPanics)
}

func observeRedis(cmd string, took time.Duration, err error) {
	mRedisLatency.WithLabelValues(cmd).Observe(took.Seconds())
	if err != nil {
		mRedisErrors.WithLabelValues(cmd).Inc()
	}
}

// metricsHandler serves the process-wide metrics plus this gateway's group states and lag.
func (g *Gateway) metricsHandler() http.Handler {
	own := prometheus.NewRegistry()
	own.MustRegister(groupCollector{g: g})
	// A series that cannot be exported is left out and the rest served, not the scrape failed.
	return promhttp.HandlerFor(prometheus.Gatherers{metricsRegistry, own}, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// lagScrapeTimeout bounds each of the two steps of the groups' offsets' read in a scrape (whose deadline
// is 5 s): a round trip to Redis or a few; a master that stops answering is waited for a second
// (masterLag) once the others answered.
const lagScrapeTimeout = 2 * time.Second

// groupCollector reports one gateway's group states and lag at scrape time.
type groupCollector struct{ g *Gateway }

func (groupCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descGroupsByState
	ch <- descGroupLag
	ch <- descLagTruncated
	ch <- descLagUnread
}

// notePanic counts a recovered panic under where (kgate_panics_recovered_total) and logs it with stack,
// the panicking goroutine's (debug.Stack() taken while the panic is being recovered).
func notePanic(log zerolog.Logger, where string, p any, stack []byte, msg string) {
	mPanics.WithLabelValues(where).Inc()
	log.Error().Interface("panic", p).Bytes("stack", stack).Str("where", where).Msg(msg)
}

// Collect runs on a goroutine of the registry's, which nothing else recovers: a panic ends the scrape's
// group series, not the process.
func (c groupCollector) Collect(ch chan<- prometheus.Metric) {
	defer func() {
		if p := recover(); p != nil {
			notePanic(c.g.log, "metrics", p, debug.Stack(), "panic collecting group metrics")
		}
	}()
	c.g.collectGroups(ch)
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
	names, unchecked, err := g.store.Groups(ctx)
	if err != nil {
		return
	}
	// Groups whose existence could not be checked are read too: their reads fail, and count as unread.
	names = slices.Concat(names, unchecked)
	slices.Sort(names)
	var own []string // sorted; the coordinating gateway exports a group, so each series has one source
	for _, name := range names {
		if g.nodes.isCoordinator(name) {
			own = append(own, name)
		}
	}
	// Every group's offsets are read at once, each of the read's steps for lagScrapeTimeout at most: a
	// Redis that stalls costs the scrape the groups it held up, not its deadline.
	offsets, errs := g.groupsOffsets(ctx, own, "", lagScrapeTimeout)
	unread := 0
	for i := range own {
		err := errs[i]
		for _, o := range offsets[i] {
			err = cmp.Or(err, o.err)
		}
		if err != nil {
			unread++
		}
	}
	series, dropped := 0, 0
	for i, name := range own {
		for _, o := range offsets[i] { // none when the read failed
			if o.UnknownTopic || o.err != nil { // no lag read: no series, rather than a lag of 0
				continue
			}
			if series >= g.cfg.LagMaxSeries {
				dropped++
				continue
			}
			m, err := prometheus.NewConstMetric(descGroupLag, prometheus.GaugeValue, float64(*o.Lag),
				node, name, o.Topic, strconv.Itoa(int(o.Partition)))
			if err != nil { // a group id that is no valid label value (not UTF-8)
				dropped++
				continue
			}
			series++
			ch <- m
		}
	}
	ch <- prometheus.MustNewConstMetric(descLagTruncated, prometheus.GaugeValue, float64(dropped), node)
	ch <- prometheus.MustNewConstMetric(descLagUnread, prometheus.GaugeValue, float64(unread), node)
}
