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
	// in flight: the sum of the weights in flight stays within the limit,
	// except that a request heavier than the limit runs alone, and never
	// passes the hard bound (see the package documentation, Admission). It
	// also multiplies the request's cost in the queue and its wait bound
	// (Config.TimeoutFactor). Must be in [1, Config.MaxLimit]; Acquire and
	// TryAcquire use 1.
	Weight int
}

var unitRequest = Request{Priority: DefaultPriority, Weight: 1}

// The errors for a Request.Weight below 1, one for 0 (the zero Request's
// weight) and one for a negative weight. They are made once, so that
// refusing a bad request allocates nothing.
var (
	errWeightZero     = fmt.Errorf("%w: Request.Weight = 0, want ≥ 1 (the zero Request has no weight: set it)", ErrInvalidRequest)
	errWeightNegative = fmt.Errorf("%w: Request.Weight is negative, want ≥ 1", ErrInvalidRequest)
)

// validate checks r's own fields.
func (r Request) validate() error {
	switch {
	case r.Weight == 0:
		return errWeightZero
	case r.Weight < 0:
		return errWeightNegative
	}
	return nil
}

// tooHeavyError is the error for a weight above MaxLimit. It formats its
// message only when read, so making one costs a single small allocation.
type tooHeavyError struct {
	weight, maxLimit int
}

func (e *tooHeavyError) Error() string {
	return fmt.Sprintf("%v: Request.Weight = %d exceeds Config.MaxLimit = %d: it can never be admitted", ErrTooHeavy, e.weight, e.maxLimit)
}

func (e *tooHeavyError) Unwrap() error { return ErrTooHeavy }

// errTooHeavyFor returns the error for weight, a weight above MaxLimit. It
// keeps the last one it made and returns it again for the same weight, so
// refusing one weight over and over allocates nothing; a weight other than
// the last costs one allocation. The caller holds l.mu.
func (l *Limiter) errTooHeavyFor(weight int) error {
	if e := l.errTooHeavy; e == nil || e.weight != weight {
		l.errTooHeavy = &tooHeavyError{weight: weight, maxLimit: l.cfg.MaxLimit}
	}
	return l.errTooHeavy
}

// newErrWaitTimeout returns the error for a wait that TimeoutFactor ended,
// made once per limiter (New), so that the timeout allocates nothing.
func newErrWaitTimeout(factor time.Duration) error {
	return fmt.Errorf("%w (Config.TimeoutFactor = %v per unit of weight)", ErrWaitTimeout, factor)
}

// tooHeavy reports a weight above MaxLimit: the hard bound never exceeds
// MaxLimit, so such a request could never run. Every other weight may
// run, alone if it must. It reads only the configuration, so it runs
// before any sum with the weight is taken.
func (l *Limiter) tooHeavy(weight int) bool { return weight > l.cfg.MaxLimit }

// TryAcquireRequest admits r if it fits now (see the package documentation,
// Admission: within the limit, or alone within the hard bound when nothing
// is in flight), no waiter that could run would be admitted before it (see
// AcquireRequest) and admission is not paused. It never waits. It returns
// ErrWouldWait when r does not fit or would queue, a *PauseError (matching
// ErrPaused) while admission is paused, an error wrapping ErrTooHeavy when
// r.Weight exceeds Config.MaxLimit and one wrapping ErrInvalidRequest when
// it is below 1; on every error the Lease is the zero Lease. Neither an
// admission nor a refusal allocates, except an ErrTooHeavy refusal of a
// weight other than the last one refused (see ErrTooHeavy). Safe for
// concurrent use.
func (l *Limiter) TryAcquireRequest(r Request) (Lease, error) {
	if err := r.validate(); err != nil {
		return Lease{}, err
	}
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	c := &l.queue.stats[r.Priority]
	if l.tooHeavy(r.Weight) {
		c.refused++
		err := l.errTooHeavyFor(r.Weight)
		l.mu.Unlock()
		return Lease{}, err
	}
	l.tick(now)
	if le, ok := l.admitNow(now, r); ok {
		l.mu.Unlock()
		return le, nil
	}
	c.refused++
	err := ErrWouldWait
	if l.paused(now) {
		err = l.pauseErr
	}
	l.mu.Unlock()
	return Lease{}, err
}

// AcquireRequest admits r, waiting in the admission queue if it does not fit
// now. Waiters are admitted by weighted fair queueing on their virtual
// finish times (see the package documentation, Admission): an arrival goes
// ahead of the waiters only if it would finish before all of them, and a
// request of the same priority never overtakes one that waits. A freed slot
// is handed to the queue's head directly, so later calls cannot take it
// first; while the head does not fit, those behind it wait too. The
// exception is a waiter heavier than the hard bound (the ceiling), which
// could not run even alone: it waits for the bound to rise without holding
// back the others, and its weight counts in the queued weight and in
// TakePeak, so a fleet node's share can grow to it.
//
// AcquireRequest returns at once with a *PauseError (matching ErrPaused)
// while admission is paused, with an error wrapping ErrTooHeavy when
// r.Weight exceeds Config.MaxLimit, with one wrapping ErrInvalidRequest for
// a weight below 1, and with ErrQueueFull when Config.MaxQueued callers
// already wait and every one of them would be admitted before r; when r
// would be admitted before the last of them, that one is evicted with
// ErrQueueFull and r takes its place. A waiting call ends with an error
// wrapping ErrWaitTimeout after Config.TimeoutFactor × r.Weight (when
// set; a slot handed over as that bound runs out is taken), with
// ctx.Err() if ctx ends first, with the pause's *PauseError when a pause
// begins and with ErrQueueFull when evicted; a refusal in the instant the
// wait ends returns, and counts in PriorityStats as, ctx.Err() or that
// error. In every error case no slot is held. A free slot is taken even
// with a done ctx. Refusing allocates nothing, except an ErrTooHeavy
// refusal of a weight other than the last one refused (see ErrTooHeavy);
// a call that waits
// allocates nothing once the limiter's pool of waiters is warm. Safe for
// concurrent use.
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
	c := &l.queue.stats[r.Priority]
	if l.tooHeavy(r.Weight) {
		c.refused++
		return Lease{}, nil, l.errTooHeavyFor(r.Weight)
	}
	l.tick(now)
	if le, ok := l.admitNow(now, r); ok {
		return le, nil, nil
	}
	if l.paused(now) {
		c.refused++
		return Lease{}, nil, l.pauseErr
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
		l.queue.reject(evict, ErrQueueFull)
	}
	l.queue.resume(r.Priority, l.hardBound(now))
	l.queue.push(w)
	l.notePeak()
	if evict != nil {
		l.dispatch(now) // the evicted waiter may have blocked the head
	}
	return Lease{}, w, nil
}

// admitNow admits r at once if it fits (see fits), admission is not
// paused and r would come before every waiter that could run. The caller
// holds l.mu and has checked that r.Weight ≤ MaxLimit.
func (l *Limiter) admitNow(now time.Time, r Request) (Lease, bool) {
	if !l.fits(now, r.Weight) {
		return Lease{}, false
	}
	if l.queue.len > 0 {
		bound := l.hardBound(now)
		l.queue.resume(r.Priority, bound)
		rc := cost(r.Priority, r.Weight)
		if !l.queue.precedes(r.Priority, rc, bound) {
			return Lease{}, false
		}
		l.queue.admitAhead(r.Priority, rc)
	}
	le := l.admit(now, r.Priority, r.Weight)
	l.notePeak()
	return le, true
}
