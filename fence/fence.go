package fence

import (
	"fmt"
	"sync"
	"time"
)

// Reason says why a node was fenced.
type Reason string

// The reasons a node is fenced.
const (
	// ReasonLeaseExpiring: the fence deadline passed without a renewal.
	ReasonLeaseExpiring Reason = "lease expiring"
	// ReasonEvicted: an operator evicted the node.
	ReasonEvicted Reason = "evicted"
)

// Config configures a Fence.
type Config struct {
	// SafetyMargin is subtracted from every lease; see the package
	// documentation for how to choose it. It must be ≥ 0. Defaults to 0.
	SafetyMargin time.Duration
	// OnFenced, if set, is called once each time the node becomes fenced,
	// with the reason. It is called with no lock held, from the goroutine
	// that called Check or Evict, and must not block for long.
	OnFenced func(Reason)
}

// Fence is the lease clock of one node. The zero value is not usable; call
// New. A new Fence is fenced until its first renewal, without calling
// OnFenced: a node does not admit before its first grant.
//
// A Fence reads no clock: every method takes the time from the caller, which
// should pass readings of one monotonic clock (time.Now values keep one).
// Methods are safe for concurrent use.
type Fence struct {
	margin   time.Duration
	onFenced func(Reason)

	mu       sync.Mutex
	deadline time.Time // zero until the first renewal
	since    time.Time // when the current unbroken run of the lease began
	fenced   bool
	reason   Reason // why fenced; empty before the first renewal
	evicted  bool
}

// New returns a Fence, or an error naming the bad field.
func New(cfg Config) (*Fence, error) {
	if cfg.SafetyMargin < 0 {
		return nil, fmt.Errorf("fence: Config.SafetyMargin = %v, want ≥ 0", cfg.SafetyMargin)
	}
	return &Fence{margin: cfg.SafetyMargin, onFenced: cfg.OnFenced, fenced: true}, nil
}

// SafetyMargin returns the margin subtracted from every lease.
func (f *Fence) SafetyMargin() time.Duration { return f.margin }

// Renew records a lease renewal: the heartbeat sent at sendTime was answered
// with leaseRemaining. The deadline only moves forward, so a late reply to an
// older heartbeat cannot shorten a newer lease. The fence lifts if the new
// deadline is after now and the node was not evicted. Renew reports whether
// the node is fenced afterwards and the deadline in force.
func (f *Fence) Renew(now, sendTime time.Time, leaseRemaining time.Duration) (fenced bool, deadline time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	lapsed := f.fenced || !now.Before(f.deadline)
	if d := sendTime.Add(leaseRemaining - f.margin); d.After(f.deadline) {
		f.deadline = d
	}
	if lapsed && !f.evicted && now.Before(f.deadline) {
		f.since = now // a new unbroken run begins
		f.fenced = false
		f.reason = ""
	}
	return f.fenced, f.deadline
}

// Unbroken reports whether the lease has held without a break from t until
// now: the node is not fenced at now (as Check), and no renewal since t
// came after a deadline had passed or the node was fenced. Something the
// node decided at t under its lease — a request it admitted then — still
// stands at now only if so: a process frozen past its deadline and renewed
// on resuming has a lease again, but not the one it decided under.
func (f *Fence) Unbroken(t, now time.Time) bool {
	if f.Check(now) {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return !t.Before(f.since)
}

// Check fences the node if now is at or past the deadline and reports
// whether it is fenced. OnFenced runs when this call fenced it.
func (f *Fence) Check(now time.Time) bool {
	f.mu.Lock()
	if f.fenced || now.Before(f.deadline) {
		fenced := f.fenced
		f.mu.Unlock()
		return fenced
	}
	f.fenced = true
	f.reason = ReasonLeaseExpiring
	f.mu.Unlock()
	f.notify(ReasonLeaseExpiring)
	return true
}

// Evict fences the node for good. OnFenced runs with ReasonEvicted unless the
// node was already evicted; a node fenced by its lease that is then evicted
// is told again, with the new reason.
func (f *Fence) Evict() {
	f.mu.Lock()
	if f.evicted {
		f.mu.Unlock()
		return
	}
	f.evicted = true
	f.fenced = true
	f.reason = ReasonEvicted
	f.mu.Unlock()
	f.notify(ReasonEvicted)
}

// State describes a Fence at one instant.
type State struct {
	// Fenced is true when the node must admit nothing.
	Fenced bool
	// Reason says why; empty when not fenced or before the first renewal.
	Reason Reason
	// Deadline is the fence deadline in force; zero before the first renewal.
	Deadline time.Time
	// Evicted is true once Evict was called.
	Evicted bool
}

// State returns the fence's state. It does not check the deadline: call
// Check first to account for the passage of time.
func (f *Fence) State() State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return State{Fenced: f.fenced, Reason: f.reason, Deadline: f.deadline, Evicted: f.evicted}
}

func (f *Fence) notify(r Reason) {
	if f.onFenced != nil {
		f.onFenced(r)
	}
}
