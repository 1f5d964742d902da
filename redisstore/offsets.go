package redisstore

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// OffsetCommit is one partition's committed position. A nil Metadata is stored as empty.
type OffsetCommit struct {
	Topic     string
	Partition int32
	Offset    int64
	Metadata  string
}

// Committed is a committed offset as read back.
type Committed struct {
	Topic     string
	Partition int32
	Offset    int64
	Metadata  string
	// CommitTime is the epoch-ms timestamp from the sidecar, or -1 when the sidecar has no usable entry.
	CommitTime int64
	// SidecarOffset is the offset the sidecar timestamp belongs to (-1 when none). It differs from
	// Offset when a gateway that does not write the sidecar has since moved the canonical offset.
	SidecarOffset int64
}

// CommitOffsets stores commits of group atomically per group (canonical hash, timestamp sidecar and
// metadata in one script on the group's slot) and moves the group's Redis consumer group on each
// stream. The script writes only while the group's owner record names owner (or the group has none:
// see owner.go); otherwise every commit fails with ErrNotOwner and nothing is written. An empty owner
// writes unconditionally. now stamps the sidecar; a zero now writes no timestamp and clears the
// sidecar entries instead (an untimestamped write such as an admin reset). The returned slice holds
// one error per commit; the sidecar is advisory, so a failed sidecar write (say, its key holds another
// type) fails no commit.
func (s *Store) CommitOffsets(ctx context.Context, group, owner string, commits []OffsetCommit, now time.Time) []error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	errs := make([]error, len(commits))
	if len(commits) == 0 {
		return errs
	}
	listedNow := !s.indexedLately(group)
	if listedNow {
		// Listed before its offsets are written: a gateway dying between the two would leave offsets
		// that ListGroups and a topic's deletion never see, were the commit not retried (an async
		// commit, one on close). Otherwise the SADD after the offsets (below) keeps the listing fresh.
		if err := s.rdb.SAdd(ctx, s.keys.groups(), group).Err(); err != nil {
			for i := range errs {
				errs[i] = err
			}
			return errs
		}
		_ = s.groupIndexed(group, nil)
	}
	// With WaitReplicas or WaitAOF a commit, like an append, is confirmed by WAIT / WAITAOF on the
	// connection that wrote it (Apache acknowledges a commit once the offsets topic's in-sync replicas
	// have it): a failover right after would otherwise lose commits the group was told were stored.
	// One script, in place of the MULTI of three hash writes per partition it replaces: the same round
	// trip, with the owner check in the same step. Stored on the master but not confirmed beyond it
	// (notDurable), the client is told to commit again (below); the groups index and the streams'
	// consumer groups are still updated: the offsets are there.
	_, notDurable, err := s.writeOwned(ctx, group, commitOffsetsScript, s.commitArgs(owner, commits, now)...)
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	// The groups index lists the group for ListGroups and for the deletion of a topic's offsets: one
	// listed lately (not just now, above) is listed again, its set's master perhaps failing over meanwhile
	// (groupIndexed). Its SADD is the last item, after the commits' streams; on a Redis Cluster each
	// master's share goes on its own (perMaster), so a master down fails its own partitions' commits
	// alone, not every one of them after the command timeout.
	n := len(commits)
	items := n
	if !listedNow {
		items++
	}
	streamErrs := perMaster(ctx, s, items, func(i int) string {
		if i == n {
			return s.keys.groups()
		}
		return s.keys.stream(commits[i].Topic, commits[i].Partition)
	}, func(ctx context.Context, idx []int) []error {
		pipe := s.rdb.Pipeline()
		var indexed *redis.IntCmd
		var at []int // the commits' places in idx
		var cmds []*redis.Cmd
		for k, i := range idx {
			if i == n {
				indexed = pipe.SAdd(ctx, s.keys.groups(), group)
				continue
			}
			at = append(at, k)
			cmds = append(cmds, commitStreamScript.EvalSha(ctx, pipe, s.commitStreamKeys(commits[i]), group, commits[i].Offset))
		}
		_, _ = pipe.Exec(ctx)
		s.scriptsAgain(ctx, cmds, func(again redis.Pipeliner, j int) *redis.Cmd {
			c := commits[idx[at[j]]]
			return commitStreamScript.Eval(ctx, again, s.commitStreamKeys(c), group, c.Offset)
		})
		errs := make([]error, len(idx))
		for j, k := range at {
			errs[k] = cmds[j].Err()
		}
		for k, i := range idx {
			if i == n {
				errs[k] = indexed.Err()
			}
		}
		return errs
	}, func(err error) bool { return err == nil }, errMasterLagging)
	var indexErr error
	if !listedNow {
		indexErr = s.groupIndexed(group, streamErrs[n])
	}
	for i := range commits {
		switch {
		case indexErr != nil && notDurable != nil:
			errs[i] = fmt.Errorf("%w: %w (and %w)", ErrOffsetsStored, indexErr, notDurable)
		case indexErr != nil:
			errs[i] = fmt.Errorf("%w: %w", ErrOffsetsStored, indexErr)
		case notDurable != nil:
			errs[i] = notDurable
		case streamErrs[i] != nil:
			errs[i] = fmt.Errorf("%w: %w", ErrOffsetsStored, streamErrs[i])
		}
	}
	return errs
}

