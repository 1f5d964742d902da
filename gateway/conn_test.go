package gateway

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/coordinator"
	"github.com/kgate/kgate/protocol"
	"github.com/kgate/kgate/redisstore"
)

var goroutineID = regexp.MustCompile(`^goroutine (\d+) `)

// appenderIDs are the goroutine ids of the gateway's connection appenders (runAppends).
func appenderIDs() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var ids []string
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("gateway.(*conn).runAppends")) {
			ids = append(ids, goroutineID.FindStringSubmatch(string(g))[1])
		}
	}
	return ids
}

// TestConnectionAppenderLivesWithTheConnection: a connection's produce requests, one at a time, are all
// appended by the one goroutine its first produce started, and that goroutine returns when the
// connection closes.
func TestConnectionAppenderLivesWithTheConnection(t *testing.T) {
	ctx, client, served := serveTestConn(t)
	if ids := appenderIDs(); len(ids) != 0 {
		t.Fatalf("appenders before any produce: %v", ids)
	}

	var first string
	for i := range 5 {
		produce(t, client, int32(i+1), int64(i))
		ids := appenderIDs()
		if len(ids) != 1 {
			t.Fatalf("after produce %d: appenders %v, want one", i, ids)
		}
		if i == 0 {
			first = ids[0]
		} else if ids[0] != first {
			t.Fatalf("produce %d appended by goroutine %s, the first by %s: want the same", i, ids[0], first)
		}
	}
	closeTestConn(t, ctx, client, served)
}

// TestConnectionAnswersInOrder: produces queued for the appender and a request behind them, written at
// once, are answered in request order; the connection then closes with its appender.
func TestConnectionAnswersInOrder(t *testing.T) {
	ctx, client, served := serveTestConn(t)
	frames := produceFrames(t, 3)
	frames = append(frames, apiVersionsFrame(4)...)
	go func() { _, _ = client.Write(frames) }() // net.Pipe: the write returns once the gateway read it all
	_ = client.SetDeadline(time.Now().Add(10 * time.Second))
	for want := int32(1); want <= 4; want++ {
		if got, _ := readResponse(t, client); got != want {
			t.Fatalf("response with correlation id %d, want %d (out of order)", got, want)
		}
	}
	closeTestConn(t, ctx, client, served)
}

// TestConnectionClosedWithAnswersPending: a client that sends produces and closes without reading the
// answers (the appender fails writing them) leaves no appender and no connection behind.
func TestConnectionClosedWithAnswersPending(t *testing.T) {
	ctx, client, served := serveTestConn(t)
	frames := produceFrames(t, 3)
	_ = client.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := client.Write(frames); err != nil {
		t.Fatalf("write: %v", err)
	}
	closeTestConn(t, ctx, client, served)
}

// embeddedGateway builds a gateway with cfg over a fresh embedded store (both closed at cleanup);
// ctx ends with the test, at the latest after 20 s.
func embeddedGateway(t *testing.T, cfg Config) (context.Context, *Gateway, *redisstore.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	store, err := redisstore.Open(ctx, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return ctx, New(cfg, store, zerolog.Nop()), store
}

// closeTestConn closes the client side and checks the gateway is done with the connection and left no
// appender behind.
func closeTestConn(t *testing.T, ctx context.Context, client net.Conn, served chan struct{}) {
	t.Helper()
	client.Close()
	select {
	case <-served:
	case <-ctx.Done():
		t.Fatal("connection not closed")
	}
	// The appender has returned (stopAppends waited for it), but its goroutine may still be finishing
	// its last instructions, and so still listed, for a moment.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		ids := appenderIDs()
		if len(ids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("appenders after the connection closed: %v", ids)
		}
	}
}

// serveTestConn serves one in-memory connection on a gateway over the embedded store (topic
// "appender", one partition); served is closed when the gateway is done with the connection.
func serveTestConn(t *testing.T) (ctx context.Context, client net.Conn, served chan struct{}) {
	ctx, g, store := embeddedGateway(t, Config{})
	createTopic(t, store, "appender", 1)
	client, served = servePipe(t, g)
	return ctx, client, served
}

