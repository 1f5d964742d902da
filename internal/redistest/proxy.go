package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy stands between a store and a Redis, for tests of Redis failures. Frozen (Freeze), it forwards
// nothing more, either way, on any connection, and leaves new ones unanswered (a network partition).
// Armed (DropNextReply), it closes the next connection a reply comes back on instead of forwarding
// the reply (commands applied, their answer lost). With a stall key, a connection
// that sends a command naming that key forwards nothing more (a Redis Cluster master that holds the
// key and stopped answering). Held (Hold), it forwards commands but keeps Redis's replies until
// Release (commands applied, their answers late). Delayed (Delay), it passes each command on that much
// later (a slow network or a busy Redis). It answers CLUSTER SLOTS itself, naming itself as
// the master of every slot, so that a cluster client keeps going through it, and counts those
// answers. Everything it started stops at cleanup.
type Proxy struct {
	ln       net.Listener
	target   string
	frozen   atomic.Bool
	stallKey atomic.Value  // string
	slots    atomic.Int64  // CLUSTER SLOTS answered
	stalled  chan struct{} // closed at the first command held back for the stall key
	stallOne sync.Once
	dropNext atomic.Bool
	delay    atomic.Int64 // ns each command waits before it is passed on

	mu     sync.Mutex
	gate   chan struct{} // nil: replies pass; otherwise closed by release
	conns  []net.Conn
	closed bool // at cleanup: connections accepted later are closed at once
	wg     sync.WaitGroup
}

func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, stalled: make(chan struct{})}
	p.stallKey.Store("")
	t.Cleanup(func() {
		p.Release()
		ln.Close()
		p.mu.Lock()
		p.closed = true
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !p.track(c) {
				return
			}
			if p.frozen.Load() {
				p.wg.Go(func() { _, _ = io.Copy(io.Discard, c) })
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			if !p.track(up) {
				return
			}
			p.wg.Go(func() { p.serve(c, up) })
		}
	})
	return p
}

// track keeps c to close at cleanup, or closes it when cleanup has begun.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns = append(p.conns, c)
	return true
}

// hold keeps Redis's replies in the proxy from now on, until release.
func (p *Proxy) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate == nil {
		p.gate = make(chan struct{})
	}
}

// release lets the replies held, and those to come, through.
func (p *Proxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate != nil {
		close(p.gate)
		p.gate = nil
	}
}

// addr is the address to open a store at.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// stall holds back, from now on, every connection that sends a command naming key.
func (p *Proxy) Stall(key string) { p.stallKey.Store(key) }

// Freeze partitions the proxy (frozen) or heals it.
func (p *Proxy) Freeze(frozen bool) { p.frozen.Store(frozen) }

// Delay makes each command wait d before it is passed on (0: none).
func (p *Proxy) Delay(d time.Duration) { p.delay.Store(int64(d)) }

// DropNextReply has the next reply from Redis, on whatever connection, lost with its connection.
func (p *Proxy) DropNextReply() { p.dropNext.Store(true) }

// Stalled is closed at the first command held back for the stall key (Stall).
func (p *Proxy) Stalled() <-chan struct{} { return p.stalled }

// SlotsAnswered counts the CLUSTER SLOTS commands the proxy answered itself.
func (p *Proxy) SlotsAnswered() int64 { return p.slots.Load() }

func (p *Proxy) serve(c, up net.Conn) {
	defer c.Close()
	defer up.Close()
	var (
		wmu  sync.Mutex // the upstream's replies and the proxy's own answers
		dead atomic.Bool
	)
	p.wg.Go(func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := up.Read(buf)
			if n > 0 && p.dropNext.CompareAndSwap(true, false) {
				// The reply is lost with the connection, once the commands the client sent before it
				// (a pipeline's rest, still being passed on) reached Redis: closing at once could
				// keep a transaction's EXEC from it, and then nothing ran.
				dead.Store(true)
				time.Sleep(100 * time.Millisecond)
				c.Close()
				return
			}
			if n > 0 {
				p.mu.Lock()
				gate := p.gate
				p.mu.Unlock()
				if gate != nil {
					<-gate
				}
			}
			if n > 0 && !dead.Load() && !p.frozen.Load() {
				wmu.Lock()
				_, werr := c.Write(buf[:n])
				wmu.Unlock()
				if werr != nil {
					return
				}
			}
			if err != nil {
				c.Close()
				return
			}
		}
	})
	r := bufio.NewReader(c)
	for {
		raw, args, err := readRESPCommand(r)
		if err != nil {
			return
		}
		key, _ := p.stallKey.Load().(string)
		switch {
		case p.frozen.Load():
		case len(args) == 2 && strings.EqualFold(args[0], "cluster") && strings.EqualFold(args[1], "slots"):
			p.slots.Add(1)
			wmu.Lock()
			_, err = c.Write([]byte(p.slotsReply()))
			wmu.Unlock()
			if err != nil {
				return
			}
			continue
		case key != "" && contains(args, key):
			p.stallOne.Do(func() { close(p.stalled) })
		default:
			if d := p.delay.Load(); d > 0 {
				time.Sleep(time.Duration(d))
			}
			if _, err := up.Write(raw); err != nil {
				return
			}
			continue
		}
		// Held back: nothing more goes through this connection, until the client closes it.
		dead.Store(true)
		_, _ = io.Copy(io.Discard, r)
		return
	}
}

// slotsReply names the proxy the master of all 16384 slots.
func (p *Proxy) slotsReply() string {
	host, port, _ := net.SplitHostPort(p.Addr())
	return fmt.Sprintf("*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$%d\r\n%s\r\n:%s\r\n$40\r\n%s\r\n",
		len(host), host, port, strings.Repeat("a", 40))
}

func contains(args []string, s string) bool {
	for _, a := range args {
		if a == s {
			return true
		}
	}
	return false
}

// readRESPCommand reads one command (an array of bulk strings, as clients send) and returns its
// bytes as read and its arguments.
func readRESPCommand(r *bufio.Reader) ([]byte, []string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return nil, nil, fmt.Errorf("redis proxy: not an array: %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil {
		return nil, nil, err
	}
	raw := []byte(line)
	args := make([]string, 0, n)
	for range n {
		hdr, err := r.ReadString('\n')
		if err != nil {
			return nil, nil, err
		}
		if !strings.HasPrefix(hdr, "$") {
			return nil, nil, fmt.Errorf("redis proxy: not a bulk string: %q", hdr)
		}
		size, err := strconv.Atoi(strings.TrimSpace(hdr[1:]))
		if err != nil {
			return nil, nil, err
		}
		body := make([]byte, size+2)
		if _, err := io.ReadFull(r, body); err != nil {
			return nil, nil, err
		}
		raw = append(append(raw, hdr...), body...)
		args = append(args, string(body[:size]))
	}
	return raw, args, nil
}
