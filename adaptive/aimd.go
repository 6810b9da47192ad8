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
	l.propose(l.estimate+l.cfg.AIMDIncrease, load)
}
