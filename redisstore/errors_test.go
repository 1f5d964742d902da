package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

func TestIsUnavailableSentinels(t *testing.T) {
	if IsUnavailable(nil) {
		t.Error("IsUnavailable(nil)")
	}
	for _, err := range []error{ErrUnknownTopic, ErrTopicExists, ErrUnknownPartition, ErrInvalidPartitions,
		ErrOffsetOutOfRange, ErrOutOfOrderSequence, ErrInvalidEpoch, ErrUnknownProducer, ErrNodeIDInUse,
		ErrNotDurable, ErrStreamConflict, ErrTooManyHeaders} {
		if IsUnavailable(err) || IsUnavailable(fmt.Errorf("ctx: %w", err)) {
			t.Errorf("IsUnavailable(%v) = true", err)
		}
	}
	for _, err := range []error{context.DeadlineExceeded, context.Canceled, errors.New("LOADING Redis is loading"), errEarlierBatchFailed, ErrStrayEntries,
		fmt.Errorf("x: %w", &net.OpError{Op: "dial", Err: errors.New("refused")})} {
		if !IsUnavailable(err) {
			t.Errorf("IsUnavailable(%v) = false", err)
		}
	}
}

// A Store that cannot reach Redis reports the failure as unavailable.
func TestIsUnavailableDialError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there any more
	for _, cl := range []bool{false, true} {
		start := time.Now()
		s, err := Open(t.Context(), Options{Addrs: []string{addr}, Cluster: cl, DialTimeout: 200 * time.Millisecond,
			CommandTimeout: 500 * time.Millisecond})
		if err == nil {
			s.Close()
			t.Fatalf("Open(%s, cluster %v) succeeded", addr, cl)
		}
		if !IsUnavailable(err) {
			t.Errorf("Open(cluster %v): IsUnavailable(%v) = false", cl, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Open(cluster %v) took %v", cl, d)
		}
	}
}

func TestIsUnavailableClosedClient(t *testing.T) {
	s := openEmbedded(t)
	if err := s.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
	s.Close()
	err := s.Ping(t.Context())
	if err == nil || !IsUnavailable(err) {
		t.Fatalf("Ping on a closed store: %v (unavailable %v)", err, IsUnavailable(err))
	}
	if res := s.Append(t.Context(), []*Batch{{Topic: "x", Records: plain("v", 1), ProducerID: -1}})[0]; !IsUnavailable(res.Err) {
		t.Fatalf("Append on a closed store: %v", res.Err)
	}
}

func TestInfo(t *testing.T) {
	for _, backend := range []string{"standalone", "cluster"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			s := openStore(t, backendOptions(t, backend))
			info, err := s.Info(t.Context())
			if err != nil || info.Mode != backend || info.Version == "" {
				t.Fatalf("Info = %+v, %v", info, err)
			}
			if s.Embedded() || !strings.HasPrefix(s.Namespace(), "t-"+t.Name()+"-") {
				t.Fatalf("Embedded %v Namespace %q", s.Embedded(), s.Namespace())
			}
		})
	}
	s := openEmbedded(t)
	if info, err := s.Info(t.Context()); err != nil || info.Mode != "embedded" {
		t.Fatalf("embedded Info = %+v, %v", info, err)
	}
	d, err := Open(t.Context(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Namespace() != "kgate" {
		t.Fatalf("default namespace %q", d.Namespace())
	}
}
