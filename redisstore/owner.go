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
// So each group has an owner record on its slot (<ns>:owner:{<tag>}:<group>, the claim of a gateway's
// instance): a gateway claims the group (ClaimGroup) before it first checks a write against its
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

// claimScript sets KEYS[1], group's owner record, to the claim ARGV[1] (<instance>/<seq>) for ARGV[3]
// ms unless another claim holds it, which it returns (nothing when it claimed). A claim yields only to
// the record being absent, being ARGV[2] (the claim the claimant saw holding the group, from its last
// refusal; ” none), or being one of its own instance's older claims (a lower seq): a claim held up on
// its way lands over no claim made after it was sent, as none of those is absent, seen by it or older
// of its own instance.
var claimScript = redis.NewScript(`
local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[1] and held ~= ARGV[2] then
  local hi, hs = string.match(held, '^(.+)/(%d+)$')
  local mi, ms = string.match(ARGV[1], '^(.+)/(%d+)$')
  if not (hi and mi and hi == mi and tonumber(hs) < tonumber(ms)) then
    return held
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
return ''
`)

// ClaimGroup makes token (<instance>/<seq>, seq rising with each claim of the instance) the owner of
// group's offsets: from then on only token's writes of them are stored, until another claim replaces
// it or ownerFor has passed. It claims only a group with no record, one held by seen (the claim that
// refused this claimant's last attempt, "" none) or by an older claim of token's instance; otherwise it
// returns the claim holding the group (holder) and changes nothing. A gateway that coordinates the
// group takes it over from holder by claiming again with seen = holder: so a claim sent before
// another gateway's and landing after it (held up on its way) does not displace it, while a gateway
// taking over from one that is down or cut off need not wait for its record to expire.
//
// Called before the claimer checks a write against its view of the group, so that any write it
// validates is refused once another gateway claimed the group after it.
func (s *Store) ClaimGroup(ctx context.Context, group, token, seen string) (holder string, err error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return claimScript.Run(ctx, s.rdb, []string{s.keys.owner(group)}, token, seen, ownerFor.Milliseconds()).Text()
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
