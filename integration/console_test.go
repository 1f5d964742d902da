package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// Issue 4, the web console: the embedded page over plain HTTP, and rendered by a real headless
// browser against a live gateway.

// TestConsoleServesEmbeddedHTML: GET / answers the embedded page, which loads nothing from elsewhere.
func TestConsoleServesEmbeddedHTML(t *testing.T) {
	g := startGateway(t, backends()[0])
	resp, err := admHTTP.Get(g.AdminURL + "/")
	if err != nil {
		t.Fatalf("GET /: %v", err)
	}
	status, body := admCall(t, http.MethodGet, g.AdminURL+"/", nil)
	resp.Body.Close()
	if status != http.StatusOK {
		t.Fatalf("GET /: %d", status)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Fatalf("GET / Content-Type %q, want text/html", ct)
	}
	page := string(body)
	for _, want := range []string{"<title>kgate console</title>", "/api/v1/groups", "/api/v1/topics", "/api/v1/cluster", "<script>"} {
		if !strings.Contains(page, want) {
			t.Fatalf("GET / lacks %q", want)
		}
	}
	// No CDN, no remote font or stylesheet: every reference is relative to the gateway.
	remote := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}|(src|href)\s*=\s*["']?(https?:|//)|@import|url\(\s*["']?(https?:|//)`)
	if m := remote.FindString(page); m != "" {
		t.Fatalf("the console references something remote: %q", m)
	}
	if strings.Contains(page, "<script src") || strings.Contains(page, "<link") {
		t.Fatalf("the console loads external scripts or stylesheets")
	}
	// The API paths stay JSON under the console's catch-all.
	status, body = admCall(t, http.MethodGet, g.AdminURL+"/api/v1/groups", nil)
	if status != http.StatusOK || !strings.HasPrefix(strings.TrimSpace(string(body)), "[") {
		t.Fatalf("GET /api/v1/groups next to the console: %d %s", status, body)
	}
	admWantError(t, http.MethodGet, g.AdminURL+"/api/v1/no-such-endpoint", nil, http.StatusNotFound)
}

// chromiumPath finds the browser; without it the test is skipped, except in CI where .ci/run installs it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("chromium not found and CI is set: .ci/run installs it")
	}
	t.Skip("chromium not installed (set CI to make this a failure)")
	return ""
}

// dumpDOM loads url in headless chromium and returns the DOM after the page's scripts ran.
// --virtual-time-budget lets the page's fetches and timers run before the dump.
func dumpDOM(t *testing.T, browser, url string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--user-data-dir="+t.TempDir(), "--virtual-time-budget=8000", "--dump-dom", url)
	cmd.WaitDelay = 5 * time.Second // the browser's helpers may hold the pipes after it is killed
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), err
	}
	return string(out), nil
}

// TestConsoleBrowser: chromium renders the console against a live gateway where a group has
// committed: the group, its lag, the relative last-commit time and the topic row.
func TestConsoleBrowser(t *testing.T) {
	browser := chromiumPath(t)
	g := startGateway(t, backends()[0])
	ctx := testCtx(t, 120*time.Second)
	const topic, group = "console-topic", "console-group"
	const produced, committed = 8, 3
	admCreateTopics(t, ctx, newAdmin(t, g), 1, nil, topic)
	admProduce(t, ctx, admProducer(t, g), topic, 0, produced, nil)
	c := admConsumer(t, g, group, topic)
	got := admPoll(t, ctx, c, map[string]int{topic: produced})
	admCommit(t, ctx, c, got[topic][committed-1])
	admWaitState(t, g, group, "Stable")

	groupDiv := regexp.MustCompile(`(?s)<div class="group" data-group="` + regexp.QuoteMeta(group) + `">(.*?)</table></div>`)
	row := regexp.MustCompile(`(?s)<tr data-partition="` + regexp.QuoteMeta(topic) + `/0">(.*?)</tr>`)
	lagCell := `<td class="num lag">` + strconv.Itoa(produced-committed) + `</td>`
	ago := regexp.MustCompile(`<td class="last-commit"[^>]*>\d+ s ago</td>`)
	topicRow := regexp.MustCompile(`(?s)<tr data-topic="` + regexp.QuoteMeta(topic) + `">.*?</tr>`)

	// The page fills itself asynchronously; a dump taken before the fetches finished is retried.
	var dom, why string
	for attempt := 1; attempt <= 3; attempt++ {
		out, err := dumpDOM(t, browser, g.AdminURL+"/")
		if err != nil {
			t.Fatalf("chromium: %v\n%s", err, out)
		}
		dom = out
		gm := groupDiv.FindStringSubmatch(dom)
		switch {
		case !strings.Contains(dom, `data-loaded="true"`):
			why = "the page never finished a refresh"
		case gm == nil:
			why = "no group block for " + group
		case !strings.Contains(gm[1], "Stable"):
			why = "the group block does not show Stable"
		case !strings.Contains(gm[1], "kgate-admin-it"):
			why = "the group block does not show the member's client id"
		case row.FindStringSubmatch(gm[1]) == nil:
			why = "no offsets row for " + topic + "/0"
		case !strings.Contains(row.FindStringSubmatch(gm[1])[1], lagCell):
			why = "the offsets row lacks " + lagCell
		case !ago.MatchString(row.FindStringSubmatch(gm[1])[1]):
			why = `the offsets row has no "N s ago" last commit`
		case !topicRow.MatchString(dom):
			why = "no topic row for " + topic
		case !strings.Contains(topicRow.FindString(dom), "0: 0–"+strconv.Itoa(produced)):
			why = "the topic row lacks the partition's offsets 0–" + strconv.Itoa(produced)
		default:
			return
		}
		t.Logf("attempt %d: %s", attempt, why)
	}
	t.Fatalf("console never rendered the group: %s\nDOM:\n%s", why, dom)
}

