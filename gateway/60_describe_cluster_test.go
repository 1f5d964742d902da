package gateway

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestDescribeClusterEndpointType: from v1 the endpoint type asked for decides, as on Apache: brokers
// (1) are described, controllers (2) are MISMATCHED_ENDPOINT_TYPE (kgate has no controller endpoints)
// and any other value UNSUPPORTED_ENDPOINT_TYPE; v0 has no such field and describes the brokers. Every
// request got the brokers.
func TestDescribeClusterEndpointType(t *testing.T) {
	ctx, _, store := embeddedGateway(t, Config{})
	g, _ := serveOn(t, store, Config{})
	c := fetchConn(t, g)
	for _, tc := range []struct {
		version      int16
		endpointType int8
		want         int16
	}{
		{0, 0, 0},
		{1, 1, 0},
		{1, 2, kerr.MismatchedEndpointType.Code},
		{1, 0, kerr.UnsupportedEndpointType.Code},
		{1, 3, kerr.UnsupportedEndpointType.Code},
		{1, -1, kerr.UnsupportedEndpointType.Code},
	} {
		req := kmsg.NewPtrDescribeClusterRequest()
		req.Version, req.EndpointType = tc.version, tc.endpointType
		r, err := c.describeCluster(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		resp := r.(*kmsg.DescribeClusterResponse)
		if resp.ErrorCode != tc.want || (tc.want == 0) != (len(resp.Brokers) == 1) {
			t.Errorf("v%d endpoint type %d: error %d, %d brokers; want error %d and the brokers only without one",
				tc.version, tc.endpointType, resp.ErrorCode, len(resp.Brokers), tc.want)
		}
	}
}
