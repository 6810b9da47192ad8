package coord

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Heartbeat runs steps 2–8 of the protocol (docs/design.md) for report r at
// time now and returns the key's new state and the node's grant. Step 1,
// locking the key, is the caller's, and so is checking the database's
// incarnation (see Incarnate): Heartbeat is a pure function of (s, r, now)
// and never reads a clock. The receiver is not modified.
//
// Heartbeat returns an error wrapping ErrInvalidReport when r fails
// Report.Validate or names another key, and ErrNodeIDInUse when a member
// row of another instance holds r.NodeID; s is then returned unchanged.
//
// The rules, all in integer arithmetic with floor division:
//
//   - Lost state. A report that proves the database forgot grants — it
//     applied a grant of an epoch newer than the key's, or of the key's
//     epoch but a generation the key (or the row) never reached, or it
//     comes from an instance the key has no row for and claims requests in
//     flight under the key's epoch — puts the key in learning mode (see
//     learn) before anything else.
//   - Rows are per instance. The instance's own row: a Seq not newer than
//     the stored one is answered from the row with Grant.Stale, as is any
//     report of a row that departed; an evicted row takes the report's
//     in-flight, demand, seq and acknowledgement but is never renewed,
//     granted or counted as a member, and is answered StatusEvicted.
//     Otherwise another instance's member row refuses the report, and the
//     row (or a fresh one) takes it: its lease becomes now + LeaseTTL, its hold
//     the lease end + MaxRequestDuration, and if the report applied its
//     newest grant (same epoch, AppliedGen ≥ GrantedGen) UnackedHigh drops
//     to Share.
//   - Rows whose hold has ended are deleted; an evicted row's instance is
//     remembered in Evictions, and its later reports are answered
//     StatusEvicted.
//   - L_global is the aggregate (lower median or min) of l_local over the
//     voting members, self included, clamped to the key's [MinLimit,
//     MaxLimit]. A member votes when, at its last report, it held a share
//     from before that report or had requests in flight (self: its share
//     before this report, its in-flight in it), or it voted at the report
//     before and wants capacity (demand > 0, not draining).
//     When no member does, L_global stays as it was; on a key that has
//     none yet (0), every member votes.
//   - Target: 0 when draining (a durable mark on the node id) or without
//     demand. Otherwise, with n eligible members (not draining, demand >
//     0, self included) and R = max(0, L_global − n): 1 plus self's part
//     of R split by demand by largest remainder (see apportion). The
//     eligible members' targets add up to max(n, L_global).
//   - Share = max(0, min(target, L_global − Σ Reserve of every other
//     holding row)), members or not; in learning mode also at most what
//     the node proves it holds: r.Inflight, or the share this epoch already
//     granted it.
//   - A new generation is issued when the share changes, on a fresh row,
//     and on a row whose grant is of an older epoch, so a node's first
//     grant on a row is newer than anything it holds; UnackedHigh becomes
//     max(UnackedHigh, Share).
//   - Rates: see rateGrant; learning mode caps a rate share for the key's
//     longest lease from its epoch (a coordinator that also records the
//     database's longest lease runs HeartbeatIn).
func (s State) Heartbeat(r Report, now time.Time) (State, Grant, error) {
	return s.heartbeat(r, now, NodeState.Reserve, 0)
}

// HeartbeatIn is Heartbeat for a key of database d, as Check returned d
// before Incarnate: what a coordinator runs (Memory and Postgres do). It
// differs from Heartbeat only in learning mode's cap on rate shares,
// which lasts the longest lease the key or d recorded (see
// KeyState.rateLearning); Heartbeat counts the key's alone.
func (s State) HeartbeatIn(d Database, r Report, now time.Time) (State, Grant, error) {
	return s.heartbeat(r, now, NodeState.Reserve, d.MaxLeaseTTL)
}

