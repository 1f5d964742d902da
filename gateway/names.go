package gateway

import (
	"errors"
	"strings"

	"github.com/kgate/kgate/redisstore"
)

// maxTopicNameLen is Apache Kafka's limit.
const maxTopicNameLen = 249

var errInvalidTopicName = errors.New("invalid topic name")

// validTopicName applies Apache Kafka's rules: 1-249 characters of [a-zA-Z0-9._-], not "." or "..".
// kgate also refuses '{' and '}' implicitly (not in the legal set), which keeps hash tags intact.
func validTopicName(name string) error {
	if name == "" || name == "." || name == ".." || len(name) > maxTopicNameLen {
		return errInvalidTopicName
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return errInvalidTopicName
		}
	}
	return nil
}

// maxTopicPartitions bounds a topic's partitions (Apache Kafka sets no bound per topic): every
// gateway loops over a topic's partitions in Metadata and retention, and creating one writes a meta
// hash per partition, so a request for two billion would take a gateway down.
const maxTopicPartitions = 100_000

// dotCollisions holds the registered topic names by their form with '.' read as '_', Kafka's
// collision rule ("a.b" and "a_b" may not both exist), so that many names (a CreateTopics may carry
// thousands) are each checked against every topic with one look-up.
type dotCollisions map[string]string

func newDotCollisions(existing map[string]redisstore.Topic) dotCollisions {
	d := make(dotCollisions, len(existing))
	for name := range existing {
		d[dotsAsUnderscores(name)] = name
	}
	return d
}

// collides reports whether name, itself unregistered, collides with a registered topic, and which.
func (d dotCollisions) collides(name string) (string, bool) {
	other, ok := d[dotsAsUnderscores(name)]
	return other, ok && other != name
}

// collisionMessage is Apache Kafka's message for a name refused as colliding with topic other.
func collisionMessage(name, other string) string {
	return "Topic '" + name + "' collides with existing topic: " + other
}

func dotsAsUnderscores(name string) string { return strings.ReplaceAll(name, ".", "_") }
