package redisstore

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/redis/go-redis/v9"
)

// Topic is a registry entry shared by every gateway.
type Topic struct {
	Name       string            `json:"-"`
	ID         [16]byte          `json:"id"`
	Partitions int32             `json:"partitions"`
	Configs    map[string]string `json:"configs,omitempty"`
	Created    int64             `json:"created"` // epoch ms
	// PartitionMeta: the partitions below this number got their meta hash when they were created, so
	// an append to one of them that finds none is to a deleted topic and is refused
	// (Batch.KnownPartition). Partitions of topics created by earlier kgate versions, and those an
	// earlier version added, get their meta hash from their first append.
	PartitionMeta int32 `json:"pmeta,omitempty"`
	// Generation is the topic's number from the registry's counter of creations (CreateTopic), which
	// the meta hashes it writes carry (field "gen"): a deletion spares the partitions of a topic
	// created under the name after it read the entry (deleteTopic). 0 on topics of earlier versions.
	Generation int64 `json:"gen,omitempty"`
}

// createTopicScript registers a topic unless its name is taken or differs from a registered topic's
// only in '.' and '_' (Apache Kafka refuses both), checked and written in one step: two gateways
// creating "a.b" and "a_b" at once cannot both succeed. The index (KEYS[2]) holds each name by its
// '.'/'_' form; an entry whose topic is gone (deleted by an earlier kgate version, which leaves the
// index alone) is stale and taken over. Topics of earlier versions have no entry: the gateway checks
// them against its registry view, read at the request (an earlier version's gateway checks no
// better).
// go-redis's cluster client resends a command whose connection failed after Redis ran it: a second
// run finding the very entry it registers (its topic ID is the request's own) answers registered, not
// taken.
// A check that finds the name free counts a creation on the generation counter (KEYS[3]) and answers
// the count: the new topic's generation, above the count read by any deletion of an earlier topic of
// the name that is still under way (deleteTopic).
// KEYS: topics, forms, generation counter. ARGV: name, JSON ("": check only, register nothing).
// Returns 1 when registered (or, checking only, the generation when it could be), 0 when the name is
// taken, or the name of the registered topic it collides with.
var createTopicScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur then
  if ARGV[2] ~= '' and cur == ARGV[2] then return 1 end
  return 0
