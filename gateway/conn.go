package gateway

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"time"

	pool "github.com/libp2p/go-buffer-pool"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/protocol"
	"github.com/kgate/kgate/redisstore"
)

// conn is one client connection. Its read loop handles one request at a time, in order, as Apache
// Kafka does; the only per-connection memory while idle is the goroutine and this struct.
type conn struct {
	g        *Gateway
	nc       net.Conn
	remote   string
	clientID string // the last client id a request named, for the log
	// reqClientID is the client id of the request being handled ("" for a null one): JoinGroup records
	// it for the member, as Apache takes it from each request's header.
	reqClientID string
	software    string // client software name/version from ApiVersions v3, for the log
	log         zerolog.Logger
	// outBufs are pooled buffers the response being answered points into (a fetch's record
	// batches), handed back once the response is written.
	outBufs []*[]byte
	parts   [][]byte // the pieces of the fetch response being written, kept for the next
	// ahead is the read-ahead for the next fetch (read_ahead.go); aheadWG tracks its reads.
	ahead   *readAhead
	specs   []*readAhead // reads for coming fetches from guesses, the nearest first (speculate)
	aheadWG sync.WaitGroup
	// specMisses counts speculations in a row the fetch did not take, specSkipped the chances passed
	// up since.
	specMisses, specSkipped int
	// aheadMisses counts read-aheads in a row the next fetch did not use; aheadSkipped the chances
	// to read ahead passed up since (wantReadAhead).
	aheadMisses, aheadSkipped int
	// appends holds the produce requests answered in the background (handleFrame).
	appends appendQueue
}

// Request and response buffers are recycled between requests of all connections through a
// power-of-two buffer pool, so a multi-megabyte fetch response reuses a buffer instead of allocating
// (and zeroing) a new one each time, and an idle connection holds none.
const (
	minPooledBuf = 16 << 10
	maxPooledBuf = 64 << 20 // larger buffers are left to the GC
)

var buffers pool.BufferPool

// getBuf returns an empty buffer with a capacity of at least n.
func getBuf(n int) *[]byte {
	b := buffers.Get(max(n, minPooledBuf))[:0]
	return &b
}

// putBuf recycles buf (bufp's buffer, possibly grown).
func putBuf(_ *[]byte, buf []byte) {
	if c := cap(buf); c >= minPooledBuf && c <= maxPooledBuf {
		buffers.Put(buf[:0])
	}
}

func (g *Gateway) serveConn(nc net.Conn) {
	defer g.untrack(nc)
	defer nc.Close()
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	c := &conn{g: g, nc: nc, remote: nc.RemoteAddr().String()}
	c.log = g.log.With().Str("remote", c.remote).Logger()
	c.log.Info().Msg("connection opened")
	connectionsOpened()
	err := c.readLoop(g.bgCtx)
	if aerr := c.stopAppends(); aerr != nil {
		err = aerr
	}
	c.closeReadAhead()
	if err == nil { // the read loop stopped for shutdown and every answer is written
		c.lingerClose()
	}
	connectionsClosed()
	ev := c.log.Info().Str("client_id", c.clientID).Str("client_software", c.software)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		ev = ev.Err(err)
	}
	ev.Msg("connection closed")
}

// errPanic is a panic while serving a connection, recovered (recovered): the connection closes and the
// gateway serves the others.
var errPanic = errors.New("gateway: panic serving a request")

// recovered, deferred, turns a panic of the calling goroutine into errPanic in *err, logged with its
// stack.
func (c *conn) recovered(err *error) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("%w: %v", errPanic, p)
		notePanic(c.log, "connection", p, debug.Stack(), "panic serving a request; closing the connection")
	}
}

// readLoop reads and handles requests until the connection fails or closes, or shutdown begins
// (then it returns nil: what it has read is answered, the next request is not read).
func (c *conn) readLoop(ctx context.Context) (err error) {
	defer c.recovered(&err)
	var size [4]byte
	for {
		if !c.stayOpen() {
			return nil
		}
		if _, err := io.ReadFull(c.nc, size[:]); err != nil {
			return c.readErr(err)
		}
		n := int32(binary.BigEndian.Uint32(size[:]))
		switch {
		case n < 8:
			return protocol.ErrFrameTooSmall
		case n > c.g.cfg.MaxFrameBytes:
			return protocol.ErrFrameTooLarge
		}
		bufp, buf, err := c.readBody(int(n))
		if err != nil {
			putBuf(bufp, buf)
			return c.readErr(err)
		}
		bytesIn(int(n) + 4)
		if err := c.handleFrame(ctx, buf, func() { putBuf(bufp, buf) }); err != nil {
			return err
		}
	}
}

