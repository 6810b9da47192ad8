package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
)

// Acquire admits a request with the priority and weight ctx carries
// (WithPriority, WithWeight; by default adaptive.DefaultPriority and 1):
// it is AcquireRequest(ctx, RequestFrom(ctx)).
func (n *Node) Acquire(ctx context.Context) (Lease, error) {
	return n.AcquireRequest(ctx, RequestFrom(ctx))
}

// AcquireRequest admits r, whatever priority and weight ctx carries,
// waiting in the local limiter's queue while Config.Limiter.MaxQueued
// allows (see adaptive.Limiter.AcquireRequest). Run the request with the
// returned Lease's Context, which ends at the request's hard bound
// (Config.MaxRequestDuration) or with ctx; call the Lease's CheckSend
// right before sending, and settle the lease when the request ends:
// Release on success, Refuse on a 429, Unavailable on a 503, Ignore on
// another answer from the upstream, and Abandon — Abandon(true) for a
// timeout — on anything after sending that leaves the answer unread (a
// cancellation, a timeout, a broken connection: the upstream may still
// serve it; see Lease). As in the limiter, a free slot is taken even with
// a ctx already done: the Lease's Context is then done too, CheckSend
// says so, and the lease is settled with Unsent; Transport sends nothing
// then.
//
// Besides the limiter's own errors it returns ErrNotStarted, ErrStopped,
// ErrEvicted, ErrFenced while the node is fenced under FailClosed (a
// fenced node fails fast rather than queue behind an outage), and an error
// wrapping adaptive.ErrTooHeavy for a weight above the key's L_global,
// which says how to raise L_global and counts, with the weight, as demand
// the node could not serve; the node's refusals count in PriorityStats as
// the limiter's do. Callers already queued when the node is fenced keep
// waiting, bounded by their contexts; no slot is handed to them until a
// grant renews the lease. When the node is evicted or stopped they fail at
// once, with ErrEvicted or ErrStopped.
//
// A weight within L_global but above the node's share waits, its weight
// counted in the node's demand so that its share can grow to it, without
// holding back the lighter requests the share holds; a weight above the
// node's inferred limit but within its share runs alone (see
// adaptive.Limiter.AcquireRequest and WithWeight), once the limiter's
// ceiling has reached a share that rose (see docs/design.md §4: a rise is
// taken up over a round trip). Safe for concurrent use.
func (n *Node) AcquireRequest(ctx context.Context, r adaptive.Request) (Lease, error) {
	arrived := time.Now()
	a, err := n.acquire(ctx, r, TokensFrom(ctx), true)
	if err != nil {
		return Lease{}, err
	}
	le := n.bound(ctx, a)
	le.arrived = arrived
	return le, nil
}

// admission is an admitted request: its slot, and its debit from the
// node's rate shares with when it may be sent (zero: the key has no rate).
type admission struct {
	lease adaptive.Lease
	debit *debit
	sent  time.Time
}

// acquire is AcquireRequest without the bound context: a slot, then the
// rate (waiting for it, or with wait false refusing when it is spent). The
// slot is held while the request waits for the rate, so a request that
// waited is sent at once; its latency sample starts when it is sent.
func (n *Node) acquire(ctx context.Context, r adaptive.Request, tokens int64, wait bool) (admission, error) {
	if tokens > MaxTokens {
		n.metrics.rejected.Add(1)
		return admission{}, fmt.Errorf("%w: token estimate = %d, want 0..%d", adaptive.ErrInvalidRequest, tokens, int64(MaxTokens))
	}
	if err := n.refusal(r); err != nil {
		return admission{}, err
	}
	var (
		le  adaptive.Lease
		err error
	)
	if wait {
		le, err = n.waitForSlot(ctx, r, tokens)
	} else {
		le, err = n.lim.TryAcquireRequest(r)
	}
	if err != nil {
		return admission{}, n.limiterRefusal(err, r.Weight)
	}
	// The wait for the rate ends at the slot's bound.
	t, limit, sent, err := n.pace(ctx, le.Admitted().Add(n.cfg.MaxRequestDuration), tokens, wait)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w: the request waited for the key's rate share until its bound, MaxRequestDuration (%v) after it took its slot; not sent: %w",
			ErrLate, n.cfg.MaxRequestDuration, context.DeadlineExceeded)
	}
	if err != nil {
		le.Ignore()
		n.metrics.rejected.Add(1)
		if ctx.Err() == nil {
			n.metrics.refused[r.Priority].Add(1)
		} else {
			n.metrics.rateCancelled[r.Priority].Add(1)
		}
		return admission{}, err
	}
	n.metrics.admitted[r.Priority].Add(1)
	n.metrics.admittedWeight[r.Priority].Add(uint64(r.Weight))
	n.rate.sent(1, tokens)
	n.holdWanted(r.Weight)
	return admission{lease: le, debit: n.rate.newDebit(n, t, !sent.IsZero(), tokens, limit, time.Now()), sent: sent}, nil
}

