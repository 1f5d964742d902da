package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// adminServer is the admin HTTP listener: JSON API, web console, metrics and probes.
type adminServer struct {
	ln  net.Listener
	srv *http.Server

	log zerolog.Logger

	mu      sync.Mutex
	running int           // handlers running (track)
	idle    chan struct{} // made by awaitHandlers, closed once no handler runs
}

// adminHandlerWait bounds how long the gateway waits for admin handlers once their context is
// cancelled (the end of shutdown).
const adminHandlerWait = 2 * time.Second

// adminWriteTimeout bounds an admin request from the end of its headers to the end of its answer:
// generous, as a list with lag over many groups can take a while, but an answer nobody reads ends.
const adminWriteTimeout = 5 * time.Minute

// adminIdleTimeout closes an admin connection kept alive with no request for this long (a scraper
// comes back every few seconds to a minute).
const adminIdleTimeout = 2 * time.Minute

func (g *Gateway) listenAdmin() error {
	ln, err := net.Listen("tcp", g.cfg.AdminListen)
	if err != nil {
		return fmt.Errorf("gateway: admin listen %s: %w", g.cfg.AdminListen, err)
	}
	g.adminSrv.ln, g.adminSrv.log = ln, g.log
	g.adminSrv.srv = &http.Server{
		Handler:           g.adminSrv.track(g.adminHandler()),
		ReadHeaderTimeout: 5 * time.Second,
		// A client that stops reading an answer does not keep its handler (and what it holds) for good.
		WriteTimeout: adminWriteTimeout,
		// Nor does a keep-alive connection no request comes on: a file descriptor the Kafka listener
		// shares.
		IdleTimeout: adminIdleTimeout,
		// Handlers' requests end with the gateway's, not only when their client goes away.
		BaseContext: func(net.Listener) context.Context { return g.bgCtx },
	}
	return nil
}

// track counts h's running calls, which awaitHandlers waits for: http.Server.Shutdown gives up on a
// handler after its timeout, and one left running must not use the store after Gateway.Serve returned
// and the store was closed.
func (s *adminServer) track(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		if s.idle != nil { // awaited already: the gateway is gone
			s.mu.Unlock()
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		s.running++
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			s.running--
			if s.running == 0 && s.idle != nil {
				close(s.idle)
			}
			s.mu.Unlock()
		}()
		aw := &answerWriter{ResponseWriter: w}
		defer s.recoverPanic(aw, r)
		h.ServeHTTP(aw, r)
	})
}

// answerWriter notes whether an answer has begun, so that a handler's panic is not answered on top of
// what it wrote.
type answerWriter struct {
	http.ResponseWriter
	begun bool
}

func (w *answerWriter) WriteHeader(code int) {
	w.begun = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *answerWriter) Write(b []byte) (int, error) {
	w.begun = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *answerWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// recoverPanic, deferred by a handler, answers 500 for a panic, logged and counted with the gateway's
// others (net/http would only log it to stderr and drop the connection); when the handler had begun
// its answer, the connection is dropped instead, so the client sees a cut answer, not a wrong one.
func (s *adminServer) recoverPanic(w *answerWriter, r *http.Request) {
	p := recover()
	switch {
	case p == nil:
		return
	case p == http.ErrAbortHandler: // net/http's own way to abort an answer, which it does not log
		panic(p)
	}
	notePanic(s.log.With().Str("path", r.URL.Path).Logger(), "admin", p, debug.Stack(), "panic serving an admin request")
	if w.begun {
		panic(http.ErrAbortHandler)
	}
	http.Error(w, "internal error", http.StatusInternalServerError)
}

// AdminAddr is the bound admin address, or nil when the admin API is off.
func (g *Gateway) AdminAddr() net.Addr {
	if g.adminSrv.ln == nil {
		return nil
	}
	return g.adminSrv.ln.Addr()
}

func (g *Gateway) startAdmin() {
	if g.adminSrv.srv == nil {
		return
	}
	g.goBackground("admin_server", func(ctx context.Context) {
		if err := g.adminSrv.srv.Serve(g.adminSrv.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			g.log.Error().Err(err).Msg("admin server stopped")
		}
		// Serve returns as soon as shutdown begins; handlers still running end with ctx, their base
		// context, which shutdown cancels last.
		<-ctx.Done()
		g.adminSrv.awaitHandlers(g)
	})
}

// awaitHandlers waits for the running handlers, at most adminHandlerWait, then closes the
// connections left.
func (s *adminServer) awaitHandlers(g *Gateway) {
	s.mu.Lock()
	s.idle = make(chan struct{})
	if s.running == 0 {
		close(s.idle)
	}
	idle := s.idle
	s.mu.Unlock()
	select {
	case <-idle:
	case <-time.After(adminHandlerWait):
		g.log.Warn().Dur("waited", adminHandlerWait).Msg("admin handlers still running after shutdown")
	}
	_ = s.srv.Close()
}

// stopAdmin stops the admin server's listener and waits for its handlers until ctx ends.
func (g *Gateway) stopAdmin(ctx context.Context) {
	if g.adminSrv.srv == nil {
		return
	}
	_ = g.adminSrv.srv.Shutdown(ctx)
}

func (g *Gateway) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", g.readyz)
	mux.Handle("GET /metrics", g.metricsHandler())
	g.registerAdminAPI(mux)
	return mux
}

// readyz answers 200 when Redis answers, the Kafka listener serves and the gateway is not fenced.
func (g *Gateway) readyz(w http.ResponseWriter, r *http.Request) {
	select {
	case <-g.ready:
	default:
		http.Error(w, "kafka listener not serving yet", http.StatusServiceUnavailable)
		return
	}
	if g.quitting() {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	// A fenced gateway coordinates no group and may never recover by itself (its node id taken by
	// another process): a load balancer or orchestrator should know.
	if !g.nodes.leased(time.Now()) {
		http.Error(w, "fenced: registration in Redis not refreshed in time (peers may consider this gateway down); coordinating no groups", http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := g.store.Ping(ctx); err != nil {
		http.Error(w, "redis unreachable: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Write([]byte("ready\n"))
}
