package coord

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// Memory is a Coordinator and Admin that keeps every key in process memory
// and runs the pure core (State) under one mutex. It is meant for tests,
// simulations and single-process use; it is safe for concurrent use. Times
// come from its clock, truncated to microseconds like Postgres timestamps.
// The zero value is not usable; call NewMemory.
type Memory struct {
	clock Clock

	// incarnation is the database's incarnation; SetIncarnation changes it.
	incarnation string

	mu   sync.Mutex
	keys map[string]State
	// db is what the database remembers beside its keys (Database).
	db Database
}

var (
	_ Coordinator = (*Memory)(nil)
	_ Admin       = (*Memory)(nil)
)

// NewMemory returns an empty in-memory coordinator reading time from clock;
// a nil clock means the system clock.
func NewMemory(clock Clock) *Memory {
	if clock == nil {
		clock = systemClock{}
	}
	return &Memory{clock: clock, keys: map[string]State{}, incarnation: "memory", db: Database{Incarnation: "memory"}}
}

// SetIncarnation makes every later heartbeat see incarnation, as a
// database does after a failover or a restore: the database enters
// learning mode (Database.Check), and so does each key that last saw
// another incarnation or none (see State.Incarnate). It is for tests.
func (m *Memory) SetIncarnation(incarnation string) {
	m.mu.Lock()
	m.incarnation = incarnation
	m.mu.Unlock()
}

// Snapshot returns a deep copy of key's state, and whether the key exists.
func (m *Memory) Snapshot(key string) (State, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.keys[key]
	return s.Clone(), ok
}

// Restore replaces key's state with s, as a restore from a backup would:
// whatever happened since s was taken is forgotten. It is for tests.
func (m *Memory) Restore(key string, s State) {
	m.mu.Lock()
	m.keys[key] = s.Clone()
	m.mu.Unlock()
}

// SnapshotDatabase returns the database's own record (Database), and
// RestoreDatabase puts one back, as a restore from a backup (with
// Restore for the keys) would. They are for tests.
func (m *Memory) SnapshotDatabase() Database {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.db
}

// RestoreDatabase: see SnapshotDatabase.
func (m *Memory) RestoreDatabase(d Database) {
	m.mu.Lock()
	m.db = d
	m.mu.Unlock()
}