// waitForSlot is waitRequest, counting the request, on a key with a rate,
// as waiting for a slot while it waits: rateReport counts such requests in
// the rate demand of a node that has not yet had a rate share, so that a
// joiner's rate share does not wait for its concurrency share to come
// first and its requests to reach the pacer.
func (n *Node) waitForSlot(ctx context.Context, r adaptive.Request, tokens int64) (adaptive.Lease, error) {
	rs := n.rate
	if !rs.paced.Load() {
		return n.waitRequest(ctx, r)
	}
	if limit := rs.tokenCap(); limit > 0 {
		tokens = min(tokens, limit) // as pace counts it
	}
	rs.slotWait.Add(1)
	rs.slotWaitTok.Add(tokens)
	defer func() {
		rs.slotWait.Add(-1)
		rs.slotWaitTok.Add(-tokens)
	}()
	return n.waitRequest(ctx, r)
}

// waitRequest is the limiter's AcquireRequest, counting a caller of a
// weight above 1 while it waits (see beginHeavyWait), until it returns
// or panics.
func (n *Node) waitRequest(ctx context.Context, r adaptive.Request) (adaptive.Lease, error) {
	if r.Weight <= 1 {
		return n.lim.AcquireRequest(ctx, r)
	}
	admitted := false
	n.beginHeavyWait(r.Weight)
	defer func() { n.endHeavyWait(r.Weight, admitted) }()
	le, err := n.lim.AcquireRequest(ctx, r)
	admitted = err == nil
	return le, err
}

// beginHeavyWait counts a caller of a weight above 1 entering the
// limiter's AcquireRequest (admitted at once or not): while it waits for
// a weight above the share, the node presses for it even with lighter
// requests in flight (see report).
func (n *Node) beginHeavyWait(weight int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.heavyWaits == nil {
		n.heavyWaits = map[int]int{}
	}
	n.heavyWaits[weight]++
}

// endHeavyWait ends a wait that beginHeavyWait counted, admitted or not,
// counting in heavyAdmits the admission of a caller of the heaviest weight
// waiting: the one the node presses for (see report). A lighter weighted
// caller's admission is not the heavy one's turn, and restarting the
// pressing at each would keep it from ever growing.
func (n *Node) endHeavyWait(weight int, admitted bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if admitted && weight >= n.heaviestWait() {
		n.heavyAdmits++
	}
	if n.heavyWaits[weight]--; n.heavyWaits[weight] <= 0 {
		delete(n.heavyWaits, weight)
	}
}

// heaviestWait returns the heaviest weight a caller counted by
// beginHeavyWait waits for, or 0. The caller holds n.mu.
func (n *Node) heaviestWait() int {
	w := 0
	for k := range n.heavyWaits {
		w = max(w, k)
	}
	return w
}

// TryAcquire admits a request of weight 1 at adaptive.DefaultPriority if
// a slot is free now and the node may admit; see TryAcquireRequest. On
// false the Lease is the zero Lease.
func (n *Node) TryAcquire() (Lease, bool) {
	le, err := n.TryAcquireRequest(adaptive.Request{Priority: adaptive.DefaultPriority, Weight: 1})
	return le, err == nil
}

