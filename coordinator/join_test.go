package coordinator

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestJoinSync(t *testing.T) {
	for _, tc := range []struct {
		n       int
		version int16
	}{
		{1, 0}, {1, 3}, {2, 4}, {3, 5}, {3, 7}, {3, 9},
	} {
		t.Run(fmt.Sprintf("members=%d/v%d", tc.n, tc.version), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var rebalances atomic.Int32
				c := newCoordinator(t, Config{OnRebalance: func(string) { rebalances.Add(1) }})
				cls := make([]*tclient, tc.n)
				joins := make([]<-chan *kmsg.JoinGroupResponse, tc.n)
				start := time.Now()
				for i := range cls {
					cls[i] = newClient(t, c, "g", fmt.Sprintf("c%d", i), tc.version, "t", fmt.Sprintf("own%d", i))
					joins[i] = async(cls[i].join)
				}
				for i, ch := range joins {
					resp := <-ch
					wantCode(t, "join", resp.ErrorCode, 0)
					if resp.Generation != 1 {
						t.Errorf("member %d: generation %d, want 1", i, resp.Generation)
					}
					if resp.Protocol == nil || *resp.Protocol != "range" {
						t.Errorf("member %d: protocol %v, want range", i, resp.Protocol)
					}
					if tc.version >= 7 && (resp.ProtocolType == nil || *resp.ProtocolType != "consumer") {
						t.Errorf("member %d: protocol type %v, want consumer", i, resp.ProtocolType)
					}
					if resp.SkipAssignment {
						t.Errorf("member %d: SkipAssignment set", i)
					}
				}
				// All joined at once: the initial delay (3s) is extended once per
				// batch of later members (another 3s).
				wantDelay := 3 * time.Second
				if tc.n > 1 {
					wantDelay = 6 * time.Second
				}
				if got := time.Since(start); got != wantDelay {
					t.Errorf("join phase took %v, want %v", got, wantDelay)
				}

				var leader *tclient
				var followers []*tclient
				for _, cl := range cls {
					if cl.leader != cls[0].leader {
						t.Fatalf("members disagree on the leader: %q vs %q", cl.leader, cls[0].leader)
					}
					if cl.isLeader() {
						leader = cl
						if len(cl.members) != tc.n {
							t.Fatalf("leader got %d members, want %d", len(cl.members), tc.n)
						}
					} else {
						followers = append(followers, cl)
						if len(cl.members) != 0 {
							t.Errorf("follower got %d members", len(cl.members))
						}
					}
				}
				if leader == nil {
					t.Fatal("no leader")
				}
				for _, m := range leader.members {
					if !bytes.Equal(m.ProtocolMetadata, consumerMeta("t", "own"+strings.TrimPrefix(clientOf(cls, m.MemberID), "c"))) {
						t.Errorf("member %s: metadata not passed through", m.MemberID)
					}
					if tc.version < 5 && m.InstanceID != nil {
						t.Errorf("instance id below v5")
					}
				}

				// Followers wait for the leader's assignment.
				syncs := make([]<-chan *kmsg.SyncGroupResponse, len(followers))
				for i, cl := range followers {
					syncs[i] = async(func() *kmsg.SyncGroupResponse { return cl.sync(nil) })
				}
				for _, ch := range syncs {
					blocked(t, ch)
				}
				if gi := describe(t, c, "g"); gi.State != StateCompletingRebalance {
					t.Errorf("state %s, want CompletingRebalance", gi.State)
				}
				plan := make(map[string][]byte)
				for i, m := range leader.members {
					plan[m.MemberID] = consumerAssignment("t", int32(i))
				}
				resp := leader.sync(plan)
				wantCode(t, "leader sync", resp.ErrorCode, 0)
				if tc.version >= 5 && (resp.Protocol == nil || *resp.Protocol != "range" || resp.ProtocolType == nil || *resp.ProtocolType != "consumer") {
					t.Errorf("v5 sync: protocol %v type %v", resp.Protocol, resp.ProtocolType)
				}
				for i, ch := range syncs {
					resp := ready(t, ch)
					wantCode(t, "follower sync", resp.ErrorCode, 0)
					if !bytes.Equal(resp.MemberAssignment, plan[followers[i].memberID]) {
						t.Errorf("follower %d got another member's assignment", i)
					}
				}
				if !bytes.Equal(leader.assignment, plan[leader.memberID]) {
					t.Error("leader got another member's assignment")
				}

				gi := describe(t, c, "g")
				if gi.State != StateStable || gi.Generation != 1 || gi.Protocol != "range" || gi.ProtocolType != "consumer" || gi.Leader != leader.memberID {
					t.Errorf("describe: %+v", gi)
				}
				seen := make(map[int32]bool)
				for _, m := range gi.Members {
					ps := m.Assigned["t"]
					if len(ps) != 1 || seen[ps[0]] {
						t.Errorf("member %s: assigned %v", m.MemberID, m.Assigned)
					}
					seen[ps[0]] = true
					if m.ClientHost != "/127.0.0.1" || !strings.HasPrefix(m.MemberID, m.ClientID+"-") {
						t.Errorf("member info %+v", m)
					}
				}
				wantTopics := []string{"t"}
				for i := range tc.n {
					wantTopics = append(wantTopics, fmt.Sprintf("own%d", i))
				}
				if fmt.Sprint(gi.Subscribed) != fmt.Sprint(sortedCopy(wantTopics)) || gi.SubscriptionUnknown {
					t.Errorf("subscribed %v (unknown %v), want %v", gi.Subscribed, gi.SubscriptionUnknown, wantTopics)
				}
				if !gi.IsSubscribed("own0") || gi.IsSubscribed("other") {
					t.Error("IsSubscribed wrong")
				}
				if n := rebalances.Load(); n != 1 {
					t.Errorf("OnRebalance called %d times, want 1", n)
				}
				for _, cl := range cls {
					wantCode(t, "heartbeat", cl.heartbeat(), 0)
				}
			})
		})
	}
}

