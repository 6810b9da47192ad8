package adaptive

import (
	"context"
	"math"
	"time"
)

// waiter is one AcquireRequest call parked in the admission queue. The
// granter sets lease or err and then sends on ready, all with the
// limiter's lock held; ready has room for one signal, so the send never
// blocks. Waiters are recycled through the limiter's own pool, so a
// waiting call allocates nothing once the pool is warm; the pool is per
// limiter so that a waiter's channel and timer never cross from one
// limiter's goroutines to another's (a testing/synctest bubble forbids
// that).
type waiter struct {
	prev, next *waiter // the waiter's place in its priority's FIFO
	queued     bool
	priority   uint8
	weight     int
	cost       uint64 // weight·(256 − priority)
	seq        uint64 // arrival order, for ties
	since      time.Time
	waited     time.Duration // set when granted: the time spent queued
	lease      Lease
	err        error
	ready      chan struct{}
	timer      *time.Timer // bounds the wait when Config.TimeoutFactor is set; reused
}

func newWaiter() any { return &waiter{ready: make(chan struct{}, 1)} }

func (l *Limiter) getWaiter() *waiter { return l.waiters.Get().(*waiter) }

// putWaiter recycles w; its ready channel must be empty and its timer
// stopped.
func (l *Limiter) putWaiter(w *waiter) {
	w.lease, w.err = Lease{}, nil
	l.waiters.Put(w)
}

// waitTimeout is how long a queued request of weight w may wait:
// Config.TimeoutFactor·w, or 0 for no bound of its own.
func (l *Limiter) waitTimeout(w int) time.Duration {
	f := l.cfg.TimeoutFactor
	if f <= 0 {
		return 0
	}
	if int64(w) > math.MaxInt64/int64(f) {
		return math.MaxInt64
	}
	return f * time.Duration(w)
}

// wait parks the calling goroutine until w is granted a lease, refused,
// timed out after Config.TimeoutFactor·weight or cancelled with ctx. w is
// queued; the caller does not hold l.mu.
func (l *Limiter) wait(ctx context.Context, w *waiter) (Lease, error) {
	var expired <-chan time.Time
	if d := l.waitTimeout(w.weight); d > 0 {
		if w.timer == nil {
			w.timer = time.NewTimer(d)
		} else {
			w.timer.Reset(d)
		}
		expired = w.timer.C
	}
	var err error
	timedOut := false
	select {
	case <-w.ready:
		if expired != nil {
			w.timer.Stop()
		}
		le, err := w.lease, w.err
		l.putWaiter(w)
		return le, err
	case <-ctx.Done():
		err = ctx.Err()
	case <-expired:
		err, timedOut = l.errWaitTimeout, true
	}
	if expired != nil {
		w.timer.Stop()
	}
	if l.afterWaitCancel != nil {
		l.afterWaitCancel()
	}

	now := l.cfg.Clock.Now()
	l.mu.Lock()
	if w.queued {
		l.queue.remove(w)
		l.queue.stats[w.priority].leave(timedOut)
		// w may have headed the queue without fitting: those behind it
		// may fit now.
		l.dispatch(now)
		l.mu.Unlock()
		l.putWaiter(w)
		return Lease{}, err
	}
	l.mu.Unlock()
	// A grant or a refusal raced with the end of the wait; its signal is
	// already buffered. A slot handed over as the wait bound ran out is
	// kept: it came within the bound, give or take the moment it took to
	// see it, and giving it back would leave the waiter's flow charged
	// (its virtual time advanced at the grant) for an admission it did not
	// get, so that waiters timing out as slots free up would skew the
	// queue's shares. A caller whose context ended gives its slot back.
	// A refusal in that instant returns what the caller saw end, and is
	// counted as that.
	<-w.ready
	le := w.lease
	switch {
	case le.rec != nil && timedOut:
		l.putWaiter(w)
		return le, nil
	case le.rec != nil:
		l.mu.Lock()
		l.queue.stats[w.priority].ungrant(w.weight, w.waited)
		l.mu.Unlock()
		le.Ignore()
	default:
		l.mu.Lock()
		l.queue.stats[w.priority].unrefuse(timedOut)
		l.mu.Unlock()
	}
	l.putWaiter(w)
	return Lease{}, err
}
