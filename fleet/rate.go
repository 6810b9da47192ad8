package fleet

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/pace"
	"github.com/fleetlimit/fleetlimit/quota"
)

// RateConfig configures the node's part in the key's rate budgets
// (docs/design.md §17). A key has a rate per minute of requests and of
// tokens when an operator set one (fleetctl limits set KEY --rpm N --tpm
// N) or its nodes learn one; each node is granted a share of it with every
// heartbeat, in proportion to its rate demand, and paces its requests to
// that share locally (package pace): no round trip per request. On a key
// without rates the node does not pace. The zero RateConfig paces to the
// key's rates when it has any and learns none.
type RateConfig struct {
	// Learn makes the node learn the key's request rate from the 429s it
	// sees — seed 001's loop, package pace's Learner — and report it as
	// its estimate of the key's whole rate; the key's rate is the
	// aggregate of the nodes' estimates (its lower median, by default),
	// capped by the operator's. The learner's configuration is Learner
	// with NeedSaturation forced on, and these defaults for a quota
	// counted over a window (docs/design.md §17): HoldAfterCut and Window
	// = Window (a cut takes the rate to what the fleet got accepted over
	// the window, scaling the node's accepted requests by the key's rate
	// over its share), CutEarlyAfter 5 and ProbeFraction 0.5. After a cut
	// (a learned rate below the one in the last report a grant answered),
	// until a grant answers a report sent after it, the node paces to its
	// share × learned/key rate, so its cut acts before the fleet folds it
	// in; without one it paces at its share, whatever it learned. The
	// first grant warm-starts the learner at the key's stored rate. A
	// response's quota headers (x-ratelimit-limit-requests and the like)
	// cap the learned request rate with their tightest request limit, and
	// their tightest token limit is reported as the node's estimate of the
	// key's token rate; a node that does not learn ignores them.
	Learn bool
	// Learner configures the learner, in requests per second of the whole
	// key; with Learn, Learner.SeedRate is required.
	Learner pace.LearnerConfig
	// Burst is how long a node's share may be saved up and spent at once:
	// its buckets hold share×Burst. Defaults to Window/60 (1s for a quota
	// per minute). Must be 0 or in [1ms, Window] (a number with no unit is
	// nanoseconds).
	Burst time.Duration
	// Window is the window of the provider's quota: 1m for a quota per
	// minute (the default). The node paces to share × Window/(Window+Burst),
	// so that what its buckets save up cannot carry any window past the
	// share. Must be in [1s, 24h].
	Window time.Duration
	// Headroom is the fraction of its share a node leaves unused, for the
	// jitter between when it sends a request and when the provider counts
	// it: without it a fleet pacing exactly to the quota fills the window
	// to the last request, and a request delayed on its way lands in the
	// next window. Defaults to 0.01. Must be in [0, 0.5]; set a tiny
	// positive value for none.
	Headroom float64
}

func (c RateConfig) withDefaults() RateConfig {
	if c.Window == 0 {
		c.Window = time.Minute
	}
	// What defaults after the window: a window out of range is reported
	// as such, and not again through what would follow from it.
	window := c.Window
	if !validRateWindow(window) {
		window = time.Minute
	}
	if c.Burst == 0 {
		c.Burst = window / 60
	}
	if c.Headroom == 0 {
		c.Headroom = 0.01
	}
	c.Learner.NeedSaturation = true
	if c.Learner.HoldAfterCut == 0 {
		c.Learner.HoldAfterCut = window
	}
	if c.Learner.Window == 0 {
		c.Learner.Window = window
	}
	if c.Learner.ProbeFraction == 0 {
		c.Learner.ProbeFraction = 0.5
	}
	if c.Learner.CutEarlyAfter == 0 {
		c.Learner.CutEarlyAfter = 5
	}
	return c
}

// validRateWindow reports whether w is a window RateConfig accepts.
func validRateWindow(w time.Duration) bool { return w >= time.Second && w <= 24*time.Hour }

