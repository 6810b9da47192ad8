package adaptive

import (
	"math"
	"time"
)

// observe applies a settled lease to the estimate. load is the larger of
// the load at admission and at settlement (own in-flight, this lease
// included, plus peers'), and rtt its round-trip time. The caller holds
// l.mu.
func (l *Limiter) observe(now time.Time, rec *leaseRecord, o outcome, load int, rtt time.Duration) {
	if o == released && l.cfg.MaxHealthyRTT > 0 && rtt > l.cfg.MaxHealthyRTT {
		o = dropped
	}
	if rtt < 0 {
		// The clock went backwards: the duration is meaningless.
		rtt = 0
		if o == released {
			o = ignored
		}
	}
	// A round trip of 0 — a coarse or a fake clock that did not move — is
	// a success whose latency nobody measured: it counts for the pacing
	// and for AIMD, but is no latency sample, since as the no-load round
	// trip it would read every later round as a queue.
	timed := rtt > 0
	rtt = max(rtt, time.Nanosecond)

	if o == released {
		l.lastClean = now // the pacing's clock, a hold's releases included
	}
	if l.recal.active() {
		if !timed && o == released {
			o = ignored // no probe of the no-load round trip
		}
		l.recalObserve(now, rec, o, rtt)
	} else if o == released {
		if !l.holding(now) {
			l.paced = addCounts(l.paced, rec.weight)
		}
		// The law moves the estimate once per round trip: on the first
		// clean sample of a request admitted since the last move. Moving
		// on every sample would compound a round trip's worth of samples,
		// as many as the limit, into one step whose size grew with the
		// limit itself. Likewise the min-RTT window takes one entry per
		// round trip, the fastest sample of the round, so RTTWindow spans
		// round trips whatever the request rate.
		if timed && (l.roundMin == 0 || rtt < l.roundMin) {
			l.roundMin = rtt
		}
		if rec.round == l.round {
			l.round++
			fastest := l.roundMin // 0: no sample of the round was timed
			if fastest > 0 {
				l.window.push(fastest)
				// The round trip is evidence of queueing for dropRatio
				// only if the request closing it was sent once the queue
				// that the last queue backoff answered could have drained.
				l.queueLast, l.queueAt = fastest, now
				if rec.start.Before(l.queueDrained) {
					l.queueLast = 0
				}
				l.autoRound(fastest)
			}
			l.roundMin = 0
			l.recoverCut()
			switch {
			case l.law.law == AIMD:
				l.aimdSample(now, rec, rtt, load)
			case timed: // so is the round's fastest sample
				l.gradientSample(rtt, fastest, load)
			}
		}
	}
	if o == dropped {
		l.drop(now, rec)
	}
}

