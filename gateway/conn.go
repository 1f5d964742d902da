package gateway

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"time"

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
}

// framePool recycles request buffers between requests of all connections.
var framePool = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

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
		bufp := framePool.Get().(*[]byte)
		buf := *bufp
		if cap(buf) < int(n) {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(c.nc, buf); err != nil {
			putFrame(bufp, buf)
			return err
		}
		bytesIn(int(n) + 4)
		err := c.handleFrame(ctx, buf)
		putFrame(bufp, buf)
		if err != nil {
			return err
		}
	}
}

func putFrame(bufp *[]byte, buf []byte) {
	if cap(buf) > 1<<20 {
		return // let an unusually large frame go rather than pin it in the pool
	}
	*bufp = buf[:0]
	framePool.Put(bufp)
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
	bufp := framePool.Get().(*[]byte)
	out := protocol.AppendResponse((*bufp)[:0], hdr.CorrelationID, resp)
	bytesOut(len(out))
	_, err := c.nc.Write(out)
	putFrame(bufp, out)
	return err
}
