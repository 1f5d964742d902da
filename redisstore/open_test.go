package redisstore

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"
)

// TestOpenEndsWithItsContext: Open gives up when its context ends, even while the server holds its
// reply back (the client library reads until its own deadline, here a minute past the dial's).
func TestOpenEndsWithItsContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c // never answered
		}
	}()
	defer func() {
		for len(accepted) > 0 {
			(<-accepted).Close()
		}
	}()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		s, err := Open(ctx, Options{Addrs: []string{ln.Addr().String()}, DialTimeout: time.Minute, CommandTimeout: time.Minute})
		if err == nil {
			s.Close()
		}
		done <- err
	}()
	select {
	case c := <-accepted:
		accepted <- c
	case err := <-done:
		t.Fatalf("Open returned before connecting: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Open: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Open still running 10 s after its context ended")
	}
}
