package coordinator

// Offset-commit identity checks (Apache's GroupCoordinator.handleCommitOffsets,
// handleTxnCommitOffsets and validateOffsetCommit). Offsets themselves are
// stored by the gateway; these only say whether the commit may be stored.
//
// OffsetCommit (ValidateCommit):
//   - unknown group: generation < 0 is a "simple" commit and OK; otherwise
//     ILLEGAL_GENERATION (Apache: a request from an older generation; from
//     OffsetCommit v9, GROUP_ID_NOT_FOUND);
//   - generation < 0 on an Empty group: OK;
//   - a generation >= 0, a member id or an instance id: the member must be
//     current (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID) and the generation the
//     group's (ILLEGAL_GENERATION); then CompletingRebalance is
//     REBALANCE_IN_PROGRESS, and in Stable or PreparingRebalance the commit
//     restarts the member's session timer, like a heartbeat;
//   - generation < 0 without member on a group with members: UNKNOWN_MEMBER_ID.
//
// TxnOffsetCommit (ValidateTxnCommit) checks the same identity but lets a
// commit without member through whatever the state, never answers
// REBALANCE_IN_PROGRESS and is not a heartbeat.
//
// If ctx ends first the answer is COORDINATOR_NOT_AVAILABLE.

import (
	"context"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
)

// ValidateCommit checks an OffsetCommit's member id, instance id and generation
// against the group. It returns 0 if the offsets may be stored, else the Kafka
// error code for every partition of the request.
func (c *Coordinator) ValidateCommit(ctx context.Context, groupID, memberID string, instanceID *string, generation int32) int16 {
	return c.validateCommit(ctx, groupID, memberID, instanceID, generation, false)
}

// ValidateTxnCommit is ValidateCommit for TxnOffsetCommit (member fields are
// sent from v3; older versions pass "", nil, -1).
func (c *Coordinator) ValidateTxnCommit(ctx context.Context, groupID, memberID string, instanceID *string, generation int32) int16 {
	return c.validateCommit(ctx, groupID, memberID, instanceID, generation, true)
}

func (c *Coordinator) validateCommit(ctx context.Context, groupID, memberID string, instanceID *string, generation int32, txn bool) int16 {
	memberID, instanceID = strings.Clone(memberID), cloneStringPtr(instanceID)
	code, err := call(ctx, c, groupID, false, func(g *group, reply chan<- int16) {
		reply <- g.validateCommit(memberID, instanceID, generation, txn)
	})
	switch {
	case err == nil:
		return code
	case err == errUnknownGroup:
		// Apache creates an Empty group here and validates against it. It answers
		// GROUP_ID_NOT_FOUND from OffsetCommit v9 on; ILLEGAL_GENERATION is kept at every
		// version, as the group is unknown after any restart here and it makes members rejoin.
		if generation < 0 {
			return 0
		}
		if txn {
			return kerr.UnknownMemberID.Code
		}
		return kerr.IllegalGeneration.Code
	default:
		return errCode(err, kerr.CoordinatorNotAvailable.Code)
	}
}

func (g *group) validateCommit(memberID string, instanceID *string, generation int32, txn bool) int16 {
	if generation < 0 && g.state == stateEmpty {
		return 0 // admin client or a consumer without group management
	}
	if generation >= 0 || memberID != "" || instanceID != nil {
		m, code := g.currentMember(memberID, instanceID)
		if code != 0 {
			return code
		}
		if generation != g.generation {
			return kerr.IllegalGeneration.Code
		}
		if txn {
			return 0
		}
		switch g.state {
		case stateCompletingRebalance:
			// The member has its JoinGroup answer but not its assignment yet.
			return kerr.RebalanceInProgress.Code
		case stateStable, statePreparingRebalance:
			g.scheduleSession(m, m.sessionTimeout)
		}
		return 0
	}
	if !txn && g.state != stateEmpty {
		return kerr.UnknownMemberID.Code // only members may commit to an active group
	}
	return 0
}
