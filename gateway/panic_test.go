package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
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
