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
// refusal comes before most of it is sent.
// A warm start (SetEstimate) does not end it: a fresh key's first limit
// is a node's InitialLimit. The caller holds l.mu.
func (l *Limiter) aimdSample(now time.Time, rec *leaseRecord, rtt time.Duration, load int) {
	if l.law.latencyTarget > 0 && rtt > l.law.latencyTarget {
		l.backoff(now, rec, l.law.aimdBackoff, math.Inf(1))
		return
	}
	if l.law.aimdProbe > 0 && l.backoffEpoch == 0 {
		l.slowStartStep(load)
		return
	}
	l.propose(l.estimate+l.aimdStep(), load)
}

// slowStartStep grows the estimate by half if load reached the estimate
// it grows from (two thirds of it, or half under PaceGrowth) or the whole
// limit; see aimdSample. The caller holds l.mu.
func (l *Limiter) slowStartStep(load int) {
	reach := slowStart
	if l.law.paceGrowth {
		reach = pacedSlowStartReach
	}
	if reach*float64(load) >= l.estimate || load >= int(l.estimate) {
		l.estimate = l.clampEstimate(slowStart * l.estimate)
	}
}

// ProbeTick gives AIMD's probe a clock besides the round trip; a fleet
// node calls it at every grant once its estimate rests on its own
// samples. Under AIMD with AIMDProbe set, when this limiter admitted a
// request since the previous call and no drop came since then, the
// estimate moves as on a clean round trip at the current load (own
// in-flight plus peers', see SetPeerInflight): during the slow start it
// grows by half if that load reached the estimate it grows from; after
// it, it takes one probe step (see AIMDProbe), which counts as a round
// trip for the step's doublings, but only while the estimate is above
// the level the last backoff came down from — where the upstream has
// shown no limit yet. Near the capacity last hit the probes stay clocked
// by round trips alone. No admission or a drop since the previous call,
// a pause (PauseUntil), another law, AIMDProbe 0 or a recalibration under
// way make it move no estimate: only requests this limiter sent, and that
// were not refused, say there was room. Under any law it also gives back
// the slots of a cut that are due, and a call with no drop since the
// previous one counts towards forgetting the level last refused (see
// SetCeiling).
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
	calm := l.drops == l.tickDrops && l.tickAdmitted
	if l.drops == l.tickDrops && l.refused > 0 {
		if l.refusedCalm++; l.refusedCalm >= cutRecovery {
			l.forgetRefused() // refused long ago: the fleet may have moved since
			l.dispatch(now)
		}
	}
	l.tickDrops, l.tickAdmitted = l.drops, false
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
	case l.backoffEpoch == 0:
		l.slowStartStep(load)
	case l.estimate > l.backedFrom:
		l.propose(l.estimate+l.aimdStep(), load)
	}
	l.dispatch(now) // the estimate only rose: paced needs no new bound
}

// aimdStep is what AIMD adds on this round trip. Without AIMDProbe it is
// AIMDIncrease. With AIMDProbe it starts at the larger of AIMDIncrease and
// estimate·(1 − BackoffRatio)/AIMDProbe, so that AIMDProbe round trips
// win back one backoff at any scale, and it doubles every AIMDProbe round
// trips without a drop or backoff. After k consecutive round trips with
// the estimate above the level the last backoff came down from (the
// estimate it left over its ratio), k > AIMDProbe, it is also at least
// 2^(k − AIMDProbe) times that start: from the point where this count
// overtakes the other it doubles on every round trip. It is at most a
// quarter of the estimate. Near the capacity last hit the probe is thus
// small; well past it the upstream has shown no limit for a while, and a
// capacity that grew is found in about as many round trips as the
// estimate doubles. It counts the round trip (or the calm ProbeTick).
// The caller holds l.mu.
func (l *Limiter) aimdStep() float64 {
	step := l.law.aimdIncrease
	if l.law.aimdProbe > 0 {
		l.calmRounds++
		probe := uint64(l.law.aimdProbe)
		doublings := (l.calmRounds - 1) / probe
		if l.estimate > l.backedFrom {
			l.pastRounds++
			if l.pastRounds > probe {
				doublings = max(doublings, l.pastRounds-probe)
			}
		} else {
			l.pastRounds = 0
		}
		step = max(step, l.estimate*(1-l.law.backoffRatio)/float64(probe))
		step *= float64(uint64(1) << min(doublings, 30))
		step = max(min(step, l.estimate/4), l.law.aimdIncrease)
	}
	return step
}

// slowStart is what the estimate is multiplied by on each round trip
// before the first decrease when AIMDProbe is set, and
// pacedSlowStartReach how many times the load the estimate may then be
// and still grow under PaceGrowth (slowStart without it; see aimdSample).
const (
	slowStart           = 1.5
	pacedSlowStartReach = 2
)
