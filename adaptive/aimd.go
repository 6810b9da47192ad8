package adaptive

import "time"

// aimdSample applies one clean sample under AIMD: back off when it was
// slower than LatencyTarget, otherwise add AIMDIncrease (subject to the
// utilization guard). The caller holds l.mu.
func (l *Limiter) aimdSample(now time.Time, rec *leaseRecord, rtt time.Duration, load int) {
	if l.cfg.LatencyTarget > 0 && rtt > l.cfg.LatencyTarget {
		l.backoff(now, rec, l.cfg.AIMDBackoff)
		return
	}
	l.propose(l.estimate+l.aimdStep(), load)
}

// aimdStep is what AIMD adds on this round trip: AIMDIncrease, doubled
// once for every AIMDProbe round trips since the last drop or backoff
// when AIMDProbe is set (every round trip until the first drop), and at
// most a quarter of the estimate (but never less than AIMDIncrease). It
// counts the round trip. The caller holds l.mu.
func (l *Limiter) aimdStep() float64 {
	step := l.cfg.AIMDIncrease
	if l.cfg.AIMDProbe > 0 {
		period := uint64(l.cfg.AIMDProbe)
		if l.drops == 0 {
			period = 1 // no capacity hit yet: double every round trip
		}
		doublings := min(l.calmRounds/period, 30)
		step = max(min(step*float64(uint64(1)<<doublings), l.estimate/4), l.cfg.AIMDIncrease)
		l.calmRounds++
	}
	return step
}
