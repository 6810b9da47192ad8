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
	// Drain sets the node id's grant to 0 until Undrain, across lapses and
	// restarts (see State.Drain).
	Drain(ctx context.Context, key, nodeID string) error
	// Undrain lets a drained node id get a share again.
	Undrain(ctx context.Context, key, nodeID string) error
	// Evict fences every instance of the node id for good; their reserve
	// is held until their requests must have ended, and a new instance may
	// join at once (see State.Evict).
	Evict(ctx context.Context, key, nodeID string) error
	// SetLimits sets the key's min/max override of L_global; nil removes a
	// bound. It takes effect at the key's next heartbeat.
	SetLimits(ctx context.Context, key string, minLimit, maxLimit *int) error
	// SetAggregate sets how the key folds l_local values into L_global. It
	// takes effect at the key's next heartbeat.
	SetAggregate(ctx context.Context, key string, a Aggregate) error
	// Relearn puts the key in learning mode now and returns when it ends
	// (see State.Relearn). It returns ErrUnknownKey for a key without a
	// row.
	Relearn(ctx context.Context, key string) (time.Time, error)
	// UpdateLimits changes the key's override in one step (see
	// State.UpdateLimits) and returns the new bounds; two concurrent
	// changes of different bounds both stay. It returns ErrUnknownKey or
	// ErrInvalidOverride.
	UpdateLimits(ctx context.Context, key string, c LimitsChange) (minLimit, maxLimit *int, err error)
	// CreateKey creates the key with an override (nil: no bound), so it
	// can be capped before any node joins, and with what opts add
	// (WithRates), all in one step: on any error nothing is created. It
	// returns ErrKeyExists, or ErrInvalidOverride for a bad name, bound or
	// rate.
	CreateKey(ctx context.Context, key string, minLimit, maxLimit *int, opts ...KeyOption) error
	// SetRates changes the key's operator rates per minute in one step
	// (see State.SetRates) and returns them: a key's rate when its nodes
	// learn none, and a cap on what they learn. It returns ErrUnknownKey
	// or ErrInvalidOverride. It takes effect at the key's next heartbeat.
	SetRates(ctx context.Context, key string, c RatesChange) (Rates, error)
	// DeleteKey deletes the key and all its rows: nodes, drain marks,
	// evictions. Without force it returns ErrLearning while the key's rows
	// may not show what its nodes hold (the key last heard from them under
	// another incarnation of the database, or it is in learning mode),
	// ErrLiveNodes while the key has live members, and ErrHeldCapacity
	// while a row that is no member still holds back capacity
	// (KeyInfo.HeldRows). It returns ErrUnknownKey for a key without a
	// row.
	DeleteKey(ctx context.Context, key string, force bool) error
}

// KeyInfo describes one key for an operator.
type KeyInfo struct {
	Key     string
	LGlobal int
	// MinLimit and MaxLimit are the operator override; nil is no bound.
	MinLimit, MaxLimit *int
	Aggregate          Aggregate
	Epoch              int64
	Generation         int64
	// LearningUntil ends the key's learning mode; zero when it never
	// entered it (see KeyState.LearningUntil). Learning is whether it is in
	// learning mode at the time of the query, by the coordinator's clock.
	LearningUntil time.Time
	Learning      bool
	// Unchecked is true when the key's next heartbeat puts it in learning
	// mode, and its row does not show it yet: it recorded another
	// incarnation of the database than the current one (a failover, a
	// restore or a server restart since its last check), or never
	// recorded one while the database is, or at its next check will be, in
	// learning mode (see State.Unchecked). A heartbeat, or a drain,
	// undrain or eviction of one of its nodes, checks it; DeleteKey
	// refuses it (ErrLearning) until then. Always false where the
	// coordinator cannot tell (see Postgres.Keys: an older schema, a role
	// given read rights by hand, a server in recovery).
	Unchecked bool
	// Drains are the node ids an operator drained, sorted.
	Drains    []string
	CreatedAt time.Time
	// LiveNodes, SumShare and SumInflight cover the members (see
	// NodeState.Member).
	LiveNodes   int
	SumShare    int
	SumInflight int
	// HeldRows counts the rows that are no members but still hold back
	// capacity from the others — a reserve above 0 until their hold
	// ends, a rate reserve while an evicted instance's lease runs — for
	// the requests of expired, departed or evicted instances that may
	// still run; HeldReserve adds up their reserves (slots).
	HeldRows    int
	HeldReserve int
	// Evictions counts the evicted instances whose rows have gone; their
	// reports are answered "evicted" for as long as the key exists.
	Evictions int
	// RateLimit is the operator's rate per minute (0: none), Rate the
	// key's rate as the newest heartbeat computed it, SumRateShare the
	// members' rate shares added up, and SumRateUsed what they reported
	// sending in the minute before their last heartbeats (NodeState.RateUsed).
	RateLimit, Rate, SumRateShare, SumRateUsed Rates
}

