package adaptive

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Law selects how clean samples move the estimate. Drops decrease the
// estimate by Config.BackoffRatio under every law.
type Law int

const (
	// Auto, the default, runs Gradient2 until the upstream shows that it
	// refuses above its capacity instead of slowing down, and the law of
	// FlatLatency from then on, for good. The upstream shows it by
	// autoFlatRefusals drops in a row that each back the estimate off
	// (see Config.BackoffRatio), came back faster than half of rttNoload
	// — answered at once, not served — and followed a round trip whose
	// fastest clean sample was within autoFlatQueueing × rttNoload: no
	// queueing before them. The drops of one burst, or of an outage with
	// no request served between them, count once; the count starts again
	// at a drop that backs off and does not count (a slow one, one after
	// queueing, one during a recalibration), at a clean round trip that
	// shows queueing, and when the drops are more than autoFlatSpan round
	// trips apart. So an upstream whose latency grows with its load, or
	// that refuses by timing out, or a brief outage, keeps Gradient2. The
	// evidence needs round trips of tight latency: a flat upstream whose
	// latencies spread widely (sizes that differ, LLM completions), or
	// whose refusal takes most of a network round trip, rarely shows it
	// and keeps Gradient2 — choose FlatLatency for it. Under
	// FlatLatency's law the fields this Config leaves zero take
	// FlatLatency's values (BackoffRatio 0.95, AIMDIncrease 0.25,
	// AIMDProbe 5, UtilizationThreshold 0.8, PaceGrowth on), and the
	// fields it sets keep theirs; the estimate and everything else carry
	// over. Before the move, every drop with that mark (answered at once,
	// no queueing before it), counted or not, already backs off as
	// FlatLatency's law would: by its BackoffRatio (0.95, or this
	// Config's own), not Gradient2's 0.9 or the ratio of a round trip a
	// little slower than rttNoload (see BackoffRatio), and under a fleet
	// limit at most half of what that ratio leaves. A fleet node
	// restarted at a flat upstream then costs the fleet's limit no more
	// than the law it will run.
	// Snapshot.Law tells which law runs.
	Auto Law = iota
	// Gradient2 compares a round trip's latency with a baseline, the
	// fastest seen: with a fixed Config.Tolerance, one sample per round
	// trip against the windowed minimum (rttNoload), moving the estimate
	// toward estimate·gradient + QueueSize(estimate); by default, the
	// round's fastest sample against the measured noise band (see the
	// package documentation, Gradient2).
	Gradient2
	// AIMD adds Config.AIMDIncrease on every clean, utilized sample and
	// multiplies the estimate by Config.AIMDBackoff when a sample is slower
	// than Config.LatencyTarget (none at or above Config.MaxHealthyRTT).
	AIMD
)

// Auto's evidence that the upstream refuses without queueing: this many
// refusals in a row, each after a round trip whose fastest clean sample
// was within autoFlatQueueing × rttNoload, within autoFlatSpan round
// trips (see Auto and Limiter.autoFlat).
const (
	autoFlatRefusals = 3
	autoFlatQueueing = 1.25
	autoFlatSpan     = 64 // round trips
)

// String returns the law's name.
func (law Law) String() string {
	switch law {
	case Auto:
		return "auto"
	case Gradient2:
		return "gradient2"
	case AIMD:
		return "aimd"
	default:
		return fmt.Sprintf("Law(%d)", int(law))
	}
}

// Clock tells the limiter the time. Implementations must be safe for
// concurrent use. Round-trip times are differences of two Now readings, so
// a clock that carries a monotonic reading (like time.Now) is best; one
// too coarse to move between an admission and its Release gives round
// trips of 0, which are successes but no latency samples (see
// Lease.Release).
type Clock interface {
	Now() time.Time
}

// Rand is a source of uniform random numbers in [0, 1). It is only called
// with the limiter's lock held, so it need not be safe for concurrent use;
// *math/rand/v2.Rand satisfies it.
type Rand interface {
	Float64() float64
}

