package gateway

import (
	"context"
	"strconv"
	"time"

	"github.com/kgate/kgate/redisstore"
)

// runRetention enforces retention.ms: records older than the topic's retention are deleted by moving
// the log start offset (as DeleteRecords does). A pass can be long: each topic's cutoff comes from its
// registry entry as the pass reaches it, and each trim goes on only while the entry still has that
// topic ID and retention. Every producerExpiryEvery, the same pass drops the idempotence state of
// producers idle for ProducerIDExpiration. Each gateway handles the partitions it leads, so the work
// is spread and not repeated. Apache deletes whole segments, so it keeps some older records for a
// while; kgate deletes record by record and keeps none.
func (g *Gateway) runRetention(ctx context.Context) {
	every(ctx, g.cfg.RetentionCheckInterval, func() { g.enforceRetention(ctx, time.Now()) })
}

// ledPartitions lists the partitions of topic name, of n, that this gateway leads.
func (g *Gateway) ledPartitions(name string, n int32) []int32 {
	var led []int32
	for p := range n {
		if g.nodes.leaderFor(name, p).ID == g.cfg.NodeID {
			led = append(led, p)
		}
	}
	return led
}

// retentionOf is topic t's retention.ms, as configured.
func (g *Gateway) retentionOf(t redisstore.Topic) string {
	v, _ := g.topicConfig(t, "retention.ms")
	return v
}

// afterRetentionScan, set by tests, runs between a partition's scan and its trim.
var afterRetentionScan func()

// producerExpiryEvery is how often the retention pass also drops idle producers' state, as Apache
// checks every producer.id.expiration.check.interval.ms (10 min): the expiry reads a partition's
// whole producer state in one script, which with hundreds of thousands of producers in a partition
// holds Redis for about a second, and is needed only once state is a day old.
const producerExpiryEvery = 10 * time.Minute

func (g *Gateway) enforceRetention(ctx context.Context, now time.Time) {
	topics, err := g.topics.all(ctx)
	if err != nil {
		return
	}
	expire := g.cfg.ProducerIDExpiration > 0 && now.Sub(g.producersExpired) >= producerExpiryEvery
	if expire {
		g.producersExpired = now
	}
	for _, name := range redisstore.TopicNames(topics) {
		if len(g.ledPartitions(name, topics[name].Partitions)) == 0 {
			continue
		}
		// A pass can be long, and the topic deleted, or deleted and created again, since it began: the
		// topic's entry now gives the cutoff, and is checked again before the trims.
		t, err := g.store.Topic(ctx, name)
		if err != nil {
			continue
		}
		v := g.retentionOf(t)
		ms, err := strconv.ParseInt(v, 10, 64)
		cutoff := now.UnixMilli() - ms
		// -1 keeps records for ever, and so does a retention reaching before 1970 (Long.MAX_VALUE, the
		// other way to say it): no record is older than that cutoff, not even one stamped -1.
		timed := err == nil && ms >= 0 && cutoff > 0
		led := g.ledPartitions(name, t.Partitions)
		if expire && len(led) > 0 {
			// A partition whose master failed is left for the next pass, not the others with it.
			if n, _ := g.store.ExpireProducers(ctx, name, led, now.Add(-g.cfg.ProducerIDExpiration), now); n > 0 {
				g.log.Debug().Str("topic", name).Int("producers", n).Msg("idle producers' state dropped")
			}
		}
		if !timed || len(led) == 0 {
			continue
		}
		// The high watermarks before the scans: when no record is at or after the cutoff, every one
		// below it is older, but a record appended since the scan must stay. A partition whose read
		// failed (its master down) is left for the next pass, not the others with it.
		offs, offErrs := g.store.EachPartitionOffsets(ctx, name, led)
		// The partitions whose high watermark is known are scanned together (OffsetsForTime): 64 of
		// a topic's scans take the round trips of their longest, not of each in turn.
		var scanned []int32
		var ends []int64
		for i, p := range led {
			if offErrs[i] == nil {
				scanned, ends = append(scanned, p), append(ends, offs[i].End)
			}
		}
		var trims []redisstore.Trim
		for i, a := range g.store.OffsetsForTime(ctx, name, scanned, cutoff) {
			if a.Err != nil {
				continue
			}
			if afterRetentionScan != nil {
				afterRetentionScan()
			}
			before := a.Offset
			if !a.Found {
				// No record at or after the cutoff: every one below the high watermark is older, if the
				// partition's records have timestamps at all; records without one stay (Apache would go
				// by the segment file's time).
				if a.Timestamp < 0 || a.Timestamp >= cutoff { // OffsetForTime: the partition's largest timestamp
					continue
				}
				before = ends[i]
			}
			trims = append(trims, redisstore.Trim{Partition: scanned[i], Before: before})
		}
		if len(trims) == 0 {
			continue
		}
		// The entry read again after the scans, once for the topic, and the trims in one round trip
		// after it, so that a trim still follows a check of the entry by one round trip, as when each
		// partition read it before its own trim.
		if cur, err := g.store.Topic(ctx, name); err != nil || cur.ID != t.ID || g.retentionOf(cur) != v {
			continue // deleted (or created again), or its retention changed, since the scans: next pass
		}
		for i, r := range g.store.DeleteRecordsOf(ctx, name, trims) {
			if r.Err == nil && ctx.Err() == nil {
				g.log.Debug().Str("topic", name).Int32("partition", trims[i].Partition).Int64("log_start", r.Start).Msg("retention applied")
			}
		}
	}
}
