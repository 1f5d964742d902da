package redisstore

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// A group's offsets are written by the gateway that coordinates the group, but a write validated by
// one coordinator can reach Redis after another took the group over (a stalled connection, an
// asymmetric partition), and would then overwrite the newer coordinator's commits with older offsets.
// So each group has an owner record on its slot (<ns>:owner:{<tag>}:<group>, the claiming gateway's
// instance id): a gateway claims the group (ClaimGroup) before it first checks a write against its
// view of the group, and every write of the group's offsets (CommitOffsets, DeleteOffsets,
// DeleteGroup) is a script that checks the record in the same step, refusing with ErrNotOwner when
// another gateway claimed since. A group without a record takes any writer: one written only by
// gateways of an earlier version, or whose record expired. An empty owner writes unconditionally
// (tools, tests).
//
// A record expires ownerFor after its claim, so that the groups a gateway only joined or deleted
// leave no key behind for good. That is as safe for any write delayed less than ownerFor: a write is
// stale only once another gateway claimed the group after its validation, and that claim's record
// lives ownerFor from then. A record expired under a gateway that still coordinates the group lets
// that gateway write on, and the next gateway to take the group over claims it again.

// ownerFor is how long an owner record outlives its claim: far longer than a write can be held up on
// its way (TCP gives up retransmitting after about 15 minutes).
const ownerFor = 24 * time.Hour

// ownerCheckLua refuses the script when KEYS[1], the group's owner record, names another owner than
// ARGV[1] (an empty ARGV[1] passes).
const ownerCheckLua = `
local owner = redis.call('GET', KEYS[1])
if owner and ARGV[1] ~= '' and owner ~= ARGV[1] then
  return redis.error_reply('NOTOWNER group claimed by ' .. owner)
end
`

// commitOffsetsScript writes a group's commits if ownerCheckLua lets it. KEYS: owner, offsets,
// sidecar, metadata. ARGV: owner, now (epoch ms; empty: clear the sidecar entries), then field,
// offset and metadata per commit. The sidecar is advisory: its failure (a key of another type) fails
// nothing. One call per hash and commit, as the MULTI it replaces had one command each: building
// variadic calls cost Redis more than it saved at the usual few partitions (4.7-5.0 us against 3.5
// for a commit of one; 12.4-14.2 against 14.4-14.7 for ten), and the MULTI cost 1.6 and 13.3-15.3.
var commitOffsetsScript = redis.NewScript(ownerCheckLua + `
local stamp = ARGV[2]
for i = 3, #ARGV, 3 do
  local f, n, m = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  redis.call('HSET', KEYS[2], f, n)
  if stamp ~= '' then
    redis.pcall('HSET', KEYS[3], f, n .. '|' .. stamp)
  else
    redis.pcall('HDEL', KEYS[3], f)
  end
  if m == '' then
    redis.call('HDEL', KEYS[4], f)
  else
    redis.call('HSET', KEYS[4], f, m)
  end
end
return 1
`)

// deleteOffsetsScript deletes fields (ARGV[2] on) from a group's three offset hashes if
// ownerCheckLua lets it. KEYS: owner, offsets, sidecar, metadata. ARGV: owner, fields.
var deleteOffsetsScript = redis.NewScript(ownerCheckLua + `
for i = 2, #ARGV do
  for k = 2, 4 do redis.call('HDEL', KEYS[k], ARGV[i]) end
end
return 1
`)

// deleteGroupScript deletes a group's three offset hashes if ownerCheckLua lets it and returns the
// fields the canonical one had. The owner record stays (until it expires), so that a write delayed
// from a gateway that owned the group before is still refused. KEYS: owner, offsets, sidecar,
// metadata. ARGV: owner.
var deleteGroupScript = redis.NewScript(ownerCheckLua + `
local fields = redis.call('HKEYS', KEYS[2])
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
return fields
`)

// ownedKeys are the owner check's keys for group: owner record, canonical, sidecar, metadata.
func (s *Store) ownedKeys(group string) []string {
	return []string{s.keys.owner(group), s.keys.offsets(group), s.keys.offsetsTS(group), s.keys.offsetsMD(group)}
}

// ownerError is err, or ErrNotOwner for a script's refusal.
func ownerError(err error) error {
	if redis.HasErrorPrefix(err, "NOTOWNER") {
		return ErrNotOwner
	}
	return err
}

// OwnerKey names group's owner record.
func (s *Store) OwnerKey(group string) string { return s.keys.owner(group) }

// ClaimGroup makes owner the owner of group's offsets: from now on only owner's writes of them are
// stored, until another gateway claims the group or ownerFor has passed. Called before the claimer
// checks a write against its view of the group, so that any write it validates is refused once
// another gateway claimed the group after it.
func (s *Store) ClaimGroup(ctx context.Context, group, owner string) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return s.rdb.Set(ctx, s.keys.owner(group), owner, ownerFor).Err()
}

// commitArgs are commitOffsetsScript's arguments.
func (s *Store) commitArgs(owner string, commits []OffsetCommit, now time.Time) []any {
	args := make([]any, 0, 2+3*len(commits))
	stamp := ""
	if !now.IsZero() {
		stamp = strconv.FormatInt(now.UnixMilli(), 10)
	}
	args = append(args, owner, stamp)
	for _, c := range commits {
		args = append(args, s.keys.stream(c.Topic, c.Partition), strconv.FormatInt(c.Offset, 10), c.Metadata)
	}
	return args
}
