package integration

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/gateway"
	"github.com/kgate/kgate/protocol"
)

// Bad input over raw TCP: each case gets a precise Kafka error or a closed connection, never a panic
// (the gateway runs in this test binary, so a panic fails every test) or a hang, and other
// connections keep being served.

// frame prefixes body with its int32 size.
func frame(body []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

// header is a request header v1: key, version, correlation id, client id.
func header(key, version int16, corr int32) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(key))
	b = binary.BigEndian.AppendUint16(b, uint16(version))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = binary.BigEndian.AppendUint16(b, uint16(len(rawClientID)))
	return append(b, rawClientID...)
}

// TestBadFramesCloseConnection: frames the gateway cannot use close that connection only.
func TestBadFramesCloseConnection(t *testing.T) {
	const maxFrame = 1 << 20
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b, gatewayOpts{mutate: func(c *gateway.Config) { c.MaxFrameBytes = maxFrame }})
		ctx := testCtx(t, 30*time.Second)
		mustCreateTopics(t, ctx, newAdmin(t, g), 1, nil, "bad")
		bystander := dialRaw(t, g.Addr)
		bystander.apiVersionsOK()

		truncatedProduce := appendRequest(nil, 1, func() kmsg.Request {
			r := produceReq("bad", 0, -1, rawBatch(t, -1, -1, -1, time.Now().UnixMilli(), "value"))
			r.SetVersion(9)
			return r
		}())
		truncatedProduce = frame(truncatedProduce[4 : 4+(len(truncatedProduce)-4)/2])
		garbage := make([]byte, 4096)
		rand.New(rand.NewSource(2)).Read(garbage)
		binary.BigEndian.PutUint32(garbage, 4092)

		for _, c := range []struct {
			name string
			send []byte
		}{
			{"size above the maximum", binary.BigEndian.AppendUint32(nil, maxFrame+1)},
			{"size of 2 GiB", binary.BigEndian.AppendUint32(nil, 1<<31-1)},
			{"negative size", binary.BigEndian.AppendUint32(nil, 0xffffffff)},
			{"frame of 3 bytes", frame([]byte{0, 18, 0})},
			{"empty frame", frame(nil)},
			{"unknown api key", frame(header(9999, 0, 1))},
			{"api key kgate does not serve", frame(append(header(23, 0, 1), make([]byte, 16)...))},
			{"produce below the version floor", frame(append(header(0, 2, 1), make([]byte, 16)...))},
			{"client id longer than the frame", frame(append(header(18, 0, 1)[:8], 0x7f, 0xff, 'x'))},
			{"truncated produce body", truncatedProduce},
			{"random bytes", garbage},
		} {
			t.Run(c.name, func(t *testing.T) {
				rc := dialRaw(t, g.Addr)
				rc.write(c.send)
				rc.expectClosed(5 * time.Second)
				bystander.apiVersionsOK()
			})
		}
		// The listener still takes new clients.
		p := newClient(t, g, kgo.DefaultProduceTopic("bad"))
		if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte("still fine")}).FirstErr(); err != nil {
			t.Fatalf("produce after the bad frames: %v", err)
		}
	})
}

// TestApiVersionsUnknownVersion: ApiVersions at a version kgate does not know is answered with
// UNSUPPORTED_VERSION in a v0-shaped response listing the supported ranges, and the connection stays
// open for the client's retry.
func TestApiVersionsUnknownVersion(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		for _, v := range []int16{99, 4} {
			c := dialRaw(t, g.Addr)
			// Sent as a newer client would: header v2 with an empty tag section, then a v3-style body.
			body := append(header(18, v, 42), 0)
			body = append(body, 0x05, 'j', 'a', 'v', 'a', 0x02, '9', 0)
			c.write(frame(body))
			resp := kmsg.NewPtrApiVersionsResponse()
			resp.SetVersion(0)
			if corr := c.read(resp); corr != 42 {
				t.Fatalf("v%d: correlation id %d, want 42", v, corr)
			}
			if resp.ErrorCode != kerr.UnsupportedVersion.Code {
				t.Fatalf("v%d: error %d, want UNSUPPORTED_VERSION", v, resp.ErrorCode)
			}
			keys := map[int16][2]int16{}
			for _, k := range resp.ApiKeys {
				keys[k.ApiKey] = [2]int16{k.MinVersion, k.MaxVersion}
			}
			// Produce lists 0-9 but serves 3-9 (gateway/18_api_versions.go: advertisedProduceMin).
			for key, want := range map[int16][2]int16{0: {0, 9}, 1: {4, 13}, 3: {0, 12}, 18: {0, 3}} {
				if keys[key] != want {
					t.Errorf("v%d: key %d advertised %v, want %v", v, key, keys[key], want)
				}
			}
			c.apiVersionsOK()
		}
	})
}