// Recalibration configures the optional Envoy-style refresh of rttNoload.
// Every Interval ± Jitter the limiter pins its limit to MinLimit, waits
// until every lease admitted before the pin has settled, empties the
// min-RTT window, takes Samples fresh round-trip times at that low
// concurrency and then resumes. The zero value disables recalibration.
type Recalibration struct {
	// Interval is the mean time between two recalibrations, measured from
	// the end of one to the start of the next. Zero disables recalibration.
	// Must be 0 or ≥ 1µs (a number with no unit is nanoseconds).
	Interval time.Duration
	// Jitter spreads recalibrations uniformly over
	// [Interval−Jitter, Interval+Jitter] so a fleet does not pause in step.
	// Defaults to 0. Must be 0, or in [1µs, Interval).
	Jitter time.Duration
	// Samples is how many clean samples, from leases admitted after the
	// drain, refill the min-RTT window before the limiter resumes.
	// Defaults to 1. Must be in [1, RTTWindow].
	Samples int
	// MaxPinned bounds how long one recalibration may pin the limit,
	// draining and probing together. A recalibration still under way then
	// is abandoned — the limiter resumes with the samples it has and the
	// next recalibration is scheduled — so a lease that is never settled,
	// or one very long request, cannot hold the limit at MinLimit. Callers
	// waiting in the queue then are admitted without waiting for another
	// call: a runtime timer looks at the pin MaxPinned after it began, and
	// again while Clock says it has time left, and ends it when Clock says
	// MaxPinned has passed. Defaults to Interval/10, at least 1µs. Must be
	// in [1µs, Interval].
	MaxPinned time.Duration
}

