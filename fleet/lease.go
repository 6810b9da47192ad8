package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/quota"
)

// Lease is one admitted request's hold on a slot of the node's share. Its
// Context carries the request's hard bound: it is done at admission +
// Config.MaxRequestDuration, or when the context given to Acquire is, and
// the request must have really ended by then — the fleet keeps the slot
// reserved that long and no longer, whatever happens to the node. A lease
// still unsettled a second after its bound (its caller lost it) is freed
// then, counted in fleetlimit_leases_expired_total, and warned of in the
// node's log (at most once a minute, and at Stop, with the count). Call
// CheckSend right before sending. Settle the lease exactly once with
// Release, ReleaseRTT, Refuse, Unavailable, Drop or Ignore when the
// upstream has answered, with Unsent when the request was never sent, or
// with Abandon when the caller gave up on it after sending it (any
// cancellation, timeout or failure that leaves the upstream's answer
// unread: the upstream may still serve it); settling also releases the
// context's timer. Settling
// again, or settling a copy, is a no-op: after Abandon, a Release (a
// deferred one, say) does not free the slot the abandoned request may
// still use upstream, and of a Release and an Abandon called at once on
// two goroutines exactly one takes effect. The zero Lease holds nothing. Lease methods are safe for
// concurrent use.
type Lease struct {
	lease    adaptive.Lease
	ctx      context.Context
	cancel   context.CancelFunc
	admitted time.Time     // the lease's admission, by the limiter's clock
	bound    time.Time     // admission + Config.MaxRequestDuration
	hold     time.Duration // Config.AbandonedHold

	// The request's debit from the node's rate shares (nil for the zero
	// Lease), when they let it go (zero: the key has no rate), and, when
	// the node learns the key's rate, whether its outcome was recorded.
	node     *Node
	debit    *debit
	sent     time.Time
	recorded *atomic.Bool

	arrived time.Time    // when AcquireRequest was called; zero for TryAcquireRequest's (see CheckSend)
	settled *atomic.Bool // set by the first settle or Abandon; nil for the zero Lease
	expiry  *time.Timer  // frees the slot expiryGrace after the bound if the lease is still unsettled; nil for the zero Lease
}

// bound returns a lease for a under parent's context, bounded by n's
// configuration.
func (n *Node) bound(parent context.Context, a admission) Lease {
	le := bound(parent, a.lease, &n.cfg)
	le.node, le.debit, le.sent = n, a.debit, a.sent
	if n.cfg.Rate.Learn {
		le.recorded = new(atomic.Bool)
	}
	le.expiry = time.AfterFunc(time.Until(le.bound)+expiryGrace, le.expire)
	return le
}

// expiryGrace is how long after its bound a lease still unsettled is
// freed: a caller whose request ran to the bound settles it just after
// (Abandon(true) for the timeout, a drop the estimate must see), and only
// a lease nobody will settle should be freed without its outcome.
const expiryGrace = time.Second

// expire frees the slot of a lease its caller did not settle by its bound
// and expiryGrace after it, when the request has ended by assumption, as
// Ignore would: a lease lost by its caller (a path that forgot to settle
// it, a panic recovered above it) would hold its slot for the life of the
// process.
func (le Lease) expire() {
	if le.settle(le.lease.Ignore) {
		le.node.expired.note(le.node.log, le.node.cfg.MaxRequestDuration)
	}
}

// expiredLeases counts the leases freed unsettled (see Lease.expire), for
// the metric and for a warning at most once a minute. Safe for concurrent
// use.
type expiredLeases struct {
	total   atomic.Uint64 // ever
	pending atomic.Uint64 // since the last warning
	logged  atomic.Int64  // Unix nanoseconds of the last warning; 0: none
}

// expiredLogEvery is the least time between two warnings of expired leases.
const expiredLogEvery = time.Minute

