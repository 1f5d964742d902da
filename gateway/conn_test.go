package gateway

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"regexp"
	"runtime"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/protocol"
	"github.com/kgate/kgate/redisstore"
)

// appenderIDs are the goroutine ids of the gateway's connection appenders (runAppends).
func appenderIDs() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var ids []string
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("gateway.(*conn).runAppends")) {
			ids = append(ids, regexp.MustCompile(`^goroutine (\d+) `).FindStringSubmatch(string(g))[1])
		}
	}
	return ids
}

// TestConnectionAppenderLivesWithTheConnection: a connection's produce requests, one at a time, are all
// appended by the one goroutine its first produce started, and that goroutine returns when the
// connection closes.
func TestConnectionAppenderLivesWithTheConnection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	store, err := redisstore.Open(ctx, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if err := store.CreateTopic(ctx, redisstore.Topic{Name: "appender", Partitions: 1, Created: time.Now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	g := New(Config{}, store, zerolog.Nop())
	client, server := net.Pipe()
	if !g.track(server) {
		t.Fatal("track refused")
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		g.serveConn(server)
	}()
	defer func() {
		client.Close()
		<-served
	}()
	if ids := appenderIDs(); len(ids) != 0 {
		t.Fatalf("appenders before any produce: %v", ids)
	}

	var first string
	for i := range 5 {
		produce(t, client, int32(i+1), int64(i))
		ids := appenderIDs()
		if len(ids) != 1 {
			t.Fatalf("after produce %d: appenders %v, want one", i, ids)
		}
		if i == 0 {
			first = ids[0]
		} else if ids[0] != first {
			t.Fatalf("produce %d appended by goroutine %s, the first by %s: want the same", i, ids[0], first)
		}
	}
	client.Close()
	select {
	case <-served:
	case <-ctx.Done():
		t.Fatal("connection not closed")
	}
	if ids := appenderIDs(); len(ids) != 0 {
		t.Fatalf("appenders after the connection closed: %v", ids)
	}
}

// produce sends one acks=-1 Produce of one record to partition 0 of "appender" and checks its answer.
func produce(t *testing.T, nc net.Conn, corr int32, wantOffset int64) {
	t.Helper()
	batch, err := protocol.AppendCompressedBatch(nil, protocol.Batch{
		PartitionLeaderEpoch: -1, FirstTimestamp: time.Now().UnixMilli(), MaxTimestamp: time.Now().UnixMilli(),
		ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, NumRecords: 1,
		Records: []protocol.Record{{Value: []byte("v")}},
	}, protocol.CodecNone)
	if err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 9, -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "appender"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)

	frame := make([]byte, 4, 64+len(batch))
	frame = binary.BigEndian.AppendUint16(frame, uint16(req.Key()))
	frame = binary.BigEndian.AppendUint16(frame, uint16(req.Version))
	frame = binary.BigEndian.AppendUint32(frame, uint32(corr))
	frame = binary.BigEndian.AppendUint16(frame, 1) // client id "t"
	frame = append(frame, 't')
	frame = append(frame, 0) // tagged fields (flexible header)
	frame = req.AppendTo(frame)
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Write(frame); err != nil {
		t.Fatalf("write produce: %v", err)
	}
	var size [4]byte
	if _, err := io.ReadFull(nc, size[:]); err != nil {
		t.Fatalf("read response: %v", err)
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(nc, body); err != nil {
		t.Fatalf("read response: %v", err)
	}
	if got := int32(binary.BigEndian.Uint32(body)); got != corr {
		t.Fatalf("correlation id %d, want %d", got, corr)
	}
	resp := kmsg.NewPtrProduceResponse()
	resp.Version = req.Version
	if err := resp.ReadFrom(body[5:]); err != nil { // correlation id, then the flexible header's tags
		t.Fatalf("decode produce response: %v", err)
	}
	sp := resp.Topics[0].Partitions[0]
	if sp.ErrorCode != 0 || sp.BaseOffset != wantOffset {
		t.Fatalf("produce: error %d base offset %d, want 0 and %d", sp.ErrorCode, sp.BaseOffset, wantOffset)
	}
}
