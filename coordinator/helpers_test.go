package coordinator

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Test defaults: InitialRebalanceDelay 3s, session 10s, rebalance 60s.
const (
	testSession   = 10 * time.Second
	testRebalance = 60 * time.Second
)

// newCoordinator starts a Coordinator that is closed when the test ends. Inside
// a synctest bubble, the bubble then checks that no goroutine is left behind.
func newCoordinator(t *testing.T, cfg Config) *Coordinator {
	t.Helper()
	cfg.Logger = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
	c := New(cfg)
	t.Cleanup(c.Close)
	return c
}

// tclient plays one group member.
type tclient struct {
	t          *testing.T
	c          *Coordinator
	group      string
	clientID   string
	version    int16
	instance   *string
	session    time.Duration
	rebalance  time.Duration
	protoType  string
	protos     []kmsg.JoinGroupRequestProtocol
	memberID   string
	gen        int32
	leader     string
	members    []kmsg.JoinGroupResponseMember
	assignment []byte
}

func newClient(t *testing.T, c *Coordinator, group, clientID string, version int16, topics ...string) *tclient {
	return &tclient{
		t: t, c: c, group: group, clientID: clientID, version: version,
		session: testSession, rebalance: testRebalance, protoType: "consumer",
		protos: []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: consumerMeta(topics...)}},
		gen:    -1,
	}
}

func (cl *tclient) static(instance string) *tclient {
	cl.instance = &instance
	return cl
}

func (cl *tclient) joinRequest() *kmsg.JoinGroupRequest {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Version = cl.version
	req.Group = cl.group
	req.SessionTimeoutMillis = int32(cl.session / time.Millisecond)
	req.RebalanceTimeoutMillis = int32(cl.rebalance / time.Millisecond)
	req.MemberID = cl.memberID
	req.InstanceID = cl.instance
	req.ProtocolType = cl.protoType
	req.Protocols = cl.protos
	return req
}

// joinOnce sends one JoinGroup and records what the response tells the member.
func (cl *tclient) joinOnce(ctx context.Context) *kmsg.JoinGroupResponse {
	req := cl.joinRequest()
	resp := cl.c.JoinGroup(ctx, req, cl.clientID, "/127.0.0.1")
	if resp.Version != req.Version {
		cl.t.Errorf("JoinGroup response version %d, want %d", resp.Version, req.Version)
	}
	switch resp.ErrorCode {
	case 0:
		cl.memberID, cl.gen, cl.leader, cl.members = resp.MemberID, resp.Generation, resp.LeaderID, resp.Members
	case kerr.MemberIDRequired.Code:
		cl.memberID = resp.MemberID
	}
	return resp
}

// join joins, following a MEMBER_ID_REQUIRED round trip.
func (cl *tclient) join() *kmsg.JoinGroupResponse {
	for {
		resp := cl.joinOnce(context.Background())
		if resp.ErrorCode != kerr.MemberIDRequired.Code {
			return resp
		}
	}
}

func (cl *tclient) syncRequest(assignments map[string][]byte) *kmsg.SyncGroupRequest {
	req := kmsg.NewPtrSyncGroupRequest()
	req.Version = min(cl.version, 5)
	req.Group = cl.group
	req.Generation = cl.gen
	req.MemberID = cl.memberID
	req.InstanceID = cl.instance
	for id, a := range assignments {
		req.GroupAssignment = append(req.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: id, MemberAssignment: a})
	}
	return req
}

func (cl *tclient) sync(assignments map[string][]byte) *kmsg.SyncGroupResponse {
	req := cl.syncRequest(assignments)
	resp := cl.c.SyncGroup(context.Background(), req)
	if resp.Version != req.Version {
		cl.t.Errorf("SyncGroup response version %d, want %d", resp.Version, req.Version)
	}
	if resp.ErrorCode == 0 {
		cl.assignment = resp.MemberAssignment
	}
	return resp
}

func (cl *tclient) heartbeat() int16 {
	req := kmsg.NewPtrHeartbeatRequest()
	req.Version = min(cl.version, 4)
	req.Group = cl.group
	req.Generation = cl.gen
	req.MemberID = cl.memberID
	req.InstanceID = cl.instance
	resp := cl.c.Heartbeat(context.Background(), req)
	if resp.Version != req.Version {
		cl.t.Errorf("Heartbeat response version %d, want %d", resp.Version, req.Version)
	}
	return resp.ErrorCode
}

