package gateway

import (
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
