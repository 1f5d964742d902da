package redisstore

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/kgate/kgate/internal/redistest"
)

// TestAppendReplyLostIsNotResent: when the connection fails after Redis ran an append but before its
// reply arrived, the store reports a failure and does not send the append again by itself: a batch
// without idempotence would be stored twice while its producer was told it was stored once (Kafka
// leaves such a retry to the client, whose duplicate is then its own choice).
func TestAppendReplyLostIsNotResent(t *testing.T) {
	if standalone == nil {
		t.Skip("KGATE_SKIP_REDIS=1")
	}
	d := redistest.StartProxy(t, standalone.Addr)
	s := openStore(t, Options{Addrs: []string{d.Addr()}})
	mustCreateTopic(t, s, "lost", 1)
	// A pipeline first, so the append finds a pipeline connection open (a new one's handshake reply
	// would be the one dropped).
	if _, err := s.Client().Pipelined(t.Context(), func(p redis.Pipeliner) error { p.Ping(t.Context()); return nil }); err != nil {
		t.Fatal(err)
	}
	d.DropNextReply()
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

// TestCreateTopicReplyLost: a topic whose registration went through but whose answer was lost is
// registered whole: its partitions' meta was written before, and the entry carries the mark (pmeta),
// so appends to it are taken as to a known partition; creating it again finds it taken.
func TestCreateTopicReplyLost(t *testing.T) {
	if standalone == nil {
		t.Skip("KGATE_SKIP_REDIS=1")
	}
	d := redistest.StartProxy(t, standalone.Addr)
	s := openStore(t, Options{Addrs: []string{d.Addr()}})
	if err := s.Client().Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	var dropped atomic.Bool
	s.Client().AddHook(processHook(func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		for _, a := range cmd.Args() {
			if b, ok := a.([]byte); ok && bytes.HasPrefix(b, []byte(`{"id":`)) && dropped.CompareAndSwap(false, true) {
				d.DropNextReply() // the registration's
			}
		}
		return next(ctx, cmd)
	}))
	if err := s.CreateTopic(t.Context(), Topic{Name: "half", Partitions: 1}); err == nil {
		t.Fatal("CreateTopic whose reply was lost reported success")
	}
	if !dropped.Load() {
		t.Fatal("no registration seen")
	}
	if err := s.CreateTopic(t.Context(), Topic{Name: "half", Partitions: 1}); !errors.Is(err, ErrTopicExists) {
		t.Fatalf("CreateTopic again: %v, want ErrTopicExists", err)
	}
	tp, err := s.Topic(t.Context(), "half")
	if err != nil || tp.PartitionMeta != 1 {
		t.Fatalf("topic: %+v, %v; want registered with partition meta", tp, err)
	}
	b := &Batch{Topic: "half", Partition: 0, Records: plain("h", 1), ProducerID: -1, KnownPartition: 0 < tp.PartitionMeta}
	if res := s.Append(t.Context(), []*Batch{b}); res[0].Err != nil {
		t.Fatalf("append: %v", res[0].Err)
	}
}
