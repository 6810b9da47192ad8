package adaptive

import (
	"math"
	"time"
)

// gradientSample applies one round trip under Gradient2: rtt is the
// sample closing it, fastest the round's fastest clean sample and load
// the round's load (see observe). With a Config.Tolerance the law compares
// rtt with rttNoload (gradient2). Left zero, it compares fastest with the
// baseline of noiseBand.lowest: within the band, gradient 1; beyond it,
// queueGradient. A queue persists, so the first round beyond the band
// moves nothing; the second in a row, and each after it, cuts. Two more exceptions. A round whose
// load was under the utilization threshold is held to a tolerance of at
// least noiseStart (2), a fixed Gradient2's: with few requests in a round
// its fastest sample is slower than a full round's, queue or not, while a
// latency that doubles as this process idles still says the peers are
// loading the upstream. And when the rounds have stayed beyond the band
// while the load halved and the latency did not fall with it, the
// baseline and the window restart from this round (see noiseBand.beyond).
// The caller holds l.mu and has pushed fastest into the window.
func (l *Limiter) gradientSample(rtt, fastest time.Duration, load int) {
	noload, _ := l.window.min()
	if l.cfg.Tolerance != 0 {
		if !l.overTarget(rtt, noload, load) {
			l.propose(gradient2(l.estimate, rtt, noload, l.cfg.Tolerance, l.smoothing(noload), &l.cfg), load)
		}
		return
	}
	noload = l.band.lowest(fastest, noload)
	l.band.add(fastest, noload)
	if l.overTarget(rtt, noload, load) {
		return
	}
	smoothing := l.smoothing(noload)
	tolerance := l.band.tolerance()
	if float64(load) < l.law.utilization*l.estimate {
		tolerance = max(tolerance, noiseStart)
	}
	if float64(fastest) <= tolerance*float64(noload) {
		l.band.within()
		l.propose(gradient2(l.estimate, noload, noload, 1, smoothing, &l.cfg), load)
		return
	}
	if first, rebase := l.band.beyond(load, fastest, tolerance); first {
		return
	} else if rebase {
		l.band.rebase(fastest)
		l.window.reset()
		l.window.push(fastest)
		return
	}
	l.propose(queueGradient(l.estimate, fastest, noload, smoothing), load)
}

// overTarget moves the estimate to AIMDBackoff times itself when rtt, the
// sample closing the round, was slower than the law's latency target (see
// Config.LatencyTarget), the baseline noload was under it, and the round's
// load reached the utilization threshold or the whole limit, and reports
// whether it did. A slow round at a lighter load says the upstream is slow,
// not that this load made it so (with the measured tolerance the gradient
// then holds the round to a tolerance of at least noiseStart), and a
// baseline at or over the target says no load would meet it: both are
// left to the gradient (without the second
// rule every round trip of an upstream slower than the target, all
// succeeding, took the estimate to MinLimit). The move is one, as the
// gradient's are, not a backoff: the drops that may follow still back off
// in full. The caller holds l.mu.
func (l *Limiter) overTarget(rtt, noload time.Duration, load int) bool {
	t := l.law.latencyTarget
	if t <= 0 || rtt <= t || noload >= t || !l.utilized(l.law.utilization, load) {
		return false
	}
	l.propose(l.estimate*l.law.aimdBackoff, load)
	return true
}

// smoothing returns the weight of a new Gradient2 target for a round
// measured against noload: Config.Smoothing, or targetSmoothing when the
// Config left it 0 and the latency target is at most twice noload (see
// Config.Smoothing). The caller holds l.mu.
func (l *Limiter) smoothing(noload time.Duration) float64 {
	if t := l.law.latencyTarget; l.climbFast && t > 0 && noload > 0 && t/2 <= noload {
		return targetSmoothing
	}
	return l.cfg.Smoothing
}

// tolerance is the tolerance Gradient2 applies: Config.Tolerance, or the
// measured noise band. The caller holds l.mu.
func (l *Limiter) tolerance() float64 {
	if l.cfg.Tolerance != 0 {
		return l.cfg.Tolerance
	}
	return l.band.tolerance()
}

// queueGradient returns the successor of estimate for a round whose
// fastest sample, fastest, lay beyond the noise band of the baseline
// noload (both positive): the round queued, and the target is the
// estimate at which the queue would have emptied, taken once more, with
// no headroom:
//
//	gradient = max((noload/fastest)², 0.5)
//	next     = estimate·(1−smoothing) + estimate·gradient·smoothing
//
// Where latency grows in proportion to the load above a capacity C,
// noload/fastest is C over the load, so the target lies as far under C
// as the load was over it, and the climb back crosses C from below
// instead of settling above it by the headroom. (Within the band the
// round counts as gradient 1: gradient2 with rtt = noload.) The result is
// not yet guarded or clamped to [MinLimit, MaxLimit].
func queueGradient(estimate float64, fastest, noload time.Duration, smoothing float64) float64 {
	ratio := float64(noload) / float64(fastest)
	gradient := max(ratio*ratio, minGradient)
	return estimate*(1-smoothing) + estimate*gradient*smoothing
}

// minGradient is the least gradient: one round trip at most halves the
// Gradient2 target.
const minGradient = 0.5

// targetSmoothing is Gradient2's Smoothing, left 0, while its latency
// target is close enough to the round trip to catch an overshoot (see
// Config.Smoothing).
const targetSmoothing = 0.4

// gradient2 returns the Gradient2 successor of estimate for a sample of
// rtt against a windowed minimum of noload (both positive):
//
//	gradient = clamp(tolerance·noload/rtt, 0.5, 1)
//	target   = estimate·gradient + queueSize(estimate)
//	next     = estimate·(1−smoothing) + target·smoothing
//
// The result is not yet guarded or clamped to [MinLimit, MaxLimit].
func gradient2(estimate float64, rtt, noload time.Duration, tolerance, smoothing float64, cfg *Config) float64 {
	gradient := min(max(tolerance*float64(noload)/float64(rtt), minGradient), 1.0)
	queue := cfg.QueueSize(estimate)
	if !(queue >= 0) || math.IsInf(queue, 1) {
		queue = 0
	}
	target := estimate*gradient + queue
	return estimate*(1-smoothing) + target*smoothing
}
