package gateway

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/kgate/kgate/redisstore"
)

// eachAtOnce runs every item although one panics, and carries that panic to its caller's goroutine,
// which recovers it, where on a worker it ended the process.
func TestEachAtOncePanicReachesCaller(t *testing.T) {
	var ran atomic.Int32
	got := func() (p any) {
		defer func() { p = recover() }()
		eachAtOnce(10, 3, func(i int) {
			if i == 4 {
				panic("item 4")
			}
			ran.Add(1)
		})
		return nil
	}()
	if s := fmt.Sprint(got); !strings.HasPrefix(s, "item 4 (on a worker") {
		t.Fatalf("the caller recovered %q, want item 4's panic", s)
	}
	if n := ran.Load(); n != 9 {
		t.Fatalf("%d items ran besides the panicking one, want 9", n)
	}
}

// A panicking admin handler answers 500 and is counted, and the handler count awaited at shutdown
// goes back down.
func TestAdminHandlerPanicAnswers500(t *testing.T) {
	s := &adminServer{log: zerolog.Nop()}
	h := s.track(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("a bad handler") }))
	before := testutil.ToFloat64(mPanics.WithLabelValues("admin"))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/groups", nil))
	if rec.Code != http.StatusInternalServerError {
		t.Errorf("status %d, want 500", rec.Code)
	}
	if got := testutil.ToFloat64(mPanics.WithLabelValues("admin")) - before; got != 1 {
		t.Errorf("kgate_panics_recovered_total{where=admin} grew by %v, want 1", got)
	}
	if s.running != 0 {
		t.Errorf("%d handlers counted running after the panic", s.running)
	}
}

// The group collector runs on the metrics registry's goroutines, which nothing recovers: a panic in it
// (here, a gateway without its context) ends that scrape's group series, not the process.
func TestGroupCollectorPanicEndsScrapeOnly(t *testing.T) {
	before := testutil.ToFloat64(mPanics.WithLabelValues("metrics"))
	ch := make(chan prometheus.Metric, 16)
	groupCollector{g: &Gateway{log: zerolog.Nop()}}.Collect(ch)
	if got := testutil.ToFloat64(mPanics.WithLabelValues("metrics")) - before; got != 1 {
		t.Errorf("kgate_panics_recovered_total{where=metrics} grew by %v, want 1", got)
	}
}

// backgroundGateway is the least of a Gateway that goBackground needs, for tests in a synctest bubble.
func backgroundGateway(t *testing.T) (g *Gateway, cancel context.CancelFunc) {
	ctx, cancel := context.WithCancel(t.Context())
	return &Gateway{quit: make(chan struct{}), bgCtx: ctx, log: zerolog.Nop()}, cancel
}

// A background loop that panicked waits out its pause, which doubles while it keeps panicking soon
// after starting, and starts from restartPause again after a run that lasted: rare panics days apart
// must not add up to a pause that has the gateway declared dead.
func TestBackgroundLoopPauseResetsAfterHealthyRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, cancel := backgroundGateway(t)
		defer cancel()
		var starts []time.Duration
		begin := time.Now()
		g.goBackground("test_loop", func(ctx context.Context) {
			starts = append(starts, time.Since(begin))
			switch n := len(starts); {
			case n <= 3: // panics at once: pauses 1s, 2s, 4s
				panic("soon")
			case n <= 6: // runs a minute first: pauses 1s each
				time.Sleep(time.Minute)
				panic("after a minute")
			}
			<-ctx.Done()
		})
		time.Sleep(time.Hour)
		synctest.Wait()
		want := []time.Duration{0, 1 * time.Second, 3 * time.Second, 7 * time.Second,
			7*time.Second + time.Minute + time.Second, 8*time.Second + 2*time.Minute + time.Second, 9*time.Second + 3*time.Minute + time.Second}
		if fmt.Sprint(starts) != fmt.Sprint(want) {
			t.Fatalf("loop started at %v, want %v", starts, want)
		}
		cancel()
		g.wg.Wait()
	})
}

// Shutdown ends a panicked loop's pause at once: the loop runs again and does its shutdown work (the
// membership loop marks the gateway down), where it waited until bgCtx ended, after the drain.
func TestBackgroundLoopRunsAgainAtShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, cancel := backgroundGateway(t)
		defer cancel()
		sawQuit := make(chan time.Duration, 1)
		begin := time.Now()
		g.goBackground("test_loop", func(ctx context.Context) {
			select {
			case <-g.quit:
				sawQuit <- time.Since(begin)
			default:
				panic("before shutdown")
			}
		})
		time.Sleep(100 * time.Millisecond) // within the first pause (1s)
		close(g.quit)
		synctest.Wait()
		select {
		case at := <-sawQuit:
			if at != 100*time.Millisecond {
				t.Errorf("the loop ran again %v after it began, want at shutdown (100ms)", at)
			}
		default:
			t.Fatal("the loop did not run again at shutdown")
		}
		g.wg.Wait()
	})
}