func clientOf(cls []*tclient, memberID string) string {
	for _, cl := range cls {
		if cl.memberID == memberID {
			return cl.clientID
		}
	}
	return ""
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func TestMemberIDRequired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCoordinator(t, Config{})

		// v4: an empty member id is answered with an id to rejoin with.
		a := newClient(t, c, "g", "client-a", 4, "t")
		resp := a.joinOnce(context.Background())
		wantCode(t, "first v4 join", resp.ErrorCode, kerr.MemberIDRequired.Code)
		if !strings.HasPrefix(resp.MemberID, "client-a-") || len(resp.MemberID) != len("client-a-")+36 {
			t.Errorf("member id %q, want client-a-<uuid>", resp.MemberID)
		}
		if resp.Generation != -1 {
			t.Errorf("generation %d, want -1", resp.Generation)
		}
		if gi := describe(t, c, "g"); gi.State != StateEmpty || len(gi.Members) != 0 {
			t.Errorf("pending member is a member: %+v", gi)
		}
		id := resp.MemberID
		resp = a.joinOnce(context.Background())
		wantCode(t, "rejoin with id", resp.ErrorCode, 0)
		if resp.MemberID != id || resp.LeaderID != id || resp.Generation != 1 {
			t.Errorf("rejoin: %+v", resp)
		}

		// v3: joins directly with a generated id.
		b := newClient(t, c, "g3", "client-b", 3, "t")
		resp = b.joinOnce(context.Background())
		wantCode(t, "v3 join", resp.ErrorCode, 0)
		if !strings.HasPrefix(resp.MemberID, "client-b-") || resp.Generation != 1 {
			t.Errorf("v3 join: %+v", resp)
		}

		// v5 static member: no MEMBER_ID_REQUIRED; the id is instance-<uuid>.
		s := newClient(t, c, "g5", "client-s", 5, "t").static("inst")
		resp = s.joinOnce(context.Background())
		wantCode(t, "static join", resp.ErrorCode, 0)
		if !strings.HasPrefix(resp.MemberID, "inst-") {
			t.Errorf("static member id %q", resp.MemberID)
		}

		// A pending id expires after the session timeout.
		p := newClient(t, c, "gp", "client-p", 4, "t")
		wantCode(t, "pending join", p.joinOnce(context.Background()).ErrorCode, kerr.MemberIDRequired.Code)
		time.Sleep(testSession + time.Second)
		wantCode(t, "late rejoin", p.joinOnce(context.Background()).ErrorCode, kerr.UnknownMemberID.Code)

		// A non-empty member id never creates a group.
		u := newClient(t, c, "nogroup", "client-u", 4, "t")
		u.memberID = "client-u-whatever"
		wantCode(t, "unknown group", u.joinOnce(context.Background()).ErrorCode, kerr.UnknownMemberID.Code)
		if _, ok := c.Describe(context.Background(), "nogroup"); ok {
			t.Error("join with a member id created the group")
		}
	})
}

