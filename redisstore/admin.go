package redisstore

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// StreamMemory returns MEMORY USAGE of each partition's stream in bytes (0 for a missing stream).
func (s *Store) StreamMemory(ctx context.Context, topic string, partitions []int32) ([]int64, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(partitions))
	for i, p := range partitions {
		cmds[i] = pipe.MemoryUsage(ctx, s.keys.stream(topic, p))
	}
	_, _ = pipe.Exec(ctx)
	out := make([]int64, len(partitions))
	for i, c := range cmds {
		n, err := c.Result()
		switch {
		case err == redis.Nil:
		case err != nil:
			return nil, err
		default:
			out[i] = n
		}
	}
	return out, nil
}