// servePipe serves one in-memory connection on g (unbuffered: a write waits for its reader); served is
// closed when the gateway is done with it. The client side is closed at cleanup.
func servePipe(t *testing.T, g *Gateway) (client net.Conn, served chan struct{}) {
	t.Helper()
	client, server := net.Pipe()
	if !g.track(server) {
		t.Fatal("track refused")
	}
	served = make(chan struct{})
	go func() {
		defer close(served)
		g.serveConn(server)
	}()
	t.Cleanup(func() {
		client.Close()
		<-served
	})
	return client, served
}

// produce sends one acks=-1 Produce of one record to partition 0 of "appender" and checks its answer.
func produce(t *testing.T, nc net.Conn, corr int32, wantOffset int64) {
	t.Helper()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Write(produceFrame(t, corr)); err != nil {
		t.Fatalf("write produce: %v", err)
	}
	got, body := readResponse(t, nc)
	if got != corr {
		t.Fatalf("correlation id %d, want %d", got, corr)
	}
	resp := kmsg.NewPtrProduceResponse()
	resp.Version = 9
	if err := resp.ReadFrom(body[1:]); err != nil { // after the flexible header's tags
		t.Fatalf("decode produce response: %v", err)
	}
	sp := resp.Topics[0].Partitions[0]
	if sp.ErrorCode != 0 || sp.BaseOffset != wantOffset {
		t.Fatalf("produce: error %d base offset %d, want 0 and %d", sp.ErrorCode, sp.BaseOffset, wantOffset)
	}
}

// produceFrames is n produce frames (produceFrame) of correlation ids 1 to n, back to back.
func produceFrames(t *testing.T, n int) []byte {
	var frames []byte
	for i := range n {
		frames = append(frames, produceFrame(t, int32(i+1))...)
	}
	return frames
}

// produceFrame is a v9 acks=-1 Produce of one record to partition 0 of "appender".
func produceFrame(t *testing.T, corr int32) []byte {
	return produceFrameOf(t, corr, []byte("v"))
}

// produceFrameOf is produceFrame with the record's value.
func produceFrameOf(t *testing.T, corr int32, value []byte) []byte {
	return requestFrame(produceRequest(t, "appender", value), corr)
}

