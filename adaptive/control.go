package adaptive

import (
	"fmt"
	"math"
	"time"
)

// SetCeiling caps the effective limit at n, on top of the estimate: the
// limit becomes min(n − cut, floor(estimate)). A drop of a request
// admitted since the last backoff that comes while n − cut binds the
// limit and PaceGrowth holds the in-flight below it, all the paced room
// in use (a climb to a raised share or a give-back), first raises cut to
// n less what was in flight when the drop is reported, the refused
// request included: each slot more of the climb would be refused too.
// Every drop then adds one to cut at once, or two for a request admitted
// after the last backoff and refused less than rttNoload after it (a
// request sent after the cut into an overload already backed off from),
// so a node whose share is too large for the upstream stops sending its
// excess before its next share arrives; k requests sent together and
// refused together, the first of them backing off, cut k slots. 5 round
// trips without a drop (the wait) give one slot back; a give-back holds
// when 5 more pass without a drop (or, if the last refusal of a request
// sent while slots were coming back, no more than 64 round trips after
// they stopped, came more than 4 round trips after the request, one more
// than it took, up to 64, until the last give-back holds or a new ceiling
// leaves no cut), and then the next comes, twice as many as the one
// before (up to 32; one again after a drop or a lower ceiling), so a
// burst of refusals that cut most of a share is undone in a few waits;
// above the cut that a refused give-back last left, a give-back stops one
// slot short of it, and that cut is tried one slot at a time. The wait
// doubles each time a give-back is refused before it held (up to 64 round
// trips), and is 5 again once a give-back to the cut last refused, or
// below it, holds, and at a drop after the last give-back held. The cut
// never takes the last slot of a non-zero ceiling, and a new ceiling
// lower than the last absorbs as much of the cut as it lowers and sets
// the wait to 5 again, counted from the last drop. A higher ceiling
// raises the room, n − cut, no further than one slot under the weight
// that was in flight at the last drop (the refused request included),
// and a give-back takes the room past that level one slot at a time: a
// fleet node's share rises when the fleet's limit does, whatever the
// upstream did, and the upstream had just refused that level. The level
// is forgotten once a give-back to it holds, and — giving back at once
// the slots the higher ceilings were held back by, since with requests
// longer than the heartbeat no round trip would — after 5 ProbeTicks with
// no drop between them, at a ceiling of 0 or one set after the last
// expired, and at ClearCeiling; a drop while the ceiling is 0 sets none.
// With a fleet limit set (SetFleetLimit), a give-back that is due waits
// for the next ProbeTick, or for 20 round trips without one: the
// upstream answers the fleet's requests together, so the nodes' round
// trips end together, and give-backs made there would be refused
// together; the nodes' grants come at their own heartbeats' phases. It
// also takes the room no further than the share's part of one slot under
// the fleet's in-flight when the request of the last drop was admitted,
// and past that part returns one slot at the node's turn (see
// SetFleetLimit). The
// ceiling is also
// the hard bound (up to MaxLimit): no admission takes the weight in
// flight above it, not even that of a request admitted alone above the
// limit, and a waiter heavier than it waits without blocking the others
// (see the package documentation, Admission). 0 admits nothing and a
// negative n counts as 0. Lowering the ceiling never revokes leases
// already admitted; raising it hands freed slots to queued waiters at
// once. There is no ceiling until the first call. SetCeiling removes any
// deadline set by SetCeilingUntil. Safe for concurrent use.
func (l *Limiter) SetCeiling(n int) { l.SetCeilingUntil(n, time.Time{}) }

