package redisstore

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// StreamMemory returns MEMORY USAGE of each partition's stream in bytes (0 for a missing stream), with
// an error for each partition: one pipeline per master, so on a Redis Cluster a master down fails its
// own partitions alone (perMaster).
func (s *Store) StreamMemory(ctx context.Context, topic string, partitions []int32) ([]int64, []error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	type answer struct {
		bytes int64
		err   error
	}
	res := perMaster(ctx, s, len(partitions), func(i int) string { return s.keys.stream(topic, partitions[i]) },
		func(ctx context.Context, idx []int) []answer {
			pipe := s.rdb.Pipeline()
			cmds := make([]*redis.IntCmd, len(idx))
			for k, i := range idx {
				cmds[k] = pipe.MemoryUsage(ctx, s.keys.stream(topic, partitions[i]))
			}
			_, _ = pipe.Exec(ctx)
			out := make([]answer, len(idx))
			for k, c := range cmds {
				if n, err := c.Result(); err != redis.Nil {
					out[k] = answer{n, err}
				}
			}
			return out
		}, func(a answer) bool { return a.err == nil }, answer{err: errMasterLagging})
	out, errs := make([]int64, len(partitions)), make([]error, len(partitions))
	for i, a := range res {
		out[i], errs[i] = a.bytes, a.err
	}
	return out, errs
}
