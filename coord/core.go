package coord

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// Heartbeat runs steps 2–8 of the protocol (DESIGN §4) for report r at time
// now and returns the key's new state and the node's grant. Step 1, locking
// the key, is the caller's: Heartbeat is a pure function of (s, r, now) and
// never reads a clock. The receiver is not modified.
//
// Heartbeat returns an error wrapping ErrInvalidReport when r fails
// Report.Validate or names another key, and ErrNodeIDInUse when a live row
// of another instance holds r.NodeID; s is then returned unchanged.
//
// The rules, all in integer arithmetic with floor division:
//
//   - A row is live while now < lease_expires_at. An expired row behaves
//     exactly as if it had already been deleted: any instance may take it
//     over, and it starts afresh (share 0, not draining, not evicted).
//   - On a live row: another instance is refused; a Seq not newer than the
//     stored one is answered from the stored row with Grant.Stale (no
//     write); an evicted row is answered from the stored row with share 0
//     and is not renewed, so its reserve stays until its lease ends.
//   - Otherwise the row takes the report, its lease becomes now + LeaseTTL
//     (truncated to microseconds) and, if AppliedGen ≥ GrantedGen, the
//     grant is acknowledged: UnackedHigh drops to Share.
//   - Other rows whose lease has expired are deleted.
//   - L_global is the aggregate (lower median or min) of l_local over the
//     live rows that are not evicted, self included, clamped to the key's
//     [MinLimit, MaxLimit] override.
//   - Target: 0 when draining. Otherwise, with n eligible (live, not
//     draining, not evicted) rows, D their summed demand, d self's demand and
//     R = max(0, L_global − n): 1 + R·d/D, or 1 + R/n when D = 0. The targets
//     of all eligible rows add up to at most L_global when n ≤ L_global.
//   - Share = max(0, min(target, L_global − Σ Reserve of the other live rows)).
//   - A new generation is issued when the share changes and on a fresh row,
//     so a node's first grant on a row is newer than anything it holds;
//     UnackedHigh becomes max(UnackedHigh, Share).
func (s State) Heartbeat(r Report, now time.Time) (State, Grant, error) {
	return s.heartbeat(r, now, NodeState.Reserve)
}

