package pace

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// LearnerConfig configures a Learner. SeedRate is required; zero values of
// the other fields take the defaults stated on each, which translate the
// seed's interval constants (seed_interval 3000ms, min_interval 1500ms,
// max_interval 6000ms, backoff_mul 1.5, speedup_step 200ms) into rates.
type LearnerConfig struct {
	// SeedRate is the rate to start from when there is no stored one, in
	// units per second, and the scale of the defaults of MinRate, MaxRate
	// and SpeedupStep. Must be > 0, finite, and within [MinRate, MaxRate].
	// Required.
	SeedRate float64
	// WarmRate, when not 0, is a rate learned before (Learner.Rate of an
	// earlier run, stored) to start from instead of SeedRate. Must be 0 or
	// within [MinRate, MaxRate].
	WarmRate float64
	// MinRate and MaxRate bound the rate. MinRate must be > 0 and MaxRate
	// >= MinRate, finite. MinRate defaults to SeedRate/2 and MaxRate to
	// SeedRate×2, as the seed's max_interval is twice its seed_interval
	// and its min_interval half of it.
	MinRate, MaxRate float64
	// CheckPeriod is how often the rate is judged: periods of this length
	// follow one another from the Learner's creation. Must be > 0 when
	// set. Defaults to 5s.
	CheckPeriod time.Duration
	// TargetErrorPct is the error percentage (429s per 100 requests in a
	// period) above which the rate is cut. Must be in (0, 100] when set.
	// Defaults to 10.
	TargetErrorPct float64
	// RecoverPct is the error percentage below which the rate grows; from
	// it to TargetErrorPct, both included, is the dead zone where the rate
	// holds. Must be in (0, TargetErrorPct] when set. Defaults to half of
	// TargetErrorPct (5 with the default target).
	RecoverPct float64
	// BackoffMul divides the rate on a cut. Must be > 1 when set. Defaults
	// to 1.5.
	BackoffMul float64
	// SpeedupStep is added to the rate on a period below RecoverPct, in
	// units per second. Must be > 0 when set. Defaults to SeedRate/15, the
	// seed's 200ms step as a share of its 3000ms seed interval.
	SpeedupStep float64
	// NeedSaturation, when true, lets a period below RecoverPct raise the
	// rate only if Saturated was called in it: only a period in which the
	// requests wanted more than the rate is evidence that a higher rate
	// would be used. Other such periods hold the rate (Held). A fleet's
	// nodes need it: a node that sends less than its share would otherwise
	// raise its estimate of the fleet's rate without ever testing it.
	NeedSaturation bool
	// HoldAfterCut, when > 0, holds the rate for this long after a cut:
	// periods that end within it may cut again but not raise it. A quota
	// counted over a sliding window answers 429 up to a window after the
	// rate that filled it, so a rate raised at once after a cut is raised
	// on stale evidence; set it to the quota's window. Must be >= 0.
	// Defaults to 0.
	HoldAfterCut time.Duration
	// ProbeFraction is the fraction of SpeedupStep by which the rate grows
	// in the first SpeedupStep above the rate a cut set: just after a cut
	// the rate is near the most the upstream lets through, and probing
	// above it by full steps overshoots a quota counted over a window by
	// a step for up to a window. Above that band the rate grows by
	// SpeedupStep again. Must be in (0, 1] when set. Defaults to 1, the
	// seed's loop, which probes at full steps.
	ProbeFraction float64
	// Window, when > 0, is the upstream's quota window: the Learner then
	// keeps the requests accepted over the last Window (RecordScaled), and
	// a cut takes the rate to their rate — what the quota let through,
	// which over a window that the quota filled is the quota — when that
	// lies between rate/BackoffMul² and a cut of TargetErrorPct. Without
	// it, or before a window of records, a cut divides by BackoffMul. A
	// quota counted over a sliding window answers 429 only once the window
	// is full, when a rising rate has passed the quota by up to the rise
	// of half a window; the period's own 429s then understate or overstate
	// the excess, the window's accepted requests do not. Must be >= 0.
	Window time.Duration
	// CutEarlyAfter, when > 0, judges a period before its end as soon as
	// it holds this many 429s and they are above TargetErrorPct of its
	// requests; the next period starts then. A quota counted over a window
	// refuses everything above it once the window is full, so waiting out
	// the period costs a period of 429s. Must be >= 0. Defaults to 0 (the
	// seed's loop: periods are judged at their end). Record requests with
	// RecordSent so that the 429s of requests sent before a cut, which
	// the cut has already taken into account, do not cut again.
	CutEarlyAfter int64
	// MinRequests is the fewest requests a period needs to be judged; a
	// period with fewer leaves the rate unchanged (Idle). Must be >= 0.
	// Defaults to 1.
	MinRequests int64
}

