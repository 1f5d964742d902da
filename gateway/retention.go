package gateway

import (
	"context"
	"strconv"
	"time"
)

// runRetention enforces retention.ms: records older than the topic's retention are deleted by moving
// the log start offset (as DeleteRecords does). Every producerExpiryEvery, the same pass drops the
// idempotence state of producers idle for ProducerIDExpiration. Each gateway handles the partitions it leads, so the
// work is spread and not repeated. Apache deletes whole segments, so it keeps some older records for a
// while; kgate deletes record by record and keeps none.
func (g *Gateway) runRetention(ctx context.Context) {
	every(ctx, g.cfg.RetentionCheckInterval, func() { g.enforceRetention(ctx, time.Now()) })
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
	for name, t := range topics {
		v, _ := g.topicConfig(t, "retention.ms")
		ms, err := strconv.ParseInt(v, 10, 64)
		cutoff := now.UnixMilli() - ms
		// -1 keeps records for ever, and so does a retention reaching before 1970 (Long.MAX_VALUE, the
		// other way to say it): no record is older than that cutoff, not even one stamped -1.
		timed := err == nil && ms >= 0 && cutoff > 0
		var led []int32
		for p := int32(0); p < t.Partitions; p++ {
			if g.nodes.leaderFor(name, p).ID == g.cfg.NodeID {
				led = append(led, p)
			}
		}
		if expire && len(led) > 0 {
			if n, err := g.store.ExpireProducers(ctx, name, led, now.Add(-g.cfg.ProducerIDExpiration), now); err == nil && n > 0 {
				g.log.Debug().Str("topic", name).Int("producers", n).Msg("idle producers' state dropped")
			}
		}
		if !timed {
			continue
		}
		for _, p := range led {
			// The high watermark before the scan: when no record is at or after the cutoff, every one
			// below it is older, but a record appended since the scan must stay.
			offs, err := g.store.PartitionOffsets(ctx, name, []int32{p})
			if err != nil {
				continue
			}
			off, maxTS, found, err := g.store.OffsetForTime(ctx, name, p, cutoff)
			if err != nil {
				continue
			}
			if afterRetentionScan != nil {
				afterRetentionScan()
			}
			before := off
			if !found {
				// No record at or after the cutoff: every one below the high watermark is older, if the
				// partition's records have timestamps at all; records without one stay (Apache would go
				// by the segment file's time).
				if maxTS < 0 || maxTS >= cutoff { // OffsetForTime: the partition's largest timestamp
					continue
				}
				before = offs[0].End
			}
			if start, err := g.store.DeleteRecords(ctx, name, p, before); err == nil && ctx.Err() == nil {
				g.log.Debug().Str("topic", name).Int32("partition", p).Int64("log_start", start).Msg("retention applied")
			}
		}
	}
}
