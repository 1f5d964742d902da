package gateway

import (
	"context"
	"errors"
	"hash/maphash"
	"net"
	"sync"
	"unicode/utf16"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kgate/kgate/coordinator"
)

// maxCommitMetadata is Apache's offset.metadata.max.bytes default, which it compares with the length
// of a Java string: UTF-16 code units, not bytes.
const maxCommitMetadata = 4096

// commitMetadataTooLarge reports whether md is over maxCommitMetadata as Apache counts it. A UTF-8
// string never has more UTF-16 units than bytes, so only a longer one is counted.
func commitMetadataTooLarge(md string) bool {
	if len(md) <= maxCommitMetadata {
		return false
	}
	units := 0
	for _, r := range md {
		units += utf16.RuneLen(r)
	}
	return units > maxCommitMetadata
}

// notCoordinator returns NOT_COORDINATOR when another gateway coordinates group (or
// COORDINATOR_NOT_AVAILABLE when no gateway can), 0 when this one does.
func (g *Gateway) notCoordinator(group string) int16 {
	n, ok := g.nodes.coordinatorFor(group)
	switch {
	case !ok:
		return kerr.CoordinatorNotAvailable.Code
	case n.ID != g.cfg.NodeID:
		return kerr.NotCoordinator.Code
	}
	select {
	case <-g.ready:
		return 0
	default:
		return kerr.CoordinatorLoadInProgress.Code
	}
}

// describeGroup is the coordinator's view of group: found false when the coordinator does not hold it
// (it has no members here), and code nonzero when that cannot be told: the coordinator is closing, ctx
// ended, or the group moved to another gateway since the caller's check of notCoordinator (its
// members are rejoining there). A caller that acts on a group having no members must not take those
// for "no members".
func (g *Gateway) describeGroup(ctx context.Context, group string) (info coordinator.GroupInfo, found bool, code int16) {
	info, err := g.coord.Lookup(ctx, group)
	switch {
	case err == nil:
		return info, true, 0
	case errors.Is(err, coordinator.ErrUnknownGroup):
		return info, false, g.notCoordinator(group)
	default:
		return info, false, kerr.CoordinatorNotAvailable.Code
	}
}

// groupWrites orders the writes of a group's committed offsets, as Apache does under its group lock:
// commits (validated by the coordinator, then stored in several Redis round trips) run together, and
// a deletion (DeleteGroups, OffsetDelete) runs alone, between its check of the group and the end of
// its Redis writes. Interleaved, a commit's Redis consumer group outlived the deletion of the group's
// offsets, or a deleted group's offsets came back after its check. Groups share a fixed set of
// stripes, so the guard takes no memory per group.
//
// Commits do not exclude each other: held across their Redis round trips, an exclusive lock made a
// stalled Redis cost the k-th commit of a stripe k command timeouts, other groups' included. Two
// commits of one partition at once (two consumers assigning it to themselves under one group id) can
// therefore leave its Redis consumer group at the other's offset until the next commit.
type groupWrites struct {
	seed    maphash.Seed
	stripes [64]sync.RWMutex
}

func newGroupWrites() *groupWrites { return &groupWrites{seed: maphash.MakeSeed()} }

func (w *groupWrites) of(group string) *sync.RWMutex {
	return &w.stripes[maphash.String(w.seed, group)%uint64(len(w.stripes))]
}

// commit holds group's writes for a commit; the returned function releases them.
func (w *groupWrites) commit(group string) func() {
	l := w.of(group)
	l.RLock()
	return l.RUnlock
}

// delete holds group's writes for a deletion, excluding commits and other deletions.
func (w *groupWrites) delete(group string) func() {
	l := w.of(group)
	l.Lock()
	return l.Unlock
}

// clientHost is the host part of a remote address, as Kafka reports it ("/127.0.0.1").
func clientHost(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	return "/" + host
}
