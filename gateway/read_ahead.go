package gateway

import (
	"context"
	"runtime/debug"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/kgate/kgate/redisstore"
)

// A consumer catching up on a backlog asks for the records right after the ones it was just sent,
// and asks only once it has decoded them. A connection therefore reads those records from Redis in
// the background as soon as a fetch has chosen its records, while the response is encoded, travels
// and the client decodes it: the XRANGE round trip and the reply parsing (most of the gateway's cost
// per fetched record) then overlap the client's work instead of adding to it.
//
// Only the records of the read-ahead are used, never its offsets: entries are immutable once written,
// so the fetch that uses them reads each partition's log start offset and high watermark afresh (one
// HMGET each, in one round trip) and answers exactly as a fresh read would, except that records
// appended after the read-ahead are left for the next fetch. It is used only by the next fetch of the
// same connection asking for the same partitions (in any order) at the offsets where the last
// response ended, of the same topic incarnations (topic IDs); and only when it holds enough bytes to
// answer at once (otherwise the fetch reads afresh before long-polling, so an append made since is not
// missed). A connection keeps at most one read-ahead, dropped when the next fetch does not match or
// after readAheadKeep unused, and at most specDepth speculative reads (speculate); the connection
// waits for its reads when it closes.

// readAheadKeep is how long an unused read-ahead holds its records (a paused consumer's connection
// should not keep a response's worth of memory), counted from its read's end or from when a guess
// became the read-ahead, whichever is later: a guess read two fetches early waits for two fetches. A
// variable for tests.
var readAheadKeep = 5 * time.Second

type readAhead struct {
	reqs   []redisstore.ReadRequest
	ids    [][16]byte // topic ID of each request
	took   []int64    // records of each partition the response before it took (speculate's guess)
	held   int64      // bytes a speculative read holds, estimated (specMaxBytes)
	cancel context.CancelFunc
	done   chan struct{} // closed once the read ended
	renew  chan struct{} // restarts readAheadKeep: a guess read two fetches early became the read-ahead

	mu  sync.Mutex
	res []redisstore.ReadResult // nil once expired
}

// startReadAhead reads reqs in the background for the connection's next fetch after the response to
// parts. reqs is owned by the read-ahead from here on.
func (c *conn) startReadAhead(parts []fetchPart, reqs []redisstore.ReadRequest, ids [][16]byte) {
	c.dropReadAhead()
	c.ahead = c.newReadAhead(reqs, ids)
	c.ahead.took = tookOf(parts)
}

// tookOf is the records each of parts' responses took.
func tookOf(parts []fetchPart) []int64 {
	took := make([]int64, len(parts))
	for i := range parts {
		took[i] = int64(parts[i].pick.n)
	}
	return took
}

// A fetch that takes a read-ahead reading whole counts of entries of every partition (a consumer deep
// in a backlog) will most likely take as many records of each as the response before it did: records of
// a backlog are alike, and fetch sizing reads about as many entries as the byte limits take. The fetch
// then starts reading for the next one at once (speculate), from that guess, before the read-ahead has
// its records, and, once it has them and their fresh offsets, for the one after it, from the same
// guess: a read then has two fetch cycles to finish instead of part of one, while Redis, the gateway's
// parsing and the client's decoding compete for the same cores (one step ahead, a consumer of 1 KB
// records at one partition waited for its read-ahead a fifth of the time). A guess is used only if the
// response ends where it guessed (readAheadAfter); otherwise every guess is dropped and a read-ahead
// starts as before. At most specMaxBytes are read that way, counting each entry's reply bytes and its
// parsed record besides its stored size (specEntryOverhead): at a 1 MiB limit, two guesses of one
// partition of 1 KB records (1.2 MB each), one of 100-byte records (2.4 MB: their parsed records weigh
// more than their bytes). Where a read spans more partitions it already runs as many pipelines in
// parallel, and a second read in flight only competed for the CPU (1 KB x 8 partitions measured slower
// with it). The second guess waits for the fresh offsets' round trip, which otherwise waited in Redis
// behind its XRANGE, a response's worth of entries: 2.2 ms of a 4.4 ms fetch at 1 KB x 1 partition, 1.1
// ms with the guess started after it. The first cannot wait: 100-byte records at one partition, a guess
// deep, were 7-10% slower with it started after.
const (
	specMaxBytes      = 4 << 20
	specEntryOverhead = 80 + int64(unsafe.Sizeof(redisstore.Record{}))
)

// specDepth is how many fetches ahead a connection reads on guesses (speculate).
const specDepth = 2