// heartbeat is Heartbeat with the reserve rule as a parameter, so tests can
// show that weaker rules break the invariants; dbLease is the database's
// longest recorded lease (0: the key's alone).
func (s State) heartbeat(r Report, now time.Time, reserve func(NodeState, time.Time) int, dbLease time.Duration) (State, Grant, error) {
	if err := r.Validate(); err != nil {
		return s, Grant{}, err
	}
	if r.Key != s.Key.Key {
		return s, Grant{}, fmt.Errorf("%w: key %.40q sent to the state of key %.40q", ErrInvalidReport, r.Key, s.Key.Key)
	}
	orig := s
	i, found := s.find(r.NodeID, r.Instance)
	if !found && s.evicted(r.NodeID, r.Instance) {
		return s, s.evictedGrant(now), nil
	}
	if found && s.lostState(r, &s.Nodes[i]) || !found && s.lostState(r, nil) {
		s = s.learnFrom(now, r)
	}
	if found {
		stored := s.Nodes[i]
		if r.Seq <= stored.Seq || stored.Departed {
			return s, s.storedGrant(stored, now, true), nil
		}
		if stored.Evicted {
			next := s.Clone()
			self := &next.Nodes[i]
			takeReport(self, r, now)
			return next, next.storedGrant(*self, now, false), nil
		}
	}
	for _, n := range s.rowsOf(r.NodeID) {
		if n.Instance != r.Instance && n.Member(now) {
			return orig, Grant{}, fmt.Errorf("%w: node %.40q is held by another live instance until %s",
				ErrNodeIDInUse, r.NodeID, n.LeaseExpiresAt.Format(time.RFC3339Nano))
		}
	}

	self := NodeState{NodeID: r.NodeID, Instance: r.Instance, JoinedAt: now}
	if found {
		self = s.Nodes[i]
	}
	self.Draining = s.drained(r.NodeID) // before takeReport: the vote reads it
	takeReport(&self, r, now)
	self.LeaseExpiresAt = now.Add(leaseTTL(r))
	self.HoldUntil = self.LeaseExpiresAt.Add(requestBound(r))

	// Keep the rows still holding; delete the rest, remembering evicted
	// instances.
	next := State{Key: s.Key, Drains: slices.Clone(s.Drains), Evictions: slices.Clone(s.Evictions),
		Nodes: make([]NodeState, 0, len(s.Nodes)+1)}
	next.Key.MaxLeaseTTL = max(next.Key.MaxLeaseTTL, leaseTTL(r))
	next.Key.MaxRequestDuration = max(next.Key.MaxRequestDuration, requestBound(r))
	// Voters: the members whose l_local rests on recent samples (see
	// votes). When none does, L_global stays; a key without one yet takes
	// every member's.
	lLocals := make([]int, 0, len(s.Nodes)+1)
	voters := make([]int, 0, len(s.Nodes)+1)
	lLocals = append(lLocals, self.LLocal)
	if self.votes() {
		voters = append(voters, self.LLocal)
	}
	var peerInflight, peerReserve, members, waiting int
	var claims []claim[int] // the other eligible members' demands
	for j, n := range s.Nodes {
		if found && j == i {
			continue
		}
		if n.gone(now) {
			if n.Evicted {
				next.addEviction(Instance{n.NodeID, n.Instance})
			}
			continue
		}
		next.Nodes = append(next.Nodes, n)
		if n.Holding(now) {
			peerInflight += n.Inflight
			peerReserve += reserve(n, now)
		}
		if n.Member(now) {
			members++
			lLocals = append(lLocals, n.LLocal)
			if n.votes() {
				voters = append(voters, n.LLocal)
			}
			if n.wants() {
				claims = append(claims, claim[int]{n.NodeID, n.Instance, n.Demand})
			}
			if n.waiting() {
				waiting++
			}
		}
	}

	var lGlobal int
	switch {
	case len(voters) > 0:
		lGlobal = fold(s.Key.Aggregate, voters)
	case s.Key.LGlobal > 0:
		lGlobal = s.Key.LGlobal // nobody measured: nothing new to go by
	default:
		lGlobal = fold(s.Key.Aggregate, lLocals)
	}
	lGlobal = s.Key.clamp(lGlobal)
	target := 0
	if self.wants() {
		target = splitTarget(lGlobal, claim[int]{self.NodeID, self.Instance, self.Demand}, claims)
	}
	share := max(0, min(target, lGlobal-peerReserve))
	if len(claims)+min(target, 1) <= lGlobal {
		// Every floor of 1 fits: a member granted 0 gets its floor once
		// the reserves it waits for drain, and no holder need give it a
		// turn (see Grant.Waiting).
		waiting = 0
	}
	learning := next.Key.learning(now)
	if learning {
		// No more than the node proves it holds: its in-flight now, or
		// the share this epoch already granted it (itself no more than
		// what it proved then), so a report taken in a lull does not
		// ratchet it down for the rest of learning mode.
		proven := self.Inflight
		if found && self.Epoch == next.Key.Epoch {
			proven = max(proven, self.Share)
		}
		share = min(share, proven)
	}
	rateLearning := learning && next.Key.rateLearning(max(next.Key.MaxLeaseTTL, dbLease), now)
	rate, rateShare := next.rateGrant(self, next.Nodes, r, rateLearning, now)
	if !found || share != self.Share || rateShare != self.RateShare || self.Epoch != next.Key.Epoch {
		next.Key.Generation++
		self.Share = share
		self.RateShare = rateShare
		self.Epoch = next.Key.Epoch
		self.GrantedGen = next.Key.Generation
		self.UnackedHigh = max(self.UnackedHigh, share)
		self.RateHigh = Rates{Requests: max(self.RateHigh.Requests, rateShare.Requests),
			Tokens: max(self.RateHigh.Tokens, rateShare.Tokens)}
	}
	next.Key.LGlobal = lGlobal
	next.Key.Rate = rate

	at, _ := slices.BinarySearchFunc(next.Nodes, [2]string{self.NodeID, self.Instance}, compareRow)
	next.Nodes = slices.Insert(next.Nodes, at, self)

	return next, Grant{
		Share:          self.Share,
		LGlobal:        lGlobal,
		Epoch:          self.Epoch,
		Generation:     self.GrantedGen,
		LeaseRemaining: self.LeaseExpiresAt.Sub(now),
		Status:         self.Status(now),
		Learning:       learning,
		PeerInflight:   peerInflight,
		LiveNodes:      members + 1,
		Waiting:        waiting,
		Rate:           rate,
		RateShare:      self.RateShare,
	}, nil
}

