package integration

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/protocol"
)

// Raw Kafka connections: for the requests a real client would retry, pin to another version or never
// send (acks=0, bad frames), the tests speak the wire protocol directly over a net.Conn.

const rawClientID = "kgate-it"

// rawConn is one plain TCP connection to a gateway. Every read and write is bounded by ioTimeout.
type rawConn struct {
	t    *testing.T
	nc   net.Conn
	corr int32
	buf  []byte
}

const ioTimeout = 10 * time.Second

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc}
}

// rawFormatter frames requests as a client does (size, request header, body).
var rawFormatter = kmsg.NewRequestFormatter(kmsg.FormatterClientID(rawClientID))

// appendRequest appends req's frame (its version set) with correlation id corr to dst. The formatter
// writes the frame's size at the start of the slice it is given, so each frame is built on its own.
func appendRequest(dst []byte, corr int32, req kmsg.Request) []byte {
	if len(dst) == 0 {
		return rawFormatter.AppendRequest(dst, req, corr)
	}
	return append(dst, rawFormatter.AppendRequest(nil, req, corr)...)
}

// write sends raw bytes.
func (c *rawConn) write(b []byte) {
	c.t.Helper()
	_ = c.nc.SetWriteDeadline(time.Now().Add(ioTimeout))
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// send writes req (its version already set) with the next correlation id and returns that id.
func (c *rawConn) send(req kmsg.Request) int32 {
	c.t.Helper()
	c.corr++
	c.write(appendRequest(nil, c.corr, req))
	return c.corr
}

// readFrame reads one response frame (without its size prefix).
func (c *rawConn) readFrame() ([]byte, error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(ioTimeout))
	var err error
	c.buf, err = protocol.ReadFrame(c.nc, c.buf, 0)
	return c.buf, err
}

// read reads one response into resp (its version set) and returns the correlation id it carried.
func (c *rawConn) read(resp kmsg.Response) int32 {
	c.t.Helper()
	frame, err := c.readFrame()
	if err != nil {
		c.t.Fatalf("read %s response: %v", kmsg.NameForKey(resp.Key()), err)
	}
	if len(frame) < 4 {
		c.t.Fatalf("%s response frame of %d bytes", kmsg.NameForKey(resp.Key()), len(frame))
	}
	corr := int32(binary.BigEndian.Uint32(frame))
	body := frame[4:]
	if resp.IsFlexible() && resp.Key() != 18 { // ApiVersions responses never have the flexible header
		if len(body) == 0 || body[0] != 0 {
			c.t.Fatalf("%s response: expected an empty header tag section", kmsg.NameForKey(resp.Key()))
		}
		body = body[1:]
	}
	if err := resp.ReadFrom(body); err != nil {
		c.t.Fatalf("decode %s v%d response: %v", kmsg.NameForKey(resp.Key()), resp.GetVersion(), err)
	}
	return corr
}

// roundTrip sends req at version v and returns its response.
func roundTrip[R kmsg.Response](c *rawConn, v int16, req kmsg.Request) R {
	c.t.Helper()
	req.SetVersion(v)
	corr := c.send(req)
	resp := req.ResponseKind()
	resp.SetVersion(v)
	if got := c.read(resp); got != corr {
		c.t.Fatalf("%s: response correlation id %d, want %d", kmsg.NameForKey(req.Key()), got, corr)
	}
	return resp.(R)
}

// expectClosed asserts the gateway closes the connection (EOF or reset) within d, sending nothing.
func (c *rawConn) expectClosed(d time.Duration) {
	c.t.Helper()
	_ = c.nc.SetReadDeadline(time.Now().Add(d))
	var b [1]byte
	n, err := c.nc.Read(b[:])
	switch {
	case n > 0:
		c.t.Fatalf("expected the connection to be closed, got data")
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
	default:
		c.t.Fatalf("expected the connection to be closed within %v, got %v", d, err)
	}
}

// apiVersionsOK asserts the connection still answers an ApiVersions request.
func (c *rawConn) apiVersionsOK() {
	c.t.Helper()
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName, req.ClientSoftwareVersion = "kgate-test", "1.0" // v3 needs both, as on Apache
	resp := roundTrip[*kmsg.ApiVersionsResponse](c, 3, req)
	if resp.ErrorCode != 0 || len(resp.ApiKeys) == 0 {
		c.t.Fatalf("ApiVersions: error %d, %d keys", resp.ErrorCode, len(resp.ApiKeys))
	}
}