end
local form = string.gsub(ARGV[1], '%.', '_')
local other = redis.call('HGET', KEYS[2], form)
if other and other ~= ARGV[1] and redis.call('HEXISTS', KEYS[1], other) == 1 then return other end
if ARGV[2] == '' then return redis.call('INCR', KEYS[3]) end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], form, ARGV[1])
return 1
`)

// registerTopic runs createTopicScript for name with entry ("": check only): nil when registered (or
// free, with the new topic's generation), ErrTopicExists, a *CollisionError, or a Redis failure.
func (s *Store) registerTopic(ctx context.Context, name string, entry []byte) (int64, error) {
	res, err := createTopicScript.Run(ctx, s.rdb, []string{s.keys.topics(), s.keys.topicForms(), s.keys.topicGen()}, name, entry).Result()
	if err != nil {
		return 0, err
	}
	switch r := res.(type) {
	case int64:
		if r == 0 {
			return 0, ErrTopicExists
		}
		return r, nil
	case string:
		return 0, &CollisionError{Topic: name, Other: r}
	}
	return 0, fmt.Errorf("redisstore: create topic %q: unexpected reply %v", name, res)
}

// CreateTopic writes the partitions' meta hashes of topic t, then registers it marked as having them
// (pmeta): no registry view ever holds the topic without the mark, so an append through a view of it
// that finds no meta (the topic deleted since) is refused, never creating keys a topic created again
// under the name would inherit. ErrTopicExists when the name is taken, a *CollisionError
// (ErrTopicCollides) when it collides on '.' and '_' with a registered topic.
//
// The name is checked before the meta is written, so a refused name (one being deleted among them)
// gets none. Meta written for a name taken or colliding in the instant between the check and the
// registration stays: {next: 0}, what that name's next creation writes (with its own generation).
// The check gives the topic its generation (createTopicScript), which the meta carries.
func (s *Store) CreateTopic(ctx context.Context, t Topic) error {
	if t.Partitions < 1 {
		return ErrInvalidPartitions
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	gen, err := s.registerTopic(ctx, t.Name, nil)
	if err != nil {
		return err
	}
	if err := s.writePartitionMeta(ctx, t.Name, 0, t.Partitions, gen); err != nil {
		return err
	}
	t.PartitionMeta, t.Generation = t.Partitions, gen
	buf, err := json.Marshal(t)
	if err != nil {
		return err
	}
	_, err = s.registerTopic(ctx, t.Name, buf)
	return err
}

// writePartitionMeta gives partitions [from, to) of topic name a meta hash of generation gen (none
// when 0): "gen" set, then "next" with HSETNX, so nothing an append has written already is
// overwritten. The generation goes first: a meta hash with "next" and no "gen" is an earlier
// version's, which any deletion of the name removes.
func (s *Store) writePartitionMeta(ctx context.Context, name string, from, to int32, gen int64) error {
	pipe := s.rdb.Pipeline()
	for p := from; p < to; p++ {
		if gen > 0 {
			pipe.HSet(ctx, s.keys.meta(name, p), "gen", gen)
		}
		pipe.HSetNX(ctx, s.keys.meta(name, p), "next", 0)
	}
	_, err := pipe.Exec(ctx)
	return err
}

// Topics returns every registered topic by name.
func (s *Store) Topics(ctx context.Context) (map[string]Topic, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	all, err := s.rdb.HGetAll(ctx, s.keys.topics()).Result()
	if err != nil {
		return nil, err
	}
	out := make(map[string]Topic, len(all))
	for name, raw := range all {
		var t Topic
		if err := json.Unmarshal([]byte(raw), &t); err != nil {
			continue // a foreign or damaged entry is not a topic
		}
		t.Name = name
		out[name] = t
	}
	return out, nil
}

// TopicNames returns the registered names, sorted.
func TopicNames(m map[string]Topic) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Topic returns one topic or ErrUnknownTopic.
func (s *Store) Topic(ctx context.Context, name string) (Topic, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	_, t, err := s.topicEntry(ctx, name)
	return t, err
}

// topicEntry reads topic name's registry entry: its JSON text as stored (for a compare-and-swap) and
// the topic it holds. ErrUnknownTopic when there is none.
func (s *Store) topicEntry(ctx context.Context, name string) (string, Topic, error) {
	return parseTopicEntry(name, s.rdb.HGet(ctx, s.keys.topics(), name))
}

// topicEntryGen is topicEntry with the generation counter (createTopicScript), read in one step with
// the entry (MULTI on the registry's slot).
func (s *Store) topicEntryGen(ctx context.Context, name string) (string, Topic, int64, error) {
	var gen, entry *redis.StringCmd
	_, _ = s.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		gen = pipe.Get(ctx, s.keys.topicGen())
		entry = pipe.HGet(ctx, s.keys.topics(), name)
		return nil
	})
	n, err := gen.Int64()
	if err == redis.Nil {
		n, err = 0, nil
	}
	if err != nil {
		return "", Topic{}, 0, err
	}
	raw, t, err := parseTopicEntry(name, entry)
	return raw, t, n, err
}

// parseTopicEntry is the entry topicEntry reads, from the answer of its HGET.
func parseTopicEntry(name string, c *redis.StringCmd) (string, Topic, error) {
	raw, err := c.Result()
	if err == redis.Nil {
		return "", Topic{}, ErrUnknownTopic
	}
	if err != nil {
		return "", Topic{}, err
	}
	var t Topic
	if err := json.Unmarshal([]byte(raw), &t); err != nil {
		return "", Topic{}, fmt.Errorf("redisstore: topic %q: %w", name, err)
	}
	t.Name = name
	return raw, t, nil
}

// DeleteTopic removes topic name, whatever its ID: see deleteTopic.
func (s *Store) DeleteTopic(ctx context.Context, name string) error {
	return s.deleteTopic(ctx, name, func(Topic) bool { return true })
}

// DeleteTopicID removes topic name only while its registry entry has topic ID id; ErrUnknownTopic
// otherwise. A delete by topic ID goes through the name a gateway's registry view (up to a second
// old) gives for the ID: another gateway may have deleted that topic and created a new one under the
// same name meanwhile, which must not be deleted in its place.
func (s *Store) DeleteTopicID(ctx context.Context, name string, id [16]byte) error {
	return s.deleteTopic(ctx, name, func(t Topic) bool { return t.ID == id })
}

// removeTopicScript removes a registry entry only if it still holds the text the caller read, and its
// name's entry in the '.'/'_' index (createTopicScript) with it.
// KEYS: topics, forms. ARGV: name, expected JSON. Returns 1 when removed, 0 when the entry changed
// meanwhile, -1 when it is gone.
var removeTopicScript = redis.NewScript(`
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return -1 end
if raw ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
local form = string.gsub(ARGV[1], '%.', '_')
if redis.call('HGET', KEYS[2], form) == ARGV[1] then redis.call('HDEL', KEYS[2], form) end
return 1
`)

// deleteTopic removes the partition keys of topic name and every group's offsets on them, then its
// registry entry, so a topic recreated under the same name never sees old records or offsets; only if
// match accepts the entry (ErrUnknownTopic otherwise). The entry is removed compared and swapped against the text whose
// partitions were deleted: an entry changed meanwhile (partitions added, configs set, or the topic
// deleted and created again through another gateway) is read and matched again, so a new topic of
// the same name is never removed by a match against the old one.
//
// The partition keys live in other hash slots than the registry, so their removal cannot be one
// step with the match. Another deletion can remove the entry and a topic be created again under the
// name meanwhile, before this one removes the partitions' keys: those would be the new topic's, which
// was left registered without its meta (every append refused UNKNOWN_TOPIC_OR_PARTITION). So the entry
// is read with the generation counter (topicEntryGen), and a partition whose meta carries a newer
// generation than that count is left alone (deletePartitionScript): any topic created after the read
// has one. Meta without a generation (an earlier version's, or made by an append) is removed.
func (s *Store) deleteTopic(parent context.Context, name string, match func(Topic) bool) error {
	// Each pass has command timeouts of its own (the offsets' drop can take long); an entry that keeps
	// changing under the deletion ends it after maxDeletePasses. Every pass removes every partition's
	// keys and offsets again: between two passes an append through a view of a topic without pmeta
	// (an earlier version's), or a commit, can have written them anew.
	for range maxDeletePasses {
		ctx, cancel := s.bound(parent)
		raw, t, gen, err := s.topicEntryGen(ctx, name)
		if err != nil {
			cancel()
			return err
		}
		if !match(t) {
			cancel()
			return ErrUnknownTopic
		}
		pipe := s.rdb.Pipeline()
		for p := range t.Partitions {
			deletePartitionScript.Eval(ctx, pipe, []string{s.keys.stream(name, p), s.keys.meta(name, p), s.keys.tindex(name, p),
				s.keys.producers(name, p), s.keys.bindex(name, p)}, gen)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			cancel()
			return err
		}
		s.ForgetReadBounds(name)
		// The groups' offsets on it, a batch of groups at a time with time bounds of their own
		// (every group is visited), while the name is still taken: a topic created again under
		// it meanwhile would have its fresh commits deleted too.
		if err := s.dropTopicOffsets(parent, name, t.Partitions); err != nil {
			cancel()
			return err
		}
		cancel()
		rctx, rcancel := s.bound(parent)
		res, err := removeTopicScript.Run(rctx, s.rdb, []string{s.keys.topics(), s.keys.topicForms()}, name, raw).Int64()
		rcancel()
		switch {
		case err != nil:
			return err
		case res != 0:
			// Removed, or gone already: deleted concurrently, or this script ran twice because the
			// cluster client sent it again after a lost reply. Either way the topic is gone.
			return nil
		}
		// Changed under us: read it again.
	}
	return fmt.Errorf("redisstore: delete topic %q: its registry entry kept changing", name)
}

// deletePartitionScript removes a partition's keys unless its meta belongs to a topic created after the
// deletion read the registry: one UNLINK (a partition's keys share a hash tag), so a stream of millions
// of entries is freed in the background, where DEL would stall Redis for every client.
// KEYS: stream, meta, tindex, producers, bindex. ARGV: the generation counter read with the entry.
// Returns 1 when removed, 0 when spared.
var deletePartitionScript = redis.NewScript(`
if (tonumber(redis.call('HGET', KEYS[2], 'gen')) or 0) > tonumber(ARGV[1]) then return 0 end
redis.call('UNLINK', unpack(KEYS))
return 1
`)

// maxDeletePasses bounds the passes of a topic deletion whose registry entry changes under it.
const maxDeletePasses = 10

// dropGroupsBatch is how many groups' offsets one pipeline of dropTopicOffsets drops, each pipeline
// within a command timeout of its own.
const dropGroupsBatch = 256

// dropTopicOffsets removes every group's committed offsets (canonical, sidecar, metadata) on the n
// partitions of topic name, as Apache drops a deleted topic's offsets: kept, they would be a topic
// created again under the name's offsets, and its consumers would start from them. Groups go a batch
// at a time, so many groups cost time, not one timeout that fails the deletion for good. A commit
// racing the delete may still write one after this ran.
func (s *Store) dropTopicOffsets(ctx context.Context, name string, n int32) error {
	bctx, cancel := s.bound(ctx)
	groups, err := s.rdb.SMembers(bctx, s.keys.groups()).Result()
	cancel()
	if err != nil || len(groups) == 0 || n == 0 {
		return err
	}
	fields := make([]string, n)
	for p := range n {
		fields[p] = s.keys.stream(name, p)
	}
	for len(groups) > 0 {
		batch := groups[:min(len(groups), dropGroupsBatch)]
		groups = groups[len(batch):]
		bctx, cancel := s.bound(ctx)
		pipe := s.rdb.Pipeline()
		for _, g := range batch {
			pipe.HDel(bctx, s.keys.offsets(g), fields...)
			pipe.HDel(bctx, s.keys.offsetsTS(g), fields...)
			pipe.HDel(bctx, s.keys.offsetsMD(g), fields...)
		}
		_, err := pipe.Exec(bctx)
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// setPartitionsScript grows a topic's partition count atomically (never shrinks), and the count of
// partitions created with meta (pmeta) with it when every partition so far was and SetPartitions
// wrote the meta of every partition from the old count on (ARGV[3], the first it wrote; -1: none). A
// partition an earlier kgate added has no meta, so the count stops there.
//
// ARGV[4] is the count the caller read. go-redis's cluster client resends a command whose connection
// failed after Redis ran it, so a second run finding exactly the count asked for, above the one read,
// is this request's change and succeeds: refused, CreatePartitions answered INVALID_PARTITIONS for a
// change it made. (Another request growing the topic to that same count in between succeeds as
// well; the topic has the count asked for either way.)
var setPartitionsScript = redis.NewScript(`
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return -1 end
local old = tonumber(string.match(raw, '"partitions":(%d+)'))
local want, read = tonumber(ARGV[2]), tonumber(ARGV[4])
if not old then return -2 end
if want <= old then
  if old == want and read < want then return old end
  return -2
