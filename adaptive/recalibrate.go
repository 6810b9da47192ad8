package adaptive

import (
	"math"
	"time"
)

// recalPhase is where the limiter is in a recalibration.
type recalPhase uint8

const (
	recalIdle     recalPhase = iota // normal operation
	recalDraining                   // limit pinned; leases admitted before the pin still run
	recalProbing                    // limit pinned; window emptied; collecting fresh samples
)

// recalState tracks the periodic rttNoload refresh. Guarded by the
// limiter's lock.
type recalState struct {
	phase     recalPhase
	next      time.Time // recalIdle: when the next recalibration starts
	pinnedAt  time.Time // otherwise: when this recalibration pinned the limit
	seq       uint64    // bumped on every phase change; leases remember it
	oldLeases int       // recalDraining: leases admitted before the pin, still in flight
	samples   int       // recalProbing: fresh samples taken so far
	pin       uint64    // counts the pins, for the timer of each (see pinExpired)
}

// active reports whether a recalibration is under way; the limit is
// pinned to MinLimit and the estimate frozen while it is.
func (r *recalState) active() bool { return r.phase != recalIdle }

// schedule sets the start of the next recalibration to now + Interval ±
// Jitter. It does nothing when recalibration is off.
func (r *recalState) schedule(cfg *Config, now time.Time) {
	rc := cfg.Recalibration
	if rc.Interval <= 0 {
		return
	}
	r.next = now.Add(jittered(rc.Interval, rc.Jitter, cfg.Rand.Float64()))
}

// jittered returns interval + (2u − 1)·jitter for u in [0, 1), saturated
// at the longest Duration: an interval near it, meant as "hardly ever",
// would otherwise wrap to a time in the past and recalibrate at once.
// jitter is in [0, interval), as validate requires.
func jittered(interval, jitter time.Duration, u float64) time.Duration {
	j := (2*u - 1) * float64(jitter)
	switch {
	case j >= math.MaxInt64:
		return math.MaxInt64
	case j > 0 && time.Duration(j) > math.MaxInt64-interval:
		return math.MaxInt64
	}
	return interval + time.Duration(j)
}

// tick starts a recalibration when one is due, and abandons one that has
// pinned the limit for MaxPinned. The caller holds l.mu.
func (l *Limiter) tick(now time.Time) {
	rc := &l.cfg.Recalibration
	if rc.Interval <= 0 {
		return
	}
	if l.recal.active() {
		if !now.Before(l.recal.pinnedAt.Add(rc.MaxPinned)) {
			l.endRecalibration(now)
			l.dispatch(now)
		}
		return
	}
	if now.Before(l.recal.next) {
		return
	}
	l.recal.phase = recalDraining
	l.recal.seq++
	l.recal.pinnedAt = now
	l.recal.oldLeases = l.leases
	l.recal.pin++
	l.watchPin(l.recal.pin, rc.MaxPinned)
	if l.recal.oldLeases == 0 {
		l.startProbe()
	}
}

// watchPin looks at pin, by a runtime timer, after d: callers queued
// behind a lease that is never settled would otherwise wait for some
// other call to tick when MaxPinned has passed. Each look takes a timer
// of its own, never stopped (a stale one finds another pin, or none, and
// does nothing), so that no timer outlives the goroutine's
// testing/synctest bubble in the limiter's keeping. The caller holds
// l.mu.
func (l *Limiter) watchPin(pin uint64, d time.Duration) {
	time.AfterFunc(d, func() { l.pinExpired(pin) })
}

// pinExpired ends the recalibration of pin if it still runs and has
// pinned the limit for MaxPinned by the limiter's Clock (see tick), and
// admits the waiters that fit then; while the Clock says it has time
// left (a coarse clock), it looks again then.
func (l *Limiter) pinExpired(pin uint64) {
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.recal.active() || l.recal.pin != pin {
		return
	}
	l.tick(now)
	if l.recal.active() && l.recal.pin == pin {
		left := l.recal.pinnedAt.Add(l.cfg.Recalibration.MaxPinned).Sub(now)
		l.watchPin(pin, max(left, time.Millisecond))
	}
}

func (l *Limiter) startProbe() {
	l.recal.phase = recalProbing
	l.recal.seq++
	l.recal.samples = 0
	l.window.reset()
	l.band.base = 0 // the probes set the baseline afresh
	l.queueLast = 0 // probes at MinLimit are no round trips at the estimate
}

// recalObserve accounts a lease settled during a recalibration. The
// estimate is frozen meanwhile: samples at pinned concurrency say nothing
// about capacity. Drops still back off (the caller handles them).
// The caller holds l.mu.
func (l *Limiter) recalObserve(now time.Time, rec *leaseRecord, o outcome, rtt time.Duration) {
	switch l.recal.phase {
	case recalDraining:
		if rec.recalSeq != l.recal.seq {
			l.recal.oldLeases--
			if l.recal.oldLeases == 0 {
				l.startProbe()
			}
		}
	case recalProbing:
		if rec.recalSeq != l.recal.seq || o != released {
			return
		}
		l.window.push(rtt)
		l.recal.samples++
		if l.recal.samples >= l.cfg.Recalibration.Samples {
			l.endRecalibration(now)
		}
	}
}

// endRecalibration unpins the limit and schedules the next recalibration.
// The caller holds l.mu and dispatches to waiters afterwards.
func (l *Limiter) endRecalibration(now time.Time) {
	l.recal.phase = recalIdle
	l.recal.seq++
	l.recal.schedule(&l.cfg, now)
}
