package redisstore

import (
	"context"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// batchLua holds what both append paths (appendScript, and finishScript of the transactional append)
// do around the records themselves: reading the partition's meta, the idempotent-producer check and
// the bookkeeping after an accepted batch.
//
// A producer's idempotence state is the field "p:<producer id>" of the partition's meta hash, so the
// HMGET that reads the high watermark reads it too and one HSET writes both: each redis.call costs
// Redis about 2.5-5 us, as much as a few XADDs, once per batch. (Measured with the append's Redis CPU
// against plain XADDs, 64 partitions: the two calls this saves were 3-9 us of the finish step's 50-90
// us per batch.) State that an older kgate kept in the producers hash is read there when meta has
// none, and moved at the producer's next accepted batch.
//
// checkProducer returns, for a batch that must not be stored, the script's answer ({original base
// offset, log start, 1, the timestamp of the original's first record} for a duplicate of one of the
// producer's last five batches, without the timestamp once that record is deleted; {-1, 47} for a
// fenced epoch; {-1, 45} for a sequence gap), else nil with the producer state's entries (its list
// after epoch and last sequence, unparsed), the batch's last sequence and whether the state came from
// the producers hash. The next batch in sequence, a producer's usual case, is accepted from the
// state's first two numbers alone; only a batch out of sequence has the entries parsed.
//
// A producer's state comes with the field "t:<producer id>", the time (ms) of its last accepted batch,
// by which ExpireProducers drops the state of producers idle for long: the appending gateway's clock
// (finishBatch's now), as ExpireProducers' cutoff is a gateway's; Redis's TIME where the caller passes
// none (appendScript). A redis.call('TIME') per batch was about 9% of the finish function's time (74
// us a call at 66 records a batch, on session 18's machine), and the expiry is a day by default.
//
// finishBatch moves the high watermark, records the batches just stored (subs, "first seq:last
// seq:base offset", newest first) ahead of the state's entries, five at most, and saves the producer
// state, all in one HSET. From the k candidate pairs (record index, timestamp) starting at ARGV[first]
// it keeps the partition's maximum timestamp and its offset in meta (maxts, maxoff) and adds to the
// time index the points where that maximum grows at least timeIndexStride (512) records after the
// index's last point (tioff). A ZADD is a redis.call and a zset insert, 5-8 us of Redis time: once per
// batch it was a fifth to an eighth of the finish step at the 20-150 records per batch a producer
// sends to many partitions; now it comes once per timeIndexStride records or more.
//
// A pipeline that carries several batches of one partition chains them (chainLinks): each but the
// last gives its script a token (tok) to add to the meta hash's field "chain" once it has run to an
// answer of its own (the batch stored, or refused by the producer check), and each but the first the
// token of the one before (after), without which it is refused before it keeps anything ({-1, -5}).
// Commands of a pipeline run one after the other but not as one: one can fail where the next succeeds
// (NOSCRIPT, the script cache flushed in between; the function library flushed; OOM), and a later
// batch must not be stored ahead of an earlier one of its partition that the caller appends again or
// the producer retries. readMeta reads the field; chainPass gives what finishBatch writes.
//
// The field holds the tokens of every chain under way on the partition (space-separated, newest
// first), not one: Redis runs other clients' commands between a pipeline's, so other connections'
// chains of the partition pass their tokens on between two batches of one chain. A batch takes its
// predecessor's token out as it adds its own, so the field holds one token per pipeline under way;
// a chain that broke off (a connection lost mid-pipeline, a batch appended again in a pipeline of its
// own) leaves one behind, and the oldest beyond chainTokens go.
var batchLua = strings.NewReplacer("TIME_INDEX_STRIDE", strconv.Itoa(timeIndexStride),
	"BYTES_INDEX_STRIDE", strconv.Itoa(bytesIndexStride), "RECORD_OVERHEAD", strconv.Itoa(recordOverhead),
	"CHAIN_TOKENS", strconv.Itoa(chainTokens)).Replace(batchLuaText)

// chainTokens is the most tokens a partition's "chain" field keeps (batchLua): more chains of one
// partition under way at once than that can have the oldest refused as broken (a retriable error).
const chainTokens = 32

const batchLuaText = `
local recordOverhead = RECORD_OVERHEAD
local function readMeta(meta, pid)
  local m = redis.call('HMGET', meta, 'next', 'start', 'maxts', 'tioff', 'p:' .. pid, 'bytes', 'chain')
  return tonumber(m[1]) or 0, tonumber(m[2]) or 0, {ts = tonumber(m[3]) or -1, at = tonumber(m[4]) or -1e18, bytes = tonumber(m[6])}, m[5], m[1] ~= false, m[7]
end
-- chained reports whether the batch before this one in its pipeline's chain (after: its token, '' for
-- none) has run to an answer: its token is among the partition's (chain, false for none).
local function chained(chain, after)
  if after == '' then return true end
  for t in string.gmatch(chain or '', '%S+') do
    if t == after then return true end
  end
  return false
end
-- chainPass is the partition's chain field once this batch has run to an answer: after taken out, tok
-- put first (each unless ''), the newest CHAIN_TOKENS kept; nil when the batch is in no chain.
local function chainPass(chain, after, tok)
  if after == '' and tok == '' then return nil end
  local out = {}
  if tok ~= '' then out[1] = tok end
  for t in string.gmatch(chain or '', '%S+') do
    if #out >= CHAIN_TOKENS then break end
    if t ~= after then out[#out + 1] = t end
  end
  return table.concat(out, ' ')
end
local function indexBytes(bindex, h, base, n, tix, add)
  local z, before = {}, tix.bytes
  if not before then
    -- Points already there belong to a topic of the same name deleted by a gateway that did not know
    -- the index (it left the key): they would size this partition's reads by another's records.
    redis.call('UNLINK', bindex)
    z[1], z[2], before = string.format('%d', base), '0', 0
  end
  local after = before + add
  if math.floor(after / BYTES_INDEX_STRIDE) > math.floor(before / BYTES_INDEX_STRIDE) then
    z[#z + 1], z[#z + 2] = string.format('%d', base + n), string.format('%d', after)
  end
  if #z > 0 then redis.call('ZADD', bindex, unpack(z)) end
  h[#h + 1], h[#h + 2] = 'bytes', string.format('%d', after)
end
local function checkProducer(stream, prods, pid, epoch, seq, n, start, st)
  if pid == '-1' then return nil, '', 0, false end
  local last = (seq + n - 1) % 2147483648
  local legacy = false
  if not st then
    st = redis.call('HGET', prods, pid)
    legacy = st ~= false
  end
  local sepoch, slast, kept = -1, -1, ''
  if st then
    local e, l, rest = string.match(st, '^(%-?%d+),(%-?%d+),?(.*)$')
    sepoch, slast, kept = tonumber(e), tonumber(l), rest
  end
  if epoch < sepoch then return {-1, 47} end
  if epoch > sepoch then
    -- A new epoch starts at sequence 0; a producer with no state here (never seen, or its state
    -- expired: ExpireProducers) may start anywhere, as on Apache.
    if seq ~= 0 and st then return {-1, 45} end
    return nil, '', last, legacy
  end
  -- The next batch in sequence cannot be a retry: the state's entries all end at or before slast.
  if seq == (slast + 1) % 2147483648 then return nil, kept, last, legacy end
  for f, l, o in string.gmatch(kept, '(%d+):(%d+):(%d+)') do
    if tonumber(f) == seq and tonumber(l) == last then
      -- The timestamp of the original's first record, while it is stored: on a LogAppendTime topic its
      -- append time, which Apache answers a duplicate with. Read on this path alone.
      local id = '0-' .. string.format('%d', tonumber(o) + 1)
      local e = redis.call('XRANGE', stream, id, id)
      if #e == 1 and e[1][2][1] == 'ts' then return {tonumber(o), start, 1, tonumber(e[1][2][2])} end
      return {tonumber(o), start, 1}
    end
  end
  return {-1, 45}
end
local function finishBatch(meta, tindex, bindex, prods, pid, epoch, subs, n, last, kept, legacy, base, tix, k, first, bytes, now, pass)
  local h, z, maxoff, indexed = {'next', string.format('%d', base + n)}, {}, nil, false
  for c = 0, k - 1 do
    local ts = tonumber(ARGV[first + 1 + 2 * c])
    if ts > tix.ts then
      tix.ts, maxoff = ts, base + tonumber(ARGV[first + 2 * c])
      if maxoff - tix.at >= TIME_INDEX_STRIDE then
        tix.at, indexed = maxoff, true
        z[#z + 1] = ARGV[first + 1 + 2 * c]
        z[#z + 1] = string.format('%d', maxoff)
        if #z == 1000 then redis.call('ZADD', tindex, unpack(z)); z = {} end
      end
    end
  end
  if #z > 0 then redis.call('ZADD', tindex, unpack(z)) end
  if maxoff then
    h[3], h[4], h[5], h[6] = 'maxts', string.format('%d', tix.ts), 'maxoff', string.format('%d', maxoff)
  end
  if indexed then h[#h + 1], h[#h + 2] = 'tioff', string.format('%d', tix.at) end
  indexBytes(bindex, h, base, n, tix, bytes)
  if pass then h[#h + 1], h[#h + 2] = 'chain', pass end
  if pid == '-1' then
    redis.call('HSET', meta, unpack(h))
    return
  end
  local st = {string.format('%d,%d', epoch, last)}
  for i = 1, math.min(#subs, 5) do st[#st + 1] = subs[i] end
  if #subs < 5 and kept ~= '' then
    -- kept's first 5 - #subs entries: cut before the comma that ends the last of them.
    local cut = 0
    for _ = 1, 5 - #subs do
      cut = string.find(kept, ',', cut + 1, true)
      if not cut then break end
    end
    st[#st + 1] = cut and string.sub(kept, 1, cut - 1) or kept
  end
  st = table.concat(st, ',')
  if not now then
    local t = redis.call('TIME')
    now = string.format('%d', t[1] * 1000 + math.floor(t[2] / 1000))
  end
  h[#h + 1], h[#h + 2] = 'p:' .. pid, st
  h[#h + 1], h[#h + 2] = 't:' .. pid, now
  redis.call('HSET', meta, unpack(h))
  if legacy then redis.call('HDEL', prods, pid) end
end
`

// appendScript appends one producer batch to a partition: the idempotence check, the XADDs, the time
// index and the high watermark move in one atomic step on the partition's slot. The per-record work is
// kept to one XADD: everything that can be computed outside Redis is (record layout, time-index
// candidates, log-append timestamps), because Redis's single thread is the limit of the whole system.
//
// KEYS: stream, meta, tindex, producers, bindex.
// ARGV: 1 producer id (-1: none), 2 epoch, 3 base sequence, 4 record count n, 5 flags: 1 to let Redis 7
// assign sequence numbers (XADD 0-*) after the first record, 2 to refuse the batch ({-1, 3},
// UNKNOWN_TOPIC_OR_PARTITION) when the partition has no meta (Batch.KnownPartition), 4 when the caller
// waits for the write to replicate (a duplicate then writes too), 6 layout: two bytes (big endian) per
// record = its number of field pairs after "ts", 7 after and 8 tok: the pipeline's chain of the
// partition's batches (empty for none; batchLua), 9 k = number of time-index candidates, then k pairs
// (record index from 0, timestamp): the batch's time-index candidates (eachTimeCandidate),
// then per record: timestamp, field, value, ...
// Returns {base offset, log start offset, 1 if duplicate else 0 [, a duplicate's original first
// timestamp: checkProducer]} or {-1, kafka error code | -2 the stream's last ID is not where the high watermark says (ErrStreamConflict) | -5 the batch before it
// in the chain did not run}.
var appendScript = redis.NewScript(appendScriptSource)

// appendScriptSource is appendScript's code.
var appendScriptSource = batchLua + `
local stream, meta, tindex, prods, bindex = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local pid, epoch, seq, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local nxt, start, tix, st, known, chain = readMeta(meta, pid)
local flags = tonumber(ARGV[5])
if not known and math.floor(flags / 2) % 2 == 1 then return {-1, 3} end
local after, tok = ARGV[7], ARGV[8]
if not chained(chain, after) then return {-1, -5} end
local pass = chainPass(chain, after, tok)
local refused, kept, last, legacy = checkProducer(stream, prods, pid, epoch, seq, n, start, st)
if refused then
  local h = {}
  if refused[1] >= 0 and math.floor(flags / 4) % 2 == 1 then
    -- A duplicate the caller will WAIT for: a write (the high watermark, unchanged) replicated after
    -- the original batch, so that WAIT on the caller's own connection covers the original too.
    h[1], h[2] = 'next', string.format('%d', nxt)
  end
  -- Answered: the partition's next batch in the chain may run (a meta hash is never created for it).
  if pass and known then h[#h + 1], h[#h + 2] = 'chain', pass end
  if #h > 0 then redis.call('HSET', meta, unpack(h)) end
  return refused
end
local auto = flags % 2 == 1
local layout = ARGV[6]
local k = tonumber(ARGV[9])
local i, bytes = 10 + 2 * k, 0
for r = 1, n do
  local hi, lo = string.byte(layout, 2 * r - 1, 2 * r)
  local j = i + 2 * (hi * 256 + lo)
  -- The first ID is explicit, so a stream written behind kgate's back fails before anything is stored;
  -- the rest follow it densely.
  local id = '0-*'
  if r == 1 or not auto then id = string.format('0-%d', nxt + r) end
  if r == 1 then
    -- Refused when the stream's last ID is past the high watermark or not of kgate's form (a foreign
    -- entry, perhaps since deleted): a conflict, nothing stored.
    local added = redis.pcall('XADD', stream, id, 'ts', unpack(ARGV, i, j))
    if type(added) == 'table' and added.err then
      if string.find(added.err, 'equal or smaller', 1, true) then return {-1, -2} end
      return added -- another failure (a key of another type): the caller's, as raised
    end
  else
    redis.call('XADD', stream, id, 'ts', unpack(ARGV, i, j))
  end
  bytes = bytes + recordOverhead
  for f = i + 1, j do bytes = bytes + #ARGV[f] end
  i = j + 1
end
finishBatch(meta, tindex, bindex, prods, pid, epoch, {string.format('%d:%d:%d', seq, last, nxt)}, n, last, kept, legacy, nxt, tix, k, 10, bytes, nil, pass)
return {nxt, start, 0}
`

// scriptsAgain sends again, in one more round trip, the scripts of cmds (EVALSHAs run) that a master
// answered NOSCRIPT (restarted, failed over, its script cache flushed): eval queues the i-th on again
// with the script's text, and its command takes cmds[i]'s place. Not one round trip per script, as
// Script.Run would take.
func (s *Store) scriptsAgain(ctx context.Context, cmds []*redis.Cmd, eval func(again redis.Pipeliner, i int) *redis.Cmd) {
	var again redis.Pipeliner
	for i, c := range cmds {
		if redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			if again == nil {
				again = s.rdb.Pipeline()
			}
			cmds[i] = eval(again, i)
		}
	}
	if again != nil {
		_, _ = again.Exec(ctx)
	}
}