// bodyGrowStep bounds how far a frame's buffer runs ahead of the bytes that arrived: a four-byte size
// prefix alone must not make the gateway allocate (and hold, while the peer sends nothing more) the
// whole frame limit.
const bodyGrowStep = 1 << 20

// readBody reads a frame body of n bytes into a pooled buffer. A body above bodyGrowStep is read into
// a buffer that grows fourfold as the bytes arrive, so the memory held is at most four times what the
// peer has sent (plus bodyGrowStep), for a copy of at most a third of the body in all. On an error the
// buffer read so far is returned with it, to be handed back.
func (c *conn) readBody(n int) (*[]byte, []byte, error) {
	bufp := getBuf(min(n, bodyGrowStep))
	buf := (*bufp)[:0]
	for len(buf) < n {
		if len(buf) == cap(buf) {
			nextp := getBuf(min(n, max(4*len(buf), bodyGrowStep)))
			next := append((*nextp)[:0], buf...)
			putBuf(bufp, buf)
			bufp, buf = nextp, next
		}
		// At most bodyGrowStep under one idle deadline: a client sending a large request slowly and
		// steadily is not idle.
		m, err := io.ReadFull(c.nc, buf[len(buf):min(n, cap(buf), len(buf)+bodyGrowStep)])
		buf = buf[:len(buf)+m]
		if err != nil {
			return bufp, buf, err
		}
		if len(buf) < n && !c.stayOpen() {
			return bufp, buf, errStopping // a request read whole is answered; one cut short is not
		}
	}
	return bufp, buf, nil
}

// lingerTimeout bounds how long a connection that stopped reading at shutdown waits for its client to
// close (lingerClose).
const lingerTimeout = 2 * time.Second

// lingerClose ends a connection that stopped reading at shutdown: it sends the end of the stream after
// the answers and discards what the client still sends until the client closes too, at most
// lingerTimeout. Closed at once with a request unread, the connection would be reset, and a reset drops
// the answers not sent yet.
func (c *conn) lingerClose() {
	hc, ok := c.nc.(interface{ CloseWrite() error })
	if !ok || hc.CloseWrite() != nil {
		return
	}
	until := time.Now().Add(lingerTimeout)
	for time.Now().Before(until) {
		// Set each time: shutdown's past deadline may land after this connection stopped reading.
		_ = c.nc.SetReadDeadline(until)
		if _, err := io.Copy(io.Discard, c.nc); !errors.Is(err, os.ErrDeadlineExceeded) {
			return
		}
	}
}

// errStopping ends a read loop in the middle of a request when shutdown begins: the request, not yet
// read in full, is left for the client to send elsewhere.
var errStopping = errors.New("gateway: shutting down")

// stayOpen pushes back the idle deadline (Config.IdleTimeout): a connection is idle when no byte of a
// request arrives for that long. It reports false once shutdown has begun: no further request is
// read.
func (c *conn) stayOpen() bool {
	if d := c.g.cfg.IdleTimeout; d > 0 {
		_ = c.nc.SetReadDeadline(time.Now().Add(d))
	}
	// Checked after the deadline is set: shutdown sets a past deadline after it closes quit, so
	// either this sees quit or that deadline comes last and ends the read.
	return !c.g.quitting()
}

// readErr is what a failed read ends the read loop with: nil when shutdown ended it.
func (c *conn) readErr(err error) error {
	if c.g.quitting() {
		return nil
	}
	return err
}

// Produce requests are answered in the background (appendQueue), so that the next request is read and
// decoded, and a next produce's batches checked and decoded, while Redis stores the previous one.
// Produce requests that arrive meanwhile (a producer with several requests in flight) queue up, and
// the next round appends all of them together: one pipeline, and for each partition one finish step
// over its batches from all of them (redisstore.Append merges a partition's consecutive batches).
// Requests are still answered one at a time and in order, as on Apache Kafka: responses are written in
// the order the requests came, and any other request waits until the produces before it are answered.

// maxQueuedProduces and maxQueuedBytes bound the produce requests a connection holds, queued or being
// appended (Kafka producers keep at most five in flight by default); one request is always let in,
// however large, as when requests are read one at a time.
const (
	maxQueuedProduces = 8
	maxQueuedBytes    = 32 << 20
)