// drop applies one overload signal for rec. Under a ceiling, the cut
// grows at once (see SetCeiling), so a node whose share is too large for
// the upstream stops sending its excess before its next share arrives.
// First, if the request was admitted since the last backoff, the ceiling
// is what binds the limit and PaceGrowth was still holding the in-flight
// below it, with all the room the pacing gave in use (see climbing) — the
// node was climbing to a limit that rose, as fast as its successes
// allowed — the refusal ends the climb: the cut takes the limit down to
// what was in flight when the drop is reported, the refused request
// included, and the pacing no longer holds the node below what is left,
// so a drop while it drains is not another climb's end. The climb found
// the upstream full there, and each slot more it took would be refused
// too; where the share runs far ahead of the in-flight (a fleet limit
// that overshot the capacity) that is one refusal per slot
// before the cut reached the in-flight. A node that leaves paced room
// unused for want of demand, whose pacing lapsed (no clean release for
// rttNoload: long requests), or whose estimate binds its limit keeps its
// unused slots: its refusal may come from others' load, and a cut comes
// back only as round trips pass. Then the drop cuts one slot more, or two
// for a request admitted after the last backoff and refused less than
// rttNoload after it (see soonAfterBackoff). Requests sent together and
// refused together, the first of them backing off, are each one slot of
// an excess already sent, so k of them cut k slots: two each would cut
// twice the excess — after a capacity drop, most of a share — and the
// fleet's in-flight would sit far below the capacity until the give-backs
// (see recoverCut) returned it. A refusal of a request sent after the
// cut, while the requests sent before it still hold their slots upstream,
// says the node is still sending its excess; at a limit of hundreds it is
// many slots, so it cuts two. The estimate is multiplied by BackoffRatio
// (or, under Gradient2, dropRatio's ratio; under Auto before its move, a
// drop with the mark of a flat upstream takes FlatLatency's BackoffRatio
// instead, see autoFlat), at most once per round trip,
// and, with a fleet limit set, capped at
// that limit less the cut (see SetFleetLimit and backoff). The caller
// holds l.mu.
func (l *Limiter) drop(now time.Time, rec *leaseRecord) {
	flat := l.autoFlat(now, rec)
	l.drops++
	l.tightTicks = cutRecovery
	sinceBackoff := rec.backoffEpoch == l.backoffEpoch // admitted after the last backoff
	step := 1
	if sinceBackoff && l.soonAfterBackoff(now) {
		step = 2 // sent after the last backoff's cut, and still refused
	}
	l.calmRounds = 0
	if l.hasCeiling {
		if rec.seq >= l.cutFrom && rec.seq < l.cutUntil &&
			(l.cutUntil == math.MaxUint64 || l.round-l.cutClosed <= maxCutWait) {
			// A request sent while slots were coming back, refused
			// then or at most maxCutWait round trips after: how late
			// its refusal came is how long a give-back waits to
			// hold. Any other request's says nothing of give-backs.
			l.cutLag = int(min(l.round-rec.round, maxCutWait))
		}
		l.closeCutWindow()
		switch {
		case l.cutGiven < l.holdRounds():
			// The last give-back was refused before it held: wait
			// longer before the next.
			l.cutWait = min(2*l.cutWait, maxCutWait)
			l.cutHit = l.cut
		case l.cutGiven != noneGiven:
			// The last give-back held: a new overload.
			l.cutWait = cutRecovery
		}
		held := l.inflight
		if !rec.dropSeen {
			// Settled: its slot is already given back. A drop observed
			// early (ObserveDrop) still holds it.
			held = addCounts(held, rec.weight)
		}
		// Only a request admitted since the last backoff can end a climb:
		// the rest of a burst already answered is one slot each, even
		// if a new share let the pacing fall behind again meanwhile.
		climbed := sinceBackoff && l.climbing(now, held, rec.weight)
		if climbed {
			l.cut = max(l.cut, l.ceiling-held)
		}
		l.cut = min(l.cut+step, max(l.ceiling-1, 0))
		if l.ceiling > 0 {
			// The slots higher ceilings were held back by are now
			// the cut of a refusal below them.
			l.refused, l.refusedCalm, l.absorbed = held, 0, 0
			if l.fleetLimit > 0 {
				l.refusedLoad = rec.load // the fleet's, for give-backs (see giveBack)
			}
		}
		if climbed {
			// The climb is over: what is left of the limit is the
			// node's to refill, and a drop while it drains is not
			// another climb.
			l.paced = max(l.paced, l.limit(now))
		}
		l.cutGiven = noneGiven
		l.cutCalm = 0
		l.cutStep, l.giveTurn = 1, 0
		l.giveDue = false
	}
	bound := math.Inf(1)
	if l.fleetLimit > 0 && l.cut > 0 {
		bound = float64(l.fleetLimit - l.cut)
	}
	ratio := l.law.backoffRatio
	switch {
	case flat:
		// The law Auto would move to: its ratio, and no queue
		// evidence (a round trip within autoFlatQueueing of
		// rttNoload is not a queue to it).
		ratio = l.flatLaw.backoffRatio
	case !l.answered(now, rec):
		ratio = l.dropRatio(now, rec)
	}
	floor := 0.0
	if l.fleetLimit > 0 {
		// The fleet had rec.load in flight when rec was admitted; the
		// refusal says that was too much, not that the upstream holds
		// less than a backoff from it.
		floor = ratio * float64(rec.load)
	}
	l.backoff(now, rec, ratio, bound, floor)
}

