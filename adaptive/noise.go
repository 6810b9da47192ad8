package adaptive

import (
	"math"
	"time"
)

// noiseBand measures how far the round trips' fastest samples wander by
// chance, which sets Gradient2's tolerance when Config.Tolerance is left
// zero. It tracks the median of the second difference of successive
// rounds' fastest samples, |f₀ − 2f₁ + f₂| ÷ the baseline. A load that climbs
// or falls at a steady pace moves the fastest sample along a line, which
// the second difference cancels, so what is left is noise: timing jitter,
// and the wandering of a round's fastest sample when request sizes differ.
// The median, rather than the mean, ignores the occasional kink where the
// law itself turned. For independent Gaussian noise of standard deviation
// s the median is 1.65·s. It is not safe for concurrent use; the Limiter
// guards it with its lock.
type noiseBand struct {
	prev   [2]time.Duration // the last two rounds' fastest samples, newest first
	seen   int              // rounds recorded, at most 2
	spread float64          // running median of |second difference| ÷ the baseline; 0 before the first
	streak int              // consecutive rounds beyond the band
	load   int              // the load of the streak's first round
	peak   time.Duration    // the slowest fastest sample of the streak
	base   time.Duration    // the least fastest sample since the last new baseline; 0 if none
}

const (
	// noiseStep is how far one second difference moves the running
	// median, as a fraction of it: about the last 20 rounds count.
	noiseStep = 0.05
	// noiseWidths is the band's width in medians. For independent
	// Gaussian noise it would be 6.6 standard deviations; a round's
	// fastest sample also takes in the last samples of the round before,
	// which smooths it, so the median understates the noise and the floor
	// below does much of the work at small spreads.
	noiseWidths = 4.0
	// noiseStart is the tolerance the running median starts from, and
	// the tolerance until a second difference has been taken.
	noiseStart = 2.0
	// noiseFloor is the least tolerance: a round's fastest sample may
	// always be a tenth slower than the baseline. Below it, a base latency
	// that drifts by a few per cent over many rounds — which the second
	// difference does not see — would read as queueing.
	noiseFloor = 1.1
	// noiseMinSpread keeps the running median from decaying toward 0 on
	// samples that repeat exactly (a coarse clock), where its
	// multiplicative steps would no longer move it.
	noiseMinSpread = 1e-6
)

// add records one round's fastest sample; noload is the baseline (see lowest).
func (b *noiseBand) add(fastest, noload time.Duration) {
	if b.seen == 2 && noload > 0 {
		d := math.Abs(float64(fastest)-2*float64(b.prev[0])+float64(b.prev[1])) / float64(noload)
		if b.spread == 0 {
			b.spread = (noiseStart - 1) / noiseWidths
		}
		if d > b.spread {
			b.spread *= 1 + noiseStep
		} else {
			b.spread = max(b.spread*(1-noiseStep), noiseMinSpread)
		}
	}
	b.prev[1], b.prev[0] = b.prev[0], fastest
	b.seen = min(b.seen+1, 2)
}

// tolerance is how much slower than the baseline a round's fastest sample
// may be and still count as noise: 1 + noiseWidths·spread, at least
// noiseFloor.
func (b *noiseBand) tolerance() float64 {
	if b.spread == 0 {
		return noiseStart
	}
	return min(max(1+noiseWidths*b.spread, noiseFloor), maxTolerance)
}

// beyond records a round beyond the band, of the given load and fastest
// sample, at the given tolerance. It reports whether the round is the
// first of a streak of such rounds, and whether the load has halved since
// the streak began while the fastest sample stayed within the tolerance
// of the streak's slowest: a latency that did not fall with the load is
// not this limiter's queue but a new baseline (a slower deploy, a
// failover).
// Where the load does not fall — a ceiling binds it, or the peers' load
// is most of it — the streak never says so.
func (b *noiseBand) beyond(load int, fastest time.Duration, tolerance float64) (first, rebase bool) {
	if b.streak == 0 {
		b.load, b.peak = load, 0
	}
	b.peak = max(b.peak, fastest)
	b.streak++
	return b.streak == 1, load <= b.load-load && float64(fastest)*tolerance >= float64(b.peak)
}

// lowest returns the baseline the band compares with: the least of the
// rounds' fastest samples since the last new baseline, or noload (the
// window's minimum) if lower. The window forgets its minimum after
// RTTWindow rounds; where every round since queued a little — the
// sawtooth of a law that turns at the band stays above the capacity —
// the forgetting would let the baseline, and with it the load, creep up
// round after round. A slower baseline is learned by the rule of beyond
// instead, on evidence. fastest is the round's fastest sample.
func (b *noiseBand) lowest(fastest, noload time.Duration) time.Duration {
	if b.base == 0 || fastest < b.base {
		b.base = fastest
	}
	return min(noload, b.base)
}

// rebase starts a new baseline at fastest.
func (b *noiseBand) rebase(fastest time.Duration) {
	b.streak = 0
	b.base = fastest
}

// within records a round within the band, ending a streak.
func (b *noiseBand) within() { b.streak = 0 }