func TestPendingMemberHoldsRebalance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCoordinator(t, Config{})
		cls := stableGroup(t, c, "g", 1, 4)
		// A new member's MEMBER_ID_REQUIRED round trip leaves a pending id; the
		// leader's rejoin waits for it like for a member that has not rejoined.
		n := newClient(t, c, "g", "new", 4, "t")
		wantCode(t, "new member", n.joinOnce(context.Background()).ErrorCode, kerr.MemberIDRequired.Code)
		lj := async(cls[0].join)
		blocked(t, lj)
		nj := async(n.join)
		r1, r2 := <-lj, <-nj
		wantCode(t, "leader rejoin", r1.ErrorCode, 0)
		wantCode(t, "new member rejoin", r2.ErrorCode, 0)
		if r1.Generation != 2 || r2.Generation != 2 || len(r1.Members) != 2 {
			t.Errorf("generation %d/%d members %d", r1.Generation, r2.Generation, len(r1.Members))
		}
	})
}

func TestInitialRebalanceDelay(t *testing.T) {
	for _, tc := range []struct {
		name      string
		rebalance time.Duration
		want      time.Duration
	}{
		// 3s, then one 3s extension for the member that came at 1s.
		{"extended", 60 * time.Second, 6 * time.Second},
		// The extensions stop at the rebalance timeout.
		{"capped", 4 * time.Second, 4 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newCoordinator(t, Config{})
				start := time.Now()
				a := newClient(t, c, "g", "a", 3, "t")
				a.rebalance = tc.rebalance
				b := newClient(t, c, "g", "b", 3, "t")
				b.rebalance = tc.rebalance
				ja := async(a.join)
				time.Sleep(time.Second)
				jb := async(b.join)
				ra, rb := <-ja, <-jb
				if got := time.Since(start); got != tc.want {
					t.Errorf("join phase took %v, want %v", got, tc.want)
				}
				if ra.Generation != 1 || rb.Generation != 1 {
					t.Errorf("generations %d and %d, want both 1", ra.Generation, rb.Generation)
				}
				if ra.LeaderID != a.memberID || len(ra.Members) != 2 {
					t.Errorf("first member should lead both: leader %s, %d members", ra.LeaderID, len(ra.Members))
				}
			})
		})
	}

	t.Run("disabled", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newCoordinator(t, Config{InitialRebalanceDelay: -1})
			start := time.Now()
			if resp := newClient(t, c, "g", "a", 3, "t").join(); resp.ErrorCode != 0 || time.Since(start) != 0 {
				t.Errorf("join: %v after %v", codeName(resp.ErrorCode), time.Since(start))
			}
		})
	})
}

// TestInitialRebalanceDelayAfterEmpty: a group that was Empty at a later generation rejoins with the
// initial delay extended for each new member, as at generation 0: Apache 4.x's coordinator marks a
// new member added whenever the rebalance started from Empty (GroupMetadataManager
// addMemberThenRebalanceOrCompleteJoin, previousState EMPTY).
func TestInitialRebalanceDelayAfterEmpty(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCoordinator(t, Config{})
		ctx := context.Background()
		first := stableGroup(t, c, "g", 1, 3)[0]
		wantCode(t, "leave", c.LeaveGroup(ctx, leaveReq(0, "g", leaving(first.memberID, nil))).ErrorCode, 0)
		empty := describe(t, c, "g")
		if empty.State != StateEmpty || empty.Generation < 1 {
			t.Fatalf("after the leave: %s at generation %d, want Empty past generation 0", empty.State, empty.Generation)
		}
		start := time.Now()
		a := newClient(t, c, "g", "a", 3, "t")
		b := newClient(t, c, "g", "b", 3, "t")
		ja := async(a.join)
		time.Sleep(time.Second)
		jb := async(b.join)
		ra, rb := <-ja, <-jb
		// 3s, then one 3s extension for the member that came at 1s.
		if got := time.Since(start); got != 6*time.Second {
			t.Errorf("join phase took %v, want 6s", got)
		}
		if ra.Generation != empty.Generation+1 || rb.Generation != empty.Generation+1 || len(ra.Members) != 2 {
			t.Errorf("generations %d and %d with %d members, want %d with 2", ra.Generation, rb.Generation, len(ra.Members), empty.Generation+1)
		}
	})
}

