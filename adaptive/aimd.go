package adaptive

import (
	"math"
	"time"
)

// aimdSample applies one clean sample under AIMD: back off when it was
// slower than LatencyTarget, otherwise add the step (subject to the
// utilization guard). With AIMDProbe set, until the first decrease (a
// drop's or a slow sample's backoff) the estimate grows by half instead,
// whenever the load reached the estimate it grew from — two thirds of
// the estimate, so at most 1.5 times the load tried — or the whole limit
// (see propose), as in TCP's slow start
// (which doubles: half as much overshoots the capacity less when the
// first drop comes). With PaceGrowth the load need only reach half the
// estimate, so the estimate may reach three times the load tried: the
// in-flight climbs to a raised limit as leases settle, so the excess is
// taken up over a round trip rather than sent at once, and the first
// refusal comes before most of it is sent. Under a ceiling the slow
// start is not paced (see pacing): a fleet node's share rises once a
// heartbeat, to the lower median of the fleet's estimates, and the node
// raises the ceiling to it over a round trip itself, so the first
// refusals end the climb (see drop).
// A warm start (SetEstimate) does not end it: a fresh key's first limit
// is a node's InitialLimit. The caller holds l.mu.
func (l *Limiter) aimdSample(now time.Time, rec *leaseRecord, rtt time.Duration, load int) {
	if l.law.latencyTarget > 0 && rtt > l.law.latencyTarget {
		l.backoff(now, rec, l.law.aimdBackoff, math.Inf(1), 0)
		return
	}
	if l.slowStarting() {
		l.slowStartStep(load)
		return
	}
	l.propose(l.estimate+l.aimdStep(), load)
}

// SlowStarting reports whether the limiter runs AIMD's slow start: law
// AIMD, AIMDProbe set and no decrease yet (see AIMDProbe). A fleet node
// then calls ProbeTick just before its report rather than after the
// grant, so that the tick sees a whole interval of the share granted
// last, and the report the estimate it leaves. Safe for concurrent use.
func (l *Limiter) SlowStarting() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.slowStarting()
}

// slowStarting reports whether AIMD is in its slow start: AIMDProbe set
// and no decrease yet. The caller holds l.mu.
func (l *Limiter) slowStarting() bool {
	return l.law.law == AIMD && l.law.aimdProbe > 0 && l.backoffEpoch == 0
}

// slowStartStep grows the estimate by half if load reached the estimate
// it grows from (two thirds of it, or half under PaceGrowth) or the whole
// limit; see aimdSample. It reports whether the estimate grew. The caller
// holds l.mu.
func (l *Limiter) slowStartStep(load int) bool {
	reach := slowStart
	if l.law.paceGrowth {
		reach = pacedSlowStartReach
	}
	if reach*float64(load) >= l.estimate || load >= int(l.estimate) {
		before := l.estimate
		l.estimate = l.clampEstimate(slowStart * l.estimate)
		return l.estimate > before
	}
	return false
}

