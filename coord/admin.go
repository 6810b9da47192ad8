package coord

import (
	"context"
	"time"
)

// Admin is what an operator (fleetctl) does to a coordinator. Both Memory
// and Postgres implement it with the same semantics; implementations are
// safe for concurrent use, and every change is serialized with the key's
// heartbeats.
type Admin interface {
	// Keys lists every key, sorted by name (byte order).
	Keys(ctx context.Context) ([]KeyInfo, error)
	// Nodes lists every row of key, expired rows not yet deleted included,
	// sorted by node id (byte order). It returns ErrUnknownKey for a key
	// without a row.
	Nodes(ctx context.Context, key string) ([]NodeInfo, error)
	// Drain sets the node's grant to 0 until Undrain (see State.Drain).
	Drain(ctx context.Context, key, nodeID string) error
	// Undrain lets a drained node get a share again.
	Undrain(ctx context.Context, key, nodeID string) error
	// Evict fences the node; its reserve is held until its lease runs out
	// (see State.Evict).
	Evict(ctx context.Context, key, nodeID string) error
	// SetLimits sets the key's min/max override of L_global; nil removes a
	// bound. It takes effect at the key's next heartbeat.
	SetLimits(ctx context.Context, key string, minLimit, maxLimit *int) error
	// SetAggregate sets how the key folds l_local values into L_global. It
	// takes effect at the key's next heartbeat.
	SetAggregate(ctx context.Context, key string, a Aggregate) error
}

// KeyInfo describes one key for an operator.
type KeyInfo struct {
	Key     string
	LGlobal int
	// MinLimit and MaxLimit are the operator override; nil is no bound.
	MinLimit, MaxLimit *int
	Aggregate          Aggregate
	Generation         int64
	CreatedAt          time.Time
	// LiveNodes, SumShare and SumInflight cover the rows whose lease has not
	// run out.
	LiveNodes   int
	SumShare    int
	SumInflight int
}

// NodeInfo describes one node row for an operator: every column, plus the
// lease remaining and heartbeat age at the time of the query.
type NodeInfo struct {
	NodeState
	Key string
	// LeaseRemaining is lease_expires_at minus now; 0 or negative once the
	// lease has run out.
	LeaseRemaining time.Duration
	// HeartbeatAge is now minus heartbeat_at.
	HeartbeatAge time.Duration
}

// keyInfo summarizes s at now.
func keyInfo(s State, now time.Time) KeyInfo {
	ki := KeyInfo{
		Key:        s.Key.Key,
		LGlobal:    s.Key.LGlobal,
		Aggregate:  s.Key.Aggregate,
		Generation: s.Key.Generation,
		CreatedAt:  s.Key.CreatedAt,
	}
	if s.Key.MinLimit > 0 {
		v := s.Key.MinLimit
		ki.MinLimit = &v
	}
	if s.Key.MaxLimit > 0 {
		v := s.Key.MaxLimit
		ki.MaxLimit = &v
	}
	for _, n := range s.Nodes {
		if n.Live(now) {
			ki.LiveNodes++
			ki.SumShare += n.Share
			ki.SumInflight += n.Inflight
		}
	}
	return ki
}

// nodeInfos describes every row of s at now.
func nodeInfos(s State, now time.Time) []NodeInfo {
	out := make([]NodeInfo, len(s.Nodes))
	for i, n := range s.Clone().Nodes {
		out[i] = NodeInfo{
			NodeState:      n,
			Key:            s.Key.Key,
			LeaseRemaining: n.LeaseExpiresAt.Sub(now),
			HeartbeatAge:   now.Sub(n.HeartbeatAt),
		}
	}
	return out
}