// appendQueue is a connection's produce requests waiting to be appended, and the state of the
// goroutine that appends them (runAppends). The goroutine starts with the connection's first produce
// and lives until the connection closes: a producer's requests often find the queue empty, and a
// goroutine started for each of them grew its stack again through the Redis client every time (7% of
// the gateway's profile samples at 85k records/s, one request per millisecond). Parked, its stack shrinks back at
// the next garbage collections, so an idle producer connection stays small.
type appendQueue struct {
	mu      sync.Mutex
	cond    *sync.Cond // created on first use; signalled on every change below
	jobs    []*queuedProduce
	held    int           // requests queued or being appended
	bytes   int           // their frame buffers and the memory their records took (produceJob.held)
	stopped chan struct{} // closed when runAppends has returned (nil until it starts, once)
	closing bool          // the connection's read loop ended: runAppends returns once the queue is empty
	err     error         // the failure that ended the connection
}

type queuedProduce struct {
	size    int // of the request's frame buffer and its records (produceJob.held)
	hdr     protocol.RequestHeader
	start   time.Time
	job     *produceJob
	release func()
}

// handleFrame decodes one request and answers it (a produce in the background); release hands the
// frame back once the request no longer needs it. A returned error closes the connection.
func (c *conn) handleFrame(ctx context.Context, frame []byte, release func()) error {
	start := time.Now()
	hdr, a, req, err := c.decode(frame)
	if pr, ok := req.(*kmsg.ProduceRequest); ok && err == nil {
		job := c.prepareProduce(ctx, pr)
		// The frame's buffer, not its length: a pooled buffer can be up to twice the frame.
		return c.enqueueProduce(ctx, &queuedProduce{size: cap(frame) + job.held, hdr: hdr, start: start, job: job, release: release})
	}
	defer release()
	if aerr := c.awaitAppends(); aerr != nil {
		return aerr
	}
	if err != nil {
		if errors.Is(err, errAnswerUnsupported) {
			return c.write(hdr, unsupportedAPIVersions(hdr.APIVersion))
		}
		return err
	}
	resp, err := a.handle(ctx, c, req)
	return c.answer(hdr, start, resp, err, waitsByDesign(req))
}

// waitsByDesign is how long a request may wait before it is answered by design, which the slow request
// log does not count: a fetch's max_wait (a long poll on a quiet partition); a JoinGroup or SyncGroup
// waits for the rest of the group, for as long as a rebalance takes, and is never logged as slow.
func waitsByDesign(req kmsg.Request) time.Duration {
	switch r := req.(type) {
	case *kmsg.FetchRequest:
		return time.Duration(max(r.MaxWaitMillis, 0)) * time.Millisecond
	case *kmsg.JoinGroupRequest, *kmsg.SyncGroupRequest:
		return math.MaxInt64
	}
	return 0
}

// enqueueProduce queues p for the appending goroutine, starting it if needed; it waits while the
// queue is full (maxQueuedProduces, maxQueuedBytes).
func (c *conn) enqueueProduce(ctx context.Context, p *queuedProduce) error {
	q := &c.appends
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.cond == nil {
		q.cond = sync.NewCond(&q.mu)
	}
	for q.err == nil && q.held > 0 && (q.held >= maxQueuedProduces || q.bytes+p.size > maxQueuedBytes) {
		q.cond.Wait()
	}
	if q.err != nil {
		p.release()
		return q.err
	}
	q.jobs = append(q.jobs, p)
	q.held++
	q.bytes += p.size
	// The connection's first produce starts the goroutine. It returns only on q.err (checked above) or
	// when the read loop has ended, so it is never started twice.
	if q.stopped == nil {
		q.stopped = make(chan struct{})
		go c.runAppends(ctx, q.stopped)
	} else if len(q.jobs) == 1 {
		q.cond.Broadcast()
	}
	return nil
}

// awaitAppends waits until every queued produce is answered and returns the error that ended the
// connection, if any.
func (c *conn) awaitAppends() error {
	q := &c.appends
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.held > 0 {
		q.cond.Wait()
	}
	return q.err
}

