package adaptive

import "time"

// PriorityStats counts what happened to the requests of one priority since
// the limiter was created. Counts are of calls, whatever their weight,
// except AdmittedWeight.
type PriorityStats struct {
	Priority uint8
	// Admitted counts the leases handed out, at once or after a wait;
	// AdmittedWeight sums their weights.
	Admitted       uint64
	AdmittedWeight uint64
	// Refused counts the calls that ended without a lease because of the
	// limiter: TryAcquireRequest finding no room (ErrWouldWait), a full
	// queue (ErrQueueFull, on arrival or evicted later by a request that
	// finishes earlier), a pause (ErrPaused) and a weight above
	// Config.MaxLimit (ErrTooHeavy). Each call counts once, under the
	// error it returned: a waiter refused in the instant its context ended
	// or its wait bound ran out returns, and counts as, that.
	Refused uint64
	// TimedOut counts the queued calls whose Config.TimeoutFactor·weight
	// wait ran out (ErrWaitTimeout).
	TimedOut uint64
	// Cancelled counts the calls whose context ended before a slot was
	// handed over (they return ctx.Err()).
	Cancelled uint64
	// Queued is the number of calls waiting now.
	Queued int
	// Waits counts the admissions that waited in the queue, and WaitTime
	// sums how long they waited, by the limiter's clock; WaitTime/Waits is
	// the mean wait of a queued request that was admitted.
	Waits    uint64
	WaitTime time.Duration
}

// priorityCounters are one priority's PriorityStats counters, kept in a
// fixed array of 256 in the queue: counting costs an increment under the
// lock the admission already holds, and nothing is allocated.
type priorityCounters struct {
	admitted, admittedWeight uint64
	refused, timedOut        uint64
	cancelled, waits         uint64
	waitTime                 time.Duration
}

// leave counts a queued call that left without a lease.
func (c *priorityCounters) leave(timedOut bool) {
	if timedOut {
		c.timedOut++
	} else {
		c.cancelled++
	}
}

// ungrant moves a lease granted to a call whose context had already ended
// from the admitted counts to cancelled.
func (c *priorityCounters) ungrant(weight int, waited time.Duration) {
	c.admitted--
	c.admittedWeight -= uint64(weight)
	c.waits--
	c.waitTime -= waited
	c.cancelled++
}

// unrefuse moves a call refused in the instant its wait ended, which
// returns ctx.Err() or ErrWaitTimeout, from refused to cancelled or timed
// out.
func (c *priorityCounters) unrefuse(timedOut bool) {
	c.refused--
	c.leave(timedOut)
}

// PriorityStats returns the counters of every priority that has seen a
// request, in increasing priority. It allocates the returned slice; the
// counting itself allocates nothing. Safe for concurrent use.
func (l *Limiter) PriorityStats() []PriorityStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []PriorityStats
	for p := range l.queue.stats {
		c := &l.queue.stats[p]
		n := l.queue.flows[p].n
		if *c == (priorityCounters{}) && n == 0 {
			continue
		}
		out = append(out, PriorityStats{
			Priority:       uint8(p),
			Admitted:       c.admitted,
			AdmittedWeight: c.admittedWeight,
			Refused:        c.refused,
			TimedOut:       c.timedOut,
			Cancelled:      c.cancelled,
			Queued:         n,
			Waits:          c.waits,
			WaitTime:       c.waitTime,
		})
	}
	return out
}
