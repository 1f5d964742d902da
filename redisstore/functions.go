package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"strings"

	"github.com/redis/go-redis/v9"
)

// On Redis 7+ the finish step of the transactional append is a Redis function (FCALL), not EVAL: EVAL
// carries the 3.2 KB script in every batch, which Redis reads and SHA1-hashes before each call. At 145
// records per batch that is 5% of Redis's CPU per record, and 12% at 48 (measured on the 64-partition
// produce benchmark's batches). Functions are kept in Redis's RDB and AOF and replicated, so, unlike the
// EVALSHA script cache, a restarted or failed-over master still has them.
//
// A master can still lack the library: an operator's FUNCTION FLUSH, or a new cluster node that took
// over slots. FCALL then fails inside the MULTI block after the batch's XADDs ran, leaving entries past
// the high watermark that no fetch returns. appendMulti repairs that on the same connection: repairScript
// removes the entries past the high watermark (outside a MULTI block every entry kgate keeps is below
// it), the library is loaded again and the batch retried, with EVAL if loading fails; so are the later
// blocks of its partition in the pipeline, in order, which the chain (batchLua) refused: stored ahead
// of the retried one, they would reorder the partition. The retry goes on with the pipeline's chain
// (each block keeps its link), so the first block retried waits for the token of the block before it:
// one that failed otherwise (OOM, any error reply) stops the retried blocks of its partition too.

// finishLibrary is finishScript as a function library. Its name carries a hash of the code, so gateways
// of different versions sharing one Redis each call their own.
var finishLibrary, finishFunction = func() (string, string) {
	sum := sha1.Sum([]byte(finishScript))
	name := "kgate_" + hex.EncodeToString(sum[:8])
	fn := name + "_finish"
	// Parameters named KEYS and ARGV let the script body run unchanged.
	return "#!lua name=" + name + "\nredis.register_function('" + fn + "', function(KEYS, ARGV)\n" +
		finishScript + "\nend)\n", fn
}()

var cmdFCALL = "FCALL"

// loadFunctions loads finishLibrary on the store's Redis (every master of a cluster) and reports
// whether appends may call it.
func (s *Store) loadFunctions(ctx context.Context) bool {
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, loadLibrary) == nil
	case *redis.Client:
		return loadLibrary(ctx, c) == nil
	}
	return false
}

// loadLibrary loads finishLibrary on c.
func loadLibrary(ctx context.Context, c *redis.Client) error {
	return libraryLoaded(c.FunctionLoad(ctx, finishLibrary).Err())
}

// libraryLoaded is the error of a FUNCTION LOAD of finishLibrary, but for a library already loaded.
func libraryLoaded(err error) error {
	if err != nil && strings.Contains(err.Error(), "already exists") {
		return nil
	}
	return err
}

// isFunctionMissing reports a FCALL refused because the master lacks the library.
func isFunctionMissing(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Function not found")
}

// removePastLua defines removePast(stream, nxt): it deletes a partition stream's entries past offset
// nxt (IDs 0-(nxt+1) and up; IDs of another form are not kgate's, and are left for the next append to
// report as a conflict) and sets the stream's last ID and entries-added counter back, so the entries
// leave no trace but for the max-deleted-entry-id mark. XSETID cannot lower that mark (0-0 means
// "unchanged"), so XINFO GROUPS may report a null lag until appends pass the deleted IDs again.
// Returns the number of entries removed.
const removePastLua = `
local function removePast(stream, nxt)
  local from, removed = string.format('0-%d', nxt + 1), 0
  while true do
    local ents = redis.call('XRANGE', stream, from, '0-18446744073709551615', 'COUNT', 1000)
    if #ents == 0 then break end
    local ids = {}
    for i, e in ipairs(ents) do ids[i] = e[1] end
    removed = removed + redis.call('XDEL', stream, unpack(ids))
  end
  if removed > 0 then
    local info = redis.call('XINFO', 'STREAM', stream)
    local added = removed
    for i = 1, #info, 2 do
      if info[i] == 'entries-added' then added = info[i + 1] end
    end
    redis.call('XSETID', stream, string.format('0-%d', nxt), 'ENTRIESADDED', added - removed)
  end
  return removed
end
`

// repairScript removes the entries past a partition's high watermark (removePast). KEYS: stream, meta.
var repairScript = redis.NewScript(removePastLua + `
return removePast(KEYS[1], tonumber(redis.call('HGET', KEYS[2], 'next')) or 0)
`)

// queueRepairs queues repairScript for each of batches' partitions on pipe.
func (s *Store) queueRepairs(ctx context.Context, pipe redis.Pipeliner, batches []*Batch) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(batches))
	for i, b := range batches {
		cmds[i] = repairScript.Eval(ctx, pipe, []string{s.keys.stream(b.Topic, b.Partition), s.keys.meta(b.Topic, b.Partition)})
	}
	return cmds
}

// repairMissingFunction handles the batches (indexes into batches) whose FCALL found no library on c:
// removes what their XADDs left past the high watermark, loads the library on c and appends them
// again (with EVAL if the library cannot be loaded) with their links of the first pipeline's chain
// (links), storing the results in out.
func (s *Store) repairMissingFunction(ctx context.Context, c pipeliner, batches []*Batch, out []AppendResult, failed []int, links chain) {
	broken := make([]*Batch, len(failed))
	for j, i := range failed {
		broken[j] = batches[i]
	}
	pipe := c.Pipeline()
	repairs := s.queueRepairs(ctx, pipe, broken)
	load := pipe.FunctionLoad(ctx, finishLibrary)
	_, _ = pipe.Exec(ctx)
	var retry []*Batch
	var retried []int
	for j, i := range failed {
		if err := repairs[j].Err(); err != nil {
			out[i] = AppendResult{Err: err}
			continue
		}
		retry, retried = append(retry, batches[i]), append(retried, i)
	}
	if libraryLoaded(load.Err()) != nil {
		s.functionsUnavailable()
	}
	if len(retry) == 0 {
		return
	}
	res := make([]AppendResult, len(retry))
	s.appendMultiOnce(ctx, c, retry, res, links.of(retried))
	var still []*Batch // the library went missing again (a failover in between): clean up, and fail
	for k, i := range retried {
		out[i] = res[k]
		if isFunctionMissing(res[k].Err) {
			still = append(still, batches[i])
		}
	}
	if len(still) > 0 {
		pipe := c.Pipeline()
		s.queueRepairs(ctx, pipe, still)
		_, _ = pipe.Exec(ctx)
	}
}
