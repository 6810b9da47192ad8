package adaptive

import (
	"math"
	"time"
)

// Snapshot is a consistent view of a Limiter's state, taken under one lock.
type Snapshot struct {
	// Limit is the inferred limit: min(ceiling − the slots drops cut,
	// floor(Estimate)), or MinLimit instead of floor(Estimate) while
	// recalibrating; 0 once the ceiling's deadline has passed.
	Limit int
	// Estimate is the inferred capacity of the upstream (l_local).
	Estimate float64
	// Inflight is the sum of the weights of the leases not yet settled:
	// the number of leases when every request weighs 1. Limit bounds it at
	// every admission but that of a request heavier than Limit, admitted
	// alone within the ceiling (see the package documentation, Admission).
	Inflight int
	// Leases is the number of leases not yet settled.
	Leases int
	// Queued is the number of Acquire calls waiting for a slot, and
	// QueuedWeight the sum of their weights (math.MaxInt if that sum does
	// not fit an int).
	Queued       int
	QueuedWeight int
	// PeerInflight is the last value given to SetPeerInflight.
	PeerInflight int
	// Ceiling is the ceiling set by SetCeiling; meaningful only when
	// HasCeiling is true.
	Ceiling    int
	HasCeiling bool
	// CeilingUntil is the ceiling's deadline (SetCeilingUntil); zero when
	// it has none.
	CeilingUntil time.Time
	// RTTNoload is the minimum round-trip time over the window, or 0 before
	// the first sample (and right after a recalibration empties it).
	RTTNoload time.Duration
	// Tolerance is how much slower than RTTNoload Gradient2 lets a round
	// trip be before it shrinks the estimate: Config.Tolerance, or, when
	// that is zero, the measured noise band (2 until three round trips
	// have been seen; see Config.Tolerance). The band applies to a round's
	// fastest sample against the least fastest sample since the last new
	// baseline, which may lie below RTTNoload once the window has
	// forgotten it, and a round of a load under the utilization threshold
	// is held to at least 2. It is meaningful while Law is Gradient2;
	// under AIMD it does not apply.
	Tolerance float64
	// Drops is the number of leases settled as drops, including samples
	// slower than MaxHealthyRTT.
	Drops uint64
	// Rounds is how many times the law has moved on a clean sample since
	// New: about one per round trip, 0 before the first clean sample
	// (samples taken while recalibrating do not count). With Drops it
	// tells whether the estimate rests on the limiter's own samples
	// (ProbeTick can also move it, on this limiter's own admissions or
	// requests held while others wait).
	Rounds uint64
	// PausedUntil is when the latest pause ends; admission is paused while
	// the clock is before it.
	PausedUntil time.Time
	// Recalibrating is true while the limit is pinned for a recalibration.
	Recalibrating bool
	// Law is the law moving the estimate: Gradient2 or AIMD. Under Auto
	// it is Gradient2 until the upstream shows it refuses without
	// queueing, AIMD (FlatLatency's law) from then on.
	Law Law
	// LatencyTarget is the latency target Law applies, 0 if none:
	// Config.LatencyTarget, or under Gradient2 the one derived from
	// MaxHealthyRTT; none at or above MaxHealthyRTT (see
	// Config.LatencyTarget).
	LatencyTarget time.Duration
}

// Snapshot returns the limiter's state at one instant.
func (l *Limiter) Snapshot() Snapshot {
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	noload, _ := l.window.min()
	return Snapshot{
		Limit:         l.limit(now),
		Estimate:      l.estimate,
		Inflight:      l.inflight,
		Leases:        l.leases,
		Queued:        l.queue.len,
		QueuedWeight:  clampCount(l.queue.weight),
		PeerInflight:  l.peerInflight,
		Ceiling:       l.ceiling,
		HasCeiling:    l.hasCeiling,
		CeilingUntil:  l.ceilingUntil,
		RTTNoload:     noload,
		Tolerance:     l.tolerance(),
		Drops:         l.drops,
		Rounds:        l.round,
		PausedUntil:   l.pausedUntil,
		Recalibrating: l.recal.active(),
		Law:           l.law.law,
		LatencyTarget: l.law.latencyTarget,
	}
}

// Limit returns the inferred limit: the most weight admission allows in
// flight at once (the most leases, when every request weighs 1), but for
// a request heavier than it, which runs alone within the ceiling (see the
// package documentation, Admission). The weight in flight may exceed it
// after it falls.
func (l *Limiter) Limit() int {
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limit(now)
}

// MaxLimit returns Config.MaxLimit, its default filled in: the most
// weight the limiter ever has in flight, and the heaviest Request it
// admits (a heavier one fails with ErrTooHeavy). Safe for concurrent use.
func (l *Limiter) MaxLimit() int { return l.cfg.MaxLimit }

// Estimate returns the inferred capacity of the upstream, in
// [MinLimit, MaxLimit].
func (l *Limiter) Estimate() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.estimate
}

// Inflight returns the sum of the weights of the leases admitted and not
// yet settled: the number of such leases when every request weighs 1.
func (l *Limiter) Inflight() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inflight
}

// Queued returns the number of Acquire calls waiting for a slot.
func (l *Limiter) Queued() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.queue.len
}

// RTTNoload returns the minimum round-trip time over the window, or 0
// before the first sample.
func (l *Limiter) RTTNoload() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	d, _ := l.window.min()
	return d
}

// Drops returns the number of leases settled as drops so far.
func (l *Limiter) Drops() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.drops
}

// TakePeak returns the most weight in flight plus weight queued at any
// moment since the previous call (or since New), at least the current
// sum, and starts a new period; with every request of weight 1 these are
// counts of leases and callers. Waiters heavier than the ceiling count. A
// fleet node reports it as its demand, so shares follow weighted demand
// and a node that served a request at any time during a heartbeat
// interval keeps a share. math.MaxInt if the sum does not fit an int.
func (l *Limiter) TakePeak() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := int64(l.inflight) + l.queue.weight
	p := max(l.peak, now)
	l.peak = now
	return clampCount(p)
}

// clampCount converts a sum of weights to an int, math.MaxInt if it does
// not fit (only where int has 32 bits).
func clampCount(v int64) int {
	return int(min(v, math.MaxInt))
}
