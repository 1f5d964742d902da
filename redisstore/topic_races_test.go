package redisstore

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestDeleteTopicStaleReadSparesNewTopic: two gateways delete one topic at once, and a third creates it
// again while the slower deletion is between its read of the registry entry and its removal of the
// partitions' keys. The slower deletion must not take the meta hashes of the topic created again:
// that topic stays appendable. Before, it unlinked them, and the new topic was left registered (the
// deletion's removal of the old entry finding it gone, or finding the new one under another ID)
// without meta: every append to it answered UNKNOWN_TOPIC_OR_PARTITION until it was deleted again.
//
// "registered after": the deletion by name removes the old entry (gone already) before the new one is
// registered. "registered before": the deletion by the old topic's ID finds the new entry, under
// another ID, and leaves it.
func TestDeleteTopicStaleReadSparesNewTopic(t *testing.T) {
	for _, tc := range []struct {
		name             string
		registeredBefore bool
	}{{"registered after", false}, {"registered before", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opts := backendOptions(t, "standalone")
			opts.Namespace = testNamespace(t)
			first, slow, creator := openStore(t, opts), openStore(t, opts), openStore(t, opts)
			ctx := t.Context()
			const name = "reborn"
			oldID, newID := [16]byte{'o', 'l', 'd'}, [16]byte{'n', 'e', 'w'}
			if err := first.CreateTopic(ctx, Topic{Name: name, ID: oldID, Partitions: 2, Created: 1}); err != nil {
				t.Fatal(err)
			}
			appendOne(t, first, name, 0, plain("old", 1)...)

			// The slow deletion stops right after it read the registry entry.
			read, resume := make(chan struct{}), make(chan struct{})
			slow.Client().AddHook(&afterRegistryRead{topics: slow.keys.topics(), do: func() {
				close(read)
				<-resume
			}})
			// The creation stops right before it registers the topic (its meta written), unless
			// registeredBefore.
			written, register := make(chan struct{}), make(chan struct{})
			var registering atomic.Bool
			creator.Client().AddHook(processHook(func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				args := cmd.Args()
				if entry, ok := args[len(args)-1].([]byte); ok && len(entry) > 0 && !tc.registeredBefore && !registering.Swap(true) {
					close(written)
					<-register
				}
				return next(ctx, cmd)
			}))

			slowDone := make(chan error, 1)
			go func() {
				if tc.registeredBefore {
					slowDone <- slow.DeleteTopicID(ctx, name, oldID)
				} else {
					slowDone <- slow.DeleteTopic(ctx, name)
				}
			}()
			<-read
			if err := first.DeleteTopic(ctx, name); err != nil {
				t.Fatal(err)
			}
			created := make(chan error, 1)
			go func() { created <- creator.CreateTopic(ctx, Topic{Name: name, ID: newID, Partitions: 2, Created: 2}) }()
			if tc.registeredBefore {
				if err := <-created; err != nil {
					t.Fatal(err)
				}
			} else {
				<-written
			}
			close(resume)
			err := <-slowDone
			if tc.registeredBefore && !errors.Is(err, ErrUnknownTopic) || !tc.registeredBefore && err != nil {
				t.Fatalf("the slow deletion: %v", err)
			}
			if !tc.registeredBefore {
				close(register)
				if err := <-created; err != nil {
					t.Fatal(err)
				}
			}

			got, err := creator.Topic(ctx, name)
			if err != nil || got.ID != newID {
				t.Fatalf("topic after the deletions: %+v, %v; want the one created again", got, err)
			}
			for p := range got.Partitions {
				b := &Batch{Topic: name, Partition: p, ProducerID: -1, KnownPartition: p < got.PartitionMeta, Records: plain("new", 1)}
				actx, cancel := context.WithTimeout(ctx, 5*time.Second)
				r := creator.Append(actx, []*Batch{b})[0]
				cancel()
				if r.Err != nil || r.BaseOffset != 0 {
					t.Errorf("append to partition %d of the topic created again: %+v, want stored at 0", p, r)
				}
			}
		})
	}
}

// afterRegistryRead is a client hook that runs do once, right after the first command (alone or in a
// pipeline) that read an entry of the registry (topics, the registry key) was answered.
type afterRegistryRead struct {
	topics string
	do     func()
	done   atomic.Bool
}

func (h *afterRegistryRead) reads(cmds ...redis.Cmder) bool {
	for _, c := range cmds {
		if args := c.Args(); c.Name() == "hget" && len(args) > 1 && args[1] == h.topics {
			return true
		}
	}
	return false
}

func (h *afterRegistryRead) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *afterRegistryRead) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h.reads(cmd) && !h.done.Swap(true) {
			h.do()
		}
		return err
	}
}
func (h *afterRegistryRead) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if h.reads(cmds...) && !h.done.Swap(true) {
			h.do()
		}
		return err
	}
}
