package gateway

// Fetch v4-v13.
//
// Reads each partition with one XRANGE from the requested offset (all partitions in one pipeline,
// together with their high watermark and log start offset; records at the end of a partition come
// from the tail cache, and so do the offsets when Redis ran this gateway's own append after the fetch
// arrived) and returns the records as one uncompressed magic-2 batch per contiguous run. When less
// than min_bytes is available the request long-polls up to max_wait_ms and is woken by appends to any
// partition it asked for (local appends directly, other gateways' through Redis pub/sub), never by a
// polling tick.
//
// Limits: partition_max_bytes and the response max_bytes bound the records returned, except that the
// first record of the response is always returned whole (KIP-74), so a consumer cannot get stuck. As
// on Apache, max_bytes is capped by the broker's fetch.max.bytes (kafka.fetch_max_bytes, 8 MiB by
// default where Apache's is 55 MiB: fetch_sizing.go), a max_bytes of 0 or less returns that first
// record alone, and min_bytes is capped at max_bytes.
// Offsets outside [log start, high watermark] -> OFFSET_OUT_OF_RANGE. v13 resolves topic IDs
// (UNKNOWN_TOPIC_ID for an unknown one).
//
// Deviations: fetch sessions (KIP-227) are declined: every response carries session id 0, so clients
// send full fetch requests (allowed by the KIP). Transactions are not supported, so the last stable
// offset equals the high watermark and isolation_level is ignored. Leader epochs are -1.

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/protocol"
	"github.com/kgate/kgate/redisstore"
)

// fetchPart is one requested partition and where its answer goes.
type fetchPart struct {
	key       partKey
	topicID   [16]byte
	offset    int64
	maxBytes  int32
	logAppend bool
	known     bool // the partition has a meta hash (redisstore.ReadRequest.KnownPartition)
	byID      bool // asked for by topic ID (v13): a deleted topic is UNKNOWN_TOPIC_ID
	resp      *kmsg.FetchResponseTopicPartition
	sizing    *partSizing
	// next is the offset after the last record of the response (offset when it has none); more
	// says records remain from there to the high watermark.
	next int64
	more bool
	pick recordPick // the records of its read the response takes
	// seen is the high watermark the fetch's latest read found (seenOK), a state of the partition
	// after the fetch arrived, and seenAt the tail cache's clock before that read: an own append
	// recorded after seenAt and based at or above seen answers the fetch (ownAppends).
	seen   int64
	seenAt uint64
	seenOK bool
}

