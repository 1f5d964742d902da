package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/protocol"
)

// The replay phase produces with a fixed request shape and next to no client: a raw connection sends
// Produce requests built once (--replay-batch records per partition, every partition in each request,
// up to --replay-inflight requests in flight), patching only each batch's base sequence and timestamps.
// A Kafka client library picks its batches by how fast the broker answers, and on a machine it shares
// with the gateway and Redis its own CPU counts against the gateway; here neither happens, so the ratio
// shows kgate's own cost per record at a given batch shape. The baseline is the produce phase's, with
// the same shape.

// Offsets in a magic 2 record batch (after the 12-byte base offset and length): what the replay
// patches, and where the CRC-32C's coverage starts.
const (
	batchCRCAt      = 17
	batchCRCFrom    = 21
	batchFirstTSAt  = 27
	batchMaxTSAt    = 35
	batchBaseSeqAt  = 53
	replayMaxWindow = 5
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func (b *bench) replayPhase(ctx context.Context) error {
	per := b.o.replayBatch
	b.rep.meta("replay", fmt.Sprintf("raw Produce v9 requests of %d records per partition, every partition in each request, idempotent, acks=-1, up to %d in flight on one connection; baseline: the produce phase's pipelined XADD, the same shape, 1 pipeline in flight",
		per, b.o.replayInflight))
	for _, size := range b.o.sizes {
		for _, parts := range b.o.partitions {
			topic := fmt.Sprintf("replay-%d-%dp", size, parts)
			if err := b.createTopic(ctx, topic, parts); err != nil {
				return err
			}
			measure := b.o.duration / time.Duration(b.o.rounds)
			ks, bs, err := kgateThenBaseline(topic, b.o.rounds, func(int) (produceRun, error) {
				return b.replayKgate(ctx, topic, size, parts, per, measure)
			}, func(int) (produceRun, error) {
				return b.produceBaseline(ctx, topic, parts, size, per, parts, measure)
			})
			if err != nil {
				return err
			}
			k, base := total(ks), total(bs)
			ratios := roundRatios(ks, bs, func(r produceRun) float64 { return r.rate })
			cs := fmt.Sprintf("%s x %dp, %d/batch", sizeName(size), parts, per)
			notes := roundSpread(ratios)
			b.rep.add(withBaseline(result{Phase: "replay", Case: cs, Metric: "throughput", Unit: "rec/s",
				Kgate: k.rate, KgateCPU: &k.cpu, BaselineCPU: &base.cpu, Notes: notes, RoundRatios: ratios}, base.rate))
			b.rep.addCPUPerRecord("replay", cs, k.cpu, k.rate*k.cpu.WallSec, base.cpu, base.rate*base.cpu.WallSec)
		}
	}
	return nil
}

// replayKgate sends fixed-shape Produce requests to the gateway for warm-up + measure and counts the
// records acknowledged in the measured window.
func (b *bench) replayKgate(ctx context.Context, topic string, size, parts, per int, measure time.Duration) (produceRun, error) {
	nc, err := net.DialTimeout("tcp", b.addr, 5*time.Second)
	if err != nil {
		return produceRun{}, err
	}
	defer nc.Close()
	rc := &rawClient{nc: nc}
	init := kmsg.NewPtrInitProducerIDRequest()
	init.TransactionTimeoutMillis = 60_000
	init.SetVersion(4)
	ir := kmsg.NewPtrInitProducerIDResponse()
	if err := rc.roundTrip(init, ir); err != nil {
		return produceRun{}, fmt.Errorf("InitProducerID: %w", err)
	}
	if ir.ErrorCode != 0 {
		return produceRun{}, fmt.Errorf("InitProducerID: error code %d", ir.ErrorCode)
	}
	value, keys := randomBytes(size), recordKeys(b.o.keyBytes)
	templates := make([][]byte, parts)
	for p := range templates {
		pb := protocol.Batch{PartitionLeaderEpoch: -1, ProducerID: ir.ProducerID, ProducerEpoch: ir.ProducerEpoch}
		for i := range per {
			pb.Records = append(pb.Records, protocol.Record{OffsetDelta: int32(i), Key: keys[i%len(keys)], Value: value})
		}
		if templates[p], err = protocol.AppendCompressedBatch(nil, pb, protocol.CodecNone); err != nil {
			return produceRun{}, err
		}
	}
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(9)
	req.Acks, req.TimeoutMillis = -1, 30_000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	for p := range parts {
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = int32(p), templates[p]
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)

	var (
		acked    atomic.Int64
		stop     atomic.Bool
		firstErr firstError
		window   = make(chan struct{}, b.o.replayInflight)
		wg       sync.WaitGroup
	)
	// The reader returns when the connection closes or a response fails; the sender when stopped.
	wg.Go(func() {
		for {
			resp := kmsg.NewPtrProduceResponse()
			resp.SetVersion(9)
			if err := rc.read(resp); err != nil {
				if !stop.Load() {
					firstErr.set(err)
				}
				return
			}
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if p.ErrorCode != 0 {
						firstErr.set(fmt.Errorf("produce %s/%d: error code %d", t.Topic, p.Partition, p.ErrorCode))
						return
					}
				}
			}
			acked.Add(int64(parts * per))
			<-window
		}
	})
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		var seq int32
		var frame []byte
		for !stop.Load() && ctx.Err() == nil && firstErr.get() == nil {
			select {
			case window <- struct{}{}:
			case <-time.After(100 * time.Millisecond):
				continue
			}
			now := time.Now().UnixMilli()
			for _, t := range templates {
				patchBatch(t, seq, now)
			}
			seq += int32(per)
			rc.corr++
			frame = requestFrame(frame, rc.corr, req)
			if _, err := nc.Write(frame); err != nil {
				firstErr.set(err)
				return
			}
		}
	}()
	finish := func() {
		stop.Store(true)
		<-sent
		_ = nc.SetReadDeadline(time.Now().Add(30 * time.Second))
		// Wait for the responses in flight, so the next run starts on an idle gateway.
		for len(window) > 0 && firstErr.get() == nil {
			time.Sleep(time.Millisecond)
		}
		nc.Close()
		wg.Wait()
	}
	if err := sleep(ctx, b.o.warmup); err != nil {
		finish()
		return produceRun{}, err
	}
	m0, a0 := b.markCPU(), acked.Load()
	if err := sleep(ctx, measure); err != nil {
		finish()
		return produceRun{}, err
	}
	a1, at := acked.Load(), time.Now()
	cpu := b.cpuSince(m0)
	finish()
	if err := firstErr.get(); err != nil {
		return produceRun{}, err
	}
	return produceRun{rate: float64(a1-a0) / at.Sub(m0.at).Seconds(), cpu: cpu, perBatch: float64(per), perReq: float64(parts)}, nil
}

