package adaptive

import (
	"context"
	"math"
	"sync"
	"time"
)

// Limiter is an adaptive concurrency limiter: it admits requests while the
// sum of their weights in flight stays within Limit() (a plain Acquire
// weighs 1; a request heavier than the limit runs alone, within the hard
// bound: see the package documentation, Admission) and moves its estimate
// of the upstream's capacity as leases settle. Create it with New. All
// methods are safe for concurrent use; each takes one short lock and none
// starts a goroutine. An admission and its Release cost about 200ns
// together and do not allocate; neither does a refusal, but for an
// ErrTooHeavy one of a weight other than the last one refused.
type Limiter struct {
	cfg Config // defaulted and validated; read-only after New

	mu             sync.Mutex
	law            lawParams // the running law's fields of cfg (see Auto)
	flatLaw        lawParams // under Auto, the law it moves to
	climbFast      bool      // Config.Smoothing was left 0: Gradient2 may climb at targetSmoothing (see smoothing)
	flatRefusals   int       // under Auto, the refusals in a row that showed no queueing
	flatFirst      uint64    // under Auto, the round of the first of them
	flatRound      uint64    // under Auto, the round of the last of them
	estimate       float64
	ceiling        int
	hasCeiling     bool
	ceilingUntil   time.Time // the ceiling is 0 from then on; zero: no expiry
	cut            int       // slots drops have taken off the ceiling; < ceiling unless 0
	cutCalm        int       // round trips without a drop since the last one, while cut > 0
	cutWait        int       // round trips from a drop to the first give-back (see recoverCut)
	cutGiven       int       // round trips since the last give-back; noneGiven if none since the last drop
	cutHit         int       // the cut a give-back left when it was refused before it held; -1 if none
	cutStep        int       // slots the next give-back returns (see recoverCut)
	giveDue        bool      // a give-back waits for the next ProbeTick (see recoverCut)
	giveWaited     int       // round trips it has waited
	refused        int       // weight in flight at the last drop under a ceiling; 0 if none or forgotten (see SetCeiling)
	refusedLoad    int       // with a fleet limit, the fleet's load when the last drop under a ceiling was admitted; 0 if none or forgotten (see SetFleetLimit)
	giveTurn       int       // due give-backs past the node's part of refusedLoad let pass since the last one given (see giveBack)
	absorbed       int       // slots of the cut that a higher ceiling added rather than a drop; at most cut
	refusedCalm    int       // ProbeTicks without a drop since then
	tightTicks     int       // ProbeTicks without a drop still to pass before the guard leaves tightUtilization (see propose)
	cutFrom        uint64    // leases admitted with seq in [cutFrom, cutUntil) were sent while slots were coming back (see recoverCut)
	cutUntil       uint64    // math.MaxUint64 while they still are
	cutClosed      uint64    // the round in which they stopped coming back
	admits         uint64    // leases admitted so far
	cutLag         int       // round trips a refusal of a request sent then last took (see recoverCut), at most maxCutWait; 0 once a recovery ends
	inflight       int       // Σ weight of the leases not yet settled
	paced          int       // PaceGrowth: the most weight clean releases, or a spell unpaced, let in flight; at most the limit (during a hold, the limit it masks)
	lastClean      time.Time // PaceGrowth: when a lease last settled clean
	leases         int       // leases not yet settled
	peak           int64     // most weight in flight + queued since the last TakePeak
	peerInflight   int
	fleetLimit     int // the fleet limit the ceiling is a share of (SetFleetLimit); 0: none
	pausedUntil    time.Time
	pauseErr       *PauseError // ErrPaused with pausedUntil, made once per pause
	drops          uint64
	tickDrops      uint64        // drops at the last ProbeTick
	tickAdmitted   bool          // a lease was admitted since the last ProbeTick
	tickAt         time.Time     // when the last ProbeTick came; zero before the first
	tickGap        time.Duration // the time between the last two ProbeTicks; 0 before the second
	backoffEpoch   uint64        // bumped by every multiplicative decrease
	lastBackoff    time.Time     // when the last multiplicative decrease happened
	calmRounds     uint64        // AIMD round trips (and calm ProbeTicks) since the last drop or backoff
	backedFrom     float64       // AIMD: the level the last backoff came down from (see ProbeTick)
	round          uint64        // bumped by every law update: one per round trip
	roundMin       time.Duration // fastest clean sample since the last update; 0 if none
	queueLast      time.Duration // fastest clean sample of the last round trip, if evidence of queueing for dropRatio; 0 if none or used
	queueAt        time.Time     // when the round trip of queueLast closed
	queueDrained   time.Time     // when the queue the last queue backoff answered has drained (see dropRatio)
	window         minWindow
	band           noiseBand // Gradient2's measured tolerance when Config.Tolerance is zero
	recal          recalState
	free           *leaseRecord
	queue          wfq
	waiters        sync.Pool      // of *waiter
	errTooHeavy    *tooHeavyError // the last ErrTooHeavy error returned, kept for its weight's next refusal; nil before the first
	errWaitTimeout error          // the ErrWaitTimeout error, naming TimeoutFactor, made once by New

	// onAdmit, when set by a test, is called with the lock held after every
	// admission with the new weight in flight, the admitted weight, and the
	// limit and the hard bound it was admitted under.
	onAdmit func(inflight, weight, limit, bound int)
	// afterWaitCancel, when set by a test, runs in Acquire between seeing
	// the context end and taking the lock to leave the queue.
	afterWaitCancel func()
}

