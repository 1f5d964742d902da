package gateway

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// apiHandler answers one decoded request. A nil response sends nothing (acks=0); an error closes the
// connection.
type apiHandler func(ctx context.Context, c *conn, req kmsg.Request) (kmsg.Response, error)

type api struct {
	min, max int16
	handle   apiHandler // nil for Produce, which the read loop hands to the append queue
}

// handle adapts a typed handler to the table.
func handle[R kmsg.Request](fn func(*conn, context.Context, R) (kmsg.Response, error)) apiHandler {
	return func(ctx context.Context, c *conn, req kmsg.Request) (kmsg.Response, error) {
		r, ok := req.(R)
		if !ok {
			return nil, fmt.Errorf("gateway: request %T for handler of %T", req, r)
		}
		return fn(c, ctx, r)
	}
}

const (
	produceKey     = 0
	apiVersionsKey = 18
)

// supportedAPIs is the one table of what kgate speaks: ApiVersions advertises it, the read loop checks
// versions against it and dispatches through it. Floors are low on purpose: kafka-python, kafka-go and
// kafkajs pin old versions (see docs/COMPATIBILITY.md).
var supportedAPIs map[int16]api

func init() {
	supportedAPIs = map[int16]api{
		0:  {3, 9, nil}, // Produce: never dispatched here; conn.handleFrame queues it (enqueueProduce)
		1:  {4, 13, handle((*conn).fetch)},
		2:  {0, 8, handle((*conn).listOffsets)},
		3:  {0, 12, handle((*conn).metadata)},
		8:  {0, 9, handle((*conn).offsetCommit)},
		9:  {0, 9, handle((*conn).offsetFetch)},
		10: {0, 5, handle((*conn).findCoordinator)},
		11: {0, 9, handle((*conn).joinGroup)},
		12: {0, 4, handle((*conn).heartbeat)},
		13: {0, 5, handle((*conn).leaveGroup)},
		14: {0, 5, handle((*conn).syncGroup)},
		15: {0, 5, handle((*conn).describeGroups)},
		16: {0, 4, handle((*conn).listGroups)},
		18: {0, 3, handle((*conn).apiVersions)},
		19: {0, 7, handle((*conn).createTopics)},
		20: {0, 6, handle((*conn).deleteTopics)},
		21: {0, 2, handle((*conn).deleteRecords)},
		22: {0, 4, handle((*conn).initProducerID)},
		32: {0, 4, handle((*conn).describeConfigs)},
		37: {0, 3, handle((*conn).createPartitions)},
		42: {0, 2, handle((*conn).deleteGroups)},
		47: {0, 0, handle((*conn).offsetDelete)},
		60: {0, 1, handle((*conn).describeCluster)},
	}
}

func lookupAPI(key int16) (api, bool) {
	a, ok := supportedAPIs[key]
	return a, ok
}

// requestDeadline bounds ctx by a request's timeout_ms (nothing when it is 0 or less), so that a request
// naming many topics or partitions answers in about that time when Redis stalls, the items not reached
// with an error, instead of after a command timeout for each of them.
func requestDeadline(ctx context.Context, timeoutMillis int32) (context.Context, context.CancelFunc) {
	if timeoutMillis <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, time.Duration(timeoutMillis)*time.Millisecond)
}