// deleteRecordsScript moves a partition's log start offset forward and trims the stream below it, and
// the time index's points below it but the last (whose running maximum still bounds the timestamps of
// the records after it; OffsetForTime reads on from the log start past a point below it): kept, a
// partition written for good left a point per few hundred records in Redis for good. At most
// 10,000 points go per call; the next DeleteRecords or retention pass takes the rest. The bytes index
// (bytes_index.go) loses its points below the log start offset the same way, the last kept: reads from
// the log start offset measure from it.
// KEYS: stream, meta, time index, bytes index. ARGV: new log start offset (-1: the high watermark),
// 1 when the partition must have a meta hash (Topic.PartitionMeta) else 0.
// Returns the new log start offset, -1 when the offset is beyond the high watermark, or -2 when the
// partition must have a meta hash and has none (its topic deleted).
// XTRIM MINID needs Redis 6.2; older servers get an XRANGE + XDEL loop with the same effect.
var deleteRecordsScript = redis.NewScript(`
local m = redis.call('HMGET', KEYS[2], 'next', 'start')
if ARGV[2] == '1' and not m[1] and not m[2] then return -2 end
local nxt = tonumber(m[1]) or 0
local start = tonumber(m[2]) or 0
local want = tonumber(ARGV[1])
if want < 0 then want = nxt end
if want > nxt then return -1 end
if want > start then
  if not pcall(redis.call, 'XTRIM', KEYS[1], 'MINID', string.format('0-%d', want + 1)) then
    local last = string.format('0-%d', want)
    while true do
      local ents = redis.call('XRANGE', KEYS[1], '-', last, 'COUNT', 1000)
      if #ents == 0 then break end
      local ids = {}
      for _, e in ipairs(ents) do ids[#ids + 1] = e[1] end
      redis.call('XDEL', KEYS[1], unpack(ids))
    end
  end
  redis.call('HSET', KEYS[2], 'start', string.format('%d', want))
  start = want
end
local below = 0
while below < 10000 do
  local pts = redis.call('ZRANGE', KEYS[3], below, below + 99)
  local n = 0
  for _, m in ipairs(pts) do
    if tonumber(m) >= start then break end
    n = n + 1
  end
  below = below + n
  if n < 100 then break end
end
if below > 1 then redis.call('ZREMRANGEBYRANK', KEYS[3], 0, below - 2) end
if KEYS[4] then
  below = redis.call('ZCOUNT', KEYS[4], '-inf', '(' .. string.format('%d', start))
  if below > 1 then redis.call('ZREMRANGEBYRANK', KEYS[4], 0, math.min(below - 2, 9999)) end
end
return start
`)