// maxIndexedGroups bounds the groups a store remembers having added to the groups set, and
// indexedFor how long it trusts that: a deletion through another gateway removes a group from the set
// without this store knowing.
const (
	maxIndexedGroups = 100_000
	indexedFor       = time.Minute
)

// groupIndexed is what the SADD of group to the groups set (its error err) makes of a commit: a
// failure when the group may not be listed, nothing when this store added it within indexedFor. The
// set lives on one master: while that one fails over, the commits of groups listed already go on.
func (s *Store) groupIndexed(group string, err error) error {
	now := time.Now().UnixNano()
	if err == nil {
		if at, known := s.indexed.Load(group); known {
			at.(*atomic.Int64).Store(now)
		} else if s.nIndexed.Load() < maxIndexedGroups {
			at := &atomic.Int64{}
			at.Store(now)
			if _, loaded := s.indexed.LoadOrStore(group, at); !loaded {
				s.nIndexed.Add(1)
			}
		}
		return nil
	}
	if s.indexedLately(group) {
		return nil
	}
	return err
}

// indexedLately reports whether this store added group to the groups set within indexedFor.
func (s *Store) indexedLately(group string) bool {
	at, known := s.indexed.Load(group)
	return known && time.Now().UnixNano()-at.(*atomic.Int64).Load() < int64(indexedFor)
}

// forgetIndexed drops group from the groups this store added to the groups set (it was removed).
func (s *Store) forgetIndexed(group string) {
	if _, loaded := s.indexed.LoadAndDelete(group); loaded {
		s.nIndexed.Add(-1)
	}
}

// commitStreamKeys are commitStreamScript's keys for c's partition.
func (s *Store) commitStreamKeys(c OffsetCommit) []string {
	return []string{s.keys.stream(c.Topic, c.Partition), s.keys.meta(c.Topic, c.Partition)}
}

// CommittedOffsets returns every committed partition of group, sorted by topic and partition.
// A missing or malformed sidecar entry leaves CommitTime at -1; it never fails the read.
func (s *Store) CommittedOffsets(ctx context.Context, group string) ([]Committed, error) {
	committed, errs := s.CommittedOffsetsOf(ctx, []string{group})
	return committed[0], errs[0]
}

