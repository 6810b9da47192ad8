package coord

import (
	"maps"
	"slices"
	"strings"
	"time"
)

// Aggregate says how a key folds its nodes' l_local values into L_global.
type Aggregate string

// The aggregates. Neither is ever a sum: every l_local is an estimate of the
// whole backend's capacity.
const (
	// AggregateLowerMedian takes the lower median: the ⌈m/2⌉-th smallest of
	// m values, so one wild estimate cannot move the fleet. The default.
	AggregateLowerMedian Aggregate = "lower_median"
	// AggregateMin takes the smallest estimate: the most cautious node rules.
	AggregateMin Aggregate = "min"
)

// State is one key's coordinator state: its key row, its node rows and its
// drain marks, as the pure core sees them. A State is a value: its methods
// return a new State and never modify the receiver, so a State may be shared
// between goroutines as long as nobody writes to its fields.
type State struct {
	Key KeyState
	// Nodes are the key's node rows sorted by (NodeID, Instance) in byte
	// order: live members, and the rows of ended instances whose reserve
	// is still held, until a heartbeat deletes them.
	Nodes []NodeState
	// Drains are the node ids an operator drained, sorted (byte order).
	// A mark belongs to the node id, not to a row: it survives lapses,
	// restarts and takeovers until Undrain.
	Drains []string
	// Evictions are the evicted instances whose rows have gone, sorted
	// by (NodeID, Instance): such an instance's reports are answered
	// StatusEvicted for as long as the key exists, so it never joins
	// again.
	Evictions []Instance
}

// Instance names one instance of a node id.
type Instance struct {
	NodeID, Instance string
}

// KeyState is the key row (table fleetlimit.keys).
type KeyState struct {
	Key string
	// MinLimit and MaxLimit are the operator override clamping L_global;
	// 0 means no bound.
	MinLimit, MaxLimit int
	Aggregate          Aggregate
	// Epoch names the key's history of grants. It starts as the creation
	// time in microseconds since the Unix epoch and moves to the detection
	// time (or one more) whenever the coordinator finds that the database
	// lost state, so grants issued after the loss outrank every grant
	// issued before it.
	Epoch int64
	// Generation is the newest grant generation issued on the key.
	Generation int64
	// LGlobal is the ceiling computed by the newest heartbeat.
	LGlobal int
	// Incarnation identifies the database history the key lives in (for
	// Postgres: system identifier, timeline, database; see
	// fleetlimit.incarnation). A change means the database may have lost
	// committed state. Empty until the first heartbeat.
	Incarnation string
	// LearningUntil ends the learning mode entered when the database lost
	// state; zero when the key never entered it.
	LearningUntil time.Time
	// MaxLeaseTTL and MaxRequestDuration are the largest lease and request
	// bound any report on the key has carried: after a loss, how long
	// leases and requests of before the loss may still run.
	MaxLeaseTTL, MaxRequestDuration time.Duration
	CreatedAt                       time.Time
	// RateLimit is the operator's rate per minute on each dimension (0:
	// none): the key's rate when no node learns one, and a cap on what they
	// learn.
	RateLimit Rates
	// Rate is the key's rate computed by the newest heartbeat.
	Rate Rates
}

// NodeState is a node row (table fleetlimit.nodes): one instance of a node
// id on the key.
type NodeState struct {
	NodeID   string
	Instance string
	Seq      int64
	LLocal   int
	Inflight int
	Demand   int
	// Share is the newest grant, issued at (Epoch, GrantedGen).
	Share      int
	Epoch      int64
	GrantedGen int64
	// AppliedGen is the newest generation the node reported as applied.
	AppliedGen int64
	// Measuring is whether the instance votes toward L_global: at its last
	// report it held a share from before that report or had requests in
	// flight, so its l_local rests on samples, or it voted at the report
	// before and still wants capacity (demand > 0, not draining), waiting
	// for a share it lost. A joiner's first report, carrying a limiter's
	// InitialLimit, does not.
	Measuring bool
	// UnackedHigh is the largest share granted to the node since the
	// heartbeat that acknowledged its grant (the acknowledged share
	// included): the most the node may be enforcing right now.
	UnackedHigh int
	// LeaseExpiresAt ends the row's membership unless renewed.
	LeaseExpiresAt time.Time
	// HoldUntil is when every request the instance may have admitted has
	// ended: its lease end plus its request bound, or the hold it left
	// with. The row's reserve counts until then.
	HoldUntil time.Time
	Draining  bool
	Evicted   bool
	// Departed is set when the instance left with requests in flight.
	Departed    bool
	JoinedAt    time.Time
	HeartbeatAt time.Time
	Labels      map[string]string
	// RateLocal, RateDemand and RateUsed are the last report's
	// (Report.RateLocal, Report.RateDemand, Report.RateUsed).
	RateLocal, RateDemand, RateUsed Rates
	// RateShare is the newest grant's rate share, issued with Share.
	RateShare Rates
	// RateHigh is, on each dimension, the largest rate share granted since
	// the heartbeat that acknowledged the node's grant: the most the node
	// may be pacing to right now (UnackedHigh's twin).
	RateHigh Rates
}

// NewState returns the state of a key created at now with the defaults: no
// override, lower median, epoch now, generation 0, L_global 0, no nodes.
func NewState(key string, now time.Time) State {
	return State{Key: KeyState{Key: key, Aggregate: AggregateLowerMedian, Epoch: now.UnixMicro(), CreatedAt: now}}
}

