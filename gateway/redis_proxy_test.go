package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/rs/zerolog"

	"github.com/kgate/kgate/redisstore"
)

// startMiniredis starts a miniredis on 127.0.0.1, closed at cleanup.
func startMiniredis(t *testing.T) *miniredis.Miniredis {
	t.Helper()
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// openStoreAt opens a store on the Redis at addr, closed at cleanup.
func openStoreAt(t *testing.T, addr string, o redisstore.Options) *redisstore.Store {
	t.Helper()
	o.Addrs = []string{addr}
	s, err := redisstore.Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// serveOn runs a gateway with cfg on store until the test ends and returns it once it serves.
func serveOn(t *testing.T, store *redisstore.Store, cfg Config) *Gateway {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	g := New(cfg, store, zerolog.Nop())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case <-g.Ready():
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	return g
}

// redisProxy stands between a store and a Redis. Frozen, it forwards nothing more, either way, on any
// connection, and leaves new ones unanswered (a network partition). With a stall key, a connection
// that sends a command naming that key forwards nothing more (a Redis Cluster master that holds the
// key and stopped answering). It answers CLUSTER SLOTS itself, naming itself as the master of every
// slot, so that a cluster client keeps going through it, and counts those answers.
type redisProxy struct {
	ln       net.Listener
	target   string
	frozen   atomic.Bool
	stallKey atomic.Value  // string
	slots    atomic.Int64  // CLUSTER SLOTS answered
	stalled  chan struct{} // closed at the first command held back for the stall key
	stallOne sync.Once
}

func startRedisProxy(t *testing.T, target string) *redisProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &redisProxy{ln: ln, target: target, stalled: make(chan struct{})}
	p.stallKey.Store("")
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			track(c)
			if p.frozen.Load() {
				go io.Copy(io.Discard, c)
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			track(up)
			go p.serve(c, up)
		}
	}()
	return p
}

// addr is the address to open a store at.
func (p *redisProxy) addr() string { return p.ln.Addr().String() }

// stall holds back, from now on, every connection that sends a command naming key.
func (p *redisProxy) stall(key string) { p.stallKey.Store(key) }

func (p *redisProxy) serve(c, up net.Conn) {
	defer c.Close()
	defer up.Close()
	var (
		wmu  sync.Mutex // the upstream's replies and the proxy's own answers
		dead atomic.Bool
	)
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := up.Read(buf)
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
	}()
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
func (p *redisProxy) slotsReply() string {
	host, port, _ := net.SplitHostPort(p.addr())
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

// waitUntil polls cond until it holds, failing the test after d.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
	}
}
