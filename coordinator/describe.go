package coordinator

// Group inspection and deletion for DescribeGroups, ListGroups, DeleteGroups,
// OffsetDelete, OffsetFetch require_stable and the admin API.

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const consumerProtocolType = "consumer"

// GroupInfo describes a group. Metadata and Assignment bytes are shared with
// the group and must not be modified; everything else is the caller's.
//
// DescribeGroups: Apache reports Protocol and member Metadata/Assignment only
// for a Stable group; the gateway blanks them in other states.
type GroupInfo struct {
	Group        string
	State        string // StateEmpty, StatePreparingRebalance, StateCompletingRebalance, StateStable
	ProtocolType string
	Protocol     string // selected protocol; "" before the first generation and when Empty
	Generation   int32
	Leader       string
	Members      []MemberInfo // in join order; nil from List
	// Subscribed is the sorted union of the topics in the members' consumer
	// protocol metadata (protocol type "consumer" only). Metadata that does not
	// parse is skipped and sets SubscriptionUnknown, as does a group whose first
	// generation has not chosen a protocol yet: Apache then treats every topic
	// as subscribed (OffsetDelete answers GROUP_SUBSCRIBED_TO_TOPIC).
	Subscribed          []string
	SubscriptionUnknown bool
}

// IsSubscribed is Apache's GroupMetadata.isSubscribedToTopic for consumer groups.
func (gi *GroupInfo) IsSubscribed(topic string) bool {
	if gi.SubscriptionUnknown {
		return true
	}
	_, found := slices.BinarySearch(gi.Subscribed, topic)
	return found
}

// MemberInfo describes one member.
type MemberInfo struct {
	MemberID   string
	InstanceID *string
	ClientID   string
	ClientHost string
	Metadata   []byte // for the group's protocol; nil while none is selected
	Assignment []byte // from the leader's SyncGroup; nil before it
	// Assigned is Assignment decoded as kmsg.ConsumerMemberAssignment (protocol
	// type "consumer"); nil if empty or not decodable.
	Assigned map[string][]int32
}

// Describe returns the group's state. false means the group is unknown here
// (report it Dead), or ctx ended, or the coordinator is closed: a caller that
// acts on the group having no members uses Lookup, which tells these apart.
func (c *Coordinator) Describe(ctx context.Context, groupID string) (GroupInfo, bool) {
	gi, err := c.Lookup(ctx, groupID)
	return gi, err == nil
}

// ErrUnknownGroup is Lookup's error for a group this coordinator does not hold.
var ErrUnknownGroup = errUnknownGroup

// Lookup returns the group's state, or ErrUnknownGroup when the coordinator does
// not hold the group, or another error when it cannot tell (ctx ended, or the
// coordinator is closed).
func (c *Coordinator) Lookup(ctx context.Context, groupID string) (GroupInfo, error) {
	return call(ctx, c, groupID, false, func(g *group, reply chan<- GroupInfo) {
		reply <- g.describe(true)
	})
}

// List returns every group (without Members), sorted by group id. If ctx ends
// the groups described so far are returned.
func (c *Coordinator) List(ctx context.Context) []GroupInfo {
	var out []GroupInfo
	for _, g := range c.snapshot() {
		if ctx.Err() != nil {
			return out // a select below would pick an ended context only at random
		}
		reply := make(chan GroupInfo, 1)
		select {
		case g.in <- func() { reply <- g.describe(false) }:
		case <-g.done: // deleted or expired meanwhile
			continue
		case <-ctx.Done():
			return out
		}
		gi, ok := await(ctx, g, reply)
		if !ok {
			if ctx.Err() != nil {
				return out
			}
			continue
		}
		out = append(out, gi)
	}
	return out
}

