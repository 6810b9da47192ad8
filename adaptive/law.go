package adaptive

import "time"

// lawParams are the fields of a Config that the running law reads. Under
// Auto they change once, when the law moves to FlatLatency's (see
// autoFlat); they are guarded by the limiter's lock.
type lawParams struct {
	law           Law // Gradient2 or AIMD: the law running
	backoffRatio  float64
	aimdIncrease  float64
	aimdBackoff   float64
	aimdProbe     int
	latencyTarget time.Duration
	utilization   float64
	paceGrowth    bool
}

// paramsOf returns the law fields of a defaulted cfg; Auto starts as
// Gradient2, whose latency target may come from MaxHealthyRTT (see
// Config.LatencyTarget).
func paramsOf(cfg Config) lawParams {
	law := cfg.Law
	target := cfg.LatencyTarget
	if law != AIMD {
		law, target = Gradient2, cfg.GradientLatencyTarget()
	} else if cfg.MaxHealthyRTT > 0 && target >= cfg.MaxHealthyRTT {
		target = 0 // a slower sample is a drop already
	}
	return lawParams{
		law:           law,
		backoffRatio:  cfg.BackoffRatio,
		aimdIncrease:  cfg.AIMDIncrease,
		aimdBackoff:   cfg.AIMDBackoff,
		aimdProbe:     cfg.AIMDProbe,
		latencyTarget: target,
		utilization:   cfg.UtilizationThreshold,
		paceGrowth:    cfg.PaceGrowth,
	}
}

// flatParams returns the law Auto moves to for raw, a Config as given to
// New: FlatLatency's law, with raw's own value for every law field raw
// sets.
func flatParams(raw Config) lawParams {
	f := FlatLatency()
	if raw.BackoffRatio != 0 {
		f.BackoffRatio = raw.BackoffRatio
	}
	if raw.AIMDIncrease != 0 {
		f.AIMDIncrease = raw.AIMDIncrease
	}
	if raw.AIMDBackoff != 0 {
		f.AIMDBackoff = raw.AIMDBackoff
	}
	if raw.AIMDProbe != 0 {
		f.AIMDProbe = raw.AIMDProbe
	}
	if raw.UtilizationThreshold != 0 {
		f.UtilizationThreshold = raw.UtilizationThreshold
	}
	f.LatencyTarget = raw.LatencyTarget
	f.MaxHealthyRTT = raw.MaxHealthyRTT // bounds the target (see paramsOf)
	f.PaceGrowth = f.PaceGrowth || raw.PaceGrowth
	return paramsOf(f.withDefaults())
}

// autoFlat counts a drop of rec that is about to back the estimate off
// toward Auto's move to FlatLatency's law, and makes the move on the
// autoFlatRefusals-th in a row (see Auto). The drop counts when rec came
// back in less than half of rttNoload, after a clean round trip whose
// fastest sample was within autoFlatQueueing × rttNoload, and a clean
// round trip has ended since the last drop that counted: the refusals of
// one burst, or of an outage with no request served, count once. The
// count starts again at a backing-off drop that does not count (a slow
// one, one after queueing, one that cannot be judged: before any clean
// round trip, during a recalibration, timed by a clock that went back),
// at a clean round trip that shows queueing (see autoRound), and when
// more than autoFlatSpan round trips separate the first refusal counted
// from the last. The move keeps the estimate and lets the in-flight climb
// at once to the limit it has now, as before the move. It reports whether
// rec's refusal has the mark of a flat-latency upstream (answered at once
// after a round trip without queueing), counted or not: Auto, still
// Gradient2, then backs off by FlatLatency's BackoffRatio (see drop). The
// caller holds l.mu.
func (l *Limiter) autoFlat(now time.Time, rec *leaseRecord) (flat bool) {
	if l.cfg.Law != Auto || l.law.law != Gradient2 || l.answered(now, rec) {
		return false
	}
	noload, ok := l.window.min()
	flat = ok && !l.recal.active() && !now.Before(rec.start) &&
		2*now.Sub(rec.start) < noload && float64(l.window.last()) <= autoFlatQueueing*float64(noload)
	switch {
	case !flat:
		l.flatRefusals = 0
		return false
	case l.flatRefusals > 0 && l.round == l.flatRound:
		return true // no request served since the last one counted
	case l.flatRefusals == 0 || l.round-l.flatFirst > autoFlatSpan:
		l.flatRefusals, l.flatFirst = 0, l.round
	}
	l.flatRefusals++
	l.flatRound = l.round
	if l.flatRefusals >= autoFlatRefusals {
		l.law = l.flatLaw
		switch {
		case !l.holding(now):
			l.paced = l.limit(now)
		case l.hasCeiling && l.ceiling == 0:
			// A fence or a share of nothing masks no share: the
			// pacing starts from the in-flight the last one left.
			l.paced = min(l.maskedLimit(), l.inflight)
		default:
			l.paced = l.maskedLimit()
		}
	}
	return true
}

// autoRound starts Auto's count of refusals again when the fastest sample
// of a clean round trip shows queueing: slower than autoFlatQueueing ×
// rttNoload. The caller holds l.mu.
func (l *Limiter) autoRound(fastest time.Duration) {
	if l.flatRefusals == 0 {
		return
	}
	if noload, ok := l.window.min(); ok && float64(fastest) > autoFlatQueueing*float64(noload) {
		l.flatRefusals = 0
	}
}