// Member reports whether the row is one of the key's live members at now:
// its lease runs past now, and its instance was neither evicted nor departed. A
// row whose lease ends exactly at now is expired.
func (n NodeState) Member(now time.Time) bool {
	return n.LeaseExpiresAt.After(now) && !n.Evicted && !n.Departed
}

// waiting reports whether the row, a member, wants capacity at its last
// report (demand > 0, not draining) and holds a share of 0 (see
// Grant.Waiting).
func (n NodeState) waiting() bool { return n.wants() && n.Share == 0 }

// wants reports whether the row wants capacity at its last report: demand
// > 0, not draining (an eligible member of the split).
func (n NodeState) wants() bool { return !n.Draining && n.Demand > 0 }

// Holding reports whether the row's reserve still counts at now: until
// HoldUntil, whether or not the row is a member.
func (n NodeState) Holding(now time.Time) bool { return n.HoldUntil.After(now) }

// heldBack reports whether the row, no member at now, still holds back
// capacity from the others for requests its instance may still send or
// run: a reserve above 0 (until HoldUntil) or a rate reserve (while the
// lease of an evicted instance runs), and until when.
func (n NodeState) heldBack(now time.Time) (bool, time.Time) {
	if n.Member(now) {
		return false, time.Time{}
	}
	var until time.Time
	if n.Reserve(now) > 0 {
		until = n.HoldUntil
	}
	if !n.RateReserve(now).IsZero() && n.LeaseExpiresAt.After(until) {
		until = n.LeaseExpiresAt
	}
	return !until.IsZero(), until
}

// gone reports whether the row may be deleted at now: its hold has ended.
// An evicted row's instance moves to State.Evictions then.
func (n NodeState) gone(now time.Time) bool { return !n.Holding(now) }

// Status is the row's state at now: evicted wins over departed, departed
// over expired, expired over draining.
func (n NodeState) Status(now time.Time) Status {
	switch {
	case n.Evicted:
		return StatusEvicted
	case n.Departed:
		return StatusDeparted
	case !n.LeaseExpiresAt.After(now):
		return StatusExpired
	case n.Draining:
		return StatusDraining
	}
	return StatusActive
}

// Reserve is what the occupancy cap holds back for the row when granting to
// others: max(UnackedHigh, Share, Inflight) while the row is holding, 0
// after. See the package documentation for why this bounds the instance's
// in-flight at every instant.
func (n NodeState) Reserve(now time.Time) int {
	if !n.Holding(now) {
		return 0
	}
	return max(n.UnackedHigh, n.Share, n.Inflight)
}

// Clone returns a deep copy of s.
func (s State) Clone() State {
	out := State{Key: s.Key, Drains: slices.Clone(s.Drains), Evictions: slices.Clone(s.Evictions)}
	if s.Nodes == nil {
		return out
	}
	out.Nodes = make([]NodeState, len(s.Nodes))
	for i, n := range s.Nodes {
		n.Labels = maps.Clone(n.Labels)
		out.Nodes[i] = n
	}
	return out
}

// compareRow orders rows by (NodeID, Instance), byte order.
func compareRow(n NodeState, id [2]string) int {
	if c := strings.Compare(n.NodeID, id[0]); c != 0 {
		return c
	}
	return strings.Compare(n.Instance, id[1])
}

// find returns the index of the row (nodeID, instance) in s.Nodes, or where
// it would be inserted, and whether it is there.
func (s State) find(nodeID, instance string) (int, bool) {
	return slices.BinarySearchFunc(s.Nodes, [2]string{nodeID, instance}, compareRow)
}

// Row returns the row of (nodeID, instance), if any.
func (s State) Row(nodeID, instance string) (NodeState, bool) {
	i, ok := s.find(nodeID, instance)
	if !ok {
		return NodeState{}, false
	}
	return s.Nodes[i], true
}

// Node returns nodeID's member row at now if it has one, else its most
// recently renewed row, if any.
func (s State) Node(nodeID string, now time.Time) (NodeState, bool) {
	var (
		best  NodeState
		found bool
	)
	for _, n := range s.rowsOf(nodeID) {
		switch {
		case !found, n.Member(now) && !best.Member(now),
			n.Member(now) == best.Member(now) && n.HeartbeatAt.After(best.HeartbeatAt):
			best, found = n, true
		}
	}
	return best, found
}

// rowsOf returns nodeID's rows, a subslice of s.Nodes.
func (s State) rowsOf(nodeID string) []NodeState {
	lo, _ := s.find(nodeID, "")
	hi := lo
	for hi < len(s.Nodes) && s.Nodes[hi].NodeID == nodeID {
		hi++
	}
	return s.Nodes[lo:hi]
}

// evicted reports whether (nodeID, instance) is an evicted instance whose
// row has gone.
func (s State) evicted(nodeID, instance string) bool {
	_, ok := slices.BinarySearchFunc(s.Evictions, Instance{nodeID, instance}, compareInstance)
	return ok
}

// addEviction records an evicted instance whose row goes; s is the
// caller's.
func (s *State) addEviction(in Instance) {
	if at, ok := slices.BinarySearchFunc(s.Evictions, in, compareInstance); !ok {
		s.Evictions = slices.Insert(s.Evictions, at, in)
	}
}

func compareInstance(a, b Instance) int {
	if c := strings.Compare(a.NodeID, b.NodeID); c != 0 {
		return c
	}
	return strings.Compare(a.Instance, b.Instance)
}

// drained reports whether an operator drained nodeID.
func (s State) drained(nodeID string) bool {
	_, ok := slices.BinarySearch(s.Drains, nodeID)
	return ok
}
