package adaptive

import (
	"math"
	"time"
)

// noiseBand measures how far the round trips' fastest samples wander by
// chance, which sets Gradient2's tolerance when Config.Tolerance is left
// zero. It tracks the median of the second difference of successive
// rounds' fastest samples, |f₀ − 2f₁ + f₂| ÷ rttNoload. A load that climbs
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
	spread float64          // running median of |second difference| ÷ rttNoload; 0 before the first
	ready  bool             // a second difference has been taken
}

const (
	// noiseStep is how far one second difference moves the running
	// median, as a fraction of it: about the last 20 rounds count.
	noiseStep = 0.05
	// noiseWidths is the band's width in medians: 6.6 standard deviations
	// of Gaussian noise. The window's minimum lies about 3.2 of them below
	// the fastest sample's mean over 600 rounds, and further for noise with
	// a heavier lower tail (the fastest of unequal requests), so a round
	// that did not queue stays within the band.
	noiseWidths = 4.0
	// noiseStart is the tolerance until a second difference has been
	// taken.
	noiseStart = 2.0
)

// add records one round's fastest sample; noload is rttNoload with it.
func (b *noiseBand) add(fastest, noload time.Duration) {
	if b.seen == 2 && noload > 0 {
		d := math.Abs(float64(fastest)-2*float64(b.prev[0])+float64(b.prev[1])) / float64(noload)
		switch {
		case b.spread == 0:
			b.spread = d
		case d > b.spread:
			b.spread *= 1 + noiseStep
		default:
			b.spread *= 1 - noiseStep
		}
		b.ready = true
	}
	b.prev[1], b.prev[0] = b.prev[0], fastest
	b.seen = min(b.seen+1, 2)
}

// tolerance is how much slower than rttNoload a round's fastest sample
// may be and still count as noise: 1 + noiseWidths·spread.
func (b *noiseBand) tolerance() float64 {
	if !b.ready {
		return noiseStart
	}
	return min(1+noiseWidths*b.spread, maxTolerance)
}