// Config configures a Limiter. The zero value is valid: every zero field
// means the default stated in its comment. New rejects out-of-range values
// with an error naming the field; it never clamps them.
type Config struct {
	// InitialLimit is the starting estimate. A fleet node warm-starts with
	// the key's current global limit here (or later with SetEstimate).
	// A request heavier than the limit still runs, alone (see the package
	// documentation, Admission), but one at a time; an InitialLimit of at
	// least the heaviest weight lets it run beside others from the start.
	// Defaults to 20, or to MinLimit or MaxLimit when 20 lies outside them.
	// Must be in [MinLimit, MaxLimit].
	InitialLimit int
	// MinLimit is the lowest the estimate can fall. Defaults to 1.
	// Must be in [1, MaxLimit].
	MinLimit int
	// MaxLimit is the highest the estimate can rise. Defaults to 1000.
	// Must be in [MinLimit, 1<<30].
	MaxLimit int

	// Law selects the inference law. Defaults to Auto: Gradient2, and
	// FlatLatency's law once the upstream shows it refuses at once above
	// its capacity.
	Law Law

	// Tolerance is how much slower than rttNoload a sample may be before
	// Gradient2 starts to shrink the estimate. Zero, the default, measures it:
	// Gradient2 then compares each round trip's fastest clean sample with a
	// baseline (rttNoload, or the least fastest sample kept since the last new
	// baseline if lower), the tolerance is 1 plus four running medians of the
	// rounds' second differences (the noise band: jitter and the spread of
	// unequal requests, but not a load that moves steadily), at least 1.1,
	// starting at 2; the second round in a row beyond the band aims the estimate
	// under the queue it saw, with no headroom; and rounds that stay beyond it
	// while the load halves and the latency does not fall start a new baseline
	// (see the package documentation, Gradient2). Snapshot.Tolerance reports it.
	// A value sets a fixed tolerance and compares one sample per round trip,
	// Netflix's Gradient2; 2 is Netflix's default. Must be 0 or in [1, 1e6].
	Tolerance float64
	// Smoothing is the weight of each new Gradient2 target in the
	// estimate's moving average. Defaults to 0.2; left 0, it is 0.4 for a
	// round trip while Gradient2 has a LatencyTarget (set, or derived from
	// MaxHealthyRTT) no more than twice rttNoload: a queue no longer than
	// the flight then reaches the target, which brings the estimate down
	// whatever the gradient says, so the climb can be twice as fast. A
	// target further above the round trip leaves the default at 0.2.
	// Must be in (0, 1].
	Smoothing float64
	// RTTWindow is the number of most recent round trips over which
	// rttNoload is the minimum; each round trip contributes its fastest
	// clean sample. Defaults to 600. Must be in [1, 1<<20].
	RTTWindow int
	// QueueSize is the headroom Gradient2 adds to estimate·gradient.
	// It is called with the limiter's lock held and must not call back into
	// the limiter; a negative, NaN or infinite result counts as 0.
	// Defaults to math.Sqrt.
	QueueSize func(estimate float64) float64

	// BackoffRatio multiplies the estimate on a drop, under every law,
	// at most once per round trip. Under Gradient2 a drop after a round
	// trip whose fastest clean sample was slower than rttNoload backs off
	// by rttNoload over that sample instead, when it is smaller (but not
	// below 0.5), once per such round trip — except, under Auto, a drop
	// with the mark of a flat upstream, which backs off as FlatLatency's
	// law would (see Auto). Defaults to 0.9 (0.95 once Auto runs
	// FlatLatency's law, and for Auto's drops with that mark before it
	// does). Must be in (0, 1).
	BackoffRatio float64

	// AIMDIncrease is what AIMD adds to the estimate on each clean,
	// utilized sample. Defaults to 1. Must be in (0, MaxLimit].
	AIMDIncrease float64
	// AIMDBackoff multiplies the estimate when a round trip is slower than
	// LatencyTarget: under AIMD a backoff, at most once per round trip;
	// under Gradient2 the round trip's move (see LatencyTarget).
	// Defaults to 0.9. Must be in (0, 1).
	AIMDBackoff float64
	// AIMDProbe, when positive, makes AIMD start fast and probe faster the
	// longer it goes without a decrease. Until the first decrease (a drop,
	// or a sample slower than LatencyTarget) the estimate grows by half on
	// every round trip whose load reached the estimate it grew from (a
	// slow start). After it, the increase per round trip
	// starts at the larger of AIMDIncrease and
	// estimate·(1 − BackoffRatio)/AIMDProbe, so that AIMDProbe round trips
	// at that start would win back one backoff whatever the scale, and
	// doubles every 2 round trips with no drop and no backoff (a 5 %
	// backoff under AIMDProbe 5 is won back in 4: 1, 1, 2, 2 %). It is at
	// most a quarter of the estimate per round trip; a drop or a backoff
	// starts it again. Near the capacity it last hit
	// AIMD's probes above it are thus small, and after the capacity grows
	// it finds the new one in a number of round trips that grows with the
	// logarithm of the difference, not with the difference itself.
	// Limiter.ProbeTick, which a fleet node calls once a heartbeat (see
	// ProbeTick), is a second clock for the slow start and for the probe
	// while the estimate is above the level the last backoff came down
	// from.
	// Defaults to 0 (off): a constant AIMDIncrease from the start. Must be
	// in [0, 1<<20].
	AIMDProbe int
	// LatencyTarget is the round-trip time above which the estimate comes
	// down by AIMDBackoff. Under AIMD a sample slower than it backs off (at
	// most once per round trip). Under Gradient2 a round trip closed by a
	// sample slower than it, over a baseline (rttNoload) under it, at a load
	// that reached UtilizationThreshold of the estimate or the whole limit,
	// moves the estimate to AIMDBackoff times itself instead of by the
	// gradient: a move, as the gradient's are, not a backoff, so the drops
	// that may follow still back off in full. A slow round at a lighter
	// load (the upstream is slow; this load did not make it so), or over a
	// baseline at or above the target (no load would meet it), is the
	// gradient's to judge.
	// Defaults to 0 (off: the laws react to drops and, under Gradient2, to
	// the gradient alone); under Gradient2 (and Auto until it moves to
	// FlatLatency's law, which derives none but keeps one the Config sets),
	// to 4/5 of MaxHealthyRTT when that is set: requests slower than
	// MaxHealthyRTT count as failures, so the limiter comes down while they
	// still succeed rather than once they fail. A target at or above
	// MaxHealthyRTT is no target, under every law: slower samples are
	// drops already.
	// Snapshot.LatencyTarget reports the target in force. Must be 0 or
	// ≥ 1µs (a number with no unit is nanoseconds: 500 is 500ns, not 500ms).
	LatencyTarget time.Duration

	// MaxHealthyRTT, when positive, makes every released sample slower than
	// it count as a drop, under every law, and Gradient2's LatencyTarget
	// default to 4/5 of it. Defaults to 0 (off). Must be 0 or ≥ 1µs (a
	// number with no unit is nanoseconds).
	MaxHealthyRTT time.Duration

	// Recalibration configures periodic refreshes of rttNoload.
	// Defaults to off.
	Recalibration Recalibration

	// MaxQueued is how many Acquire calls may wait for a slot at once.
	// Defaults to 0: Acquire never waits and fails with ErrQueueFull when
	// no slot is free. Must be in [0, 1<<30].
	//
	// It is the fast-rejecting gate of two-phase admission: a burst of up to
	// Limit() + MaxQueued unit requests is absorbed — Limit() admitted
	// (under PaceGrowth, after a raise, only what it has taken up, so less
	// of the burst is absorbed), the rest queued, each waiting patiently
	// for its turn (bounded only by its context and TimeoutFactor) — and a
	// request beyond that is refused at once with ErrQueueFull instead of
	// waiting for a slot that running requests will not free in time.
	// Size it as the expected burst less the limit. A full queue refuses
	// the request that would be admitted last: an arrival that would be
	// admitted before the last waiter evicts it (see
	// Limiter.AcquireRequest). The order is weighted fair queueing's, so
	// under overload low priorities are refused sooner and more often,
	// but not strictly first (see the package documentation, Admission).
	MaxQueued int

	// TimeoutFactor bounds each queued request's wait: a request of weight
	// w waits at most w × TimeoutFactor, then fails with an error
	// wrapping ErrWaitTimeout. The unit is time per unit of weight; set
	// it in the order of a request's normal latency, so that a request
	// does not wait far longer than it would run. It is measured by a runtime timer per waiting call
	// (testing/synctest controls it), not by Clock. Defaults to 0: only the
	// caller's context bounds the wait. Must be 0 or ≥ 1µs (a number with
	// no unit is nanoseconds).
	TimeoutFactor time.Duration

	// UtilizationThreshold is the fraction of the estimate that the load a
	// sample governs must reach for that sample to raise the estimate; a
	// load of floor(estimate), the whole limit, always suffices.
	// Defaults to 0.5 (0.8 once Auto runs FlatLatency's law). Must be in
	// (0, 1]. Every sample carries a load of at
	// least 1, so a value at or below 1/MaxLimit switches the guard off —
	// except on a fleet node from a drop until 5 ProbeTicks pass without
	// one, whose guard holds to at least 0.9 whatever this says (see
	// Limiter.SetFleetLimit).
	UtilizationThreshold float64

	// PaceGrowth, when set, lets the weight in flight climb to a raised
	// limit only as leases settle: each clean release lets it go the
	// lease's weight higher than before, so a flight that fills the limit
	// at most doubles per round trip, as TCP's window grows with its
	// acknowledgements. Half the limit is admitted at once. A limit that
	// jumps — a fleet node's share raised, a slow start's step — is then
	// taken up over about a round trip instead of sent in one burst, and
	// against an upstream that refuses at once above its capacity, the
	// first refusals cut the limit before the rest of the excess is sent.
	// The pacing holds only while leases keep settling clean, one at
	// least every no-load round trip: long requests, such as streams,
	// carry no such clock, and without one the whole limit is admitted;
	// what goes out so counts as paced when releases bring the pacing
	// back, so the climb goes on from there — after even a brief lapse,
	// without waiting for the releases to catch up with half the limit.
	// Nor does it hold AIMD's slow start (AIMDProbe set, no decrease yet)
	// under a ceiling: a fleet node's share grows only as the lower median
	// of the fleet's estimates does, once per heartbeat, and pacing each
	// such step again held the start back by a round trip per step; the
	// node raises its ceiling over a round trip itself (package fleet).
	// The releases count whatever the weight in flight, so after a spell
	// of few requests in flight a raise can still go out whole; those
	// during a hold do not count, though they keep the pacing's clock. A
	// hold — a recalibration's pin, a ceiling past its deadline, a ceiling
	// of 0 — lowers the pacing only to the limit it masks: when it ends,
	// the slots that releases freed meanwhile are refilled at once, up to
	// that limit, and a climb goes on from where it stood, not from what
	// the hold admitted. A burst that arrives just after a raise finds
	// fewer slots than Limit() free, and the rest wait in the queue (see
	// MaxQueued). Defaults to false: the whole limit is admitted at once.
	// FlatLatency sets it, and so does Auto once it runs FlatLatency's law
	// (choose a Law to keep it off).
	PaceGrowth bool

	// Clock supplies the time. Defaults to the system clock (time.Now).
	Clock Clock
	// Rand supplies the recalibration jitter. Defaults to math/rand/v2's
	// global source.
	Rand Rand
}

