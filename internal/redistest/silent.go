package redistest

import (
	"net"
	"sync"
	"testing"
)

// Silent is a server on 127.0.0.1 that accepts connections and never answers (a Redis that hangs), for
// tests of what gives up waiting on one. Accepted receives each connection as it is accepted; all are
// closed at cleanup.
type Silent struct {
	Addr     string
	Accepted chan struct{}
}

func StartSilent(t testing.TB) *Silent {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Silent{Addr: ln.Addr().String(), Accepted: make(chan struct{}, 1)}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			mu.Unlock()
			select {
			case s.Accepted <- struct{}{}:
			default:
			}
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return s
}
