package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kgate/kgate/coordinator"
	"github.com/kgate/kgate/redisstore"
)

// forwardedHeader marks an admin request one gateway forwarded to a group's coordinator, so the
// coordinator answers itself instead of forwarding again.
const forwardedHeader = "X-Kgate-Forwarded"

// forwardTimeout bounds a forwarded admin request.
const forwardTimeout = 5 * time.Second

// registerAdminAPI mounts the JSON API and the web console.
func (g *Gateway) registerAdminAPI(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v1/groups", g.apiListGroups)
	mux.HandleFunc("GET /api/v1/groups/{group}", g.apiGroup)
	mux.HandleFunc("DELETE /api/v1/groups/{group}", g.apiDeleteGroup)
	mux.HandleFunc("GET /api/v1/groups/{group}/offsets", g.apiGroupOffsets)
	mux.HandleFunc("POST /api/v1/groups/{group}/offsets", g.apiResetOffsets)
	mux.HandleFunc("GET /api/v1/topics", g.apiListTopics)
	mux.HandleFunc("POST /api/v1/topics", g.apiCreateTopic)
	mux.HandleFunc("GET /api/v1/topics/{topic}", g.apiTopic)
	mux.HandleFunc("DELETE /api/v1/topics/{topic}", g.apiDeleteTopic)
	mux.HandleFunc("GET /api/v1/cluster", g.apiCluster)
	// An unknown API path answers JSON like the rest of the API, not the console's file server 404.
	mux.HandleFunc("GET /api/", func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint")
	})
	mux.Handle("GET /", consoleHandler())
}

type apiError struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, apiError{Error: msg})
}

// storeError answers a Redis failure.
func storeError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, redisstore.ErrUnknownTopic):
		writeError(w, http.StatusNotFound, "unknown topic")
	default:
		writeError(w, http.StatusServiceUnavailable, "redis: "+err.Error())
	}
}

// partitionError is the "error" of one partition of a report whose Redis read failed, worded as
// storeError words a whole report's.
func partitionError(err error) string {
	return "redis: " + err.Error()
}