// TestProduceBadBatches: a batch with a flipped byte fails its CRC (CORRUPT_MESSAGE, which producers
// retry), a truncated batch, one whose record count exceeds its records, one with bytes after its last
// record and one whose records do not decompress are INVALID_RECORD (a retry would send the same bytes;
// CORRUPT_MESSAGE kept an idempotent producer's partition stuck behind the batch until its delivery
// timeout), as on Apache, and so is a batch of an old message format (magic 1: Apache's ProduceRequest
// validation refuses any magic but 2 from v3 with INVALID_RECORD); a bad acks value is
// INVALID_REQUIRED_ACKS; the good partition in the same request is stored, the bad ones store nothing,
// and the connection stays usable.
func TestProduceBadBatches(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 30*time.Second)
		mustCreateTopics(t, ctx, newAdmin(t, g), 7, nil, "crc")
		now := time.Now().UnixMilli()
		good := rawBatch(t, -1, -1, -1, now, "good")
		flipped := rawBatch(t, -1, -1, -1, now, "bad crc")
		flipped[len(flipped)-3] ^= 0x20 // inside the record value: the CRC no longer matches
		truncated := rawBatch(t, -1, -1, -1, now, "cut short")
		truncated = truncated[:len(truncated)-4]
		oldMagic := rawBatch(t, -1, -1, -1, now, "magic 1")
		oldMagic[16] = 1
		recrc := func(b []byte) { // the CRC-32C of everything from the attributes on
			binary.BigEndian.PutUint32(b[17:21], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
		}
		overcounted := rawBatch(t, -1, -1, -1, now, "only one")
		binary.BigEndian.PutUint32(overcounted[57:], 2) // records: 2
		binary.BigEndian.PutUint32(overcounted[23:], 1) // last offset delta: 1
		recrc(overcounted)
		trailing := append(rawBatch(t, -1, -1, -1, now, "then bytes"), 0, 0, 0)
		binary.BigEndian.PutUint32(trailing[8:], uint32(len(trailing)-12))
		recrc(trailing)
		notGzip := rawBatch(t, -1, -1, -1, now, "said gzip")
		binary.BigEndian.PutUint16(notGzip[21:], 1) // attributes: gzip, over records sent uncompressed
		recrc(notGzip)

		req := kmsg.NewPtrProduceRequest()
		req.Acks, req.TimeoutMillis = -1, 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "crc"
		for p, recs := range [][]byte{good, flipped, truncated, oldMagic, overcounted, trailing, notGzip} {
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Partition, rp.Records = int32(p), recs
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		c := dialRaw(t, g.Addr)
		resp := roundTrip[*kmsg.ProduceResponse](c, 9, req)
		want := []int16{0, kerr.CorruptMessage.Code, kerr.InvalidRecord.Code, kerr.InvalidRecord.Code, kerr.InvalidRecord.Code, kerr.InvalidRecord.Code, kerr.InvalidRecord.Code}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != len(want) {
			t.Fatalf("produce response: %+v", resp.Topics)
		}
		for _, sp := range resp.Topics[0].Partitions {
			if sp.ErrorCode != want[sp.Partition] {
				t.Errorf("partition %d: error %d, want %d", sp.Partition, sp.ErrorCode, want[sp.Partition])
			}
			n, err := g.Store.Client().XLen(ctx, g.Namespace+":stream:{crc:"+string(rune('0'+sp.Partition))+"}").Result()
			if wantN := int64(map[bool]int{true: 1}[sp.Partition == 0]); err != nil || n != wantN {
				t.Errorf("partition %d: XLEN %d, %v; want %d", sp.Partition, n, err, wantN)
			}
		}
		bad := produceReq("crc", 0, 2, good)
		if sp := producePart(t, roundTrip[*kmsg.ProduceResponse](c, 9, bad)); sp.ErrorCode != kerr.InvalidRequiredAcks.Code {
			t.Errorf("acks=2: error %d, want INVALID_REQUIRED_ACKS", sp.ErrorCode)
		}
		c.apiVersionsOK()
	})
}