// dropRatio is what the backoff of a drop of rec that backs off
// multiplies the estimate by: BackoffRatio, or under Gradient2, when the
// last round trip is evidence of queueing (queueLast: its fastest clean
// sample was slower than rttNoload), rttNoload over that sample if it is
// smaller, but not below gradient2's own floor of 0.5. Under Gradient2
// latency is the signal: a round trip whose every request queued says how
// much too high the estimate was, as the gradient would with a tolerance
// of 1, and the refusal says the upstream could not wait for the
// gradient's smoothed descent. The evidence counts once, and only for a
// request sent no later than two such round trips after it: a stray slow
// request (a timeout on a healthy upstream) changes no round trip's
// fastest sample; refusals with no clean round trip between them (an
// outage) use it once; and a refusal long after it (an idle hour) says
// nothing of it. A round trip closed by a request sent before the queue
// a backoff answered could drain, a recalibration's probes and a round
// trip measured before SetEstimate are no evidence. Auto's drop with a
// flat upstream's mark does not ask, and leaves the evidence as it is
// (see drop). The caller holds l.mu.
func (l *Limiter) dropRatio(now time.Time, rec *leaseRecord) float64 {
	ratio := l.law.backoffRatio
	noload, ok := l.window.min()
	last := l.queueLast
	if !ok || l.law.law != Gradient2 || last <= noload {
		return ratio
	}
	l.queueLast = 0
	if rec.start.After(l.queueAt.Add(2 * last)) {
		return ratio // sent long after the queueing was seen
	}
	// Requests sent within a queued round trip of this backoff still
	// meet the queue it answers: their round trips say nothing new.
	l.queueDrained = now.Add(last)
	return min(ratio, max(float64(noload)/float64(last), minGradient))
}

// climbing reports whether a drop at now, with held in flight (the
// refused request, of the given weight, included), ends a paced climb:
// the ceiling less the cut binds the limit, PaceGrowth holds the
// in-flight below it, and the room the pacing gives (see room) was all in
// use — held is within it, and a request of the same weight more would
// not fit. A request admitted alone above that room (nothing else in
// flight) was not climbing. A caller that admits with TryAcquire and had
// not yet refilled a slot freed just before the refusal does not count
// as climbing either. The caller holds l.mu.
func (l *Limiter) climbing(now time.Time, held, weight int) bool {
	lim := l.limit(now)
	if !l.pacing(now) || !l.hasCeiling || lim != l.ceiling-l.cut || l.paced >= lim {
		return false
	}
	room := l.pacedBound(lim)
	return held <= room && addCounts(held, weight) > room
}

