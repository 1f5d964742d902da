package gateway

import (
	"net"

	"github.com/twmb/franz-go/pkg/kerr"
)

// maxCommitMetadata is Apache's offset.metadata.max.bytes default.
const maxCommitMetadata = 4096

// notCoordinator returns NOT_COORDINATOR when another gateway coordinates group (or
// COORDINATOR_NOT_AVAILABLE when no gateway can), 0 when this one does.
func (g *Gateway) notCoordinator(group string) int16 {
	n, ok := g.nodes.coordinatorFor(group)
	switch {
	case !ok:
		return kerr.CoordinatorNotAvailable.Code
	case n.ID != g.cfg.NodeID:
		return kerr.NotCoordinator.Code
	}
	select {
	case <-g.ready:
		return 0
	default:
		return kerr.CoordinatorLoadInProgress.Code
	}
}

// clientHost is the host part of a remote address, as Kafka reports it ("/127.0.0.1").
func clientHost(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	return "/" + host
}
