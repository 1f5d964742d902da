package gateway

// Produce v3-v9.
//
// Each partition's record batch (magic 2; exactly one per partition, as Apache requires from v3) is
// CRC-checked, decompressed (gzip, snappy, lz4, zstd) and appended to the partition's stream by one
// Lua script that also runs the idempotence check, so a retried batch returns its original offsets
// (and on a LogAppendTime topic its original's append time, as on Apache) and is not stored twice. acks=0 gets no response (a failure on any partition closes the connection, as
// on Apache, so the client notices and refreshes metadata); acks=1 and acks=-1 are answered after
// Redis applied the write (acks=-1 additionally waits for redis.wait_replicas / redis.wait_aof when
// configured).
//
// Errors: a partition beginning with a corrupt batch header (a length below 14, a magic outside 0-2)
// -> CORRUPT_MESSAGE, or with a transactional batch -> TRANSACTIONAL_ID_AUTHORIZATION_FAILED, for
// every partition, before anything else, as Apache answers them; unknown topic or partition ->
// UNKNOWN_TOPIC_OR_PARTITION (Produce never creates topics); no whole first batch or one of magic 0/1
// -> INVALID_RECORD, then zstd below v7 -> UNSUPPORTED_COMPRESSION_TYPE, then a corrupt header after
// the first batch -> CORRUPT_MESSAGE or a second batch -> INVALID_RECORD, as Apache's request
// validation answers them; then acks outside {-1,0,1} -> INVALID_REQUIRED_ACKS for the partitions
// that passed those, as Apache's ReplicaManager answers them; a base offset other than 0 ->
// INVALID_RECORD, as Apache's log answers it
// (all read from the headers, ahead of the size and the CRC, in Apache's order; bytes after the first
// batch that are not a whole one are ignored, as Apache's log drops them); batch larger than
// max.message.bytes, or decompressing past what is left of the request's budget (kafka.max_frame_bytes
// for all its batches) -> MESSAGE_TOO_LARGE; a batch shorter than a magic 2 header, or a bad CRC ->
// CORRUPT_MESSAGE; a batch badly built or with no records -> INVALID_RECORD (as Apache's LogValidator
// answers it); a CreateTime timestamp outside the topic's message.timestamp.before/after.max.ms ->
// INVALID_TIMESTAMP with record_errors and error_message, as LogValidator answers it. Redis failures
// -> NOT_LEADER_OR_FOLLOWER / REQUEST_TIMED_OUT (retriable; never success for a record not stored).
//
// Deviation: transactions are not supported; a transactional produce gets
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED: every partition of a request with a transactional id (Apache
// appends one whose batches are plain) or with a transactional batch (as Apache, when the request
// names no id). No client sends an id with plain batches: a transactional producer names the id and
// marks every batch, and cannot start here (InitProducerId with an id is refused).
// docs/COMPATIBILITY.md, Transactions.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/protocol"
	"github.com/kgate/kgate/redisstore"
)

// produceJob is a produce request checked and decoded, with the response for every partition that
// failed already filled in: the read loop prepares the next produce while the previous one is being
// appended (conn.handleFrame).
type produceJob struct {
	c       *conn
	req     *kmsg.ProduceRequest
	resp    *kmsg.ProduceResponse
	batches []*redisstore.Batch
	slots   []produceSlot // where each batch's answer goes in resp
	ids     [][16]byte    // topic ID of each batch
	// held is the memory the batches take beyond the request's frame until it is answered: their
	// decompressed records and the store's record and header structs (recordsHeld), which the
	// connection's queue counts with the frame.
	held int

	// Set by begin: the tail cache's registration and the copies it is taking.
	keys     []partKey
	copyOf   []bool
	ticket   uint64
	copies   []tailBatch
	copying  sync.WaitGroup
	finished bool // the tail cache registration is released (finish)
}

// produceSlot is where a batch's answer goes: resp.Topics[t].Partitions[p] (superseded entries of the
// request have none, so these are not the request's indexes).
type produceSlot struct{ t, p int }