// noneRead is the error of a report of n items none of which could be read (failed(i) is item i's
// failure): nil when any was read, or there were none. Such a report answers storeError, as a report
// of a Redis down does, so health tooling sees the outage; one partly read answers 200, each item
// that failed with its own error.
func noneRead(n int, failed func(i int) error) error {
	var first error
	for i := range n {
		err := failed(i)
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// forwardToCoordinator proxies a group request to the gateway that coordinates the group, when that is
// another live gateway with an admin address. It reports whether it handled the request.
//
// A read the coordinator does not answer is answered by this gateway instead, from Redis. A change
// (a POST offset reset, a DELETE) cannot be: once it may have reached the coordinator, the coordinator
// may have applied it, and only its answer says so. When that answer does not come whole, the change
// is answered 504, outcome unknown, not 503: a "shift" reset sent again after one that was applied
// moves the offsets twice. It falls through (to notCoordinatingGroup's 503) only when nothing of the
// request was written to the coordinator.
func (g *Gateway) forwardToCoordinator(w http.ResponseWriter, r *http.Request, group string) bool {
	if r.Header.Get(forwardedHeader) != "" {
		return false
	}
	n, ok := g.nodes.coordinatorFor(group)
	if !ok || n.ID == g.cfg.NodeID || n.Admin == "" {
		return false
	}
	target, err := url.Parse("http://" + n.Admin)
	if err != nil {
		return false
	}
	// The body is read once and given to both the forwarded request and, when the coordinator does not
	// answer, the local handler.
	var body []byte
	if r.Body != nil {
		b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad body: "+err.Error())
			return true
		}
		body = b
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	change := r.Method != http.MethodGet && r.Method != http.MethodHead
	// written is set once any of the request is written to the coordinator, and cleared at each
	// attempt's start: the HTTP client sends a request again on a new connection only when nothing of
	// it went out on the one that failed.
	var written atomic.Bool
	trace := &httptrace.ClientTrace{
		GetConn:      func(string) { written.Store(false) },
		WroteHeaders: func() { written.Store(true) },
	}
	// A coordinator that hangs, fails, or stops half way through its answer must not hang or break the
	// admin request: past the timeout, or on any error, this gateway answers itself, from Redis (a
	// read), or 504 (a change that may have been applied). The answer is read whole before any of it
	// is passed on.
	ctx, cancel := context.WithTimeout(httptrace.WithClientTrace(r.Context(), trace), forwardTimeout)
	defer cancel()
	u := *r.URL
	u.Scheme, u.Host = target.Scheme, target.Host
	req, err := http.NewRequestWithContext(ctx, r.Method, u.String(), bytes.NewReader(body))
	if err != nil {
		return false
	}
	req.Header = r.Header.Clone()
	req.Header.Set(forwardedHeader, strconv.Itoa(int(g.cfg.NodeID)))
	// With either header the HTTP client takes a POST for idempotent and may send it again after a
	// connection failed with the request written: a reset applied twice.
	req.Header.Del("Idempotency-Key")
	req.Header.Del("X-Idempotency-Key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if change && written.Load() {
			outcomeUnknown(w, r, n.ID, group, err)
			return true
		}
		return false
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxForwardedAnswer+1))
	if err == nil && len(answer) > maxForwardedAnswer {
		err = fmt.Errorf("answer larger than %d bytes", maxForwardedAnswer)
	}
	if err != nil {
		if change {
			outcomeUnknown(w, r, n.ID, group, fmt.Errorf("status %d, then %w", resp.StatusCode, err))
			return true
		}
		return false
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
	return true
}

// outcomeUnknown answers 504 for a change forwarded to the group's coordinator (node) that may have
// been applied there but whose answer was lost (err).
func outcomeUnknown(w http.ResponseWriter, r *http.Request, node int32, group string, err error) {
	read := "the group's offsets (GET /api/v1/groups/" + pathSegment(group) + "/offsets)"
	if r.Method == http.MethodDelete {
		read = "the group (GET /api/v1/groups/" + pathSegment(group) + ")"
	}
	writeError(w, http.StatusGatewayTimeout, fmt.Sprintf("forwarded to gateway %d, the group's coordinator, whose answer was lost (%v): the outcome is unknown, the change may have been applied; read %s before retrying", node, err, read))
}

// maxForwardedAnswer bounds a coordinator's answer to a forwarded admin request (a larger one is
// answered by this gateway instead).
const maxForwardedAnswer = 64 << 20

// groupSummary is one line of GET /api/v1/groups.
type groupSummary struct {
	Group   string `json:"group"`
	State   string `json:"state"`
	Members int    `json:"members"`
	// TotalLag sums the lag of the group's partitions that were read; null when none could be
	// (Error, or every partition an error).
	TotalLag    *int64 `json:"totalLag"`
	Coordinator int32  `json:"coordinator"`
	Source      string `json:"source"` // "coordinator" (memory of this gateway) or "redis"
	// PartitionErrors counts the committed partitions whose log offsets could not be read (their
	// Redis master down, say): TotalLag leaves them out; GET .../offsets says why.
	PartitionErrors int `json:"partitionErrors,omitempty"`
	// Error says why the group's committed offsets could not be read at all.
	Error string `json:"error,omitempty"`
	err   error
}

func (g *Gateway) apiListGroups(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if r.URL.Query().Get("scope") == liveScope {
		// A peer's question (askPeersLive): the names of the groups this gateway holds in memory.
		names := []string{}
		for _, info := range g.coord.List(ctx) {
			names = append(names, info.Group)
		}
		writeJSON(w, http.StatusOK, names)
		return
	}
	names, unchecked, err := g.store.Groups(ctx)
	if err != nil {
		storeError(w, err)
		return
	}
	names = append(names, unchecked...) // listed with their offsets' read's error
	live := map[string]coordinator.GroupInfo{}
	for _, info := range g.coord.List(ctx) {
		live[info.Group] = info
	}
	set := map[string]bool{}
	for _, n := range names {
		set[n] = true
	}
	for n := range live {
		set[n] = true
	}
	var silent sync.Map // node ids of peers that did not answer
	heldBy := g.askPeersLive(ctx, &silent)
	for n := range heldBy {
		set[n] = true // may have joined on a peer with nothing committed yet: then in Redis nowhere
	}
	list := make([]string, 0, len(set))
	for name := range set {
		list = append(list, name)
	}
	// Every group's offsets are read at once; the groups' live states are asked a few at a time, and a
	// peer that did not answer for one group is not asked for the others: each question may wait a
	// second (remoteGroup), so one peer that takes connections and never answers cost a second per
	// group it coordinates.
	offs, errs := g.groupsOffsets(ctx, list, "", 0)
	out := make([]groupSummary, len(list))
	eachAtOnce(len(list), groupWorkers, func(i int) { out[i] = g.groupSummary(ctx, list[i], live, heldBy, &silent, offs[i], errs[i]) })
	if err := noneRead(len(out), func(i int) error { return out[i].err }); err != nil {
		storeError(w, err)
		return
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	writeJSON(w, http.StatusOK, out)
}

// liveScope asks GET /api/v1/groups for the names of the groups a gateway holds in memory alone.
const liveScope = "live"

// askPeersLive asks every live peer with an admin API, at once, for the groups it holds in memory,
// waiting a second at most, and returns them with the peer holding each; a peer that does not answer
// joins silent.
func (g *Gateway) askPeersLive(ctx context.Context, silent *sync.Map) map[string]gatewayNode {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var (
		mu     sync.Mutex
		heldBy = map[string]gatewayNode{}
		peers  []gatewayNode
	)
	for _, n := range g.nodes.alive() {
		if n.ID != g.cfg.NodeID && n.Admin != "" {
			peers = append(peers, n)
		}
	}
	eachAtOnce(len(peers), len(peers), func(i int) {
		n := peers[i]
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.Admin+"/api/v1/groups?scope="+liveScope, nil)
		if err != nil {
			return
		}
		req.Header.Set(forwardedHeader, strconv.Itoa(int(g.cfg.NodeID)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			silent.Store(n.ID, true)
			return
		}
		defer resp.Body.Close()
		var got []string
		if resp.StatusCode == http.StatusOK && json.NewDecoder(io.LimitReader(resp.Body, maxForwardedAnswer)).Decode(&got) == nil {
			mu.Lock()
			for _, name := range got {
				heldBy[name] = n
			}
			mu.Unlock()
		}
	})
	return heldBy
}

// groupWorkers is how many groups' live states GET /api/v1/groups asks for at once.
const groupWorkers = 8

// eachAtOnce calls fn(0) to fn(n-1), workers of them at a time, and returns when all have returned. A
// panic in fn is carried to the caller's goroutine once all have returned (an admin handler's, whose
// panics track recovers; a metrics scrape's, Collect's), where on a worker it ended the process.
func eachAtOnce(n, workers int, fn func(i int)) {
	next := make(chan int)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first any
	)
	call := func(i int) {
		defer func() {
			if p := recover(); p != nil {
				mu.Lock()
				if first == nil {
					first = fmt.Sprintf("%v (on a worker, with its stack:)\n%s", p, debug.Stack())
				}
				mu.Unlock()
			}
		}()
		fn(i)
	}
	for range min(workers, n) {
		wg.Go(func() {
			for i := range next {
				call(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		panic(first)
	}
}

// groupSummary is one group's line in GET /api/v1/groups: its live state from this gateway's memory
// (live) or the peer holding it (heldBy; else its coordinator), unless that peer is in silent, which
// it joins when it does not answer; and its total lag from offs (groupsOffsets, err its failure), null
// with err set when none of it could be read.
func (g *Gateway) groupSummary(ctx context.Context, name string, live map[string]coordinator.GroupInfo, heldBy map[string]gatewayNode, silent *sync.Map, offs []partitionOffset, err error) groupSummary {
	gs := groupSummary{Group: name, State: "Empty", Source: "redis"}
	if c, ok := g.nodes.coordinatorFor(name); ok {
		gs.Coordinator = c.ID
	}
	peer, asked := g.groupPeer(name)
	if n, ok := heldBy[name]; ok {
		// The peer that said it holds the group: this gateway's view may not name a coordinator for
		// it yet (the gateway set changed a moment ago), or not the same one.
		peer, asked, gs.Coordinator = n, true, n.ID
	}
	if info, ok := live[name]; ok {
		// List leaves Members out; Describe has them (unless the group went away meanwhile).
		gs.State, gs.Source = info.State, "coordinator"
		if d, ok := g.coord.Describe(ctx, name); ok {
			gs.State, gs.Members = d.State, len(d.Members)
		}
	} else if n, ok := peer, asked; ok {
		if _, skip := silent.Load(n.ID); !skip {
			remote, ok, answered := g.askPeerAnswered(ctx, n, name)
			switch {
			case ok:
				gs.State, gs.Members, gs.Source = remote.State, len(remote.Members), "coordinator"
			case !answered:
				silent.Store(n.ID, true) // the rest of its groups are not asked: each would wait as long
			}
		}
	}
	if err == nil {
		err = noneRead(len(offs), func(i int) error { return offs[i].err })
	}
	if err != nil {
		// Not 0: a lag of 0 would look caught up.
		gs.err = err
		if len(offs) == 0 {
			gs.Error = partitionError(err)
		}
	}
	var total int64
	for _, o := range offs {
		if o.err != nil {
			gs.PartitionErrors++
		} else {
			total += *o.Lag
		}
	}
	if gs.err == nil {
		gs.TotalLag = &total
	}
	return gs
}

// remoteGroup asks the coordinating gateway for a group's live state (nil when unreachable or self).
func (g *Gateway) remoteGroup(ctx context.Context, group string) (groupDetail, bool) {
	n, ok := g.groupPeer(group)
	if !ok {
		return groupDetail{}, false
	}
	return g.askPeer(ctx, n, group)
}

// groupPeer is the gateway to ask for a group's live state: its coordinator, unless that is this
// gateway or has no admin API.
func (g *Gateway) groupPeer(group string) (gatewayNode, bool) {
	n, ok := g.nodes.coordinatorFor(group)
	return n, ok && n.ID != g.cfg.NodeID && n.Admin != ""
}

// askPeer asks gateway n for group's live state, waiting a second at most.
func (g *Gateway) askPeer(ctx context.Context, n gatewayNode, group string) (groupDetail, bool) {
	d, ok, _ := g.askPeerAnswered(ctx, n, group)
	return d, ok
}

// askPeerAnswered is askPeer, also telling whether the peer answered at all: one that answers without
// the group's state (a 404 for a group deleted meanwhile, a 503 from its Redis) is not silent.
func (g *Gateway) askPeerAnswered(ctx context.Context, n gatewayNode, group string) (d groupDetail, ok, answered bool) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.Admin+"/api/v1/groups/"+pathSegment(group), nil)
	if err != nil {
		return groupDetail{}, false, true
	}
	req.Header.Set(forwardedHeader, strconv.Itoa(int(g.cfg.NodeID)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return groupDetail{}, false, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&d) != nil {
		return groupDetail{}, false, true
	}
	return d, true, true
}

// pathSegment escapes s as one segment of a URL path. "." and ".." (legal group ids) are escaped too:
// as they are, an HTTP server takes them for the path's own dots and redirects.
func pathSegment(s string) string {
	if s == "." || s == ".." {
		return strings.Repeat("%2E", len(s))
	}
	return url.PathEscape(s)
}

// partitionOffset is one committed partition in the admin API.
type partitionOffset struct {
	Topic           string `json:"topic"`
	Partition       int32  `json:"partition"`
	CommittedOffset int64  `json:"committedOffset"`
	Metadata        string `json:"metadata"`
	// LogStartOffset, LogEndOffset and Lag are null when the partition's log offsets could not be
	// read (Error).
	LogStartOffset *int64 `json:"logStartOffset"`
	LogEndOffset   *int64 `json:"logEndOffset"`
	Lag            *int64 `json:"lag"`
	// UnknownTopic marks an offset committed for a topic that no longer exists (deleted, the group's
	// offsets kept): its log offsets are -1 and its lag 0, left out of totals and metrics.
	UnknownTopic bool `json:"unknownTopic,omitempty"`
	// LastCommitTimestamp is epoch ms from the timestamp sidecar; null when it has no usable entry.
	LastCommitTimestamp *int64 `json:"lastCommitTimestamp"`
	// SidecarOffset is the offset the timestamp belongs to; when it differs from CommittedOffset a
	// gateway that does not write timestamps has moved the offset since.
	SidecarOffset *int64 `json:"sidecarOffset"`
	// Error says why the partition's log offsets could not be read (on a Redis Cluster, its master
	// down): the other partitions are reported all the same.
	Error string `json:"error,omitempty"`
	err   error
}

// failed marks o's log offsets unread, for err.
func (o *partitionOffset) failed(err error) {
	o.LogStartOffset, o.LogEndOffset, o.Lag = nil, nil, nil
	o.Error, o.err = partitionError(err), err
}

// groupOffsets reads a group's committed offsets and the partitions' log offsets from Redis. err is a
// failure to read the committed offsets; a partition whose log offsets could not be read has its own
// (partitionOffset.Error), the others are read all the same.
func (g *Gateway) groupOffsets(ctx context.Context, group, topicFilter string) ([]partitionOffset, error) {
	offs, errs := g.groupsOffsets(ctx, []string{group}, topicFilter, 0)
	return offs[0], errs[0]
}

// groupsOffsets is groupOffsets of each of groups, read at once: the groups' committed offsets in one
// store call, then every partition any of them committed, once, in another (logOffsets). A list of
// groups costs a few round trips whatever its length, and a master down a command timeout at most,
// not one for each group it holds. Each of the two steps gets callTimeout when it is not 0 (else the
// store's command timeout), so a stalled first step leaves the second its time.
func (g *Gateway) groupsOffsets(ctx context.Context, groups []string, topicFilter string, callTimeout time.Duration) ([][]partitionOffset, []error) {
	bounded := func() (context.Context, context.CancelFunc) {
		if callTimeout == 0 {
			return ctx, func() {}
		}
		return context.WithTimeout(ctx, callTimeout)
	}
	cctx, cancel := bounded()
	committed, errs := g.store.CommittedOffsetsOf(cctx, groups)
	cancel()
	out := make([][]partitionOffset, len(groups))
	type at struct{ group, i int }
	byTopic := map[string][]at{}
	for gi, cs := range committed {
		if errs[gi] != nil {
			continue
		}
		out[gi] = make([]partitionOffset, 0, len(cs))
		for _, c := range cs {
			if topicFilter != "" && c.Topic != topicFilter {
				continue
			}
			unknown, none := int64(-1), int64(0)
			po := partitionOffset{Topic: c.Topic, Partition: c.Partition, CommittedOffset: c.Offset, Metadata: c.Metadata,
				LogStartOffset: &unknown, LogEndOffset: &unknown, Lag: &none}
			if c.CommitTime >= 0 {
				ts, so := c.CommitTime, c.SidecarOffset
				po.LastCommitTimestamp, po.SidecarOffset = &ts, &so
			}
			byTopic[c.Topic] = append(byTopic[c.Topic], at{gi, len(out[gi])})
			out[gi] = append(out[gi], po)
		}
	}
	// Every partition is read once, in one call (logOffsets): parts[k] is that of each of users[k].
	var parts []partKey
	var users [][]at
	index := map[partKey]int{}
	for topic, ats := range byTopic {
		t, err := g.topics.get(ctx, topic)
		for _, a := range ats {
			o := &out[a.group][a.i]
			switch {
			case errors.Is(err, redisstore.ErrUnknownTopic):
				o.UnknownTopic = true
			case err != nil:
				o.failed(err)
			case o.Partition >= t.Partitions:
				o.UnknownTopic = true // a partition the topic created again under the name lacks
			default:
				pk := partKey{topic, o.Partition}
				k, ok := index[pk]
				if !ok {
					k = len(parts)
					index[pk] = k
					parts, users = append(parts, pk), append(users, nil)
				}
				users[k] = append(users[k], a)
			}
		}
	}
	lctx, cancel := bounded()
	defer cancel()
	offs, readErrs := g.logOffsets(lctx, parts)
	for k, ats := range users {
		for _, a := range ats {
			o := &out[a.group][a.i]
			if readErrs[k] != nil {
				o.failed(readErrs[k])
				continue
			}
			lag := max(offs[k].End-o.CommittedOffset, 0)
			o.LogStartOffset, o.LogEndOffset, o.Lag = &offs[k].Start, &offs[k].End, &lag
		}
	}
	return out, errs
}

// groupDetail is GET /api/v1/groups/{group}.
type groupDetail struct {
	Group        string            `json:"group"`
	State        string            `json:"state"`
	ProtocolType string            `json:"protocolType"`
	Protocol     string            `json:"protocol"`
	Generation   int32             `json:"generation"`
	Leader       string            `json:"leader"`
	Coordinator  int32             `json:"coordinator"`
	Source       string            `json:"source"`
	Members      []memberDetail    `json:"members"`
	Offsets      []partitionOffset `json:"offsets"`
	TotalLag     int64             `json:"totalLag"` // of the partitions read (those without an error)
}

type memberDetail struct {
	MemberID   string             `json:"memberId"`
	InstanceID *string            `json:"instanceId"`
	ClientID   string             `json:"clientId"`
	ClientHost string             `json:"clientHost"`
	Assigned   map[string][]int32 `json:"assignedPartitions"`
}

func (g *Gateway) apiGroup(w http.ResponseWriter, r *http.Request) {
	group := r.PathValue("group")
	if g.forwardToCoordinator(w, r, group) {
		return
	}
	ctx := r.Context()
	d := groupDetail{Group: group, Members: []memberDetail{}, Source: "redis", State: "Dead", Generation: -1}
	if c, ok := g.nodes.coordinatorFor(group); ok {
		d.Coordinator = c.ID
	}
	info, live := g.coord.Describe(ctx, group)
	if live {
		d.Source = "coordinator"
		d.State, d.ProtocolType, d.Protocol, d.Generation, d.Leader = info.State, info.ProtocolType, info.Protocol, info.Generation, info.Leader
		for _, m := range info.Members {
			md := memberDetail{MemberID: m.MemberID, InstanceID: m.InstanceID, ClientID: m.ClientID, ClientHost: m.ClientHost, Assigned: m.Assigned}
			if md.Assigned == nil {
				md.Assigned = map[string][]int32{}
			}
			d.Members = append(d.Members, md)
		}
	}
	offs, err := g.groupOffsets(ctx, group, "")
	if err == nil {
		err = noneRead(len(offs), func(i int) error { return offs[i].err })
	}
	if err != nil {
		storeError(w, err)
		return
	}
	if !live && len(offs) == 0 {
		writeError(w, http.StatusNotFound, "unknown group")
		return
	}
	if !live {
		d.State = "Empty"
	}
	d.Offsets = offs
	for _, o := range offs {
		if o.err == nil {
			d.TotalLag += *o.Lag
		}
	}
	writeJSON(w, http.StatusOK, d)
}

func (g *Gateway) apiGroupOffsets(w http.ResponseWriter, r *http.Request) {
	group := r.PathValue("group")
	ctx := r.Context()
	offs, err := g.groupOffsets(ctx, group, r.URL.Query().Get("topic"))
	if err == nil {
		err = noneRead(len(offs), func(i int) error { return offs[i].err })
	}
	if err != nil {
		storeError(w, err)
		return
	}
	if len(offs) == 0 {
		if topic := r.URL.Query().Get("topic"); topic != "" {
			if _, err := g.topics.get(ctx, topic); errors.Is(err, redisstore.ErrUnknownTopic) {
				writeError(w, http.StatusNotFound, "unknown topic")
				return
			}
		}
		if !g.groupKnown(ctx, group) {
			writeError(w, http.StatusNotFound, "unknown group")
			return
		}
	}
	writeJSON(w, http.StatusOK, offs)
}

// groupKnown reports whether group has committed offsets in Redis or is live on this gateway or on
// its coordinator. A Redis error counts as known: the caller then answers what it read.
func (g *Gateway) groupKnown(ctx context.Context, group string) bool {
	if _, live := g.coord.Describe(ctx, group); live {
		return true
	}
	if exists, err := g.store.GroupExists(ctx, group); err != nil || exists {
		return true
	}
	_, remote := g.remoteGroup(ctx, group)
	return remote
}

// resetRequest is the body of POST /api/v1/groups/{group}/offsets.
type resetRequest struct {
	Topic      string  `json:"topic"`
	Partitions []int32 `json:"partitions"` // empty: every partition of the topic
	// To is earliest, latest, timestamp (Value = epoch ms), offset (Value = the offset) or shift
	// (Value = records to move, negative moves back).
	To     string `json:"to"`
	Value  int64  `json:"value"`
	DryRun bool   `json:"dryRun"`
}

type resetResult struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Previous  *int64 `json:"previousOffset"`
	Offset    int64  `json:"newOffset"`
}

// decodeBody decodes a request's JSON body (at most 1 MiB, no unknown fields) into v, or answers 415 or
// 400. The body must say it is JSON: a web page can make a browser POST a text/plain body anywhere
// without asking first, but not an application/json one, so an operator's browser visiting a hostile
// page cannot reset offsets or create topics through a gateway it reaches.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, "the body must be sent as Content-Type: application/json")
		return false
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "bad body: "+err.Error())
		return false
	}
	return true
}

