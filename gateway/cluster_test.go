package gateway

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/kgate/kgate/redisstore"
)

// TestPublishAppendWhenQueueFull: an append notification that finds the publisher's queue full is
// not dropped: it is published with a later batch, so other gateways' long-polls still wake.
func TestPublishAppendWhenQueueFull(t *testing.T) {
	ctx, g, store := embeddedGateway(t, Config{})
	ctx, cancel := context.WithCancel(ctx)
	g.multi.Store(true)
	for len(g.appends) < cap(g.appends) {
		g.appends <- redisstore.AppendMessage("fill", 0)
	}
	g.publishAppend("late", 3)

	var (
		mu  sync.Mutex
		got = map[partKey]bool{}
	)
	subscribed := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		_ = store.SubscribeAppends(ctx, func(topic string, p int32) {
			mu.Lock()
			got[partKey{topic, p}] = true
			mu.Unlock()
		})
	})
	// The subscription is live once a probe message comes through.
	wg.Go(func() {
		for ctx.Err() == nil {
			_ = store.PublishAppends(ctx, []string{redisstore.AppendMessage("probe", 0)})
			mu.Lock()
			ok := got[partKey{"probe", 0}]
			mu.Unlock()
			if ok {
				close(subscribed)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	select {
	case <-subscribed:
	case <-ctx.Done():
		t.Fatal("subscription never live")
	}
	wg.Go(func() { g.runAppendPublisher(ctx) })
	for ctx.Err() == nil {
		mu.Lock()
		ok := got[partKey{"late", 3}]
		mu.Unlock()
		if ok {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the notification that found the queue full was never published")
}