func (c *conn) prepareProduce(ctx context.Context, req *kmsg.ProduceRequest) *produceJob {
	g := c.g
	j := &produceJob{c: c, req: req, resp: kmsg.NewPtrProduceResponse()}
	fail := requestRecordsError(req) // refused from its batch headers, ahead of the rest
	if fail == 0 && req.TransactionID != nil {
		fail = kerr.TransactionalIDAuthorizationFailed.Code
	}
	badAcks := req.Acks != 0 && req.Acks != 1 && req.Acks != -1
	now := time.Now().UnixMilli()
	superseded := supersededEntries(req)
	for ti := range req.Topics {
		rt := &req.Topics[ti]
		st := kmsg.NewProduceResponseTopic()
		st.Topic = rt.Topic
		if superseded != nil && len(rt.Partitions) > 0 && !slices.Contains(superseded[ti], false) {
			continue
		}
		topic, terr := g.topics.get(ctx, rt.Topic)
		for pi := range rt.Partitions {
			if superseded != nil && superseded[ti][pi] {
				continue
			}
			rp := &rt.Partitions[pi]
			head, records := batchHeadError(req.Version, rp.Records)
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.BaseOffset, sp.LogAppendTime, sp.LogStartOffset = -1, -1, -1
			switch {
			case fail != 0:
				sp.ErrorCode = fail
			case terr != nil:
				sp.ErrorCode = errCode(terr)
			case rp.Partition < 0 || rp.Partition >= topic.Partitions:
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case head != 0:
				sp.ErrorCode = head
			case badAcks:
				// Apache's log is handed the partitions its request validation let through, and
				// refuses them all for their acks before anything of theirs is looked at.
				sp.ErrorCode = kerr.InvalidRequiredAcks.Code
			case nonZeroBaseOffset(records):
				// As its log refuses them (UnifiedLog's analyzeAndValidateRecords; clients send 0,
				// the broker assigns offsets), ahead of max.message.bytes and the CRC.
				sp.ErrorCode = kerr.InvalidRecord.Code
			case len(records) > g.maxMessageBytes(topic):
				sp.ErrorCode = kerr.MessageTooLarge.Code
			case len(records) < protocol.BatchHeaderLen:
				// A magic 2 batch shorter than its header: Apache's log finds it invalid, as a bad CRC.
				sp.ErrorCode = kerr.CorruptMessage.Code
			default:
				// The request's batches take at most the largest frame accepted in memory beyond the
				// frame, in all (decompressed, and as records): a request of a few kilobytes must not
				// take gigabytes, whatever its partitions.
				b, held, code := g.decodeProduceBatch(rt.Topic, rp.Partition, records, topic, now, int(g.cfg.MaxFrameBytes)-j.held, &sp)
				if code != 0 {
					sp.ErrorCode = code
					break
				}
				j.held += held
				b.Durable = req.Acks == -1 // acks=1 and 0 do not wait for redis.wait_replicas / wait_aof
				if b.LogAppendTime != 0 {
					sp.LogAppendTime = b.LogAppendTime
				}
				j.batches = append(j.batches, b)
				j.slots = append(j.slots, produceSlot{len(j.resp.Topics), len(st.Partitions)})
				j.ids = append(j.ids, topic.ID)
			}
			st.Partitions = append(st.Partitions, sp)
		}
		j.resp.Topics = append(j.resp.Topics, st)
	}
	return j
}

// requestRecordsError is the error Apache refuses a whole produce request with from its partitions'
// first batch headers, ahead of acks, topics and everything else (0 for none): it reads each
// partition's first batch as its batch iterator does (protocol.NextBatch), so a corrupt header fails
// the request with CORRUPT_MESSAGE, until a partition's first batch is transactional, which fails it
// with TRANSACTIONAL_ID_AUTHORIZATION_FAILED (without a transactional id; none is ever authorized
// here), whatever its producer ID or its length: a corrupt header behind it is not read.
func requestRecordsError(req *kmsg.ProduceRequest) int16 {
	for ti := range req.Topics {
		for pi := range req.Topics[ti].Partitions {
			records := req.Topics[ti].Partitions[pi].Records
			size, _, corrupt := protocol.NextBatch(records)
			switch {
			case corrupt:
				return kerr.CorruptMessage.Code
			case size > 0 && protocol.TransactionalBatch(records[:size]):
				return kerr.TransactionalIDAuthorizationFailed.Code
			}
		}
	}
	return 0
}