// ProbeTick gives AIMD's probe a clock besides the round trip; a fleet
// node calls it once a heartbeat: during the slow start (SlowStarting)
// just before it builds its report, so the report carries the step, and
// after it at the grant, where a cut's give-backs wait for it. Under AIMD with AIMDProbe set, when
// this limiter admitted a request since the previous call, or holds
// requests in flight while others wait for room (its room all in use and
// none of it coming back within the interval: the upstream took and
// holds all it was sent), and no drop came since then, the estimate
// moves as on a clean round trip at the current
// load (own in-flight plus peers', see SetPeerInflight). During the slow
// start it grows by half as many times as that load still reaches the
// estimate it grows from — as the round trips between two calls would
// where they are shorter than the interval, since a fleet node's share,
// and so its load, moves only once a heartbeat — but to no more than 2.25
// times the larger of the estimate and the fleet's limit (SetFleetLimit):
// an estimate below the fleet's limit catches up with the load, and a
// load that says more than the fleet's limit (peers' in-flight still
// counted for a crashed instance) takes it no further. On a call that is
// not the first, where the no-load round trip is at least as long as the
// longer of the last two intervals between calls (or no clean round trip
// has ended yet), no round trip could take the steps between two calls,
// and a limiter held (requests in flight, others waiting, its room all
// in use) counts its load as at least the fleet's limit: its room, not
// its demand, held it back, and with every node so held the fleet's
// in-flight would be that limit; so its estimate may reach 2.25 times the
// larger of the estimate and the fleet's limit in one call. The evidence is
// the absence of refusals, which an upstream that refuses at once gives
// before any round trip. After it, it takes one probe step (see
// AIMDProbe), which counts as a round trip for the step's doublings, but
// only while the estimate is above the level the last backoff came down
// from — where the upstream has shown no limit yet. Near the capacity
// last hit the probes stay clocked by round trips alone. A drop since the
// previous call, neither an admission since then nor requests held while
// others wait, a pause (PauseUntil), another law, AIMDProbe 0 or a
// recalibration under way make it move no estimate: only requests this
// limiter sent, and that were not refused, say there was room. Under any
// law it also gives back
// the slots of a cut that are due, and a call with no drop since the
// previous one counts towards forgetting the level last refused (see
// SetCeiling) and towards a fleet node's guard leaving 0.9 after a drop
// (see SetFleetLimit).
//
// The round trip is the only clock of the law otherwise, and it can be
// long — a request that takes seconds — while an upstream that refuses
// above its capacity answers the refusal at once: a probe step needs no
// round trip to be refused. The utilization guard still holds the
// estimate near the load tried, and PaceGrowth still lets the in-flight
// climb only as leases settle. Safe for concurrent use.
func (l *Limiter) ProbeTick() {
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	// Room all in use, none of it came back, and a request waits for it;
	// not under a ceiling of 0 or an expired one, nor behind a waiter too
	// heavy for the room left.
	held := l.inflight > 0 && l.queue.weight > 0 && !l.holding(now) && l.room(now) <= 0
	calm := l.drops == l.tickDrops && (l.tickAdmitted || held)
	if l.drops == l.tickDrops && (l.refused > 0 || l.refusedLoad > 0) {
		if l.refusedCalm++; l.refusedCalm >= cutRecovery {
			l.forgetRefused() // refused long ago: the fleet may have moved since
			l.dispatch(now)
		}
	}
	if l.drops == l.tickDrops && l.tightTicks > 0 {
		l.tightTicks--
	}
	l.tickDrops, l.tickAdmitted = l.drops, false
	// The interval the steps stand for: the longer of the last two, so
	// that an early call (a fleet node's early heartbeat) does not make
	// round trips shorter than the usual interval look as long as it.
	var gap time.Duration
	first := l.tickAt.IsZero()
	if !first {
		since := now.Sub(l.tickAt)
		gap = max(since, l.tickGap)
		l.tickGap = since
	}
	l.tickAt = now
	if l.giveDue && l.cut > 0 {
		l.pace(now)
		l.giveBack()
		l.dispatch(now)
	}
	if !calm || l.law.law != AIMD || l.law.aimdProbe == 0 || l.recal.active() || l.paused(now) {
		return
	}
	l.pace(now)
	load := addCounts(l.inflight, l.peerInflight)
	switch {
	case l.slowStarting():
		top := slowStart * slowStart * max(l.estimate, float64(l.fleetLimit)) * (1 + 1e-9)
		if noload, ok := l.window.min(); held && !first && (!ok || noload >= gap) {
			// Round trips as long as the interval (or no clean one
			// ended yet): the room, not the demand, holds the node
			// back, and the fleet's in-flight it would reach is the
			// fleet's limit.
			load = max(load, l.fleetLimit)
		}
		for l.estimate*slowStart <= top && l.slowStartStep(load) {
		}
	case l.estimate > l.backedFrom:
		l.propose(l.estimate+l.aimdStep(), load)
	}
	l.dispatch(now) // the estimate only rose: paced needs no new bound
}

// aimdStep is what AIMD adds on this round trip. Without AIMDProbe it is
// AIMDIncrease. With AIMDProbe it starts at the larger of AIMDIncrease and
// estimate·(1 − BackoffRatio)/AIMDProbe, so that AIMDProbe round trips
// at that start would win back one backoff at any scale, doubles every
// probeDoubling round trips without a drop or backoff, and is at most a
// quarter of the estimate. Near the capacity last hit the probe is thus
// small — a drop starts it again — while a capacity that grew, which
// refuses nothing, is found in a number of round trips that grows with
// the logarithm of the difference. It counts the round trip (or the
// calm ProbeTick). The caller holds l.mu.
func (l *Limiter) aimdStep() float64 {
	step := l.law.aimdIncrease
	if l.law.aimdProbe > 0 {
		l.calmRounds++
		doublings := (l.calmRounds - 1) / probeDoubling
		step = max(step, l.estimate*(1-l.law.backoffRatio)/float64(l.law.aimdProbe))
		step *= float64(uint64(1) << min(doublings, 30))
		step = max(min(step, l.estimate/4), l.law.aimdIncrease)
	}
	return step
}

// slowStart is what the estimate is multiplied by on each round trip
// before the first decrease when AIMDProbe is set, and
// pacedSlowStartReach how many times the load the estimate may then be
// and still grow under PaceGrowth (slowStart without it; see aimdSample).
// probeDoubling is how many round trips without a drop double AIMDProbe's
// step (see aimdStep): after a backoff of 5 % the steps of 1, 1, 2 and 2 %
// win it back in 4 round trips, about as the AIMDProbe 5 of a constant
// step would, while a capacity that grew, which refuses nothing, is
// found twice as fast in round trips as with a doubling every 5.
const (
	slowStart           = 1.5
	pacedSlowStartReach = 2
	probeDoubling       = 2
)