func (cfg LearnerConfig) withDefaults() (LearnerConfig, error) {
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	if !(cfg.SeedRate > 0) || !finite(cfg.SeedRate) {
		return cfg, fmt.Errorf("pace: LearnerConfig.SeedRate must be > 0 and finite, got %v", cfg.SeedRate)
	}
	minDefault, maxDefault := cfg.MinRate == 0, cfg.MaxRate == 0
	if minDefault {
		cfg.MinRate = cfg.SeedRate / 2
	}
	if maxDefault {
		cfg.MaxRate = cfg.SeedRate * 2
	}
	if cfg.CheckPeriod == 0 {
		cfg.CheckPeriod = 5 * time.Second
	}
	if cfg.TargetErrorPct == 0 {
		cfg.TargetErrorPct = 10
	}
	if cfg.RecoverPct == 0 {
		cfg.RecoverPct = cfg.TargetErrorPct / 2
	}
	if cfg.BackoffMul == 0 {
		cfg.BackoffMul = 1.5
	}
	if cfg.SpeedupStep == 0 {
		cfg.SpeedupStep = cfg.SeedRate / 15
	}
	if cfg.MinRequests == 0 {
		cfg.MinRequests = 1
	}
	if cfg.ProbeFraction == 0 {
		cfg.ProbeFraction = 1
	}
	switch {
	case minDefault && !(cfg.MinRate > 0):
		return cfg, fmt.Errorf("pace: LearnerConfig.SeedRate = %v leaves MinRate's default, SeedRate/2, at 0: set MinRate", cfg.SeedRate)
	case maxDefault && !finite(cfg.MaxRate):
		return cfg, fmt.Errorf("pace: LearnerConfig.SeedRate = %v leaves MaxRate's default, 2·SeedRate, infinite: set MaxRate", cfg.SeedRate)
	case !(cfg.MinRate > 0) || !finite(cfg.MinRate):
		return cfg, fmt.Errorf("pace: LearnerConfig.MinRate must be > 0 and finite, got %v", cfg.MinRate)
	case !(cfg.MaxRate >= cfg.MinRate) || !finite(cfg.MaxRate):
		return cfg, fmt.Errorf("pace: LearnerConfig.MaxRate must be finite and >= MinRate (%v), got %v", cfg.MinRate, cfg.MaxRate)
	case cfg.SeedRate < cfg.MinRate || cfg.SeedRate > cfg.MaxRate:
		return cfg, fmt.Errorf("pace: LearnerConfig.SeedRate must be within [MinRate, MaxRate] = [%v, %v], got %v", cfg.MinRate, cfg.MaxRate, cfg.SeedRate)
	case cfg.WarmRate != 0 && !(cfg.WarmRate >= cfg.MinRate && cfg.WarmRate <= cfg.MaxRate):
		return cfg, fmt.Errorf("pace: LearnerConfig.WarmRate must be 0 or within [MinRate, MaxRate] = [%v, %v], got %v", cfg.MinRate, cfg.MaxRate, cfg.WarmRate)
	case cfg.CheckPeriod < 0:
		return cfg, fmt.Errorf("pace: LearnerConfig.CheckPeriod must be > 0, got %v", cfg.CheckPeriod)
	case !(cfg.TargetErrorPct > 0 && cfg.TargetErrorPct <= 100):
		return cfg, fmt.Errorf("pace: LearnerConfig.TargetErrorPct must be in (0, 100], got %v", cfg.TargetErrorPct)
	case !(cfg.RecoverPct > 0 && cfg.RecoverPct <= cfg.TargetErrorPct):
		return cfg, fmt.Errorf("pace: LearnerConfig.RecoverPct must be in (0, TargetErrorPct] = (0, %v], got %v", cfg.TargetErrorPct, cfg.RecoverPct)
	case !(cfg.BackoffMul > 1) || !finite(cfg.BackoffMul):
		return cfg, fmt.Errorf("pace: LearnerConfig.BackoffMul must be > 1 and finite, got %v", cfg.BackoffMul)
	case !(cfg.SpeedupStep > 0) || !finite(cfg.SpeedupStep):
		return cfg, fmt.Errorf("pace: LearnerConfig.SpeedupStep must be > 0 and finite, got %v", cfg.SpeedupStep)
	case cfg.HoldAfterCut < 0:
		return cfg, fmt.Errorf("pace: LearnerConfig.HoldAfterCut must be >= 0, got %v", cfg.HoldAfterCut)
	case !(cfg.ProbeFraction > 0 && cfg.ProbeFraction <= 1):
		return cfg, fmt.Errorf("pace: LearnerConfig.ProbeFraction must be in (0, 1], got %v", cfg.ProbeFraction)
	case cfg.CutEarlyAfter < 0:
		return cfg, fmt.Errorf("pace: LearnerConfig.CutEarlyAfter must be >= 0, got %d", cfg.CutEarlyAfter)
	case cfg.Window < 0:
		return cfg, fmt.Errorf("pace: LearnerConfig.Window must be >= 0, got %v", cfg.Window)
	case cfg.MinRequests < 0:
		return cfg, fmt.Errorf("pace: LearnerConfig.MinRequests must be >= 0, got %d", cfg.MinRequests)
	}
	return cfg, nil
}

