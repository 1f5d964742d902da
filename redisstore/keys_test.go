package redisstore

import (
	"fmt"
	"hash/fnv"
	"math"
	"testing"
)

func TestKeySchema(t *testing.T) {
	k := keys{ns: "kgate"}
	for _, tc := range []struct{ got, want string }{
		{k.stream("orders", 3), "kgate:stream:{orders:3}"},
		{k.meta("orders", 3), "kgate:meta:{orders:3}"},
		{k.tindex("orders", 3), "kgate:tindex:{orders:3}"},
		{k.producers("orders", 3), "kgate:producers:{orders:3}"},
		{k.topics(), "kgate:topics"},
		{k.producerID(), "kgate:producer-id"},
		{k.groups(), "kgate:groups"},
		{k.gateways(), "kgate:gateways"},
		{k.offsets("g1"), "kgate:offsets:{" + GroupTag("g1") + "}:g1"},
		{k.offsetsTS("g1"), "kgate:offsets-ts:{" + GroupTag("g1") + "}:g1"},
		{k.offsetsMD("g1"), "kgate:offsets-md:{" + GroupTag("g1") + "}:g1"},
	} {
		if tc.got != tc.want {
			t.Errorf("key %q, want %q", tc.got, tc.want)
		}
	}
	s := &Store{keys: keys{ns: "ns"}}
	if got := s.StreamKey("a.b", 0); got != "ns:stream:{a.b:0}" {
		t.Errorf("StreamKey = %q", got)
	}
	c, sc, md := s.OffsetKeys("g")
	if c != s.keys.offsets("g") || sc != s.keys.offsetsTS("g") || md != s.keys.offsetsMD("g") {
		t.Errorf("OffsetKeys = %q %q %q", c, sc, md)
	}
}

func TestEntryIDBijection(t *testing.T) {
	for _, off := range []int64{0, 1, 9, 10, 99, 12345, math.MaxInt64 - 1} {
		id := EntryID(off)
		if want := fmt.Sprintf("0-%d", off+1); id != want {
			t.Errorf("EntryID(%d) = %q, want %q", off, id, want)
		}
		got, ok := OffsetOfID(id)
		if !ok || got != off {
			t.Errorf("OffsetOfID(EntryID(%d)) = %d, %v", off, got, ok)
		}
	}
	for _, id := range []string{
		"", "0", "0-", "0-0", "1-1", "00-1", "0-1-1", "0--1", "0-+1", "0-01", "0-00", "0- 1", "0-1 ",
		"0-x", "0-1.5", "0-9223372036854775808", "1700000000000-0", "*", "-", "+",
	} {
		if off, ok := OffsetOfID(id); ok {
			t.Errorf("OffsetOfID(%q) = %d, true; want rejected", id, off)
		}
	}
}

func TestParseStreamKey(t *testing.T) {
	k := keys{ns: "kgate"}
	for _, tc := range []struct {
		topic string
		p     int32
	}{
		{"orders", 0}, {"orders", 17}, {"a.b.c", 2}, {"with:colon", 1}, {"x:1", 5}, {"a:b:c.d", 0},
		{"_internal-topic", math.MaxInt32}, {"", 3},
	} {
		key := k.stream(tc.topic, tc.p)
		topic, p, ok := k.parseStreamKey(key)
		if !ok || topic != tc.topic || p != tc.p {
			t.Errorf("parseStreamKey(%q) = %q, %d, %v; want %q, %d", key, topic, p, ok, tc.topic, tc.p)
		}
	}
	for _, key := range []string{
		"", "kgate:stream:", "kgate:stream:{orders}", "kgate:stream:{orders:}", "kgate:stream:{orders:-1}",
		"kgate:stream:{orders:+1}", "kgate:stream:{orders:01}", "kgate:stream:{orders:x}",
		"kgate:stream:{orders:1", "kgate:stream:orders:1", "other:stream:{orders:1}", "kgate:meta:{orders:1}",
		"kgate:stream:{orders:2147483648}", "kgate:stream:{orders: 1}",
	} {
		if topic, p, ok := k.parseStreamKey(key); ok {
			t.Errorf("parseStreamKey(%q) = %q, %d, true; want rejected", key, topic, p)
		}
	}
}

func TestGroupTag(t *testing.T) {
	// Known FNV-1a-32 vectors: the offset basis for "" and the published value for "a".
	for _, tc := range []struct{ group, want string }{
		{"", "811c9dc5"},
		{"a", "e40c292c"},
		{"foobar", "bf9cf968"},
	} {
		if got := GroupTag(tc.group); got != tc.want {
			t.Errorf("GroupTag(%q) = %q, want %q", tc.group, got, tc.want)
		}
	}
	for _, g := range []string{"my-group", "consumer.group:1", "ünïcode", "x"} {
		h := fnv.New32a()
		h.Write([]byte(g))
		want := fmt.Sprintf("%08x", h.Sum32())
		got := GroupTag(g)
		if got != want || len(got) != 8 {
			t.Errorf("GroupTag(%q) = %q, want %q", g, got, want)
		}
		for _, c := range got {
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				t.Errorf("GroupTag(%q) = %q: not lowercase hex", g, got)
			}
		}
	}
}