// produceRequest is a v9 acks=-1 Produce of one batch of values to partition 0 of topic.
func produceRequest(t *testing.T, topic string, values ...[]byte) *kmsg.ProduceRequest {
	t.Helper()
	now := time.Now().UnixMilli()
	recs := make([]protocol.Record, len(values))
	for i, v := range values {
		recs[i] = protocol.Record{OffsetDelta: int32(i), Timestamp: now, Value: v}
	}
	batch, err := protocol.AppendCompressedBatch(nil, protocol.Batch{
		PartitionLeaderEpoch: -1, FirstTimestamp: now, MaxTimestamp: now,
		ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, NumRecords: int32(len(values)),
		LastOffsetDelta: int32(len(values) - 1), Records: recs,
	}, protocol.CodecNone)
	if err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 9, -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

// apiVersionsFrame is a v3 ApiVersions request.
func apiVersionsFrame(corr int32) []byte {
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = 3
	req.ClientSoftwareName, req.ClientSoftwareVersion = "t", "1"
	return requestFrame(req, corr)
}

// requestFrame frames a flexible-version request (header v2, client id "t").
func requestFrame(req kmsg.Request, corr int32) []byte {
	frame := make([]byte, 4, 64)
	frame = binary.BigEndian.AppendUint16(frame, uint16(req.Key()))
	frame = binary.BigEndian.AppendUint16(frame, uint16(req.GetVersion()))
	frame = binary.BigEndian.AppendUint32(frame, uint32(corr))
	frame = binary.BigEndian.AppendUint16(frame, 1)
	frame = append(frame, 't')
	frame = append(frame, 0) // tagged fields
	frame = req.AppendTo(frame)
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
	return frame
}

// readResponse reads one response frame: its correlation id and the rest.
func readResponse(t *testing.T, nc net.Conn) (int32, []byte) {
	t.Helper()
	var size [4]byte
	if _, err := io.ReadFull(nc, size[:]); err != nil {
		t.Fatalf("read response: %v", err)
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(nc, body); err != nil {
		t.Fatalf("read response: %v", err)
	}
	return int32(binary.BigEndian.Uint32(body)), body[4:]
}

// A frame's buffer grows with the bytes that arrive: a size prefix announcing 64 MiB followed by ten
// bytes holds about a megabyte, not the 64 MiB announced; a body of several megabytes arrives intact.
func TestFrameBufferGrowsWithTheBytes(t *testing.T) {
	client, server := net.Pipe()
	defer server.Close()
	c := &conn{g: &Gateway{}, nc: server}
	go func() {
		_, _ = client.Write(make([]byte, 10))
		client.Close()
	}()
	bufp, buf, err := c.readBody(64 << 20)
	if err == nil || len(buf) != 10 || cap(buf) > 2*bodyGrowStep {
		t.Fatalf("64 MiB announced, 10 bytes sent: err %v, %d bytes read into a buffer of %d", err, len(buf), cap(buf))
	}
	putBuf(bufp, buf)

	client, server = net.Pipe()
	defer server.Close()
	c.nc = server
	want := make([]byte, 5<<20+123)
	for i := range want {
		want[i] = byte(i * 7)
	}
	go func() {
		for rest := want; len(rest) > 0; { // in pieces, as a network delivers them
			n := min(len(rest), 64<<10+17)
			_, _ = client.Write(rest[:n])
			rest = rest[n:]
		}
		client.Close()
	}()
	bufp, buf, err = c.readBody(len(want))
	if err != nil || !bytes.Equal(buf, want) {
		t.Fatalf("5 MiB body: err %v, %d bytes read, equal %v", err, len(buf), bytes.Equal(buf, want))
	}
	putBuf(bufp, buf)
}

// A connection no request byte reaches for Config.IdleTimeout is closed; requests keep it open.
func TestIdleConnectionClosed(t *testing.T) {
	ctx, g, _ := embeddedGateway(t, Config{IdleTimeout: time.Second})
	client, served := servePipe(t, g)
	opened := time.Now()
	for i := range 6 { // 1.5 s of requests, 250 ms apart
		if _, err := client.Write(apiVersionsFrame(int32(i))); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if corr, _ := readResponse(t, client); corr != int32(i) {
			t.Fatalf("answer to %d has correlation id %d", i, corr)
		}
		time.Sleep(250 * time.Millisecond)
	}
	select {
	case <-served:
	case <-ctx.Done():
		t.Fatal("idle connection not closed")
	}
	if open := time.Since(opened); open < 2*time.Second {
		t.Fatalf("closed after %v, while requests kept it busy", open)
	}
}

// ApiVersions v3 refuses a client software name or version Apache refuses (INVALID_REQUEST, no API
// list) and keeps the last valid pair for the connection's log, replacing the one before.
func TestApiVersionsSoftwareName(t *testing.T) {
	c := &conn{g: &Gateway{}}
	ask := func(name, version string) *kmsg.ApiVersionsResponse {
		req := kmsg.NewPtrApiVersionsRequest()
		req.Version = 3
		req.ClientSoftwareName, req.ClientSoftwareVersion = name, version
		resp, err := c.apiVersions(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.(*kmsg.ApiVersionsResponse)
	}
	for _, nv := range [][2]string{{"", "1"}, {"kgo", ""}, {"-kgo", "1"}, {"kgo-", "1"}, {"k go", "1"}, {"kgo", "1.0+dirty"}, {"kgo", "v1."}} {
		if resp := ask(nv[0], nv[1]); resp.ErrorCode != kerr.InvalidRequest.Code || len(resp.ApiKeys) != 0 {
			t.Errorf("%q %q: error %d with %d keys, want INVALID_REQUEST and none", nv[0], nv[1], resp.ErrorCode, len(resp.ApiKeys))
		}
	}
	for _, nv := range [][2]string{{"kgo", "v1.18.0"}, {"apache-kafka-java", "3.7.0"}, {"librdkafka", "2"}} {
		if resp := ask(nv[0], nv[1]); resp.ErrorCode != 0 || len(resp.ApiKeys) == 0 {
			t.Errorf("%q %q: error %d with %d keys", nv[0], nv[1], resp.ErrorCode, len(resp.ApiKeys))
		}
	}
	if c.software != "librdkafka/2" {
		t.Errorf("software %q, want the last one alone", c.software)
	}
	ask(strings.Repeat("x", 10_000), "1")
	if len(c.software) != maxLoggedSoftware {
		t.Errorf("a 10,000-byte name is kept as %d bytes", len(c.software))
	}
}

// A panic serving a request closes that connection and the gateway goes on: here the gateway has no
// store (its topic cache has one), so the appender's Append panics.
func TestPanicClosesTheConnection(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{})
	createTopic(t, store, "appender", 1)
	g.store = nil
	g.tail.watch([]partKey{{"appender", 0}}) // so the append registers with the tail cache
	client, served := servePipe(t, g)
	if _, err := client.Write(produceFrame(t, 1)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-served:
	case <-ctx.Done():
		t.Fatal("connection not closed after the panic")
	}
	if _, err := client.Read(make([]byte, 1)); err == nil {
		t.Fatal("an answer after the panic")
	}
	g.tail.mu.Lock()
	defer g.tail.mu.Unlock()
	if len(g.tail.inflight) != 0 {
		t.Fatalf("tail cache registrations left after the panic: %v", g.tail.inflight)
	}
}

// A client that sends requests but stops reading their answers is idle as well: the write waiting for
// it gives up after Config.IdleTimeout and the connection closes.
func TestConnectionNotReadClosed(t *testing.T) {
	ctx, g, _ := embeddedGateway(t, Config{IdleTimeout: 300 * time.Millisecond})
	client, served := servePipe(t, g)
	if _, err := client.Write(apiVersionsFrame(1)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-served:
	case <-ctx.Done():
		t.Fatal("connection whose answers are not read stayed open")
	}
}

// A client reading a large answer slowly but steadily is not idle: the idle deadline is pushed back for
// each chunk written, not set once for the whole answer. Here 3 MiB go out at about 3 MiB/s against
// an idle timeout of 300 ms, and the whole answer arrives.
func TestSlowSteadyReaderNotIdle(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{IdleTimeout: 300 * time.Millisecond})
	createTopic(t, store, "slow", 1)
	appendValues(t, ctx, store, "slow", 0, 32, 96<<10) // a first read takes up to 32 records
	client, _ := servePipe(t, g)
	if _, err := client.Write(requestFrame(fetchRequest("slow", 0, 0, 4<<20, 4<<20), 1)); err != nil {
		t.Fatal(err)
	}
	var size [4]byte
	if _, err := io.ReadFull(client, size[:]); err != nil {
		t.Fatal(err)
	}
	want := int(binary.BigEndian.Uint32(size[:]))
	if want < 3<<20 {
		t.Fatalf("answer of %d bytes, want 3 MiB or more", want)
	}
	start := time.Now()
	buf := make([]byte, 64<<10)
	for got := 0; got < want; {
		time.Sleep(20 * time.Millisecond)
		n, err := io.ReadFull(client, buf[:min(len(buf), want-got)])
		got += n
		if err != nil {
			t.Fatalf("read %d of %d bytes in %v: %v", got, want, time.Since(start), err)
		}
	}
}

// A client sending a large request slowly but steadily is not idle either: the idle deadline is pushed
// back for each megabyte read, not once per buffer, which grows to many megabytes. Here a 5 MiB
// request arrives at about 6 MiB/s against an idle timeout of 400 ms, and is answered.
func TestSlowSteadySenderNotIdle(t *testing.T) {
	_, g, store := embeddedGateway(t, Config{IdleTimeout: 400 * time.Millisecond})
	createTopic(t, store, "appender", 1)
	// Built before the connection opens: its idle clock starts then, and building 5 MiB (under the race
	// detector, on a loaded machine) took most of the 400 ms before the first byte went.
	frame := produceFrameOf(t, 7, make([]byte, 5<<20))
	client, _ := servePipe(t, g)
	start := time.Now()
	for sent := 0; sent < len(frame); sent += 64 << 10 {
		if _, err := client.Write(frame[sent:min(len(frame), sent+64<<10)]); err != nil {
			t.Fatalf("sent %d of %d bytes in %v: %v", sent, len(frame), time.Since(start), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if corr, _ := readResponse(t, client); corr != 7 {
		t.Fatalf("answer with correlation id %d, want 7", corr)
	}
}

// countingLog counts the log lines holding match.
type countingLog struct {
	match string
	n     atomic.Int32
}

func (w *countingLog) Write(p []byte) (int, error) {
	if strings.Contains(string(p), w.match) {
		w.n.Add(1)
	}
	return len(p), nil
}

// A long poll that waits out its max_wait is not a slow request: the slow request log counts the time
// beyond what a request may wait by design. A request with no wait of its own still is.
func TestSlowRequestLogLeavesLongPollsOut(t *testing.T) {
	slow := &countingLog{match: "slow request"}
	_, _, store := embeddedGateway(t, Config{})
	// The limit is most of the max wait: the wait alone passes it, and a loaded machine may still take
	// that long to answer after the wait (a limit of 100 ms was a scheduling hiccup away from failing).
	g := New(Config{SlowRequest: 400 * time.Millisecond}, store, zerolog.New(slow))
	createTopic(t, store, "quiet", 1)
	client, _ := servePipe(t, g)
	req := fetchRequest("quiet", 0, 0, 1<<20, 1<<20)
	req.MaxWaitMillis = 500
	start := time.Now()
	if _, err := client.Write(requestFrame(req, 1)); err != nil {
		t.Fatal(err)
	}
	readResponse(t, client)
	if took := time.Since(start); took < 450*time.Millisecond {
		t.Fatalf("fetch of an empty partition answered in %v, before its max_wait", took)
	}
	if n := slow.n.Load(); n != 0 {
		t.Fatalf("a long poll that waited its max_wait logged as slow (%d lines)", n)
	}
	g.cfg.SlowRequest = time.Nanosecond
	if _, err := client.Write(apiVersionsFrame(2)); err != nil {
		t.Fatal(err)
	}
	readResponse(t, client)
	if n := slow.n.Load(); n != 1 {
		t.Fatalf("a request slower than the limit logged %d times, want once", n)
	}
}

// A member's client id is the one its JoinGroup named, as on Apache, which reads it from each request's
// header: a null one is "", not the id an earlier request on the connection named.
func TestJoinGroupClientIDPerRequest(t *testing.T) {
	ctx, _, store := embeddedGateway(t, Config{})
	g, _ := serveOn(t, store, Config{Groups: coordinator.Config{InitialRebalanceDelay: -1}})
	c := fetchConn(t, g)
	named := requestFrame(kmsg.NewPtrMetadataRequest(), 1) // client id "t"
	if _, _, _, err := c.decode(named[4:]); err != nil {
		t.Fatal(err)
	}
	frame := requestFrame(joinRequest(3, "cid-group"), 2)
	// JoinGroup v3 has header v1: the client id as null (-1) instead of "t", and no tagged fields.
	frame = slices.Concat(frame[4:12], []byte{0xff, 0xff}, frame[16:])
	_, a, req, err := c.decode(frame)
	if err != nil {
		t.Fatal(err)
	}
	r, err := a.handle(ctx, c, req)
	if err != nil {
		t.Fatal(err)
	}
	if code := r.(*kmsg.JoinGroupResponse).ErrorCode; code != 0 {
		t.Fatalf("JoinGroup: error %d", code)
	}
	d, _ := g.coord.Describe(ctx, "cid-group")
	if len(d.Members) != 1 || d.Members[0].ClientID != "" {
		t.Fatalf("members %+v; want one with client id \"\"", d.Members)
	}
}

// kafka.max_connections: a connection beyond it is closed at once, and logged at most once per 10 s
// however often clients come back; once a connection ends, a new one is served.
func TestMaxConnections(t *testing.T) {
	refused := &countingLog{match: "kafka.max_connections reached"}
	_, _, store := embeddedGateway(t, Config{})
	g := New(Config{Listen: "127.0.0.1:0", MaxConnections: 2}, store, zerolog.New(refused))
	startServing(t, g)
	dial := func() net.Conn {
		t.Helper()
		nc, err := net.DialTimeout("tcp", g.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
		return nc
	}
	served := func(nc net.Conn, corr int32) bool {
		if _, err := nc.Write(apiVersionsFrame(corr)); err != nil {
			return false
		}
		var size [4]byte
		_, err := io.ReadFull(nc, size[:])
		return err == nil
	}
	first, second := dial(), dial()
	if !served(first, 1) || !served(second, 1) {
		t.Fatal("connections within the limit not served")
	}
	for i := range 20 {
		if served(dial(), 1) {
			t.Fatalf("connection %d beyond the limit served", i+3)
		}
	}
	if n := refused.n.Load(); n != 1 {
		t.Fatalf("20 refused connections logged %d times, want once", n)
	}
	first.Close()
	waitFor(t, 5*time.Second, "a connection to be served after one ended", func() bool { return served(dial(), 2) })
}