// TestTransactionsRefused: transactions are not supported (docs/COMPATIBILITY.md). InitProducerId with
// a transactional id, a Produce request with one (its batches plain: Apache appends them) and a batch
// marked transactional are all answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED and store nothing (a
// plain batch beside a transactional one too, as on Apache), and so is franz-go's
// transactional producer; a read_committed fetch reads as read_uncommitted, its last stable offset the
// high watermark.
func TestTransactionsRefused(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 30*time.Second)
		mustCreateTopics(t, ctx, newAdmin(t, g), 1, nil, "txn")
		mustCreateTopics(t, ctx, newAdmin(t, g), 2, nil, "txn-mixed")
		refused := kerr.TransactionalIDAuthorizationFailed.Code
		txnID := "txn-producer"
		c := dialRaw(t, g.Addr)

		ipr := kmsg.NewPtrInitProducerIDRequest()
		ipr.TransactionalID, ipr.TransactionTimeoutMillis = &txnID, 60000
		ipr.ProducerID, ipr.ProducerEpoch = -1, -1
		for _, v := range []int16{0, 4} {
			if resp := roundTrip[*kmsg.InitProducerIDResponse](c, v, ipr); resp.ErrorCode != refused || resp.ProducerID != -1 {
				t.Errorf("InitProducerId v%d with a transactional id: error %d producer id %d, want %d and -1", v, resp.ErrorCode, resp.ProducerID, refused)
			}
		}

		now := time.Now().UnixMilli()
		withID := produceReq("txn", 0, -1, rawBatch(t, -1, -1, -1, now, "with id"))
		withID.TransactionID = &txnID
		marked := protocol.Batch{PartitionLeaderEpoch: -1, FirstTimestamp: now, MaxTimestamp: now,
			ProducerID: 7, ProducerEpoch: 0, BaseSequence: 0, Attributes: 0x10, // transactional
			Records: []protocol.Record{{Timestamp: now, Value: []byte("marked")}}}
		markedBytes, err := protocol.AppendCompressedBatch(nil, marked, protocol.CodecNone)
		if err != nil {
			t.Fatal(err)
		}
		for name, req := range map[string]*kmsg.ProduceRequest{
			"transactional id":    withID,
			"transactional batch": produceReq("txn", 0, -1, markedBytes),
		} {
			if sp := producePart(t, roundTrip[*kmsg.ProduceResponse](c, 9, req)); sp.ErrorCode != refused {
				t.Errorf("Produce with a %s: error %d, want %d", name, sp.ErrorCode, refused)
			}
		}

		// Apache refuses every partition of a request any of whose batches is transactional, as kgate
		// does, and appends one with a transactional id and plain batches, which kgate refuses by the id
		// alone (docs/COMPATIBILITY.md, Transactions: no client sends it).
		mixed := produceReq("txn-mixed", 0, -1, markedBytes)
		plain := kmsg.NewProduceRequestTopicPartition()
		plain.Partition, plain.Records = 1, rawBatch(t, -1, -1, -1, now, "plain beside")
		mixed.Topics[0].Partitions = append(mixed.Topics[0].Partitions, plain)
		var codes []int16
		for _, sp := range roundTrip[*kmsg.ProduceResponse](c, 9, mixed).Topics[0].Partitions {
			codes = append(codes, sp.ErrorCode)
		}
		if !slices.Equal(codes, []int16{refused, refused}) {
			t.Errorf("a transactional batch beside a plain one: errors %v, want [%d %d]", codes, refused, refused)
		}
		for p, want := range []int64{0, 0} {
			if n, err := g.Store.Client().XLen(ctx, fmt.Sprintf("%s:stream:{txn-mixed:%d}", g.Namespace, p)).Result(); err != nil || n != want {
				t.Errorf("txn-mixed/%d: XLEN %d, %v; want %d", p, n, err, want)
			}
		}

		tp := newClient(t, g, kgo.DefaultProduceTopic("txn"), kgo.TransactionalID(txnID), kgo.RetryTimeout(5*time.Second))
		err = tp.BeginTransaction() // fails once the producer ID it initialises is refused
		if err == nil {
			err = tp.ProduceSync(ctx, &kgo.Record{Value: []byte("in a transaction")}).FirstErr()
		}
		if !errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
			t.Errorf("franz-go transactional producer: %v, want TRANSACTIONAL_ID_AUTHORIZATION_FAILED", err)
		}
		if n, err := g.Store.Client().XLen(ctx, g.Namespace+":stream:{txn:0}").Result(); err != nil || n != 0 {
			t.Fatalf("XLEN %d, %v; want nothing stored", n, err)
		}

		if sp := producePart(t, roundTrip[*kmsg.ProduceResponse](c, 9, produceReq("txn", 0, -1, rawBatch(t, -1, -1, -1, now, "plain")))); sp.ErrorCode != 0 {
			t.Fatalf("plain produce: error %d", sp.ErrorCode)
		}
		fr := fetchReq("txn", [16]byte{}, 0, 0, 1<<20)
		fr.IsolationLevel = 1 // read_committed
		sp := fetchPart(t, roundTrip[*kmsg.FetchResponse](c, 12, fr))
		if got := fetchedValues(t, sp); !slices.Equal(got, []string{"0:plain"}) || sp.HighWatermark != 1 || sp.LastStableOffset != 1 {
			t.Errorf("read_committed fetch: %v, high watermark %d, last stable offset %d; want [0:plain], 1 and 1", got, sp.HighWatermark, sp.LastStableOffset)
		}
	})
}