// TryAcquireRequest admits r if its weight fits under the node's limit
// now and no waiter would be admitted before it (see
// adaptive.Limiter.TryAcquireRequest) and, on a key with rates, the node's
// rate shares allow one more request now (it debits no token estimate;
// settle its tokens with Lease.SettleTokens). It never waits. The Lease's
// Context ends at the request's hard bound. It returns
// adaptive.ErrWouldWait when r does not fit now (counted, with r's weight,
// as demand the node could not serve) or the rate share is spent, an
// *adaptive.PauseError (matching adaptive.ErrPaused) while admission is
// paused, errors wrapping adaptive.ErrInvalidRequest for a weight below 1 and
// adaptive.ErrTooHeavy for one above the limiter's MaxLimit or the key's
// L_global (the latter counted as demand, as in AcquireRequest), and
// AcquireRequest's ErrNotStarted, ErrStopped, ErrEvicted and ErrFenced; on
// every error the Lease is the zero Lease. Safe for concurrent use.
func (n *Node) TryAcquireRequest(r adaptive.Request) (Lease, error) {
	a, err := n.acquire(context.Background(), r, 0, false)
	if err != nil {
		return Lease{}, err
	}
	return n.bound(context.Background(), a), nil
}

// refusal is the error the node itself refuses r with before it reaches
// the local limiter — its state, or a weight above L_global — counted as a
// rejection and a refusal at r's priority; or nil. A weight refused for
// L_global counts as demand the node could not serve.
func (n *Node) refusal(r adaptive.Request) error {
	err := n.admissionErr()
	if err == nil {
		if err = n.tooHeavyForFleet(r.Weight); err != nil {
			n.noteUnmet(r.Weight, false) // no share lets it in: L_global must grow first
		}
	}
	if err != nil {
		n.metrics.rejected.Add(1)
		n.metrics.refused[r.Priority].Add(1)
	}
	return err
}

// limiterRefusal returns the error for an admission of the given weight
// that the local limiter refused with err, which the limiter has counted
// at the request's priority. No room now, a full queue, a wait that ran
// out (the caller's context or the limiter's bound) and a pause count as
// demand the node could not serve; all but the pause, which no share
// ends, also hold the weight as a floor of the demand (see noteUnmet).
// When the node's state refuses admissions (Stop pauses the limiter), its
// error replaces the limiter's refusal, but not the end of a wait.
func (n *Node) limiterRefusal(err error, weight int) error {
	n.metrics.rejected.Add(1)
	paused := errors.Is(err, adaptive.ErrPaused)
	switch {
	case paused || errors.Is(err, adaptive.ErrWouldWait) || errors.Is(err, adaptive.ErrQueueFull):
		n.noteUnmet(weight, !paused)
		if aerr := n.admissionErr(); aerr != nil {
			return aerr
		}
		fenced := n.fence.State().Fenced
		n.mu.Lock()
		draining, learning, share, outage := n.status == coord.StatusDraining, n.learning, n.share, n.outage
		ramping, level, rampTo, span := n.ramping(), n.ramp.level, n.ramp.to, n.ramp.span
		n.mu.Unlock()
		// A caller refused only for want of a queue can be told to add one.
		unqueued := errors.Is(err, adaptive.ErrQueueFull) && n.cfg.Limiter.MaxQueued == 0
		switch {
		case draining:
			return n.drainingErr(err)
		case learning && !paused: // a pause is the upstream's, and says so
			return n.learningErr(err)
		case share == 0 && !paused && !fenced && !outage:
			fix := "retry after its next heartbeat"
			if unqueued {
				fix = "set Limiter.MaxQueued so that requests wait for it, or retry"
			}
			return refusal(ErrNoShare, err, "node %q of key %q holds no share now (a node gives its share up after an "+
				"interval without requests, and L_global may be held by other nodes); its demand asks for one "+
				"at its next heartbeat: %s", n.cfg.NodeID, n.cfg.Key, fix)
		case ramping && !paused && !fenced && n.lim.Limit() >= level:
			// The rise binds, not the estimate or a refusal's cut.
			fix := "retry"
			if unqueued {
				fix = "set Limiter.MaxQueued so that requests wait for their turn, or retry"
			}
			return refusal(ErrShareRising, err, "node %q of key %q is taking up its share of %d over %v and admits %d now (a share "+
				"that rises is taken up over one no-load round trip, at most half a heartbeat, so that its requests "+
				"reach the upstream one after another): %s", n.cfg.NodeID, n.cfg.Key, rampTo, span, level, fix)
		}
	case errors.Is(err, adaptive.ErrWaitTimeout):
		n.noteUnmet(weight, true)
		n.mu.Lock()
		learning := n.learning
		n.mu.Unlock()
		if learning {
			return n.learningErr(err) // the limiter's bound ran out under learning's cap
		}
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		n.noteUnmet(weight, true) // the caller's own bound: its error stands
	case errors.Is(err, adaptive.ErrTooHeavy) && weight > n.lim.MaxLimit():
		// The limiter's error names Config.MaxLimit; a node's caller set it as Config.Limiter.MaxLimit.
		return fmt.Errorf("%w: Request.Weight = %d exceeds Config.Limiter.MaxLimit = %d: it can never be admitted",
			adaptive.ErrTooHeavy, weight, n.lim.MaxLimit())
	}
	return err
}