// Heartbeat runs the core on r's key, creating the key on first use. It
// returns the errors of State.Heartbeat, wrapped as "coord: heartbeat: ...".
func (m *Memory) Heartbeat(_ context.Context, r Report) (Grant, error) {
	if err := r.Validate(); err != nil {
		return Grant{}, fmt.Errorf("coord: heartbeat: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := instant(m.clock)
	s, ok := m.keys[r.Key]
	if !ok {
		s = NewState(r.Key, now)
	}
	s, db := m.incarnate(s, now, r)
	next, g, err := s.HeartbeatIn(db, r, now)
	if err != nil {
		return Grant{}, fmt.Errorf("coord: heartbeat: %w", err)
	}
	m.keys[r.Key], m.db = next, db.Record(next.Key)
	return g, nil
}

// Leave ends the instance's membership (see State.Leave). It returns
// ErrInvalidReport, ErrUnknownKey or ErrUnknownNode, wrapped.
func (m *Memory) Leave(_ context.Context, d Departure) error {
	if err := d.Validate(); err != nil {
		return fmt.Errorf("coord: leave: %w", err)
	}
	return m.update("leave", d.Key, func(s State, now time.Time) (State, error) { return s.Leave(d, now) })
}

// Keys lists every key, sorted by name.
func (m *Memory) Keys(_ context.Context) ([]KeyInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := instant(m.clock)
	out := make([]KeyInfo, 0, len(m.keys))
	for _, k := range slices.Sorted(maps.Keys(m.keys)) {
		s := m.keys[k]
		ki := keyInfo(s, now)
		ki.Unchecked = s.Unchecked(m.db, m.incarnation, now)
		out = append(out, ki)
	}
	return out, nil
}

// Nodes lists the rows of key, sorted by node id. It returns ErrUnknownKey,
// wrapped, for a key without a row.
func (m *Memory) Nodes(_ context.Context, key string) ([]NodeInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.keys[key]
	if !ok {
		return nil, fmt.Errorf("coord: nodes: %w: %.40q", ErrUnknownKey, key)
	}
	return nodeInfos(s, instant(m.clock)), nil
}

// Drain implements Admin.Drain; see State.Drain.
func (m *Memory) Drain(_ context.Context, key, nodeID string) error {
	return m.updateChecked("drain", key, func(s State) (State, error) { return s.Drain(nodeID) })
}

// Undrain implements Admin.Undrain; see State.Undrain.
func (m *Memory) Undrain(_ context.Context, key, nodeID string) error {
	return m.updateChecked("undrain", key, func(s State) (State, error) { return s.Undrain(nodeID) })
}

// Evict implements Admin.Evict; see State.Evict.
func (m *Memory) Evict(_ context.Context, key, nodeID string) error {
	return m.updateChecked("evict", key, func(s State) (State, error) { return s.Evict(nodeID) })
}

// SetLimits implements Admin.SetLimits; see State.SetLimits. The values are
// validated before the key is looked up.
func (m *Memory) SetLimits(_ context.Context, key string, minLimit, maxLimit *int) error {
	if err := validateLimits(minLimit, maxLimit); err != nil {
		return fmt.Errorf("coord: set limits: %w", err)
	}
	return m.update("set limits", key, func(s State, _ time.Time) (State, error) { return s.SetLimits(minLimit, maxLimit) })
}

// SetAggregate implements Admin.SetAggregate; see State.SetAggregate. The
// value is validated before the key is looked up.
func (m *Memory) SetAggregate(_ context.Context, key string, a Aggregate) error {
	if err := validateAggregate(a); err != nil {
		return fmt.Errorf("coord: set aggregate: %w", err)
	}
	return m.update("set aggregate", key, func(s State, _ time.Time) (State, error) { return s.SetAggregate(a) })
}

// incarnate is fleetlimit.incarnate: the database's incarnation check, then
// the key's, for the heartbeat's report r or, for an operator's action, the
// zero Report. The caller keeps the Database it returns only when its
// operation succeeds: a transaction that fails rolls both back.
func (m *Memory) incarnate(s State, now time.Time, r Report) (State, Database) {
	db := m.db.Check(m.incarnation, now)
	return s.Incarnate(db, now, r), db
}

// updateChecked runs fn on key's state after the incarnation checks, as the
// database's drain, undrain and evict do.
func (m *Memory) updateChecked(op, key string, fn func(s State) (State, error)) error {
	return m.update(op, key, func(s State, now time.Time) (State, error) {
		s, db := m.incarnate(s, now, Report{})
		next, err := fn(s)
		if err == nil {
			m.db = db
		}
		return next, err
	})
}

func (m *Memory) update(op, key string, fn func(s State, now time.Time) (State, error)) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.keys[key]
	if !ok {
		return fmt.Errorf("coord: %s: %w: %.40q", op, ErrUnknownKey, key)
	}
	next, err := fn(s, instant(m.clock))
	if err != nil {
		return fmt.Errorf("coord: %s: %w", op, err)
	}
	m.keys[key] = next
	return nil
}

// SetRates implements Admin.SetRates; see State.SetRates. The values are
// validated before the key is looked up.
func (m *Memory) SetRates(_ context.Context, key string, c RatesChange) (Rates, error) {
	if err := c.validate(); err != nil {
		return Rates{}, fmt.Errorf("coord: set rates: %w", err)
	}
	var out Rates
	err := m.update("set rates", key, func(s State, _ time.Time) (State, error) {
		next, err := s.SetRates(c)
		out = next.Key.RateLimit
		return next, err
	})
	if err != nil {
		return Rates{}, err
	}
	return out, nil
}

// Relearn implements Admin.Relearn; see State.Relearn.
func (m *Memory) Relearn(_ context.Context, key string) (time.Time, error) {
	var until time.Time
	err := m.update("relearn", key, func(s State, now time.Time) (State, error) {
		next := s.Relearn(now)
		until = next.Key.LearningUntil
		return next, nil
	})
	return until, err
}

// UpdateLimits implements Admin.UpdateLimits; see State.UpdateLimits.
func (m *Memory) UpdateLimits(_ context.Context, key string, c LimitsChange) (minLimit, maxLimit *int, err error) {
	if err := validateLimits(pick(c.SetMin, c.Min), pick(c.SetMax, c.Max)); err != nil {
		return nil, nil, fmt.Errorf("coord: update limits: %w", err)
	}
	err = m.update("update limits", key, func(s State, _ time.Time) (State, error) {
		next, err := s.UpdateLimits(c)
		minLimit, maxLimit = optional(next.Key.MinLimit), optional(next.Key.MaxLimit)
		return next, err
	})
	if err != nil {
		return nil, nil, err
	}
	return minLimit, maxLimit, nil
}

// CreateKey implements Admin.CreateKey.
func (m *Memory) CreateKey(_ context.Context, key string, minLimit, maxLimit *int, opts ...KeyOption) error {
	o, err := newKeyOptions(key, minLimit, maxLimit, opts)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.keys[key]; ok {
		return fmt.Errorf("coord: create key: %w: %.40q", ErrKeyExists, key)
	}
	s, _ := NewState(key, instant(m.clock)).SetLimits(minLimit, maxLimit)
	s, _ = s.SetRates(o.ratesChange())
	m.keys[key] = s
	return nil
}

// DeleteKey implements Admin.DeleteKey.
func (m *Memory) DeleteKey(_ context.Context, key string, force bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.keys[key]
	if !ok {
		return fmt.Errorf("coord: delete key: %w: %.40q", ErrUnknownKey, key)
	}
	now := instant(m.clock)
	checked, db := m.incarnate(s, now, Report{})
	held, reserve, rates, until := 0, 0, "", time.Time{}
	for _, n := range s.Nodes {
		if ok, u := n.heldBack(now); ok {
			held, reserve = held+1, reserve+n.Reserve(now)
			if !n.RateReserve(now).IsZero() {
				rates = " and a rate reserve"
			}
			if u.After(until) {
				until = u
			}
		}
	}
	switch live := keyInfo(s, now).LiveNodes; {
	case force:
	case s.Key.Incarnation != checked.Key.Incarnation && (s.Key.Incarnation != "" || checked.Key.learning(now)):
		// The check a refusal rolls back: it stays refused until a
		// heartbeat, a drain or an eviction records it.
		return fmt.Errorf("coord: delete key: %w: key %.40q has not been checked since the database's incarnation changed",
			ErrLearning, key)
	case checked.Key.learning(now):
		return fmt.Errorf("coord: delete key: %w: key %.40q is in learning mode until %s", ErrLearning,
			key, checked.Key.LearningUntil.UTC().Format("2006-01-02T15:04:05Z"))
	case live > 0:
		return fmt.Errorf("coord: delete key: %w: %s on key %.40q", ErrLiveNodes, count(live, "live node", "live nodes"), key)
	case held > 0:
		return fmt.Errorf("coord: delete key: %w: %s %s%s on key %.40q until %s", ErrHeldCapacity,
			count(held, "row holds", "rows hold"), count(reserve, "slot", "slots"), rates, key, until.UTC().Format("2006-01-02T15:04:05Z"))
	}
	delete(m.keys, key)
	m.db = db
	return nil
}

// count returns n with the singular or plural words, as the database's
// messages put it.
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
