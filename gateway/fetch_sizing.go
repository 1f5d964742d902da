package gateway

import (
	"errors"
	"sync"
	"sync/atomic"
)

var errUnknownTopicID = errors.New("gateway: unknown topic id")

// recordSizes remembers per partition how large its records are and the high watermark its last read
// saw, so a fetch asks Redis for about as many entries as fit its byte limits instead of reading far
// more and discarding them. An entry is created once and then updated in place (no allocation per
// fetch), and dropped with its topic (forgetSizing).
var recordSizes = struct {
	sync.RWMutex
	m map[partKey]*partSizing
}{m: map[partKey]*partSizing{}}

// partSizing estimates a partition's record size from the reads that found records: the average
// record of a read raises the estimate at once and lowers it only halfway (track), so it follows the
// largest records seen lately. A partition whose sizes change (runs of small records between large
// ones) is then read for its large records, not for the last small ones; the price is some smaller
// reads after its records became smaller. Only the first read after its records grew can pull more
// than the limits allow (as many times more as they grew): no read can know the sizes of the entries
// it asks for.
type partSizing struct {
	stored  atomic.Int64 // estimated stored size of a record (as encodeRecords counts it); 0: none seen
	encoded atomic.Int64 // estimated bytes a record takes in a fetch response; 0: none seen
	end     atomic.Int64 // high watermark at the partition's last read; -1: not read yet
}

// defaultFetchMaxBytes is the default cap on a fetch response's records (Config.FetchMaxBytes,
// Apache's broker config fetch.max.bytes, whose default is 55 MiB). A response's records are read
// into the gateway's memory before they are written, and held again by the connection's read-ahead:
// a consumer of many partitions (franz-go asks for 50 MB) had each response bring 30-50 MB, the
// gateway and the client faulting in fresh memory for every one. At 8 MiB the gateway and franz-go
// spent 2.7 us of CPU per 1 KB record against 4.6 (64 partitions, one run each: 4 MiB 3.0, 16 MiB
// 2.9), 327k rec/s against 222k; a consumer still gets eight partitions' 1 MiB in one response.
const defaultFetchMaxBytes = 8 << 20

const (
	// A partition whose records were never seen is read as if they were large, and for at most
	// unseenReadCount entries: its first read cannot pull much more than its limit (32 entries of
	// 32 KiB fill 1 MiB, the usual partition limit), and the records it finds size the next read.
	unseenRecordSize = 32 << 10
	unseenReadCount  = 32
	maxReadCount     = 10000
)

func sizingOf(k partKey) *partSizing {
	recordSizes.RLock()
	ps := recordSizes.m[k]
	recordSizes.RUnlock()
	if ps != nil {
		return ps
	}
	recordSizes.Lock()
	defer recordSizes.Unlock()
	if ps = recordSizes.m[k]; ps == nil {
		ps = &partSizing{}
		ps.end.Store(-1)
		recordSizes.m[k] = ps
	}
	return ps
}

// forgetSizing drops what recordSizes holds of topic's partitions: the topic was deleted (or created
// again, its records and high watermarks no longer those seen).
func forgetSizing(topic string) {
	recordSizes.Lock()
	defer recordSizes.Unlock()
	for k := range recordSizes.m {
		if k.topic == topic {
			delete(recordSizes.m, k)
		}
	}
}

// count is how many entries to read for maxBytes of records.
func (ps *partSizing) count(maxBytes int64) int64 {
	if size := ps.stored.Load(); size > 0 {
		return min(max(maxBytes/size+1, 1), maxReadCount)
	}
	return min(max(maxBytes/unseenRecordSize+1, 1), unseenReadCount)
}

// encodedSize is the expected response bytes per record.
func (ps *partSizing) encodedSize() int64 {
	if n := ps.encoded.Load(); n > 0 {
		return n
	}
	if n := ps.stored.Load(); n > 0 {
		return n
	}
	return unseenRecordSize
}

// observe records what a read found: records encoded in encoded bytes (their stored size estimated at
// stored bytes), and the partition's high watermark.
func (ps *partSizing) observe(records, stored, encoded int, end int64) {
	if records > 0 {
		track(&ps.stored, int64(max(stored/records, 1)))
		track(&ps.encoded, int64(max(encoded/records, 1)))
	}
	if ps.end.Load() != end {
		ps.end.Store(end)
	}
}

// track moves a size estimate to the average size a read saw: up at once, down halfway.
func track(estimate *atomic.Int64, seen int64) {
	old, v := estimate.Load(), seen
	if old > seen {
		v = (old + seen) / 2
	}
	if v != old {
		estimate.Store(v)
	}
}
