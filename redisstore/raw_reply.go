package redisstore

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"

	pool "github.com/libp2p/go-buffer-pool"
)

// The append's and the fetch's replies are read raw (go-redis's RawWriteToCmd and RawCmd) rather than
// as values, which the client library builds as a boxed string per bulk string and a slice per array:
//   - an append of n records gets n "+QUEUED" replies and an EXEC reply of n entry IDs before the
//     finish function's answer; reading those as values cost four allocations per record, three
//     quarters of what an append allocated. The QUEUED replies are discarded unread (a command refused
//     when queued makes EXEC answer EXECABORT, which is read here); of the EXEC reply only the finish
//     function's answer is parsed, the entry IDs skipped in place.
//   - an XRANGE reply of n entries cost some sixteen allocations per record as values; read raw, it is
//     one buffer, and the records' keys, values and headers are views of it (parseEntries).

// replyError is an error reply of Redis's, read raw. It satisfies redis.Error, so redis.HasErrorPrefix
// and the store's error classification see it as they see the client library's own.
type replyError string

func (e replyError) Error() string { return string(e) }

// RedisError marks replyError as a server's error reply (redis.Error).
func (replyError) RedisError() {}

var errMalformedExec = errors.New("redisstore: append: malformed EXEC reply")

// execReply reads a batch's raw EXEC reply: an array of the n XADD replies, then finishScript's answer.
func execReply(raw []byte, n int) AppendResult {
	r := respReader{b: raw}
	kind, line, ok := r.line()
	switch {
	case !ok:
		return AppendResult{Err: errMalformedExec}
	case kind == '-':
		return AppendResult{Err: replyError(line)} // EXECABORT (a command refused when queued), MOVED
	case kind != '*':
		return AppendResult{Err: fmt.Errorf("redisstore: append: unexpected EXEC reply %.100q", raw)}
	}
	if count, ok := respInt(line); !ok || count != int64(n)+1 {
		return AppendResult{Err: fmt.Errorf("redisstore: append: EXEC reply of %s replies for %d commands", line, n+1)}
	}
	for range n {
		// An entry ID, or an error the finish function then sees as entries missing.
		if !r.skipIDOrError() {
			return AppendResult{Err: errMalformedExec}
		}
	}
	kind, line, ok = r.line()
	switch {
	case !ok:
		return AppendResult{Err: errMalformedExec}
	case kind == '-':
		return AppendResult{Err: replyError(line)}
	case kind != '*':
		return AppendResult{Err: fmt.Errorf("redisstore: append: unexpected script reply of type %q", kind)}
	}
	k, ok := respInt(line)
	if !ok || k < 2 || k > 8 {
		return AppendResult{Err: fmt.Errorf("redisstore: append: unexpected script reply of %s values", line)}
	}
	var vals [8]int64
	for i := range k {
		kind, line, ok = r.line()
		if !ok || kind != ':' {
			return AppendResult{Err: errMalformedExec}
		}
		if vals[i], ok = respInt(line); !ok {
			return AppendResult{Err: errMalformedExec}
		}
	}
	if r.at != len(raw) {
		return AppendResult{Err: errMalformedExec}
	}
	return scriptAnswer(vals[:k])
}

// isErrorReply reports whether raw is an error reply.
func isErrorReply(raw []byte) bool { return len(raw) > 0 && raw[0] == '-' }

// appendRESP appends v, a reply as the client library's values (strings, integers, arrays of them),
// in RESP2.
func appendRESP(dst []byte, v any) []byte {
	switch v := v.(type) {
	case string:
		dst = append(strconv.AppendInt(append(dst, '$'), int64(len(v)), 10), "\r\n"...)
		return append(append(dst, v...), "\r\n"...)
	case int64:
		return append(strconv.AppendInt(append(dst, ':'), v, 10), "\r\n"...)
	case []any:
		dst = append(strconv.AppendInt(append(dst, '*'), int64(len(v)), 10), "\r\n"...)
		for _, e := range v {
			dst = appendRESP(dst, e)
		}
		return dst
	case nil:
		return append(dst, "$-1\r\n"...)
	}
	return append(dst, "-ERR kgate: unexpected reply value\r\n"...) // read as an error reply
}

// respReader walks a raw RESP reply.
type respReader struct {
	b  []byte
	at int
}

// line returns the next line's type byte and the rest of it, without its CRLF.
func (r *respReader) line() (kind byte, rest []byte, ok bool) {
	for i := r.at; i+1 < len(r.b); i++ {
		if r.b[i] == '\r' && r.b[i+1] == '\n' {
			if i == r.at {
				return 0, nil, false
			}
			kind, rest = r.b[r.at], r.b[r.at+1:i]
			r.at = i + 2
			return kind, rest, true
		}
	}
	return 0, nil, false
}