// NodeInfo describes one node row for an operator: every column, plus what
// they mean at the time of the query.
type NodeInfo struct {
	NodeState
	Key string
	// Status is the row's state at the time of the query.
	Status Status
	// LeaseRemaining is lease_expires_at minus now; 0 or negative once the
	// lease has run out.
	LeaseRemaining time.Duration
	// HoldRemaining is hold_until minus now: how long the row stays. Its
	// Reserve, if any, counts until then; a row that reserves 0 stays only
	// to answer its instance's late reports as stale.
	HoldRemaining time.Duration
	// Reserve is what the row holds back from the others now, and
	// RateReserve the same for rates.
	Reserve     int
	RateReserve Rates
	// HeartbeatAge is now minus heartbeat_at.
	HeartbeatAge time.Duration
}

// keyInfo summarizes s at now.
func keyInfo(s State, now time.Time) KeyInfo {
	ki := KeyInfo{
		Key:           s.Key.Key,
		LGlobal:       s.Key.LGlobal,
		Aggregate:     s.Key.Aggregate,
		Epoch:         s.Key.Epoch,
		Generation:    s.Key.Generation,
		LearningUntil: s.Key.LearningUntil,
		Learning:      s.Key.learning(now),
		Drains:        append([]string{}, s.Drains...),
		Evictions:     len(s.Evictions),
		CreatedAt:     s.Key.CreatedAt,
		RateLimit:     s.Key.RateLimit,
		Rate:          s.Key.Rate,
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
		switch {
		case n.Member(now):
			ki.LiveNodes++
			ki.SumShare += n.Share
			ki.SumInflight += n.Inflight
			ki.SumRateShare.Requests += n.RateShare.Requests
			ki.SumRateShare.Tokens += n.RateShare.Tokens
			ki.SumRateUsed.Requests += n.RateUsed.Requests
			ki.SumRateUsed.Tokens += n.RateUsed.Tokens
		default:
			if held, _ := n.heldBack(now); held {
				ki.HeldRows++
				ki.HeldReserve += n.Reserve(now)
			}
		}
	}
	return ki
}

// nodeInfos describes every row of s at now.
func nodeInfos(s State, now time.Time) []NodeInfo {
	out := make([]NodeInfo, len(s.Nodes))
	for i, n := range s.Clone().Nodes {
		out[i] = describe(s.Key.Key, n, now)
	}
	return out
}

// describe is row n of key as an operator sees it at now.
func describe(key string, n NodeState, now time.Time) NodeInfo {
	return NodeInfo{
		NodeState:      n,
		Key:            key,
		Status:         n.Status(now),
		LeaseRemaining: n.LeaseExpiresAt.Sub(now),
		HoldRemaining:  n.HoldUntil.Sub(now),
		Reserve:        n.Reserve(now),
		RateReserve:    n.RateReserve(now),
		HeartbeatAge:   now.Sub(n.HeartbeatAt),
	}
}