func (g *Gateway) apiResetOffsets(w http.ResponseWriter, r *http.Request) {
	group := r.PathValue("group")
	if g.forwardToCoordinator(w, r, group) || g.notCoordinatingGroup(w, r, group) {
		return
	}
	ctx := r.Context()
	var req resetRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.Topic == "" {
		writeError(w, http.StatusBadRequest, `"topic" is required`)
		return
	}
	switch req.To {
	case "earliest", "latest", "timestamp", "offset", "shift":
	default:
		writeError(w, http.StatusBadRequest, `"to" must be earliest, latest, timestamp, offset or shift`)
		return
	}
	// The group's writes are held from the check of its members to the commit, not while the answer
	// (which can be megabytes) goes to a client that may not read it. A dry run writes nothing and
	// holds nothing: its lookups (a timestamp's scans) would stall the commits of every
	// group sharing the lock's stripe behind any deletion waiting for it.
	unlock := func() {}
	var token string
	if !req.DryRun {
		unlock = sync.OnceFunc(g.writes.commit(group))
		// Claimed before the check of its members, as a commit's (claimGroup).
		var err error
		if token, err = g.claimGroup(ctx, group); err != nil {
			unlock()
			if errors.Is(err, errNotCoordinating) {
				writeError(w, http.StatusServiceUnavailable, "the group moved to another gateway while the reset began; nothing was written: retry")
				return
			}
			storeError(w, err)
			return
		}
	}
	defer unlock()
	warning := "" // the reset is done, with this said about it
	info, live, code := g.describeGroup(ctx, group)
	if code != 0 {
		writeError(w, http.StatusServiceUnavailable, "the group's coordinator cannot tell whether it has members: "+kerr.ErrorForCode(code).Error())
		return
	}
	if live && info.State != "Empty" && info.State != "Dead" {
		writeError(w, http.StatusConflict, "group is "+info.State+": offsets can only be reset while it has no members")
		return
	}
	t, err := g.topics.get(ctx, req.Topic)
	if err != nil {
		storeError(w, err)
		return
	}
	parts := req.Partitions
	if len(parts) == 0 {
		for p := int32(0); p < t.Partitions; p++ {
			parts = append(parts, p)
		}
	}
	// Each partition once, however often listed: a list of the same one up to the body limit would
	// have the reset read and commit it some 200,000 times over, holding the group's writes.
	slices.Sort(parts)
	parts = slices.Compact(parts)
	for _, p := range parts {
		if p < 0 || p >= t.Partitions {
			writeError(w, http.StatusBadRequest, "partition "+strconv.Itoa(int(p))+" does not exist")
			return
		}
	}
	offs, err := g.store.PartitionOffsets(ctx, req.Topic, parts)
	if err != nil {
		storeError(w, err)
		return
	}
	committed, err := g.store.CommittedOffsets(ctx, group)
	if err != nil {
		storeError(w, err) // a shift from offsets not read would commit the wrong ones
		return
	}
	prev := map[int32]int64{}
	for _, c := range committed {
		if c.Topic == req.Topic {
			prev[c.Partition] = c.Offset
		}
	}
	var times []redisstore.TimeAnswer
	if req.To == "timestamp" { // the partitions' lookups together, 64 in the round trips of the longest
		times = g.store.OffsetsForTime(ctx, req.Topic, parts, req.Value)
	}
	results := make([]resetResult, len(parts))
	commits := make([]redisstore.OffsetCommit, len(parts))
	for i, p := range parts {
		var target int64
		switch req.To {
		case "earliest":
			target = offs[i].Start
		case "latest":
			target = offs[i].End
		case "offset":
			target = req.Value
		case "shift":
			base, ok := prev[p]
			if !ok { // as Apache's kafka-consumer-groups --shift-by refuses
				writeError(w, http.StatusBadRequest, "cannot shift partition "+strconv.Itoa(int(p))+": the group has no committed offset there")
				return
			}
			switch {
			case req.Value > 0 && base > math.MaxInt64-req.Value:
				target = math.MaxInt64 // clamped to the end below, as a shift past it is
			case req.Value < 0 && base < math.MinInt64-req.Value:
				target = math.MinInt64
			default:
				target = base + req.Value
			}
		case "timestamp":
			if err := times[i].Err; err != nil {
				storeError(w, err)
				return
			}
			target = offs[i].End
			if times[i].Found {
				target = times[i].Offset
			}
		}
		target = min(max(target, offs[i].Start), offs[i].End) // clamped to the log, as kafka-consumer-groups does
		results[i] = resetResult{Topic: req.Topic, Partition: p, Offset: target}
		if v, ok := prev[p]; ok {
			results[i].Previous = &v
		}
		commits[i] = redisstore.OffsetCommit{Topic: req.Topic, Partition: p, Offset: target}
	}
	if !req.DryRun {
		// Checked again as the coordinator checks a commit of generation -1: a consumer may have
		// joined while the offsets were read (JoinGroup does not wait for the group's writes), and it
		// would go on from the offsets it fetched, then overwrite these with its next commit.
		switch code := g.coord.ValidateCommit(ctx, group, "", nil, -1); code {
		case 0:
		case kerr.NotCoordinator.Code, kerr.CoordinatorNotAvailable.Code, kerr.CoordinatorLoadInProgress.Code:
			writeError(w, http.StatusServiceUnavailable, "the group's coordinator cannot tell whether it has members: "+kerr.ErrorForCode(code).Error())
			return
		default:
			writeError(w, http.StatusConflict, "a member joined the group: offsets can only be reset while it has no members")
			return
		}
		// An untimestamped write: the sidecar entries it overwrites are cleared.
		for _, err := range g.store.CommitOffsets(ctx, group, token, commits, time.Time{}) {
			switch {
			case isDisowned(err):
				g.disowned(ctx, group, token)
				writeError(w, http.StatusServiceUnavailable, "another gateway took the group over while the offsets were reset; nothing was written: retry")
				return
			case errors.Is(err, redisstore.ErrNotDurable):
				// Written on the primary: an error would have the operator send it again, and a
				// relative reset ("shift") sent again moves the offsets twice.
				warning = "the offsets are written on the Redis primary but its replicas did not confirm them within redis.wait_timeout: a failover now could undo the reset; check the group's offsets before resetting again"
			case errors.Is(err, redisstore.ErrOffsetsStored):
				warning = "the offsets are stored, but updating the group's listing or its Redis stream consumer groups failed (" + err.Error() + "): the next commit of the group does it; do not send a relative reset again"
			case redisstore.OutcomeUnknown(err):
				// Sent, its answer lost: Redis may have stored the offsets, and a shift sent again
				// on a 503 would move them twice.
				writeError(w, http.StatusGatewayTimeout, "redis: "+err.Error()+": the outcome is unknown, the offsets may have been reset; read them (GET /api/v1/groups/"+pathSegment(group)+"/offsets) before retrying")
				return
			case err != nil:
				storeError(w, err)
				return
			}
		}
		g.log.Info().Str("group", group).Str("topic", req.Topic).Str("to", req.To).Bool("confirmed", warning == "").Msg("offsets reset through the admin API")
	}
	unlock()
	body := map[string]any{"dryRun": req.DryRun, "offsets": results}
	if warning != "" {
		body["warning"] = warning
	}
	writeJSON(w, http.StatusOK, body)
}

