package coord

import (
	"fmt"
	"slices"
)

// Drain marks nodeID draining: its grant drops to 0 at once (a new
// generation when its share was positive) and its heartbeats keep getting 0
// until Undrain. Its reserve stays until it acknowledges the 0 and reports
// its in-flight gone. Draining a draining node changes nothing. It returns
// ErrUnknownNode when the key has no row for nodeID.
func (s State) Drain(nodeID string) (State, error) {
	return s.withNode(nodeID, func(n *NodeState, gen *int64) {
		n.Draining = true
		revoke(n, gen)
	})
}

// Undrain clears nodeID's draining mark; its next heartbeat gets a share
// again. It returns ErrUnknownNode when the key has no row for nodeID.
func (s State) Undrain(nodeID string) (State, error) {
	return s.withNode(nodeID, func(n *NodeState, _ *int64) { n.Draining = false })
}

// Evict marks nodeID evicted: its grant drops to 0 at once (a new generation
// when its share was positive), its next heartbeat is answered with
// StatusEvicted so the node fences itself, and its heartbeats no longer
// renew its lease or change its row. Its reserve is therefore held until
// the lease runs out, never freed earlier. After that the row is deleted
// like any expired row, and a process that heartbeats again joins afresh:
// eviction fences a run, it does not ban a node id. It returns
// ErrUnknownNode when the key has no row for nodeID.
func (s State) Evict(nodeID string) (State, error) {
	return s.withNode(nodeID, func(n *NodeState, gen *int64) {
		n.Evicted = true
		revoke(n, gen)
	})
}

// Leave deletes nodeID's row, freeing its reserve at once. It returns
// ErrUnknownNode when there is no row and ErrNodeIDInUse when the row
// belongs to another instance (expired or not).
func (s State) Leave(nodeID, instance string) (State, error) {
	i, ok := s.find(nodeID)
	if !ok {
		return s, fmt.Errorf("%w: %.40q on key %.40q", ErrUnknownNode, nodeID, s.Key.Key)
	}
	if held := s.Nodes[i].Instance; held != instance {
		return s, fmt.Errorf("%w: node %.40q is held by instance %.40q, not %.40q", ErrNodeIDInUse, nodeID, held, instance)
	}
	next := s.Clone()
	next.Nodes = slices.Delete(next.Nodes, i, i+1)
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

func (s State) withNode(nodeID string, fn func(n *NodeState, gen *int64)) (State, error) {
	i, ok := s.find(nodeID)
	if !ok {
		return s, fmt.Errorf("%w: %.40q on key %.40q", ErrUnknownNode, nodeID, s.Key.Key)
	}
	next := s.Clone()
	fn(&next.Nodes[i], &next.Key.Generation)
	return next, nil
}

// revoke sets n's grant to 0 under a new generation unless it is already 0.
// UnackedHigh keeps the larger share the node may still enforce.
func revoke(n *NodeState, gen *int64) {
	if n.Share == 0 {
		return
	}
	*gen++
	n.Share = 0
	n.GrantedGen = *gen
}