// learningErr is err with the reason a node in learning mode refuses: it
// is granted no more than it holds until every request of before the
// loss must have ended. The coordinator keeps the key's longest lease and
// request bound ever reported, and a key it first sees after the loss
// takes the longest any key reported (see coord.Database), so the mode
// may outlast this node's own.
func (n *Node) learningErr(err error) error {
	return refusal(ErrLearning, err, "key %q is in learning mode (the database may have lost state — a failover, a restore or any server restart — or an operator ran fleetctl relearn): "+
		"until every request of before must have ended — the key's longest lease plus the longest MaxRequestDuration "+
		"its nodes reported (for a key the database first saw after the loss, any key's) from the loss, so at least "+
		"this node's %v and possibly much longer; fleetctl watch %q shows when it ends — node %q is granted no more than it holds",
		n.cfg.Key, n.cfg.LeaseTTL+n.cfg.MaxRequestDuration, n.cfg.Key, n.cfg.NodeID)
}

// drainingErr is err with the reason a drained node refuses: its share
// is 0 until an operator undrains it.
func (n *Node) drainingErr(err error) error {
	return refusal(ErrDraining, err, "node %q of key %q is draining, with no share (an operator's fleetctl drain; fleetctl undrain undoes it)",
		n.cfg.NodeID, n.cfg.Key)
}

// refusal is err, the limiter's refusal, with the node's reason for it:
// its message is err's, then the reason formatted; errors.Is finds both
// err and kind.
func refusal(kind, err error, format string, args ...any) error {
	return &reasonedError{msg: err.Error() + ": " + fmt.Sprintf(format, args...), errs: []error{err, kind}}
}

// reasonedError is a refusal with its reason (see refusal).
type reasonedError struct {
	msg  string
	errs []error
}

func (e *reasonedError) Error() string   { return e.msg }
func (e *reasonedError) Unwrap() []error { return e.errs }

// admissionErr is the error every admission fails with in the node's
// current state, or nil.
func (n *Node) admissionErr() error {
	n.mu.Lock()
	p := n.phase
	n.mu.Unlock()
	switch p {
	case phaseNew:
		return ErrNotStarted
	case phaseStopping, phaseStopped:
		return ErrStopped
	}
	fenced := n.fence.Check(time.Now())
	fs := n.fence.State()
	switch {
	case fs.Evicted:
		return ErrEvicted
	case fenced && n.cfg.Outage == FailClosed:
		return fmt.Errorf("%w: %s", ErrFenced, fs.Reason)
	}
	return nil
}

