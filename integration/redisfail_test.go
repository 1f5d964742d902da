package integration

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/gateway"
	"github.com/kgate/kgate/internal/redistest"
	"github.com/kgate/kgate/redisstore"
)

// startGatewayWithStore is startGateway for a store opened with opts (own Redis, own timeouts). The
// gateway and store stop at test cleanup.
func startGatewayWithStore(t *testing.T, opts redisstore.Options) *testGateway {
	t.Helper()
	return startGatewayWithStoreCfg(t, opts, nil)
}

// startGatewayWithStoreCfg is startGatewayWithStore with a gateway config tweak.
func startGatewayWithStoreCfg(t *testing.T, opts redisstore.Options, mutate func(*gateway.Config)) *testGateway {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, err := redisstore.Open(ctx, opts)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	cfg := gateway.Config{Listen: "127.0.0.1:0", AutoCreateTopics: true}
	if mutate != nil {
		mutate(&cfg)
	}
	return serveGateway(t, store, cfg)
}

// failedReads is a go-redis hook counting the failed HGETALLs of key (the topic registry).
type failedReads struct {
	key    string
	failed atomic.Int64
}

func (h *failedReads) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *failedReads) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if args := cmd.Args(); err != nil && len(args) == 2 && cmd.Name() == "hgetall" && args[1] == h.key {
			h.failed.Add(1)
		}
		return err
	}
}

