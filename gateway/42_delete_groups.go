package gateway

// DeleteGroups v0-v2.
//
// A group with members -> NON_EMPTY_GROUP; a group neither in the coordinator nor in Redis ->
// GROUP_ID_NOT_FOUND; otherwise its committed offsets (canonical hash, timestamp sidecar, metadata) and
// the Redis consumer groups on its streams are deleted. A deletion that finds the group claimed by
// another gateway since this one checked it (redisstore/owner.go) deletes nothing and answers
// NOT_COORDINATOR.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func (c *conn) deleteGroups(ctx context.Context, req *kmsg.DeleteGroupsRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrDeleteGroupsResponse()
	for _, name := range req.Groups {
		dg := kmsg.NewDeleteGroupsResponseGroup()
		dg.Group = name
		dg.ErrorCode = c.g.deleteGroup(ctx, name)
		resp.Groups = append(resp.Groups, dg)
	}
	return resp, nil
}

// deleteGroup is DeleteGroups for one group (shared with the admin API).
func (g *Gateway) deleteGroup(ctx context.Context, name string) int16 {
	if code := g.notCoordinator(name); code != 0 {
		return code
	}
	defer g.writes.delete(name)()
	// Claimed before the check, as a commit is (claimGroup): a deletion that reaches Redis after
	// another gateway took the group over is refused there.
	token, err := g.claimGroup(ctx, name)
	if err != nil {
		return groupErrCode(err)
	}
	exists, err := g.store.GroupExists(ctx, name)
	if err != nil {
		return groupErrCode(err)
	}
	code := g.coord.Delete(ctx, name)
	switch {
	case code == kerr.GroupIDNotFound.Code && exists:
		code = 0
	case code != 0:
		return code
	}
	if err := g.store.DeleteGroup(ctx, name, token); err != nil {
		if isDisowned(err) {
			g.disowned(ctx, name, token)
		}
		return groupErrCode(err)
	}
	forgetGroupMetrics(name)
	g.log.Info().Str("group", name).Msg("group deleted")
	return 0
}