// Action is what one check of a Learner did.
type Action int

const (
	// Idle: the period had fewer than MinRequests requests, so no signal;
	// the rate holds.
	Idle Action = iota
	// Held: the error percentage was in the dead zone, [RecoverPct,
	// TargetErrorPct]; the rate holds.
	Held
	// Decreased: the error percentage was above TargetErrorPct; the rate
	// was divided by BackoffMul, down to MinRate.
	Decreased
	// Increased: the error percentage was below RecoverPct; SpeedupStep
	// was added to the rate, up to MaxRate.
	Increased
)

// String returns "idle", "held", "decreased" or "increased".
func (a Action) String() string {
	switch a {
	case Idle:
		return "idle"
	case Held:
		return "held"
	case Decreased:
		return "decreased"
	case Increased:
		return "increased"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Check is one judged period of a Learner.
type Check struct {
	// Start and End bound the period: [Start, End).
	Start, End time.Time
	// Requests and Errors are what was recorded in it; ErrorPct is
	// 100×Errors/Requests (0 without requests).
	Requests, Errors int64
	ErrorPct         float64
	// Action is the rule applied, and Rate the rate after it.
	Action Action
	Rate   float64
}

// Learner learns a rate from the error rate it causes, by the seed's loop:
// at the end of every CheckPeriod it takes that period's error percentage
// (requests answered 429, per 100 requests) and
//
//	above TargetErrorPct        rate = rate / BackoffMul   (multiplicative decrease)
//	below RecoverPct            rate = rate + SpeedupStep  (additive increase)
//	otherwise (the dead zone)   rate unchanged
//
// then bounds the rate to [MinRate, MaxRate]; the rate paced by is at most
// the ceiling, if any (SetCeiling), and judged as such. A period with fewer than
// MinRequests requests changes nothing. The rate starts at WarmRate (a
// value stored from Rate) or SeedRate.
//
// A Learner reads no clock and starts no goroutine: every method takes the
// time now, and a period is judged by the first call at or after its end.
// A now before an earlier call's is treated as that earlier time: a record
// made with it counts in the period, and among the Window's accepted
// requests, at that time, the latest the Learner has seen; so one now far
// ahead (a wall clock stepped forward, then back) holds every later call
// at that time, judging no period, until the clock passes it. Pass
// readings of time.Now, whose monotonic clock never steps. A record at a
// period's end belongs to the next period. It is safe for concurrent
// use, and its methods allocate nothing.
type Learner struct {
	mu       sync.Mutex
	cfg      LearnerConfig
	rate     float64
	start    time.Time // of the period in progress
	latest   time.Time // the latest now of any call; an earlier now is read as it
	requests int64
	errs     int64
	last     Check
	checked  bool
	// saturated marks the period in progress (NeedSaturation); ceiling
	// caps the rate paced by when > 0 (SetCeiling), and rate keeps what
	// was learned above it.
	saturated bool
	ceiling   float64
	cutAt     time.Time // end of the period of the last cut
	cutTo     float64   // the rate the last cut set
	accepted  windowSum // accepted requests over the last Window
	cut       bool
}

// NewLearner returns a Learner whose first period starts at now. It
// returns an error naming the field when cfg is invalid.
func NewLearner(cfg LearnerConfig, now time.Time) (*Learner, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	l := &Learner{cfg: cfg, rate: cfg.SeedRate, start: now, latest: now, accepted: windowSum{window: cfg.Window, since: now}}
	if cfg.WarmRate != 0 {
		l.rate = cfg.WarmRate
	}
	return l, nil
}

// Config returns the configuration with every default filled in.
func (l *Learner) Config() LearnerConfig { return l.cfg }

// Record counts one request at now, and whether it was answered 429.
func (l *Learner) Record(now time.Time, limited bool) { l.RecordScaled(now, limited, 1) }

// RecordScaled counts one request at now, as Record does; with
// LearnerConfig.Window, an accepted one counts scale times among the
// window's accepted requests. A fleet node that learns the whole fleet's
// rate passes that rate over its own share of it, so that its accepted
// requests stand for the fleet's. A scale that is not > 0 and finite
// counts as 0. A now before an earlier call's counts at that earlier
// time, in the window too (see Learner).
func (l *Learner) RecordScaled(now time.Time, limited bool, scale float64) {
	l.RecordSent(now, now, limited, scale)
}

// RecordSent counts one request sent at sent and answered at now, as
// RecordScaled does, except that a 429 of a request sent before the last
// cut is not counted: it answers the rate the cut lowered, not the rate
// since. When a quota counted over a window fills, every request in
// flight comes back 429; one cut answers them all.
func (l *Learner) RecordSent(now, sent time.Time, limited bool, scale float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now = l.advanceLocked(now)
	if limited && l.cut && sent.Before(l.cutAt) {
		return
	}
	l.requests = min(l.requests, math.MaxInt64-1) + 1
	switch {
	case limited:
		l.errs = min(l.errs, math.MaxInt64-1) + 1
		if l.cfg.CutEarlyAfter > 0 && l.errs >= l.cfg.CutEarlyAfter &&
			100*float64(l.errs) > l.cfg.TargetErrorPct*float64(l.requests) {
			l.judgeLocked(now)
			l.start = now
		}
	case l.cfg.Window > 0 && scale > 0 && !math.IsInf(scale, 0):
		l.accepted.add(now, scale)
	}
}

// RecordN counts requests requests at now, errs of them answered 429. It
// returns an error naming the counts when either is negative or errs
// exceeds requests; nothing is counted then.
func (l *Learner) RecordN(now time.Time, requests, errs int64) error {
	if requests < 0 || errs < 0 || errs > requests {
		return fmt.Errorf("pace: record: need 0 <= errs <= requests, got errs %d of %d requests", errs, requests)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.advanceLocked(now)
	// Saturated: a period's counts past MaxInt64 say no more than that.
	l.requests = min(l.requests, math.MaxInt64-requests) + requests
	l.errs = min(l.errs, math.MaxInt64-errs) + errs
	return nil
}

// Saturated marks the period holding now as one in which requests waited
// for the rate: with NeedSaturation, only such a period may raise it.
func (l *Learner) Saturated(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.advanceLocked(now)
	l.saturated = true
}

// SetCeiling caps the rate at ceiling from now on — a provider's stated
// limit, from its quota headers — lowering it at once if it is above, even
// below MinRate; increases stop there, and a period above the target error
// rate cuts from the ceiling. A rate learned above the ceiling is kept,
// and comes back when a later call lifts the cap: one reply that states a
// tiny limit does not erase it. A ceiling of 0 removes the cap. It returns
// an error naming the value when ceiling is negative, NaN or infinite;
// nothing changes then.
func (l *Learner) SetCeiling(now time.Time, ceiling float64) error {
	if !(ceiling >= 0) || math.IsInf(ceiling, 0) {
		return fmt.Errorf("pace: learner ceiling must be >= 0 and finite, got %v", ceiling)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.advanceLocked(now)
	l.ceiling = ceiling
	return nil
}

// pacedLocked is the rate paced by: the rate, capped by the ceiling if
// any. The caller holds l.mu.
func (l *Learner) pacedLocked() float64 {
	if l.ceiling > 0 {
		return min(l.rate, l.ceiling)
	}
	return l.rate
}

// Rate returns the rate at now, after judging every period that has ended:
// the value to pace by, and to store for the next run's WarmRate.
func (l *Learner) Rate(now time.Time) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.advanceLocked(now)
	return l.pacedLocked()
}

// LastCheck returns the last period judged by now, and false if none has
// ended yet. The empty periods between the one judged and the one holding
// now are skipped, not reported.
func (l *Learner) LastCheck(now time.Time) (Check, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.advanceLocked(now)
	return l.last, l.checked
}

// advanceLocked reads now as the latest time seen when it is earlier,
// judges the period in progress if now is past its end, and starts the
// period that holds now; the periods between, which recorded nothing,
// change nothing. It returns now as read, which l.start never passes.
func (l *Learner) advanceLocked(now time.Time) time.Time {
	if now.Before(l.latest) {
		now = l.latest
	}
	l.latest = now
	p := l.cfg.CheckPeriod
	end := l.start.Add(p)
	if now.Before(end) {
		return now
	}
	l.judgeLocked(end)
	l.start = end.Add(now.Sub(end) / p * p)
	return now
}

// judgeLocked judges the period from l.start to end and clears its
// counts; the caller starts the next period.
func (l *Learner) judgeLocked(end time.Time) {
	c := Check{Start: l.start, End: end, Requests: l.requests, Errors: l.errs, Action: Idle}
	if c.Requests > 0 {
		c.ErrorPct = 100 * float64(c.Errors) / float64(c.Requests)
	}
	if c.Requests >= l.cfg.MinRequests && c.Requests > 0 {
		switch {
		case c.ErrorPct > l.cfg.TargetErrorPct:
			c.Action = Decreased
			paced := l.pacedLocked()
			cut := paced / l.cfg.BackoffMul
			if acc, ok := l.accepted.rate(end); ok {
				cut = max(cut/l.cfg.BackoffMul, min(acc, paced*(1-l.cfg.TargetErrorPct/100)))
			}
			l.rate = max(l.cfg.MinRate, cut)
			l.cut, l.cutAt, l.cutTo = true, end, l.rate
		case c.ErrorPct < l.cfg.RecoverPct && (l.saturated || !l.cfg.NeedSaturation) &&
			!(l.cut && end.Sub(l.cutAt) < l.cfg.HoldAfterCut):
			c.Action = Increased
			raised := min(l.cfg.MaxRate, l.raised())
			if l.ceiling > 0 && raised > l.ceiling {
				raised = max(l.rate, l.ceiling) // up to the ceiling; a rate kept above it stays
			}
			l.rate = raised
		default:
			c.Action = Held
		}
	}
	c.Rate = l.pacedLocked()
	l.last, l.checked = c, true
	l.saturated = false
	l.requests, l.errs = 0, 0
}

// raised is the rate after an increase: SpeedupStep more, or
// ProbeFraction of it in the first SpeedupStep above the rate the last cut
// set. The caller holds l.mu.
func (l *Learner) raised() float64 {
	step := l.cfg.SpeedupStep
	if l.cut && l.rate >= l.cutTo && l.rate < l.cutTo+step {
		return l.rate + step*l.cfg.ProbeFraction
	}
	return l.rate + step
}

// windowSlots is how many slots a windowSum divides its window into.
const windowSlots = 60

// windowSum sums values over a trailing window, in windowSlots slots. The
// times add is given never go back (the Learner passes the latest it has
// seen): an earlier one would land in a slot that has left the window, or
// clear a newer slot in its place of the ring.
type windowSum struct {
	window time.Duration
	since  time.Time // the first time, whose window is then incomplete
	slot   [windowSlots]float64
	index  [windowSlots]int64 // the slot number each slot holds
}

func (w *windowSum) slotOf(t time.Time) int64 {
	return max(int64(t.Sub(w.since)/max(w.window/windowSlots, 1)), 0)
}

func (w *windowSum) add(now time.Time, v float64) {
	n := w.slotOf(now)
	i := n % windowSlots
	if w.index[i] != n {
		w.index[i], w.slot[i] = n, 0
	}
	w.slot[i] += v
}

// rate returns the sum over the window ending at now, per second, and
// false before a whole window has passed.
func (w *windowSum) rate(now time.Time) (float64, bool) {
	n := w.slotOf(now)
	if w.window <= 0 || n < windowSlots {
		return 0, false
	}
	var sum float64
	for i := range w.slot {
		if w.index[i] > n-windowSlots && w.index[i] <= n {
			sum += w.slot[i]
		}
	}
	return sum / w.window.Seconds(), true
}
