package gateway

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/coordinator"
	"github.com/kgate/kgate/protocol"
	"github.com/kgate/kgate/redisstore"
)

// FuzzRequests sends hostile requests to a gateway over loopback TCP, one connection each: a frame
// built from an API key, a version and body bytes, followed by an ApiVersions probe. The gateway must
// answer both in order, or close the connection, within a bounded time, and recover no panic. A request
// that decodes and names a version the gateway serves must be answered, not closed on (an acks=0
// produce is not answered by design), and every answer must decode as the response to its request.
//
// go test -run XXX -fuzz FuzzRequests -parallel 1 ./gateway
func FuzzRequests(f *testing.F) {
	env := startFuzzGateway(f)
	for _, s := range fuzzSeeds() {
		f.Add(s.key, s.version, uint8(0), s.body)
	}
	f.Add(int16(18), int16(99), uint8(4), []byte{0, 0})         // ApiVersions newer than the gateway
	f.Add(int16(0), int16(2), uint8(4), []byte{})               // Produce below the served versions
	f.Add(int16(3), int16(12), uint8(2), []byte{0, 0, 0, 0, 0}) // a flexible request with a v1 header
	f.Add(int16(999), int16(0), uint8(4), []byte{1, 2, 3})      // an API key nobody knows
	f.Fuzz(func(t *testing.T, key, version int16, mode uint8, body []byte) {
		if mode&4 == 0 {
			key, version = servedAPI(key, version)
		}
		env.run(t, key, version, mode, body)
	})
}

// servedAPI maps an API key and version the gateway does not serve onto one it does, so that most
// inputs reach a handler; mode bit 2 keeps them as they are.
func servedAPI(key, version int16) (int16, int16) {
	a, ok := lookupAPI(key)
	if !ok {
		keys := slices.Sorted(maps.Keys(supportedAPIs))
		key = keys[int(uint16(key))%len(keys)]
		a = supportedAPIs[key]
	}
	if version < a.min || version > a.max {
		version = a.min + int16(int(uint16(version))%int(a.max-a.min+1))
	}
	return key, version
}

// fuzzTopic is the topic the seeds name; fuzzGroup has committed offsets in it.
const (
	fuzzTopic      = "f"
	fuzzPartitions = 3
	fuzzGroup      = "fg"
	// Bounds on the work one input may ask for; inputs beyond them are skipped, not sent.
	fuzzMaxWait       = time.Second
	fuzzMaxPartitions = 16
	fuzzMaxTopics     = 8
	// fuzzAnswerWithin is how long, beyond what a request may wait by design, the gateway has to
	// answer or close.
	fuzzAnswerWithin = 5 * time.Second
)

type fuzzEnv struct {
	addr  string
	store *redisstore.Store
	logs  *syncBuffer
}

// syncBuffer collects the gateway's error logs, to show with a failure.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) take() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf.String()
	b.buf.Reset()
	return s
}

