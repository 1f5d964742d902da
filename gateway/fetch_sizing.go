package gateway

import (
	"errors"
	"sync"
	"sync/atomic"
)

var errUnknownTopicID = errors.New("gateway: unknown topic id")

// recordSizes remembers per partition the average size of its records and the high watermark its last
// read saw, so a fetch asks Redis for about as many entries as fit its byte limits instead of reading
// far more and discarding them. An entry is created once and then updated in place (no allocation
// per fetch), and dropped with its topic (forgetSizing).
var recordSizes = struct {
	sync.RWMutex
	m map[partKey]*partSizing
}{m: map[partKey]*partSizing{}}

type partSizing struct {
	stored  atomic.Int64 // average stored size of a record (as encodeRecords estimates it); 0: none seen
	encoded atomic.Int64 // average bytes a record takes in a fetch response; 0: none seen
	end     atomic.Int64 // high watermark at the partition's last read; -1: not read yet
}

const (
	defaultRecordSize = 1024
	maxReadCount      = 10000
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
	avg := ps.stored.Load()
	if avg <= 0 {
		avg = defaultRecordSize
	}
	return min(max(maxBytes/avg+1, 1), maxReadCount)
}

// encodedSize is the expected response bytes per record.
func (ps *partSizing) encodedSize() int64 {
	if n := ps.encoded.Load(); n > 0 {
		return n
	}
	if n := ps.stored.Load(); n > 0 {
		return n
	}
	return defaultRecordSize
}

// observe records what a read found: records encoded in encoded bytes (their stored size estimated at
// stored bytes), and the partition's high watermark.
func (ps *partSizing) observe(records, stored, encoded int, end int64) {
	if records > 0 {
		if v := int64(max(stored/records, 1)); ps.stored.Load() != v {
			ps.stored.Store(v)
		}
		if v := int64(max(encoded/records, 1)); ps.encoded.Load() != v {
			ps.encoded.Store(v)
		}
	}
	if ps.end.Load() != end {
		ps.end.Store(end)
	}
}