// New returns a Limiter configured by cfg, or an error naming every
// out-of-range field of cfg.
func New(cfg Config) (*Limiter, error) {
	raw := cfg
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	l := &Limiter{
		cfg:      cfg,
		law:      paramsOf(cfg),
		estimate: float64(cfg.InitialLimit),
		window:   newMinWindow(cfg.RTTWindow),
		paced:    cfg.InitialLimit,

		errWaitTimeout: newErrWaitTimeout(cfg.TimeoutFactor),
	}
	if cfg.Law == Auto {
		l.flatLaw = flatParams(raw)
	}
	l.climbFast = raw.Smoothing == 0
	l.restartCutRecovery()
	l.queue.heads = make([]head, 0, len(l.queue.flows))
	l.waiters.New = newWaiter
	l.recal.schedule(&l.cfg, cfg.Clock.Now())
	return l, nil
}

// TryAcquire admits a request of weight 1 at DefaultPriority if it fits
// under the limit now, nobody is queued ahead of it and admission is not
// paused; see TryAcquireRequest. It never waits. On false the Lease is the
// zero Lease.
func (l *Limiter) TryAcquire() (Lease, bool) {
	le, err := l.TryAcquireRequest(unitRequest)
	return le, err == nil
}

// Acquire admits a request of weight 1 at DefaultPriority, waiting for a
// slot if none is free; see AcquireRequest. Among requests of one priority
// the queue is FIFO.
func (l *Limiter) Acquire(ctx context.Context) (Lease, error) {
	return l.AcquireRequest(ctx, unitRequest)
}

// limit is the effective limit at now: floor(estimate), or MinLimit while
// recalibrating, capped by the ceiling less the slots drops have cut from
// it, and 0 once the ceiling's deadline has passed. The caller holds l.mu.
func (l *Limiter) limit(now time.Time) int {
	n := int(l.estimate)
	if l.recal.active() {
		n = l.cfg.MinLimit
	}
	if l.ceilingExpired(now) {
		return 0
	}
	return l.underCeiling(n)
}

// underCeiling caps n at the ceiling less the slots drops have cut from
// it, when there is a ceiling. The caller holds l.mu.
func (l *Limiter) underCeiling(n int) int {
	if l.hasCeiling {
		n = min(n, max(l.ceiling-l.cut, 0))
	}
	return n
}

// ceilingExpired reports whether the ceiling's deadline has passed at now,
// by the monotonic reading of now and, when both times carry one, by the
// wall clock too: a suspended machine's monotonic clock stands still while
// its wall clock does not. The caller holds l.mu.
func (l *Limiter) ceilingExpired(now time.Time) bool {
	if l.ceilingUntil.IsZero() {
		return false
	}
	return !now.Before(l.ceilingUntil) || !now.Round(0).Before(l.ceilingUntil.Round(0))
}

func (l *Limiter) paused(now time.Time) bool {
	return now.Before(l.pausedUntil)
}

// hardBound is the most weight the limiter may ever have in flight at
// now, whatever the estimate: the ceiling when one is set, 0 once its
// deadline has passed, and MaxLimit without one; never above MaxLimit.
// The limit is at most the hard bound. The caller holds l.mu.
func (l *Limiter) hardBound(now time.Time) int {
	switch {
	case l.ceilingExpired(now):
		return 0
	case l.hasCeiling:
		return min(l.ceiling, l.cfg.MaxLimit)
	}
	return l.cfg.MaxLimit
}