func (c RateConfig) validate() error {
	var errs []error
	if !validRateWindow(c.Window) {
		errs = append(errs, fmt.Errorf("fleet: Config.Rate.Window = %v, want [1s, 24h]", c.Window))
	}
	if !(c.Headroom >= 0 && c.Headroom <= 0.5) {
		errs = append(errs, fmt.Errorf("fleet: Config.Rate.Headroom = %v, want [0, 0.5]", c.Headroom))
	}
	switch {
	case c.Burst < time.Millisecond:
		errs = append(errs, fmt.Errorf("fleet: Config.Rate.Burst = %v, want 0 (Window/60) or in [1ms, Window]%s", c.Burst, unitHint(c.Burst)))
	case validRateWindow(c.Window) && c.Burst > c.Window:
		errs = append(errs, fmt.Errorf("fleet: Config.Rate.Burst = %v, want [1ms, Window] = [1ms, %v]", c.Burst, c.Window))
	}
	if c.Learn {
		if _, err := pace.NewLearner(c.Learner, time.Time{}); err != nil {
			errs = append(errs, fmt.Errorf("fleet: Config.Rate.Learner: %w", err))
		}
	}
	return errors.Join(errs...)
}

// WithTokens returns a copy of ctx that carries a request's estimated cost
// in tokens, which Node.Acquire and Transport debit from the node's token
// rate share (a key with a token rate). Without it a request costs 0
// tokens. Settle the actual cost when it is known (Lease.SettleTokens,
// SettleTokens): an under-estimate is charged to later requests, not
// forgiven, though a request never takes more than the key's token rate
// allows in one RateConfig.Window. A negative estimate counts as 0; an
// admission with one above MaxTokens fails with an error wrapping
// adaptive.ErrInvalidRequest.
func WithTokens(ctx context.Context, tokens int64) context.Context {
	return context.WithValue(ctx, tokensKey, max(tokens, 0))
}

// MaxTokens is the largest token estimate a request may carry
// (WithTokens): the largest rate per minute a key can have.
const MaxTokens = coord.MaxRate

// TokensFrom returns the token estimate ctx carries (WithTokens), or 0.
func TokensFrom(ctx context.Context) int64 {
	t, _ := ctx.Value(tokensKey).(int64)
	return t
}

// RateStatus is a node's view of the key's rate budgets, per minute.
type RateStatus struct {
	// Key is the key's rate (0: none on that dimension, unpaced).
	Key coord.Rates
	// Share is the node's granted share of it.
	Share coord.Rates
	// Learned is what the node reports as its estimate of the key's rate
	// (0: it learns none).
	Learned coord.Rates
	// Demand is the rate demand of its last report.
	Demand coord.Rates
	// Used is what the node sent in the minute before its last report
	// (to within a heartbeat interval): requests, and tokens as debited,
	// corrected when settled.
	Used coord.Rates
	// Waiting counts the requests waiting for the rate now.
	Waiting int64
}

// Rates returns the node's view of the key's rate budgets. Safe for
// concurrent use.
func (n *Node) Rates() RateStatus {
	r := n.rate
	r.mu.Lock()
	defer r.mu.Unlock()
	return RateStatus{Key: r.keyRate, Share: r.share, Learned: r.learned, Demand: r.demand, Used: r.used,
		Waiting: r.waiting.Load()}
}