// speculate extends c.specs, the reads for the fetches after parts' (max_bytes maxBytes, of the topics
// ids), up to depth of them, when ra, the read-ahead the fetch takes (order maps parts to its requests:
// readAhead.order), reads a whole count of entries of each partition: each guess takes the records of
// the read before it as the read-ahead's response took.
func (c *conn) speculate(ra *readAhead, order []int, parts []fetchPart, maxBytes int32, ids [][16]byte, depth int) {
	if order == nil || ra.took == nil {
		return
	}
	took := make([]int64, len(parts))
	for i, j := range order {
		took[i] = ra.took[j]
	}
	base, baseOrder := ra, order
	held := int64(0)
	if n := len(c.specs); n > 0 {
		base, baseOrder = c.specs[n-1], nil
		if !samePartitions(base.reqs, parts) {
			return
		}
		for _, s := range c.specs {
			held += s.held
		}
	}
	for chance := len(c.specs) == 0; len(c.specs) < depth; chance = false {
		guess, h := guessAfter(parts, base, baseOrder, took)
		if guess == nil || held+h > specMaxBytes {
			return
		}
		// Records of varied sizes make the guesses miss: after readAheadMaxMisses in a row, one
		// chance in readAheadRetry is taken (a fetch is one chance; extending the guesses it
		// started is not another), until one is used again.
		if chance && c.specMisses >= readAheadMaxMisses {
			if c.specSkipped++; c.specSkipped%readAheadRetry != 0 {
				return
			}
		}
		held += h
		s := c.newReadAhead(planReads(guess, maxBytes, true), ids)
		s.held = h
		c.specs = append(c.specs, s)
		base, baseOrder = s, nil
	}
}

// guessAfter is parts as the fetch after base's read would ask for them, each partition taking took
// records of it, and the bytes a read of them holds; nil when base reads a partition near its end or
// one whose response took nothing. order maps parts to base's requests (nil: the same order).
func guessAfter(parts []fetchPart, base *readAhead, order []int, took []int64) ([]fetchPart, int64) {
	guess := make([]fetchPart, len(parts))
	copy(guess, parts)
	held := int64(0)
	for i := range guess {
		j := i
		if order != nil {
			j = order[i]
		}
		r := base.reqs[j]
		if r.Count <= 0 || r.Expect != r.Count || took[i] <= 0 {
			return nil, 0
		}
		guess[i].next = r.Offset + min(r.Count, took[i])
		held += r.Count * (max(guess[i].sizing.stored.Load(), 1) + specEntryOverhead)
	}
	return guess, held
}

// samePartitions reports whether reqs read parts' partitions in parts' order.
func samePartitions(reqs []redisstore.ReadRequest, parts []fetchPart) bool {
	if len(reqs) != len(parts) {
		return false
	}
	for i := range parts {
		if reqs[i].Topic != parts[i].key.topic || reqs[i].Partition != parts[i].key.partition {
			return false
		}
	}
	return true
}

// readAheadRead is a read-ahead's read. A panic in it, recovered here (this goroutine is not the
// connection's, which would recover it and close the connection), is logged and fails the read as a
// Redis failure would: the fetch that takes it answers with a retriable error.
func (c *conn) readAheadRead(ctx context.Context, reqs []redisstore.ReadRequest) (res []redisstore.ReadResult) {
	defer func() {
		if p := recover(); p != nil {
			notePanic(c.log, "read_ahead", p, debug.Stack(), "panic reading ahead")
			res = make([]redisstore.ReadResult, len(reqs))
			for i := range res {
				res[i].Err = errPanic
			}
		}
	}()
	return c.g.store.Read(ctx, reqs)
}

// adoptSpeculation makes the nearest guess the read-ahead for the fetch after the one answering parts;
// order maps parts to the guess's requests, which follow the partition order of the fetch that made
// it (clients may reorder partitions between fetches), and took, the guess for the reads after it,
// follows that order too.
func (c *conn) adoptSpeculation(parts []fetchPart, order []int) {
	spec := c.specs[0]
	c.specs = slices.Delete(c.specs, 0, 1)
	c.specMisses = 0
	c.dropReadAhead()
	c.ahead = spec
	took := tookOf(parts)
	spec.took = make([]int64, len(took))
	for i, j := range order {
		spec.took[j] = took[i]
	}
	select {
	case spec.renew <- struct{}{}:
	default:
	}
	mReadAheadSpec.Inc()
}

// dropSpeculation cancels the speculative reads the fetch did not take, a miss.
func (c *conn) dropSpeculation() {
	if len(c.specs) > 0 {
		for _, s := range c.specs {
			s.cancel()
		}
		clear(c.specs)
		c.specs = c.specs[:0]
		c.specMisses++
	}
}

// newReadAhead starts reading reqs in the background.
func (c *conn) newReadAhead(reqs []redisstore.ReadRequest, ids [][16]byte) *readAhead {
	ctx, cancel := context.WithCancel(c.g.bgCtx)
	ra := &readAhead{reqs: reqs, ids: ids, cancel: cancel, done: make(chan struct{}), renew: make(chan struct{}, 1)}
	c.aheadWG.Go(func() {
		res := c.readAheadRead(ctx, ra.reqs)
		ra.mu.Lock()
		ra.res = res
		ra.mu.Unlock()
		close(ra.done)
		keep := time.NewTimer(readAheadKeep)
		defer keep.Stop()
		for kept := true; kept; {
			select {
			case <-ctx.Done(): // taken or dropped
				kept = false
			case <-keep.C:
				kept = false
			case <-ra.renew:
				keep.Reset(readAheadKeep)
			}
		}
		ra.mu.Lock()
		ra.res = nil
		ra.mu.Unlock()
	})
	return ra
}

