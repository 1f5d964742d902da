package gateway

import (
	"errors"
	"sync"
)

var errUnknownTopicID = errors.New("gateway: unknown topic id")

// recordSizes remembers the average stored record size per partition so a fetch asks Redis for about
// as many entries as fit its byte limit, instead of reading far more and discarding them.
var recordSizes sync.Map // partKey -> int

const (
	defaultRecordSize = 1024
	maxReadCount      = 10000
)

func (g *Gateway) estimateCount(k partKey, maxBytes int32) int64 {
	avg := defaultRecordSize
	if v, ok := recordSizes.Load(k); ok {
		avg = v.(int)
	}
	n := int64(maxBytes)/int64(max(avg, 1)) + 1
	return min(max(n, 1), maxReadCount)
}

func (g *Gateway) observeRecordSize(k partKey, records, bytes int) {
	if records == 0 {
		return
	}
	recordSizes.Store(k, max(bytes/records, 1))
}