func (c *conn) fetch(ctx context.Context, req *kmsg.FetchRequest) (kmsg.Response, error) {
	g := c.g
	resp := kmsg.NewPtrFetchResponse()
	if req.Version >= 7 && req.SessionEpoch != 0 && req.SessionEpoch != -1 {
		// Any epoch but 0 (open a session) and -1 (none) continues a session, and kgate never hands
		// one out, whatever the session id.
		resp.ErrorCode = kerr.FetchSessionIDNotFound.Code
		return resp, nil
	}
	var parts []fetchPart
	// Each topic is resolved once: a second registry lookup per topic would double the time a fetch
	// takes to fail while Redis is unreachable (every lookup of a stale cache waits out its timeout).
	resolved := make([]redisstore.Topic, len(req.Topics))
	for ti := range req.Topics {
		rt := &req.Topics[ti]
		st := kmsg.NewFetchResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		var (
			topic redisstore.Topic
			terr  error
		)
		if req.Version >= 13 {
			topic, terr = g.topics.byTopicID(ctx, rt.TopicID)
			if terr == redisstore.ErrUnknownTopic {
				terr = errUnknownTopicID
			}
		} else {
			topic, terr = g.topics.get(ctx, rt.Topic)
		}
		resolved[ti] = topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewFetchResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
			sp.RecordBatches = []byte{} // never null: librdkafka rejects a null record set
			switch {
			case terr == errUnknownTopicID:
				sp.ErrorCode = kerr.UnknownTopicID.Code
			case terr != nil:
				sp.ErrorCode = errCode(terr)
			case rp.Partition < 0 || rp.Partition >= topic.Partitions:
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	// Pointers into resp are taken once every append to it is done. A partition named more than once
	// is read once, at its first place, with its last entry's offset and limit, as Apache reads a
	// request's partitions into a map; its other entries are answered with its offsets and no records
	// (each read separately, one request could make Redis send its records thousands of times).
	var (
		seen map[partKey]int // index in parts, once there are many (a few are looked through)
		dups [][2]*kmsg.FetchResponseTopicPartition
	)
	indexOf := func(key partKey) (int, bool) {
		if seen == nil {
			for i := range parts {
				if parts[i].key == key {
					return i, true
				}
			}
			return 0, false
		}
		i, ok := seen[key]
		return i, ok
	}
	for ti := range req.Topics {
		rt := &req.Topics[ti]
		st := &resp.Topics[ti]
		topic := resolved[ti]
		logAppend := g.logAppendTime(topic)
		for pi, rp := range rt.Partitions {
			if st.Partitions[pi].ErrorCode != 0 {
				continue
			}
			key := partKey{topic.Name, rp.Partition}
			if i, ok := indexOf(key); ok {
				parts[i].offset, parts[i].maxBytes = rp.FetchOffset, rp.PartitionMaxBytes
				dups = append(dups, [2]*kmsg.FetchResponseTopicPartition{&st.Partitions[pi], parts[i].resp})
				continue
			}
			if seen == nil && len(parts) == 16 {
				seen = make(map[partKey]int)
				for i := range parts {
					seen[parts[i].key] = i
				}
			}
			if seen != nil {
				seen[key] = len(parts)
			}
			parts = append(parts, fetchPart{
				key: key, topicID: topic.ID, offset: rp.FetchOffset, maxBytes: rp.PartitionMaxBytes,
				logAppend: logAppend, known: rp.Partition < topic.PartitionMeta, byID: req.Version >= 13,
				resp: &st.Partitions[pi], sizing: sizingOf(key),
			})
		}
	}

	maxBytes, minBytes := responseLimits(req, g.cfg.FetchMaxBytes)
	wait := min(time.Duration(req.MaxWaitMillis)*time.Millisecond, maxFetchWait)
	if d := g.cfg.IdleTimeout; d > 0 {
		// A long poll holds the connection's read loop, which alone notices a client gone: waits no
		// longer than an idle connection is kept.
		wait = min(wait, d)
	}
	var (
		waiter *fetchWaiter
		keys   []partKey
		timer  *time.Timer
	)
	if wait > 0 && minBytes > 0 && len(parts) > 0 {
		keys = make([]partKey, len(parts))
		for i, p := range parts {
			keys[i] = p.key
		}
		// Registered before the first read so an append between the read and the wait is not missed.
		waiter = g.notify.register(keys)
		defer g.notify.unregister(waiter, keys)
		timer = time.NewTimer(wait)
		defer timer.Stop()
	}
	// Appends this gateway begins from now on may answer the fetch with their own offsets.
	arrival := g.tail.arrival()
	ahead := true // the first read may be answered by the read-ahead
	var rd fetchRead
	for rereads := 0; ; {
		redisstore.RecycleReads(rd.results) // a read this one replaces: nothing points into it
		rd = c.readFetch(ctx, parts, maxBytes, ahead, &arrival)
		ahead = false
		failed := rd.failed
		if (rd.partial || rd.short && rereads < maxShortRereads) && !failed && rd.bytes < int(minBytes) {
			// Records already in Redis may be missing from this answer (appended after the read-ahead
			// read, or by another gateway whose wake-up merged with that of our own append; or left
			// out by a read sized for larger records, a partition's first one): read afresh before
			// any waiting, as nothing may wake the fetch for them.
			if rd.short {
				rereads++
			}
			continue
		}
		if waiter == nil || failed || rd.bytes >= int(minBytes) {
			break
		}
		if fetchWaits != nil {
			fetchWaits(keys)
		}
		select {
		case <-waiter.ch:
			continue
		case <-timer.C:
		case <-g.quit: // shutdown cuts the wait short, and the connection is closed after the answer
		case <-ctx.Done():
		}
		// One last read after the deadline: Apache answers with whatever is there.
		redisstore.RecycleReads(rd.results)
		rd = c.readFetch(ctx, parts, maxBytes, false, &arrival)
		break
	}
	// Before the encoding, which it overlaps: a consumer catching up waits for this read next.
	if rd.failed || !c.readAheadAfter(parts, maxBytes) {
		c.dropSpeculation() // guesses readAheadAfter did not adopt: a miss
	}
	c.encodeFetch(parts, rd.results)
	redisstore.RecycleReads(rd.results) // the records are encoded (copied) into the response
	for _, p := range parts {
		if n := len(p.resp.RecordBatches); n > 0 {
			recordsFetched(p.key.topic, p.resp)
		}
	}
	for _, d := range dups {
		dup, first := d[0], d[1]
		dup.ErrorCode, dup.HighWatermark, dup.LastStableOffset, dup.LogStartOffset =
			first.ErrorCode, first.HighWatermark, first.LastStableOffset, first.LogStartOffset
	}
	return resp, nil
}

// maxFetchWait caps a fetch's max_wait: answering before it with fewer than min_bytes is allowed, and
// clients wait 0.5-5 s. A client that asked for days and went away held its connection, goroutine
// and file descriptor (and a place under kafka.max_connections) that long. Tests lower it.
var maxFetchWait = 30 * time.Second

// fetchChunk is the least a pooled buffer for a fetch's record batches holds: several partitions'
// small batches share one.
const fetchChunk = 64 << 10

// responseLimits are the request's max_bytes and min_bytes as Apache applies them: max_bytes capped
// at the gateway's fetch.max.bytes (capBytes), and 0 when not positive (the response then carries
// its first record alone, KIP-74); min_bytes capped at max_bytes.
func responseLimits(req *kmsg.FetchRequest, capBytes int32) (maxBytes, minBytes int32) {
	maxBytes = min(max(req.MaxBytes, 0), capBytes)
	return maxBytes, min(req.MinBytes, maxBytes)
}

// planReads sizes each partition's read from offset (next when fromNext is set, for a read-ahead).
// The response's max_bytes is shared by the partitions in request order, as Apache fills a response:
// each partition's count is also capped by what is expected to be left of it after the partitions
// before it, so a partition that cannot fit is not read at all (it gets no records this round; its
// offsets are still read). What a partition is expected to take is its count, or what its last read
// showed to be available when that is less (a partition caught up takes nothing), times its
// estimated encoded record size (large for a partition never read, fetch_sizing.go). The first
// partition expected to take anything is always read (KIP-74), even with no bytes left.
//
// A partition caught up at its last read takes nothing from the budget (a consumer's idle partitions
// must not crowd out its busy ones), but records may have come since: each such partition reads at
// most an equal share of max_bytes (at least one record while the caught-up partitions' reads come to
// less than max_bytes; the first is always read), so a fetch over many partitions that all got records
// meanwhile (a consumer back from a pause) reads about max_bytes from Redis, not each partition's limit
// nor a record of each. What it leaves behind comes with the next fetch, sized by what this one saw.
func planReads(parts []fetchPart, maxBytes int32, fromNext bool) []redisstore.ReadRequest {
	reqs := make([]redisstore.ReadRequest, len(parts))
	offsetOf := func(p *fetchPart) int64 {
		if fromNext {
			return p.next
		}
		return p.offset
	}
	// Each partition's last high watermark is loaded once: other connections' reads move it meanwhile.
	ends := make([]int64, len(parts))
	caughtUp := int64(0)
	for i := range parts {
		ends[i] = parts[i].sizing.end.Load()
		if ends[i] == offsetOf(&parts[i]) {
			caughtUp++
		}
	}
	left := int64(maxBytes)
	taken := false // a partition before this one is expected to take records
	// The caught-up partitions' reads come to max_bytes at most, their one record each included: a
	// record of each of thousands of partitions, larger than their shares, read gigabytes for a
	// response of max_bytes.
	caughtLeft, caughtRead := int64(maxBytes), false
	for i := range parts {
		p := &parts[i]
		offset := offsetOf(p)
		count, size := p.sizing.count(int64(p.maxBytes)), p.sizing.encodedSize()
		if left <= 0 && taken {
			count = 0
		} else {
			count = min(count, max(left, 0)/size+1)
		}
		expect := count
		if end := ends[i]; end >= 0 {
			expect = min(expect, max(end-offset, 0))
			if end == offset {
				count = min(count, max(int64(maxBytes)/caughtUp/size, 1))
				if caughtLeft <= 0 && caughtRead {
					count = 0
				}
				if count > 0 {
					caughtLeft -= count * size
					caughtRead = true
				}
			}
		}
		if expect > 0 {
			left -= expect*size + batchOverhead
			taken = true
		}
		if expect == 0 {
			expect = -1 // none: its reply, most often empty, is read into a small buffer
		}
		reqs[i] = redisstore.ReadRequest{Topic: p.key.topic, Partition: p.key.partition, Offset: offset, Count: count, Expect: expect,
			RecordBytes: p.sizing.stored.Load(), MaxBytes: int64(min(p.maxBytes, maxBytes)), KnownPartition: p.known}
	}
	return reqs
}

// readAheadAfter starts reading what the connection's next fetch will ask for when the response
// leaves records behind in some partition, or makes the fetch's speculative read that read-ahead when
// it guessed the offsets right (read_ahead.go).
func (c *conn) readAheadAfter(parts []fetchPart, maxBytes int32) (adopted bool) {
	more := false
	for i := range parts {
		more = more || parts[i].more
	}
	if !more || !c.wantReadAhead() {
		return false
	}
	reqs, ids := planReads(parts, maxBytes, true), topicIDs(parts)
	if len(c.specs) > 0 {
		if order := c.specs[0].order(reqs, ids); order != nil {
			c.adoptSpeculation(parts, order)
			return true
		}
	}
	c.startReadAhead(parts, reqs, ids)
	return false
}

func topicIDs(parts []fetchPart) [][16]byte {
	ids := make([][16]byte, len(parts))
	for i := range parts {
		ids[i] = parts[i].topicID
	}
	return ids
}

// encodeFetch encodes the records readFetch chose into the responses, in pooled buffers handed back
// once the response is written (conn.write).
func (c *conn) encodeFetch(parts []fetchPart, results []redisstore.ReadResult) {
	bufs := c.outBufs[:0]
	var chunk *[]byte // the pooled buffer the partitions' batches are being encoded into
	for i := range results {
		p := &parts[i]
		if p.pick.n == 0 {
			continue
		}
		need := p.pick.encoded
		if chunk == nil || cap(*chunk)-len(*chunk) < need {
			// Partitions share pooled chunks while their batches fit: a buffer each held 16 KiB or
			// more per partition until the response was written, 33 MB for a fetch of 2,000
			// partitions of one small record. A chunk is as large as the partitions left are
			// expected to need, up to fetchChunk: a fetch of one small record takes no more than it
			// would with a buffer per partition.
			chunk = getBuf(max(need, min(fetchChunk, need*(len(results)-i))))
			bufs = append(bufs, chunk)
		}
		at := len(*chunk)
		recs := results[i].Records[p.pick.from : p.pick.from+p.pick.n]
		out := encodeRecordPick((*chunk)[at:at], recs, p.logAppend)
		if unsafe.SliceData(out) == unsafe.SliceData((*chunk)[at:]) {
			*chunk = (*chunk)[:at+len(out)]
			p.resp.RecordBatches = out[:len(out):len(out)]
		} else { // outgrew the chunk (pick.encoded is exact, so never): a buffer of its own
			p.resp.RecordBatches = out
			bufs = append(bufs, &out)
		}
	}
	c.outBufs = bufs
}

// fetchWaits, when set (tests), is called each time a fetch of keys begins waiting for an append.
var fetchWaits func(keys []partKey)

// maxShortRereads bounds the reads a fetch below min_bytes makes at once because a read's entry count,
// not its byte limits, held it back (fetchRead.short): the second is sized by what the first found.
const maxShortRereads = 2

// fetchRead is what readFetch found.
type fetchRead struct {
	results []redisstore.ReadResult // of each partition
	bytes   int                     // record bytes the responses take
	failed  bool                    // a partition ended with an error, which answers the fetch at once
	// partial: the answer came from the read-ahead or this gateway's own appends, not from Redis now,
	// so records already in Redis may be missing from it.
	partial bool
	// short: a partition's read took every entry it asked for, within its byte limits, the partition
	// holds more, and a read sized by what this one found would ask for more entries.
	short bool
}

// readFetch reads every partition once (from the read-ahead when useAhead is set and it answers
// these reads; from this gateway's appends committed after the fetch arrived when they answer it
// (ownAppends), raising *arrival to the newest ticket of them, so a fetch still waiting reads afresh
// unless a newer own append answers), filling in the responses' offsets and errors and choosing each
// partition's records (fetchPart.pick), which encodeFetch encodes once the read is the answer.
func (c *conn) readFetch(ctx context.Context, parts []fetchPart, maxBytes int32, useAhead bool, arrival *uint64) fetchRead {
	var rd fetchRead
	if len(parts) == 0 {
		return rd
	}
	before := c.g.tail.now() // the results below are read after this (p.seenAt, readFresh)
	reqs := planReads(parts, maxBytes, false)
	var results []redisstore.ReadResult
	if useAhead && c.ahead != nil {
		ids := topicIDs(parts)
		ra := c.ahead
		order := ra.order(reqs, ids)
		c.speculate(ra, order, parts, maxBytes, ids, 1) // the next fetch's read, wanted soonest
		if results = c.takeReadAhead(ctx, order); results != nil && slices.ContainsFunc(results, readOK) {
			c.freshOffsets(ctx, reqs, results)
			if len(c.specs) > 0 {
				// The reads further ahead wait for the offsets' round trip, which would otherwise
				// wait in Redis behind their XRANGEs.
				c.speculate(ra, order, parts, maxBytes, ids, specDepth)
			}
		}
	}
	rd.partial = results != nil
	if !rd.partial {
		if results = c.ownAppends(parts, arrival); results == nil {
			results = c.readFresh(ctx, parts, reqs, before)
		} else {
			rd.partial = true
		}
	}
	budget := int(maxBytes)
	var atEnd []partKey // partitions read up to their high watermark: the tail cache keeps them
	for i := range results {
		r := &results[i]
		p := &parts[i]
		sp := p.resp
		p.next, p.more, p.pick = p.offset, false, recordPick{}
		if r.Err != nil {
			sp.ErrorCode = errCode(r.Err)
			rd.failed = true
			if errors.Is(r.Err, redisstore.ErrUnknownPartition) {
				if p.byID {
					sp.ErrorCode = kerr.UnknownTopicID.Code
				}
				c.g.topics.invalidateStale() // deleted through another gateway: the next lookup sees it
			}
			continue
		}
		sp.ErrorCode = 0
		sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = r.End, r.End, r.Start
		p.seen, p.seenAt, p.seenOK = r.End, before, true
		if p.offset < r.Start || p.offset > r.End {
			sp.ErrorCode = kerr.OffsetOutOfRange.Code
			rd.failed = true
			continue
		}
		limit := min(int(p.maxBytes), budget)
		pk := pickRecords(r.Records, p.offset, limit, rd.bytes == 0, p.logAppend)
		p.pick = pk
		p.sizing.observe(pk.n, pk.size, pk.encoded, r.End)
		p.next = nextOffset(r.Records, p.offset, pk.n)
		p.more = p.next < r.End
		switch {
		case !p.more:
			atEnd = append(atEnd, p.key)
		case reqs[i].Count == 0:
			// Planned nothing, the partitions before it expected to fill max_bytes: when they did
			// not (partitions never read here, taken for full until read), a read now, sized by what
			// this one found, reads it, where waiting would leave its records for max_wait.
			rd.short = true
		case pk.n > 0 && pk.n == len(r.Records) && pk.encoded < limit &&
			p.sizing.count(int64(p.maxBytes)) > reqs[i].Count:
			rd.short = true // a read now, sized by what this one found, asks for more
		case r.Cut && pk.n == len(r.Records) && pk.encoded < limit:
			rd.short = true // cut by its byte bound, which knows more once it has read (redisstore.ReadRequest.MaxBytes)
		}
		rd.bytes += pk.encoded
		budget -= pk.encoded
	}
	rd.results = results
	c.g.tail.watch(atEnd)
	return rd
}

// readOK says a read found its partition (records or not), without error.
func readOK(r redisstore.ReadResult) bool { return r.Err == nil }

// ownAppends answers a read from the tail cache alone, offsets included, when every partition's newest
// cached append was committed after the fetch arrived: it began after the fetch arrived (a ticket
// above *arrival), or it is based at or above the high watermark a read of the fetch found
// (tail_cache.go). It raises *arrival to the newest ticket it used; otherwise it is nil. A consumer
// keeping up is woken by such an append and then needs no Redis round trip, which would wait behind
// the next append's transaction in Redis. An answer from it below min_bytes is not waited on: the wake-up of
// another gateway's append, already in Redis, may have merged with that of this append.
func (c *conn) ownAppends(parts []fetchPart, arrival *uint64) []redisstore.ReadResult {
	var out []redisstore.ReadResult
	newest := *arrival
	for i := range parts {
		p := &parts[i]
		seen := int64(-1)
		if p.seenOK {
			seen = p.seen
		}
		recs, offs, ticket, ok := c.g.tail.ownAppend(p.key, p.topicID, p.offset, *arrival, seen, p.seenAt)
		if !ok {
			return nil
		}
		if out == nil {
			out = make([]redisstore.ReadResult, len(parts))
		}
		out[i] = redisstore.ReadResult{Offsets: offs, Records: recs}
		newest = max(newest, ticket)
	}
	*arrival = newest
	for _, r := range out {
		tailCacheOutcome(r.Records != nil)
	}
	return out
}

// tailWait bounds how long a fetch waits for this gateway's own appends to reach the tail cache
// before reading Redis: they are committed already and only their replies are being parsed.
const tailWait = 5 * time.Millisecond

// readFresh reads reqs, taking the records of partitions the tail cache holds from the cache (only
// their offsets come from Redis); a partition the cache turns out not to reach the high watermark of,
// even after this gateway's appends in flight to it are recorded, is read from Redis in a second
// round trip. since is the tail cache's clock taken before the reads (tailCache.await).
func (c *conn) readFresh(ctx context.Context, parts []fetchPart, reqs []redisstore.ReadRequest, since uint64) []redisstore.ReadResult {
	tail := c.g.tail
	var cached []int
	var counts []int64
	for i := range parts {
		if reqs[i].Count > 0 && tail.covers(parts[i].key, parts[i].topicID, parts[i].offset) {
			cached = append(cached, i)
			counts = append(counts, reqs[i].Count)
			reqs[i].Count = 0 // offsets only
		}
	}
	results := c.g.store.Read(ctx, reqs)
	for j, i := range cached {
		reqs[i].Count = counts[j]
	}
	if missed := awaitCached(ctx, tail, parts, results, cached, since); len(missed) > 0 {
		again := make([]redisstore.ReadRequest, len(missed))
		for j, i := range missed {
			again[j] = reqs[i]
		}
		for j, r := range c.g.store.Read(ctx, again) {
			results[missed[j]] = r
		}
	}
	return results
}

// awaitCached fills in the records of the cached partitions (their offsets in results) from the tail
// cache, waiting for this gateway's appends in flight at most tailWait in all, however many
// partitions wait, and returns those the cache does not hold up to the high watermark.
func awaitCached(ctx context.Context, tail *tailCache, parts []fetchPart, results []redisstore.ReadResult, cached []int, since uint64) (missed []int) {
	deadline := time.Now().Add(tailWait)
	for _, i := range cached {
		r := &results[i]
		if r.Err != nil || parts[i].offset < r.Start || parts[i].offset > r.End {
			continue // answered from the offsets alone
		}
		if recs := tail.await(ctx, parts[i].key, parts[i].topicID, parts[i].offset, r.End, since, time.Until(deadline)); recs != nil {
			r.Records = recs
			tailCacheOutcome(true)
		} else {
			missed = append(missed, i)
			tailCacheOutcome(false)
		}
	}
	return missed
}

// nextOffset is the offset after the first n records of recs at or after from (from when n is 0).
func nextOffset(recs []redisstore.Record, from int64, n int) int64 {
	for i := range recs {
		if recs[i].Offset >= from {
			if n == 0 {
				break
			}
			if i+n-1 < len(recs) {
				return recs[i+n-1].Offset + 1
			}
			break
		}
	}
	return from
}

// batchOverhead is the size of a record batch's header.
const batchOverhead = protocol.BatchHeaderLen

// recordPick is the records of a partition's response: recs[from:from+n] of its read, whose stored
// size is size (estimated as fetch sizing counts it: 20 bytes per record, plus its key, value and
// headers with 4 bytes each) and which encodeRecordPick writes in exactly encoded bytes.
type recordPick struct {
	from, n, size, encoded int
}

// pickRecords chooses the records from offset on that a response takes, until limit bytes; the first
// record is always taken when first is set (KIP-74). The choice is made, and its encoded size known
// exactly, before any encoding: the next read-ahead can start at once, and the encoding overlaps it.
func pickRecords(recs []redisstore.Record, offset int64, limit int, first, logAppend bool) recordPick {
	var pk recordPick
	pk.from = len(recs)
	for i := range recs {
		if recs[i].Offset >= offset {
			pk.from = i
			break
		}
	}
	var (
		run     int // records in the batch being sized
		base    int64
		firstTS int64
	)
	for i := pk.from; i < len(recs); i++ {
		r := &recs[i]
		fresh := run == 0 || startsBatch(r, base, run, firstTS, logAppend)
		if fresh {
			run, base, firstTS = 0, r.Offset, r.Timestamp
		}
		pr := protocol.Record{Timestamp: r.Timestamp, Key: r.Key, Value: r.Value, Headers: protocolHeaders(r.Headers)}
		add := protocol.RecordSize(&pr, int32(run), r.Timestamp-firstTS)
		if fresh {
			add += batchOverhead
		}
		// As Apache, only the first record of a response may take it past a limit; every batch a gap
		// or an append time starts counts its header.
		if pk.encoded+add > limit && !(first && pk.n == 0) {
			break
		}
		est := 20 + len(r.Key) + len(r.Value)
		for _, h := range r.Headers {
			est += len(h.Key) + len(h.Value) + 4
		}
		pk.encoded += add
		pk.size += est
		pk.n++
		run++
	}
	return pk
}

// startsBatch reports whether r, after run records of a batch based at base whose first timestamp is
// firstTS, begins a new batch: a gap (entries deleted natively) or, with LogAppendTime, a new append
// time does.
func startsBatch(r *redisstore.Record, base int64, run int, firstTS int64, logAppend bool) bool {
	return r.Offset != base+int64(run) || (logAppend && r.Timestamp != firstTS)
}

var recordPool = sync.Pool{New: func() any { s := make([]protocol.Record, 0, 256); return &s }}

// encodeRecordPick appends recs, the records a pickRecords chose, as batches of contiguous offsets.
func encodeRecordPick(dst []byte, recs []redisstore.Record, logAppend bool) []byte {
	rp := recordPool.Get().(*[]protocol.Record)
	run := (*rp)[:0]
	used := 0 // the most of run this call filled
	defer func() {
		// Cleared: its records are views of a Redis reply's buffer (up to megabytes), which a pooled
		// slice would otherwise keep alive for as long as the pool keeps it.
		clear(run[:max(used, len(run))])
		*rp = run[:0]
		recordPool.Put(rp)
	}()
	var base int64
	flush := func() {
		if len(run) > 0 {
			used = max(used, len(run))
			ts := protocol.TimestampCreateTime
			if logAppend {
				ts = protocol.TimestampLogAppendTime
			}
			dst = protocol.AppendBatch(dst, base, ts, run)
			run = run[:0]
		}
	}
	for i := range recs {
		r := &recs[i]
		if len(run) > 0 && startsBatch(r, base, len(run), run[0].Timestamp, logAppend) {
			flush()
		}
		if len(run) == 0 {
			base = r.Offset
		}
		run = append(run, protocol.Record{Timestamp: r.Timestamp, Key: r.Key, Value: r.Value, Headers: protocolHeaders(r.Headers)})
	}
	flush()
	return dst
}

// encodeRecords appends the records pickRecords chooses, returning the buffer, the records encoded and
// their stored size.
func encodeRecords(dst []byte, recs []redisstore.Record, offset int64, limit int, first, logAppend bool) ([]byte, int, int) {
	pk := pickRecords(recs, offset, limit, first, logAppend)
	return encodeRecordPick(dst, recs[pk.from:pk.from+pk.n], logAppend), pk.n, pk.size
}

// The store's headers are passed on as they are: redisstore.Header and protocol.Header are the same
// struct (this conversion stops compiling if they ever differ).
var _ = protocol.Header(redisstore.Header{})

func protocolHeaders(h []redisstore.Header) []protocol.Header {
	return unsafe.Slice((*protocol.Header)(unsafe.Pointer(unsafe.SliceData(h))), len(h))
}