// startFuzzGateway serves a gateway over a fresh embedded store for the fuzz process, with topic
// fuzzTopic holding records and fuzzGroup's offsets committed in it. Sessions and rebalance delays are
// short, so that the members fuzz inputs leave behind do not hold later joins for long.
func startFuzzGateway(f testing.TB) *fuzzEnv {
	store, err := redisstore.Open(context.Background(), redisstore.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { store.Close() })
	logs := &syncBuffer{}
	log := zerolog.New(logs).Level(zerolog.ErrorLevel)
	g := New(Config{Listen: "127.0.0.1:0", NodeID: 1, Groups: coordinator.Config{
		InitialRebalanceDelay: 50 * time.Millisecond,
		MinSessionTimeout:     10 * time.Millisecond,
		MaxSessionTimeout:     2 * time.Second,
		EmptyGroupRetention:   10 * time.Second,
	}}, store, log)
	startServing(f, g)
	env := &fuzzEnv{addr: g.ln.Addr().String(), store: store, logs: logs}
	env.ensureTopic(f)

	// Records in every partition and offsets of a group committed, for fetches and offset requests.
	nc, err := net.Dial("tcp", env.addr)
	if err != nil {
		f.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	produce := kmsg.NewPtrProduceRequest()
	produce.Version, produce.Acks, produce.TimeoutMillis = 9, -1, 5000
	pt := kmsg.NewProduceRequestTopic()
	pt.Topic = fuzzTopic
	for p := range int32(fuzzPartitions) {
		pp := kmsg.NewProduceRequestTopicPartition()
		pp.Partition, pp.Records = p, fuzzBatch(f, 5)
		pt.Partitions = append(pt.Partitions, pp)
	}
	produce.Topics = append(produce.Topics, pt)
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Version, commit.Group, commit.Generation = 8, fuzzGroup, -1
	ct := kmsg.NewOffsetCommitRequestTopic()
	ct.Topic = fuzzTopic
	for p := range int32(fuzzPartitions) {
		cp := kmsg.NewOffsetCommitRequestTopicPartition()
		cp.Partition, cp.Offset = p, 2
		ct.Partitions = append(ct.Partitions, cp)
	}
	commit.Topics = append(commit.Topics, ct)
	for i, req := range []kmsg.Request{produce, commit} {
		if _, err := nc.Write(requestFrame(req, int32(i))); err != nil {
			f.Fatal(err)
		}
		if corr, _, err := readFrame(nc); err != nil || corr != int32(i) {
			f.Fatalf("setup request %d: correlation id %d, %v", i, corr, err)
		}
	}
	return env
}

// ensureTopic creates fuzzTopic unless it exists (an input may have deleted it).
func (e *fuzzEnv) ensureTopic(tb testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := e.store.Topic(ctx, fuzzTopic); err == nil {
		return
	}
	err := e.store.CreateTopic(ctx, redisstore.Topic{Name: fuzzTopic, Partitions: fuzzPartitions, Created: time.Now().UnixMilli()})
	if err != nil && !errors.Is(err, redisstore.ErrTopicExists) {
		tb.Fatal(err)
	}
}

// fuzzBatch is a batch of n small records.
func fuzzBatch(tb testing.TB, n int) []byte {
	now := time.Now().UnixMilli()
	recs := make([]protocol.Record, n)
	for i := range recs {
		recs[i] = protocol.Record{OffsetDelta: int32(i), Timestamp: now, Key: []byte("k"), Value: []byte(fmt.Sprint("v", i))}
	}
	batch, err := protocol.AppendCompressedBatch(nil, protocol.Batch{
		PartitionLeaderEpoch: -1, FirstTimestamp: now, MaxTimestamp: now, ProducerID: -1, ProducerEpoch: -1,
		BaseSequence: -1, NumRecords: int32(n), LastOffsetDelta: int32(n - 1), Records: recs,
	}, protocol.CodecNone)
	if err != nil {
		tb.Fatal(err)
	}
	return batch
}

// fuzzFrame frames body as a request of key and version with correlation id corr, its header as the
// version asks (mode bit 0: a null client id; bit 1: the other header, flexible or not).
func fuzzFrame(key, version int16, mode uint8, corr int32, body []byte) []byte {
	flexible := false
	if req := kmsg.RequestForKey(key); req != nil && version >= 0 && version <= req.MaxVersion() {
		req.SetVersion(version)
		flexible = req.IsFlexible()
	}
	if mode&2 != 0 {
		flexible = !flexible
	}
	frame := make([]byte, 4, 16+len(body))
	frame = binary.BigEndian.AppendUint16(frame, uint16(key))
	frame = binary.BigEndian.AppendUint16(frame, uint16(version))
	frame = binary.BigEndian.AppendUint32(frame, uint32(corr))
	if mode&1 != 0 {
		frame = binary.BigEndian.AppendUint16(frame, 0xffff)
	} else {
		frame = append(frame, 0, 1, 'z')
	}
	if flexible {
		frame = append(frame, 0)
	}
	frame = append(frame, body...)
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
	return frame
}

// fuzzRequest is what the gateway makes of a frame: the request when it decodes and its version is
// served, nil otherwise.
func fuzzRequest(frame []byte) kmsg.Request {
	hdr, body, err := protocol.ParseRequestHeader(frame[4:])
	if err != nil {
		return nil
	}
	a, ok := lookupAPI(hdr.APIKey)
	if !ok || hdr.APIVersion < a.min || hdr.APIVersion > a.max {
		return nil
	}
	req, err := protocol.DecodeRequest(hdr, body)
	if err != nil {
		return nil
	}
	return req
}

// bounded reports whether req asks for work within the fuzz bounds, and how long it may wait by
// design.
func bounded(req kmsg.Request) (ok bool, waits time.Duration) {
	switch r := req.(type) {
	case *kmsg.FetchRequest:
		wait := time.Duration(r.MaxWaitMillis) * time.Millisecond
		return wait <= fuzzMaxWait, max(wait, 0)
	case *kmsg.JoinGroupRequest:
		rebalance := r.RebalanceTimeoutMillis
		if r.Version == 0 {
			rebalance = r.SessionTimeoutMillis
		}
		// A join may wait for the members earlier inputs left, each up to its rebalance timeout.
		return rebalance <= 2000, 2 * time.Duration(max(rebalance, 0)) * time.Millisecond
	case *kmsg.SyncGroupRequest:
		return true, 4 * time.Second // for the leader's sync, until its session ends
	case *kmsg.CreateTopicsRequest:
		if len(r.Topics) > fuzzMaxTopics {
			return false, 0
		}
		for _, t := range r.Topics {
			if t.NumPartitions > fuzzMaxPartitions || len(t.ReplicaAssignment) > fuzzMaxPartitions {
				return false, 0
			}
		}
	case *kmsg.CreatePartitionsRequest:
		for _, t := range r.Topics {
			if t.Count > fuzzMaxPartitions {
				return false, 0
			}
		}
	}
	return true, 0
}

// panicsRecovered is the sum of kgate_panics_recovered_total.
func panicsRecovered() float64 {
	n := 0.0
	for _, where := range []string{"connection", "read_ahead", "group", "topic_reload", "tail_copy", "admin",
		"metrics", "store_probe", "store_read", "group_claim"} {
		n += testutil.ToFloat64(mPanics.WithLabelValues(where))
	}
	return n
}

func (e *fuzzEnv) run(t *testing.T, key, version int16, mode uint8, body []byte) {
	frame := fuzzFrame(key, version, mode, 1, body)
	req := fuzzRequest(frame)
	wait := time.Duration(0)
	if req != nil {
		var ok bool
		if ok, wait = bounded(req); !ok {
			t.Skip("beyond the fuzz bounds")
		}
	}
	answered := true // whether the request itself gets an answer
	if pr, ok := req.(*kmsg.ProduceRequest); ok && pr.Acks == 0 {
		answered = false
	}
	mustAnswer := req != nil && answered

	before := panicsRecovered()
	e.logs.take()
	defer func() {
		if n := panicsRecovered() - before; n != 0 {
			t.Fatalf("%v panics recovered:\n%s", n, e.logs.take())
		}
	}()
	nc, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	deadline := time.Now().Add(fuzzAnswerWithin + wait)
	_ = nc.SetDeadline(deadline)
	out := append(frame, fuzzFrame(apiVersionsKey, 0, 0, 2, nil)...) // the probe
	if _, err := nc.Write(out); err != nil && !closedErr(err) {
		t.Fatalf("write: %v", err)
	}

	var want []int32
	if answered {
		want = append(want, 1)
	}
	want = append(want, 2)
	for i, corr := range want {
		got, resp, err := readFrame(nc)
		switch {
		case isTimeout(err):
			t.Fatalf("no answer to correlation id %d nor a close in %v (request %T)", corr, fuzzAnswerWithin+wait, req)
		case err != nil && closedErr(err):
			if i == 0 && mustAnswer {
				t.Fatalf("the connection closed on a valid %s v%d request: %s", kmsg.NameForKey(key), version, e.logs.take())
			}
			return // closed after i answers
		case err != nil:
			t.Fatalf("read: %v", err)
		case got != corr:
			t.Fatalf("answer with correlation id %d, want %d", got, corr)
		}
		if corr == 1 {
			answerCovers(t, req, checkResponse(t, key, version, resp))
		}
	}
	if key == 20 {
		e.ensureTopic(t)
	}
	if r, ok := req.(*kmsg.CreateTopicsRequest); ok { // topics created by inputs do not pile up
		for _, rt := range r.Topics {
			if rt.Topic != fuzzTopic {
				_ = e.store.DeleteTopic(context.Background(), rt.Topic)
			}
		}
	}
}

// checkResponse decodes an answer to a request of key and version.
func checkResponse(t *testing.T, key, version int16, body []byte) kmsg.Response {
	resp := kmsg.ResponseForKey(key)
	if resp == nil {
		t.Fatalf("an answer to API key %d, which has no response", key)
	}
	a, _ := lookupAPI(key)
	if key == apiVersionsKey && (version < a.min || version > a.max) {
		version = 0 // UNSUPPORTED_VERSION is answered at v0
	}
	resp.SetVersion(version)
	if resp.IsFlexible() && key != apiVersionsKey {
		if len(body) == 0 || body[0] != 0 {
			t.Fatalf("response header tags % x", body[:min(len(body), 8)])
		}
		body = body[1:]
	}
	if err := resp.ReadFrom(body); err != nil {
		t.Fatalf("%s v%d answer does not decode: %v", kmsg.NameForKey(key), version, err)
	}
	return resp
}

// answerCovers checks that resp answers every partition (or topic) req names, as Apache answers each:
// a client waits for the ones left out until its request times out.
func answerCovers(t *testing.T, req kmsg.Request, resp kmsg.Response) {
	type tp struct {
		topic     string
		partition int32
	}
	asked, answered := map[tp]bool{}, map[tp]bool{}
	switch r := req.(type) {
	case *kmsg.ProduceRequest:
		for _, rt := range r.Topics {
			for _, rp := range rt.Partitions {
				asked[tp{rt.Topic, rp.Partition}] = true
			}
		}
		for _, st := range resp.(*kmsg.ProduceResponse).Topics {
			for _, sp := range st.Partitions {
				answered[tp{st.Topic, sp.Partition}] = true
				if sp.ErrorCode == 0 && sp.BaseOffset < 0 {
					t.Fatalf("produce to %s/%d succeeded at base offset %d", st.Topic, sp.Partition, sp.BaseOffset)
				}
			}
		}
	case *kmsg.ListOffsetsRequest:
		for _, rt := range r.Topics {
			for _, rp := range rt.Partitions {
				asked[tp{rt.Topic, rp.Partition}] = true
			}
		}
		for _, st := range resp.(*kmsg.ListOffsetsResponse).Topics {
			for _, sp := range st.Partitions {
				answered[tp{st.Topic, sp.Partition}] = true
			}
		}
	case *kmsg.OffsetCommitRequest:
		for _, rt := range r.Topics {
			for _, rp := range rt.Partitions {
				asked[tp{rt.Topic, rp.Partition}] = true
			}
		}
		for _, st := range resp.(*kmsg.OffsetCommitResponse).Topics {
			for _, sp := range st.Partitions {
				answered[tp{st.Topic, sp.Partition}] = true
			}
		}
	case *kmsg.DeleteRecordsRequest:
		for _, rt := range r.Topics {
			for _, rp := range rt.Partitions {
				asked[tp{rt.Topic, rp.Partition}] = true
			}
		}
		for _, st := range resp.(*kmsg.DeleteRecordsResponse).Topics {
			for _, sp := range st.Partitions {
				answered[tp{st.Topic, sp.Partition}] = true
			}
		}
	case *kmsg.OffsetDeleteRequest:
		sr := resp.(*kmsg.OffsetDeleteResponse)
		if sr.ErrorCode != 0 {
			return // a group-level error answers no partition
		}
		for _, rt := range r.Topics {
			for _, rp := range rt.Partitions {
				asked[tp{rt.Topic, rp.Partition}] = true
			}
		}
		for _, st := range sr.Topics {
			for _, sp := range st.Partitions {
				answered[tp{st.Topic, sp.Partition}] = true
			}
		}
	case *kmsg.CreateTopicsRequest:
		for _, rt := range r.Topics {
			asked[tp{rt.Topic, -1}] = true
		}
		for _, st := range resp.(*kmsg.CreateTopicsResponse).Topics {
			answered[tp{st.Topic, -1}] = true
		}
	case *kmsg.CreatePartitionsRequest:
		for _, rt := range r.Topics {
			asked[tp{rt.Topic, -1}] = true
		}
		for _, st := range resp.(*kmsg.CreatePartitionsResponse).Topics {
			answered[tp{st.Topic, -1}] = true
		}
	case *kmsg.DescribeConfigsRequest:
		for _, rr := range r.Resources {
			asked[tp{rr.ResourceName, int32(rr.ResourceType)}] = true
		}
		for _, sr := range resp.(*kmsg.DescribeConfigsResponse).Resources {
			answered[tp{sr.ResourceName, int32(sr.ResourceType)}] = true
		}
	case *kmsg.DeleteGroupsRequest:
		for _, g := range r.Groups {
			asked[tp{g, -1}] = true
		}
		for _, sg := range resp.(*kmsg.DeleteGroupsResponse).Groups {
			answered[tp{sg.Group, -1}] = true
		}
	case *kmsg.DescribeGroupsRequest:
		for _, g := range r.Groups {
			asked[tp{g, -1}] = true
		}
		for _, sg := range resp.(*kmsg.DescribeGroupsResponse).Groups {
			answered[tp{sg.Group, -1}] = true
		}
	}
	for k := range asked {
		if !answered[k] {
			t.Fatalf("%s answers nothing for %q partition %d", kmsg.NameForKey(req.Key()), k.topic, k.partition)
		}
	}
}

// readFrame reads one response frame: its correlation id and what follows.
func readFrame(nc net.Conn) (int32, []byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(nc, size[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n < 4 || n > 64<<20 {
		return 0, nil, fmt.Errorf("response frame of %d bytes", n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(nc, body); err != nil {
		return 0, nil, err
	}
	return int32(binary.BigEndian.Uint32(body)), body[4:], nil
}

// closedErr reports an error of a connection the gateway closed (an end of stream or a reset).
func closedErr(err error) bool {
	return err != nil && !isTimeout(err) && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || isReset(err))
}

func isReset(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe)
}

type fuzzSeed struct {
	key, version int16
	body         []byte
}

// fuzzSeeds are valid requests of every API the gateway serves, at each version it serves, naming
// fuzzTopic and fuzzGroup.
func fuzzSeeds() []fuzzSeed {
	var reqs []kmsg.Request

	produce := kmsg.NewPtrProduceRequest()
	produce.Acks, produce.TimeoutMillis = -1, 1000
	pt := kmsg.NewProduceRequestTopic()
	pt.Topic = fuzzTopic
	pp := kmsg.NewProduceRequestTopicPartition()
	pp.Partition, pp.Records = 1, fuzzBatch(nopTB{}, 3)
	pt.Partitions = append(pt.Partitions, pp)
	produce.Topics = append(produce.Topics, pt)
	reqs = append(reqs, produce)

	fetch := kmsg.NewPtrFetchRequest()
	fetch.ReplicaID, fetch.MaxWaitMillis, fetch.MinBytes, fetch.MaxBytes = -1, 100, 1, 1<<20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = fuzzTopic
	for p := range int32(2) {
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.Partition, fp.FetchOffset, fp.PartitionMaxBytes = p, 1, 1<<20
		ft.Partitions = append(ft.Partitions, fp)
	}
	fetch.Topics = append(fetch.Topics, ft)
	reqs = append(reqs, fetch)

	lo := kmsg.NewPtrListOffsetsRequest()
	lo.ReplicaID = -1
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = fuzzTopic
	for p, ts := range []int64{-1, -2, 0} {
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Partition, lp.Timestamp = int32(p), ts
		lt.Partitions = append(lt.Partitions, lp)
	}
	lo.Topics = append(lo.Topics, lt)
	reqs = append(reqs, lo)

	md := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(fuzzTopic)
	md.Topics = append(md.Topics, mt)
	reqs = append(reqs, md)

	oc := kmsg.NewPtrOffsetCommitRequest()
	oc.Group, oc.Generation = fuzzGroup, -1
	oct := kmsg.NewOffsetCommitRequestTopic()
	oct.Topic = fuzzTopic
	ocp := kmsg.NewOffsetCommitRequestTopicPartition()
	ocp.Partition, ocp.Offset = 1, 3
	oct.Partitions = append(oct.Partitions, ocp)
	oc.Topics = append(oc.Topics, oct)
	reqs = append(reqs, oc)

	of := kmsg.NewPtrOffsetFetchRequest()
	of.Group = fuzzGroup
	oft := kmsg.NewOffsetFetchRequestTopic()
	oft.Topic, oft.Partitions = fuzzTopic, []int32{0, 1, 2}
	of.Topics = append(of.Topics, oft)
	ofg := kmsg.NewOffsetFetchRequestGroup()
	ofg.Group = fuzzGroup
	ofgt := kmsg.NewOffsetFetchRequestGroupTopic()
	ofgt.Topic, ofgt.Partitions = fuzzTopic, []int32{0, 1}
	ofg.Topics = append(ofg.Topics, ofgt)
	of.Groups = append(of.Groups, ofg)
	reqs = append(reqs, of)

	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorKey, fc.CoordinatorKeys = fuzzGroup, []string{fuzzGroup}
	reqs = append(reqs, fc)

	join := kmsg.NewPtrJoinGroupRequest()
	join.Group, join.SessionTimeoutMillis, join.RebalanceTimeoutMillis, join.ProtocolType = "jg", 100, 100, "consumer"
	jp := kmsg.NewJoinGroupRequestProtocol()
	jp.Name, jp.Metadata = "range", []byte{0, 1, 0, 0, 0, 1, 0, 1, 'f', 0, 0, 0, 0}
	join.Protocols = append(join.Protocols, jp)
	reqs = append(reqs, join)

	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Group, hb.Generation, hb.MemberID = "jg", 1, "m"
	reqs = append(reqs, hb)

	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.Group, leave.MemberID = "jg", "m"
	lm := kmsg.NewLeaveGroupRequestMember()
	lm.MemberID = "m"
	leave.Members = append(leave.Members, lm)
	reqs = append(reqs, leave)

	sync := kmsg.NewPtrSyncGroupRequest()
	sync.Group, sync.Generation, sync.MemberID = "jg", 1, "m"
	sa := kmsg.NewSyncGroupRequestGroupAssignment()
	sa.MemberID, sa.MemberAssignment = "m", []byte{0, 1, 0, 0, 0, 0, 0, 0, 0, 0}
	sync.GroupAssignment = append(sync.GroupAssignment, sa)
	reqs = append(reqs, sync)

	dg := kmsg.NewPtrDescribeGroupsRequest()
	dg.Groups = []string{fuzzGroup, "jg"}
	reqs = append(reqs, dg)

	reqs = append(reqs, kmsg.NewPtrListGroupsRequest())

	av := kmsg.NewPtrApiVersionsRequest()
	av.ClientSoftwareName, av.ClientSoftwareVersion = "fuzz", "1"
	reqs = append(reqs, av)

	ctr := kmsg.NewPtrCreateTopicsRequest()
	ctr.TimeoutMillis = 1000
	ctt := kmsg.NewCreateTopicsRequestTopic()
	ctt.Topic, ctt.NumPartitions, ctt.ReplicationFactor = "new", 2, 1
	cc := kmsg.NewCreateTopicsRequestTopicConfig()
	cc.Name, cc.Value = "retention.ms", kmsg.StringPtr("60000")
	ctt.Configs = append(ctt.Configs, cc)
	ctr.Topics = append(ctr.Topics, ctt)
	reqs = append(reqs, ctr)

	dt := kmsg.NewPtrDeleteTopicsRequest()
	dt.TimeoutMillis, dt.TopicNames = 1000, []string{"gone"}
	dtt := kmsg.NewDeleteTopicsRequestTopic()
	dtt.Topic = kmsg.StringPtr("gone")
	dt.Topics = append(dt.Topics, dtt)
	reqs = append(reqs, dt)

	dr := kmsg.NewPtrDeleteRecordsRequest()
	dr.TimeoutMillis = 1000
	drt := kmsg.NewDeleteRecordsRequestTopic()
	drt.Topic = fuzzTopic
	drp := kmsg.NewDeleteRecordsRequestTopicPartition()
	drp.Partition, drp.Offset = 2, 1
	drt.Partitions = append(drt.Partitions, drp)
	dr.Topics = append(dr.Topics, drt)
	reqs = append(reqs, dr)

	ip := kmsg.NewPtrInitProducerIDRequest()
	ip.TransactionTimeoutMillis = 60000
	reqs = append(reqs, ip)

	dc := kmsg.NewPtrDescribeConfigsRequest()
	dcr := kmsg.NewDescribeConfigsRequestResource()
	dcr.ResourceType, dcr.ResourceName = kmsg.ConfigResourceTypeTopic, fuzzTopic
	dc.Resources = append(dc.Resources, dcr)
	dcb := kmsg.NewDescribeConfigsRequestResource()
	dcb.ResourceType, dcb.ResourceName, dcb.ConfigNames = kmsg.ConfigResourceTypeBroker, "1", []string{"log.retention.ms"}
	dc.Resources = append(dc.Resources, dcb)
	reqs = append(reqs, dc)

	cp := kmsg.NewPtrCreatePartitionsRequest()
	cp.TimeoutMillis, cp.ValidateOnly = 1000, true
	cpt := kmsg.NewCreatePartitionsRequestTopic()
	cpt.Topic, cpt.Count = fuzzTopic, 4
	cp.Topics = append(cp.Topics, cpt)
	reqs = append(reqs, cp)

	dgr := kmsg.NewPtrDeleteGroupsRequest()
	dgr.Groups = []string{"nogroup"}
	reqs = append(reqs, dgr)

	od := kmsg.NewPtrOffsetDeleteRequest()
	od.Group = fuzzGroup
	odt := kmsg.NewOffsetDeleteRequestTopic()
	odt.Topic = fuzzTopic
	odp := kmsg.NewOffsetDeleteRequestTopicPartition()
	odp.Partition = 2
	odt.Partitions = append(odt.Partitions, odp)
	od.Topics = append(od.Topics, odt)
	reqs = append(reqs, od)

	reqs = append(reqs, kmsg.NewPtrDescribeClusterRequest())

	var seeds []fuzzSeed
	for _, req := range reqs {
		a, ok := lookupAPI(req.Key())
		if !ok {
			panic(fmt.Sprintf("fuzz seed for API key %d, which the gateway does not serve", req.Key()))
		}
		for v := a.min; v <= a.max; v++ {
			req.SetVersion(v)
			seeds = append(seeds, fuzzSeed{req.Key(), v, req.AppendTo(nil)})
		}
	}
	return seeds
}

// nopTB is a testing.TB for building seeds, which cannot fail.
type nopTB struct{ testing.TB }

func (nopTB) Fatal(args ...any) { panic(fmt.Sprint(args...)) }