// CommittedOffsetsOf is CommittedOffsets of each of groups, read at once: each group's three hashes
// (they share the group's hash tag) by one script, so an offset is never paired with the metadata or
// timestamp of another commit that landed between the reads (a transaction would do as much for one
// group, but not for groups of several slots on a Redis Cluster); each master's groups in up to
// committedPipelines pipelines side by side (a connection that stalls holds up its share alone), so a
// list of groups costs a round trip per master, not per group. On a Redis Cluster a master down fails
// its own groups alone (errs[i]), as the other calls across masters do (perMaster).
func (s *Store) CommittedOffsetsOf(ctx context.Context, groups []string) (committed [][]Committed, errs []error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	res := perMaster(ctx, s, len(groups), func(i int) string { return s.keys.offsets(groups[i]) },
		func(ctx context.Context, idx []int) []committedAnswer {
			out := make([]committedAnswer, len(idx))
			parts := min(len(idx), committedPipelines)
			var fo fanOut
			defer fo.Wait() // a panic of the last part's unwinds once the others are done
			for p := range parts {
				lo, hi := p*len(idx)/parts, (p+1)*len(idx)/parts
				if p == parts-1 {
					s.readCommitted(ctx, groups, idx[lo:hi], out[lo:hi])
				} else {
					fo.Go(func() { s.readCommitted(ctx, groups, idx[lo:hi], out[lo:hi]) })
				}
			}
			fo.Wait()
			return out
		}, func(a committedAnswer) bool { return a.err == nil }, committedAnswer{err: errMasterLagging})
	committed, errs = make([][]Committed, len(groups)), make([]error, len(groups))
	for i, a := range res {
		committed[i], errs[i] = a.c, a.err
	}
	return committed, errs
}

// committedPipelines is how many pipelines CommittedOffsetsOf sends a master at once.
const committedPipelines = 8

// committedAnswer is one group's committed offsets, or why they could not be read.
type committedAnswer struct {
	c   []Committed
	err error
}

// readCommitted reads the committed offsets of the groups at idx into out, in one pipeline.
func (s *Store) readCommitted(ctx context.Context, groups []string, idx []int, out []committedAnswer) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(idx))
	for k, i := range idx {
		g := groups[i]
		// EVAL, not EVALSHA: a pipelined script has no NOSCRIPT fallback.
		cmds[k] = offsetHashesScript.Eval(ctx, pipe, []string{s.keys.offsets(g), s.keys.offsetsMD(g), s.keys.offsetsTS(g)})
	}
	_, _ = pipe.Exec(ctx)
	for k, i := range idx {
		if redis.HasErrorPrefix(cmds[k].Err(), "TRYAGAIN") {
			out[k].c, out[k].err = s.readMigratingOffsets(ctx, groups[i])
			continue
		}
		hashes, err := hashesReply(cmds[k], 3)
		if err != nil {
			out[k].err = err
			continue
		}
		out[k].c = s.committedOf(hashes[0], hashes[1], hashes[2])
	}
}

// offsetHashesScript reads a group's canonical, metadata and sidecar hashes (KEYS[1..3]) at once; the
// metadata and the sidecar are advisory: one that cannot be read (a key of another type) reads empty.
var offsetHashesScript = redis.NewScript(`
local function advisory(key)
  local r = redis.pcall('HGETALL', key)
  if r.err then return {} end
  return r
end
return {redis.call('HGETALL', KEYS[1]), advisory(KEYS[2]), advisory(KEYS[3])}`)

// hashesReply decodes a script's reply of n HGETALL replies (flat field, value lists) into maps.
func hashesReply(cmd *redis.Cmd, n int) ([]map[string]string, error) {
	raw, err := cmd.Slice()
	if err != nil {
		return nil, err
	}
	if len(raw) != n {
		return nil, fmt.Errorf("redisstore: %d hashes in a reply, want %d", len(raw), n)
	}
	out := make([]map[string]string, n)
	for i, h := range raw {
		flat, _ := h.([]any)
		out[i] = make(map[string]string, len(flat)/2)
		for j := 0; j+1 < len(flat); j += 2 {
			f, _ := flat[j].(string)
			v, _ := flat[j+1].(string)
			out[i][f] = v
		}
	}
	return out, nil
}

