package gateway

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	pool "github.com/libp2p/go-buffer-pool"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/protocol"
)

// conn is one client connection. Its read loop handles one request at a time, in order, as Apache
// Kafka does; the only per-connection memory while idle is the goroutine and this struct.
type conn struct {
	g        *Gateway
	nc       net.Conn
	remote   string
	clientID string
	log      zerolog.Logger
	// outBufs are pooled buffers the response being answered points into (a fetch's record
	// batches), handed back once the response is written.
	outBufs []*[]byte
	// ahead is the read-ahead for the next fetch (read_ahead.go); aheadWG tracks its reads.
	ahead   *readAhead
	aheadWG sync.WaitGroup
	// aheadMisses counts read-aheads in a row the next fetch did not use; aheadSkipped the chances
	// to read ahead passed up since (wantReadAhead).
	aheadMisses, aheadSkipped int
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
	c.closeReadAhead()
	connectionsClosed()
	ev := c.log.Info().Str("client_id", c.clientID)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		ev = ev.Err(err)
	}
	ev.Msg("connection closed")
}

func (c *conn) readLoop(ctx context.Context) error {
	var size [4]byte
	for {
		if _, err := io.ReadFull(c.nc, size[:]); err != nil {
			return err
		}
		n := int32(binary.BigEndian.Uint32(size[:]))
		switch {
		case n < 8:
			return protocol.ErrFrameTooSmall
		case n > c.g.cfg.MaxFrameBytes:
			return protocol.ErrFrameTooLarge
		}
		bufp := getBuf(int(n))
		buf := (*bufp)[:n]
		if _, err := io.ReadFull(c.nc, buf); err != nil {
			putBuf(bufp, buf)
			return err
		}
		bytesIn(int(n) + 4)
		err := c.handleFrame(ctx, buf)
		putBuf(bufp, buf)
		if err != nil {
			return err
		}
	}
}

// handleFrame decodes and answers one request. A returned error closes the connection.
func (c *conn) handleFrame(ctx context.Context, frame []byte) error {
	start := time.Now()
	hdr, body, err := protocol.ParseRequestHeader(frame)
	if hdr.ClientID != "" && hdr.ClientID != c.clientID {
		c.clientID = hdr.ClientID
	}
	if err != nil {
		if errors.Is(err, protocol.ErrUnsupportedVersion) && hdr.APIKey == apiVersionsKey {
			return c.write(hdr, unsupportedAPIVersions(hdr.APIVersion))
		}
		c.log.Warn().Int16("api_key", hdr.APIKey).Int16("api_version", hdr.APIVersion).Err(err).Msg("bad request header")
		return err
	}
	a, ok := lookupAPI(hdr.APIKey)
	if !ok || hdr.APIVersion < a.min || hdr.APIVersion > a.max {
		if hdr.APIKey == apiVersionsKey {
			return c.write(hdr, unsupportedAPIVersions(hdr.APIVersion))
		}
		c.log.Warn().Int16("api_key", hdr.APIKey).Int16("api_version", hdr.APIVersion).Msg("unsupported api or version")
		return protocol.ErrUnsupportedVersion
	}
	req, err := protocol.DecodeRequest(hdr, body)
	if err != nil {
		c.log.Warn().Int16("api_key", hdr.APIKey).Int16("api_version", hdr.APIVersion).Err(err).Msg("malformed request")
		return err
	}
	resp, err := a.handle(ctx, c, req)
	elapsed := time.Since(start)
	observeRequest(hdr.APIKey, hdr.APIVersion, elapsed, resp)
	if c.log.GetLevel() <= zerolog.DebugLevel {
		c.log.Debug().Str("api", kmsg.NameForKey(hdr.APIKey)).Int16("version", hdr.APIVersion).
			Int32("correlation_id", hdr.CorrelationID).Dur("took", elapsed).Msg("request")
	}
	if elapsed > c.g.cfg.SlowRequest {
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

// write encodes into a pooled buffer, so an idle connection holds no output buffer.
func (c *conn) write(hdr protocol.RequestHeader, resp kmsg.Response) error {
	bufp := getBuf(responseSizeHint(resp))
	out := protocol.AppendResponse((*bufp)[:0], hdr.CorrelationID, resp)
	bytesOut(len(out))
	_, err := c.nc.Write(out)
	putBuf(bufp, out)
	c.releaseOutBufs()
	return err
}

// responseSizeHint is about the encoded size of a fetch response (0 for other responses), so its
// buffer comes from a class large enough not to be grown (and copied) while encoding.
func responseSizeHint(resp kmsg.Response) int {
	fr, ok := resp.(*kmsg.FetchResponse)
	if !ok {
		return 0
	}
	n := 64
	for i := range fr.Topics {
		t := &fr.Topics[i]
		n += 32 + len(t.Topic)
		for j := range t.Partitions {
			n += 64 + len(t.Partitions[j].RecordBatches)
		}
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