// Unload drops from memory every group keep rejects (its coordination moved to another gateway), as
// Apache Kafka unloads a group whose coordinator moved: parked JoinGroup/SyncGroup requests are
// answered NOT_COORDINATOR, timers stop, and a later request here starts the group afresh. A member
// state kept instead would answer a static member that rejoined elsewhere meanwhile with
// FENCED_INSTANCE_ID once the group came back, which clients treat as fatal.
func (c *Coordinator) Unload(ctx context.Context, keep func(group string) bool) {
	for _, g := range c.snapshot() {
		if keep(g.name) {
			continue
		}
		_, _ = c.send(ctx, g.name, false, func(g *group) {
			if g.removed {
				return
			}
			g.log.Info().Msg("coordination moved to another gateway: unloading the group")
			g.shutdown()
			g.c.forget(g)
			g.removed = true
		})
	}
}

// Delete removes an Empty group from memory (DeleteGroups). It returns 0,
// NON_EMPTY_GROUP, or GROUP_ID_NOT_FOUND for a group unknown here (the
// gateway decides whether stored offsets make that a success).
func (c *Coordinator) Delete(ctx context.Context, groupID string) int16 {
	code, err := call(ctx, c, groupID, false, func(g *group, reply chan<- int16) {
		if g.state != stateEmpty {
			reply <- kerr.NonEmptyGroup.Code
			return
		}
		g.log.Info().Msg("deleting group")
		g.removeSelf()
		reply <- 0
	})
	switch {
	case err == nil:
		return code
	case err == errUnknownGroup:
		return kerr.GroupIDNotFound.Code
	default:
		return errCode(err, kerr.CoordinatorNotAvailable.Code)
	}
}

func (g *group) describe(withMembers bool) GroupInfo {
	gi := GroupInfo{
		Group:        g.name,
		State:        g.state.String(),
		ProtocolType: g.protocolType,
		Protocol:     g.protocol,
		Generation:   g.generation,
		Leader:       g.leader,
	}
	consumer := g.protocolType == consumerProtocolType
	var topics []string
	for _, m := range g.sortedMembers() {
		meta := m.metadataFor(g.protocol)
		if consumer {
			subMeta := meta
			if g.protocol == "" && len(m.protocols) > 0 {
				subMeta = m.protocols[0].metadata // no protocol selected yet
				// Apache knows a group's subscription only once a generation chose a protocol, and
				// until then treats every topic as subscribed.
				gi.SubscriptionUnknown = true
			}
			if ts, ok := subscribedTopics(subMeta); ok {
				topics = append(topics, ts...)
			} else {
				gi.SubscriptionUnknown = true
			}
		}
		if !withMembers {
			continue
		}
		mi := MemberInfo{
			MemberID:   m.id,
			InstanceID: cloneStringPtr(m.instanceID),
			ClientID:   m.clientID,
			ClientHost: m.clientHost,
			Metadata:   meta,
			Assignment: m.assignment,
		}
		if consumer {
			mi.Assigned = decodeAssignment(m.assignment)
		}
		gi.Members = append(gi.Members, mi)
	}
	if consumer {
		slices.Sort(topics)
		gi.Subscribed = slices.Compact(topics)
	}
	return gi
}

// subscribedTopics reads the topics of consumer protocol metadata. Like Apache
// it reads only the v0 prefix (version, topics, user data), so later versions
// of the schema parse too.
func subscribedTopics(meta []byte) ([]string, bool) {
	if len(meta) < 2 || meta[0]&0x80 != 0 { // no version, or a negative one
		return nil, false
	}
	v0 := slices.Clone(meta)
	v0[0], v0[1] = 0, 0
	var md kmsg.ConsumerMemberMetadata
	if err := md.ReadFrom(v0); err != nil {
		return nil, false
	}
	ts := slices.Clone(md.Topics)
	slices.Sort(ts)
	return slices.Compact(ts), true
}

func decodeAssignment(b []byte) map[string][]int32 {
	if len(b) == 0 {
		return nil
	}
	var a kmsg.ConsumerMemberAssignment
	if err := a.ReadFrom(b); err != nil {
		return nil
	}
	out := make(map[string][]int32, len(a.Topics))
	for _, t := range a.Topics {
		out[t.Topic] = append(out[t.Topic], t.Partitions...)
	}
	return out
}
