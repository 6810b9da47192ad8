package fleet

import "time"

// ramp is how the limiter's ceiling follows the node's share: a share that
// rises is taken up in a straight line over rampSpan, its first slot at
// once; one that falls to or below the ceiling reached, a fence (under
// FailClosed) and a stop apply at once, and after the ceiling's deadline
// passed the share is taken up from nothing again. A share granted
// at a heartbeat otherwise goes out as one burst of requests. Against an
// upstream that answers 429 at once above its capacity, a burst is sent
// whole before the first refusal comes back, and every node that took a
// larger share at its grant adds its own: the excess reaches the upstream
// together. Spread over a round trip, the requests of a rise reach it one
// after another, and the first refusal stops the node's climb (the
// limiter's cut, see adaptive.Limiter.SetCeiling) before the rest is sent.
// The ceiling never exceeds the share, so the ramp only ever admits less
// than the grant allows. Its fields are guarded by Node.mu.
type ramp struct {
	level int       // the ceiling the limiter has now
	from  int       // the level when the current rise began
	to    int       // the target of the current rise
	start time.Time // when it began
	span  time.Duration
	until time.Time   // the deadline last given with the level
	timer *time.Timer // the next step, while a rise is under way
	gen   uint64      // counts the timers set and stopped: only the current timer's step acts
}

// rampTick is the shortest interval between two steps of a rise; a rise
// faster than one slot per tick takes several slots a step.
const rampTick = time.Millisecond

// rampSpan is how long a rise takes: the limiter's no-load round trip, so
// that the requests it admits interleave with the completions of one
// round, and at most half a heartbeat interval (the whole of it before
// the first round trip), so that a share is in use before the next
// periodic grant. The caller holds n.mu.
func (n *Node) rampSpan() time.Duration {
	span := n.cfg.HeartbeatInterval / 2
	if noload := n.lim.RTTNoload(); noload > 0 {
		span = min(span, noload)
	}
	return span
}

// ramping reports whether a rise is under way: the limiter's ceiling is
// still below the share it climbs to. The caller holds n.mu.
func (n *Node) ramping() bool { return n.ramp.timer != nil }

// applyCeilingLocked pushes ceilingLocked into the limiter through the
// ramp. The caller holds n.mu.
func (n *Node) applyCeilingLocked() {
	target, deadline := n.ceilingLocked()
	r := &n.ramp
	now := time.Now()
	if !r.until.IsZero() && !now.Before(r.until) {
		// The limiter's ceiling expired at its deadline, whether or
		// not the fence's timer has run yet: it admitted nothing
		// since, and a renewal is taken up from nothing.
		r.stop()
		r.level = 0
	}
	switch {
	case target <= r.level:
		r.stop()
		r.level = target
	case r.timer == nil || target > r.to:
		// A new rise, or a higher target for the one under way: from
		// the level reached, over a whole span again.
		r.stop()
		r.from, r.to, r.start, r.span = r.level, target, now, n.rampSpan()
		r.level++ // the first slot at once
		n.armRampLocked()
	case target < r.to:
		// A lower target, still above the level reached: the rise
		// goes on toward it, over what is left of the span.
		r.stop()
		left := max(r.span-now.Sub(r.start), rampTick)
		r.from, r.to, r.start, r.span = r.level, target, now, left
		n.armRampLocked()
	}
	n.setRampLevelLocked(r.level, deadline)
}

// setRampLevelLocked gives the limiter level as its ceiling until
// deadline, and records both in the ramp. The caller holds n.mu.
func (n *Node) setRampLevelLocked(level int, deadline time.Time) {
	n.ramp.level, n.ramp.until = level, deadline
	n.lim.SetCeilingUntil(level, deadline)
}

// armRampLocked sets the timer for the ramp's next step, if the rise has
// a step left. The caller holds n.mu.
func (n *Node) armRampLocked() {
	r := &n.ramp
	if r.level >= r.to {
		return
	}
	// The level reaches k at start + span·(k − from)/(to − from).
	next := r.start.Add(time.Duration(float64(r.span) * float64(r.level+1-r.from) / float64(r.to-r.from)))
	wait := max(time.Until(next), rampTick)
	r.gen++
	gen := r.gen
	r.timer = time.AfterFunc(wait, func() { n.rampStep(gen) })
}

// rampStep takes the ramp's next step, for the timer of generation gen:
// up to the level the straight line has reached, at least one slot.
func (n *Node) rampStep(gen uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	r := &n.ramp
	if gen != r.gen {
		// Stopped, or replaced by a new rise, after it fired: a timer
		// that fired while the lock was held by the call that stopped
		// it still runs.
		return
	}
	r.timer = nil
	target, deadline := n.ceilingLocked()
	if target <= r.level {
		n.setRampLevelLocked(target, deadline)
		return
	}
	line := r.from + int(float64(r.to-r.from)*float64(time.Since(r.start))/float64(r.span))
	n.setRampLevelLocked(min(max(line, r.level+1), r.to, target), deadline)
	n.armRampLocked()
}

// stop cancels the rise under way, if any.
func (r *ramp) stop() {
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
		r.gen++
	}
}