// skipIDOrError passes over a bulk string or an error reply.
func (r *respReader) skipIDOrError() bool {
	if r.at < len(r.b) && r.b[r.at] == '-' {
		_, _, ok := r.line()
		return ok
	}
	_, ok := r.bulk()
	return ok
}

// bulk reads a bulk string: a view of the reply's bytes, capacity clipped.
func (r *respReader) bulk() ([]byte, bool) {
	kind, line, ok := r.line()
	if !ok || kind != '$' {
		return nil, false
	}
	size, ok := respInt(line)
	if !ok || size < 0 || size > int64(len(r.b)-r.at-2) {
		return nil, false
	}
	start, end := r.at, r.at+int(size)
	if r.b[end] != '\r' || r.b[end+1] != '\n' {
		return nil, false
	}
	r.at = end + 2
	return r.b[start:end:end], true
}

// entryHead reads the start of a stream entry, [id, [field, value, ...]], up to its first field: the
// ID and the number of field-value pairs that follow.
func (r *respReader) entryHead() (id []byte, pairs int64, ok bool) {
	if kind, line, ok := r.line(); !ok || kind != '*' || string(line) != "2" {
		return nil, 0, false
	}
	if id, ok = r.bulk(); !ok {
		return nil, 0, false
	}
	kind, line, ok := r.line()
	if !ok || kind != '*' {
		return nil, 0, false
	}
	n, ok := respInt(line)
	if !ok || n < 0 || n%2 != 0 || n > int64(len(r.b)) {
		return nil, 0, false
	}
	return id, n / 2, true
}

// respInt parses a reply's decimal integer (no allocation, unlike strconv on a converted string).
func respInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	switch {
	case neg && v <= 1<<63:
		return int64(-v), true // -v wraps to the two's complement, right for -(1<<63) too
	case !neg && v <= 1<<63-1:
		return int64(v), true
	}
	return 0, false
}

// replyBuffer collects one raw reply, written by go-redis's RawWriteToCmd: lines through Write, bulk
// strings through ReadFrom, straight from the client's read buffer into one slice that doubles as it
// grows (the client library's own raw reply grows by a quarter at a time, which copied a 1 MiB reply
// some five times over). The slices come from replyBuffers and go back there when the records read
// into them are done with (RecycleReads), or as the buffer outgrows them.
type replyBuffer struct{ b []byte }

// replyBuffers holds reply buffers by power-of-two size. A consumer catching up reads a buffer of
// about a fetch's size per fetch; allocated anew each time, they were about half of the bytes a gateway
// allocated serving it (franz-go's own response buffers most of the rest), and returning freed memory
// to the kernel (madvise) alone took 6% of the CPU profile of such a run (BENCHMARKS-HISTORY.md, session 16).
var replyBuffers pool.BufferPool

// maxPooledReply is the largest buffer kept for reuse; larger ones (records of many megabytes) are left
// to the garbage collector.
const maxPooledReply = 16 << 20

func newReplyBuffer(sizeHint int) *replyBuffer {
	return &replyBuffer{b: replyBuffers.Get(max(sizeHint, 64))[:0]}
}

// room makes room for n more bytes. The outgrown slice goes back to the pool: nothing points into a
// reply while it is being read (records are parsed once it is whole).
func (w *replyBuffer) room(n int) {
	if cap(w.b)-len(w.b) < n {
		grown := replyBuffers.Get(len(w.b) + max(n, cap(w.b)))[:len(w.b)]
		copy(grown, w.b)
		w.recycle()
		w.b = grown
	}
}

// recycle hands the buffer's slice back to the pool; w must not be used after, nor anything that
// points into it.
func (w *replyBuffer) recycle() {
	if c := cap(w.b); c > 0 && c <= maxPooledReply {
		replyBuffers.Put(w.b[:0])
	}
	w.b = nil
}

func (w *replyBuffer) Write(p []byte) (int, error) {
	w.room(len(p))
	w.b = append(w.b, p...)
	return len(p), nil
}

// ReadFrom reads a bulk string's bytes, which go-redis hands over as an io.LimitedReader of their size.
func (w *replyBuffer) ReadFrom(r io.Reader) (int64, error) {
	if lr, ok := r.(*io.LimitedReader); ok && lr.N > 0 && lr.N <= math.MaxInt32 {
		w.room(int(lr.N))
	}
	var total int64
	for {
		if lr, ok := r.(*io.LimitedReader); ok && lr.N <= 0 {
			return total, nil // all read: no room wanted for the EOF
		}
		w.room(1)
		n, err := r.Read(w.b[len(w.b):cap(w.b)])
		w.b = w.b[:len(w.b)+n]
		total += int64(n)
		switch {
		case err == io.EOF:
			return total, nil
		case err != nil:
			return total, err
		}
	}
}