// heartbeat is Heartbeat with the reserve rule as a parameter, so tests can
// show that weaker rules break the invariants.
func (s State) heartbeat(r Report, now time.Time, reserve func(NodeState) int) (State, Grant, error) {
	if err := r.Validate(); err != nil {
		return s, Grant{}, err
	}
	if r.Key != s.Key.Key {
		return s, Grant{}, fmt.Errorf("%w: key %.40q sent to the state of key %.40q", ErrInvalidReport, r.Key, s.Key.Key)
	}
	i, found := s.find(r.NodeID)
	live := found && s.Nodes[i].Live(now)
	if live {
		stored := s.Nodes[i]
		if stored.Instance != r.Instance {
			return s, Grant{}, fmt.Errorf("%w: node %.40q is held by instance %.40q until %s",
				ErrNodeIDInUse, r.NodeID, stored.Instance, stored.LeaseExpiresAt.Format(time.RFC3339Nano))
		}
		if stale := r.Seq <= stored.Seq; stale || stored.Evicted {
			return s, s.storedGrant(stored, now, stale), nil
		}
	}

	self := NodeState{NodeID: r.NodeID, JoinedAt: now}
	if live {
		self = s.Nodes[i]
	}
	self.Instance = r.Instance
	self.Seq = r.Seq
	self.LLocal = r.LLocal
	self.Inflight = r.Inflight
	self.Demand = r.Demand
	self.AppliedGen = r.AppliedGen
	self.LeaseExpiresAt = now.Add(leaseTTL(r))
	self.HeartbeatAt = now
	self.Labels = maps.Clone(r.Labels)
	if self.Labels == nil {
		self.Labels = map[string]string{}
	}
	if self.AppliedGen >= self.GrantedGen {
		self.UnackedHigh = self.Share
	}

	// Keep the live peers; expired ones are deleted.
	next := State{Key: s.Key, Nodes: make([]NodeState, 0, len(s.Nodes)+1)}
	lLocals := make([]int, 0, len(s.Nodes)+1)
	lLocals = append(lLocals, self.LLocal)
	var peerInflight, peerReserve, sumDemand int
	eligible := 0
	if !self.Draining {
		eligible, sumDemand = 1, self.Demand
	}
	for _, n := range s.Nodes {
		if n.NodeID == self.NodeID || !n.Live(now) {
			continue
		}
		next.Nodes = append(next.Nodes, n)
		peerInflight += n.Inflight
		peerReserve += reserve(n)
		if !n.Evicted {
			lLocals = append(lLocals, n.LLocal)
			if !n.Draining {
				eligible++
				sumDemand += n.Demand
			}
		}
	}

	lGlobal := s.Key.clamp(s.Key.Aggregate.fold(lLocals))
	target := 0
	if !self.Draining {
		target = splitTarget(lGlobal, eligible, sumDemand, self.Demand)
	}
	share := max(0, min(target, lGlobal-peerReserve))
	if !live || share != self.Share {
		next.Key.Generation++
		self.Share = share
		self.GrantedGen = next.Key.Generation
		self.UnackedHigh = max(self.UnackedHigh, share)
	}
	next.Key.LGlobal = lGlobal

	at, _ := slices.BinarySearchFunc(next.Nodes, self.NodeID, func(n NodeState, id string) int {
		if n.NodeID < id {
			return -1
		}
		return 1
	})
	next.Nodes = slices.Insert(next.Nodes, at, self)

	return next, Grant{
		Share:          self.Share,
		LGlobal:        lGlobal,
		Generation:     self.GrantedGen,
		LeaseRemaining: self.LeaseExpiresAt.Sub(now),
		Status:         self.Status(),
		PeerInflight:   peerInflight,
		LiveNodes:      len(next.Nodes),
	}, nil
}

// storedGrant answers a report from the stored row without writing: a stale
// report, or any report of an evicted node.
func (s State) storedGrant(self NodeState, now time.Time, stale bool) Grant {
	g := Grant{
		Share:          self.Share,
		LGlobal:        s.Key.LGlobal,
		Generation:     self.GrantedGen,
		LeaseRemaining: self.LeaseExpiresAt.Sub(now),
		Status:         self.Status(),
		LiveNodes:      1,
		Stale:          stale,
	}
	for _, n := range s.Nodes {
		if n.NodeID != self.NodeID && n.Live(now) {
			g.PeerInflight += n.Inflight
			g.LiveNodes++
		}
	}
	return g
}

// splitTarget is the demand-proportional target of one of n eligible nodes
// with demand d out of total demand sumDemand, under ceiling lGlobal. Every
// eligible node gets a floor of 1; the rest, R = max(0, lGlobal − n), is
// split by demand with floor division, or evenly when nobody has demand.
func splitTarget(lGlobal, n, sumDemand, d int) int {
	rest := max(0, lGlobal-n)
	if sumDemand == 0 {
		return 1 + rest/n
	}
	return 1 + rest*d/sumDemand
}

// fold aggregates l_local values; vs is not empty and is reordered.
func (a Aggregate) fold(vs []int) int {
	if a == AggregateMin {
		return slices.Min(vs)
	}
	slices.Sort(vs)
	return vs[(len(vs)-1)/2] // lower median: the ⌈m/2⌉-th smallest
}

// clamp applies the operator override to l.
func (k KeyState) clamp(l int) int {
	if k.MaxLimit > 0 && l > k.MaxLimit {
		l = k.MaxLimit
	}
	if k.MinLimit > 0 && l < k.MinLimit {
		l = k.MinLimit
	}
	return l
}
