package fleet

import (
	"time"

	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/fence"
)

// State is a snapshot of a node, for dashboards and tests.
type State struct {
	// Limit is what the node admits at once now (adaptive.Limiter.Limit):
	// the estimate, capped by the ceiling the node's share sets (taken up
	// over a round trip when it rises) less the slots recent drops cut
	// from it (see adaptive.Limiter.SetCeiling), so it can sit below both
	// Share and Estimate after 429s.
	Limit int
	// Estimate is the local limiter's inference of the upstream's capacity.
	Estimate float64
	// Inflight and Queued are the local limiter's counts.
	Inflight, Queued int
	// Drops counts leases settled as dropped.
	Drops uint64
	// Share, LGlobal, Generation, Status, PeerInflight, LiveNodes and
	// Waiting are from the last grant.
	Share        int
	LGlobal      int
	Generation   int64
	Status       coord.Status
	PeerInflight int
	LiveNodes    int
	// Waiting counts the other live nodes that want capacity and hold a
	// share of 0 (coord.Grant.Waiting). Above 0 for more than a few
	// heartbeats, the key's L_global is below the number of nodes that
	// want it, and the nodes take turns (see Node).
	Waiting int
	// Learning is true while the key is in learning mode (see
	// coord.Grant.Learning), as of the last grant.
	Learning bool
	// Joined is true once a first grant arrived.
	Joined bool
	// Fenced is true while the node's lease does not let it admit: before
	// its first grant (FenceReason empty), once the fence deadline passed
	// without a renewal (fence.ReasonLeaseExpiring) and once evicted
	// (fence.ReasonEvicted). Under HoldLastShare a node whose lease ran out
	// admits at its last share even so: Fenced then says that the fleet's
	// bound no longer covers it. A stopped node admits nothing (Limit 0),
	// whatever Fenced says; the grant fields keep the last grant's values.
	Fenced      bool
	FenceReason fence.Reason
	// Outage is true while the last heartbeat failed; LastError is its error.
	Outage    bool
	LastError error
	// LastHeartbeat is when the last successful heartbeat was sent.
	LastHeartbeat time.Time
}

// State returns a snapshot of the node. The limiter's part is read under
// the lock a grant applies under, so a snapshot never shows a grant's
// share beside the limit from before it.
func (n *Node) State() State {
	fs := n.fence.State()
	n.mu.Lock()
	defer n.mu.Unlock()
	snap := n.lim.Snapshot() // n.mu before the limiter's lock, as a grant takes them
	return State{
		Limit:         snap.Limit,
		Estimate:      snap.Estimate,
		Inflight:      snap.Inflight,
		Queued:        snap.Queued,
		Drops:         snap.Drops,
		Share:         n.share,
		LGlobal:       n.lGlobal,
		Generation:    n.generation,
		Status:        n.status,
		PeerInflight:  n.peerInflight,
		LiveNodes:     n.liveNodes,
		Waiting:       n.waiting,
		Learning:      n.learning,
		Joined:        n.joined,
		Fenced:        fs.Fenced,
		FenceReason:   fs.Reason,
		Outage:        n.outage,
		LastError:     n.lastErr,
		LastHeartbeat: n.lastBeat,
	}
}