end
raw = string.gsub(raw, '"partitions":%d+', '"partitions":' .. ARGV[2], 1)
local pmeta, from = tonumber(string.match(raw, '"pmeta":(%d+)')), tonumber(ARGV[3])
if pmeta and pmeta >= old and from >= 0 and from <= old then
  raw = string.gsub(raw, '"pmeta":%d+', '"pmeta":' .. ARGV[2], 1)
end
redis.call('HSET', KEYS[1], ARGV[1], raw)
return old
`)

// SetPartitions grows topic name to n partitions. ErrInvalidPartitions when n is not larger.
func (s *Store) SetPartitions(ctx context.Context, name string, n int32) error {
	t, err := s.Topic(ctx, name)
	if err != nil {
		return err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	metaFrom := int32(-1) // the first partition given its meta here (-1: none)
	if t.PartitionMeta > 0 && n > t.Partitions {
		// The new partitions' meta first, so setPartitionsScript can mark them (a concurrent call
		// may have added some of them already, and appends to them stay).
		if err := s.writePartitionMeta(ctx, name, t.Partitions, n, t.Generation); err != nil {
			return err
		}
		metaFrom = t.Partitions
	}
	// The script edits the JSON text in place: cjson would reformat large integers with exponents.
	res, err := setPartitionsScript.Run(ctx, s.rdb, []string{s.keys.topics()}, name, n, metaFrom, t.Partitions).Int64()
	if err != nil {
		return err
	}
	switch res {
	case -1:
		return ErrUnknownTopic
	case -2:
		return ErrInvalidPartitions
	}
	return nil
}

// casTopicScript replaces a registry entry only if it still holds the text the caller read.
// KEYS: topics. ARGV: name, expected JSON, new JSON. Returns 1 when replaced, 0 when the entry changed
// meanwhile, -1 when it is gone.
var casTopicScript = redis.NewScript(`
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return -1 end
if raw ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
`)

// SetTopicConfigs replaces a topic's configs. The entry is compared and swapped, so a concurrent
// SetPartitions (or DeleteTopic) on another gateway is never undone by writing back a stale copy.
func (s *Store) SetTopicConfigs(ctx context.Context, name string, configs map[string]string) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return s.updateTopic(ctx, name, func(t *Topic) bool {
		t.Configs = configs
		return true
	})
}

// updateTopic applies edit to topic name's registry entry and writes it back, compared and swapped:
// an entry changed meanwhile (SetPartitions, DeleteTopic on another gateway) is read again and edited
// anew, never overwritten with a stale copy. edit returns false to leave the entry as it is.
func (s *Store) updateTopic(ctx context.Context, name string, edit func(t *Topic) bool) error {
	for {
		raw, t, err := s.topicEntry(ctx, name)
		if err != nil {
			return err
		}
		if !edit(&t) {
			return nil
		}
		buf, err := json.Marshal(t)
		if err != nil {
			return err
		}
		res, err := casTopicScript.Run(ctx, s.rdb, []string{s.keys.topics()}, name, raw, buf).Int64()
		switch {
		case err != nil:
			return err
		case res < 0:
			return ErrUnknownTopic
		case res > 0:
			return nil
		}
		// Changed under us: read it again. ctx bounds the loop.
	}
}