// takeReport copies r's counts into n and acknowledges n's grant when r
// applied it. n.Draining must already say whether n's node id is drained
// (see votes).
func takeReport(n *NodeState, r Report, now time.Time) {
	n.Seq = r.Seq
	// The vote (see votes): n.Share is still the share from before this
	// report; a vote kept from the report before needs demand, undrained.
	n.Measuring = n.Share > 0 || r.Inflight > 0 || n.Measuring && r.Demand > 0 && !n.Draining
	n.LLocal = r.LLocal
	n.Inflight = r.Inflight
	n.Demand = r.Demand
	n.AppliedGen = r.AppliedGen
	n.HeartbeatAt = now
	n.Labels = maps.Clone(r.Labels)
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	n.RateLocal = r.RateLocal
	n.RateDemand = r.RateDemand
	n.RateUsed = r.RateUsed
	if r.Epoch == n.Epoch && r.AppliedGen >= n.GrantedGen {
		n.UnackedHigh = n.Share
		n.RateHigh = n.RateShare
	}
}

// storedGrant answers a report from the stored row: a stale report, a
// report of a row that left, or a report of an evicted row.
func (s State) storedGrant(self NodeState, now time.Time, stale bool) Grant {
	g := Grant{
		Share:          self.Share,
		LGlobal:        s.Key.LGlobal,
		Epoch:          self.Epoch,
		Generation:     self.GrantedGen,
		LeaseRemaining: max(0, self.LeaseExpiresAt.Sub(now)),
		Status:         self.Status(now),
		Learning:       s.Key.learning(now),
		Stale:          stale,
		Rate:           s.Key.Rate,
	}
	if !self.Evicted {
		g.RateShare = self.RateShare
	}
	g.PeerInflight, g.LiveNodes, g.Waiting = s.peers(now, &self)
	return g
}

