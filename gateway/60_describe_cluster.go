package gateway

// DescribeCluster v0-v1.
//
// The live gateways as brokers, the lowest live node id as controller, and the cluster ID (stable for a
// Redis namespace). Authorized operations are not computed.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func (c *conn) describeCluster(_ context.Context, _ *kmsg.DescribeClusterRequest) (kmsg.Response, error) {
	g := c.g
	resp := kmsg.NewPtrDescribeClusterResponse()
	resp.ClusterID = g.cfg.ClusterID
	resp.ControllerID = g.controllerID()
	for _, n := range g.nodes.brokers() {
		b := kmsg.NewDescribeClusterResponseBroker()
		b.NodeID, b.Host, b.Port = n.ID, n.Host, n.Port
		resp.Brokers = append(resp.Brokers, b)
	}
	return resp, nil
}
