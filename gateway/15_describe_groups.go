package gateway

// DescribeGroups v0-v5.
//
// A group the coordinator holds is described from memory (state, protocol type and name, members with
// client id, client host, metadata and assignment; v4+ instance ids). A group it does not hold is
// "Empty" when Redis has committed offsets for it and "Dead" otherwise, with error NONE (Apache answers
// GROUP_ID_NOT_FOUND only from v6). Authorized operations are not computed.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func (c *conn) describeGroups(ctx context.Context, req *kmsg.DescribeGroupsRequest) (kmsg.Response, error) {
	g := c.g
	resp := kmsg.NewPtrDescribeGroupsResponse()
	for _, name := range req.Groups {
		dg := kmsg.NewDescribeGroupsResponseGroup()
		dg.Group = name
		if code := g.notCoordinator(name); code != 0 {
			dg.ErrorCode = code
			resp.Groups = append(resp.Groups, dg)
			continue
		}
		info, ok, code := g.describeGroup(ctx, name)
		if code != 0 {
			dg.ErrorCode = code
			resp.Groups = append(resp.Groups, dg)
			continue
		}
		if !ok {
			dg.State = "Dead"
			if exists, err := g.store.GroupExists(ctx, name); err != nil {
				dg.ErrorCode = groupErrCode(err)
			} else if exists {
				dg.State = "Empty"
			}
			resp.Groups = append(resp.Groups, dg)
			continue
		}
		dg.State, dg.ProtocolType = info.State, info.ProtocolType
		if info.State == "Stable" {
			dg.Protocol = info.Protocol
		}
		for _, m := range info.Members {
			dm := kmsg.NewDescribeGroupsResponseGroupMember()
			dm.MemberID, dm.InstanceID, dm.ClientID, dm.ClientHost = m.MemberID, m.InstanceID, m.ClientID, m.ClientHost
			if info.State == "Stable" { // Apache reports metadata and assignments only once they are settled
				dm.ProtocolMetadata, dm.MemberAssignment = m.Metadata, m.Assignment
			}
			dg.Members = append(dg.Members, dm)
		}
		resp.Groups = append(resp.Groups, dg)
	}
	return resp, nil
}