// evictedGrant answers a report of an evicted instance whose row has gone.
func (s State) evictedGrant(now time.Time) Grant {
	g := Grant{LGlobal: s.Key.LGlobal, Status: StatusEvicted, Learning: s.Key.learning(now), Rate: s.Key.Rate}
	g.PeerInflight, g.LiveNodes, g.Waiting = s.peers(now, nil)
	return g
}

// peers counts, for a grant answered from the stored rows, the in-flight
// of the rows other than self's (every row when self is nil) that still
// hold, the live members (self included when it is one), and the other
// members waiting (see Grant.Waiting): 0 while the members that want
// capacity, self included, do not outnumber the key's stored L_global.
func (s State) peers(now time.Time, self *NodeState) (inflight, live, waiting int) {
	wanting := 0
	for _, n := range s.Nodes {
		isSelf := self != nil && n.NodeID == self.NodeID && n.Instance == self.Instance
		if !isSelf && n.Holding(now) {
			inflight += n.Inflight
		}
		if !n.Member(now) {
			continue
		}
		live++
		if n.wants() {
			wanting++
		}
		if !isSelf && n.waiting() {
			waiting++
		}
	}
	if wanting <= s.Key.LGlobal {
		waiting = 0 // every floor of 1 fits
	}
	return inflight, live, waiting
}

// splitTarget is the demand-proportional target of self, an eligible node
// (demand > 0, not draining), among the other eligible members others,
// under ceiling lGlobal. Every eligible node gets a floor of 1; the rest,
// R = max(0, lGlobal − n) for n eligible nodes, is split by demand with
// apportion, so the n targets add up to max(n, lGlobal).
func splitTarget(lGlobal int, self claim[int], others []claim[int]) int {
	return 1 + apportion(max(0, lGlobal-len(others)-1), self, others)
}

// claim is one node's demand in a split: its row (node id, instance) and
// its demand, > 0.
type claim[T int | int64] struct {
	nodeID, instance string
	want             T
}

// apportion is self's part of total split among self and others in
// proportion to their wants (each > 0) by largest remainder: with W the
// summed want, each claim gets ⌊total·w/W⌋, and the total −
// Σ⌊total·w/W⌋ units left over go one each to the first claims ordered by
// remainder total·w mod W descending, then by node id and instance
// ascending (byte order). The parts add up to exactly total, each within
// 1 of total·w/W, and every heartbeat that sees the same rows computes the
// same parts. total·w must not overflow T.
func apportion[T int | int64](total T, self claim[T], others []claim[T]) T {
	sum := self.want
	for _, o := range others {
		sum += o.want
	}
	part, rem := total*self.want/sum, total*self.want%sum
	left := total - part
	ahead := 0 // claims ordered before self
	for _, o := range others {
		left -= total * o.want / sum
		r := total * o.want % sum
		if r > rem || r == rem && cmp.Or(strings.Compare(o.nodeID, self.nodeID), strings.Compare(o.instance, self.instance)) < 0 {
			ahead++
		}
	}
	if T(ahead) < left {
		part++
	}
	return part
}

// votes reports whether n's l_local counts toward L_global (Measuring):
// a node that, at its last report, held a share from before that report
// or had requests in flight has been measuring the upstream lately, and
// one that lost its share keeps the vote it had while it still wants
// capacity (demand > 0, not draining: a drained node waits for no
// share). A joiner's first report carries its initial limit, even once
// that report has been granted a share, and a node that never measured
// has nothing else; counting them would hold L_global down (a lower
// median of two is the minimum). Without the kept vote a fall of
// L_global would lose its own voters: the members it leaves at a share
// of 0 — under min, or with the cautious ones a majority, those whose
// l_local made it fall — would stop voting, and the next fold would take
// only the others.
func (n NodeState) votes() bool { return n.Measuring }

// fold aggregates estimates by a (l_local values, learned rates); vs is
// not empty and is reordered.
func fold[T cmp.Ordered](a Aggregate, vs []T) T {
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