func (g *Gateway) apiDeleteGroup(w http.ResponseWriter, r *http.Request) {
	group := r.PathValue("group")
	if g.forwardToCoordinator(w, r, group) || g.notCoordinatingGroup(w, r, group) {
		return
	}
	switch code := g.deleteGroup(r.Context(), group); code {
	case 0:
		w.WriteHeader(http.StatusNoContent)
	case kerr.NonEmptyGroup.Code:
		writeError(w, http.StatusConflict, "group has members")
	case kerr.GroupIDNotFound.Code:
		writeError(w, http.StatusNotFound, "unknown group")
	default:
		writeError(w, http.StatusServiceUnavailable, kerr.ErrorForCode(code).Error())
	}
}

// notCoordinatingGroup refuses (503) a change to a group this gateway does not coordinate, after
// forwarding it to the coordinator failed (no admin address, no answer) or was not possible: only the
// coordinator knows whether the group has members, and a group with members keeps its offsets, as on
// Apache Kafka.
func (g *Gateway) notCoordinatingGroup(w http.ResponseWriter, r *http.Request, group string) bool {
	n, ok := g.nodes.coordinatorFor(group)
	switch {
	case ok && n.ID == g.cfg.NodeID:
		return false
	case !ok:
		writeError(w, http.StatusServiceUnavailable, "no gateway coordinates groups at the moment (this one lost its registration in Redis); retry later")
	case r.Header.Get(forwardedHeader) != "":
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("forwarded here, but this gateway sees gateway %d as the coordinator of group %q while the gateways' views settle; retry", n.ID, group))
	default:
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("group %q is coordinated by gateway %d, which could not be asked whether it has members; retry later or there", group, n.ID))
	}
	return true
}

