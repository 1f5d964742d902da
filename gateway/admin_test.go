package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kgate/kgate/redisstore"
)

// TestReadyzFencedGateway: /readyz answers 503, saying why, while the gateway is fenced (here another
// process claims its node id, so its heartbeats are refused), and 200 again once it has its
// registration back.
func TestReadyzFencedGateway(t *testing.T) {
	m := startMiniredis(t)
	store := openStoreAt(t, m.Addr(), redisstore.Options{})
	g, _ := serveOn(t, store, Config{HeartbeatInterval: 50 * time.Millisecond, NodeTimeout: 300 * time.Millisecond})
	readyz := func() (int, string) {
		rec := httptest.NewRecorder()
		g.readyz(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return rec.Code, rec.Body.String()
	}
	// Polled: the lease is 250 ms, so a stall between heartbeats on a loaded machine fences the
	// gateway for a moment, and the next heartbeat restores it.
	waitFor(t, 10*time.Second, "/readyz to answer 200 while serving", func() bool {
		code, _ := readyz()
		return code == http.StatusOK
	})

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	wg.Go(func() {
		for ctx.Err() == nil {
			b, _ := json.Marshal(redisstore.GatewayInfo{NodeID: 0, Instance: "other", Advertised: "127.0.0.1:2", Heartbeat: time.Now().UnixMilli()})
			m.HSet("kgate:gateways", "0", string(b))
			time.Sleep(10 * time.Millisecond)
		}
	})
	var body string
	waitFor(t, 10*time.Second, "/readyz to answer 503 while fenced", func() bool {
		var code int
		code, body = readyz()
		return code == http.StatusServiceUnavailable
	})
	if !strings.Contains(body, "fenced") {
		t.Fatalf("/readyz while fenced says %q; want the reason", body)
	}

	stop()
	wg.Wait()
	waitFor(t, 10*time.Second, "/readyz to answer 200 with the registration back", func() bool {
		code, _ := readyz()
		return code == http.StatusOK
	})
}