// batchHeadError is the error Apache answers a partition's records with from their batch headers
// alone, before the first batch's size, CRC or records are looked at (0 for none), in Apache's order,
// and the bytes to decode and append. Its request validation (ProduceRequest.validateRecords, reading
// each header as its batch iterator does: protocol.NextBatch) refuses records that do not begin with a
// whole batch, or whose first batch is not magic 2, with INVALID_RECORD, zstd below Produce v7 with
// UNSUPPORTED_COMPRESSION_TYPE (KIP-110), a corrupt header after the first batch with CORRUPT_MESSAGE
// and a whole second batch with INVALID_RECORD; its log (after the acks are checked) keeps the whole
// batches alone: bytes after the first batch that are not one are dropped, and max.message.bytes is
// held against the batch (and one shorter than a magic 2 header is refused: prepareProduce). A few
// bytes read per partition, none per record.
func batchHeadError(version int16, records []byte) (code int16, batch []byte) {
	size, magic, corrupt := protocol.NextBatch(records)
	switch {
	case corrupt: // refused with the whole request (requestRecordsError)
		return kerr.CorruptMessage.Code, nil
	case size == 0, magic != 2:
		return kerr.InvalidRecord.Code, nil
	}
	// At least 26 bytes of magic 2: its attributes are there, whatever its length.
	h := protocol.Batch{}
	h.Attributes, _ = protocol.BatchAttributes(records[:size])
	next, _, nextCorrupt := protocol.NextBatch(records[size:])
	switch {
	case version < 7 && h.Compression() == protocol.CodecZstd:
		return kerr.UnsupportedCompressionType.Code, nil
	case nextCorrupt:
		return kerr.CorruptMessage.Code, nil
	case next > 0:
		return kerr.InvalidRecord.Code, nil
	}
	return 0, records[:size]
}

// nonZeroBaseOffset reports whether batch (batchHeadError's) is a whole magic 2 batch whose base offset
// is not 0.
func nonZeroBaseOffset(batch []byte) bool {
	h, ok := protocol.PeekBatch(batch)
	return ok && h.BaseOffset != 0
}

// supersededEntries marks the partition entries of req that a later entry for the same topic and
// partition replaces (nil when there are none). Apache keeps the last entry for a partition, which
// alone is appended and answered; appending each would store a client's repeated records twice.
func supersededEntries(req *kmsg.ProduceRequest) [][]bool {
	if !repeatsPartition(req) {
		return nil
	}
	n := 0
	for _, rt := range req.Topics {
		n += len(rt.Partitions)
	}
	seen := make(map[partKey]struct{}, n)
	var out [][]bool
	for ti := len(req.Topics) - 1; ti >= 0; ti-- {
		rt := &req.Topics[ti]
		for pi := len(rt.Partitions) - 1; pi >= 0; pi-- {
			k := partKey{rt.Topic, rt.Partitions[pi].Partition}
			if _, ok := seen[k]; !ok {
				seen[k] = struct{}{}
				continue
			}
			if out == nil {
				out = make([][]bool, len(req.Topics))
				for i := range out {
					out[i] = make([]bool, len(req.Topics[i].Partitions))
				}
			}
			out[ti][pi] = true
		}
	}
	return out
}

