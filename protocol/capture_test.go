//go:build capture

package protocol

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestCaptureGolden runs the kgo producer against a minimal broker built on
// this package and writes each Produce request it sends to testdata. Run it
// by hand when the golden files need remaking:
//
//	go test -tags capture -run TestCaptureGolden ./protocol/
func TestCaptureGolden(t *testing.T) {
	codecs := map[Codec]kgo.CompressionCodec{
		CodecNone:   kgo.NoCompression(),
		CodecGzip:   kgo.GzipCompression(),
		CodecSnappy: kgo.SnappyCompression(),
		CodecLZ4:    kgo.Lz4Compression(),
		CodecZstd:   kgo.ZstdCompression(),
	}
	for c, kc := range codecs {
		t.Run(c.String(), func(t *testing.T) {
			b := startCaptureBroker(t)
			cl, err := kgo.NewClient(
				kgo.SeedBrokers(b.addr),
				kgo.ClientID("kgate-capture"),
				kgo.DefaultProduceTopic(goldenTopic),
				kgo.ProducerBatchCompression(kc),
			)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			var recs []*kgo.Record
			for _, r := range goldenRecords() {
				kr := &kgo.Record{Key: r.Key, Value: r.Value, Timestamp: time.UnixMilli(r.Timestamp)}
				for _, h := range r.Headers {
					kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
				}
				recs = append(recs, kr)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			frames := b.produced()
			if len(frames) != 1 {
				t.Fatalf("%d produce requests, want 1", len(frames))
			}
			if err := os.WriteFile(filepath.Join("testdata", "kgo-"+c.String()+".bin"), frames[0], 0o644); err != nil {
				t.Fatal(err)
			}
		})
	}
}

type captureBroker struct {
	addr   string
	port   int32
	mu     sync.Mutex
	frames [][]byte
}

func (b *captureBroker) produced() [][]byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.frames
}

func startCaptureBroker(t *testing.T) *captureBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &captureBroker{addr: ln.Addr().String(), port: int32(ln.Addr().(*net.TCPAddr).Port)}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.Close()
				b.serve(t, conn)
			}()
		}
	}()
	return b
}

func (b *captureBroker) serve(t *testing.T, conn net.Conn) {
	var buf, out []byte
	for {
		frame, err := ReadFrame(conn, buf, 0)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				t.Logf("read: %v", err)
			}
			return
		}
		buf = frame
		h, body, err := ParseRequestHeader(frame)
		if err != nil {
			t.Errorf("header: %v", err)
			return
		}
		req, err := DecodeRequest(h, body)
		if err != nil {
			t.Errorf("request: %v", err)
			return
		}
		resp := req.ResponseKind()
		resp.SetVersion(h.APIVersion)
		switch req := req.(type) {
		case *kmsg.ApiVersionsRequest:
			r := resp.(*kmsg.ApiVersionsResponse)
			for _, k := range []kmsg.Request{kmsg.NewPtrProduceRequest(), kmsg.NewPtrMetadataRequest(), kmsg.NewPtrApiVersionsRequest(), kmsg.NewPtrInitProducerIDRequest()} {
				maxV := k.MaxVersion()
				if k.Key() == 0 {
					maxV = min(maxV, 11) // topic names, not ids
				}
				r.ApiKeys = append(r.ApiKeys, kmsg.ApiVersionsResponseApiKey{ApiKey: k.Key(), MaxVersion: maxV})
			}
		case *kmsg.MetadataRequest:
			r := resp.(*kmsg.MetadataResponse)
			r.Brokers = []kmsg.MetadataResponseBroker{{NodeID: 0, Host: "127.0.0.1", Port: b.port}}
			r.ControllerID = 0
			for _, rt := range req.Topics {
				mt := kmsg.NewMetadataResponseTopic()
				mt.Topic = rt.Topic
				mt.TopicID = [16]byte{1}
				mt.Partitions = []kmsg.MetadataResponseTopicPartition{{Partition: 0, Leader: 0, Replicas: []int32{0}, ISR: []int32{0}}}
				r.Topics = append(r.Topics, mt)
			}
		case *kmsg.InitProducerIDRequest:
			r := resp.(*kmsg.InitProducerIDResponse)
			r.ProducerID = goldenProducerID
		case *kmsg.ProduceRequest:
			b.mu.Lock()
			b.frames = append(b.frames, sizePrefixedFrame(frame))
			b.mu.Unlock()
			r := resp.(*kmsg.ProduceResponse)
			for _, rt := range req.Topics {
				pt := kmsg.NewProduceResponseTopic()
				pt.Topic = rt.Topic
				for _, rp := range rt.Partitions {
					pp := kmsg.NewProduceResponseTopicPartition()
					pp.Partition = rp.Partition
					pt.Partitions = append(pt.Partitions, pp)
				}
				r.Topics = append(r.Topics, pt)
			}
		default:
			t.Errorf("unexpected request %s", kmsg.NameForKey(h.APIKey))
			return
		}
		out = AppendResponse(out[:0], h.CorrelationID, resp)
		if _, err := conn.Write(out); err != nil {
			return
		}
	}
}

func sizePrefixedFrame(frame []byte) []byte {
	return sizePrefixed(int32(len(frame)), frame) // copies: frame's buffer is reused
}