const (
	defaultInitialLimit         = 20
	defaultMinLimit             = 1
	defaultMaxLimit             = 1000
	defaultSmoothing            = 0.2
	defaultRTTWindow            = 600
	defaultBackoffRatio         = 0.9
	defaultAIMDIncrease         = 1.0
	defaultAIMDBackoff          = 0.9
	defaultRecalibrationSamples = 1
	defaultUtilization          = 0.5

	maxMaxLimit  = 1 << 30
	maxRTTWindow = 1 << 20
	maxMaxQueued = 1 << 30
	maxTolerance = 1e6
)

// withDefaults returns cfg with every zero field replaced by its default.
// It is the only place defaults are decided.
func (cfg Config) withDefaults() Config {
	if cfg.MinLimit == 0 {
		cfg.MinLimit = defaultMinLimit
	}
	if cfg.MaxLimit == 0 {
		cfg.MaxLimit = defaultMaxLimit
	}
	if cfg.InitialLimit == 0 {
		cfg.InitialLimit = min(max(defaultInitialLimit, cfg.MinLimit), cfg.MaxLimit)
	}
	if cfg.Smoothing == 0 {
		cfg.Smoothing = defaultSmoothing
	}
	if cfg.RTTWindow == 0 {
		cfg.RTTWindow = defaultRTTWindow
	}
	if cfg.QueueSize == nil {
		cfg.QueueSize = math.Sqrt
	}
	if cfg.BackoffRatio == 0 {
		cfg.BackoffRatio = defaultBackoffRatio
	}
	if cfg.AIMDIncrease == 0 {
		cfg.AIMDIncrease = defaultAIMDIncrease
	}
	if cfg.AIMDBackoff == 0 {
		cfg.AIMDBackoff = defaultAIMDBackoff
	}
	if cfg.Recalibration.Interval > 0 && cfg.Recalibration.Samples == 0 {
		cfg.Recalibration.Samples = defaultRecalibrationSamples
	}
	if cfg.Recalibration.Interval > 0 && cfg.Recalibration.MaxPinned == 0 {
		cfg.Recalibration.MaxPinned = max(cfg.Recalibration.Interval/10, time.Microsecond)
	}
	if cfg.UtilizationThreshold == 0 {
		cfg.UtilizationThreshold = defaultUtilization
	}
	if cfg.Clock == nil {
		cfg.Clock = systemClock{}
	}
	if cfg.Rand == nil {
		cfg.Rand = globalRand{}
	}
	return cfg
}