// recoverCut counts a round trip without a drop and gives back slots that
// drops cut from the ceiling: the first once cutWait such round trips
// have passed since the last drop, each later one once the last has held.
//
// A give-back holds when holdRounds round trips pass without a drop:
// cutRecovery, or one more than the last refusal of a request sent
// while slots were coming back took to come back after its admission,
// if that is more (at most maxCutWait). Slots are coming back from the
// first give-back after a drop or a lower share until the next drop or
// lower share, or until the give-back that returned the last slot held;
// a refusal counts if it comes then or at most maxCutWait round trips
// after. A recovery that ends — that last hold, or a lower share or
// ClearCeiling that leaves no cut — forgets the lag, so a lag learned
// from one hung request slows only the recovery that follows it. The
// excess a give-back lets out is sent within a round trip or two, and a
// refusal takes as long to come back as refusals do: at once for a 429,
// a timeout later for a request that hangs. A drop of any other request
// says nothing of give-backs and leaves the hold as it is: a stale
// request that times out in a burst of 429s, or long after the last cut
// came back, does not slow the give-backs that follow. Only the stretch
// since the last drop or lower share counts: a late refusal of a
// request sent in an earlier one is judged like any other drop. The
// first late refusal of a recovery teaches the lag, so until then a
// give-back may be judged to have held before its refusal came. A new
// ceiling that leaves a cut keeps the lag.
//
// A give-back returns cutStep slots. cutStep is 1 after a drop or a
// lower share (see SetCeiling) and doubles, up to maxCutStep, each time
// a give-back holds, so a burst of refusals that cut most of a node's
// share is undone in a few waits: while it lasts, the fleet's in-flight
// stays so far below L_global that the utilization guard lets no
// estimate rise. Above the cut that a give-back last left and was
// refused at (cutHit), a give-back stops one slot short of it, and that
// cut itself is tried one slot at a time: a give-back of s slots that is
// refused cuts them again (s refusals cut one each, or one refusal ends
// the paced climb into them, see drop), and give-backs of 1, 2 … s/2
// would return them, and the same overshoot, within a few waits.
//
// cutWait starts at cutRecovery and doubles, up to maxCutWait, at the
// first drop that comes before the last give-back held (by the hold as
// that drop leaves it); it starts again at cutRecovery at a drop that
// comes after the last give-back held, as soon as a give-back to
// cutHit, or below it, has held, and when a lower share absorbs the
// cut. A fleet limit that stays too high then costs fewer and fewer
// refusals, and one that came right again — an upstream whose capacity
// grew back — gets the rest of its cut back at the short pace after a
// single long wait: the next give-backs wait only for the last to hold.
// The price is paid where one probe costs several refusals: a cycle of
// one long wait and m short ones instead of m long ones is refused more
// often. The caller holds l.mu.
func (l *Limiter) recoverCut() {
	if l.cutGiven != noneGiven {
		l.cutGiven = min(l.cutGiven+1, noneGiven-1)
		if l.cutGiven == l.holdRounds() {
			// What was given back held: give back twice as much
			// next time.
			l.cutStep = min(2*l.cutStep, maxCutStep)
			if l.refused > 0 && l.ceiling-l.cut >= l.refused {
				// The level last refused holds now; what is left
				// of the cut comes back by give-backs.
				l.refused, l.absorbed = 0, 0
			}
			if l.cut <= l.cutHit {
				// At or below the cut last refused: the ceiling is
				// not too high there any more.
				l.cutWait = cutRecovery
			}
			if l.cut == 0 {
				// The last slot came back and held: the recovery
				// is over, and the next learns the lag afresh.
				l.closeCutWindow()
				l.cutLag = 0
			}
		}
	}
	if l.cut == 0 {
		return
	}
	l.cutCalm++
	if l.cutCalm < l.cutWait || l.cutGiven != noneGiven && l.cutGiven < l.holdRounds() {
		return
	}
	if l.fleetLimit > 0 {
		// A fleet node gives back at its next grant (see ProbeTick):
		// the upstream answers the nodes' requests together, so
		// their round trips end together, and give-backs made there
		// would all be refused at once. Its grants come at its own
		// heartbeat's phase. A node that hears no grant for
		// giveDueRounds round trips gives back anyway.
		if !l.giveDue {
			l.giveDue, l.giveWaited = true, 0
			return
		}
		if l.giveWaited++; l.giveWaited < giveDueRounds {
			return
		}
	}
	l.giveBack()
}