// TestInitialRebalanceEndsEarlyOnExpiry: the initial delayed join ends before its timer when a session
// expiry leaves every remaining member joined, as in Apache 4.x's coordinator
// (removePendingMemberAndUpdateClassicGroup, removeMemberAndUpdateClassicGroup complete the join
// phase whatever started it), and not when a LeaveGroup does (maybeCompleteJoinPhase waits out an
// initial rebalance).
func TestInitialRebalanceEndsEarlyOnExpiry(t *testing.T) {
	t.Run("pending member expires", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newCoordinator(t, Config{InitialRebalanceDelay: 30 * time.Second})
			start := time.Now()
			a := newClient(t, c, "g", "a", 3, "t") // v3: joins without a member id round trip
			ja := async(a.join)
			synctest.Wait()
			p := newClient(t, c, "g", "p", 4, "t") // handed a member id, and never comes back
			wantCode(t, "v4 first join", p.joinOnce(context.Background()).ErrorCode, kerr.MemberIDRequired.Code)
			ra := <-ja
			if got := time.Since(start); got != testSession {
				t.Errorf("join phase took %v, want %v (the pending member's session timeout)", got, testSession)
			}
			if ra.ErrorCode != 0 || len(ra.Members) != 1 {
				t.Errorf("join: %s with %d members", codeName(ra.ErrorCode), len(ra.Members))
			}
		})
	})
	t.Run("member leaves", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newCoordinator(t, Config{InitialRebalanceDelay: 30 * time.Second})
			start := time.Now()
			a := newClient(t, c, "g", "a", 3, "t")
			ja := async(a.join)
			synctest.Wait()
			b := newClient(t, c, "g", "b", 4, "t")
			wantCode(t, "v4 first join", b.joinOnce(context.Background()).ErrorCode, kerr.MemberIDRequired.Code)
			jb := async(func() *kmsg.JoinGroupResponse { return b.joinOnce(context.Background()) })
			blocked(t, jb)
			lr := c.LeaveGroup(context.Background(), leaveReq(3, "g", leaving(b.memberID, nil)))
			wantCode(t, "leave", lr.ErrorCode, 0)
			wantCode(t, "leaving member's join", ready(t, jb).ErrorCode, kerr.UnknownMemberID.Code)
			blocked(t, ja)
			ra := <-ja
			// 30s, then one 30s extension for b, up to the 60s rebalance timeout.
			if got := time.Since(start); got != testRebalance {
				t.Errorf("join phase took %v, want %v", got, testRebalance)
			}
			if ra.ErrorCode != 0 || len(ra.Members) != 1 {
				t.Errorf("join: %s with %d members", codeName(ra.ErrorCode), len(ra.Members))
			}
		})
	})
}

func TestJoinValidation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCoordinator(t, Config{})
		bad := newClient(t, c, "", "x", 5, "t")
		wantCode(t, "empty group id", bad.joinOnce(context.Background()).ErrorCode, kerr.InvalidGroupID.Code)

		short := newClient(t, c, "g", "x", 5, "t")
		short.session = time.Second
		wantCode(t, "short session", short.joinOnce(context.Background()).ErrorCode, kerr.InvalidSessionTimeout.Code)
		long := newClient(t, c, "g", "x", 5, "t")
		long.session = 31 * time.Minute
		wantCode(t, "long session", long.joinOnce(context.Background()).ErrorCode, kerr.InvalidSessionTimeout.Code)

		noType := newClient(t, c, "g", "x", 5, "t")
		noType.protoType = ""
		wantCode(t, "no protocol type", noType.joinOnce(context.Background()).ErrorCode, kerr.InconsistentGroupProtocol.Code)
		noProtos := newClient(t, c, "g", "x", 5, "t")
		noProtos.protos = nil
		wantCode(t, "no protocols", noProtos.joinOnce(context.Background()).ErrorCode, kerr.InconsistentGroupProtocol.Code)

		// Protocol vote: y is supported by all and preferred by two of three.
		mk := func(id string, names ...string) *tclient {
			cl := newClient(t, c, "vote", id, 5)
			cl.protos = nil
			for _, n := range names {
				cl.protos = append(cl.protos, kmsg.JoinGroupRequestProtocol{Name: n, Metadata: consumerMeta(n)})
			}
			return cl
		}
		voters := []*tclient{mk("a", "x", "y"), mk("b", "y", "x"), mk("c", "y", "x", "z")}
		chs := make([]<-chan *kmsg.JoinGroupResponse, len(voters))
		for i, cl := range voters {
			chs[i] = async(cl.join)
		}
		synctest.Wait()
		// While the group rebalances, a member must share its protocol type
		// and a protocol every member supports.
		other := mk("d", "y")
		other.protoType = "connect"
		wantCode(t, "protocol type mismatch", other.joinOnce(context.Background()).ErrorCode, kerr.InconsistentGroupProtocol.Code)
		wantCode(t, "no common protocol", mk("e", "z").joinOnce(context.Background()).ErrorCode, kerr.InconsistentGroupProtocol.Code)
		for _, ch := range chs {
			resp := <-ch
			wantCode(t, "vote join", resp.ErrorCode, 0)
			if resp.Protocol == nil || *resp.Protocol != "y" {
				t.Errorf("protocol %v, want y", resp.Protocol)
			}
		}
		for _, cl := range voters {
			if !cl.isLeader() {
				continue
			}
			for _, m := range cl.members {
				if !bytes.Equal(m.ProtocolMetadata, consumerMeta("y")) {
					t.Errorf("leader got metadata for another protocol")
				}
			}
		}

		// A tie goes to the earliest member's choice.
		tie := []*tclient{mk("a", "x", "y"), mk("b", "y", "x")}
		for _, cl := range tie {
			cl.group = "tie"
		}
		ta := async(tie[0].join)
		synctest.Wait()
		tb := async(tie[1].join)
		if r := <-ta; r.Protocol == nil || *r.Protocol != "x" {
			t.Errorf("tie: protocol %v, want x", r.Protocol)
		}
		<-tb
	})
}