// TestProduceInvalidRecords: batches Apache Kafka refuses with INVALID_RECORD are refused so and
// store nothing: an offset range that does not match the record count, a producer id without a
// sequence, a control batch (a transactional one is refused as transactional, as on Apache), a base
// offset other than 0 (compressed or not, and before a bad CRC), and (kgate's own bound) a record
// with more than 1,000 headers; a record with 1,000 is stored, headers in order.
func TestProduceInvalidRecords(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 30*time.Second)
		mustCreateTopics(t, ctx, newAdmin(t, g), 9, nil, "invalid")
		now := time.Now().UnixMilli()
		buildWith := func(codec protocol.Codec, pb protocol.Batch) []byte {
			pb.PartitionLeaderEpoch, pb.FirstTimestamp, pb.MaxTimestamp = -1, now, now
			out, err := protocol.AppendCompressedBatch(nil, pb, codec)
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		build := func(pb protocol.Batch) []byte { return buildWith(protocol.CodecNone, pb) }
		flipLast := func(b []byte) []byte { b[len(b)-2] ^= 0x20; return b } // inside the last record: the CRC fails
		rec := func(delta int32, headers int) protocol.Record {
			r := protocol.Record{OffsetDelta: delta, Timestamp: now, Value: []byte("v")}
			for h := range headers {
				r.Headers = append(r.Headers, protocol.Header{Key: fmt.Sprintf("h%d", h), Value: []byte{byte(h)}})
			}
			return r
		}
		cases := []struct {
			name  string
			batch []byte
			want  int16
		}{
			{"offset deltas 0, 4, 9 for three records", build(protocol.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1,
				Records: []protocol.Record{rec(0, 0), rec(4, 0), rec(9, 0)}}), kerr.InvalidRecord.Code},
			{"producer id without a sequence", build(protocol.Batch{ProducerID: 7, ProducerEpoch: 0, BaseSequence: -1,
				Records: []protocol.Record{rec(0, 0)}}), kerr.InvalidRecord.Code},
			{"control batch", build(protocol.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Attributes: 0x20,
				Records: []protocol.Record{rec(0, 0)}}), kerr.InvalidRecord.Code},
			// Transaction markers are transactional too: Apache refuses the request for that first.
			{"transactional control batch", build(protocol.Batch{ProducerID: 7, ProducerEpoch: 0, BaseSequence: 0, Attributes: 0x30,
				Records: []protocol.Record{rec(0, 0)}}), kerr.TransactionalIDAuthorizationFailed.Code},
			{"base offset 5", build(protocol.Batch{BaseOffset: 5, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1,
				Records: []protocol.Record{rec(0, 0)}}), kerr.InvalidRecord.Code},
			{"base offset 5, gzip", buildWith(protocol.CodecGzip, protocol.Batch{BaseOffset: 5, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1,
				Records: []protocol.Record{rec(0, 0), rec(1, 0)}}), kerr.InvalidRecord.Code},
			// The base offset is checked before the CRC (which does not cover it), as on Apache.
			{"base offset 5, bad CRC", flipLast(build(protocol.Batch{BaseOffset: 5, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1,
				Records: []protocol.Record{rec(0, 0)}})), kerr.InvalidRecord.Code},
			{"1,001 headers", build(protocol.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1,
				Records: []protocol.Record{rec(0, 1), rec(1, 1001)}}), kerr.InvalidRecord.Code},
			{"1,000 headers", build(protocol.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1,
				Records: []protocol.Record{rec(0, 1), rec(1, 1000)}}), 0},
		}
		c := dialRaw(t, g.Addr)
		for p, tc := range cases {
			req := produceReq("invalid", int32(p), -1, tc.batch)
			sp := producePart(t, roundTrip[*kmsg.ProduceResponse](c, 9, req))
			if sp.ErrorCode != tc.want {
				t.Errorf("%s: error %d, want %d", tc.name, sp.ErrorCode, tc.want)
			}
			n, err := g.Store.Client().XLen(ctx, fmt.Sprintf("%s:stream:{invalid:%d}", g.Namespace, p)).Result()
			if wantN := int64(map[bool]int{true: 2}[tc.want == 0]); err != nil || n != wantN {
				t.Errorf("%s: XLEN %d, %v; want %d", tc.name, n, err, wantN)
			}
		}
		fetched := fetchedRecords(t, fetchPart(t, roundTrip[*kmsg.FetchResponse](c, 12, fetchReq("invalid", [16]byte{}, int32(len(cases)-1), 0, 1<<20))))
		if len(fetched) != 1 || len(fetched[0].Records) != 2 || len(fetched[0].Records[1].Headers) != 1000 ||
			fetched[0].Records[1].Headers[999].Key != "h999" {
			t.Fatalf("the record with 1,000 headers came back as %+v", fetched)
		}
		c.apiVersionsOK()
	})
}

// TestProduceZstdBelowV7: a zstd batch needs Produce v7 (KIP-110). Apache's request validation
// (ProduceRequest.validateRecords) answers one sent at v3-v6 with UNSUPPORTED_COMPRESSION_TYPE, before
// it looks at the batch's size, and so does kgate, storing nothing; from v7 it is stored, and the other
// codecs are stored at any version. A client does not send it (franz-go, librdkafka and the Java
// producer send v7 or later for zstd), so the requests are raw.
func TestProduceZstdBelowV7(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 30*time.Second)
		adm := newAdmin(t, g)
		mustCreateTopics(t, ctx, adm, 8, nil, "zstd")
		mustCreateTopics(t, ctx, adm, 1, map[string]*string{"max.message.bytes": kadm.StringPtr("100")}, "zstd-small")
		now := time.Now().UnixMilli()
		batch := func(codec protocol.Codec, value []byte) []byte {
			out, err := protocol.AppendCompressedBatch(nil, protocol.Batch{PartitionLeaderEpoch: -1,
				FirstTimestamp: now, MaxTimestamp: now, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1,
				Records: []protocol.Record{{Timestamp: now, Value: value}}}, codec)
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		zstd := batch(protocol.CodecZstd, []byte("z"))
		noise := make([]byte, 500)
		rand.New(rand.NewSource(1)).Read(noise) // incompressible: the batch stays above 100 bytes
		cases := []struct {
			version   int16
			topic     string
			partition int32
			batch     []byte
			want      int16
		}{
			{3, "zstd", 0, zstd, kerr.UnsupportedCompressionType.Code},
			{4, "zstd", 1, zstd, kerr.UnsupportedCompressionType.Code},
			{5, "zstd", 2, zstd, kerr.UnsupportedCompressionType.Code},
			{6, "zstd", 3, zstd, kerr.UnsupportedCompressionType.Code},
			{7, "zstd", 4, zstd, 0},
			{9, "zstd", 5, zstd, 0},
			{3, "zstd", 6, batch(protocol.CodecLZ4, []byte("l")), 0},
			{6, "zstd", 7, batch(protocol.CodecGzip, []byte("g")), 0},
			// Too large for the topic, and zstd below v7: the codec is refused first, as on Apache.
			{6, "zstd-small", 0, batch(protocol.CodecZstd, noise), kerr.UnsupportedCompressionType.Code},
		}
		c := dialRaw(t, g.Addr)
		for _, tc := range cases {
			sp := producePart(t, roundTrip[*kmsg.ProduceResponse](c, tc.version, produceReq(tc.topic, tc.partition, -1, tc.batch)))
			if sp.ErrorCode != tc.want {
				t.Errorf("v%d to %s/%d: error %d, want %d", tc.version, tc.topic, tc.partition, sp.ErrorCode, tc.want)
			}
			n, err := g.Store.Client().XLen(ctx, fmt.Sprintf("%s:stream:{%s:%d}", g.Namespace, tc.topic, tc.partition)).Result()
			if wantN := int64(map[bool]int{true: 1}[tc.want == 0]); err != nil || n != wantN {
				t.Errorf("v%d to %s/%d: XLEN %d, %v; want %d", tc.version, tc.topic, tc.partition, n, err, wantN)
			}
		}
		c.apiVersionsOK()
	})
}