// rateState is the node's rate machinery: a pacer at its shares, the
// learner, and the demand counters.
type rateState struct {
	cfg   RateConfig
	pacer *pace.Pacer
	// paced is whether the key has a rate on either dimension: when it
	// does not, an admission costs two atomic adds.
	paced atomic.Bool
	// arrived counts requests and tokens asked for since the last report;
	// waiting the requests and tokens waiting on the pacer now; slotWait
	// those waiting for a slot now, on a key with a rate (see
	// Node.acquire).
	arrivedReq, arrivedTok atomic.Int64
	waiting, waitingTok    atomic.Int64
	slotWait, slotWaitTok  atomic.Int64
	refusedTry             atomic.Bool   // a TryAcquireRequest was refused for the rate since the last report
	waits                  atomic.Uint64 // requests that waited, for the metrics
	// sentReq and sentTok count the requests let go since the last
	// report and their tokens: estimates, corrected when settled.
	sentReq, sentTok atomic.Int64

	mu       sync.Mutex
	learner  *pace.Learner // nil unless cfg.Learn
	warmed   bool          // the learner took the key's stored rate
	headerTP int64         // the token limit per minute the quota headers gave, 0 if none
	keyRate  coord.Rates
	share    coord.Rates
	shared   [2]bool // the node has had a rate share on each dimension since it started (see rateReport)
	learned  coord.Rates
	demand   coord.Rates
	used     coord.Rates
	newest   int64 // the newest second in sentLog
	// sentLog holds what was sent over the last minute, by second since
	// origin (monotonic): a request's estimate in the second of the
	// report that counted it, its correction when settled in the second
	// it was let go.
	sentLog [60]sentSecond
	origin  time.Time
	// cutFactor scales the request pacing below the share after the
	// learner cut, until a grant answers a report sent after the cut
	// (cutSince, zero when none); see setPacerLocked.
	cutFactor float64
	cutSince  time.Time
	// sampled is the learner's rate, per second, in the last report
	// sampled, at sampledAt; answered the rate in the last report a grant
	// answered: a rate below it is a cut the key's rate may not have yet
	// (see observeRate).
	sampled, answered float64
	sampledAt         time.Time
	// unpaced is set for good by stopPacing: the node admits nothing
	// more, and no later grant or cut of the learner paces it again.
	unpaced bool
	// avgDemand is the rate demand per minute averaged over demandMemory.
	avgDemand [2]float64
}