// readMigratingOffsets reads group's committed offsets while its slot is migrating and its hashes
// are not all on one master (one of them does not exist: the metadata hash of a group that commits
// none; or some have moved): Redis refuses a script or transaction on them (TRYAGAIN) until the slot
// has moved. Read one by one, each hash is redirected on its own (ASK), and an offset may be paired
// with the metadata or time of a commit landing between the reads.
func (s *Store) readMigratingOffsets(ctx context.Context, group string) ([]Committed, error) {
	pipe := s.rdb.Pipeline()
	offs, mds, tss := pipe.HGetAll(ctx, s.keys.offsets(group)), pipe.HGetAll(ctx, s.keys.offsetsMD(group)),
		pipe.HGetAll(ctx, s.keys.offsetsTS(group))
	_, _ = pipe.Exec(ctx)
	if err := offs.Err(); err != nil {
		return nil, err
	}
	// The metadata and the sidecar are advisory: a failed read leaves them empty.
	return s.committedOf(offs.Val(), mds.Val(), tss.Val()), nil
}

// committedOf is the committed partitions of a group's canonical, metadata and sidecar hashes, sorted
// by topic and partition.
func (s *Store) committedOf(offs, md, sidecar map[string]string) []Committed {
	out := make([]Committed, 0, len(offs))
	for field, v := range offs {
		topic, p, ok := s.keys.parseStreamKey(field)
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			continue
		}
		c := Committed{Topic: topic, Partition: p, Offset: n, Metadata: md[field], CommitTime: -1, SidecarOffset: -1}
		if raw, ok := sidecar[field]; ok {
			c.SidecarOffset, c.CommitTime = parseSidecar(raw)
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}

// parseSidecar decodes "<offset>|<epoch ms>"; anything else is (-1, -1).
func parseSidecar(raw string) (offset, ms int64) {
	o, t, ok := strings.Cut(raw, "|")
	if !ok {
		return -1, -1
	}
	off, err1 := strconv.ParseInt(o, 10, 64)
	ts, err2 := strconv.ParseInt(t, 10, 64)
	if err1 != nil || err2 != nil || off < 0 || ts < 0 {
		return -1, -1
	}
	return off, ts
}

// writeOwned runs script, one of owner.go's writes of group's offsets (its keys ownedKeys, args from
// the owner on), and returns its answer. err is its failure, ErrNotOwner for the owner check's refusal.
// With WaitReplicas or WaitAOF it runs on a connection of its own to the group's master, as WAIT /
// WAITAOF confirm only the writes of the connection they run on, and waits there: notDurable reports
// a write done on the master that its replicas (or AOF) did not confirm, which a failover could undo.
func (s *Store) writeOwned(ctx context.Context, group string, script *redis.Script, args ...any) (answer *redis.Cmd, notDurable, err error) {
	if s.opts.WaitReplicas == 0 && !s.opts.WaitAOF {
		answer = script.Run(ctx, s.rdb, s.ownedKeys(group), args...)
		return answer, nil, ownerError(answer.Err())
	}
	node, err := s.masterFor(ctx, s.keys.offsets(group))
	if err != nil {
		return nil, nil, err
	}
	conn := node.Conn()
	defer conn.Close()
	answer = script.Run(ctx, conn, s.ownedKeys(group), args...)
	if err := answer.Err(); err != nil {
		if redis.HasErrorPrefix(err, "MOVED") {
			// The node client does not redirect: the group's slot moved, and the next write should
			// find its new master without waiting for the periodic reload of the slot map.
			s.RefreshTopology(ctx)
		}
		return nil, nil, ownerError(err)
	}
	return answer, s.waitDurable(ctx, conn), nil
}

// DeleteOffsets removes the committed offsets (canonical, sidecar, metadata) of the given partitions,
// if the group's owner record names owner (see CommitOffsets); otherwise it returns ErrNotOwner.
func (s *Store) DeleteOffsets(ctx context.Context, group, owner string, parts []OffsetCommit) error {
	if len(parts) == 0 {
		return nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	fields := make([]string, len(parts))
	args := make([]any, 0, 1+len(parts))
	args = append(args, owner)
	for i, p := range parts {
		fields[i] = s.keys.stream(p.Topic, p.Partition)
		args = append(args, fields[i])
	}
	// The Redis consumer group mirrors the committed offset; with no offset it must not claim one. It
	// goes first, so a failure leaves the offsets for a retry to find, and again after, as a commit
	// through another gateway (a coordinator move) may have made it again meanwhile. A deletion refused
	// (ErrNotOwner) has destroyed the Redis consumer groups all the same: the owner's next commit of
	// each partition makes its group again.
	if err := s.destroyRedisGroups(ctx, group, fields); err != nil {
		return err
	}
	_, notDurable, err := s.writeOwned(ctx, group, deleteOffsetsScript, args...)
	if err != nil {
		return err
	}
	_ = s.destroyRedisGroups(ctx, group, fields)
	return notDurable
}

// destroyRedisGroups destroys the Redis consumer group named group on each of the streams. A stream or
// group already gone is fine; any other failure (a timeout) is returned, for the deletion to be retried:
// a Redis consumer group left behind keeps claiming a position its Kafka group no longer has.
func (s *Store) destroyRedisGroups(ctx context.Context, group string, streams []string) error {
	if len(streams) == 0 {
		return nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(streams))
	for i, f := range streams {
		cmds[i] = pipe.XGroupDestroy(ctx, f, group)
	}
	_, _ = pipe.Exec(ctx)
	for _, c := range cmds {
		if err := c.Err(); err != nil && !strings.Contains(err.Error(), "requires the key to exist") {
			return err
		}
	}
	return nil
}

// DeleteGroup removes every committed offset of group and its Redis consumer groups, if the group's
// owner record names owner (see CommitOffsets); otherwise it returns ErrNotOwner. The owner record
// stays (until it expires, owner.go), so that a commit from a gateway that owned the group before,
// delayed on its way, is refused rather than bringing offsets back.
//
// The Redis consumer groups of the partitions the offsets name go first, so a failure leaves the
// offsets for a retry to find; then the offsets, read and deleted in one script; then the Redis
// consumer groups of what that read, again: a commit from another gateway (a coordinator move) may have
// made one again meanwhile. A commit between the script and the end keeps its offsets and the group
// stays listed.
func (s *Store) DeleteGroup(ctx context.Context, group, owner string) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	before, err := s.rdb.HKeys(ctx, s.keys.offsets(group)).Result()
	if err != nil {
		return err
	}
	if err := s.destroyRedisGroups(ctx, group, s.streamFields(before)); err != nil {
		return err
	}
	deleted, notDurable, err := s.writeOwned(ctx, group, deleteGroupScript, owner)
	if err != nil {
		return err
	}
	fields, _ := deleted.StringSlice()
	_ = s.destroyRedisGroups(ctx, group, s.streamFields(fields))
	s.forgetIndexed(group)
	if err := s.rdb.SRem(ctx, s.keys.groups(), group).Err(); err != nil {
		return err
	}
	if again, err := s.GroupExists(ctx, group); err == nil && again {
		return s.rdb.SAdd(ctx, s.keys.groups(), group).Err()
	}
	return notDurable
}

// streamFields is the fields of an offsets hash that name kgate partition streams.
func (s *Store) streamFields(fields []string) []string {
	var streams []string
	for _, f := range fields {
		if _, _, ok := s.keys.parseStreamKey(f); ok {
			streams = append(streams, f)
		}
	}
	return streams
}

// GroupExists reports whether group has committed offsets in Redis.
func (s *Store) GroupExists(ctx context.Context, group string) (bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	n, err := s.rdb.Exists(ctx, s.keys.offsets(group)).Result()
	return n > 0, err
}

// Groups lists the groups that have committed offsets, sorted. The groups set is only an index: a
// member whose offsets were all deleted (DeleteOffsets, or a DeleteGroup racing a commit) is left out.
// unchecked lists, sorted, the members whose master could not be asked (on a Redis Cluster, that
// master down): each master checks its own, so one down does not fail every group with it.
func (s *Store) Groups(ctx context.Context) (groups, unchecked []string, err error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	gs, err := s.rdb.SMembers(ctx, s.keys.groups()).Result()
	if err != nil {
		return nil, nil, err
	}
	exists := perMaster(ctx, s, len(gs), func(i int) string { return s.keys.offsets(gs[i]) },
		func(ctx context.Context, idx []int) []*redis.IntCmd {
			pipe := s.rdb.Pipeline()
			cmds := make([]*redis.IntCmd, len(idx))
			for k, i := range idx {
				cmds[k] = pipe.Exists(ctx, s.keys.offsets(gs[i]))
			}
			_, _ = pipe.Exec(ctx)
			return cmds
		}, func(c *redis.IntCmd) bool { return c.Err() == nil }, redis.NewIntResult(0, errMasterLagging))
	var failed error
	for i, g := range gs {
		switch err := exists[i].Err(); {
		case err != nil:
			unchecked, failed = append(unchecked, g), err
		case exists[i].Val() > 0:
			groups = append(groups, g)
		}
	}
	if len(unchecked) == len(gs) && failed != nil {
		return nil, nil, failed // nothing checked: the groups set alone is no answer
	}
	sort.Strings(groups)
	sort.Strings(unchecked)
	return groups, unchecked, nil
}

// StreamKey is the Redis key of a partition's stream (the field name in the offset hashes).
func (s *Store) StreamKey(topic string, partition int32) string {
	return s.keys.stream(topic, partition)
}

// OffsetKeys names a group's canonical, sidecar and metadata hashes.
func (s *Store) OffsetKeys(group string) (canonical, sidecar, metadata string) {
	return s.keys.offsets(group), s.keys.offsetsTS(group), s.keys.offsetsMD(group)
}

// ExpireProducers drops the idempotence state of the producers of a topic's partitions whose last
// batch was stored before cutoff (Apache's producer.id.expiration.ms): every producer id that wrote to a
// partition otherwise keeps a field in its meta hash for good. A dropped producer's next batch is
// accepted at any sequence, as on Apache; a retry of one of its batches from before is then no longer
// recognised. It returns the number of producers dropped on the partitions whose expiry ran, and the
// first failure of the others. One pipeline per master: on a Redis Cluster a master down fails its
// own partitions alone, not every partition after the command timeout (perMaster).
func (s *Store) ExpireProducers(ctx context.Context, topic string, partitions []int32, cutoff, now time.Time) (int, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	type answer struct {
		dropped int
		err     error
	}
	res := perMaster(ctx, s, len(partitions), func(i int) string { return s.keys.meta(topic, partitions[i]) },
		func(ctx context.Context, idx []int) []answer {
			pipe := s.rdb.Pipeline()
			cmds := make([]*redis.Cmd, len(idx))
			for k, i := range idx {
				// EVAL, not EVALSHA: a pipelined script has no NOSCRIPT fallback.
				cmds[k] = expireProducersScript.Eval(ctx, pipe, []string{s.keys.meta(topic, partitions[i])}, cutoff.UnixMilli(), now.UnixMilli())
			}
			_, _ = pipe.Exec(ctx)
			out := make([]answer, len(idx))
			for k, c := range cmds {
				n, err := c.Int()
				out[k] = answer{n, err}
			}
			return out
		}, func(a answer) bool { return a.err == nil }, answer{err: errMasterLagging})
	dropped := 0
	var first error
	for _, a := range res {
		dropped += a.dropped
		if first == nil {
			first = a.err
		}
	}
	return dropped, first
}