// SetCeilingUntil sets the ceiling to n until deadline and to 0 from then
// on, as SetCeiling does; a zero deadline never expires. A fleet node sets
// it to its share and its fence deadline: every admission — TryAcquire,
// Acquire, and a slot handed to a queued waiter when a lease settles —
// compares the deadline with the limiter's clock itself, so a process that
// resumes after a freeze admits nothing on an expired grant, however late
// its timers run. The comparison uses now's monotonic reading and, when
// both times have one, the wall clock as well; either having passed the
// deadline expires the ceiling.
func (l *Limiter) SetCeilingUntil(n int, deadline time.Time) {
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	n = max(n, 0)
	l.pace(now)
	if n == 0 || l.ceilingExpired(now) {
		// Nothing admitted: the level refused before says nothing
		// of the next share.
		l.forgetRefused()
	}
	switch {
	case l.hasCeiling && n < l.ceiling:
		l.cut = max(l.cut-(l.ceiling-n), 0)           // a lower ceiling absorbs the cut
		l.absorbed = max(l.absorbed-(l.ceiling-n), 0) // what higher ceilings added first
		l.restartCutRecovery()
	case l.hasCeiling && n > l.ceiling && l.refused > 0:
		// A higher ceiling takes the room no further than one slot
		// under the level last refused; the rest comes back by
		// give-backs.
		room := min(n, max(l.ceiling-l.cut, l.refused-1, 1))
		if l.cutHit >= 0 {
			l.cutHit += n - l.ceiling // the room it was refused at stays where it was
		}
		if cut := max(l.cut, n-room); cut > l.cut {
			l.absorbed += cut - l.cut
			l.cut = cut
		}
	}
	l.absorbed = min(l.absorbed, l.cut)
	l.ceiling, l.hasCeiling, l.ceilingUntil = n, true, deadline
	l.pace(now)
	l.dispatch(now)
	l.mu.Unlock()
}

// ClearCeiling removes the ceiling set by SetCeiling, so the limit is
// floor(estimate) again, and hands freed slots to queued waiters.
func (l *Limiter) ClearCeiling() {
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	l.pace(now)
	l.ceiling, l.hasCeiling, l.ceilingUntil = 0, false, time.Time{}
	l.cut, l.refused, l.absorbed, l.refusedLoad = 0, 0, 0, 0
	l.restartCutRecovery()
	l.pace(now)
	l.dispatch(now)
	l.mu.Unlock()
}

// SetFleetLimit tells the limiter the limit of the whole fleet that its
// ceiling is a share of (a fleet node's L_global), as of the ceiling's last
// update. While drops have cut slots off the ceiling (see SetCeiling), a
// drop's backoff then also takes the estimate down to at most n less the
// slots cut, but not below half of what the backoff alone leaves: the
// refusal came with the upstream full, and with at most the fleet's
// limit in flight less the slots of this node's share that the cut
// took (not reached by a climb at the refusal, or refused), since no
// node admits past
// its share; so the fleet's limit, and this node's estimate of the
// whole upstream, was too high by at least the cut. Backoffs alone would
// take one BackoffRatio per round trip to get there. Short of that
// bound, a drop's backoff takes the estimate no lower than its ratio ×
// the fleet's in-flight when the refused request was admitted (its own
// in-flight, the refused request included, plus the peers' from
// SetPeerInflight), and leaves an estimate already at or below that
// where it is: the refusal says that load was too much, not that the
// upstream holds less than a backoff from it. A node that joins an
// upstream its peers fill meets nothing but refusals, and before its
// first round trip nothing spaces its backoffs; without the floor its
// estimate fell to MinLimit within a heartbeat and, in the fleet's lower
// median, took L_global with it. A queued request
// heavier than n fails with an error wrapping ErrTooHeavy: no share of the
// fleet's limit can hold it, and that limit grows only with the load the
// fleet admits. With n > 0 the utilization guard (see UtilizationThreshold)
// also holds to at least 0.9 from a drop until 5 ProbeTicks have passed
// without one: near a capacity the fleet keeps hitting, the estimate, and
// with it the fleet's limit and the shares, stays within a ninth of the
// load the upstream served, so slots that several nodes give back at once
// overshoot it by little; once the refusals stop that long (a capacity
// that rose), the configured threshold lets the climb run as fast as
// before. The count is of ProbeTick calls, which fleet.Node makes once
// per grant: without them the guard stays at 0.9
// after a drop. This holds under every law. A give-back (see SetCeiling)
// then also takes the room left under the ceiling no further than the
// ceiling's part (ceiling ÷ max(n, ceiling)) of one slot under the
// fleet's in-flight when the request of the last drop under the ceiling
// was admitted, and past that part returns one slot at every
// ⌈max(n, ceiling) ÷ ceiling⌉-th give-back due, the step starting again
// from one slot: give-backs that double as they hold sent several slots at once
// into an upstream the fleet had just filled, with the other nodes'
// give-backs on top (at C = 20, 1.2·C in flight), and one slot each,
// judged against the peers' in-flight of their last reports, which
// their own give-backs had since passed, still added up to 1.15·C. Where
// the nodes were refused at the same load, their parts add up to no more
// than that load less one, whatever the reports say; past them the fleet
// gives back about one slot a round of grants, for as long as the load
// is remembered (with more than 4 nodes of equal share, not at all: the
// load is forgotten first). A give-back so held back is where the
// doubling starts again. That load is forgotten after 5 ProbeTicks
// without a drop — without them, never — at a ceiling of 0 or an expired
// one, and at ClearCeiling; a higher ceiling's room is not bound by it
// (see SetCeiling), since the fleet's limit rises only as the guard above
// allows. Drops from before n last went from 0 to positive count for
// neither rule. 0, the default, turns all this off, as for a lone
// process; a negative n counts as 0. Safe for concurrent use.
func (l *Limiter) SetFleetLimit(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fleetLimit == 0 && n > 0 {
		// Drops from before the limit went positive neither tighten its
		// guard nor bound its give-backs.
		l.tightTicks, l.refusedLoad = 0, 0
	}
	l.fleetLimit = max(n, 0)
	if n > 0 && l.queue.len > 0 && l.queue.rejectHeavier(n, func(w int) error {
		return fmt.Errorf("%w: Request.Weight = %d exceeds the fleet's limit %d, which fell below it while the request waited", ErrTooHeavy, w, n)
	}) {
		l.dispatch(l.cfg.Clock.Now()) // a heavy head may have held back lighter waiters
	}
}

