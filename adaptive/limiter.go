package adaptive

import (
	"context"
	"sync"
	"time"
)

// Limiter is an adaptive concurrency limiter: it admits at most Limit()
// requests at once and moves its estimate of the upstream's capacity as
// leases settle. Create it with New. All methods are safe for concurrent
// use; each takes one short lock and none starts a goroutine. An admission
// and its Release cost about 200ns together and do not allocate; neither
// does a rejection.
type Limiter struct {
	cfg Config // defaulted and validated; read-only after New

	mu           sync.Mutex
	estimate     float64
	ceiling      int
	hasCeiling   bool
	ceilingUntil time.Time // the ceiling is 0 from then on; zero: no expiry
	cut          int       // slots drops have taken off the ceiling; < ceiling unless 0
	cutCalm      int       // round trips without a drop since cut last changed
	inflight     int
	peak         int // most in flight + queued since the last TakePeak
	peerInflight int
	pausedUntil  time.Time
	drops        uint64
	backoffEpoch uint64        // bumped by every multiplicative decrease
	lastBackoff  time.Time     // when the last multiplicative decrease happened
	calmRounds   uint64        // AIMD round trips since the last drop or backoff
	round        uint64        // bumped by every law update: one per round trip
	roundMin     time.Duration // fastest clean sample since the last update; 0 if none
	window       minWindow
	recal        recalState
	free         *leaseRecord
	queue        waitQueue

	// onAdmit, when set by a test, is called with the lock held after every
	// admission with the new in-flight count and the limit it was admitted
	// under.
	onAdmit func(inflight, limit int)
	// afterWaitCancel, when set by a test, runs in Acquire between seeing
	// the context end and taking the lock to leave the queue.
	afterWaitCancel func()
}

// New returns a Limiter configured by cfg, or an error naming every
// out-of-range field of cfg.
func New(cfg Config) (*Limiter, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	l := &Limiter{
		cfg:      cfg,
		estimate: float64(cfg.InitialLimit),
		window:   newMinWindow(cfg.RTTWindow),
	}
	l.recal.schedule(&l.cfg, cfg.Clock.Now())
	return l, nil
}

// TryAcquire admits a request if a slot is free, nobody is queued ahead
// and admission is not paused. It never waits. On false the Lease is the
// zero Lease.
func (l *Limiter) TryAcquire() (Lease, bool) {
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	l.tick(now)
	if l.queue.len > 0 || !l.admissible(now) {
		l.mu.Unlock()
		return Lease{}, false
	}
	le := l.admit(now)
	l.peak = max(l.peak, l.inflight)
	l.mu.Unlock()
	return le, true
}

// Acquire admits a request, waiting in FIFO order for a slot if none is
// free. It returns at once with ErrPaused while admission is paused, with
// ErrQueueFull when Config.MaxQueued callers already wait, and with
// ctx.Err() if ctx is done before a slot is handed over; in every error
// case no slot is held. A slot that frees up is handed to the oldest
// waiter directly, so later TryAcquire calls cannot overtake it.
func (l *Limiter) Acquire(ctx context.Context) (Lease, error) {
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	l.tick(now)
	if l.queue.len == 0 && l.admissible(now) {
		le := l.admit(now)
		l.peak = max(l.peak, l.inflight)
		l.mu.Unlock()
		return le, nil
	}
	switch {
	case l.paused(now):
		l.mu.Unlock()
		return Lease{}, ErrPaused
	case l.queue.len >= l.cfg.MaxQueued:
		l.mu.Unlock()
		return Lease{}, ErrQueueFull
	}
	if err := ctx.Err(); err != nil {
		l.mu.Unlock()
		return Lease{}, err
	}
	w := getWaiter()
	l.queue.pushBack(w)
	l.peak = max(l.peak, l.inflight+l.queue.len)
	l.mu.Unlock()

	select {
	case <-w.ready:
		le, err := w.lease, w.err
		putWaiter(w)
		return le, err
	case <-ctx.Done():
	}
	if l.afterWaitCancel != nil {
		l.afterWaitCancel()
	}

	l.mu.Lock()
	if w.queued {
		l.queue.remove(w)
		l.mu.Unlock()
		putWaiter(w)
		return Lease{}, ctx.Err()
	}
	l.mu.Unlock()
	// A grant or a rejection raced with the cancellation; its signal is
	// already buffered. Give a granted slot back.
	<-w.ready
	le := w.lease
	putWaiter(w)
	le.Ignore()
	return Lease{}, ctx.Err()
}

// limit is the effective limit at now: floor(estimate), or MinLimit while
// recalibrating, capped by the ceiling less the slots drops have cut from
// it, and 0 once the ceiling's deadline has passed. The caller holds l.mu.
func (l *Limiter) limit(now time.Time) int {
	n := int(l.estimate)
	if l.recal.active() {
		n = l.cfg.MinLimit
	}
	if l.hasCeiling && l.ceiling-l.cut < n {
		n = max(l.ceiling-l.cut, 0)
	}
	if l.ceilingExpired(now) {
		n = 0
	}
	return n
}

// ceilingExpired reports whether the ceiling's deadline has passed at now,
// by the monotonic reading of now and, when both times carry one, by the
// wall clock too: a suspended machine's monotonic clock stands still while
// its wall clock does not. The caller holds l.mu.
func (l *Limiter) ceilingExpired(now time.Time) bool {
	if l.ceilingUntil.IsZero() {
		return false
	}
	return !now.Before(l.ceilingUntil) || !now.Round(0).Before(l.ceilingUntil.Round(0))
}

func (l *Limiter) paused(now time.Time) bool {
	return now.Before(l.pausedUntil)
}

// admissible reports whether one more lease fits now, ignoring the queue.
// The caller holds l.mu.
func (l *Limiter) admissible(now time.Time) bool {
	return l.inflight < l.limit(now) && !l.paused(now)
}

// admit takes a slot and returns its lease. The caller holds l.mu and has
// checked admissible.
func (l *Limiter) admit(now time.Time) Lease {
	rec := l.newRecord()
	l.inflight++
	rec.start = now
	rec.load = l.inflight + l.peerInflight
	rec.backoffEpoch = l.backoffEpoch
	rec.recalSeq = l.recal.seq
	rec.round = l.round
	rec.dropSeen = false
	if l.onAdmit != nil {
		l.onAdmit(l.inflight, l.limit(now))
	}
	return Lease{rec: rec, gen: rec.gen}
}

// dispatch hands free slots to queued waiters, oldest first. The caller
// holds l.mu and calls it after anything that may raise the limit.
func (l *Limiter) dispatch(now time.Time) {
	for l.queue.len > 0 && l.admissible(now) {
		l.queue.grant(l.admit(now))
	}
}

// settle ends le's hold on its slot, once. rtt < 0 means the round trip
// lasted from admission to now.
func (l *Limiter) settle(le Lease, o outcome, rtt time.Duration) {
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	rec := le.rec
	if rec.gen != le.gen {
		l.mu.Unlock()
		return
	}
	rec.gen++
	load := max(rec.load, l.inflight+l.peerInflight)
	l.inflight--
	if rtt < 0 {
		rtt = now.Sub(rec.start)
	}
	if rec.dropSeen {
		o = ignored // its drop was counted when observed
	}
	l.observe(now, rec, o, load, rtt)
	l.freeRecord(rec)
	l.tick(now)
	l.dispatch(now)
	l.mu.Unlock()
}

// cutRecovery is how many round trips without a drop give back one slot
// that a drop cut from the ceiling.
const cutRecovery = 5