// room is the heaviest weight that fits now: what the limit leaves above
// the weight in flight, or, when nothing is in flight, the hard bound —
// a request heavier than the limit runs alone, so inference that took the
// limit below a weight (backoffs, a drop's cut, a recalibration's pin to
// MinLimit) cannot lock that weight out for good, and its samples let the
// estimate grow again. 0 while admission is paused. The caller holds l.mu.
func (l *Limiter) room(now time.Time) int {
	switch {
	case l.paused(now):
		return 0
	case l.inflight == 0:
		return l.hardBound(now)
	}
	n := l.limit(now)
	if l.pacing(now) {
		n = min(n, l.pacedBound(n))
	}
	return n - l.inflight // both in [0, MaxLimit]: no overflow
}

// pacedBound is the most weight PaceGrowth lets in flight under a limit
// of n while it paces (see pacing): what clean releases let in, paced,
// but at least half the limit. The caller holds l.mu.
func (l *Limiter) pacedBound(n int) int { return max(l.paced, n/2) }

// pacing reports whether PaceGrowth holds the in-flight to paced at now:
// only while leases keep settling clean, at least one within the last
// no-load round trip. Without such releases there is no clock to pace
// by — the leases in flight are long ones, or none has settled yet —
// and the whole limit is admitted; what is admitted so raises paced, so
// that when releases bring the pacing back it climbs on from there
// rather than holding admission until the in-flight falls to max(paced,
// half the limit). Nor does it hold AIMD's slow start under a ceiling
// (unpacedStart): a fleet node's share grows only as the lower median of
// the fleet's estimates does, each at most three times the load tried,
// and once per heartbeat; pacing each such step again as leases settle
// held the start back by a round trip per step where a round trip is
// longer than a heartbeat. Nor a recalibration's probes, which the pin
// bounds. The caller holds l.mu.
func (l *Limiter) pacing(now time.Time) bool {
	if !l.law.paceGrowth || l.unpacedStart() || l.recal.active() {
		return false
	}
	noload, ok := l.window.min()
	return ok && now.Sub(l.lastClean) < noload
}

// holding reports whether a hold masks the limit at now: a
// recalibration's pin (MinLimit, for its probes only), a ceiling past its
// deadline, or a ceiling of 0 (a fenced node, or a share of nothing).
// During a hold, pace lowers paced only to the limit the hold masks
// (maskedLimit), not to what the hold admits, and clean releases do not
// raise it, though they still keep the pacing's clock: the leases that
// outlive the hold are no climb, so when it ends each slot a release
// freed meanwhile is refilled, up to the limit the hold masked, and a
// raise is taken up as leases settle, from where the pacing stood —
// rather than from MinLimit or 0, which would hold a node with a full
// limit in flight until the in-flight fell to half the limit. The
// caller holds l.mu.
func (l *Limiter) holding(now time.Time) bool {
	return l.recal.active() || l.ceilingExpired(now) || l.hasCeiling && l.ceiling == 0
}

// maskedLimit is the limit a hold masks (see holding): floor(estimate),
// capped by the ceiling less the cut unless the ceiling is 0, which says
// nothing of the share to come; neither the pin nor the deadline counts.
// The caller holds l.mu.
func (l *Limiter) maskedLimit() int {
	if l.hasCeiling && l.ceiling == 0 {
		return int(l.estimate)
	}
	return l.underCeiling(int(l.estimate))
}

// unpacedStart reports whether the limiter is in AIMD's slow start under
// a ceiling, which PaceGrowth does not hold (see pacing). The caller
// holds l.mu.
func (l *Limiter) unpacedStart() bool { return l.hasCeiling && l.slowStarting() }

// pace lowers paced to the limit at now, so that a later rise of the
// limit is taken up as leases settle (see Config.PaceGrowth); during a
// hold, only to the limit the hold masks (see holding). Without
// PaceGrowth it does nothing, so settling costs no extra limit. While
// the slow start under a ceiling is not paced (see pacing), paced follows
// the limit both ways outside a hold, so that the pacing the first
// decrease or a cleared ceiling resumes starts from the in-flight the
// share let in, not from where paced stood before the slow start sent
// it. The caller holds l.mu and calls it after anything that may move
// the limit.
func (l *Limiter) pace(now time.Time) {
	switch {
	case !l.law.paceGrowth:
	case l.holding(now):
		l.paced = min(l.paced, l.maskedLimit())
	case l.unpacedStart():
		l.paced = l.limit(now)
	default:
		l.paced = min(l.paced, l.limit(now))
	}
}

// fits reports whether a lease of the given weight may be admitted now,
// ignoring the queue. The caller holds l.mu.
func (l *Limiter) fits(now time.Time, weight int) bool {
	return weight <= l.room(now)
}