// giveBack returns cutStep slots of the cut (see recoverCut), fewer near
// the levels last refused: above the cut at which a give-back was last
// refused (cutHit) it comes back to just above it, then tries it one slot
// at a time; it takes the room, ceiling − cut, no further than one slot
// under the weight in flight at the last drop (refused), or one slot past
// that at a time; and with a fleet limit it takes the room no further
// than the ceiling's part of one slot under the fleet's load when the
// request of the last drop was admitted (refusedLoad), and past that
// part returns one slot at the node's turn (see giveTurns). A give-back
// so held back sets cutStep to what it gave. The caller holds l.mu and
// has checked that cut > 0.
func (l *Limiter) giveBack() {
	l.giveDue = false
	give := l.cutStep
	if l.cut > l.cutHit {
		give = min(give, max(l.cut-l.cutHit-1, 1))
	}
	if l.refused > 0 {
		give = min(give, max(l.refused-1-(l.ceiling-l.cut), 1))
	}
	if l.refusedLoad > 0 && l.fleetLimit > 0 && l.ceiling > 0 {
		// Several nodes give back near the same grant. Judged against
		// the peers' in-flight of their last reports, which the peers'
		// own give-backs have since passed, each node's one slot was an
		// excess of its own. Instead each takes back no more than its
		// share's part of the load refused less one: the parts of all
		// the nodes add up to no more than that, whatever their reports
		// say. Past its part a node gives back one slot at its turn,
		// so that the fleet passes that load about one slot a round of
		// grants, however many nodes share it. The step doubles from
		// what was given, not from what was due, so the give-back after
		// the load is forgotten is no burst.
		fleet := max(l.fleetLimit, l.ceiling)
		// The part is at most the ceiling (so the conversion cannot
		// overflow, whatever the load).
		part := int(min(float64(l.refusedLoad-1)*float64(l.ceiling)/float64(fleet), float64(l.ceiling))) - (l.ceiling - l.cut)
		if part < 1 {
			// Past the part: the step starts again from one slot, so
			// that what comes back once the load is forgotten is no
			// burst either.
			l.cutStep = 1
			if l.giveTurn++; l.giveTurn < giveTurns(fleet, l.ceiling) {
				return
			}
			l.giveTurn, part = 0, 1
		}
		if part < give {
			give, l.cutStep = part, part
		}
	}
	l.cut = max(l.cut-give, 0)
	l.absorbed = min(l.absorbed, l.cut)
	if l.cutGiven == noneGiven {
		l.cutFrom, l.cutUntil = l.admits+1, math.MaxUint64
	}
	l.cutGiven = 0
}

// giveTurns is how many due give-backs a fleet node with a ceiling of
// share, out of a fleet limit of fleet (≥ share > 0), lets pass for each
// one slot it gives back past its part of the load last refused (see
// giveBack): ⌈fleet/share⌉, so that the nodes' give-backs past their
// parts add up to about one slot per round of their grants.
func giveTurns(fleet, share int) int {
	return (fleet-1)/share + 1
}

// holdRounds is how many round trips without a drop a give-back takes
// to hold (see recoverCut). The caller holds l.mu.
func (l *Limiter) holdRounds() int {
	return min(max(cutRecovery, l.cutLag+1), maxCutWait)
}

// closeCutWindow ends, if it has not ended yet, the stretch in which an
// admitted request counts as sent while slots were coming back (see
// recoverCut): requests admitted from now on do not. The caller holds
// l.mu.
func (l *Limiter) closeCutWindow() {
	if l.cutUntil == math.MaxUint64 {
		l.cutUntil, l.cutClosed = l.admits+1, l.round
	}
}

// forgetRefused forgets the level last refused (see SetCeiling) and gives
// back the slots higher ceilings were held back by. The caller holds l.mu.
func (l *Limiter) forgetRefused() {
	l.cut -= l.absorbed
	l.refused, l.absorbed, l.refusedLoad, l.giveTurn = 0, 0, 0, 0
}

// restartCutRecovery puts the give-back of the cut (see recoverCut) in
// its initial state: the short wait, one slot per give-back, none given
// back, no cut refused and no slots coming back. It keeps the hold's lag,
// which is the upstream's, unless no cut is left. A new limiter, a lower
// share and ClearCeiling start from it. The caller holds l.mu (or owns
// l).
func (l *Limiter) restartCutRecovery() {
	l.cutWait, l.cutGiven, l.cutHit, l.cutStep = cutRecovery, noneGiven, -1, 1
	l.giveDue, l.giveTurn = false, 0
	l.closeCutWindow()
	if l.cut == 0 {
		l.cutLag = 0 // no cut left: the recovery is over
	}
}

