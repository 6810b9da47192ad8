package coord

import (
	"math"
	"time"
)

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
// table fleetlimit.database_state): the incarnation it last saw, when it
// saw that incarnation change with a heartbeat on record (LearningSince;
// zero if it never did) and the learning mode it entered then, and the
// largest lease and request bound any key recorded, which never shrink (a
// key's delete keeps them). A loss restores it as it was, with the
// incarnation of before: so a key the loss took whole, or whose every
// heartbeat it took, still learns that the database lost state.
type Database struct {
	Incarnation                     string
	LearningSince, LearningUntil    time.Time
	MaxLeaseTTL, MaxRequestDuration time.Duration
}

// Check is the database's own incarnation check at now (the first half of
// fleetlimit.incarnate). When incarnation is not the one d recorded, the
// database may have lost committed state: it records incarnation and
// enters learning mode until every lease and request any key recorded may
// have run out from now; if it has recorded a heartbeat (MaxLeaseTTL > 0)
// it also records now as LearningSince, from which a key's first check
// may learn for longer, by its report's own lease and request bound (see
// State.Incarnate). A database that has recorded no heartbeat has, by its
// record, no grant to forget, and no learning mode. An empty incarnation
// (a coordinator that cannot tell) changes nothing.
func (d Database) Check(incarnation string, now time.Time) Database {
	if incarnation == "" || incarnation == d.Incarnation {
		return d
	}
	d.Incarnation, d.LearningSince = incarnation, time.Time{}
	if d.MaxLeaseTTL > 0 {
		d.LearningSince = now
	}
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
// it after Check, before a heartbeat or an operator's action at now; r is
// the heartbeat's report, or the zero Report for an operator's action. A
// key that last saw another incarnation may have lost committed state (a
// failover to an asynchronous replica, a restore), so it enters learning
// mode, with r's lease and request bound among the key's (see learn). The
// key's first check records the incarnation and takes the database's
// learning mode, with a new epoch: a key created, or never checked, since
// the database lost state may be one whose grants were lost with it. That
// learning mode lasts at least r's lease plus its request bound from
// d.LearningSince, when the database saw the change: a grant the loss took
// was issued before then, and ran out within that time where the key's
// nodes share their settings, even when the lost history had raised the
// bounds the database recorded. A loss back to before the database's
// first heartbeat cannot be told from a new database, and learns nothing
// (see Check). An empty incarnation changes nothing.
func (s State) Incarnate(d Database, now time.Time, r Report) State {
	switch {
	case d.Incarnation == "" || d.Incarnation == s.Key.Incarnation:
		return s
	case s.Key.Incarnation == "":
		next := s.Clone()
		next.Key.Incarnation = d.Incarnation
		until := d.LearningUntil
		if !d.LearningSince.IsZero() {
			if own := d.LearningSince.Add(leaseTTL(r) + requestBound(r)); own.After(until) {
				until = own
			}
		}
		if until.After(now) {
			next.Key.Epoch = max(now.UnixMicro(), next.Key.Epoch+1)
			if until.After(next.Key.LearningUntil) {
				next.Key.LearningUntil = until
			}
		}
		return next
	}
	next := s.learn(now, r)
	next.Key.Incarnation = d.Incarnation
	return next
}

// Unchecked reports whether the key's next heartbeat at now, whatever its
// report, puts it in learning mode because of the database's incarnation
// (after Check on d, then Incarnate): the key recorded another
// incarnation, or none while the database's check leaves the database in
// learning mode — d records another incarnation and a lease or request
// bound, or is in learning mode already. A key that recorded none may
// also learn for its first heartbeat's own lease and request bound from
// d.LearningSince; that depends on the report, and Unchecked leaves it
// out. An empty incarnation (a coordinator that cannot tell) changes
// nothing in Check, so the key is compared with d's own.
func (s State) Unchecked(d Database, incarnation string, now time.Time) bool {
	d = d.Check(incarnation, now)
	switch {
	case d.Incarnation == "" || d.Incarnation == s.Key.Incarnation:
		return false
	case s.Key.Incarnation == "":
		return d.LearningUntil.After(now)
	default:
		return true
	}
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

// learnFrom is learn for a report r that proved the loss (see lostState):
// the new epoch also passes r's, which the lost state issued and which a
// server whose clock runs behind the one that issued it may not reach;
// otherwise r's node, still reporting that epoch until it applies its
// new grant, would prove a loss again at its next report. An epoch of
// math.MaxInt64 has none past it.
func (s State) learnFrom(now time.Time, r Report) State {
	next := s.learn(now, r)
	if r.Epoch >= next.Key.Epoch && r.Epoch < math.MaxInt64 {
		next.Key.Epoch = r.Epoch + 1
	}
	return next
}

// learning reports whether the key is in learning mode at now.
func (k KeyState) learning(now time.Time) bool { return k.LearningUntil.After(now) }

// rateLearning reports whether a key in learning mode at now still caps
// rate shares, lease being the longest lease the key or its database
// recorded. A rate is spent when a request is sent, and a node sends
// nothing once its lease has run out (it fences itself first), so a rate
// share the lost state granted ends with its lease: the cap lasts one
// lease from the key's epoch, which the loss moved to its detection time
// or later (see learn and Incarnate), and no request bound. Compared in
// microseconds, as epochs are, without overflow for any epoch.
func (k KeyState) rateLearning(lease time.Duration, now time.Time) bool {
	return now.UnixMicro()-lease.Microseconds() < k.Epoch
}

// Relearn puts the key in learning mode at now, as a detected loss does:
// for an operator who restored the key's tables in a way the database's
// incarnation cannot show (rows rewritten in place, a data-only restore).
func (s State) Relearn(now time.Time) State { return s.learn(now, Report{}) }
