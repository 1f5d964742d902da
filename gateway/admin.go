package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// adminServer is the admin HTTP listener: JSON API, web console, metrics and probes.
type adminServer struct {
	ln  net.Listener
	srv *http.Server
}

func (g *Gateway) listenAdmin() error {
	ln, err := net.Listen("tcp", g.cfg.AdminListen)
	if err != nil {
		return fmt.Errorf("gateway: admin listen %s: %w", g.cfg.AdminListen, err)
	}
	g.adminSrv.ln = ln
	g.adminSrv.srv = &http.Server{Handler: g.adminHandler(), ReadHeaderTimeout: 5 * time.Second}
	return nil
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
	g.goBackground(func(context.Context) {
		if err := g.adminSrv.srv.Serve(g.adminSrv.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			g.log.Error().Err(err).Msg("admin server stopped")
		}
	})
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
	if g.isClosing() {
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