func TestNonConsumerProtocolType(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCoordinator(t, Config{})
		cls := make([]*tclient, 2)
		for i := range cls {
			cls[i] = newClient(t, c, "connect-cluster", fmt.Sprintf("w%d", i), 7)
			cls[i].protoType = "connect"
			cls[i].protos = []kmsg.JoinGroupRequestProtocol{{Name: "sessioned", Metadata: []byte("not consumer metadata")}}
		}
		cls = stabilize(t, cls)
		gi := describe(t, c, "connect-cluster")
		if gi.State != StateStable || gi.ProtocolType != "connect" || gi.Protocol != "sessioned" {
			t.Errorf("describe: %+v", gi)
		}
		if gi.Subscribed != nil || gi.SubscriptionUnknown {
			t.Errorf("subscription parsed for a connect group: %v", gi.Subscribed)
		}
		for _, m := range gi.Members {
			if m.Assigned != nil || len(m.Assignment) == 0 || string(m.Metadata) != "not consumer metadata" {
				t.Errorf("member %+v", m)
			}
		}
	})
}

func TestConsumerMetadataTolerated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCoordinator(t, Config{})
		good := newClient(t, c, "g", "good", 5, "a")
		// Newer schema versions parse through their v0 prefix.
		v3 := kmsg.NewConsumerMemberMetadata()
		v3.Version = 3
		v3.Topics = []string{"b"}
		v3.Rack = ptr("r1")
		newer := newClient(t, c, "g", "newer", 5)
		newer.protos = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: v3.AppendTo(nil)}}
		broken := newClient(t, c, "g", "broken", 5)
		broken.protos = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0, 0, 0}}}
		stabilize(t, []*tclient{good, newer, broken})
		gi := describe(t, c, "g")
		if fmt.Sprint(gi.Subscribed) != "[a b]" || !gi.SubscriptionUnknown || !gi.IsSubscribed("zzz") {
			t.Errorf("subscribed %v unknown %v", gi.Subscribed, gi.SubscriptionUnknown)
		}
	})
}

// Before its first generation chose a protocol, a group's subscription is unknown, as on Apache:
// every topic counts as subscribed (OffsetDelete answers GROUP_SUBSCRIBED_TO_TOPIC), not only those of
// the members' first protocol. Once the generation completes, the chosen protocol's topics count.
func TestSubscriptionUnknownBeforeFirstGeneration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCoordinator(t, Config{InitialRebalanceDelay: time.Second})
		cl := newClient(t, c, "g", "a", 5, "a")
		joined := async(cl.join) // parked for the initial rebalance delay
		blocked(t, joined)
		if gi := describe(t, c, "g"); gi.Protocol != "" || !gi.SubscriptionUnknown || !gi.IsSubscribed("other") {
			t.Errorf("during the first join: protocol %q, subscribed %v, unknown %v", gi.Protocol, gi.Subscribed, gi.SubscriptionUnknown)
		}
		wantCode(t, "join", (<-joined).ErrorCode, 0)
		if gi := describe(t, c, "g"); gi.SubscriptionUnknown || gi.IsSubscribed("other") || !gi.IsSubscribed("a") {
			t.Errorf("after the first generation: subscribed %v, unknown %v", gi.Subscribed, gi.SubscriptionUnknown)
		}
	})
}