// sendErr returns an error when a request admitted at admitted may no
// longer be sent: the node was evicted since (ErrEvicted), or, under
// FailClosed, its lease did not hold without a break since (ErrFenced, see
// fence.Fence.Unbroken) — even if a renewal has lifted the fence again.
// Admission checked the lease, but a process frozen between the admission
// and the send would otherwise send the request so late that it runs at
// the upstream past its bound (MaxRequestDuration from admission, when its
// slot is freed) and past the coordinator's reserve for the node, beside
// requests admitted into that capacity since.
func (n *Node) sendErr(admitted time.Time) error {
	if n.fence.State().Evicted {
		return fmt.Errorf("%w after the request was admitted; it was not sent", ErrEvicted)
	}
	if n.cfg.Outage != FailClosed || n.fence.Unbroken(admitted, time.Now()) {
		return nil
	}
	return fmt.Errorf("%w: the lease ran out after the request was admitted; it was not sent", ErrFenced)
}

// pausedSince returns an error wrapping an *adaptive.PauseError while an
// upstream's pause (Retry-After, a quota used up: see quotaPause) lasts,
// for a request admitted before it and not yet sent: nothing is sent while
// paused. It reads the upstream's pauses alone, not the limiter's, which
// Stop and an eviction pause for good: a stopping node still sends what it
// admitted, unless the upstream asked for a pause.
func (n *Node) pausedSince() error {
	m := n.metrics
	m.quotaMu.Lock()
	end := m.quotaPauseEnd
	m.quotaMu.Unlock()
	if !time.Now().Before(end) {
		return nil
	}
	return fmt.Errorf("fleet: the upstream asked for a pause after the request was admitted; it was not sent: %w",
		&adaptive.PauseError{Until: end})
}

// sendCheck makes the checks before a send of a request admitted at
// admitted that arrived at arrived, on ctx: sendErr, pausedSince,
// lateness, and ctx's end. It returns lateness's late, and the first
// error, with ended set when that error is ctx's cause, returned bare so
// that each caller can say it in its own words. Transport.roundTrip and
// Lease.CheckSend make these checks.
func (n *Node) sendCheck(ctx context.Context, admitted, arrived time.Time) (late, ended bool, err error) {
	if err := n.sendErr(admitted); err != nil {
		return false, false, err
	}
	if err := n.pausedSince(); err != nil {
		return false, false, err
	}
	if late, err = n.lateness(ctx, arrived); err != nil {
		return false, false, err
	}
	if ctx.Err() != nil {
		// A free slot is taken even for a context already done (see
		// Node.AcquireRequest); such a request is not sent.
		return late, true, context.Cause(ctx)
	}
	return late, false, nil
}

// tooHeavyForFleet returns an error wrapping adaptive.ErrTooHeavy when a
// weight exceeds the key's global limit as last granted: no share can
// hold it while L_global stays where it is, and L_global grows only with
// the load the fleet admits — a load that a fleet of requests this heavy
// would never bring. The error says how to raise L_global. A weight above
// the limiter's MaxLimit is left to the limiter, which refuses it: no
// L_global would help. It reads nothing for weight 1.
func (n *Node) tooHeavyForFleet(weight int) error {
	if weight <= 1 || weight > n.lim.MaxLimit() {
		return nil
	}
	n.mu.Lock()
	g := n.lGlobal
	n.mu.Unlock()
	switch {
	case g <= 0 || weight <= g:
		return nil
	case weight > coord.MaxCount:
		return fmt.Errorf("%w: Request.Weight = %d exceeds the key's global limit L_global = %d, which can never "+
			"exceed %d (coord.MaxCount)", adaptive.ErrTooHeavy, weight, g, coord.MaxCount)
	}
	return fmt.Errorf("%w: Request.Weight = %d exceeds the key's global limit L_global = %d, which grows only "+
		"with the load the fleet admits: keep L_global at least %d with 'fleetctl limits set %s --min %d', "+
		"or, on a new key, start it there with a Config.Limiter.InitialLimit of at least %d on every node "+
		"(see fleet.WithWeight)", adaptive.ErrTooHeavy, weight, g, weight, n.cfg.Key, weight, weight)
}

