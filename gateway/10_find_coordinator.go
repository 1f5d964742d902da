package gateway

// FindCoordinator v0-v5 (v5 only adds an error code kgate never returns).
//
// The coordinator of a group (key type 0) or transactional ID (key type 1) is the gateway chosen by
// membership.coordinatorFor: FNV-1a-32 of the key modulo the full registered gateway set, falling back
// to the next live gateway when that one is down. The answer is the gateway's advertised address
// (this gateway's own for the listener the request arrived on). v4 batches coordinator_keys. Other
// key types -> INVALID_REQUEST; no live gateway -> COORDINATOR_NOT_AVAILABLE.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func (c *conn) findCoordinator(_ context.Context, req *kmsg.FindCoordinatorRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrFindCoordinatorResponse()
	if req.Version >= 4 {
		for _, key := range req.CoordinatorKeys {
			rc := kmsg.NewFindCoordinatorResponseCoordinator()
			rc.Key = key
			rc.ErrorCode, rc.NodeID, rc.Host, rc.Port = c.g.coordinatorAddr(key, req.CoordinatorType)
			resp.Coordinators = append(resp.Coordinators, rc)
		}
		return resp, nil
	}
	resp.ErrorCode, resp.NodeID, resp.Host, resp.Port = c.g.coordinatorAddr(req.CoordinatorKey, req.CoordinatorType)
	return resp, nil
}

func (g *Gateway) coordinatorAddr(key string, keyType int8) (int16, int32, string, int32) {
	if keyType != 0 && keyType != 1 {
		return kerr.InvalidRequest.Code, -1, "", -1
	}
	n, ok := g.nodes.coordinatorFor(key)
	if !ok {
		return kerr.CoordinatorNotAvailable.Code, -1, "", -1
	}
	if n.ID == g.cfg.NodeID {
		return 0, n.ID, g.advHost, g.advPort
	}
	return 0, n.ID, n.Host, n.Port
}