// topicDetail is GET /api/v1/topics/{topic}.
type topicDetail struct {
	Name       string            `json:"name"`
	ID         string            `json:"id"`
	Partitions []partitionDetail `json:"partitions"`
	Configs    map[string]string `json:"configs"`
	Records    int64             `json:"records"` // of the partitions read (those without an error)
}

type partitionDetail struct {
	Partition int32 `json:"partition"`
	Leader    int32 `json:"leader"`
	// The numbers are null when they could not be read (Error).
	LogStartOffset *int64 `json:"logStartOffset"`
	LogEndOffset   *int64 `json:"logEndOffset"`
	Records        *int64 `json:"records"`
	MemoryBytes    *int64 `json:"memoryBytes"` // 0 where not asked for (the topics' list)
	// Error says why the partition could not be read (on a Redis Cluster, its master down): the
	// other partitions are reported all the same.
	Error string `json:"error,omitempty"`
	err   error
}

// describeTopic reads t's partitions, each failing on its own (partitionDetail.Error); err says none
// could be read.
func (g *Gateway) describeTopic(ctx context.Context, t redisstore.Topic, memory bool) (topicDetail, error) {
	offs, errs := g.logOffsets(ctx, topicParts(nil, t))
	return g.topicDetail(ctx, t, offs, errs, memory)
}