// TestConsoleBrowserGroupDetails: the console asks for group details a few at a time (it asked for all
// at once: the browser queued them, and the queued ones' timeouts ran out in the queue), and shows a
// group whose details failed as failed, with what the group list says of it (it was left out, as if
// gone). Chromium loads the console through a proxy in front of a live gateway that counts the detail
// requests in flight, makes each take a moment (a slow gateway) and answers one group's with 503.
func TestConsoleBrowserGroupDetails(t *testing.T) {
	browser := chromiumPath(t)
	g := startGateway(t, backends()[0])
	ctx := testCtx(t, 120*time.Second)
	const topic, broken, groups = "console-details", "console-broken", 12
	const maxInFlight = 4 // the page's DETAIL_WORKERS
	adm := newAdmin(t, g)
	admCreateTopics(t, ctx, adm, 1, nil, topic)
	admProduce(t, ctx, admProducer(t, g), topic, 0, 3, nil)
	names := []string{broken}
	for i := range groups {
		names = append(names, fmt.Sprintf("console-details-%02d", i))
	}
	for _, group := range names {
		offs := kadm.Offsets{}
		offs.Add(kadm.Offset{Topic: topic, Partition: 0, At: 1, LeaderEpoch: -1})
		if resp, err := adm.CommitOffsets(ctx, group, offs); err != nil || resp.Error() != nil {
			t.Fatalf("commit for %s: %v %v", group, err, resp.Error())
		}
	}

	target, err := url.Parse(g.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	detail := regexp.MustCompile(`^/api/v1/groups/[^/]+$`)
	var (
		mu              sync.Mutex
		inFlight, most  int
		asked, answered int
	)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !detail.MatchString(r.URL.Path) {
			proxy.ServeHTTP(w, r)
			return
		}
		mu.Lock()
		inFlight++
		asked++
		most = max(most, inFlight)
		mu.Unlock()
		defer func() {
			mu.Lock()
			inFlight--
			answered++
			mu.Unlock()
		}()
		time.Sleep(150 * time.Millisecond) // a slow gateway: the requests sent together overlap here
		if r.URL.Path == "/api/v1/groups/"+broken {
			http.Error(w, `{"error": "redis: injected"}`, http.StatusServiceUnavailable)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)

	brokenDiv := regexp.MustCompile(`(?s)<div class="group failed" data-group="` + regexp.QuoteMeta(broken) + `">(.*?)</div></div>`)
	var dom, why string
	for attempt := 1; attempt <= 3; attempt++ {
		out, err := dumpDOM(t, browser, front.URL+"/")
		if err != nil {
			t.Fatalf("chromium: %v\n%s", err, out)
		}
		dom = out
		mu.Lock()
		most, n := most, asked
		mu.Unlock()
		bm := brokenDiv.FindStringSubmatch(dom)
		missing := ""
		for _, group := range names[1:] {
			if !strings.Contains(dom, `<div class="group" data-group="`+group+`">`) {
				missing = group
				break
			}
		}
		switch {
		case most > maxInFlight:
			t.Fatalf("%d group detail requests in flight at once, want at most %d", most, maxInFlight)
		case !strings.Contains(dom, `data-loaded="true"`):
			why = "the page never finished a refresh"
		case n < len(names):
			why = fmt.Sprintf("only %d detail requests made", n)
		case most < 2:
			why = fmt.Sprintf("at most %d detail request in flight at once: asked one at a time, not a few", most)
		case bm == nil:
			why = "no failed group block for " + broken
		case !strings.Contains(bm[1], "details failed") || !strings.Contains(bm[1], "HTTP 503"):
			why = "the failed group block does not say its details failed with HTTP 503"
		case !strings.Contains(bm[1], "total lag 2"):
			why = "the failed group block lacks the list's total lag (2)"
		case missing != "":
			why = "no group block for " + missing
		default:
			t.Logf("%d detail requests, at most %d in flight", n, most)
			return
		}
		t.Logf("attempt %d: %s", attempt, why)
	}
	t.Fatalf("console: %s\nDOM:\n%s", why, dom)
}