// notePeak raises the peak TakePeak reports to the weight in flight plus
// the weight queued. The caller holds l.mu.
func (l *Limiter) notePeak() {
	l.peak = max(l.peak, int64(l.inflight)+l.queue.weight)
}

// admit takes weight units of the limit for a request of priority p and
// returns its lease. The caller holds l.mu and has checked fits.
func (l *Limiter) admit(now time.Time, p uint8, weight int) Lease {
	rec := l.newRecord()
	l.inflight += weight
	l.leases++
	l.tickAdmitted = true
	if l.law.paceGrowth && !l.pacing(now) && !l.holding(now) {
		// Admitted unpaced: the pacing, when releases bring it back,
		// climbs on from what was let in.
		l.paced = max(l.paced, min(l.inflight, l.limit(now)))
	}
	c := &l.queue.stats[p]
	c.admitted++
	c.admittedWeight += uint64(weight)
	rec.weight = weight
	rec.start = now
	rec.load = addCounts(l.inflight, l.peerInflight)
	rec.backoffEpoch = l.backoffEpoch
	rec.recalSeq = l.recal.seq
	rec.round = l.round
	l.admits++
	rec.seq = l.admits
	rec.dropSeen = false
	if l.onAdmit != nil {
		l.onAdmit(l.inflight, weight, l.limit(now), l.hardBound(now))
	}
	return Lease{rec: rec, gen: rec.gen}
}

// addCounts returns a + b for counts a, b ≥ 0, or math.MaxInt if the sum
// would overflow.
func addCounts(a, b int) int {
	if a > math.MaxInt-b {
		return math.MaxInt
	}
	return a + b
}

// dispatch hands free room to queued waiters in the queue's order (see
// wfq). The head blocks: while it does not fit, nobody behind it is
// admitted, however light, so a heavy request is not starved by a stream
// of light ones. A waiter heavier than the hard bound, which could not
// run even alone, is passed over: it waits for the bound to rise without
// blocking the others. The caller holds l.mu and calls it after anything
// that may raise the limit or the bound, or remove a waiter.
func (l *Limiter) dispatch(now time.Time) {
	for l.queue.len > 0 {
		room := l.room(now)
		if room < 1 {
			return
		}
		w, finish := l.queue.next(l.hardBound(now))
		if w == nil || w.weight > room {
			return
		}
		l.queue.take(w, finish)
		w.lease = l.admit(now, w.priority, w.weight)
		w.waited = now.Sub(w.since)
		c := &l.queue.stats[w.priority]
		c.waits++
		c.waitTime += w.waited
		w.ready <- struct{}{}
	}
}

// settle ends le's hold on its slot, once. rtt < 0 means the round trip
// lasted from admission to now.
func (l *Limiter) settle(le Lease, o outcome, rtt time.Duration) {
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	rec := le.rec
	if rec.gen != le.gen {
		l.mu.Unlock()
		return
	}
	rec.gen++
	load := max(rec.load, addCounts(l.inflight, l.peerInflight))
	l.inflight -= rec.weight
	l.leases--
	if rtt < 0 {
		rtt = now.Sub(rec.start)
	}
	if rec.dropSeen {
		o = ignored // its drop was counted when observed
	}
	l.observe(now, rec, o, load, rtt)
	l.pace(now)
	l.freeRecord(rec)
	l.tick(now)
	l.dispatch(now)
	l.mu.Unlock()
}

// cutRecovery is how many round trips without a drop pass before a slot
// that a drop cut from the ceiling comes back, and the fewest after which
// a give-back holds; maxCutWait the most that the wait after a drop grows
// to when give-backs are refused again, and the most a give-back waits to
// hold; maxCutStep the most slots one give-back returns (see
// recoverCut). cutGiven is noneGiven when no slot was given back since
// the last drop.
const (
	cutRecovery = 5
	// tightUtilization is the least utilization threshold of a fleet
	// node from a drop until cutRecovery ProbeTicks have passed without
	// one (see propose).
	tightUtilization = 0.9
	maxCutWait       = 64
	maxCutStep       = 32
	noneGiven        = 1 << 30
)

// giveDueRounds is how many round trips a fleet node's give-back that is
// due waits for a ProbeTick before it is made at a round trip (see
// recoverCut): longer than a heartbeat interval at any request rate
// where round trips are shorter than heartbeats, so that grants, not
// round trips, time the give-backs.
const giveDueRounds = 4 * cutRecovery
