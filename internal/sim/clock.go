package sim

import (
	"sort"
	"sync"
	"time"
)

// Clock is the time source of a Provider: when requests arrive and leave,
// when the capacity schedule moves, and how long a request is held.
// Implementations must be safe for concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// After returns a channel that receives the time once d has passed,
	// like time.After. A d <= 0 fires at once.
	After(d time.Duration) <-chan time.Time
}

// RealClock is the Clock of the time package. Its zero value is ready to
// use and safe for concurrent use.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// After returns time.After(d).
func (RealClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// ManualClock is a Clock that moves only when Advance is called, for
// deterministic tests: a request held by a Provider on a ManualClock stays
// in flight until the test advances the clock past its latency. It is safe
// for concurrent use.
type ManualClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []manualWaiter
}

type manualWaiter struct {
	at time.Time
	ch chan time.Time
}

// NewManualClock returns a ManualClock reading start.
func NewManualClock(start time.Time) *ManualClock {
	return &ManualClock{now: start}
}

// Now returns the clock's current time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After returns a channel that receives the clock's time once Advance has
// moved it at least d past now. A d <= 0 fires at once.
func (c *ManualClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, manualWaiter{at: c.now.Add(d), ch: ch})
	return ch
}

// Advance moves the clock forward by d (a negative d is ignored) and fires,
// in deadline order, every After whose deadline has been reached.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d > 0 {
		c.now = c.now.Add(d)
	}
	sort.SliceStable(c.waiters, func(i, j int) bool { return c.waiters[i].at.Before(c.waiters[j].at) })
	fired := 0
	for _, w := range c.waiters {
		if w.at.After(c.now) {
			break
		}
		w.ch <- c.now // buffered, never blocks
		fired++
	}
	c.waiters = append(c.waiters[:0], c.waiters[fired:]...)
}

// Waiters returns how many After channels have not fired yet. Tests use it
// to know that a handler has reached its wait. A channel whose receiver
// gave up still counts until its deadline passes.
func (c *ManualClock) Waiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}
