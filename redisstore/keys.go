package redisstore

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// keys builds every Redis key kgate uses; the schema is documented in doc.go.
type keys struct{ ns string }

func partTag(topic string, partition int32) string {
	return "{" + topic + ":" + strconv.Itoa(int(partition)) + "}"
}

func (k keys) stream(topic string, p int32) string { return k.ns + ":stream:" + partTag(topic, p) }
func (k keys) meta(topic string, p int32) string   { return k.ns + ":meta:" + partTag(topic, p) }
func (k keys) tindex(topic string, p int32) string { return k.ns + ":tindex:" + partTag(topic, p) }
func (k keys) bindex(topic string, p int32) string { return k.ns + ":bindex:" + partTag(topic, p) }
func (k keys) producers(topic string, p int32) string {
	return k.ns + ":producers:" + partTag(topic, p)
}
func (k keys) topics() string     { return k.ns + ":topics" }
func (k keys) producerID() string { return k.ns + ":producer-id" }
func (k keys) groups() string     { return k.ns + ":groups" }
func (k keys) gateways() string   { return k.ns + ":gateways" }

// topicForms is the index of registered names by their '.'/'_' form. Its hash tag is the registry
// key's name, so both are on one slot of a cluster (a script reads and writes both); a namespace with
// a hash tag of its own (configs refuse one) gives the registry key that tag, and the index keeps it.
func (k keys) topicForms() string { return k.onRegistrySlot("forms") }

// topicGen is the counter of topic generations (CreateTopic), on the registry's slot: a deletion reads
// it with the registry entry in one step.
func (k keys) topicGen() string { return k.onRegistrySlot("gen") }

// onRegistrySlot is the key "<registry key>:<suffix>" with the registry key's name as its hash tag
// (topicForms).
func (k keys) onRegistrySlot(suffix string) string {
	t := k.topics()
	if i := strings.IndexByte(t, '{'); i >= 0 && strings.IndexByte(t[i+1:], '}') > 0 {
		return t + ":" + suffix
	}
	return "{" + t + "}:" + suffix
}

// GroupTag is the hash tag shared by a group's offset hashes: 8 lowercase hex digits of FNV-1a-32.
func GroupTag(group string) string {
	h := fnv.New32a()
	h.Write([]byte(group))
	return fmt.Sprintf("%08x", h.Sum32())
}

func (k keys) offsets(group string) string {
	return k.ns + ":offsets:{" + GroupTag(group) + "}:" + group
}
func (k keys) offsetsTS(group string) string {
	return k.ns + ":offsets-ts:{" + GroupTag(group) + "}:" + group
}
func (k keys) offsetsMD(group string) string {
	return k.ns + ":offsets-md:{" + GroupTag(group) + "}:" + group
}
func (k keys) owner(group string) string {
	return k.ns + ":owner:{" + GroupTag(group) + "}:" + group
}

// parseStreamKey inverts stream(): it returns the topic and partition a stream key names.
func (k keys) parseStreamKey(key string) (string, int32, bool) {
	rest, ok := strings.CutPrefix(key, k.ns+":stream:{")
	if !ok || !strings.HasSuffix(rest, "}") {
		return "", 0, false
	}
	rest = rest[:len(rest)-1]
	i := strings.LastIndexByte(rest, ':')
	if i < 0 {
		return "", 0, false
	}
	p, err := strconv.ParseInt(rest[i+1:], 10, 32)
	if err != nil || p < 0 {
		return "", 0, false
	}
	// Only the exact spelling stream() writes: "+1", "01" or "-0" name no partition of ours.
	if k.stream(rest[:i], int32(p)) != key {
		return "", 0, false
	}
	return rest[:i], int32(p), true
}

// EntryID is the stream entry ID of an offset below math.MaxInt64 (the ID of that one would overflow;
// ReadRequest.count keeps reads below it).
func EntryID(offset int64) string { return "0-" + strconv.FormatInt(offset+1, 10) }

// OffsetOfID inverts EntryID. It rejects IDs kgate did not write, including other spellings of the
// same number ("0-+5", "0-05") that strconv would accept.
func OffsetOfID(id string) (int64, bool) {
	seq, ok := strings.CutPrefix(id, "0-")
	if !ok || seq == "" || seq[0] < '1' || seq[0] > '9' {
		return 0, false
	}
	n, err := strconv.ParseInt(seq, 10, 64)
	if err != nil || n < 1 {
		return 0, false
	}
	return n - 1, true
}
