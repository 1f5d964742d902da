package gateway

// DescribeCluster v0-v1.
//
// The live gateways as brokers, the lowest live node id as controller, and the cluster ID (stable for a
// Redis namespace). Authorized operations are not computed. From v1 the request names the endpoint
// type it wants described: brokers (1) are; controllers (2) get MISMATCHED_ENDPOINT_TYPE, as from an
// Apache broker; any other value UNSUPPORTED_ENDPOINT_TYPE. v0 has no such field: brokers.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func (c *conn) describeCluster(_ context.Context, req *kmsg.DescribeClusterRequest) (kmsg.Response, error) {
	g := c.g
	resp := kmsg.NewPtrDescribeClusterResponse()
	if req.Version >= 1 && req.EndpointType != 1 {
		msg := "kgate describes brokers (endpoint type 1) only"
		resp.ErrorCode, resp.ErrorMessage = kerr.UnsupportedEndpointType.Code, &msg
		if req.EndpointType == 2 {
			resp.ErrorCode = kerr.MismatchedEndpointType.Code
		}
		return resp, nil
	}
	resp.ClusterID = g.cfg.ClusterID
	resp.ControllerID = g.controllerID()
	for _, n := range g.nodes.brokers() {
		b := kmsg.NewDescribeClusterResponseBroker()
		b.NodeID, b.Host, b.Port = n.ID, n.Host, n.Port
		resp.Brokers = append(resp.Brokers, b)
	}
	return resp, nil
}
