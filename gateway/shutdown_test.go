package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/coordinator"
	"github.com/kgate/kgate/internal/redistest"
	"github.com/kgate/kgate/redisstore"
)

// shutdownStore is an embedded store, closed at cleanup.
func shutdownStore(t *testing.T) *redisstore.Store {
	t.Helper()
	s, err := redisstore.Open(context.Background(), redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// dialShutdownGateway connects to g's Kafka listener; the connection is closed at cleanup.
func dialShutdownGateway(t *testing.T, g *Gateway) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", g.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// expectClosed checks the gateway ends c after its last answer rather than answering more, and
// closes c as a client does then (the gateway waits for that, lingerClose).
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var b [1]byte
	if n, err := c.Read(b[:]); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last answer: read %d bytes, %v; want the connection closed", n, err)
	}
	c.Close()
}

// shuttingDown starts g's shutdown (stop, in the background) and returns once the Kafka listener
// refuses connections, that is once the shutdown has begun.
func shuttingDown(t *testing.T, g *Gateway, stop context.CancelFunc) chan struct{} {
	t.Helper()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		stop()
	}()
	waitFor(t, 10*time.Second, "the listener to close", func() bool {
		c, err := net.Dial("tcp", g.Addr().String())
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	return stopped
}

// TestShutdownAnswersProduceInFlight: a produce whose append Redis has applied but not yet answered
// when shutdown begins is still acknowledged to its producer (it was dropped with the connection: a
// producer without idempotence then stored the record twice retrying elsewhere); the connection
// closes after the answer.
func TestShutdownAnswersProduceInFlight(t *testing.T) {
	m := startMiniredis(t)
	proxy := redistest.StartProxy(t, m.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	direct := openStoreAt(t, m.Addr(), redisstore.Options{})
	if err := direct.CreateTopic(ctx, redisstore.Topic{Name: "appender", Partitions: 1, Created: time.Now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	g, stop := serveOn(t, openStoreAt(t, proxy.Addr(), redisstore.Options{}), Config{})
	c := dialShutdownGateway(t, g)
	produce(t, c, 1, 0)

	proxy.Hold()
	if _, err := c.Write(produceFrame(t, 2)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the append to reach Redis", func() bool {
		offs, err := direct.PartitionOffsets(ctx, "appender", []int32{0})
		return err == nil && offs[0].End == 2
	})
	stopped := shuttingDown(t, g, stop)
	proxy.Release()

	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	corr, body := readResponse(t, c)
	resp := kmsg.NewPtrProduceResponse()
	resp.Version = 9
	if err := resp.ReadFrom(body[1:]); err != nil {
		t.Fatalf("decode produce response: %v", err)
	}
	if sp := resp.Topics[0].Partitions[0]; corr != 2 || sp.ErrorCode != 0 || sp.BaseOffset != 1 {
		t.Fatalf("answer %d: error %d base offset %d, want 2: 0, 1", corr, sp.ErrorCode, sp.BaseOffset)
	}
	expectClosed(t, c)
	<-stopped
}

// TestShutdownCutsLongPollShort: a fetch long-polling when shutdown begins is answered at once with
// what there is (here nothing, without error), not dropped and not held for its max wait.
func TestShutdownCutsLongPollShort(t *testing.T) {
	store := shutdownStore(t)
	if err := store.CreateTopic(context.Background(), redisstore.Topic{Name: "polled", Partitions: 1, Created: time.Now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	g, stop := serveOn(t, store, Config{})
	c := dialShutdownGateway(t, g)
	req := fetchRequest("polled", 0, 0, 1<<20, 1<<20)
	req.MaxWaitMillis = 10 * 60 * 1000 // far beyond the test's deadlines
	if _, err := c.Write(requestFrame(req, 7)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the fetch to long-poll", fetchWaiting)
	stopped := shuttingDown(t, g, stop)

	corr, sp := readFetchAnswer(t, c, req.Version)
	if corr != 7 || sp.ErrorCode != 0 || len(sp.RecordBatches) != 0 || sp.HighWatermark != 0 {
		t.Fatalf("answer %d: error %d, %d record bytes, high watermark %d; want 7: 0, 0, 0", corr, sp.ErrorCode, len(sp.RecordBatches), sp.HighWatermark)
	}
	expectClosed(t, c)
	<-stopped
}

// TestShutdownAnswersParkedJoin: a JoinGroup parked in its rebalance when shutdown begins is answered
// NOT_COORDINATOR on its still open connection, so the member looks for the group's next coordinator.
func TestShutdownAnswersParkedJoin(t *testing.T) {
	g, stop := serveOn(t, shutdownStore(t), Config{Groups: coordinator.Config{InitialRebalanceDelay: 10 * time.Minute}})
	c := dialShutdownGateway(t, g)
	join := func(memberID string, corr int32) {
		req := kmsg.NewPtrJoinGroupRequest()
		req.Version = 9
		req.Group, req.MemberID, req.ProtocolType = "parked", memberID, "consumer"
		req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 30000, 10*60*1000
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name = "range"
		req.Protocols = append(req.Protocols, p)
		if _, err := c.Write(requestFrame(req, corr)); err != nil {
			t.Fatal(err)
		}
	}
	answer := func(corr int32) *kmsg.JoinGroupResponse {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, body := readResponse(t, c)
		if got != corr {
			t.Fatalf("answer %d, want %d", got, corr)
		}
		resp := kmsg.NewPtrJoinGroupResponse()
		resp.Version = 9
		if err := resp.ReadFrom(body[1:]); err != nil {
			t.Fatalf("decode join response: %v", err)
		}
		return resp
	}
	join("", 1) // KIP-394: the first join only gets a member id
	first := answer(1)
	if first.ErrorCode != kerr.MemberIDRequired.Code {
		t.Fatalf("first join: error %d, want MEMBER_ID_REQUIRED", first.ErrorCode)
	}
	join(first.MemberID, 2) // parks for the initial rebalance delay
	waitFor(t, 10*time.Second, "the join to park", func() bool {
		info, ok := g.coord.Describe(context.Background(), "parked")
		return ok && len(info.Members) == 1
	})
	stopped := shuttingDown(t, g, stop)

	if resp := answer(2); resp.ErrorCode != kerr.NotCoordinator.Code {
		t.Fatalf("parked join: error %d, want NOT_COORDINATOR", resp.ErrorCode)
	}
	expectClosed(t, c)
	<-stopped
}

// TestShutdownWaitsForAdminHandlers: an admin handler running when shutdown begins has its request
// context cancelled, and Serve returns only after it has returned (one left running used the store
// after it was closed).
func TestShutdownWaitsForAdminHandlers(t *testing.T) {
	g := New(Config{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0"}, shutdownStore(t), zerolog.Nop())
	// Bound before Serve (which would bind it) so the admin handler can be replaced before it serves.
	if err := g.Listen(context.Background()); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	var mu sync.Mutex
	returned := false
	g.adminSrv.srv.Handler = g.adminSrv.track(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done() // a handler busy until its request ends
		mu.Lock()
		returned = true
		mu.Unlock()
	}))
	stop := startServing(t, g)
	go func() { // ends with the admin server
		resp, err := http.Get("http://" + g.AdminAddr().String() + "/busy")
		if err == nil {
			resp.Body.Close()
		}
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("admin request not handled after 10 s")
	}
	stop()
	mu.Lock()
	defer mu.Unlock()
	if !returned {
		t.Fatal("Serve returned while an admin handler was still running")
	}
}

// TestShutdownAnswerSurvivesUnreadRequest: a large answer written at shutdown reaches a client that
// reads it slowly although the client had already sent a next request, which the gateway no longer
// reads (a socket closed with unread input is reset, and the reset drops what was not sent yet).
func TestShutdownAnswerSurvivesUnreadRequest(t *testing.T) {
	store := shutdownStore(t)
	ctx := context.Background()
	createTopic(t, store, "large", 1)
	t.Cleanup(func() { forgetSizing("large") })
	appendValues(t, ctx, store, "large", 0, 200, 10<<10)
	g, stop := serveOn(t, store, Config{})
	// A small receive buffer keeps most of the answer in the gateway's send buffer until it is read.
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		}); err != nil {
			return err
		}
		return serr
	}}
	c, err := d.Dial("tcp", g.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	req := fetchRequest("large", 0, 0, 8<<20, 8<<20)
	req.MinBytes, req.MaxWaitMillis = 8<<20, 10*60*1000 // waits: less than that is there
	if _, err := c.Write(requestFrame(req, 1)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the fetch to long-poll", fetchWaiting)
	if _, err := c.Write(apiVersionsFrame(2)); err != nil {
		t.Fatal(err)
	}
	stopped := shuttingDown(t, g, stop)

	corr, sp := readFetchAnswer(t, c, req.Version)
	if corr != 1 || sp.ErrorCode != 0 || len(sp.RecordBatches) < 1<<20 {
		t.Fatalf("answer %d: error %d, %d record bytes; want 1: 0, at least 1 MiB", corr, sp.ErrorCode, len(sp.RecordBatches))
	}
	expectClosed(t, c)
	<-stopped
}

// TestShutdownDeregistersAtOnce: shutdown marks the gateway down in Redis as it begins, not only once
// its connections have drained (up to shutdownGrace later), during which peers sent clients to its
// closed listener and kept its groups from moving. Here a client keeps its connection open, so the
// drain lasts (lingerClose). Nothing registers the gateway again afterwards.
func TestShutdownDeregistersAtOnce(t *testing.T) {
	store := shutdownStore(t)
	g, stop := serveOn(t, store, Config{HeartbeatInterval: 20 * time.Millisecond})
	registration := func() redisstore.GatewayInfo {
		t.Helper()
		regs, _, err := store.Gateways(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range regs {
			if r.NodeID == g.cfg.NodeID {
				return r
			}
		}
		t.Fatalf("node %d not registered", g.cfg.NodeID)
		return redisstore.GatewayInfo{}
	}
	if r := registration(); r.Heartbeat == 0 {
		t.Fatal("serving, the registration is marked down")
	}
	c := dialShutdownGateway(t, g)
	if _, err := c.Write(apiVersionsFrame(1)); err != nil { // answered: the gateway tracks c
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	readResponse(t, c)

	stopped := shuttingDown(t, g, stop)
	waitFor(t, 10*time.Second, "the registration to be marked down", func() bool { return registration().Heartbeat == 0 })
	// Then the membership loop has nothing left to do: once it has returned, nothing can bring the
	// registration back.
	waitFor(t, 10*time.Second, "the membership loop to return", func() bool {
		return !running("github.com/kgate/kgate/gateway.(*Gateway).runMembership(")
	})
	if g.OpenConnections() != 1 || g.bgCtx.Err() != nil {
		t.Fatalf("registration marked down with %d connections open, requests' context ended: %v; want 1 open, still running",
			g.OpenConnections(), g.bgCtx.Err())
	}
	// Peers may take its groups over now: its lease ended first.
	if g.nodes.isCoordinator("group") {
		t.Fatal("marked down in Redis, the gateway still coordinates groups")
	}
	expectClosed(t, c) // ends the drain
	<-stopped
	if r := registration(); r.Heartbeat != 0 {
		t.Fatalf("registration back after shutdown: heartbeat %d", r.Heartbeat)
	}
}

// running reports whether some goroutine has fn (as a stack trace names it) on its stack.
func running(fn string) bool {
	buf := make([]byte, 1<<20)
	return bytes.Contains(buf[:runtime.Stack(buf, true)], []byte(fn))
}

// readFetchAnswer reads a fetch response (a flexible version) within 10 s: its correlation id and its
// first partition.
func readFetchAnswer(t *testing.T, c net.Conn, version int16) (int32, kmsg.FetchResponseTopicPartition) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	corr, body := readResponse(t, c)
	resp := kmsg.NewPtrFetchResponse()
	resp.Version = version
	if err := resp.ReadFrom(body[1:]); err != nil { // after the flexible header's tags
		t.Fatalf("decode fetch response: %v", err)
	}
	return corr, resp.Topics[0].Partitions[0]
}
