package gateway

import "sync"

// partKey names one topic-partition.
type partKey struct {
	topic     string
	partition int32
}

// appendNotifier wakes long-polling fetches when a partition they wait on grows. Appends made through
// this gateway notify directly; appends through other gateways arrive from the cluster watcher.
type appendNotifier struct {
	mu      sync.Mutex
	waiters map[partKey]map[*fetchWaiter]struct{}
}

type fetchWaiter struct{ ch chan struct{} }

func newAppendNotifier() *appendNotifier {
	return &appendNotifier{waiters: make(map[partKey]map[*fetchWaiter]struct{})}
}

// register returns a waiter signalled at the next append to any of parts.
func (n *appendNotifier) register(parts []partKey) *fetchWaiter {
	w := &fetchWaiter{ch: make(chan struct{}, 1)}
	n.mu.Lock()
	for _, p := range parts {
		set := n.waiters[p]
		if set == nil {
			set = make(map[*fetchWaiter]struct{})
			n.waiters[p] = set
		}
		set[w] = struct{}{}
	}
	n.mu.Unlock()
	return w
}

func (n *appendNotifier) unregister(w *fetchWaiter, parts []partKey) {
	n.mu.Lock()
	for _, p := range parts {
		if set := n.waiters[p]; set != nil {
			delete(set, w)
			if len(set) == 0 {
				delete(n.waiters, p)
			}
		}
	}
	n.mu.Unlock()
}

// notify wakes every waiter of p; a waiter already signalled stays signalled.
func (n *appendNotifier) notify(p partKey) {
	n.mu.Lock()
	for w := range n.waiters[p] {
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
	n.mu.Unlock()
}

// notifyAll wakes every waiter: appends may have happened that no notification tells of (the
// subscription to other gateways' appends was down), and a fetch woken for nothing only reads again.
func (n *appendNotifier) notifyAll() {
	n.mu.Lock()
	for _, set := range n.waiters {
		for w := range set {
			select {
			case w.ch <- struct{}{}:
			default:
			}
		}
	}
	n.mu.Unlock()
}