// rawBatch builds one uncompressed magic-2 batch of values with the given producer fields.
func rawBatch(t *testing.T, pid int64, epoch int16, seq int32, ts int64, values ...string) []byte {
	t.Helper()
	b := protocol.Batch{
		PartitionLeaderEpoch: -1, FirstTimestamp: ts, MaxTimestamp: ts,
		ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq,
	}
	for i, v := range values {
		b.Records = append(b.Records, protocol.Record{OffsetDelta: int32(i), Timestamp: ts, Value: []byte(v)})
	}
	out, err := protocol.AppendCompressedBatch(nil, b, protocol.CodecNone)
	if err != nil {
		t.Fatalf("build batch: %v", err)
	}
	return out
}

// produceReq builds a one-partition Produce request.
func produceReq(topic string, partition int32, acks int16, records []byte) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = acks, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = partition, records
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

// producePart returns the only partition of a one-partition Produce response.
func producePart(t *testing.T, resp *kmsg.ProduceResponse) kmsg.ProduceResponseTopicPartition {
	t.Helper()
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("produce response: want one topic with one partition, got %+v", resp.Topics)
	}
	return resp.Topics[0].Partitions[0]
}

// fetchReq builds a one-partition Fetch request by name (and topic ID, used from v13).
func fetchReq(topic string, id [16]byte, partition int32, offset int64, partMax int32) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis, req.MinBytes = 0, 0
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = topic, id
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = partition, offset, partMax
	rp.CurrentLeaderEpoch, rp.LastFetchedEpoch, rp.LogStartOffset = -1, -1, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

// fetchPart returns the only partition of a one-partition Fetch response.
func fetchPart(t *testing.T, resp *kmsg.FetchResponse) kmsg.FetchResponseTopicPartition {
	t.Helper()
	if resp.ErrorCode != 0 {
		t.Fatalf("fetch: top-level error %d", resp.ErrorCode)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("fetch response: want one topic with one partition, got %d topics", len(resp.Topics))
	}
	return resp.Topics[0].Partitions[0]
}

// fetchedRecords decodes the record batches of a fetch partition.
func fetchedRecords(t *testing.T, sp kmsg.FetchResponseTopicPartition) []protocol.Batch {
	t.Helper()
	bs, err := protocol.DecodeBatches(sp.RecordBatches, 0)
	if err != nil {
		t.Fatalf("decode fetched batches: %v", err)
	}
	return bs
}

// initProducerID allocates (or, with pid/epoch >= 0, bumps) a producer ID over c.
func initProducerID(t *testing.T, c *rawConn, pid int64, epoch int16) (int64, int16) {
	t.Helper()
	req := kmsg.NewPtrInitProducerIDRequest()
	req.TransactionTimeoutMillis = 60000
	req.ProducerID, req.ProducerEpoch = pid, epoch
	resp := roundTrip[*kmsg.InitProducerIDResponse](c, 4, req)
	if resp.ErrorCode != 0 {
		t.Fatalf("InitProducerID: error %d", resp.ErrorCode)
	}
	return resp.ProducerID, resp.ProducerEpoch
}

// produceValues produces values to partition 0 of topic through c (acks=-1, not idempotent), failing t
// on an error.
func produceValues(t *testing.T, c *rawConn, topic string, values ...string) {
	t.Helper()
	sp := producePart(t, roundTrip[*kmsg.ProduceResponse](c, 9, produceReq(topic, 0, -1, rawBatch(t, -1, -1, -1, 1000, values...))))
	if sp.ErrorCode != 0 {
		t.Fatalf("produce %v: error %d", values, sp.ErrorCode)
	}
}

// fetchedOffsets lists the offsets of a fetched partition's records.
func fetchedOffsets(t *testing.T, sp kmsg.FetchResponseTopicPartition) []int64 {
	t.Helper()
	var got []int64
	for _, bt := range fetchedRecords(t, sp) {
		for i := range bt.Records {
			got = append(got, bt.BaseOffset+int64(i))
		}
	}
	return got
}

// fetchedValues lists a fetched partition's records as "offset:value".
func fetchedValues(t *testing.T, sp kmsg.FetchResponseTopicPartition) []string {
	t.Helper()
	var got []string
	for _, bt := range fetchedRecords(t, sp) {
		for i, r := range bt.Records {
			got = append(got, fmt.Sprintf("%d:%s", bt.BaseOffset+int64(i), r.Value))
		}
	}
	return got
}