// stopAppends stops the appending goroutine once it has answered what is queued (or drops what is
// queued after a failure), waits for it to return, and returns the failure, if any.
func (c *conn) stopAppends() error {
	q := &c.appends
	q.mu.Lock()
	q.closing = true
	if q.cond != nil {
		q.cond.Broadcast()
	}
	stopped := q.stopped
	q.mu.Unlock()
	if stopped != nil {
		<-stopped
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.err
}

// runAppends appends and answers the queued produce requests, all that are queued at a time, until the
// connection closes (stopAppends) or a response cannot be written (the connection is then closed).
func (c *conn) runAppends(ctx context.Context, stopped chan struct{}) {
	defer close(stopped)
	q := &c.appends
	for {
		q.mu.Lock()
		for len(q.jobs) == 0 && !q.closing && q.err == nil {
			q.cond.Wait()
		}
		jobs := q.jobs
		q.jobs = nil
		if len(jobs) == 0 || q.err != nil {
			q.held, q.bytes = 0, 0
			q.cond.Broadcast()
			q.mu.Unlock()
			for _, p := range jobs {
				p.release()
			}
			return
		}
		q.mu.Unlock()
		err := c.appendQueued(ctx, jobs)
		if err != nil {
			c.nc.Close() // ends the read loop's wait for the next request
		}
		q.mu.Lock()
		if err != nil {
			q.err = err
		}
		for _, p := range jobs {
			q.held--
			q.bytes -= p.size
		}
		q.cond.Broadcast()
		q.mu.Unlock()
	}
}

// appendQueued appends the batches of jobs in one store call and answers each job in order.
func (c *conn) appendQueued(ctx context.Context, jobs []*queuedProduce) (err error) {
	defer c.recovered(&err)
	defer func() {
		// After a panic, too: registrations left would have fetches at the end of these partitions
		// wait for appends that never finish.
		for _, p := range jobs {
			p.job.finish()
		}
	}()
	var batches []*redisstore.Batch
	for _, p := range jobs {
		p.job.begin()
		batches = append(batches, p.job.batches...)
	}
	var results []redisstore.AppendResult
	if len(batches) > 0 {
		results = c.g.store.Append(ctx, batches)
	}
	var closing error
	for i, p := range jobs {
		n := len(p.job.batches)
		resp, err := p.job.complete(results[:n])
		redisstore.RecycleRecords(p.job.batches)
		results = results[n:]
		err = c.answer(p.hdr, p.start, resp, err, 0)
		p.release()
		if errors.Is(err, errAcksZeroFailed) {
			// The connection closes, as the failure cannot be answered otherwise, but the requests
			// appended with it in this round are answered first: unanswered, the producer would send
			// their records again.
			if closing == nil {
				closing = err
			}
			continue
		}
		if err != nil {
			for _, rest := range jobs[i+1:] {
				rest.job.complete(results[:len(rest.job.batches)]) // releases their tail cache registrations
				redisstore.RecycleRecords(rest.job.batches)
				results = results[len(rest.job.batches):]
				rest.release()
			}
			return err
		}
	}
	return closing
}

// errAnswerUnsupported marks an ApiVersions request of a version kgate does not speak, which is
// answered (with the versions it does) rather than refused.
var errAnswerUnsupported = errors.New("gateway: unsupported ApiVersions version")

// decode parses a frame's header and request.
func (c *conn) decode(frame []byte) (protocol.RequestHeader, api, kmsg.Request, error) {
	hdr, body, err := protocol.ParseRequestHeader(frame)
	c.reqClientID = hdr.ClientID
	if hdr.ClientID != "" && hdr.ClientID != c.clientID {
		c.clientID = hdr.ClientID
	}
	if err != nil {
		if errors.Is(err, protocol.ErrUnsupportedVersion) && hdr.APIKey == apiVersionsKey {
			return hdr, api{}, nil, errAnswerUnsupported
		}
		c.log.Warn().Int16("api_key", hdr.APIKey).Int16("api_version", hdr.APIVersion).Err(err).Msg("bad request header")
		return hdr, api{}, nil, err
	}
	a, ok := lookupAPI(hdr.APIKey)
	if !ok || hdr.APIVersion < a.min || hdr.APIVersion > a.max {
		if hdr.APIKey == apiVersionsKey {
			return hdr, a, nil, errAnswerUnsupported
		}
		c.log.Warn().Int16("api_key", hdr.APIKey).Int16("api_version", hdr.APIVersion).Msg("unsupported api or version")
		return hdr, a, nil, protocol.ErrUnsupportedVersion
	}
	req, err := protocol.DecodeRequest(hdr, body)
	if err != nil {
		c.log.Warn().Int16("api_key", hdr.APIKey).Int16("api_version", hdr.APIVersion).Err(err).Msg("malformed request")
		return hdr, a, nil, err
	}
	return hdr, a, req, nil
}

// answer records a handled request and writes its response; a request is logged as slow when it took
// Config.SlowRequest longer than it may wait by design (waitsByDesign).
func (c *conn) answer(hdr protocol.RequestHeader, start time.Time, resp kmsg.Response, err error, mayWait time.Duration) error {
	elapsed := time.Since(start)
	observeRequest(hdr.APIKey, hdr.APIVersion, elapsed, resp)
	if c.log.GetLevel() <= zerolog.DebugLevel {
		c.log.Debug().Str("api", kmsg.NameForKey(hdr.APIKey)).Int16("version", hdr.APIVersion).
			Int32("correlation_id", hdr.CorrelationID).Dur("took", elapsed).Msg("request")
	}
	if slow := c.g.cfg.SlowRequest; slow > 0 && elapsed > slow && elapsed-slow > mayWait {
		c.log.Warn().Str("api", kmsg.NameForKey(hdr.APIKey)).Int16("version", hdr.APIVersion).
			Dur("took", elapsed).Msg("slow request")
	}
	if err != nil {
		return err
	}
	if resp == nil { // acks=0 produce: no response at all
		return nil
	}
	resp.SetVersion(hdr.APIVersion)
	return c.write(hdr, resp)
}

// write encodes into a pooled buffer, so an idle connection holds no output buffer. A fetch response's
// large record sets are written from the buffers encodeFetch put them in, not copied into the frame
// (protocol.AppendFetchParts).
func (c *conn) write(hdr protocol.RequestHeader, resp kmsg.Response) error {
	if fr, ok := resp.(*kmsg.FetchResponse); ok {
		return c.writeFetch(hdr, fr)
	}
	bufp := getBuf(0)
	out := protocol.AppendResponse((*bufp)[:0], hdr.CorrelationID, resp)
	bytesOut(len(out))
	err := c.writeParts([][]byte{out})
	putBuf(bufp, out)
	c.releaseOutBufs()
	return err
}

// writeFetch writes a fetch response as protocol.AppendFetchParts lays it out, then hands back the
// buffers its record sets were in.
func (c *conn) writeFetch(hdr protocol.RequestHeader, resp *kmsg.FetchResponse) error {
	defer c.releaseOutBufs()
	bufp := getBuf(fetchHeadSizeHint(resp))
	out, parts := protocol.AppendFetchParts((*bufp)[:0], c.parts[:0], hdr.CorrelationID, resp)
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	bytesOut(n)
	err := c.writeParts(parts)
	clear(parts)
	c.parts = parts[:0]
	if cap(parts) > 64 { // a fetch of many large partitions: not kept by a connection that may idle
		c.parts = nil
	}
	putBuf(bufp, out)
	return err
}

// writeChunk is how much of an answer is written under one write deadline.
const writeChunk = 256 << 10

// writeParts writes the pieces of a frame in order (one writev a chunk), pushing back the idle deadline
// (Config.IdleTimeout) for each chunk of at most writeChunk bytes: a client that stops reading is idle
// too, and its answers must not pin the connection for good, but one reading a large answer slowly and
// steadily is not, as on Apache, where any byte either way counts as activity.
func (c *conn) writeParts(parts [][]byte) error {
	d := c.g.cfg.IdleTimeout
	if d <= 0 {
		bufs := net.Buffers(parts)
		_, err := bufs.WriteTo(c.nc)
		return err
	}
	for len(parts) > 0 {
		// Take whole pieces up to writeChunk bytes, or the first writeChunk bytes of a larger one.
		var chunk net.Buffers
		n := 0
		for len(parts) > 0 && n < writeChunk {
			p := parts[0]
			if take := writeChunk - n; len(p) > take {
				chunk = append(chunk, p[:take])
				parts[0] = p[take:]
				n += take
				break
			}
			chunk = append(chunk, p)
			parts = parts[1:]
			n += len(p)
		}
		_ = c.nc.SetWriteDeadline(time.Now().Add(d))
		if _, err := chunk.WriteTo(c.nc); err != nil {
			return err
		}
	}
	return nil
}

// fetchHeadSizeHint is about the encoded size of what a fetch response's frame holds beside its large
// record sets, so its buffer comes from a class large enough not to be grown (and copied) while
// encoding.
func fetchHeadSizeHint(fr *kmsg.FetchResponse) int {
	n := 64
	for i := range fr.Topics {
		t := &fr.Topics[i]
		n += 32 + len(t.Topic)
		for j := range t.Partitions {
			n += 64 + markerOr(len(t.Partitions[j].RecordBatches))
		}
	}
	return n
}

// markerOr is what a record set of n bytes adds to the frame's own buffer (protocol.AppendFetchParts).
func markerOr(n int) int {
	if n >= protocol.MinFetchPart {
		return 32 // its marker, then its real length
	}
	return n
}

func (c *conn) releaseOutBufs() {
	for i, bp := range c.outBufs {
		putBuf(bp, *bp)
		c.outBufs[i] = nil
	}
	c.outBufs = c.outBufs[:0]
}
