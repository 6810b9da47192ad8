package adaptive

import (
	"context"
	"fmt"
	"time"
)

// DefaultPriority is the priority of Acquire and TryAcquire, the middle of
// the range: a Request above it is admitted ahead of them under
// contention, one below it after them.
const DefaultPriority uint8 = 128

// Request describes a request to admit with AcquireRequest or
// TryAcquireRequest. The zero Request is invalid: Weight must be set.
type Request struct {
	// Priority orders requests that wait for a slot, from 0 (the lowest)
	// to 255 (the highest); the zero value is the lowest, and Acquire and
	// TryAcquire use DefaultPriority. It is not a strict order: waiters
	// are admitted by weighted fair queueing, and at equal weight priority
	// p is admitted (256 − q)/(256 − p) times as often as priority q while
	// both wait (see the package documentation, Admission).
	Priority uint8
	// Weight is how many units of the limit the request holds while it is
	// in flight: the limit bounds the sum of the weights in flight. It
	// also multiplies the request's cost in the queue and its wait bound
	// (Config.TimeoutFactor). Must be in [1, the limit]; Acquire and
	// TryAcquire use 1.
	Weight int
}

var unitRequest = Request{Priority: DefaultPriority, Weight: 1}

// validate checks r's own fields.
func (r Request) validate() error {
	if r.Weight < 1 {
		return fmt.Errorf("%w: Request.Weight = %d, want ≥ 1", ErrInvalidRequest, r.Weight)
	}
	return nil
}

// tooHeavy reports a request heavier than the whole limit, floor(estimate)
// — the most the limiter admits at once whatever its ceiling — or than
// MaxLimit, the most it could ever admit. Such a request fails at once:
// waiting at the head of the queue, it would block every request behind it
// while the estimate, which grows only with load, could not grow. The
// caller holds l.mu.
func (l *Limiter) tooHeavy(weight int) error {
	whole := int(l.estimate)
	switch {
	case weight > l.cfg.MaxLimit:
		return fmt.Errorf("%w: Request.Weight = %d exceeds Config.MaxLimit = %d (and the limit %d): it can never be admitted",
			ErrTooHeavy, weight, l.cfg.MaxLimit, whole)
	case weight > whole:
		return fmt.Errorf("%w: Request.Weight = %d exceeds the whole limit %d (the estimate's floor, which grows only "+
			"with admitted load: size Config.InitialLimit for the heaviest request; Config.MaxLimit = %d)",
			ErrTooHeavy, weight, whole, l.cfg.MaxLimit)
	}
	return nil
}

// TryAcquireRequest admits r if its weight fits under the limit now, no
// waiter would be admitted before it (see AcquireRequest) and admission is
// not paused. It never waits. It returns ErrWouldWait when r does not fit
// or would queue, ErrPaused while admission is paused, and an error
// wrapping ErrInvalidRequest or ErrTooHeavy for a bad weight; on every
// error the Lease is the zero Lease. Neither an admission nor a refusal
// allocates.
func (l *Limiter) TryAcquireRequest(r Request) (Lease, error) {
	if err := r.validate(); err != nil {
		return Lease{}, err
	}
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	l.tick(now)
	if le, ok := l.admitNow(now, r); ok {
		l.mu.Unlock()
		return le, nil
	}
	l.queue.stats[r.Priority].refused++
	err := ErrWouldWait
	if e := l.tooHeavy(r.Weight); e != nil {
		err = e
	} else if l.paused(now) {
		err = ErrPaused
	}
	l.mu.Unlock()
	return Lease{}, err
}

// AcquireRequest admits r, waiting in the admission queue if it does not
// fit now. Waiters are admitted by weighted fair queueing on their
// virtual finish times (see the package documentation, Admission): an
// arrival goes ahead of the waiters only if it would finish before all of
// them, and a request of the same priority never overtakes one that
// waits. A freed slot is handed to the queue's head directly, so later
// calls cannot take it first; while the head does not fit, those behind
// it wait too.
//
// AcquireRequest returns at once with ErrPaused while admission is paused,
// with an error wrapping ErrTooHeavy when r.Weight exceeds the whole limit
// or Config.MaxLimit, with one wrapping ErrInvalidRequest for a weight
// below 1, and with ErrQueueFull when Config.MaxQueued callers already
// wait and every one of them would be admitted before r; when r would be
// admitted before the last of them, that one is evicted with ErrQueueFull
// and r takes its place. A waiting call ends with ErrWaitTimeout after
// Config.TimeoutFactor × r.Weight (when set; a slot handed over as that
// bound runs out is taken), with ctx.Err() if ctx ends first, with
// ErrPaused when a pause begins and with ErrQueueFull when evicted. In
// every error case no slot is held. A free slot is taken even with a done
// ctx.
func (l *Limiter) AcquireRequest(ctx context.Context, r Request) (Lease, error) {
	if err := r.validate(); err != nil {
		return Lease{}, err
	}
	le, w, err := l.enter(ctx, r)
	if w == nil {
		return le, err
	}
	return l.wait(ctx, w)
}

// enter is AcquireRequest's decision, taken under one lock: it admits r
// at once, refuses it, or queues it and returns its waiter, which the
// caller must wait on.
func (l *Limiter) enter(ctx context.Context, r Request) (Lease, *waiter, error) {
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tick(now)
	if le, ok := l.admitNow(now, r); ok {
		return le, nil, nil
	}
	c := &l.queue.stats[r.Priority]
	if err := l.tooHeavy(r.Weight); err != nil {
		c.refused++
		return Lease{}, nil, err
	}
	if l.paused(now) {
		c.refused++
		return Lease{}, nil, ErrPaused
	}
	rc := cost(r.Priority, r.Weight)
	var evict *waiter
	if l.queue.len >= l.cfg.MaxQueued {
		if l.queue.len > 0 {
			evict = l.queue.worse(r.Priority, rc)
		}
		if evict == nil {
			c.refused++
			return Lease{}, nil, ErrQueueFull
		}
	}
	if err := ctx.Err(); err != nil {
		c.cancelled++
		return Lease{}, nil, err
	}
	w := l.getWaiter()
	w.priority, w.weight, w.cost, w.since = r.Priority, r.Weight, rc, now
	if evict != nil {
		l.queue.remove(evict)
		l.queue.stats[evict.priority].refused++
		evict.err = ErrQueueFull
		evict.ready <- struct{}{}
	}
	l.queue.push(w)
	l.peak = max(l.peak, l.inflight+l.queue.weight)
	if evict != nil {
		l.dispatch(now) // the evicted waiter may have blocked the head
	}
	return Lease{}, w, nil
}

// admitNow admits r at once if it fits under the limit, admission is not
// paused and r would come before every waiter. A weight that fits is never
// too heavy: the limit is at most the estimate's floor. The caller holds
// l.mu.
func (l *Limiter) admitNow(now time.Time, r Request) (Lease, bool) {
	if !l.admissible(now, r.Weight) {
		return Lease{}, false
	}
	if l.queue.len > 0 {
		rc := cost(r.Priority, r.Weight)
		if !l.queue.precedes(r.Priority, rc) {
			return Lease{}, false
		}
		l.queue.admitAhead(r.Priority, rc)
	}
	le := l.admit(now, r.Priority, r.Weight)
	l.peak = max(l.peak, l.inflight+l.queue.weight)
	return le, true
}
