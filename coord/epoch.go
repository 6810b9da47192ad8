package coord

import "time"

// lostState reports whether r proves that the database forgot grants it had
// issued. A report that applied no grant yet (epoch 0) proves nothing.
// Otherwise it is proof when r applied a grant of an epoch newer than the
// key's, or of the key's epoch with a generation beyond the key's or beyond
// the newest its row was granted; and, when the key has no row for r's
// instance, when the key never issued a grant (the whole key was lost) or r
// claims requests in flight. row is r's own row, or nil.
//
// The last case can also be a report so late that its row's hold has ended
// and the row was deleted; treating it as a loss costs availability
// (learning mode), never safety.
func (s State) lostState(r Report, row *NodeState) bool {
	switch {
	case r.Epoch == 0:
		return false
	case r.Epoch > s.Key.Epoch:
		return true
	case r.Epoch == s.Key.Epoch && r.AppliedGen > s.Key.Generation:
		return true
	case row == nil:
		return r.Inflight > 0 || s.Key.Generation == 0
	}
	return row.Epoch == r.Epoch && r.AppliedGen > row.GrantedGen
}

// Database is what the database remembers beside its keys (for Postgres,
// table fleetlimit.database_state): the incarnation it last saw, the
// learning mode it entered when that changed, and the largest lease and
// request bound any key recorded, which never shrink (a key's delete
// keeps them). A loss restores it as it was, with the incarnation of
// before: so a key the loss took whole, or whose every heartbeat it took,
// still learns that the database lost state.
type Database struct {
	Incarnation                     string
	LearningUntil                   time.Time
	MaxLeaseTTL, MaxRequestDuration time.Duration
}

// Check is the database's own incarnation check at now (the first half of
// fleetlimit.incarnate). When incarnation is not the one d recorded, the
// database may have lost committed state: it records incarnation and
// enters learning mode until every lease and request any key recorded may
// have run out from now. A history without a heartbeat has no grant to
// forget, and no learning mode. An empty incarnation (a coordinator that
// cannot tell) changes nothing.
func (d Database) Check(incarnation string, now time.Time) Database {
	if incarnation == "" || incarnation == d.Incarnation {
		return d
	}
	d.Incarnation = incarnation
	if until := now.Add(d.MaxLeaseTTL + d.MaxRequestDuration); until.After(d.LearningUntil) {
		d.LearningUntil = until
	}
	return d
}

// Record keeps d's maxima at least k's.
func (d Database) Record(k KeyState) Database {
	d.MaxLeaseTTL = max(d.MaxLeaseTTL, k.MaxLeaseTTL)
	d.MaxRequestDuration = max(d.MaxRequestDuration, k.MaxRequestDuration)
	return d
}

// Incarnate checks the key against the database's incarnation, as d has
// it after Check, before a heartbeat or an operator's action at now. A key
// that last saw another incarnation may have lost committed state (a
// failover to an asynchronous replica, a restore), so it enters learning
// mode. The key's first check records the incarnation and takes the
// database's learning mode, with a new epoch: a key created, or never
// checked, since the database lost state may be one whose grants were lost
// with it. An empty incarnation changes nothing.
func (s State) Incarnate(d Database, now time.Time) State {
	switch {
	case d.Incarnation == "" || d.Incarnation == s.Key.Incarnation:
		return s
	case s.Key.Incarnation == "":
		next := s.Clone()
		next.Key.Incarnation = d.Incarnation
		if d.LearningUntil.After(now) {
			next.Key.Epoch = max(now.UnixMicro(), next.Key.Epoch+1)
			if d.LearningUntil.After(next.Key.LearningUntil) {
				next.Key.LearningUntil = d.LearningUntil
			}
		}
		return next
	}
	next := s.learn(now, Report{})
	next.Key.Incarnation = d.Incarnation
	return next
}

// learn puts the key in learning mode at now, after evidence that the
// database lost state; r is the report that brought the evidence (its
// lease and request bound count among the key's), or the zero Report.
//
// The epoch moves past every epoch the lost state can have issued (they
// were all detection times before now, unless the clock stepped back), so
// every grant from now on outranks every grant of before the loss. Until
// every lease and request of before the loss has run out — the key's
// largest lease plus its largest request bound from now — each node is
// granted at most the in-flight it reports: it may keep what it proves it
// holds, and nobody gets capacity that a forgotten grant may still cover.
func (s State) learn(now time.Time, r Report) State {
	next := s.Clone()
	k := &next.Key
	k.Epoch = max(now.UnixMicro(), k.Epoch+1)
	ttl := max(k.MaxLeaseTTL, leaseTTL(r))
	bound := max(k.MaxRequestDuration, requestBound(r))
	if until := now.Add(ttl + bound); until.After(k.LearningUntil) {
		k.LearningUntil = until
	}
	return next
}

// learning reports whether the key is in learning mode at now.
func (k KeyState) learning(now time.Time) bool { return k.LearningUntil.After(now) }

// Relearn puts the key in learning mode at now, as a detected loss does:
// for an operator who restored the key's tables in a way the database's
// incarnation cannot show (rows rewritten in place, a data-only restore).
func (s State) Relearn(now time.Time) State { return s.learn(now, Report{}) }
