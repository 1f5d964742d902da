package integration

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
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