// repeatsPartition reports whether req may list a partition more than once, without allocating in
// the common case (no topic named twice, partition ids below 8192): supersededEntries then has
// nothing to do.
func repeatsPartition(req *kmsg.ProduceRequest) bool {
	if len(req.Topics) > 64 {
		return true // a pairwise check of the names would cost more than the map
	}
	for i := range req.Topics {
		for j := range i {
			if req.Topics[i].Topic == req.Topics[j].Topic {
				return true
			}
		}
	}
	var seen [8192 / 64]uint64
	for _, rt := range req.Topics {
		if len(rt.Partitions) < 2 {
			continue
		}
		clear(seen[:])
		for _, rp := range rt.Partitions {
			p := rp.Partition
			if p < 0 || p >= 8192 {
				return true // out of the bitset's range: the map decides
			}
			if seen[p/64]&(1<<(p%64)) != 0 {
				return true
			}
			seen[p/64] |= 1 << (p % 64)
		}
	}
	return false
}

// beforeTailCopy, set by tests, runs before each batch's copy for the tail cache.
var beforeTailCopy func()

// begin registers the job's appends with the tail cache and starts copying the records it keeps,
// which happens while Redis works on the append, off the produce path.
func (j *produceJob) begin() {
	if len(j.batches) == 0 {
		return
	}
	j.keys = make([]partKey, len(j.batches))
	for i, b := range j.batches {
		j.keys[i] = partKey{b.Topic, b.Partition}
	}
	j.copyOf, j.ticket = j.c.g.tail.begin(j.keys)
	if j.copyOf != nil {
		j.copies = make([]tailBatch, len(j.batches))
		j.copying.Go(func() {
			defer func() {
				// Not the connection's goroutine, which would recover it: a panic here ends the copy
				// alone, and the fetches at the end of these partitions read the records from Redis.
				if p := recover(); p != nil {
					j.copies = nil // complete, which adds them, waits for this goroutine first
					notePanic(j.c.log, "tail_copy", p, debug.Stack(), "panic copying records for the tail cache")
				}
			}()
			for i, b := range j.batches {
				if j.copyOf[i] {
					if beforeTailCopy != nil {
						beforeTailCopy()
					}
					j.copies[i] = copyBatch(b.Records, b.LogAppendTime)
				}
			}
		})
	}
}

// finish releases the job's tail cache registration (begin), once: fetches at the end of its
// partitions stop waiting for it.
func (j *produceJob) finish() {
	if !j.finished {
		j.finished = true
		j.c.g.tail.finish(j.keys, j.copyOf)
	}
}

// complete fills in the response from the results of the job's batches (after begin) and tells the
// tail cache and waiting fetches.
func (j *produceJob) complete(results []redisstore.AppendResult) (kmsg.Response, error) {
	c, g, req, resp, batches := j.c, j.c.g, j.req, j.resp, j.batches
	if len(batches) > 0 {
		defer j.finish()
		j.copying.Wait()
		for i, r := range results {
			sp := &resp.Topics[j.slots[i].t].Partitions[j.slots[i].p]
			if r.Err != nil {
				sp.ErrorCode = timedOutErrCode(r.Err)
				sp.LogAppendTime = -1
				if redisstore.IsUnavailable(r.Err) {
					c.log.Warn().Err(r.Err).Str("topic", batches[i].Topic).Int32("partition", batches[i].Partition).Msg("append failed")
				}
				continue
			}
			sp.BaseOffset, sp.LogStartOffset = r.BaseOffset, r.LogStartOffset
			b := batches[i]
			if r.Duplicate && b.LogAppendTime != 0 && r.HasFirstTimestamp {
				// As Apache answers a retry: with its original's append time, the one its records carry,
				// not the retry's. Once they are deleted (DeleteRecords, retention) the retry's time
				// stands: the producer state keeps no time.
				sp.LogAppendTime = r.FirstTimestamp
			}
			if !r.Duplicate {
				recordsProduced(b.Topic, len(b.Records))
				if j.copies != nil {
					g.tail.add(j.keys[i], j.ids[i], appended{base: r.BaseOffset, start: r.LogStartOffset, ticket: j.ticket}, j.copies[i])
				}
			}
			// A duplicate wakes long-polls too: its original may be an append whose answer was lost
			// with its Redis connection, which woke nobody.
			g.notify.notify(j.keys[i])
			g.publishAppend(b.Topic, b.Partition)
		}
	}
	if req.Acks == 0 {
		// No response, so a failure can only be signalled by closing the connection, as Apache does:
		// the client then refreshes metadata instead of writing into the void.
		for _, st := range resp.Topics {
			for _, sp := range st.Partitions {
				if sp.ErrorCode != 0 {
					return nil, fmt.Errorf("%w: %s/%d: %v", errAcksZeroFailed, st.Topic, sp.Partition, kerr.ErrorForCode(sp.ErrorCode))
				}
			}
		}
		return nil, nil
	}
	return resp, nil
}