// note counts one expired lease, and warns of those not yet warned of
// unless a warning came less than expiredLogEvery ago.
func (e *expiredLeases) note(log *slog.Logger, bound time.Duration) {
	e.total.Add(1)
	e.pending.Add(1)
	now := time.Now().UnixNano()
	last := e.logged.Load()
	if last != 0 && now-last < int64(expiredLogEvery) || !e.logged.CompareAndSwap(last, now) {
		return
	}
	e.flush(log, bound)
}

// flush warns of the expired leases not yet warned of, if any.
func (e *expiredLeases) flush(log *slog.Logger, bound time.Duration) {
	if n := e.pending.Swap(0); n > 0 {
		log.Warn("leases nobody settled were freed a second after their bound: settle every lease (a deferred Abandon(false) after the others is a no-op once one ran)",
			"leases", n, "max_request_duration", bound)
	}
}

// bound returns a lease for le under parent's context, bounded by cfg.
func bound(parent context.Context, le adaptive.Lease, cfg *Config) Lease {
	admitted := le.Admitted()
	end := admitted.Add(cfg.MaxRequestDuration)
	ctx, cancel := context.WithDeadline(parent, end)
	return Lease{lease: le, ctx: ctx, cancel: cancel, admitted: admitted, bound: end, hold: cfg.AbandonedHold, settled: new(atomic.Bool)}
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

// CheckSend reports whether the request may still be sent: call it right
// before sending it, and when it returns an error send nothing and settle
// the lease with Unsent. The error wraps ErrEvicted when the node was
// evicted since the admission; ErrFenced when, under FailClosed, the
// node's lease did not hold without a break since the admission (the
// process was frozen, or cut off from the database, in between — even if
// a renewal has lifted the fence since); ErrLate when its Context's
// deadline, which left it at least two of the upstream's no-load round
// trips (the limiter's RTTNoload) when Acquire was called, now leaves less
// than one — the admission's and the rate's waits, or the caller's own
// work since, took its time, and it could not be answered in time — or
// has passed (its bound, or the caller's deadline); an *adaptive.PauseError
// (errors.Is adaptive.ErrPaused) while the upstream's pause that started
// since the admission lasts (a Retry-After, a quota used up: nothing is
// sent while paused); or the Context's cause when it has ended otherwise
// (Acquire's context ended: a free slot is taken even for a context
// already done). A process frozen between the
// admission and the send would otherwise send the request so late that it
// ran at the upstream past its bound, when its slot is freed, and past the
// capacity the fleet reserved for the node, beside requests admitted into
// that capacity since. Transport makes the same checks before every send.
// The zero Lease's is nil.
func (le Lease) CheckSend() error {
	if le.node == nil {
		return nil
	}
	arrived := le.arrived
	if arrived.IsZero() {
		arrived = le.admitted // TryAcquireRequest's: no wait before the admission
	}
	_, ended, err := le.node.sendCheck(le.ctx, le.admitted, arrived)
	if ended {
		return fmt.Errorf("fleet: the lease's context ended before the request was sent: %w", err)
	}
	return err
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

// Release settles the lease as a success; see adaptive.Lease.Release. The
// latency sample of a request that waited for the key's rate starts when
// it was let go, not at its admission.
func (le Lease) Release() {
	fn := le.lease.Release
	if !le.sent.IsZero() {
		fn = func() { le.lease.ReleaseRTT(time.Since(le.sent)) }
	}
	if le.settle(fn) {
		le.served()
	}
}

// ReleaseRTT settles the lease as a success with rtt as its latency; see
// adaptive.Lease.ReleaseRTT. An rtt of 0 or less gives the limiter no
// sample, but the request still counts as served: for the node's rate
// learner, and as the end of a streak of refusals (see Refuse).
func (le Lease) ReleaseRTT(rtt time.Duration) {
	if le.settle(func() { le.lease.ReleaseRTT(rtt) }) {
		le.served()
	}
}

// served records a success: for the node's learner, and as the end of a
// streak of refusals at its last slot, unless the request was admitted
// before the streak's last refusal came back (see Refuse).
func (le Lease) served() {
	le.record(false)
	if le.node != nil {
		le.node.floor.served(le.admitted)
	}
}

// Drop settles the lease as an overload signal of a request that surely
// ended at the upstream; see adaptive.Lease.Drop. It frees the slot at
// once. For the upstream's refusal use Refuse (a 429) or Unavailable (a
// 503), which keep the slot for a round trip; for a timeout of a request
// the upstream may still be serving, Abandon(true). A node that learns
// the key's rate (RateConfig.Learn) counts it as a request refused for
// the rate.
func (le Lease) Drop() {
	if le.settle(le.lease.Drop) {
		le.record(true)
	}
}

// Refuse settles the lease as the upstream's refusal of the request for
// its limits — a 429, gRPC's RESOURCE_EXHAUSTED — as Transport settles a
// 429: a drop, counted at once, whose slot stays held until a served
// request's headers would have come — the limiter's RTTNoload after the
// request was sent (when the key's rate let it go, or at its admission
// on a key without a rate), and no later than its bound — so that a queue
// meeting refusals answered at once is not sent to them at loopback
// speed. Call it when the refusal has come back, body included
// (Transport holds the slot until the body's transfer ends too). While
// the node's limit is 1 (its floor of one slot, or cut to its last) and
// its last grant counted other live nodes, each refusal in a row — of a
// request admitted after the last one came back — holds its slot twice
// as long as the one before, up to 8 × RTTNoload; a success of a request admitted after the
// last refusal came back (Release, ReleaseRTT), a refusal at a higher
// limit, or 16 × RTTNoload without a refusal starts again from one. A
// positive retryAfter (the refusal's Retry-After) first pauses the node's
// admission that long, at most quota.MaxRetryAfter, failing the callers
// waiting in Acquire with adaptive.ErrPaused, so that no slot the refusal
// frees goes to one of them; zero or less pauses nothing. A node that
// learns the key's rate (RateConfig.Learn) counts it as a request refused
// for the rate. On the zero Lease, or once the lease is settled, it does
// nothing.
func (le Lease) Refuse(retryAfter time.Duration) { le.refuse(retryAfter, true) }

// Unavailable settles the lease as the upstream's refusal of the request
// for want of capacity — a 503, Anthropic's 529, gRPC's UNAVAILABLE — as
// Transport settles a 503 or a 529: as Refuse does, except that a node
// learning the key's rate does not count it against the rate, whose
// learner counts 429s. Both say the upstream turned the request away, so
// its slot is freed after the refusal's hold: a 503 that a proxy returns
// while the upstream behind it may still serve the request (a gateway
// timeout, a backend connection reset mid-request) is a request given up
// on, settled with Abandon(true).
func (le Lease) Unavailable(retryAfter time.Duration) { le.refuse(retryAfter, false) }

// refuse is Refuse; limited says whether the refusal was for the rate.
func (le Lease) refuse(retryAfter time.Duration, limited bool) {
	if le.node == nil {
		return
	}
	now := time.Now()
	sent := le.sent
	if sent.IsZero() {
		sent = le.admitted
	}
	if !le.settle(func() {
		if retryAfter > 0 {
			le.node.quotaPause(now, min(retryAfter, quota.MaxRetryAfter))
		}
		le.node.refuse(le.lease, le.admitted, now.Sub(sent), le.bound, now)
	}) {
		return
	}
	le.record(limited)
}

// SettleTokens charges the request's actual cost in tokens (an LLM
// response's usage) against the node's token rate share, correcting the
// estimate it was admitted with (WithTokens): an under-estimate is charged
// to later requests, an over-estimate given back; the usage the node
// reports is corrected too. Call it once, when the cost is known: a
// second call (on a copy of the Lease, or through its response) returns
// an error and changes nothing. On a key without a token rate it paces
// nothing and only corrects the usage; on the zero Lease it is a no-op. It
// returns an error naming actual when it lies outside 0..MaxTokens, and
// changes nothing then: a call with a valid value may follow.
func (le Lease) SettleTokens(actual int64) error {
	if le.debit == nil {
		return nil
	}
	return le.debit.settle(actual)
}

// record gives the request's outcome to the node's learner, once.
func (le Lease) record(limited bool) {
	if le.recorded != nil && le.recorded.CompareAndSwap(false, true) {
		sent := le.sent
		if sent.IsZero() {
			sent = le.admitted
		}
		le.node.observeRate(time.Now(), sent, limited)
	}
}

// Ignore settles the lease of a request that surely ended without a
// sample, and frees its slot at once: the upstream answered with an error
// that says nothing of its capacity (a 400, a 404). A request given up on
// after it was sent — a cancellation, any timeout (a context's deadline,
// a driver's read deadline, a gRPC DeadlineExceeded or Canceled), a
// connection that failed — may still run at the upstream: settle it with
// Abandon, or its slot is handed on while the upstream still serves it. A
// request that was never sent is settled with Unsent, which also gives
// back its rate debit.
func (le Lease) Ignore() { le.settle(le.lease.Ignore) }

// Unsent settles the lease of a request that was never sent — its Context
// ended before the send (Acquire takes a free slot even for a context
// already done), or the caller decided not to send it: its slot is freed
// at once, without a sample, and on a key with rates its debit from the
// node's rate shares (one request and its token estimate) is given back
// and the usage the node reports forgets it, as Transport does for a
// request it does not send. A later SettleTokens returns an error. Call it
// only for a request the upstream never received: one that may have
// reached it is settled with Abandon.
func (le Lease) Unsent() {
	le.settle(func() {
		le.lease.Ignore()
		if le.debit != nil {
			le.debit.cancel()
		}
	})
}

// Abandon says the caller gave up on a request that may still run at the
// upstream (it timed out or was cancelled after it was sent): its Context
// ends now, but its slot stays held for Config.AbandonedHold, and no longer
// than the request's bound, since the upstream may still be serving it.
// With drop set it also counts as an overload signal now (a timeout). A
// request that surely ended — the upstream answered — is settled with
// Release, Refuse, Unavailable, Drop or Ignore instead, and one never sent
// with Unsent. Abandon settles the lease: a later Release, ReleaseRTT,
// Refuse, Unavailable, Drop, Ignore or Unsent does nothing, and so does a
// second Abandon.
func (le Lease) Abandon(drop bool) {
	if le.ctx == nil || !le.settled.CompareAndSwap(false, true) {
		return
	}
	le.stopExpiry()
	le.cancel()
	abandon(le.lease, drop, le.bound, le.hold)
}

// abandon frees le's slot after hold, and no later than bound, without a
// sample; with drop it counts an overload signal now.
func abandon(le adaptive.Lease, drop bool, bound time.Time, hold time.Duration) {
	if drop {
		le.ObserveDrop()
	}
	d := min(time.Until(bound), hold)
	if d <= 0 {
		le.Ignore()
		return
	}
	time.AfterFunc(d, le.Ignore)
}

// settle settles the lease with fn and ends its context, unless it was
// settled or abandoned before: after Abandon the slot is the hold's to
// free. It reports whether fn ran.
func (le Lease) settle(fn func()) bool {
	if le.settled != nil && !le.settled.CompareAndSwap(false, true) {
		return false
	}
	le.stopExpiry()
	fn()
	if le.cancel != nil {
		le.cancel()
	}
	return true
}

// stopExpiry stops the timer that frees an unsettled lease after its bound.
func (le Lease) stopExpiry() {
	if le.expiry != nil {
		le.expiry.Stop()
	}
}