// propose moves the estimate to next, subject to the utilization guard:
// an increase counts only when load reached UtilizationThreshold·estimate
// or the whole limit, floor(estimate): the load of unit requests never
// exceeds the limit, so a threshold above it would freeze a small
// estimate for good. A fleet node (SetFleetLimit) holds the threshold to
// at least tightUtilization (0.9) from a drop until cutRecovery
// ProbeTicks have passed without one: near a capacity the fleet keeps
// hitting, its estimate, and with it L_global and the shares, stays within
// a ninth of the load the upstream served, so that slots given back by
// several nodes at once overshoot the capacity by little; once the
// refusals stop for that long (a capacity that rose), the configured
// threshold lets the estimate run ahead of the load again and the climb
// is as fast as before. Decreases always count. The caller holds l.mu.
func (l *Limiter) propose(next float64, load int) {
	if math.IsNaN(next) {
		return
	}
	utilization := l.law.utilization
	if l.fleetLimit > 0 && l.tightTicks > 0 {
		utilization = max(utilization, tightUtilization)
	}
	if next > l.estimate && !l.utilized(utilization, load) {
		return
	}
	l.estimate = l.clampEstimate(next)
}

// utilized reports whether load reached the fraction u of the estimate or
// the whole limit, floor(estimate): the load of unit requests never
// exceeds the limit (see propose). The caller holds l.mu.
func (l *Limiter) utilized(u float64, load int) bool {
	return float64(load) >= u*l.estimate || load >= int(l.estimate)
}

// backoff multiplies the estimate by ratio at most once per round trip: not
// for a request admitted before the last backoff, and not sooner than
// rttNoload after it. The second rule matters when overload is signalled
// instantly (a 429 answered at once): requests admitted just after a
// backoff meet the upstream still busy with what was admitted before it,
// and their fast rejections say nothing yet about the lowered limit.
//
// The result goes no lower than floor (0: none), and an estimate already
// at or below floor stays where it is: a fleet node's drop passes ratio ×
// the fleet's in-flight when the refused request was admitted (see
// SetFleetLimit). It is then capped at bound (math.Inf(1): no cap), which
// takes precedence over floor, but never below half of
// estimate·max(ratio, BackoffRatio) (or estimate·ratio, if lower), so that
// one backoff takes at most half of what BackoffRatio leaves, whatever
// dropRatio gave — half of what FlatLatency's ratio leaves for Auto's
// drop with a flat upstream's mark (see drop). The level the estimate
// came down from, for AIMD's probe (see ProbeTick), is the result over
// ratio: under a bound or a floor, the level it stands for. The caller
// holds l.mu.
func (l *Limiter) backoff(now time.Time, rec *leaseRecord, ratio, bound, floor float64) {
	if l.answered(now, rec) {
		return
	}
	l.pace(now) // the last limit of an unpaced slow start, if this ends one
	l.backoffEpoch++
	l.lastBackoff = now
	l.calmRounds = 0
	next := max(l.estimate*ratio, min(l.estimate, floor))
	if bound < next {
		// At most half of what BackoffRatio leaves, even when the
		// queue's ratio (see dropRatio) took more already.
		next = max(bound, min(next, l.estimate*max(ratio, l.law.backoffRatio)/2))
	}
	l.estimate = l.clampEstimate(next)
	l.backedFrom = l.estimate / ratio
}

// answered reports whether the last backoff already answered an overload
// signal for rec, which then backs off no further: rec was admitted
// before that backoff, or the signal comes less than rttNoload after it
// (see backoff). The caller holds l.mu.
func (l *Limiter) answered(now time.Time, rec *leaseRecord) bool {
	return rec.backoffEpoch != l.backoffEpoch || l.soonAfterBackoff(now)
}

// soonAfterBackoff reports whether now is less than rttNoload after the
// last backoff; false while no round trip has set rttNoload. The caller
// holds l.mu.
func (l *Limiter) soonAfterBackoff(now time.Time) bool {
	noload, ok := l.window.min()
	return ok && now.Sub(l.lastBackoff) < noload
}

func (l *Limiter) clampEstimate(v float64) float64 {
	return min(max(v, float64(l.cfg.MinLimit)), float64(l.cfg.MaxLimit))
}
