package redisstore

import (
	"context"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Redis Cluster with a master down (cluster-require-full-coverage no) goes on serving the other
// masters' slots. A pipeline across masters does not: the cluster client, its retries for the master
// down out of time, gives every command of it the context's error, those the other masters answered
// too, and only after the command timeout. So the calls that span partitions (Read, the offsets
// reads, DeleteRecordsOf, LookUpTimes, ExpireProducers, StreamMemory) run each master's share on its own (acrossMasters): one
// pipeline per master, as the cluster client sends anyway, so the round trips are the same, and a
// master that fails fails its own partitions alone.

// masterLag is how long, once one master's share of a call has answered, the call waits for the other
// masters' before it answers their partitions errMasterLagging: a master that does not answer (cut off,
// stopped) would otherwise hold the partitions of every live master for the whole command timeout, at
// every fetch. A live master answers a read within milliseconds of the others; one a second behind is
// not serving. A master left behind so is not waited for at all by the calls after (once the others
// have answered) until one of its shares answers (Store.behind): a consumer whose every fetch names one
// of its partitions would otherwise wait masterLag at each.
const masterLag = time.Second

// errMasterLagging answers the partitions of a master that had not answered masterLag after another
// master did: a Redis failure (IsUnavailable), retriable, a timeout.
var errMasterLagging = fmt.Errorf("redisstore: the partition's master did not answer when the others had: %w", context.DeadlineExceeded)

// byMaster splits items 0..n-1 by the master owning key(i), in the order each master first appears,
// and names each group's master; nil when they are all on one (a standalone Redis, the embedded store)
// or the slot map is not known.
func (s *Store) byMaster(ctx context.Context, n int, key func(i int) string) (groups [][]int, masters []*redis.Client) {
	c, ok := s.rdb.(*redis.ClusterClient)
	if !ok || n < 2 {
		return nil, nil
	}
	at := map[*redis.Client]int{}
	for i := range n {
		node, err := c.MasterForKey(ctx, key(i))
		if err != nil {
			return nil, nil
		}
		j, ok := at[node]
		if !ok {
			j = len(groups)
			at[node] = j
			groups, masters = append(groups, nil), append(masters, node)
		}
		groups[j] = append(groups[j], i)
	}
	if len(groups) < 2 {
		return nil, nil
	}
	return groups, masters
}

// picked is xs at idx, in idx's order: a master's share of a call's items (perMaster).
func picked[T any](xs []T, idx []int) []T {
	out := make([]T, len(idx))
	for k, i := range idx {
		out[k] = xs[i]
	}
	return out
}

// perMaster answers items 0..n-1 (key(i) is a key of item i), each master's share of them by share
// (its results in the order of idx), and returns the results by item. On a Redis Cluster the masters'
// shares run at once (acrossMasters), and the items of a master left behind get lagging; answered
// says a result is an answer, not a failure. On one master (a standalone Redis, the embedded store),
// share answers every item on the caller's goroutine.
func perMaster[T any](ctx context.Context, s *Store, n int, key func(i int) string, share func(ctx context.Context, idx []int) []T, answered func(T) bool, lagging T) []T {
	groups, masters := s.byMaster(ctx, n, key)
	if groups == nil {
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		return share(ctx, all)
	}
	res, done := acrossMasters(ctx, s, groups, masters, share, func(res []T) bool { return slices.ContainsFunc(res, answered) })
	out := make([]T, n)
	for j, idx := range groups {
		for k, i := range idx {
			if done[j] {
				out[i] = res[j][k]
			} else {
				out[i] = lagging
			}
		}
	}
	return out
}

// acrossMasters runs share for each of groups (byMaster; masters[j] owns groups[j]), each on a
// goroutine of its own, and returns their results by group, done[j] saying whether group j's is there.
// Once a group has answered something (answered says so of its result: not a failure of every item),
// the others get masterLag more, and none at all those of masters left behind before (Store.behind)
// once the others are in; a group still out then is left to finish on its own (its context
// cancelled: a read blocked on its connection ends at its deadline, or when Close closes the client,
// which waits for it), its result dropped, its master marked behind until one of its shares answers.
// The share of a master already behind is not cancelled so, only ended by the call's deadline: it
// has to dial the master again once it is back, and cancelled it never would.
// A panic of a group's goroutine is raised again on the caller's, while it waits, and told to the
// panic observer ("store_read") after.
func acrossMasters[R any](ctx context.Context, s *Store, groups [][]int, masters []*redis.Client, share func(ctx context.Context, idx []int) R, answered func(R) bool) (res []R, done []bool) {
	type reply struct {
		j     int
		res   R
		panic string
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	replies := make(chan reply, len(groups))
	var mu sync.Mutex
	left := false // the caller waits no more: a panic goes to the observer
	defer func() {
		mu.Lock()
		left = true
		mu.Unlock()
	}()
	behind := make([]bool, len(groups))
	for j, idx := range groups {
		_, behind[j] = s.behind.Load(masters[j])
		// The share of a master behind is the one that can find it back: the caller does not wait
		// for it, and its context ended with the call would cancel it in its dial (its connections
		// went with their timed-out reads) every time. It keeps the call's deadline alone (a command
		// timeout when the call has none).
		sctx, scancel := ctx, context.CancelFunc(func() {})
		if behind[j] {
			sctx = context.WithoutCancel(ctx)
			if dl, ok := ctx.Deadline(); ok {
				sctx, scancel = context.WithDeadline(sctx, dl)
			} else { // every call bounds its context (Store.bound): should one not
				sctx, scancel = context.WithTimeout(sctx, s.opts.CommandTimeout)
			}
		}
		s.lagging.Add(1)
		go func() {
			defer s.lagging.Done()
			defer scancel()
			r := reply{j: j}
			defer func() {
				p := recover()
				mu.Lock()
				defer mu.Unlock()
				if p != nil {
					stack := debug.Stack()
					if left {
						if fn := s.panicObserver; fn != nil {
							fn("store_read", p, stack)
						}
						return
					}
					r.panic = fmt.Sprintf("%v (on a goroutine of the store's, with its stack:)\n%s", p, stack)
				} else if answered(r.res) {
					s.behind.Delete(masters[j]) // after the caller's mark, should it have left
				}
				if !left {
					replies <- r // buffered for every group: never blocks
				}
			}()
			r.res = share(sctx, idx)
		}()
	}
	res, done = make([]R, len(groups)), make([]bool, len(groups))
	var timer *time.Timer
	var lag <-chan time.Time // nil until a group has answered
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	answeredOne := false
	take := func(r reply) {
		if r.panic != "" {
			panic(r.panic)
		}
		res[r.j], done[r.j] = r.res, true
		if timer == nil && answered(r.res) {
			answeredOne = true
			timer = time.NewTimer(masterLag)
			lag = timer.C
		}
	}
	// waiting says whether a group the caller still waits for is out: any but those of masters
	// behind, once a group has answered.
	waiting := func() bool {
		for j := range groups {
			if !done[j] && (!behind[j] || !answeredOne) {
				return true
			}
		}
		return false
	}
	for waiting() {
		select {
		case r := <-replies:
			take(r)
			continue
		case <-lag:
		}
		break
	}
	mu.Lock()
	left = true
	var late []reply // sent before the caller left
	for {
		select {
		case r := <-replies:
			late = append(late, r)
			continue
		default:
		}
		break
	}
	in := slices.Clone(done)
	for _, r := range late {
		in[r.j] = true
	}
	for j := range groups {
		if !in[j] {
			s.behind.Store(masters[j], struct{}{})
		}
	}
	mu.Unlock()
	for _, r := range late {
		take(r)
	}
	return res, done
}