// patchBatch sets an encoded uncompressed batch's base sequence and timestamps (every record's
// timestamp delta is 0) and recomputes its CRC.
func patchBatch(b []byte, seq int32, ts int64) {
	binary.BigEndian.PutUint32(b[batchBaseSeqAt:], uint32(seq))
	binary.BigEndian.PutUint64(b[batchFirstTSAt:], uint64(ts))
	binary.BigEndian.PutUint64(b[batchMaxTSAt:], uint64(ts))
	binary.BigEndian.PutUint32(b[batchCRCAt:], crc32.Checksum(b[batchCRCFrom:], castagnoli))
}

// rawClient speaks the Kafka protocol over one connection, for the replay phase.
type rawClient struct {
	nc   net.Conn
	corr int32
	buf  []byte
}

// benchFormatter frames requests as a client does (size, request header, body).
var benchFormatter = kmsg.NewRequestFormatter(kmsg.FormatterClientID("kgate-bench"))

// requestFrame frames req (its version set) with correlation id corr into buf's storage.
func requestFrame(buf []byte, corr int32, req kmsg.Request) []byte {
	return benchFormatter.AppendRequest(buf[:0], req, corr)
}

func (c *rawClient) roundTrip(req kmsg.Request, resp kmsg.Response) error {
	c.corr++
	_ = c.nc.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.nc.SetDeadline(time.Time{})
	if _, err := c.nc.Write(requestFrame(nil, c.corr, req)); err != nil {
		return err
	}
	return c.read(resp)
}

// read reads the next response frame into resp (its version set).
func (c *rawClient) read(resp kmsg.Response) error {
	var size [4]byte
	if _, err := io.ReadFull(c.nc, size[:]); err != nil {
		return err
	}
	n := int(binary.BigEndian.Uint32(size[:]))
	if n < 4 || n > 1<<30 {
		return fmt.Errorf("response frame of %d bytes", n)
	}
	if cap(c.buf) < n {
		c.buf = make([]byte, n)
	}
	frame := c.buf[:n]
	if _, err := io.ReadFull(c.nc, frame); err != nil {
		return err
	}
	body := frame[4:] // correlation id
	if resp.IsFlexible() {
		if len(body) == 0 || body[0] != 0 {
			return errors.New("response header: tagged fields not empty")
		}
		body = body[1:]
	}
	return resp.ReadFrom(body)
}
