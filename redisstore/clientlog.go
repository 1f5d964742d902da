package redisstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// SetClientLog sends the messages the Redis client library logs by itself (a connection pool that
// could not dial, a cluster topology it could not load, a subscription connection it replaced) to
// logf, one call per message. Left alone, the library writes them to stderr as plain-text lines of its
// own, which break a log read as one JSON object per line. The library's logger is one per process,
// so this is too: call it once, before Open.
func SetClientLog(logf func(msg string)) {
	redis.SetLogger(clientLog(logf))
}

type clientLog func(msg string)

func (l clientLog) Printf(_ context.Context, format string, v ...any) {
	l(strings.TrimSpace(fmt.Sprintf(format, v...)))
}
