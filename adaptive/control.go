package adaptive

import (
	"math"
	"time"
)

// SetCeiling caps the effective limit at n, on top of the estimate: the
// limit becomes min(n, floor(estimate)). A fleet node sets it to its share
// of the global limit, and to 0 when fenced; 0 admits nothing and a
// negative n counts as 0. Lowering the ceiling never revokes leases
// already admitted; raising it hands freed slots to queued waiters at once.
// There is no ceiling until the first call.
func (l *Limiter) SetCeiling(n int) {
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	l.ceiling, l.hasCeiling = max(n, 0), true
	l.dispatch(now)
	l.mu.Unlock()
}

// ClearCeiling removes the ceiling set by SetCeiling, so the limit is
// floor(estimate) again, and hands freed slots to queued waiters.
func (l *Limiter) ClearCeiling() {
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	l.ceiling, l.hasCeiling = 0, false
	l.dispatch(now)
	l.mu.Unlock()
}

// SetPeerInflight tells the limiter how many requests the rest of the
// fleet has in flight against the same upstream (from the last heartbeat
// reply). The utilization guard then judges each sample by the fleet's
// load — own in-flight plus n — rather than by own in-flight alone.
// It does not change admission. A negative n counts as 0. Defaults to 0,
// which is right for a lone process.
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
	l.estimate = l.clampEstimate(v)
	l.dispatch(now)
	l.mu.Unlock()
}

// PauseUntil refuses admission until t, as an upstream's Retry-After
// asks: TryAcquire returns false and Acquire returns ErrPaused, and
// callers already waiting in Acquire are released with ErrPaused. Leases
// already admitted are unaffected. A pause only ever extends: a t before
// the current pause end is ignored. Admission resumes by itself once the
// clock passes t.
func (l *Limiter) PauseUntil(t time.Time) {
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	if t.After(l.pausedUntil) {
		l.pausedUntil = t
	}
	if l.paused(now) {
		l.queue.rejectAll(ErrPaused)
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