// takeReadAhead returns the read-ahead's results in the order of the fetch's requests, order mapping
// them to the read-ahead's (readAhead.order: nil when it does not read exactly these partitions and
// offsets), waiting for a read still in flight; otherwise nil. Either way the read-ahead is used up.
// The results' offsets are those of the read-ahead: the caller replaces them (freshOffsets), but for
// the results that carry the read-ahead's failure.
func (c *conn) takeReadAhead(ctx context.Context, order []int) []redisstore.ReadResult {
	ra := c.ahead
	if ra == nil {
		return nil
	}
	c.ahead = nil
	defer ra.cancel()
	out := ra.answer(ctx, order)
	readAheadOutcome(out != nil)
	if out == nil {
		c.aheadMisses++
	} else {
		c.aheadMisses = 0
	}
	return out
}

// Reading ahead for a client whose next fetch keeps asking for something else (one that leaves out
// partitions it still has records of, or changes its partitions between fetches) only adds Redis
// reads: after readAheadMaxMisses unused read-aheads in a row, a connection reads ahead only once in
// readAheadRetry opportunities, until one is used again.
const (
	readAheadMaxMisses = 3
	readAheadRetry     = 16
)

// wantReadAhead reports whether the connection should read ahead now.
func (c *conn) wantReadAhead() bool {
	if c.aheadMisses < readAheadMaxMisses {
		return true
	}
	c.aheadSkipped++
	return c.aheadSkipped%readAheadRetry == 0
}

// answer is the read-ahead's results in the fetch's order (order: readAhead.order), or nil when order
// is nil.
func (ra *readAhead) answer(ctx context.Context, order []int) []redisstore.ReadResult {
	if order == nil {
		return nil
	}
	select {
	case <-ra.done:
	case <-ctx.Done():
		return nil
	}
	ra.mu.Lock()
	res := ra.res
	ra.mu.Unlock()
	if res == nil {
		return nil // expired
	}
	out := make([]redisstore.ReadResult, len(order))
	for i, j := range order {
		if err := res[j].Err; err != nil && !redisstore.IsUnavailable(err) {
			// One partition's own answer (its topic deleted meanwhile): a miss, so the fetch reads
			// afresh and the other partitions get their records, not this error.
			return nil
		}
		// A partition whose read failed in Redis moments ago (every one, or on a Redis Cluster those
		// of a master down) answers its retriable error now rather than wait out a second timeout on
		// a fresh read; the others answer their records.
		out[i] = res[j]
	}
	return out
}

// order maps each of reqs to the read-ahead request of the same partition and offset, or is nil when
// the read-ahead does not cover reqs exactly.
func (ra *readAhead) order(reqs []redisstore.ReadRequest, ids [][16]byte) []int {
	if len(reqs) != len(ra.reqs) {
		return nil
	}
	order := make([]int, len(reqs))
	var at map[partKey]int // built at the first request out of place: a rotated request is O(N)
	for i, r := range reqs {
		j := i // usually the same order; otherwise look it up
		if a := ra.reqs[j]; a.Topic != r.Topic || a.Partition != r.Partition {
			if at == nil {
				at = make(map[partKey]int, len(ra.reqs))
				for k, a := range ra.reqs {
					at[partKey{a.Topic, a.Partition}] = k
				}
			}
			k, ok := at[partKey{r.Topic, r.Partition}]
			if !ok {
				return nil
			}
			j = k
		}
		if ra.reqs[j].Offset != r.Offset || ra.ids[j] != ids[i] {
			return nil
		}
		order[i] = j
	}
	return order
}

// freshOffsets replaces the offsets of read-ahead results with the partitions' current ones (read
// now, without entries) and keeps only the records inside them, as a fresh read would: a record below
// a log start offset that moved since is gone. Results that carry the read-ahead's failure keep it,
// and are not read again.
func (c *conn) freshOffsets(ctx context.Context, reqs []redisstore.ReadRequest, res []redisstore.ReadResult) {
	only := make([]redisstore.ReadRequest, 0, len(reqs))
	at := make([]int, 0, len(reqs))
	for i, r := range reqs {
		if res[i].Err == nil {
			only = append(only, redisstore.ReadRequest{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, KnownPartition: r.KnownPartition})
			at = append(at, i)
		}
	}
	if len(only) == 0 {
		return
	}
	for k, now := range c.g.store.Read(ctx, only) {
		r := &res[at[k]]
		r.Offsets, r.Err = now.Offsets, now.Err
		r.Records = r.Offsets.Clip(r.Records, reqs[at[k]].Offset)
	}
}

// dropReadAhead cancels the connection's read-ahead, if any, without waiting for it.
func (c *conn) dropReadAhead() {
	if c.ahead != nil {
		c.ahead.cancel()
		c.ahead = nil
		readAheadOutcome(false)
	}
}

// closeReadAhead stops every read-ahead of a closing connection and waits for their goroutines (each
// ends within the store's command timeout).
func (c *conn) closeReadAhead() {
	c.dropReadAhead()
	c.dropSpeculation()
	c.aheadWG.Wait()
}