// topicParts appends every partition of t to parts.
func topicParts(parts []partKey, t redisstore.Topic) []partKey {
	for p := range t.Partitions {
		parts = append(parts, partKey{t.Name, p})
	}
	return parts
}

// logOffsets reads the log offsets of parts, of any topics, in one store call (a Read of no
// records), each failing on its own: on a Redis Cluster the masters' shares go at once, so a master
// that does not answer is waited for once per report, where a call per topic waited a command timeout
// for each topic whose partitions are all on it. A partition without a meta hash reads as an empty one,
// as EachPartitionOffsets has it.
func (g *Gateway) logOffsets(ctx context.Context, parts []partKey) ([]redisstore.Offsets, []error) {
	offs, errs := make([]redisstore.Offsets, len(parts)), make([]error, len(parts))
	if len(parts) == 0 {
		return offs, errs
	}
	reqs := make([]redisstore.ReadRequest, len(parts))
	for i, p := range parts {
		reqs[i] = redisstore.ReadRequest{Topic: p.topic, Partition: p.partition}
	}
	for i, r := range g.store.Read(ctx, reqs) {
		offs[i], errs[i] = r.Offsets, r.Err
	}
	return offs, errs
}

// topicDetail reports t from its partitions' log offsets (offs, errs: of partition i at i), and their
// memory when asked.
func (g *Gateway) topicDetail(ctx context.Context, t redisstore.Topic, offs []redisstore.Offsets, errs []error, memory bool) (topicDetail, error) {
	d := topicDetail{Name: t.Name, ID: uuid.UUID(t.ID).String(), Configs: map[string]string{}}
	for _, name := range sortedConfigNames() {
		v, _ := g.topicConfig(t, name)
		d.Configs[name] = v
	}
	parts := make([]int32, t.Partitions)
	for i := range parts {
		parts[i] = int32(i)
	}
	// Memory is read of the partitions whose offsets were: a master that did not answer those would
	// have the call wait for it a second time.
	var read []int32
	for i, p := range parts {
		if errs[i] == nil {
			read = append(read, p)
		}
	}
	mem, memErrs := make([]int64, len(read)), make([]error, len(read))
	if memory && len(read) > 0 {
		mem, memErrs = g.store.StreamMemory(ctx, t.Name, read)
	}
	k := 0 // the partition's place in read
	for i, p := range parts {
		pd := partitionDetail{Partition: p, Leader: g.nodes.leaderFor(t.Name, p).ID}
		if pd.err = errs[i]; pd.err == nil {
			records := offs[i].End - offs[i].Start
			pd.LogStartOffset, pd.LogEndOffset, pd.Records = &offs[i].Start, &offs[i].End, &records
			d.Records += records
			if pd.err = memErrs[k]; pd.err == nil {
				pd.MemoryBytes = &mem[k]
			}
			k++
		}
		if pd.err != nil {
			pd.Error = partitionError(pd.err)
		}
		d.Partitions = append(d.Partitions, pd)
	}
	return d, noneRead(len(d.Partitions), func(i int) error { return d.Partitions[i].err })
}