func newRateState(cfg RateConfig, now time.Time) (*rateState, error) {
	p, err := pace.New(pace.Config{RequestRate: pace.Unlimited, TokenRate: pace.Unlimited, Burst: cfg.Burst}, now)
	if err != nil {
		return nil, err
	}
	r := &rateState{cfg: cfg, pacer: p, cutFactor: 1, origin: now}
	if cfg.Learn {
		if r.learner, err = pace.NewLearner(cfg.Learner, now); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// pace holds an admitted request until the node's rate shares allow it,
// debiting 1 request and its token estimate, at most the tokenCap; it
// returns the ticket, that cap and when the wait ended (zero when the key
// has no rate). With wait false it
// refuses at once, with an error wrapping adaptive.ErrWouldWait, instead
// of waiting. A drain ends the wait with an error wrapping
// adaptive.ErrQueueFull: a drained node's rate share is 0 until an
// operator undrains it, and a request waiting that long would hold its
// slot, which the drain waits for. Once it has its reservation, at once
// or after a wait, it checks the node's state again: a node stopped,
// evicted or whose lease ran out meanwhile sends nothing, and the
// reservation is given back. The wait ends at bound (the slot's: a
// request sent later would outlive the reserve the coordinator keeps for
// it) with context.DeadlineExceeded.
func (n *Node) pace(ctx context.Context, bound time.Time, tokens int64, wait bool) (pace.Ticket, int64, time.Time, error) {
	r := n.rate
	limit := r.tokenCap()
	if limit > 0 {
		tokens = min(tokens, limit) // in the demand too, or an oversized estimate would claim the key's rate
	}
	r.arrivedReq.Add(1)
	r.arrivedTok.Add(tokens)
	if !r.paced.Load() {
		return pace.Ticket{}, limit, time.Time{}, nil
	}
	now := time.Now()
	t, ok, err := r.pacer.TryReserve(now, tokens)
	switch {
	case err != nil:
		return pace.Ticket{}, 0, time.Time{}, fmt.Errorf("fleet: rate: %w", err)
	case !ok && !wait:
		// A caller that tries again in a loop wants one request, not one
		// per try: the refused try is taken back from the arrivals, and
		// the report counts one request refused since (see rateReport).
		r.arrivedReq.Add(-1)
		r.arrivedTok.Add(-tokens)
		r.refusedTry.Store(true)
		n.saturated(now)
		return pace.Ticket{}, 0, time.Time{}, fmt.Errorf("%w: the node's rate share is spent for now", adaptive.ErrWouldWait)
	case !ok:
		n.saturated(now)
		r.waits.Add(1)
		r.waiting.Add(1)
		r.waitingTok.Add(tokens)
		wctx, cancel := context.WithDeadline(ctx, bound)
		t, err = n.waitRate(wctx, tokens)
		cancel()
		r.waiting.Add(-1)
		r.waitingTok.Add(-tokens)
		if err != nil {
			return pace.Ticket{}, 0, time.Time{}, err
		}
		now = time.Now()
	}
	if err := n.admissionErr(); err != nil {
		// Stop or eviction came after the slot: the pacing, lifted then
		// to wake the waiters, is no rate to send at.
		r.pacer.Cancel(now, t)
		return pace.Ticket{}, 0, time.Time{}, err
	}
	if err := n.pausedSince(); err != nil {
		r.pacer.Cancel(now, t) // an upstream's pause started as the wait ended
		return pace.Ticket{}, 0, time.Time{}, err
	}
	return t, limit, now, nil
}

// tokenCap is the most a request takes from the node's token share, its
// estimate and its actual cost alike: what the key's token rate allows in
// one Window; 0 when the key has no token rate (nothing is paced then).
// The upstream's window holds no more, and a larger debt would only idle
// the node — and, through its demand, the key — long after the window has
// forgotten the request.
func (r *rateState) tokenCap() int64 {
	r.mu.Lock()
	perMinute := r.keyRate.Tokens
	r.mu.Unlock()
	if perMinute <= 0 {
		return 0
	}
	return max(int64(float64(perMinute)*r.cfg.Window.Minutes()), 1)
}

// waitRate waits for the rate until ctx ends, a drain reaches the node,
// or an upstream's pause starts (see pace).
func (n *Node) waitRate(ctx context.Context, tokens int64) (pace.Ticket, error) {
	for {
		n.mu.Lock()
		drained, pausing := n.drained, n.pausing
		n.mu.Unlock()
		// quotaPause starts a pause before it ends pausing: one that
		// began before this wait is seen here.
		if err := n.pausedSince(); err != nil {
			return pace.Ticket{}, err
		}
		t, err := n.waitRateOnce(ctx, tokens, drained, pausing)
		if !errors.Is(err, errPausing) {
			return t, err
		}
		// Woken by a pause: refused at the loop's top, unless it is over.
	}
}

// waitRateOnce is one wait of waitRate, ended by drained or pausing
// too, the latter with an error wrapping errPausing.
func (n *Node) waitRateOnce(ctx context.Context, tokens int64, drained, pausing context.Context) (pace.Ticket, error) {
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopDrained := context.AfterFunc(drained, func() { cancel(errDrained) })
	defer stopDrained()
	stopPausing := context.AfterFunc(pausing, func() { cancel(errPausing) })
	defer stopPausing()
	t, err := n.rate.pacer.Wait(wctx, tokens)
	if err != nil && ctx.Err() == nil {
		switch cause := context.Cause(wctx); {
		case errors.Is(cause, errDrained):
			return pace.Ticket{}, n.drainingErr(fmt.Errorf("%w while waiting for the rate", adaptive.ErrQueueFull))
		case errors.Is(cause, errPausing):
			return pace.Ticket{}, cause
		}
	}
	return t, err
}

// errDrained and errPausing are the causes that end a wait for the rate
// at a drain and at the start of an upstream's pause.
var (
	errDrained = errors.New("drained")
	errPausing = errors.New("pausing")
)

// sent counts requests let go and their tokens, for the usage reported
// (Node.acquire, once a request has passed pace).
func (r *rateState) sent(requests, tokens int64) {
	r.sentReq.Add(requests)
	r.sentTok.Add(tokens)
}

// sentSecond is what the log holds for one second.
type sentSecond struct {
	sec      int64
	req, tok int64
}

// second is now's second since the rate state's origin, on the monotonic
// clock: a wall clock stepped back does not move it.
func (r *rateState) second(now time.Time) int64 { return int64(now.Sub(r.origin) / time.Second) }

// slotLocked returns the log's slot for second sec, emptied if it held an
// older second, or nil when sec has left the log (or is ahead of it). The
// caller holds r.mu.
func (r *rateState) slotLocked(sec, newest int64) *sentSecond {
	n := int64(len(r.sentLog))
	if sec < 0 || sec <= newest-n || sec > newest {
		return nil
	}
	s := &r.sentLog[sec%n]
	if s.sec != sec {
		*s = sentSecond{sec: sec}
	}
	return s
}

// usedLocked moves what was sent since the last report into the log, at
// now's second, and returns what the log holds for the minute up to now.
// The caller holds r.mu.
func (r *rateState) usedLocked(now time.Time) coord.Rates {
	sec := r.second(now)
	if sec < r.newest {
		// The clock went backwards (times without a monotonic reading):
		// start the log again rather than count its seconds as recent.
		r.sentLog, r.origin, sec = [len(r.sentLog)]sentSecond{}, now, 0
	}
	r.newest = sec
	s := r.slotLocked(sec, sec)
	s.req += r.sentReq.Swap(0)
	s.tok += r.sentTok.Swap(0)
	var req, tok int64
	for _, s := range r.sentLog {
		if s.sec > sec-int64(len(r.sentLog)) && s.sec <= sec {
			req += s.req
			tok += s.tok
		}
	}
	return coord.Rates{Requests: clampRate(float64(req)), Tokens: clampRate(float64(tok))}
}

// correctLocked adds a correction of req requests and tok tokens to the
// log at the second a request was let go — a settled request's actual −
// estimate, or a request that was not sent after all — so that the
// request and its correction leave the minute together (the correction
// first, by at most a heartbeat interval: the request went into the
// second of the report after). A request let go before the log's minute
// is not corrected. The caller holds r.mu.
func (r *rateState) correctLocked(sec, req, tok int64) {
	if s := r.slotLocked(sec, r.newest); s != nil {
		s.req += req
		s.tok += tok
	} else if sec > r.newest {
		// Let go since the last report: it is not in the log yet.
		r.sentReq.Add(req)
		r.sentTok.Add(tok)
	}
}

// rateStarved reports whether requests wait for a rate of which the node
// has no share: it had no rate demand when it last reported.
func (n *Node) rateStarved() bool {
	r := n.rate
	if r.waiting.Load() == 0 {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.keyRate.Requests > 0 && r.share.Requests == 0 || r.keyRate.Tokens > 0 && r.share.Tokens == 0
}

// saturated tells the learner that requests wanted more than the rate.
func (n *Node) saturated(now time.Time) {
	if l := n.learner(); l != nil {
		l.Saturated(now)
	}
}

// observeRate records the outcome of a request sent at sent for the
// learner: whether the upstream refused it for its rate (a 429, or a
// drop). A learned rate below the one carried by the last report a grant
// answered is a cut, which the node's pacing takes at once (see
// setPacerLocked); a learned rate below the key's with no cut since — the
// key's rate is the nodes' lower median, above the lower half's — leaves
// the pacing at the share.
func (n *Node) observeRate(now, sent time.Time, limited bool) {
	if !n.cfg.Rate.Learn {
		return
	}
	r := n.rate
	r.mu.Lock()
	defer r.mu.Unlock()
	scale := 0.0
	if r.share.Requests > 0 {
		scale = float64(r.keyRate.Requests) / float64(r.share.Requests)
	}
	r.learner.RecordSent(now, sent, limited, scale)
	rate := r.learner.Rate(now)
	if r.keyRate.Requests > 0 && rate < r.answered && rate*60 < r.cutFactor*float64(r.keyRate.Requests) {
		if r.cutSince.IsZero() {
			r.cutSince = now
		}
		r.setPacerLocked(now)
	}
}

// learner is the node's learner, nil unless it learns; it costs nothing
// then.
func (n *Node) learner() *pace.Learner {
	if !n.cfg.Rate.Learn {
		return nil
	}
	r := n.rate
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.learner
}

// demandMemory is the time constant over which a node's rate demand
// fades once its requests stop: a node between two requests keeps its
// share rather than give it up at every heartbeat.
const demandMemory = 5 * time.Second

// rateReport samples the rates for a report sent at now, elapsed after
// the previous one: the node's estimate of the key's rate, its rate
// demand, the shares it applies, and what it sent in the last minute. The
// demand on each dimension is the larger of what the node was asked for
// since the last report, plus what waits now for the rate — and, on a
// dimension where the key has a rate and the node has not yet had a share,
// for a slot, unless the node learns the key's rate — and what it owes (a
// token bucket in debt), per minute, and that amount averaged over
// demandMemory. Tries that TryAcquireRequest refused for the rate count as
// one request, however many: a caller polling in a loop wants one.
// Requests waiting for a slot count only until the first share: a joiner's
// requests wait for its concurrency share before they reach the pacer, but
// later a node held back by its own limit would claim rate it cannot send.
// A learning node's demand leaves them out: counted, they left section 8's
// learned way at 81-82 % used in two of three rounds (90-91 % without
// them).
func (n *Node) rateReport(now time.Time, elapsed time.Duration) (local, demand, applied, used coord.Rates) {
	r := n.rate
	elapsed = max(elapsed, 10*time.Millisecond)
	per := float64(time.Minute) / float64(elapsed)
	_, level := r.pacer.Levels(now)
	debt := max(-level, 0)
	if math.IsInf(debt, 0) || math.IsNaN(debt) {
		debt = 0
	}
	want := [2]float64{
		float64(r.arrivedReq.Swap(0)+r.waiting.Load()) * per,
		(float64(r.arrivedTok.Swap(0)+r.waitingTok.Load()) + debt) * per,
	}
	if r.refusedTry.Swap(false) {
		want[0] += per // one request wanted, however many tries asked for it
	}
	slotWait := [2]int64{r.slotWait.Load(), r.slotWaitTok.Load()}
	keep := math.Exp(-float64(elapsed) / float64(demandMemory))
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, rated := range [2]bool{r.keyRate.Requests > 0, r.keyRate.Tokens > 0} {
		if rated && !r.shared[i] && r.learner == nil {
			want[i] += float64(slotWait[i]) * per
		}
	}
	for i := range r.avgDemand {
		if r.avgDemand[i] == 0 {
			r.avgDemand[i] = want[i] // the first demand seen, not a ramp from nothing
		}
		r.avgDemand[i] = r.avgDemand[i]*keep + want[i]*(1-keep)
		want[i] = max(want[i], r.avgDemand[i])
	}
	demand = coord.Rates{Requests: clampRate(want[0]), Tokens: clampRate(want[1])}
	r.sampledAt = now
	if r.learner != nil {
		r.sampled = r.learner.Rate(now)
		local.Requests = max(clampRate(r.sampled*60), 1)
	}
	local.Tokens = r.headerTP
	used = r.usedLocked(now)
	r.learned, r.demand, r.used = local, demand, used
	if r.keyRate.Requests > 0 {
		applied.Requests = r.share.Requests
	}
	if r.keyRate.Tokens > 0 {
		applied.Tokens = r.share.Tokens
	}
	return local, demand, applied, used
}

// applyRates makes the pacer enforce a grant's rate shares, at once, before
// the grant is acknowledged; the first grant with a rate warm-starts the
// learner there. The grant answers the report sampled last (a resend
// sends that report again): a cut of the learner since then is not in it.
func (n *Node) applyRates(now time.Time, g coord.Grant) {
	r := n.rate
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.cutSince.IsZero() && r.sampledAt.After(r.cutSince) {
		r.cutSince = time.Time{} // the key's rate has the cut
	}
	r.answered = r.sampled
	if r.learner != nil && !r.warmed && g.Rate.Requests > 0 {
		r.warmed = true
		cfg := r.learner.Config()
		cfg.WarmRate = min(max(float64(g.Rate.Requests)/60, cfg.MinRate), cfg.MaxRate)
		if l, err := pace.NewLearner(cfg, now); err == nil {
			r.learner = l
			r.answered = l.Rate(now) // a cut from here is one below the key's rate
		}
	}
	r.keyRate, r.share = g.Rate, g.RateShare
	r.shared[0] = r.shared[0] || g.RateShare.Requests > 0
	r.shared[1] = r.shared[1] || g.RateShare.Tokens > 0
	r.setPacerLocked(now)
	r.paced.Store(!g.Rate.IsZero())
}

// setPacerLocked paces to the node's shares, scaled by the window bound
// and the headroom, and — after its learner cut the rate, until a grant
// answers a report that carried the cut — by the learned rate over the
// key's: a node cuts its own pacing at once, before the key's rate can
// fold in its new estimate. The caller holds r.mu.
func (r *rateState) setPacerLocked(now time.Time) {
	scale := (1 - r.cfg.Headroom) * float64(r.cfg.Window) / float64(r.cfg.Window+r.cfg.Burst)
	perSecond := func(key, share int64, f float64) float64 {
		if key == 0 {
			return pace.Unlimited
		}
		return float64(share) / 60 * scale * f
	}
	r.cutFactor = 1
	if !r.cutSince.IsZero() && r.keyRate.Requests > 0 {
		r.cutFactor = min(r.learner.Rate(now)*60/float64(r.keyRate.Requests), 1)
	}
	if r.unpaced {
		return
	}
	// Both rates are finite and >= 0, which SetRate accepts.
	_ = r.pacer.SetRate(now, perSecond(r.keyRate.Requests, r.share.Requests, r.cutFactor),
		perSecond(r.keyRate.Tokens, r.share.Tokens, 1))
}

// debit is one request's debit from the node's rate shares, shared by its
// Lease and its copies, its response's body and its request's context, so
// that its tokens are settled once.
type debit struct {
	node     *Node
	ticket   pace.Ticket // zero when the request was not paced
	paced    bool        // the request took ticket from the pacer: the key had a rate then
	estimate int64       // its token estimate
	limit    int64       // the tokenCap when it was let go: what settle charges at most; 0 for none
	sec      int64       // the second it was let go (rateState.second)
	settled  atomic.Bool
}

// newDebit returns the debit of a request let go at now with its ticket
// and token estimate; paced says whether the pacer gave the ticket.
func (r *rateState) newDebit(n *Node, t pace.Ticket, paced bool, estimate, limit int64, now time.Time) *debit {
	return &debit{node: n, ticket: t, paced: paced, estimate: estimate, limit: limit, sec: r.second(now)}
}

// settle charges the debit's actual token cost, once; see
// Lease.SettleTokens.
func (d *debit) settle(actual int64) error {
	if err := checkActual(actual); err != nil {
		return err
	}
	if !d.settled.CompareAndSwap(false, true) {
		return errors.New("fleet: settle tokens: the request's tokens were settled already")
	}
	r := d.node.rate
	if d.paced {
		// A request let go while the key had no rate took nothing from
		// the pacer, whose buckets may pace a rate set since: its cost
		// is only the usage reported.
		charged := actual
		if d.limit > 0 {
			charged = min(actual, d.limit) // the cap its estimate was charged under, whatever the key's rate is now
		}
		if err := r.pacer.Settle(time.Now(), d.ticket, charged); err != nil {
			return fmt.Errorf("fleet: settle tokens: %w", err)
		}
	}
	r.mu.Lock()
	r.correctLocked(d.sec, 0, actual-d.estimate)
	r.mu.Unlock()
	return nil
}

// cancel gives the debit back, once, for a request that was never sent:
// both reservations return to the node's buckets (pace.Pacer.Cancel), and
// the usage the node reports forgets the request and its token estimate.
// After settle, or a second time, it does nothing.
func (d *debit) cancel() {
	if !d.settled.CompareAndSwap(false, true) {
		return
	}
	r := d.node.rate
	if d.paced {
		r.pacer.Cancel(time.Now(), d.ticket)
	}
	r.mu.Lock()
	r.correctLocked(d.sec, -1, -d.estimate)
	r.mu.Unlock()
}

// SettleTokens charges the actual token cost of the request behind resp,
// a response returned through the node's Transport, as Lease.SettleTokens
// does; it finds the request's debit through resp.Body or, when a client
// wrapped the body (http.Client with a Timeout does), resp.Request. Call
// it once per response: a second call returns an error and changes
// nothing. On a key without a token rate it paces nothing and only
// corrects the usage reported. It returns an error for a response that
// came through no fleet Transport, for a nil resp (a request that
// failed: its estimate stays charged, unless Transport never sent it —
// the lease ran out before the send, or the base transport failed before
// writing the request's headers — and gave its debit back), and for an
// actual outside 0..MaxTokens, which changes nothing.
func SettleTokens(resp *http.Response, actual int64) error {
	if resp == nil {
		return errors.New("fleet: settle tokens: nil response")
	}
	if b, ok := resp.Body.(*leaseBody); ok {
		return b.debit.settle(actual)
	}
	if resp.Request != nil {
		if d, ok := resp.Request.Context().Value(ticketKey).(*debit); ok {
			return d.settle(actual)
		}
	}
	if err := checkActual(actual); err != nil {
		return err
	}
	return errors.New("fleet: settle tokens: the response did not come through a fleet Transport")
}

// checkActual returns an error naming an actual token cost outside
// 0..MaxTokens, which SettleTokens refuses.
func checkActual(actual int64) error {
	if actual < 0 || actual > MaxTokens {
		return fmt.Errorf("fleet: settle tokens: actual = %d, want 0..%d", actual, int64(MaxTokens))
	}
	return nil
}

// stopPacing ends every wait on the pacer: the node admits nothing more
// (Stop, eviction). Waiters find the node's state and give up.
func (n *Node) stopPacing(now time.Time) {
	r := n.rate
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unpaced = true
	_ = r.pacer.SetRate(now, pace.Unlimited, pace.Unlimited)
}

// readRateQuota takes what a response's quota headers say of the key's
// rates, when the node learns them (RateConfig.Learn): the tightest
// request limit caps the learned request rate, and the tightest token
// limit becomes the node's estimate of the key's token rate. Limits
// without a window are taken as per minute, as OpenAI's and Anthropic's
// are; a limit over a longer window counts as its average per minute.
func (n *Node) readRateQuota(info quota.Info, now time.Time) {
	r := n.rate
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.learner == nil {
		return
	}
	tightest := map[quota.Unit]float64{}
	for _, p := range info.Policies {
		if p.Limit <= 0 {
			continue
		}
		window := p.Window
		if window <= 0 {
			window = time.Minute
		}
		perMinute := float64(p.Limit) * float64(time.Minute) / float64(window)
		if v, ok := tightest[p.Unit]; !ok || perMinute < v {
			tightest[p.Unit] = perMinute
		}
	}
	if v, ok := tightest[quota.Requests]; ok {
		_ = r.learner.SetCeiling(now, v/60)
	}
	if v, ok := tightest[quota.Tokens]; ok {
		r.headerTP = clampRate(v)
	}
}

// clampRate rounds a rate per minute into [0, coord.MaxRate].
func clampRate(v float64) int64 {
	if !(v > 0) {
		return 0
	}
	return int64(math.Min(math.Round(v), coord.MaxRate))
}
