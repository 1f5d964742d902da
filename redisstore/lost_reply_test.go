package redisstore

import (
	"errors"
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

// TestCreateTopicReplyLost: a topic whose registration went through but whose answer was lost is left
// as earlier versions made it (meta from the first append), never registered and unable to take
// appends.
func TestCreateTopicReplyLost(t *testing.T) {
	if standalone == nil {
		t.Skip("KGATE_SKIP_REDIS=1")
	}
	d := redistest.StartProxy(t, standalone.Addr)
	s := openStore(t, Options{Addrs: []string{d.Addr()}})
	if err := s.Client().Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	// The registration script loaded, so the reply dropped is the registration's, not a NOSCRIPT.
	if err := createTopicScript.Load(t.Context(), s.rdb).Err(); err != nil {
		t.Fatal(err)
	}
	d.DropNextReply()
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