// TestProduceValidationOrder: a partition's records with several things wrong get the error Apache
// Kafka answers first. Apache refuses a whole request any of whose partitions begins with a
// transactional batch (KafkaApis.handleProduceRequest, before it looks at topics or records) when it
// names no transactional id, ahead of acks; then for each partition its request validation
// (ProduceRequest.validateRecords) checks that the records begin with a whole batch and its magic
// (INVALID_RECORD), then zstd below v7 (UNSUPPORTED_COMPRESSION_TYPE), then that no second batch
// follows (INVALID_RECORD); the log then checks the base offset, the size and the CRC. Nothing of any
// of them is stored.
func TestProduceValidationOrder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 30*time.Second)
		adm := newAdmin(t, g)
		mustCreateTopics(t, ctx, adm, 28, nil, "order")
		mustCreateTopics(t, ctx, adm, 2, map[string]*string{"max.message.bytes": kadm.StringPtr("100")}, "order-small")
		now := time.Now().UnixMilli()
		build := func(codec protocol.Codec, pb protocol.Batch) []byte {
			pb.PartitionLeaderEpoch, pb.FirstTimestamp, pb.MaxTimestamp = -1, now, now
			if pb.ProducerID == 0 {
				pb.ProducerID, pb.ProducerEpoch, pb.BaseSequence = -1, -1, -1
			}
			pb.Records = []protocol.Record{{Timestamp: now, Value: []byte("order")}}
			out, err := protocol.AppendCompressedBatch(nil, pb, codec)
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		plain := func() []byte { return build(protocol.CodecNone, protocol.Batch{}) }
		badCRC := func(b []byte) []byte { b[len(b)-2] ^= 0x20; return b }
		txn := protocol.Batch{ProducerID: 7, ProducerEpoch: 0, BaseSequence: 0, Attributes: 0x10}
		txnAt5 := txn
		txnAt5.BaseOffset = 5
		cat := func(bs ...[]byte) []byte { return slices.Concat(bs...) }
		noise := make([]byte, 300)
		rand.New(rand.NewSource(4)).Read(noise)
		large := rawBatch(t, -1, -1, -1, now, string(noise))               // above order-small's max.message.bytes
		short := func(b []byte) []byte { return withLength(b, 40, 40-12) } // a batch shorter than a magic 2 header
		var (
			unsupported = kerr.UnsupportedCompressionType.Code
			invalid     = kerr.InvalidRecord.Code
			corrupt     = kerr.CorruptMessage.Code
			refused     = kerr.TransactionalIDAuthorizationFailed.Code
			badAcks     = kerr.InvalidRequiredAcks.Code
		)
		cases := []struct {
			name    string
			version int16
			topic   string
			acks    int16
			records []byte
			want    int16
		}{
			// zstd is checked on the first batch before a second one is looked for.
			{"zstd, then a second batch", 6, "order", -1, cat(build(protocol.CodecZstd, protocol.Batch{}), plain()), unsupported},
			{"a second batch after a zstd one, v7", 7, "order", -1, cat(build(protocol.CodecZstd, protocol.Batch{}), plain()), invalid},
			{"a second batch", 9, "order", -1, cat(plain(), plain()), invalid},
			// The one-batch rule comes before the log's size and CRC checks.
			{"a bad CRC, then a second batch", 9, "order", -1, cat(badCRC(plain()), plain()), invalid},
			{"two batches together larger than max.message.bytes", 9, "order-small", -1, cat(plain(), plain()), invalid},
			// Bytes after the first batch that are not a whole batch are not a second one: the first
			// batch's CRC answers.
			{"a bad CRC, then 3 bytes", 9, "order", -1, cat(badCRC(plain()), []byte{0, 0, 0}), corrupt},
			// The request validation refuses a first batch of magic 0 or 1, and records without a
			// whole first batch, before the log holds the batch against max.message.bytes.
			{"magic 1, larger than max.message.bytes", 9, "order-small", -1, withMagic(large, len(large), 1), invalid},
			{"magic 0, larger than max.message.bytes", 9, "order-small", -1, withMagic(large, len(large), 0), invalid},
			{"a truncated batch larger than max.message.bytes", 9, "order-small", -1, large[:len(large)-1], invalid},
			// A transactional batch is refused before anything else is looked at.
			{"transactional, base offset 5", 9, "order", -1, build(protocol.CodecNone, txnAt5), refused},
			{"transactional zstd", 6, "order", -1, build(protocol.CodecZstd, txn), refused},
			{"transactional, bad CRC", 9, "order", -1, badCRC(build(protocol.CodecNone, txn)), refused},
			{"transactional, then a second batch", 9, "order", -1, cat(build(protocol.CodecNone, txn), plain()), refused},
			{"transactional, acks 2", 9, "order", 2, build(protocol.CodecNone, txn), refused},
			{"transactional, unknown topic", 9, "order-none", -1, build(protocol.CodecNone, txn), refused},
			// Invalid acks answer the partitions the request's validation let through (Apache's
			// ReplicaManager.appendRecords refuses the entries it is given), ahead of the log's checks.
			{"acks 2, unknown topic", 9, "order-none", 2, plain(), kerr.UnknownTopicOrPartition.Code},
			{"acks 2, a second batch", 9, "order", 2, cat(plain(), plain()), invalid},
			{"acks 2, zstd below v7", 6, "order", 2, build(protocol.CodecZstd, protocol.Batch{}), unsupported},
			{"acks 2, magic 1", 9, "order", 2, withMagic(large, len(large), 1), invalid},
			{"acks 2, base offset 5", 9, "order", 2, build(protocol.CodecNone, protocol.Batch{BaseOffset: 5}), badAcks},
			{"acks 2, a bad CRC", 9, "order", 2, badCRC(plain()), badAcks},
			{"acks 2, larger than max.message.bytes", 9, "order-small", 2, large, badAcks},
			// A magic 2 batch shorter than its header goes through the request's validation (its
			// attributes are read) and is refused by the log, as a bad CRC.
			{"40 bytes", 9, "order", -1, short(plain()), corrupt},
			{"40 bytes, zstd below v7", 6, "order", -1, short(build(protocol.CodecZstd, protocol.Batch{})), unsupported},
			{"40 bytes, then a second batch", 9, "order", -1, cat(short(plain()), plain()), invalid},
			{"40 bytes, acks 2", 9, "order", 2, short(plain()), badAcks},
		}
		c := dialRaw(t, g.Addr)
		for p, tc := range cases {
			req := produceReq(tc.topic, int32(p), tc.acks, tc.records)
			if tc.topic == "order-small" {
				req.Topics[0].Partitions[0].Partition = 0
			}
			if sp := producePart(t, roundTrip[*kmsg.ProduceResponse](c, tc.version, req)); sp.ErrorCode != tc.want {
				t.Errorf("%s (v%d): error %d, want %d", tc.name, tc.version, sp.ErrorCode, tc.want)
			}
		}
		expectNothingStored(t, ctx, g, "order", 28)
		expectNothingStored(t, ctx, g, "order-small", 2)
		c.apiVersionsOK()
	})
}