// commitStreamScript keeps the Redis consumer group named after a Kafka group in step with a commit of
// offset N: created if missing, last-delivered-id 0-N, entries-read N, every pending entry below N acked.
// KEYS: stream, the partition's meta hash. ARGV: group, N. Returns the number of entries acknowledged.
// A partition without a meta hash (its topic deleted, which a gateway's topic cache may not know yet)
// is left alone: creating the group would bring its stream key back for good.
//
// Each step tries the Redis 7 form first and degrades: without ENTRIESREAD (Redis < 7) the group's
// entries-read and lag are unknown; without XGROUP SETID (the embedded store) the group is destroyed and
// recreated at 0-N, which also drops its pending entries and consumers.
var commitStreamScript = redis.NewScript(`
local stream, group, n = KEYS[1], ARGV[1], ARGV[2]
if redis.call('EXISTS', KEYS[2]) == 0 then return 0 end
-- The offset stays text: a Lua number (a double) would round one above 2^53 (0-9007199254740993
-- would become ...992), and print one above 1e17 in exponent form, which XGROUP refuses.
local id = '0-' .. n
if not pcall(redis.call, 'XGROUP', 'CREATE', stream, group, id, 'MKSTREAM', 'ENTRIESREAD', n)
  and not pcall(redis.call, 'XGROUP', 'SETID', stream, group, id, 'ENTRIESREAD', n)
  and not pcall(redis.call, 'XGROUP', 'CREATE', stream, group, id, 'MKSTREAM')
  and not pcall(redis.call, 'XGROUP', 'SETID', stream, group, id) then
  -- No XGROUP SETID (the embedded store): the group goes and comes back at the offset. Only then:
  -- an ID Redis refuses must not take the group, its consumers and their pending entries with it.
  local ok, err = pcall(redis.call, 'XGROUP', 'SETID', stream, group, id)
  if not ok then
    local why = string.lower(tostring(err))
    if not (string.find(why, 'unknown', 1, true) or string.find(why, 'not supported', 1, true)) then
      return redis.error_reply(tostring(err))
    end
    redis.call('XGROUP', 'DESTROY', stream, group)
    redis.call('XGROUP', 'CREATE', stream, group, id)
  end
end
local acked = 0
if n ~= '0' then
  while true do
    local pend = redis.call('XPENDING', stream, group, '-', id, 1000)
    if #pend == 0 then break end
    local ids = {}
    for _, e in ipairs(pend) do ids[#ids + 1] = e[1] end
    acked = acked + redis.call('XACK', stream, group, unpack(ids))
    if #pend < 1000 then break end
  end
end
return acked
`)

// expireProducersScript drops the state of the producers of a partition's meta hash (KEYS[1]) whose
// last batch is older than ARGV[1] (ms); state without a time (written before times were kept) gets
// ARGV[2], the time now, so it expires as if last used then. Returns the number of producers dropped.
var expireProducersScript = redis.NewScript(`
local meta, cutoff, now = KEYS[1], tonumber(ARGV[1]), ARGV[2]
local f = redis.call('HGETALL', meta)
local used = {}
for i = 1, #f, 2 do
  if string.sub(f[i], 1, 2) == 't:' then used[string.sub(f[i], 3)] = tonumber(f[i + 1]) end
end
local dropped = 0
for i = 1, #f, 2 do
  if string.sub(f[i], 1, 2) == 'p:' then
    local pid = string.sub(f[i], 3)
    local t = used[pid]
    if not t then
      redis.call('HSET', meta, 't:' .. pid, now)
    elseif t < cutoff then
      redis.call('HDEL', meta, f[i], 't:' .. pid)
      dropped = dropped + 1
    end
  end
end
return dropped
`)
