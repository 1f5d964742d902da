package redisstore

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kgate/kgate/internal/redistest"
)

// The package's tests share one standalone redis-server and one 3-master cluster; every test works in
// its own key namespace. KGATE_SKIP_REDIS=1 runs only the tests that need no redis-server (unit tests
// and the embedded store); otherwise a missing redis-server fails the run, so CI cannot skip silently.
var (
	standalone *redistest.Server
	cluster    *redistest.Cluster
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if os.Getenv("KGATE_SKIP_REDIS") == "1" {
		fmt.Fprintln(os.Stderr, "redisstore: KGATE_SKIP_REDIS=1: skipping the tests against real Redis")
		return m.Run()
	}
	if !redistest.Available() {
		fmt.Fprintln(os.Stderr, "redisstore: redis-server is not on PATH; install it or set KGATE_SKIP_REDIS=1")
		return 1
	}
	var err error
	if standalone, err = redistest.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "redisstore:", err)
		return 1
	}
	defer standalone.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if cluster, err = redistest.StartCluster(ctx, 3, 0); err != nil {
		fmt.Fprintln(os.Stderr, "redisstore:", err)
		return 1
	}
	defer cluster.Stop()
	return m.Run()
}

// backendOptions are the connection options of the shared servers, by backend name.
func backendOptions(t *testing.T, backend string) Options {
	t.Helper()
	if standalone == nil {
		t.Skip("KGATE_SKIP_REDIS=1")
	}
	switch backend {
	case "standalone":
		return Options{Addrs: []string{standalone.Addr}}
	case "cluster":
		return Options{Addrs: cluster.Addrs(), Cluster: true}
	}
	t.Fatalf("unknown backend %q", backend)
	return Options{}
}

var namespaceSeq atomic.Int64

// testNamespace is a namespace of t's own, so tests can share a server (also under -count=N). Hash
// tag braces are kept out, so they cannot disturb the cluster slot of a key.
func testNamespace(t *testing.T) string {
	return fmt.Sprintf("t-%s-%d", strings.NewReplacer(" ", "_", "{", "(", "}", ")").Replace(t.Name()), namespaceSeq.Add(1))
}

// openStore opens a Store with opts in t's namespace and closes it when t ends.
func openStore(t *testing.T, opts Options) *Store {
	t.Helper()
	if opts.Namespace == "" {
		opts.Namespace = testNamespace(t)
	}
	s, err := Open(t.Context(), opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// openOwnServer opens a store on a standalone redis-server of its own (args: its command line beyond
// the defaults), stopped when t ends: for tests that configure it, flush its functions or count its
// commands. It returns the server's address too.
func openOwnServer(t *testing.T, args ...string) (*Store, string) {
	t.Helper()
	srv, err := redistest.Start(args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return openStore(t, Options{Addrs: []string{srv.Addr}}), srv.Addr
}

// forEachBackend runs f as parallel subtests "standalone" and "cluster", each with its own Store.
func forEachBackend(t *testing.T, f func(t *testing.T, s *Store)) {
	t.Helper()
	for _, backend := range []string{"standalone", "cluster"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			f(t, openStore(t, backendOptions(t, backend)))
		})
	}
}

// forEachStore is forEachBackend plus the embedded store ("embedded"), for the flows the embedded
// store must support too. The embedded subtest runs even with KGATE_SKIP_REDIS=1.
func forEachStore(t *testing.T, f func(t *testing.T, s *Store)) {
	t.Helper()
	forEachBackend(t, f)
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		f(t, openEmbedded(t))
	})
}

// openEmbedded opens the in-process store.
func openEmbedded(t *testing.T) *Store {
	t.Helper()
	s := openStore(t, Options{})
	if !s.Embedded() {
		t.Fatal("Open without Addrs did not start the embedded store")
	}
	return s
}

// mustCreateTopic registers a topic with n partitions.
func mustCreateTopic(t *testing.T, s *Store, name string, n int32) Topic {
	t.Helper()
	tp := Topic{Name: name, Partitions: n, Created: time.Now().UnixMilli()}
	if err := s.CreateTopic(t.Context(), tp); err != nil {
		t.Fatalf("CreateTopic(%q): %v", name, err)
	}
	return tp
}

// plain builds n records whose values are "<prefix>-<i>" and timestamps 1000+i.
func plain(prefix string, n int) []Record {
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = Record{Timestamp: int64(1000 + i), Value: []byte(fmt.Sprintf("%s-%d", prefix, i))}
	}
	return recs
}

// mustAppend appends one batch and fails t on an error.
func mustAppend(t *testing.T, s *Store, b *Batch) AppendResult {
	t.Helper()
	res := s.Append(t.Context(), []*Batch{b})[0]
	if res.Err != nil {
		t.Fatalf("Append(%s/%d): %v", b.Topic, b.Partition, res.Err)
	}
	return res
}

// appendOne appends a non-idempotent batch and returns its base offset.
func appendOne(t *testing.T, s *Store, topic string, p int32, recs ...Record) int64 {
	t.Helper()
	return mustAppend(t, s, &Batch{Topic: topic, Partition: p, Records: recs, ProducerID: -1}).BaseOffset
}

// mustRead reads up to count records from offset.
func mustRead(t *testing.T, s *Store, topic string, p int32, offset, count int64) ReadResult {
	t.Helper()
	res := s.Read(t.Context(), []ReadRequest{{Topic: topic, Partition: p, Offset: offset, Count: count}})[0]
	if res.Err != nil {
		t.Fatalf("Read(%s/%d@%d): %v", topic, p, offset, res.Err)
	}
	return res
}

// offsetsOf returns the record offsets.
func offsetsOf(recs []Record) []int64 {
	out := make([]int64, len(recs))
	for i, r := range recs {
		out[i] = r.Offset
	}
	return out
}

func seq(from, to int64) []int64 {
	var out []int64
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// checkFor polls cond until it holds or the deadline passes (never sleep-and-hope).
func checkFor(t *testing.T, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// addForeignThenDelete XADDs an entry with a time-based ID to a partition's stream and XDELs it, as a
// native app cleaning up after itself does: the stream's entries stay kgate's, its last ID does not.
func addForeignThenDelete(t *testing.T, s *Store, key string) {
	t.Helper()
	ctx := t.Context()
	id, err := s.Client().XAdd(ctx, &redis.XAddArgs{Stream: key, ID: "*", Values: []string{"native", "1"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Client().XDel(ctx, key, id).Err(); err != nil {
		t.Fatal(err)
	}
}

// checkValues fails t unless partition 0 of topic holds, from offset 1 on, records of the values want
// (as fmt prints a []string).
func checkValues(t *testing.T, s *Store, topic, want string) {
	t.Helper()
	var got []string
	for _, r := range mustRead(t, s, topic, 0, 1, 10).Records {
		got = append(got, string(r.Value))
	}
	if fmt.Sprint(got) != want {
		t.Fatalf("stored %v, want %s", got, want)
	}
}
