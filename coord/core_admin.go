package coord

import (
	"fmt"
	"slices"
	"time"
)

// Drain marks nodeID draining: the mark belongs to the node id, so it
// survives lease lapses, restarts and takeovers by any instance until
// Undrain. Every row of nodeID shows it, and a positive grant drops to 0 at
// once (a new generation). Its reserve stays until it acknowledges the 0 and
// reports its in-flight gone. Draining a draining node changes nothing. It
// returns ErrUnknownNode when the key has neither a row nor a mark for
// nodeID.
func (s State) Drain(nodeID string) (State, error) {
	if len(s.rowsOf(nodeID)) == 0 && !s.drained(nodeID) {
		return s, s.unknownNode(nodeID)
	}
	next := s.Clone()
	if !next.drained(nodeID) {
		at, _ := slices.BinarySearch(next.Drains, nodeID)
		next.Drains = slices.Insert(next.Drains, at, nodeID)
	}
	next.eachRow(nodeID, func(n *NodeState) {
		n.Draining = true
		next.revoke(n)
	})
	return next, nil
}

// Undrain removes nodeID's draining mark; its member's next heartbeat gets
// a share again. It returns ErrUnknownNode when the key has neither a row
// nor a mark for nodeID.
func (s State) Undrain(nodeID string) (State, error) {
	if len(s.rowsOf(nodeID)) == 0 && !s.drained(nodeID) {
		return s, s.unknownNode(nodeID)
	}
	next := s.Clone()
	next.Drains = slices.DeleteFunc(next.Drains, func(id string) bool { return id == nodeID })
	next.eachRow(nodeID, func(n *NodeState) { n.Draining = false })
	return next, nil
}

// Evict evicts every instance of nodeID that has a row: each grant drops
// to 0 at once (a new generation when it was positive), and the instance's
// heartbeats are answered StatusEvicted so it fences itself for good. An
// evicted row is no member: it is never renewed or granted again and its
// l_local no longer counts, but it keeps reporting its in-flight, and its
// reserve is held until its hold ends — or until it acknowledges share 0
// with nothing in flight. A new instance of nodeID may join at once.
// Eviction fences instances, it does not ban a node id. It returns
// ErrUnknownNode when the key has no row for nodeID.
func (s State) Evict(nodeID string) (State, error) {
	if len(s.rowsOf(nodeID)) == 0 {
		return s, s.unknownNode(nodeID)
	}
	next := s.Clone()
	next.eachRow(nodeID, func(n *NodeState) {
		n.Evicted = true
		next.revoke(n)
	})
	return next, nil
}

// Leave takes d, an instance's last word, at now: the instance admits
// nothing more. Its row stops being a member and reserves d.Inflight until
// now + d.Hold (nothing with nothing in flight, so its capacity is free at
// once); it stays, departed, until its old hold would have ended, so that a
// late report of the instance is answered as stale instead of joining
// afresh. It returns ErrInvalidReport for a departure out of bounds and
// ErrUnknownNode when the key has no row of that instance; an evicted
// instance whose row has gone may leave again, which changes nothing.
func (s State) Leave(d Departure, now time.Time) (State, error) {
	if err := d.Validate(); err != nil {
		return s, err
	}
	i, ok := s.find(d.NodeID, d.Instance)
	if !ok {
		if s.evicted(d.NodeID, d.Instance) {
			return s, nil
		}
		return s, fmt.Errorf("%w: %.40q (this instance) on key %.40q", ErrUnknownNode, d.NodeID, s.Key.Key)
	}
	next := s.Clone()
	n := &next.Nodes[i]
	hold := now
	if d.Inflight > 0 {
		hold = now.Add(d.Hold.Truncate(time.Microsecond))
	}
	n.Departed = true
	n.Share, n.UnackedHigh, n.Inflight, n.Demand = 0, 0, d.Inflight, 0
	n.LeaseExpiresAt = minTime(n.LeaseExpiresAt, now)
	if hold.After(n.HoldUntil) {
		n.HoldUntil = hold
	}
	return next, nil
}

// SetLimits sets the key's override: L_global is clamped to [min, max] from
// the next heartbeat on; nil removes a bound. It returns an error wrapping
// ErrInvalidOverride, naming the value, for a bound outside [1, MaxCount]
// or max < min.
func (s State) SetLimits(minLimit, maxLimit *int) (State, error) {
	if err := validateLimits(minLimit, maxLimit); err != nil {
		return s, err
	}
	next := s.Clone()
	next.Key.MinLimit, next.Key.MaxLimit = 0, 0
	if minLimit != nil {
		next.Key.MinLimit = *minLimit
	}
	if maxLimit != nil {
		next.Key.MaxLimit = *maxLimit
	}
	return next, nil
}

// LimitsChange is a partial change of a key's override: a bound whose Set
// flag is false keeps its value; one set to nil is removed.
type LimitsChange struct {
	SetMin, SetMax bool
	Min, Max       *int
}

// UpdateLimits applies c to the key's override in one step and validates
// the result: ErrInvalidOverride, naming the value, for a bound outside
// [1, MaxCount] or a max below the min.
func (s State) UpdateLimits(c LimitsChange) (State, error) {
	minLimit, maxLimit := optional(s.Key.MinLimit), optional(s.Key.MaxLimit)
	if c.SetMin {
		minLimit = c.Min
	}
	if c.SetMax {
		maxLimit = c.Max
	}
	if err := validateLimits(pick(c.SetMin, c.Min), pick(c.SetMax, c.Max)); err != nil {
		return s, err
	}
	return s.SetLimits(minLimit, maxLimit)
}

// optional is v as an optional bound: nil for 0.
func optional(v int) *int {
	if v == 0 {
		return nil
	}
	return &v
}

func pick(set bool, v *int) *int {
	if !set {
		return nil
	}
	return v
}

// SetAggregate sets how the key folds l_local values into L_global, from the
// next heartbeat on. It returns an error wrapping ErrInvalidOverride for an
// unknown aggregate.
func (s State) SetAggregate(a Aggregate) (State, error) {
	if err := validateAggregate(a); err != nil {
		return s, err
	}
	next := s.Clone()
	next.Key.Aggregate = a
	return next, nil
}

func (s State) unknownNode(nodeID string) error {
	return fmt.Errorf("%w: %.40q on key %.40q", ErrUnknownNode, nodeID, s.Key.Key)
}

// eachRow calls fn on every row of nodeID in s, which the caller owns.
func (s *State) eachRow(nodeID string, fn func(n *NodeState)) {
	lo, _ := s.find(nodeID, "")
	for i := lo; i < len(s.Nodes) && s.Nodes[i].NodeID == nodeID; i++ {
		fn(&s.Nodes[i])
	}
}

// revoke sets n's grant to 0 under a new generation of s's key unless it
// is already 0. UnackedHigh keeps the larger share the node may still
// enforce.
func (s *State) revoke(n *NodeState) {
	if n.Share == 0 {
		return
	}
	s.Key.Generation++
	n.Share = 0
	n.Epoch = s.Key.Epoch
	n.GrantedGen = s.Key.Generation
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
