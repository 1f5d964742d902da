package gateway

import (
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/coordinator"
	"github.com/kgate/kgate/redisstore"
)

// TestListGroupsStatesFilterIgnoresCase: a v4 states filter matches whatever its case and surrounding
// spaces, as Apache's coordinator lower-cases and trims it; only the exact spelling matched.
func TestListGroupsStatesFilterIgnoresCase(t *testing.T) {
	ctx, _, store := embeddedGateway(t, Config{})
	g, _ := serveOn(t, store, Config{Groups: coordinator.Config{InitialRebalanceDelay: -1}})
	createTopic(t, store, "lg", 1)
	if errs := store.CommitOffsets(ctx, "lg-empty", "", []redisstore.OffsetCommit{{Topic: "lg", Offset: 1}}, time.Now()); errs[0] != nil {
		t.Fatal(errs[0])
	}
	c := fetchConn(t, g)
	jr := joinMember(t, ctx, c, 5, "lg-stable")
	syncReq := kmsg.NewPtrSyncGroupRequest()
	syncReq.Version, syncReq.Group, syncReq.Generation, syncReq.MemberID = 3, "lg-stable", jr.Generation, jr.MemberID
	if r, err := c.syncGroup(ctx, syncReq); err != nil || r.(*kmsg.SyncGroupResponse).ErrorCode != 0 {
		t.Fatalf("sync: %v %+v", err, r)
	}
	for _, tc := range []struct {
		filter []string
		want   []string
	}{
		{[]string{"Empty"}, []string{"lg-empty"}},
		{[]string{"empty"}, []string{"lg-empty"}},
		{[]string{"EMPTY"}, []string{"lg-empty"}},
		{[]string{" Stable "}, []string{"lg-stable"}},
		{[]string{"stable", "Empty"}, []string{"lg-empty", "lg-stable"}},
		{[]string{"Dead"}, nil},
		{nil, []string{"lg-empty", "lg-stable"}},
	} {
		req := kmsg.NewPtrListGroupsRequest()
		req.Version, req.StatesFilter = 4, tc.filter
		r, err := c.listGroups(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, lg := range r.(*kmsg.ListGroupsResponse).Groups {
			got = append(got, lg.Group)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("states filter %q: groups %q, want %q", tc.filter, got, tc.want)
		}
	}
}

// TestListGroupsProtocolType: ListGroups reports a group's protocol type as DescribeGroups does, as
// Apache's coordinator does (ClassicGroup.asListedGroup: the protocol type of the group's last member,
// "" for a group that never had one): "" for a group that only has committed offsets (a "simple"
// group), the members' type for a group that has them or had them (Empty after they left).
func TestListGroupsProtocolType(t *testing.T) {
	srv := redisServer(t)
	store := openStoreAt(t, srv.Addr, redisstore.Options{})
	g, _ := serveOn(t, store, Config{Groups: coordinator.Config{InitialRebalanceDelay: -1}})
	ctx := t.Context()
	createTopic(t, store, "lgt", 1)
	if errs := store.CommitOffsets(ctx, "lgt-simple", "", []redisstore.OffsetCommit{{Topic: "lgt", Offset: 1}}, time.Now()); errs[0] != nil {
		t.Fatal(errs[0])
	}
	c := fetchConn(t, g)
	joinMember(t, ctx, c, 5, "lgt-consumer")
	connect := joinRequest(5, "lgt-connect-left")
	connect.ProtocolType = "connect"
	r, err := c.joinGroup(ctx, connect)
	if err != nil {
		t.Fatal(err)
	}
	connect.MemberID = r.(*kmsg.JoinGroupResponse).MemberID
	if r, err = c.joinGroup(ctx, connect); err != nil || r.(*kmsg.JoinGroupResponse).ErrorCode != 0 {
		t.Fatalf("join connect: %v %+v", err, r)
	}
	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.Version, leave.Group, leave.MemberID = 0, "lgt-connect-left", connect.MemberID
	if r, err := c.leaveGroup(ctx, leave); err != nil || r.(*kmsg.LeaveGroupResponse).ErrorCode != 0 {
		t.Fatalf("leave: %v %+v", err, r)
	}
	want := map[string]string{ // group -> state/protocol type
		"lgt-simple":       "Empty/",
		"lgt-consumer":     "CompletingRebalance/consumer",
		"lgt-connect-left": "Empty/connect",
	}
	for _, v := range []int16{0, 3, 4} {
		req := kmsg.NewPtrListGroupsRequest()
		req.Version = v
		r, err := c.listGroups(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, lg := range r.(*kmsg.ListGroupsResponse).Groups {
			got[lg.Group] = lg.GroupState + "/" + lg.ProtocolType
		}
		if !maps.Equal(got, want) {
			t.Errorf("v%d: listed %v, want %v", v, got, want)
		}
	}
	// DescribeGroups agrees.
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Version, req.Groups = 5, []string{"lgt-simple", "lgt-consumer", "lgt-connect-left"}
	dr, err := c.describeGroups(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dr.(*kmsg.DescribeGroupsResponse).Groups {
		if got := d.State + "/" + d.ProtocolType; got != want[d.Group] {
			t.Errorf("described %s as %s, want %s", d.Group, got, want[d.Group])
		}
	}
}

// TestListGroupsForgottenGroupHasNoProtocolType: a group whose members left and that the coordinator
// then forgot (its Empty retention ran out) is known from its committed offsets alone, and is listed
// and described with protocol type "": kgate keeps no protocol type in Redis, where Apache keeps the
// last generation's in its group metadata record (the deviation COMPATIBILITY.md names).
func TestListGroupsForgottenGroupHasNoProtocolType(t *testing.T) {
	srv := redisServer(t)
	store := openStoreAt(t, srv.Addr, redisstore.Options{})
	g, _ := serveOn(t, store, Config{Groups: coordinator.Config{InitialRebalanceDelay: -1, EmptyGroupRetention: 50 * time.Millisecond}})
	ctx := t.Context()
	createTopic(t, store, "lgf", 1)
	c := fetchConn(t, g)
	jr := joinMember(t, ctx, c, 5, "lgf")
	if errs := store.CommitOffsets(ctx, "lgf", "", []redisstore.OffsetCommit{{Topic: "lgf", Offset: 1}}, time.Now()); errs[0] != nil {
		t.Fatal(errs[0])
	}
	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.Group, leave.MemberID = "lgf", jr.MemberID
	if r, err := c.leaveGroup(ctx, leave); err != nil || r.(*kmsg.LeaveGroupResponse).ErrorCode != 0 {
		t.Fatalf("leave: %v %+v", err, r)
	}
	waitFor(t, 5*time.Second, "the Empty group forgotten", func() bool {
		_, err := g.coord.Lookup(ctx, "lgf")
		return errors.Is(err, coordinator.ErrUnknownGroup)
	})
	r, err := c.listGroups(ctx, kmsg.NewPtrListGroupsRequest())
	if err != nil {
		t.Fatal(err)
	}
	if lgs := r.(*kmsg.ListGroupsResponse).Groups; len(lgs) != 1 || lgs[0].GroupState != "Empty" || lgs[0].ProtocolType != "" {
		t.Fatalf("listed %+v, want lgf Empty with protocol type \"\"", lgs)
	}
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{"lgf"}
	dr, err := c.describeGroups(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if d := dr.(*kmsg.DescribeGroupsResponse).Groups[0]; d.State != "Empty" || d.ProtocolType != "" {
		t.Fatalf("described %+v, want Empty with protocol type \"\"", d)
	}
}
