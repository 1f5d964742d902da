package gateway

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kgate/kgate/coordinator"
)

// TestSyncGroupV5NeedsProtocolTypeAndName: from v5 a SyncGroup with a null protocol type or name is
// INCONSISTENT_GROUP_PROTOCOL before anything else, as on Apache (an invalid group id included); the
// check passed requests that left them out, and the leader's assignment was taken. Below v5 the fields
// do not exist.
func TestSyncGroupV5NeedsProtocolTypeAndName(t *testing.T) {
	ctx, _, store := embeddedGateway(t, Config{})
	g, _ := serveOn(t, store, Config{Groups: coordinator.Config{InitialRebalanceDelay: -1}})
	c := fetchConn(t, g)
	jr := joinMember(t, ctx, c, 5, "sg")
	consumer, rangeName := "consumer", "range"
	for _, tc := range []struct {
		version         int16
		group           string
		protoType, name *string
		want            int16
	}{
		{5, "sg", nil, &rangeName, kerr.InconsistentGroupProtocol.Code},
		{5, "sg", &consumer, nil, kerr.InconsistentGroupProtocol.Code},
		{5, "", nil, nil, kerr.InconsistentGroupProtocol.Code},
		{4, "", nil, nil, kerr.InvalidGroupID.Code},
		{5, "sg", &consumer, &rangeName, 0},
	} {
		req := kmsg.NewPtrSyncGroupRequest()
		req.Version, req.Group, req.Generation, req.MemberID = tc.version, tc.group, jr.Generation, jr.MemberID
		req.ProtocolType, req.Protocol = tc.protoType, tc.name
		r, err := c.syncGroup(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.(*kmsg.SyncGroupResponse).ErrorCode; got != tc.want {
			t.Errorf("v%d group %q, protocol type %v, name %v: error %d, want %d", tc.version, tc.group, tc.protoType != nil, tc.name != nil, got, tc.want)
		}
	}
}