// A handler that panics after its answer began has its connection dropped (net/http's abort), not a
// 500 written on top of what it sent.
func TestAdminHandlerPanicAfterAnswerAborts(t *testing.T) {
	s := &adminServer{log: zerolog.Nop()}
	h := s.track(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("[1,"))
		panic("halfway")
	}))
	rec := httptest.NewRecorder()
	got := func() (p any) {
		defer func() { p = recover() }()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/groups", nil))
		return nil
	}()
	if got != http.ErrAbortHandler {
		t.Fatalf("recovered %v, want http.ErrAbortHandler", got)
	}
	if rec.Code != http.StatusOK || rec.Body.String() != "[1," {
		t.Fatalf("answer %d %q, want the handler's own, untouched", rec.Code, rec.Body.String())
	}
	if s.running != 0 {
		t.Errorf("%d handlers counted running after the panic", s.running)
	}
}

// panicOnceOnClose is a listener whose first Close closes it and then panics, as a faulty listener
// wrapper would.
type panicOnceOnClose struct {
	net.Listener
	panicked atomic.Bool
}

func (l *panicOnceOnClose) Close() error {
	err := l.Listener.Close()
	if !l.panicked.Swap(true) {
		panic("a listener that panics on close")
	}
	return err
}

// A panic in shutdown (here at its first step, closing the listener) is logged and counted, and the
// gateway still stops: the connections are closed, the background loops end and Serve returns. The
// shutdown goroutine recovered nothing: the panic ended the process.
func TestShutdownPanicStillStops(t *testing.T) {
	g := New(Config{Listen: "127.0.0.1:0"}, shutdownStore(t), zerolog.Nop())
	if err := g.Listen(t.Context()); err != nil {
		t.Fatal(err)
	}
	g.ln = &panicOnceOnClose{Listener: g.ln}
	stop := startServing(t, g)
	c := dialShutdownGateway(t, g)
	waitFor(t, 10*time.Second, "the connection to be served", func() bool { return g.OpenConnections() == 1 })
	before := testutil.ToFloat64(mPanics.WithLabelValues("shutdown"))
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		stop()
	}()
	select {
	case <-stopped:
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not return after a panic in shutdown")
	}
	if got := testutil.ToFloat64(mPanics.WithLabelValues("shutdown")) - before; got != 1 {
		t.Errorf("kgate_panics_recovered_total{where=shutdown} grew by %v, want 1", got)
	}
	if g.bgCtx.Err() == nil {
		t.Error("the background loops' context is not cancelled")
	}
	expectClosed(t, c)
}

// panicOnFirstPublish panics in the first PUBLISH sent through the client it hooks, before sending it.
type panicOnFirstPublish struct{ done *atomic.Bool }

func (panicOnFirstPublish) DialHook(next redis.DialHook) redis.DialHook { return next }
func (panicOnFirstPublish) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h panicOnFirstPublish) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "publish" && h.done.CompareAndSwap(false, true) {
			panic("injected: a panic publishing appends")
		}
		return next(ctx, cmd)
	}
}

// A panic in the append publisher restarts it (goBackground), and the notifications it held are
// published by the restarted loop: they were lost, and other gateways' long-polls on those partitions
// waited out their max_wait for records already stored.
func TestAppendPublisherPanicResends(t *testing.T) {
	p, mp := restartPause, maxRestartPause
	t.Cleanup(func() { restartPause, maxRestartPause = p, mp }) // once the gateway has stopped
	restartPause, maxRestartPause = time.Millisecond, time.Millisecond
	m := startMiniredis(t)
	store := openStoreAt(t, m.Addr(), redisstore.Options{})
	var panicked atomic.Bool
	store.Client().AddHook(panicOnFirstPublish{done: &panicked})
	// A static peer makes this gateway publish its appends (more than one live gateway).
	g, _ := serveOn(t, store, Config{NodeID: 1, Peers: []Peer{{ID: 2, Addr: "127.0.0.1:1"}}})
	waitFor(t, 10*time.Second, "the gateway to publish appends", g.multi.Load)

	sub := openStoreAt(t, m.Addr(), redisstore.Options{Namespace: store.Namespace()})
	got := make(chan string, 16)
	subscribed := make(chan struct{})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = sub.SubscribeAppends(ctx, func(topic string, _ int32) { got <- topic }, sync.OnceFunc(func() { close(subscribed) }))
	}()
	t.Cleanup(func() { cancel(); <-done })
	<-subscribed

	before := testutil.ToFloat64(mPanics.WithLabelValues("append_publisher"))
	g.publishAppend("held", 0)
	select {
	case topic := <-got:
		if topic != "held" {
			t.Fatalf("notification for %q, want held", topic)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the notification the publisher held when it panicked was never published (panicked: %v)", panicked.Load())
	}
	if d := testutil.ToFloat64(mPanics.WithLabelValues("append_publisher")) - before; d != 1 {
		t.Errorf("kgate_panics_recovered_total{where=append_publisher} grew by %v, want 1", d)
	}
}