// TestProduceTrailingBytes: bytes after a partition's first batch that are not a whole batch are
// ignored, as Apache's batch iterator ends there (ByteBufferLogInputStream: fewer bytes than a length
// and a magic, or than the length counts) and its log keeps the whole batches alone: the batch is
// stored and fetched back without them, and max.message.bytes is held against the batch, not the
// bytes after it.
func TestProduceTrailingBytes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 30*time.Second)
		adm := newAdmin(t, g)
		now := time.Now().UnixMilli()
		first := rawBatch(t, -1, -1, -1, now, "kept", "too")
		exact := fmt.Sprint(len(first))
		mustCreateTopics(t, ctx, adm, 8, nil, "trailing")
		mustCreateTopics(t, ctx, adm, 1, map[string]*string{"max.message.bytes": &exact}, "trailing-exact")
		next := rawBatch(t, -1, -1, -1, now, "next")
		headerWithLength := func(n, length int) []byte { // n bytes of a batch header declaring length
			h := make([]byte, max(n, 17))
			binary.BigEndian.PutUint32(h[8:], uint32(length))
			h[16] = 2
			return h[:n]
		}
		magic0 := slices.Clone(next)
		magic0[16] = 0
		cases := []struct {
			name, topic string
			partition   int32
			records     []byte
		}{
			{"3 bytes", "trailing", 0, slices.Concat(first, []byte{1, 2, 3})},
			{"11 bytes", "trailing", 1, slices.Concat(first, headerWithLength(11, 13))},
			{"a length of 14, no magic", "trailing", 2, slices.Concat(first, headerWithLength(12, 14))},
			{"16 bytes of a header", "trailing", 3, slices.Concat(first, headerWithLength(16, 500))},
			{"a header up to the magic", "trailing", 4, slices.Concat(first, headerWithLength(17, 500))},
			{"a truncated batch", "trailing", 5, slices.Concat(first, next[:len(next)-1])},
			{"a truncated magic 0 message", "trailing", 6, slices.Concat(first, magic0[:len(magic0)-1])},
			{"a length past 2 GiB", "trailing", 7, slices.Concat(first, headerWithLength(17, 1<<31-13))},
			// max.message.bytes is the batch's size: the bytes after it take the request above it.
			{"a batch of max.message.bytes, then a truncated batch", "trailing-exact", 0, slices.Concat(first, next[:len(next)-1])},
		}
		c := dialRaw(t, g.Addr)
		for _, tc := range cases {
			sp := producePart(t, roundTrip[*kmsg.ProduceResponse](c, 9, produceReq(tc.topic, tc.partition, -1, tc.records)))
			if sp.ErrorCode != 0 || sp.BaseOffset != 0 {
				t.Errorf("%s: error %d, base offset %d; want the batch stored at 0", tc.name, sp.ErrorCode, sp.BaseOffset)
				continue
			}
			got := fetchedValues(t, fetchPart(t, roundTrip[*kmsg.FetchResponse](c, 12, fetchReq(tc.topic, [16]byte{}, tc.partition, 0, 1<<20))))
			if !slices.Equal(got, []string{"0:kept", "1:too"}) {
				t.Errorf("%s: fetched %v, want [0:kept 1:too]", tc.name, got)
			}
		}
		c.apiVersionsOK()
	})
}

