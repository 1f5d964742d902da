package gateway

// ListGroups v0-v4.
//
// Like an Apache broker, a gateway lists the groups it coordinates: those in its coordinator's memory
// plus those that only have committed offsets in Redis (as "Empty"), so admin tools that ask every
// broker see each group once. A group's protocol type is that of its members (kept once they left), and
// "" for a group known from Redis alone, as DescribeGroups reports it: Apache lists a group that never
// had members (offsets committed by "simple" consumers or admin tools) with "". v4 filters by state,
// ignoring case and surrounding spaces.

import (
	"context"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func (c *conn) listGroups(ctx context.Context, req *kmsg.ListGroupsRequest) (kmsg.Response, error) {
	g := c.g
	resp := kmsg.NewPtrListGroupsResponse()
	want := func(state string) bool {
		if req.Version < 4 || len(req.StatesFilter) == 0 {
			return true
		}
		// Apache's coordinator lower-cases and trims the filter: "empty" and " Stable " match.
		for _, s := range req.StatesFilter {
			if strings.ToLower(strings.TrimSpace(s)) == strings.ToLower(state) {
				return true
			}
		}
		return false
	}
	seen := map[string]bool{}
	for _, info := range g.coord.List(ctx) {
		if info.State == "Dead" || !g.nodes.isCoordinator(info.Group) {
			continue
		}
		seen[info.Group] = true
		if !want(info.State) {
			continue
		}
		lg := kmsg.NewListGroupsResponseGroup()
		lg.Group, lg.ProtocolType, lg.GroupState = info.Group, info.ProtocolType, info.State
		resp.Groups = append(resp.Groups, lg)
	}
	// A group whose offsets' master could not be asked (unchecked) is not listed: its coordinator cannot
	// serve it, as Apache leaves out the groups of an offsets partition without a leader.
	stored, _, err := g.store.Groups(ctx)
	if err != nil {
		resp.ErrorCode = groupErrCode(err)
		return resp, nil
	}
	for _, name := range stored {
		if seen[name] || !g.nodes.isCoordinator(name) || !want("Empty") {
			continue
		}
		lg := kmsg.NewListGroupsResponseGroup()
		lg.Group, lg.GroupState = name, "Empty" // protocol type "": no member here to give one
		resp.Groups = append(resp.Groups, lg)
	}
	sort.Slice(resp.Groups, func(i, j int) bool { return resp.Groups[i].Group < resp.Groups[j].Group })
	return resp, nil
}