var errAcksZeroFailed = errors.New("gateway: acks=0 produce failed")

// maxRecordHeaders bounds the headers of one record (Apache Kafka sets none): each header is a field
// of the record's stream entry, and the append script (Redis < 7, Redis 7.2+, Valkey, the embedded
// store) passes a record's fields to XADD as Lua values, of which a call takes a few thousand at most;
// the store refuses a record of more than redisstore.MaxRecordHeaders. One bound for every store, so
// a batch means the same everywhere (docs/COMPATIBILITY.md).
const maxRecordHeaders = 1000

// decodeProduceBatch validates and decodes one partition's records (the batch batchHeadError keeps)
// into a store batch, decompressing them into at most budget bytes, and returns the bytes
// decompression took. Records it refuses one by one (timestamps out of the topic's range) are listed
// in sp with its error message, as Apache's LogValidator lists them.
func (g *Gateway) decodeProduceBatch(topic string, partition int32, records []byte, t redisstore.Topic, now int64, budget int, sp *kmsg.ProduceResponseTopicPartition) (*redisstore.Batch, int, int16) {
	wire := wireRecordSlabs.Get().(*[]protocol.Record)
	used := cap(*wire) // cleared in full unless the decode shows what it took
	defer func() { putWireRecords(wire, used) }()
	decoded, err := protocol.DecodeBatchesInto(records, max(budget, 1), *wire) // 0 would mean its default
	if len(decoded) == 1 {
		if recs := decoded[0].Records; cap(recs) > cap(*wire) {
			*wire = recs[:0] // the slab had no room: the records' own is kept instead
		}
		used = len(decoded[0].Records)
	}
	switch {
	case errors.Is(err, protocol.ErrUnsupportedMagic):
		// Magic 0/1 is refused by batchHeadError, as Apache's ProduceRequest validation refuses it;
		// what gets here is a first header of a magic Kafka does not know (UNSUPPORTED_FOR_MESSAGE_FORMAT
		// is for a topic whose message format is older than the batch's).
		return nil, 0, kerr.InvalidRecord.Code
	case errors.Is(err, protocol.ErrBatchTooLarge):
		return nil, 0, kerr.MessageTooLarge.Code
	case errors.Is(err, protocol.ErrBadCRC):
		return nil, 0, kerr.CorruptMessage.Code // corrupted on the way: producers send it again
	case err != nil:
		// Well formed on the way, badly built (lengths, counts, records, compression): as on Apache,
		// not retriable, as a retry sends the same bytes.
		return nil, 0, kerr.InvalidRecord.Code
	case len(decoded) != 1 || len(decoded[0].Records) == 0:
		return nil, 0, kerr.InvalidRecord.Code
	}
	pb := &decoded[0]
	switch {
	// Apache Kafka's checks of a client's batch (LogValidator): the offset range matches the record
	// count, no control records, a sequence wherever there is a producer id.
	case int64(pb.LastOffsetDelta)+1 != int64(len(pb.Records)), pb.Control(),
		pb.ProducerID >= 0 && pb.BaseSequence < 0:
		return nil, 0, kerr.InvalidRecord.Code
	} // a transactional batch never gets here: prepareProduce refused its request (requestRecordsError)
	nh := 0
	for i := range pb.Records {
		if len(pb.Records[i].Headers) > maxRecordHeaders {
			return nil, 0, kerr.InvalidRecord.Code
		}
		nh += len(pb.Records[i].Headers)
	}
	logAppendTime := g.logAppendTime(t)
	if before, after, bounded := timestampBounds(t); bounded && !logAppendTime {
		if errs := timestampsOutOfRange(pb, now, before, after); errs != nil {
			msg := "One or more records have been rejected due to invalid timestamp"
			sp.ErrorRecords, sp.ErrorMessage = errs, &msg
			return nil, 0, kerr.InvalidTimestamp.Code
		}
	}
	b := &redisstore.Batch{
		Topic:         topic,
		Partition:     partition,
		Records:       redisstore.RecycledRecords(len(pb.Records)),
		ProducerID:    pb.ProducerID,
		ProducerEpoch: pb.ProducerEpoch,
		BaseSequence:  pb.BaseSequence,
		// A topic deleted while this request was on its way must not come back with its records.
		KnownPartition: partition < t.PartitionMeta,
	}
	if b.ProducerID < 0 {
		b.ProducerID = -1
	}
	if logAppendTime {
		b.LogAppendTime = now
	}
	headers := make([]redisstore.Header, 0, nh) // one allocation for every header of the batch
	for i := range pb.Records {
		r := &pb.Records[i]
		sr := &b.Records[i]
		sr.Timestamp, sr.Key, sr.Value = r.Timestamp, r.Key, r.Value
		if len(r.Headers) > 0 {
			from := len(headers)
			for _, h := range r.Headers {
				headers = append(headers, redisstore.Header{Key: h.Key, Value: h.Value})
			}
			sr.Headers = headers[from:len(headers):len(headers)]
		}
	}
	return b, pb.Decompressed + recordsHeld(len(b.Records), nh), 0
}