// noteUnmet counts a refused admission of the given weight as demand the
// node could not serve, reported with the next heartbeat. With hold — a
// refusal a larger share would have let in — the heaviest weight so
// refused also stays a floor of the demand reported until LeaseTTL passes
// with no refusal or admission that heavy (see report and holdWanted).
func (n *Node) noteUnmet(weight int, hold bool) {
	now := time.Now()
	weight = min(weight, coord.MaxCount)
	n.mu.Lock()
	if n.ramping() && n.lim.Inflight() <= n.share-weight {
		// Refused by the ramp, not by the share: the share the node
		// holds takes the weight within a span, and asking for more
		// would claim what it has.
		n.mu.Unlock()
		return
	}
	n.unmet = min(n.unmet+weight, coord.MaxCount)
	if hold && (weight >= n.wanted || !n.floorHeld(now)) {
		n.wanted = weight
		n.wantedAt.Store(now.UnixNano())
		n.wanting.Store(true)
	}
	n.mu.Unlock()
}

// wantedSince is when the demand floor was last held: the last refusal, or
// admission since, of a request as heavy as the floor.
func (n *Node) wantedSince() time.Time { return time.Unix(0, n.wantedAt.Load()) }

// floorHeld reports whether the demand floor (wanted) still holds at now:
// it was held less than LeaseTTL ago.
func (n *Node) floorHeld(now time.Time) bool {
	return n.wanting.Load() && now.Sub(n.wantedSince()) < n.cfg.LeaseTTL
}

// holdWanted keeps the weight a refusal left in the demand for LeaseTTL
// more after the admission of a request at least that heavy: a caller
// that comes back less often than the node heartbeats keeps the share its
// refusal won, and lighter requests do not keep a heavier one's. The hold
// is renewed once half of it has passed, so a node with a floor pays a
// clock read per admission, and one with none an atomic load.
func (n *Node) holdWanted(weight int) {
	if !n.wanting.Load() {
		return
	}
	now := time.Now()
	if now.Sub(n.wantedSince()) < n.cfg.LeaseTTL/2 {
		return
	}
	n.mu.Lock()
	switch {
	case !n.floorHeld(now):
		n.wanted = 0
		n.wanting.Store(false)
	case weight >= n.wanted:
		n.wantedAt.Store(now.UnixNano())
	}
	n.mu.Unlock()
}

// lateness judges a request whose context's deadline left it at least
// two no-load round trips of the upstream (the limiter's RTTNoload) when
// it arrived (at Transport, or at Acquire for Lease.CheckSend), and less
// now: the admission wait (and, for CheckSend, anything since) took its
// time.
// With less than one left, it cannot be answered in time, and an error
// wrapping ErrLate and context.DeadlineExceeded says not to send it; with
// less than two, late says that its timeout is no overload signal. A
// request that arrived with less, or while no round trip is known, is
// sent — a caller's own short deadline — unless its deadline has passed
// already: that one is never sent either. Its timeout counts as a drop
// if it was sent with at least one RTTNoload left, time the upstream
// answers in with no load; with less, it could not have been answered in
// time whatever the load (a probe's tight timeout), and late says so.
func (n *Node) lateness(ctx context.Context, arrived time.Time) (late bool, err error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return false, nil
	}
	left := time.Until(deadline)
	noload := n.lim.RTTNoload()
	if left > 0 && (noload <= 0 || deadline.Sub(arrived) < 2*noload) {
		return left < noload, nil
	}
	if left < noload || left <= 0 {
		return false, fmt.Errorf("%w: %v of the deadline left to send it in, the upstream's no-load round trip is %v; not sent: %w",
			ErrLate, max(left, 0).Round(time.Microsecond), noload.Round(time.Microsecond), context.DeadlineExceeded)
	}
	return left < 2*noload, nil
}
