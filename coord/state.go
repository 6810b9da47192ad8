package coord

import (
	"maps"
	"slices"
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

// State is one key's coordinator state: its key row and its node rows, as
// the pure core sees them. A State is a value: its methods return a new State
// and never modify the receiver, so a State may be shared between goroutines
// as long as nobody writes to its fields.
type State struct {
	Key KeyState
	// Nodes are the key's node rows sorted by NodeID (byte order), expired
	// rows included until a heartbeat deletes them.
	Nodes []NodeState
}

// KeyState is the key row (table fleetlimit.keys).
type KeyState struct {
	Key string
	// MinLimit and MaxLimit are the operator override clamping L_global;
	// 0 means no bound.
	MinLimit, MaxLimit int
	Aggregate          Aggregate
	// Generation is the newest grant generation issued on the key.
	Generation int64
	// LGlobal is the ceiling computed by the newest heartbeat.
	LGlobal   int
	CreatedAt time.Time
}

// NodeState is a node row (table fleetlimit.nodes).
type NodeState struct {
	NodeID   string
	Instance string
	Seq      int64
	LLocal   int
	Inflight int
	Demand   int
	// Share is the newest grant, issued at generation GrantedGen.
	Share      int
	GrantedGen int64
	// AppliedGen is the newest generation the node reported as applied.
	AppliedGen int64
	// UnackedHigh is the largest share granted to the node since the
	// heartbeat that acknowledged its grant (the acknowledged share
	// included): the most the node may be enforcing right now.
	UnackedHigh    int
	LeaseExpiresAt time.Time
	Draining       bool
	Evicted        bool
	JoinedAt       time.Time
	HeartbeatAt    time.Time
	Labels         map[string]string
}

// NewState returns the state of a key created at now with the defaults: no
// override, lower median, generation 0, L_global 0, no nodes.
func NewState(key string, now time.Time) State {
	return State{Key: KeyState{Key: key, Aggregate: AggregateLowerMedian, CreatedAt: now}}
}

// Live reports whether the node's lease runs past now. A row whose lease
// ends exactly at now is expired.
func (n NodeState) Live(now time.Time) bool { return n.LeaseExpiresAt.After(now) }

// Status is the node's operator state; evicted wins over draining.
func (n NodeState) Status() Status {
	switch {
	case n.Evicted:
		return StatusEvicted
	case n.Draining:
		return StatusDraining
	}
	return StatusActive
}

// Reserve is what the occupancy cap holds back for the node when granting
// to its peers: max(UnackedHigh, Share, Inflight). See the package doc for
// why this bounds the node's in-flight at every instant.
func (n NodeState) Reserve() int { return max(n.UnackedHigh, n.Share, n.Inflight) }

// Clone returns a deep copy of s.
func (s State) Clone() State {
	out := State{Key: s.Key}
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

// find returns the index of nodeID in s.Nodes and whether it is there.
func (s State) find(nodeID string) (int, bool) {
	return slices.BinarySearchFunc(s.Nodes, nodeID, func(n NodeState, id string) int {
		switch {
		case n.NodeID < id:
			return -1
		case n.NodeID > id:
			return 1
		}
		return 0
	})
}

// Node returns the row of nodeID, if any.
func (s State) Node(nodeID string) (NodeState, bool) {
	i, ok := s.find(nodeID)
	if !ok {
		return NodeState{}, false
	}
	return s.Nodes[i], true
}