// timestampsOutOfRange lists the records of pb whose CreateTime timestamp is more than before ms
// before now or more than after ms after it, as Apache's LogValidator refuses them (a record without a
// timestamp, -1, passes): nil when there are none.
func timestampsOutOfRange(pb *protocol.Batch, now, before, after int64) []kmsg.ProduceResponseTopicPartitionErrorRecord {
	lo, hi := now-before, int64(math.MaxInt64) // now >= 0 and before >= 0: no overflow
	if after < math.MaxInt64-now {
		hi = now + after
	}
	var errs []kmsg.ProduceResponseTopicPartitionErrorRecord
	for i := range pb.Records {
		r := &pb.Records[i]
		if ts := r.Timestamp; ts != -1 && (ts < lo || ts > hi) {
			e := kmsg.NewProduceResponseTopicPartitionErrorRecord()
			e.RelativeOffset = int32(i)
			msg := fmt.Sprintf("Timestamp %d of message with offset %d is out of range. The timestamp should be within [%d, %d]",
				ts, pb.BaseOffset+int64(r.OffsetDelta), lo, hi)
			e.ErrorMessage = &msg
			errs = append(errs, e)
		}
	}
	return errs
}

// recordsHeld is the memory a store batch's n records with nh headers in all take until the request
// is answered (beyond their bytes, which alias the frame or the decompressed buffer).
func recordsHeld(n, nh int) int {
	return n*int(unsafe.Sizeof(redisstore.Record{})) + nh*int(unsafe.Sizeof(redisstore.Header{}))
}

// The records decoded from the wire are copied into the store's batch at once, and their slabs are
// recycled between produce requests (the store's records are recycled by the store:
// redisstore.RecycledRecords). Allocated afresh they were 88 bytes per record, and the garbage
// collections they brought on cost the gateway more than the decoding.
var wireRecordSlabs = sync.Pool{New: func() any { return new([]protocol.Record) }}

// maxRecycledWire bounds the slabs kept for reuse: a one-off request far larger than usual does not pin
// its memory.
const maxRecycledWire = 1 << 14

// putWireRecords hands back a slab of wire records whose first used held records, cleared: they
// point into a request's frame. (The rest is clear already: slabs go back cleared.)
func putWireRecords(p *[]protocol.Record, used int) {
	if cap(*p) > maxRecycledWire {
		return
	}
	clear((*p)[:used])
	*p = (*p)[:0]
	wireRecordSlabs.Put(p)
}