// TestProduceCorruptSecondBatch: a header after a partition's first batch that declares a length below
// a magic 0 message's overhead (14), or a magic other than 0-2, is CORRUPT_MESSAGE, as Apache's batch
// iterator throws CorruptRecordException there (ByteBufferLogInputStream.nextBatchSize) when its request
// validation (ProduceRequest.validateRecords) looks for a second batch: after the first batch's magic
// and zstd below v7, before the log's base offset, size and CRC checks; the magic is checked before the
// bytes the length counts are. A whole second batch ends the look before a corrupt third. Nothing of
// any of them is stored.
func TestProduceCorruptSecondBatch(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 30*time.Second)
		adm := newAdmin(t, g)
		mustCreateTopics(t, ctx, adm, 12, nil, "corrupt2")
		mustCreateTopics(t, ctx, adm, 1, map[string]*string{"max.message.bytes": kadm.StringPtr("100")}, "corrupt2-small")
		now := time.Now().UnixMilli()
		build := func(codec protocol.Codec, baseOffset int64, value string) []byte {
			out, err := protocol.AppendCompressedBatch(nil, protocol.Batch{BaseOffset: baseOffset, PartitionLeaderEpoch: -1,
				FirstTimestamp: now, MaxTimestamp: now, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1,
				Records: []protocol.Record{{Timestamp: now, Value: []byte(value)}}}, codec)
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		first := build(protocol.CodecNone, 0, "first")
		next := build(protocol.CodecNone, 0, "next")
		badCRC := func(b []byte) []byte { b[len(b)-2] ^= 0x20; return b }
		noise := make([]byte, 300)
		rand.New(rand.NewSource(3)).Read(noise)
		var (
			corrupt     = kerr.CorruptMessage.Code
			invalid     = kerr.InvalidRecord.Code
			unsupported = kerr.UnsupportedCompressionType.Code
		)
		cases := []struct {
			name    string
			version int16
			topic   string
			records []byte
			want    int16
		}{
			{"a length of 13, 12 bytes", 9, "corrupt2", slices.Concat(first, withLength(next, 12, 13)), corrupt},
			{"a length of 13, whole", 9, "corrupt2", slices.Concat(first, withLength(next, len(next), 13)), corrupt},
			{"a length of -1", 9, "corrupt2", slices.Concat(first, withLength(next, len(next), -1)), corrupt},
			{"magic 3", 9, "corrupt2", slices.Concat(first, withMagic(next, len(next), 3)), corrupt},
			{"magic -1, 17 bytes", 9, "corrupt2", slices.Concat(first, withMagic(next, 17, 0xff)), corrupt},
			// Ahead of the log's checks of the first batch.
			{"base offset 5, then magic 3", 9, "corrupt2", slices.Concat(build(protocol.CodecNone, 5, "at 5"), withMagic(next, len(next), 3)), corrupt},
			{"a bad CRC, then a length of 13", 9, "corrupt2", slices.Concat(badCRC(build(protocol.CodecNone, 0, "crc")), withLength(next, 12, 13)), corrupt},
			{"too large, then magic 3", 9, "corrupt2-small", slices.Concat(build(protocol.CodecNone, 0, string(noise)), withMagic(next, len(next), 3)), corrupt},
			// Behind the request validation's checks of the first batch.
			{"zstd below v7, then magic 3", 6, "corrupt2", slices.Concat(build(protocol.CodecZstd, 0, "z"), withMagic(next, len(next), 3)), unsupported},
			{"a whole second batch, then magic 3", 9, "corrupt2", slices.Concat(first, next, withMagic(next, len(next), 3)), invalid},
			// A whole magic 1 first batch is refused for its magic before anything after it is read.
			{"magic 1, then magic 3", 9, "corrupt2", slices.Concat(withMagic(first, len(first), 1), withMagic(next, len(next), 3)), invalid},
		}
		c := dialRaw(t, g.Addr)
		for p, tc := range cases {
			req := produceReq(tc.topic, int32(p), -1, tc.records)
			if tc.topic == "corrupt2-small" {
				req.Topics[0].Partitions[0].Partition = 0
			}
			if sp := producePart(t, roundTrip[*kmsg.ProduceResponse](c, tc.version, req)); sp.ErrorCode != tc.want {
				t.Errorf("%s (v%d): error %d, want %d", tc.name, tc.version, sp.ErrorCode, tc.want)
			}
		}
		expectNothingStored(t, ctx, g, "corrupt2", 12)
		expectNothingStored(t, ctx, g, "corrupt2-small", 1)
		c.apiVersionsOK()
	})
}

