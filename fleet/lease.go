package fleet

import (
	"context"
	"time"

	"github.com/fleetlimit/fleetlimit/adaptive"
)

// Lease is one admitted request's hold on a slot of the node's share. Its
// Context carries the request's hard bound: it is done at admission +
// Config.MaxRequestDuration, or when the context given to Acquire is, and
// the request must have really ended by then — the fleet keeps the slot
// reserved that long and no longer, whatever happens to the node. Settle
// the lease exactly once with Release, ReleaseRTT, Drop or Ignore when the
// request ends; settling also releases the context's timer. Settling again,
// or settling a copy, is a no-op. The zero Lease holds nothing. Lease
// methods are safe for concurrent use.
type Lease struct {
	lease  adaptive.Lease
	ctx    context.Context
	cancel context.CancelFunc
}

// bound returns a lease for le admitted at now under parent's context.
func bound(parent context.Context, le adaptive.Lease, now time.Time, d time.Duration) Lease {
	ctx, cancel := context.WithDeadline(parent, now.Add(d))
	return Lease{lease: le, ctx: ctx, cancel: cancel}
}

// Context returns the context to run the request with: done at the
// request's bound or when Acquire's context is, and once the lease is
// settled. The zero Lease's is context.Background().
func (le Lease) Context() context.Context {
	if le.ctx == nil {
		return context.Background()
	}
	return le.ctx
}

// Deadline returns the request's hard bound: admission +
// Config.MaxRequestDuration (or the earlier deadline of Acquire's
// context). The zero Lease's is the zero time.
func (le Lease) Deadline() time.Time {
	if le.ctx == nil {
		return time.Time{}
	}
	d, _ := le.ctx.Deadline()
	return d
}

// Release settles the lease as a success; see adaptive.Lease.Release.
func (le Lease) Release() { le.settle(le.lease.Release) }

// ReleaseRTT settles the lease as a success with rtt as its latency; see
// adaptive.Lease.ReleaseRTT.
func (le Lease) ReleaseRTT(rtt time.Duration) { le.settle(func() { le.lease.ReleaseRTT(rtt) }) }

// Drop settles the lease as an overload signal (a 429, a 503, a timeout);
// see adaptive.Lease.Drop.
func (le Lease) Drop() { le.settle(le.lease.Drop) }

// Ignore settles the lease without a sample; see adaptive.Lease.Ignore.
func (le Lease) Ignore() { le.settle(le.lease.Ignore) }

func (le Lease) settle(fn func()) {
	fn()
	if le.cancel != nil {
		le.cancel()
	}
}
