package redisstore

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// replyDropper is a TCP proxy in front of Redis that, once armed, closes the first connection whose
// reply comes back instead of forwarding it: Redis has run the commands, the client never hears so.
type replyDropper struct {
	ln    net.Listener
	armed atomic.Bool
	wg    sync.WaitGroup
}

func startReplyDropper(t *testing.T, redisAddr string) *replyDropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &replyDropper{ln: ln}
	d.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r, err := net.Dial("tcp", redisAddr)
			if err != nil {
				c.Close()
				continue
			}
			d.wg.Go(func() { _, _ = io.Copy(r, c); r.Close() })
			d.wg.Go(func() {
				defer c.Close()
				defer r.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := r.Read(buf)
					if n > 0 && d.armed.CompareAndSwap(true, false) {
						return // the reply is lost with the connection
					}
					if n > 0 {
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		d.wg.Wait()
	})
	return d
}

// TestAppendReplyLostIsNotResent: when the connection fails after Redis ran an append but before its
// reply arrived, the store reports a failure and does not send the append again by itself: a batch
// without idempotence would be stored twice while its producer was told it was stored once (Kafka
// leaves such a retry to the client, whose duplicate is then its own choice).
func TestAppendReplyLostIsNotResent(t *testing.T) {
	if standalone == nil {
		t.Skip("KGATE_SKIP_REDIS=1")
	}
	d := startReplyDropper(t, standalone.Addr)
	s := openStore(t, Options{Addrs: []string{d.ln.Addr().String()}})
	mustCreateTopic(t, s, "lost", 1)
	// A pipeline first, so the append finds a pipeline connection open (a new one's handshake reply
	// would be the one dropped).
	if _, err := s.Client().Pipelined(t.Context(), func(p redis.Pipeliner) error { p.Ping(t.Context()); return nil }); err != nil {
		t.Fatal(err)
	}
	d.armed.Store(true)
	res := s.Append(t.Context(), []*Batch{{Topic: "lost", Partition: 0, Records: plain("x", 3), ProducerID: -1}})
	if res[0].Err == nil {
		n, _ := s.Client().XLen(t.Context(), s.keys.stream("lost", 0)).Result()
		t.Fatalf("append whose reply was lost reported success at offset %d (stream length %d)", res[0].BaseOffset, n)
	}
	if !IsUnavailable(res[0].Err) {
		t.Fatalf("append whose reply was lost: %v, want an error the gateway answers as retriable", res[0].Err)
	}
	n, err := s.Client().XLen(t.Context(), s.keys.stream("lost", 0)).Result()
	if err != nil {
		t.Fatal(err)
	}
	offs, err := s.PartitionOffsets(t.Context(), "lost", []int32{0})
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 || offs[0].End != 3 {
		t.Fatalf("stream holds %d entries, high watermark %d: want the batch once (3, 3)", n, offs[0].End)
	}
}

// TestCreateTopicReplyLost: a topic whose registration went through but whose answer was lost is left
// as earlier versions made it (meta from the first append), never registered and unable to take
// appends.
func TestCreateTopicReplyLost(t *testing.T) {
	if standalone == nil {
		t.Skip("KGATE_SKIP_REDIS=1")
	}
	d := startReplyDropper(t, standalone.Addr)
	s := openStore(t, Options{Addrs: []string{d.ln.Addr().String()}})
	if err := s.Client().Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	d.armed.Store(true)
	if err := s.CreateTopic(t.Context(), Topic{Name: "half", Partitions: 1}); err == nil {
		t.Fatal("CreateTopic whose reply was lost reported success")
	}
	if err := s.CreateTopic(t.Context(), Topic{Name: "half", Partitions: 1}); !errors.Is(err, ErrTopicExists) {
		t.Fatalf("CreateTopic again: %v, want ErrTopicExists", err)
	}
	tp, err := s.Topic(t.Context(), "half")
	if err != nil || tp.PartitionMeta != 0 {
		t.Fatalf("topic: %+v, %v; want registered without partition meta", tp, err)
	}
	b := &Batch{Topic: "half", Partition: 0, Records: plain("h", 1), ProducerID: -1, KnownPartition: 0 < tp.PartitionMeta}
	if res := s.Append(t.Context(), []*Batch{b}); res[0].Err != nil {
		t.Fatalf("append: %v", res[0].Err)
	}
}