func (cl *tclient) commit() int16 {
	return cl.c.ValidateCommit(context.Background(), cl.group, cl.memberID, cl.instance, cl.gen)
}

func (cl *tclient) isLeader() bool { return cl.memberID != "" && cl.memberID == cl.leader }

// stableGroup joins n members (clientIDs c0..c{n-1}, each subscribed to topic
// "t") at the given version, has the leader give member i partition i, and
// returns the members with the leader first.
func stableGroup(t *testing.T, c *Coordinator, group string, n int, version int16) []*tclient {
	t.Helper()
	cls := make([]*tclient, n)
	for i := range cls {
		cls[i] = newClient(t, c, group, fmt.Sprintf("c%d", i), version, "t")
	}
	return stabilize(t, cls)
}

// stabilize runs a full join and sync round for cls, leader first in the result.
func stabilize(t *testing.T, cls []*tclient) []*tclient {
	t.Helper()
	joins := make([]<-chan *kmsg.JoinGroupResponse, len(cls))
	for i, cl := range cls {
		joins[i] = async(cl.join)
	}
	for i, ch := range joins {
		if resp := <-ch; resp.ErrorCode != 0 {
			t.Fatalf("member %d: join: %v", i, kerr.ErrorForCode(resp.ErrorCode))
		}
	}
	var leader *tclient
	var followers []*tclient
	for _, cl := range cls {
		if cl.isLeader() {
			leader = cl
		} else {
			followers = append(followers, cl)
		}
	}
	if leader == nil {
		t.Fatal("no member was told it leads")
	}
	plan := make(map[string][]byte)
	for i, m := range leader.members {
		plan[m.MemberID] = consumerAssignment("t", int32(i))
	}
	syncs := make([]<-chan *kmsg.SyncGroupResponse, len(followers))
	for i, cl := range followers {
		syncs[i] = async(func() *kmsg.SyncGroupResponse { return cl.sync(nil) })
	}
	if resp := leader.sync(plan); resp.ErrorCode != 0 {
		t.Fatalf("leader sync: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	for i, ch := range syncs {
		if resp := <-ch; resp.ErrorCode != 0 {
			t.Fatalf("follower %d sync: %v", i, kerr.ErrorForCode(resp.ErrorCode))
		}
	}
	return append([]*tclient{leader}, followers...)
}

func consumerMeta(topics ...string) []byte {
	m := kmsg.NewConsumerMemberMetadata()
	m.Topics = topics
	return m.AppendTo(nil)
}

func consumerAssignment(topic string, partitions ...int32) []byte {
	a := kmsg.ConsumerMemberAssignment{Topics: []kmsg.ConsumerMemberAssignmentTopic{{Topic: topic, Partitions: partitions}}}
	return a.AppendTo(nil)
}

// async runs f in a goroutine; its result arrives on the returned channel.
func async[T any](f func() T) <-chan T {
	ch := make(chan T, 1)
	go func() { ch <- f() }()
	return ch
}

// ready waits for the bubble to settle and returns ch's value, failing if there is none.
func ready[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	synctest.Wait()
	select {
	case v := <-ch:
		return v
	default:
		t.Fatal("no answer yet")
		panic("unreachable")
	}
}

// blocked waits for the bubble to settle and fails if ch has a value.
func blocked[T any](t *testing.T, ch <-chan T) {
	t.Helper()
	synctest.Wait()
	select {
	case v := <-ch:
		t.Fatalf("unexpected answer %+v", v)
	default:
	}
}

func describe(t *testing.T, c *Coordinator, group string) GroupInfo {
	t.Helper()
	gi, ok := c.Describe(context.Background(), group)
	if !ok {
		t.Fatalf("group %q unknown", group)
	}
	return gi
}

func wantCode(t *testing.T, what string, got, want int16) {
	t.Helper()
	if got != want {
		t.Errorf("%s: got %v, want %v", what, codeName(got), codeName(want))
	}
}

func codeName(code int16) string {
	if code == 0 {
		return "NONE"
	}
	return kerr.ErrorForCode(code).Error()
}

func ptr(s string) *string { return &s }