// SetPeerInflight tells the limiter how many requests the rest of the
// fleet has in flight against the same upstream (from the last heartbeat
// reply). The utilization guard then judges each sample by the fleet's
// load — own in-flight plus n — rather than by own in-flight alone, and
// with a fleet limit set a drop backs off no lower than from that load
// (see SetFleetLimit). It does not change admission. A negative n
// counts as 0. Defaults to 0, which is right for a lone process.
func (l *Limiter) SetPeerInflight(n int) {
	l.mu.Lock()
	l.peerInflight = max(n, 0)
	l.mu.Unlock()
}

// SetEstimate replaces the estimate, for instance to warm-start a fleet
// node at the key's current global limit. v is clamped to
// [MinLimit, MaxLimit]; NaN is ignored. A higher estimate hands freed
// slots to queued waiters at once.
func (l *Limiter) SetEstimate(v float64) {
	if math.IsNaN(v) {
		return
	}
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	l.pace(now)
	l.estimate = l.clampEstimate(v)
	l.queueLast = 0 // a round trip at the old estimate says nothing of v
	l.band.within()
	l.pace(now)
	l.dispatch(now)
	l.mu.Unlock()
}

// PauseUntil refuses admission until t, as an upstream's Retry-After
// asks: TryAcquire returns false and Acquire returns a *PauseError
// (errors.Is ErrPaused) that says until when, and callers already
// waiting in Acquire are released with it. Leases already admitted are
// unaffected. A pause only ever extends: a t before the current pause end
// is ignored. Admission resumes by itself once the clock passes t.
func (l *Limiter) PauseUntil(t time.Time) {
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	if t.After(l.pausedUntil) {
		l.pausedUntil = t
		l.pauseErr = &PauseError{Until: t}
	}
	if l.paused(now) {
		l.queue.rejectAll(l.pauseErr)
	}
	l.mu.Unlock()
}

// RetryAfter pauses admission for d from now; see PauseUntil. A d ≤ 0
// does nothing.
func (l *Limiter) RetryAfter(d time.Duration) {
	if d <= 0 {
		return
	}
	l.PauseUntil(l.cfg.Clock.Now().Add(d))
}