// TestProduceCorruptFirstBatch: a partition whose first batch header Kafka's batch iterator finds
// corrupt (a length below 14, a magic outside 0-2) fails the whole request with CORRUPT_MESSAGE for
// every partition and stores nothing, as Apache's reading of each partition's first batch
// (RequestUtils.hasTransactionalRecords, ahead of everything else) throws; a partition whose bytes hold no whole first
// batch fails alone with INVALID_RECORD. The reading stops at the first partition whose first batch is
// transactional (whatever its producer ID or length), which fails the request with
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED instead.
func TestProduceCorruptFirstBatch(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		g := startGateway(t, b)
		ctx := testCtx(t, 30*time.Second)
		adm := newAdmin(t, g)
		const topic = "corrupt1"
		now := time.Now().UnixMilli()
		build := func(attrs int16, producerID int64) []byte {
			out, err := protocol.AppendCompressedBatch(nil, protocol.Batch{PartitionLeaderEpoch: -1, Attributes: attrs,
				FirstTimestamp: now, MaxTimestamp: now, ProducerID: producerID, ProducerEpoch: 0, BaseSequence: 0,
				Records: []protocol.Record{{Timestamp: now, Value: []byte("v")}}}, protocol.CodecNone)
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		good := build(0, -1)
		const transactional = 0x10
		// A batch of 26 bytes (length 14, the least Kafka's batch iterator takes) marked transactional,
		// followed by the rest of good's bytes.
		shortTransactional := withLength(good, len(good), 14)
		shortTransactional[22] |= transactional
		var (
			ok      = int16(0)
			corrupt = kerr.CorruptMessage.Code
			invalid = kerr.InvalidRecord.Code
			txn     = kerr.TransactionalIDAuthorizationFailed.Code
		)
		cases := []struct {
			name    string
			records [2][]byte // the request's two partitions, in order
			want    [2]int16
		}{
			{"a length of 13, 12 bytes", [2][]byte{good, withLength(good, 12, 13)}, [2]int16{corrupt, corrupt}},
			{"a length of -1, whole", [2][]byte{good, withLength(good, len(good), -1)}, [2]int16{corrupt, corrupt}},
			{"magic 3", [2][]byte{good, withMagic(good, len(good), 3)}, [2]int16{corrupt, corrupt}},
			{"magic -1, 17 bytes", [2][]byte{good, withMagic(good, 17, 0xff)}, [2]int16{corrupt, corrupt}},
			{"corrupt, then good", [2][]byte{withMagic(good, len(good), 3), good}, [2]int16{corrupt, corrupt}},
			{"corrupt, then transactional", [2][]byte{withMagic(good, len(good), 3), build(transactional, 5)}, [2]int16{corrupt, corrupt}},
			// Transactional: the reading stops before the corrupt header, with or without a producer ID.
			{"transactional, then corrupt", [2][]byte{build(transactional, 5), withMagic(good, len(good), 3)}, [2]int16{txn, txn}},
			{"transactional without a producer, then corrupt", [2][]byte{build(transactional, -1), withMagic(good, len(good), 3)}, [2]int16{txn, txn}},
			// A batch shorter than a magic 2 header is read all the same: its attributes are within it.
			{"a transactional batch of 26 bytes, then good", [2][]byte{shortTransactional, good}, [2]int16{txn, txn}},
			{"a transactional batch of 26 bytes, then corrupt", [2][]byte{shortTransactional, withMagic(good, len(good), 3)}, [2]int16{txn, txn}},
			// No batch to read: the partition alone fails, in the request's validation.
			{"11 bytes", [2][]byte{good, good[:11]}, [2]int16{ok, invalid}},
			{"16 bytes", [2][]byte{good, good[:16]}, [2]int16{ok, invalid}},
			{"a length beyond the bytes", [2][]byte{good, good[:len(good)-1]}, [2]int16{ok, invalid}},
		}
		mustCreateTopics(t, ctx, adm, int32(2*len(cases)), nil, topic)
		c := dialRaw(t, g.Addr)
		for i, tc := range cases {
			req := produceReq(topic, int32(2*i), -1, tc.records[0])
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Partition, rp.Records = int32(2*i+1), tc.records[1]
			req.Topics[0].Partitions = append(req.Topics[0].Partitions, rp)
			resp := roundTrip[*kmsg.ProduceResponse](c, 9, req)
			if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 2 {
				t.Fatalf("%s: response %+v, want one topic with two partitions", tc.name, resp.Topics)
			}
			for k, sp := range resp.Topics[0].Partitions {
				stored := int64(0)
				if tc.want[k] == ok {
					stored = 1
				}
				n, err := g.Store.Client().XLen(ctx, fmt.Sprintf("%s:stream:{%s:%d}", g.Namespace, topic, sp.Partition)).Result()
				if sp.Partition != int32(2*i+k) || sp.ErrorCode != tc.want[k] || err != nil || n != stored {
					t.Errorf("%s: partition %d error %d, %d stored (%v); want partition %d error %d, %d stored",
						tc.name, sp.Partition, sp.ErrorCode, n, err, 2*i+k, tc.want[k], stored)
				}
			}
		}
		c.apiVersionsOK()
	})
}

// withLength is batch's first n bytes, its header declaring length.
func withLength(batch []byte, n int, length int32) []byte {
	out := slices.Clone(batch[:n])
	binary.BigEndian.PutUint32(out[8:], uint32(length))
	return out
}

// withMagic is batch's first n bytes, its header declaring magic.
func withMagic(batch []byte, n int, magic byte) []byte {
	out := slices.Clone(batch[:n])
	out[16] = magic
	return out
}

// expectNothingStored checks that partitions 0..n-1 of topic hold no entry.
func expectNothingStored(t *testing.T, ctx context.Context, g *testGateway, topic string, n int) {
	t.Helper()
	for p := range n {
		if n, err := g.Store.Client().XLen(ctx, fmt.Sprintf("%s:stream:{%s:%d}", g.Namespace, topic, p)).Result(); err != nil || n != 0 {
			t.Errorf("%s/%d: XLEN %d, %v; want nothing stored", topic, p, n, err)
		}
	}
}