func (h *failedReads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestRedisUnavailable: when Redis is slow (DEBUG SLEEP) or gone, Produce and Fetch (and, with Redis
// gone, ListOffsets, Metadata, CreateTopics, InitProducerId) answer retriable Kafka errors within the
// store's command timeout instead of success or a crash, and the gateway keeps serving: it recovers
// when a slow Redis answers again and still speaks ApiVersions when Redis is down.
func TestRedisUnavailable(t *testing.T) {
	t.Parallel()
	// DEBUG SLEEP (the stall) needs enable-debug-command on Redis 7; a Redis older than 7 does not know
	// the option, has DEBUG enabled anyway, and starts without it.
	srv, err := redistest.Start("--enable-debug-command", "yes")
	if err != nil {
		srv, err = redistest.Start()
	}
	if err != nil {
		t.Fatalf("redis-server: %v", err)
	}
	t.Cleanup(srv.Stop)
	const cmdTimeout = 500 * time.Millisecond
	octx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, err := redisstore.Open(octx, redisstore.Options{Addrs: []string{srv.Addr}, Namespace: "fail",
		CommandTimeout: cmdTimeout, DialTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	registry := &failedReads{key: store.Namespace() + ":topics"}
	store.Client().AddHook(registry) // before the gateway uses the store
	g := serveGateway(t, store, gateway.Config{Listen: "127.0.0.1:0", AutoCreateTopics: true})
	ctx := testCtx(t, 30*time.Second)
	mustCreateTopics(t, ctx, newAdmin(t, g), 1, nil, "fragile")
	c := dialRaw(t, g.Addr)

	seq := 0
	produce := func() (int16, time.Duration) {
		t.Helper()
		seq++
		req := produceReq("fragile", 0, 1, rawBatch(t, -1, -1, -1, time.Now().UnixMilli(), "r"))
		start := time.Now()
		sp := producePart(t, roundTrip[*kmsg.ProduceResponse](c, 9, req))
		return sp.ErrorCode, time.Since(start)
	}
	// Produce may answer REQUEST_TIMED_OUT (the batch's fate is unknown; producers retry it); the other
	// data APIs NOT_LEADER_OR_FOLLOWER, which clients retry everywhere (the Java consumer throws from
	// poll() on a REQUEST_TIMED_OUT in a fetch).
	retriable := func(what string, code int16, took time.Duration) {
		t.Helper()
		mayTimeOut := strings.HasPrefix(what, "produce")
		if code != kerr.NotLeaderForPartition.Code && (code != kerr.RequestTimedOut.Code || !mayTimeOut) {
			t.Fatalf("%s: error %d (%v), want NOT_LEADER_OR_FOLLOWER (or REQUEST_TIMED_OUT on produce)", what, code, kerr.ErrorForCode(code))
		}
		t.Logf("%s: code %d after %v", what, code, took)
		// One command timeout (each request waits on one Redis call at a time), plus scheduling slack.
		if took > cmdTimeout+400*time.Millisecond {
			t.Fatalf("%s: answered after %v, command timeout %v", what, took, cmdTimeout)
		}
	}
	if code, _ := produce(); code != 0 {
		t.Fatalf("produce with Redis up: error %d", code)
	}

	// Slow: Redis sleeps for 2 s. DEBUG SLEEP blocks its caller too, so it runs aside on a client of
	// its own (the store's would time out).
	sleeper := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 10 * time.Second})
	defer sleeper.Close()
	slept := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		slept <- sleeper.Do(sctx, "DEBUG", "SLEEP", "2").Err()
	}()
	waitFor(t, 5*time.Second, "redis to stall", func() bool {
		pctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		return g.Store.Client().Ping(pctx).Err() != nil
	})
	code, took := produce()
	retriable("produce while Redis is stalled", code, took)
	fr := fetchReq("fragile", [16]byte{}, 0, 0, 1<<20)
	start := time.Now()
	sp := fetchPart(t, roundTrip[*kmsg.FetchResponse](c, 12, fr))
	retriable("fetch while Redis is stalled", sp.ErrorCode, time.Since(start))
	c.apiVersionsOK()
	if err := <-slept; err != nil {
		t.Fatalf("DEBUG SLEEP: %v", err)
	}
	// Awake again: the gateway serves from the same connection.
	waitFor(t, 5*time.Second, "produce to succeed after the stall", func() bool { code, _ := produce(); return code == 0 })

	// Gone.
	srv.Stop()
	failedBefore := registry.failed.Load()
	dataRound := func() {
		t.Helper()
		code, took := produce()
		retriable("produce with Redis stopped", code, took)
		start := time.Now()
		sp := fetchPart(t, roundTrip[*kmsg.FetchResponse](c, 12, fr))
		retriable("fetch with Redis stopped", sp.ErrorCode, time.Since(start))
	}
	// Also past the topic cache's lifetime (1 s), when a lookup's registry read fails too, and once
	// more after that, with the view served stale.
	waitFor(t, 10*time.Second, "a read of the topic registry to fail", func() bool {
		dataRound()
		return registry.failed.Load() > failedBefore
	})
	dataRound()
	// The other Redis-backed APIs answer retriable errors too.
	lreq := kmsg.NewPtrListOffsetsRequest()
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = "fragile"
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.Partition, lp.Timestamp = 0, -1
	lt.Partitions = append(lt.Partitions, lp)
	lreq.Topics = append(lreq.Topics, lt)
	start = time.Now()
	lo := roundTrip[*kmsg.ListOffsetsResponse](c, 7, lreq)
	retriable("list offsets with Redis stopped", lo.Topics[0].Partitions[0].ErrorCode, time.Since(start))
	// Metadata is answered from the topics the gateway last read, as a Kafka broker answers from its
	// cached metadata (gateway/topics.go: maxStaleView), within the wait for the reload it started.
	start = time.Now()
	md := roundTrip[*kmsg.MetadataResponse](c, 12, metadataReq("fragile", false))
	if took := time.Since(start); md.Topics[0].ErrorCode != 0 || len(md.Topics[0].Partitions) != 1 || took > cmdTimeout {
		t.Fatalf("metadata with Redis stopped: error %d, %d partitions after %v; want the last view's topic at once",
			md.Topics[0].ErrorCode, len(md.Topics[0].Partitions), took)
	}
	creq := kmsg.NewPtrCreateTopicsRequest()
	ct := kmsg.NewCreateTopicsRequestTopic()
	ct.Topic, ct.NumPartitions, ct.ReplicationFactor = "new", 1, 1
	creq.Topics = append(creq.Topics, ct)
	start = time.Now()
	cr := roundTrip[*kmsg.CreateTopicsResponse](c, 7, creq)
	if code, took := cr.Topics[0].ErrorCode, time.Since(start); code != kerr.RequestTimedOut.Code || took > cmdTimeout+400*time.Millisecond {
		// The admin requests answer REQUEST_TIMED_OUT, as Apache's do when its controller does not.
		t.Fatalf("create topics with Redis stopped: error %d (%v) after %v, want REQUEST_TIMED_OUT within the command timeout", code, kerr.ErrorForCode(code), took)
	}
	// A commit's topic lookup failing is a coordinator problem to the client (the Java consumer's
	// commitSync throws on NOT_LEADER_OR_FOLLOWER there).
	oreq := rawCommitReq("fail-group", "", -1, "fragile", 0, 1, nil)
	if code := commitCode(t, roundTrip[*kmsg.OffsetCommitResponse](c, 8, oreq)); code != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("OffsetCommit with Redis stopped: error %d (%v), want COORDINATOR_NOT_AVAILABLE", code, kerr.ErrorForCode(code))
	}
	ireq := kmsg.NewPtrInitProducerIDRequest()
	ireq.ProducerID, ireq.ProducerEpoch = -1, -1
	if ir := roundTrip[*kmsg.InitProducerIDResponse](c, 4, ireq); ir.ErrorCode != kerr.CoordinatorLoadInProgress.Code {
		t.Fatalf("InitProducerID with Redis stopped: error %d, want COORDINATOR_LOAD_IN_PROGRESS", ir.ErrorCode)
	}

	c.apiVersionsOK()
	dialRaw(t, g.Addr).apiVersionsOK()
}