// GradientLatencyTarget returns the latency target Gradient2 (and Auto
// until its move to FlatLatency's law) applies under cfg: LatencyTarget,
// or 4/5 of MaxHealthyRTT when LatencyTarget is 0; 0 (none) when that
// leaves none, or one at or above MaxHealthyRTT. Snapshot.LatencyTarget
// reports the target of the law that runs.
func (cfg Config) GradientLatencyTarget() time.Duration {
	t := cfg.LatencyTarget
	if t == 0 {
		t = cfg.MaxHealthyRTT - cfg.MaxHealthyRTT/5 // 4/5, without overflow
	}
	if t <= 0 || cfg.MaxHealthyRTT > 0 && t >= cfg.MaxHealthyRTT {
		return 0
	}
	return t
}

// durationOK reports whether d is 0 (a field's "off") or at least 1µs:
// shorter is a number given without its unit (500 for 500ms), far below
// what any round trip or wait can take, and would turn every request
// into a drop or a timeout.
func durationOK(d time.Duration) bool { return d == 0 || d >= time.Microsecond }

// unitHint follows the range of a duration field set to d in its error:
// a positive d under 1µs is likely a number given without its unit.
func unitHint(d time.Duration) string {
	if d > 0 && d < time.Microsecond {
		return " (a number with no unit is nanoseconds: write 500 * time.Millisecond)"
	}
	return ""
}