func (g *Gateway) apiListTopics(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	topics, err := g.topics.all(ctx)
	if err != nil {
		storeError(w, err)
		return
	}
	names := redisstore.TopicNames(topics)
	var parts []partKey
	for _, name := range names {
		parts = topicParts(parts, topics[name])
	}
	offs, partErrs := g.logOffsets(ctx, parts)
	out, errs := make([]topicDetail, len(names)), make([]error, len(names))
	from := 0 // the topic's first partition in parts
	for i, name := range names {
		t := topics[name]
		to := from + int(t.Partitions)
		out[i], errs[i] = g.topicDetail(ctx, t, offs[from:to], partErrs[from:to], false)
		from = to
	}
	if err := noneRead(len(errs), func(i int) error { return errs[i] }); err != nil {
		storeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (g *Gateway) apiTopic(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	t, err := g.topics.get(ctx, r.PathValue("topic"))
	if err != nil {
		storeError(w, err)
		return
	}
	d, err := g.describeTopic(ctx, t, true)
	if err != nil {
		storeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

type createTopicRequest struct {
	Name       string            `json:"name"`
	Partitions int32             `json:"partitions"`
	Configs    map[string]string `json:"configs"`
}

func (g *Gateway) apiCreateTopic(w http.ResponseWriter, r *http.Request) {
	var req createTopicRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.Partitions == 0 {
		req.Partitions = g.cfg.DefaultPartitions
	}
	if err := validTopicName(req.Name); err != nil {
		writeError(w, http.StatusBadRequest, "invalid topic name")
		return
	}
	if req.Partitions < 1 || req.Partitions > maxTopicPartitions {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("partitions must be from 1 to %d", maxTopicPartitions))
		return
	}
	if _, collisions, err := g.topics.allWithCollisions(r.Context()); err != nil {
		storeError(w, err)
		return
	} else if other, collides := collisions.collides(req.Name); collides {
		writeError(w, http.StatusBadRequest, collisionMessage(req.Name, other))
		return
	}
	if name, err := validateTopicConfigs(req.Configs); err != nil {
		writeError(w, http.StatusBadRequest, "config "+name+": "+err.Error())
		return
	}
	t := g.newTopic(req.Name, req.Partitions, req.Configs)
	err := g.store.CreateTopic(r.Context(), t)
	g.topics.changed(err)
	var ce *redisstore.CollisionError
	switch {
	case errors.Is(err, redisstore.ErrTopicExists):
		writeError(w, http.StatusConflict, "topic already exists")
		return
	case errors.As(err, &ce):
		writeError(w, http.StatusBadRequest, collisionMessage(req.Name, ce.Other))
		return
	case err != nil:
		storeError(w, err)
		return
	}
	d, err := g.describeTopic(r.Context(), t, false)
	if err != nil {
		storeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, d)
}

func (g *Gateway) apiDeleteTopic(w http.ResponseWriter, r *http.Request) {
	err := g.deleteTopic(r.Context(), r.PathValue("topic"), [16]byte{})
	if err != nil {
		storeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

type clusterView struct {
	ClusterID    string        `json:"clusterId"`
	Self         int32         `json:"self"`
	Gateways     []gatewayView `json:"gateways"`
	RedisMode    string        `json:"redisMode"`
	RedisVersion string        `json:"redisVersion"`
}

type gatewayView struct {
	NodeID            int32  `json:"nodeId"`
	Advertised        string `json:"advertised"`
	Admin             string `json:"admin"`
	Alive             bool   `json:"alive"`
	CoordinatedGroups int    `json:"coordinatedGroups"`
}

func (g *Gateway) apiCluster(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	v := clusterView{ClusterID: g.cfg.ClusterID, Self: g.cfg.NodeID}
	info, err := g.store.Info(ctx)
	if err != nil {
		storeError(w, err)
		return
	}
	v.RedisMode, v.RedisVersion = info.Mode, info.Version
	groups, unchecked, _ := g.store.Groups(ctx)
	groups = append(groups, unchecked...)
	for _, gi := range g.coord.List(ctx) {
		groups = append(groups, gi.Group)
	}
	var silent sync.Map
	heldBy := g.askPeersLive(ctx, &silent) // may be live on a peer with nothing committed yet
	counted := map[string]bool{}
	perNode := map[int32]int{}
	for name, n := range heldBy {
		counted[name] = true
		perNode[n.ID]++
	}
	for _, name := range groups {
		if counted[name] {
			continue
		}
		counted[name] = true
		if c, ok := g.nodes.coordinatorFor(name); ok {
			perNode[c.ID]++
		}
	}
	for _, n := range g.nodes.all() {
		v.Gateways = append(v.Gateways, gatewayView{NodeID: n.ID, Advertised: n.addr(), Admin: n.Admin, Alive: n.Alive,
			CoordinatedGroups: perNode[n.ID]})
	}
	writeJSON(w, http.StatusOK, v)
}