// validate reports every out-of-range field of a defaulted Config, but a
// field checked against a bad one.
func (cfg Config) validate() error {
	var errs []error
	bad := func(field string, value any, want string) {
		errs = append(errs, fmt.Errorf("adaptive: Config.%s = %v, want %s", field, value, want))
	}
	// A field checked against another (or whose default derives from it)
	// is not checked while that one is bad: its error would name a value
	// the caller may never have set.
	maxOK := cfg.MaxLimit >= 1 && cfg.MaxLimit <= maxMaxLimit
	if !maxOK {
		bad("MaxLimit", cfg.MaxLimit, fmt.Sprintf("[1, %d], and at least MinLimit", maxMaxLimit))
	}
	minOK := cfg.MinLimit >= 1 && (!maxOK || cfg.MinLimit <= cfg.MaxLimit)
	if !minOK {
		bad("MinLimit", cfg.MinLimit, fmt.Sprintf("[1, MaxLimit=%d]", cfg.MaxLimit))
	}
	if maxOK && minOK && (cfg.InitialLimit < cfg.MinLimit || cfg.InitialLimit > cfg.MaxLimit) {
		bad("InitialLimit", cfg.InitialLimit, fmt.Sprintf("[MinLimit=%d, MaxLimit=%d]", cfg.MinLimit, cfg.MaxLimit))
	}
	if cfg.Law != Auto && cfg.Law != Gradient2 && cfg.Law != AIMD {
		bad("Law", cfg.Law, "Auto, Gradient2 or AIMD")
	}
	if cfg.Tolerance != 0 && !(cfg.Tolerance >= 1 && cfg.Tolerance <= maxTolerance) {
		bad("Tolerance", cfg.Tolerance, "0 or [1, 1e6]")
	}
	if !(cfg.Smoothing > 0 && cfg.Smoothing <= 1) {
		bad("Smoothing", cfg.Smoothing, "(0, 1]")
	}
	windowOK := cfg.RTTWindow >= 1 && cfg.RTTWindow <= maxRTTWindow
	if !windowOK {
		bad("RTTWindow", cfg.RTTWindow, fmt.Sprintf("[1, %d]", maxRTTWindow))
	}
	if !(cfg.BackoffRatio > 0 && cfg.BackoffRatio < 1) {
		bad("BackoffRatio", cfg.BackoffRatio, "(0, 1)")
	}
	if maxOK && !(cfg.AIMDIncrease > 0 && cfg.AIMDIncrease <= float64(cfg.MaxLimit)) {
		bad("AIMDIncrease", cfg.AIMDIncrease, fmt.Sprintf("(0, MaxLimit=%d]", cfg.MaxLimit))
	}
	if !(cfg.AIMDBackoff > 0 && cfg.AIMDBackoff < 1) {
		bad("AIMDBackoff", cfg.AIMDBackoff, "(0, 1)")
	}
	if cfg.AIMDProbe < 0 || cfg.AIMDProbe > maxRTTWindow {
		bad("AIMDProbe", cfg.AIMDProbe, fmt.Sprintf("[0, %d] (0 = off)", maxRTTWindow))
	}
	if !durationOK(cfg.LatencyTarget) {
		bad("LatencyTarget", cfg.LatencyTarget, "0 (off, or under Gradient2 4/5 of MaxHealthyRTT) or ≥ 1µs"+unitHint(cfg.LatencyTarget))
	}
	if !durationOK(cfg.MaxHealthyRTT) {
		bad("MaxHealthyRTT", cfg.MaxHealthyRTT, "0 (off) or ≥ 1µs"+unitHint(cfg.MaxHealthyRTT))
	}
	rc := cfg.Recalibration
	switch {
	case !durationOK(rc.Interval) || rc.Interval < 0:
		bad("Recalibration.Interval", rc.Interval, "0 (off) or ≥ 1µs"+unitHint(rc.Interval))
	case rc.Interval == 0:
		if rc.Jitter != 0 {
			bad("Recalibration.Jitter", rc.Jitter, "0 when Recalibration.Interval is 0")
		}
		if rc.Samples != 0 {
			bad("Recalibration.Samples", rc.Samples, "0 when Recalibration.Interval is 0")
		}
		if rc.MaxPinned != 0 {
			bad("Recalibration.MaxPinned", rc.MaxPinned, "0 when Recalibration.Interval is 0")
		}
	default:
		if rc.Jitter < 0 || rc.Jitter >= rc.Interval || !durationOK(rc.Jitter) {
			bad("Recalibration.Jitter", rc.Jitter, fmt.Sprintf("0, or [1µs, Recalibration.Interval=%v)", rc.Interval)+unitHint(rc.Jitter))
		}
		if windowOK && (rc.Samples < 1 || rc.Samples > cfg.RTTWindow) {
			bad("Recalibration.Samples", rc.Samples, fmt.Sprintf("[1, RTTWindow=%d]", cfg.RTTWindow))
		}
		if rc.MaxPinned < time.Microsecond || rc.MaxPinned > rc.Interval {
			bad("Recalibration.MaxPinned", rc.MaxPinned, fmt.Sprintf("[1µs, Recalibration.Interval=%v]", rc.Interval)+unitHint(rc.MaxPinned))
		}
	}
	if cfg.MaxQueued < 0 || cfg.MaxQueued > maxMaxQueued {
		bad("MaxQueued", cfg.MaxQueued, fmt.Sprintf("[0, %d]", maxMaxQueued))
	}
	if !durationOK(cfg.TimeoutFactor) {
		bad("TimeoutFactor", cfg.TimeoutFactor, "0 (no bound but the context's) or ≥ 1µs"+unitHint(cfg.TimeoutFactor))
	}
	if !(cfg.UtilizationThreshold > 0 && cfg.UtilizationThreshold <= 1) {
		bad("UtilizationThreshold", cfg.UtilizationThreshold, "(0, 1]")
	}
	return errors.Join(errs...)
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

type globalRand struct{}

func (globalRand) Float64() float64 { return rand.Float64() }

// FlatLatency returns the configuration for an upstream whose latency
// does not grow with its load: one that answers at once with 429 (or 503)
// above a capacity it does not announce, as most API quotas do. There the
// round-trip time carries no sign of the capacity — any rise is noise,
// which Gradient2 can only misread — and the refusals are the only
// signal. The law is AIMD on drops alone
// (LatencyTarget 0) with AIMDProbe 5: a slow start until the first drop,
// then a step of at least AIMDIncrease 0.25 and of 1 % of the estimate
// per round trip, doubling every 2 round trips without a drop (see
// AIMDProbe; a fleet node's heartbeats clock the slow start, and the probe
// above the level the last backoff came down from, too, see ProbeTick); a drop backs
// off by BackoffRatio 0.95, at most once per round trip, and, under a
// ceiling that binds, first ends a paced climb at the in-flight when
// the refusal came with all the paced room in use, then takes a slot off
// the ceiling at once, two for a request admitted after the last
// backoff and refused less than rttNoload after it (see SetCeiling and
// SetFleetLimit).
// UtilizationThreshold 0.8 lets the estimate rise only
// while the load is within 80 % of it (during the slow start, half: so
// at most three times the load tried; on a fleet node, 90 % from a drop
// until 5 heartbeats pass without one, see SetFleetLimit), so the
// estimate cannot run far ahead of what was tried; PaceGrowth lets the
// in-flight climb to a raised limit only as requests succeed, so that a share or a
// slow-start step that jumps is taken up over about a round trip and
// the first 429 comes before most of an excess is sent (but for the slow
// start under a ceiling, see PaceGrowth). Every other
// field is the zero value, so its default applies; set MaxQueued, the
// limits and the clock on the result as for any Config.
// docs/benchmarks.md measures it against a static split.
func FlatLatency() Config {
	return Config{
		Law:                  AIMD,
		AIMDIncrease:         0.25,
		AIMDProbe:            5,
		BackoffRatio:         0.95,
		UtilizationThreshold: 0.8,
		PaceGrowth:           true,
	}
}
