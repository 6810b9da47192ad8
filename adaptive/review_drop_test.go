package adaptive

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// dropRatioOf reports by how much a drop, rttNoload-clear of the last
// backoff, multiplies the estimate.
func dropRatioOf(t *testing.T, l *Limiter, clk *fakeClock) float64 {
	t.Helper()
	before := l.Estimate()
	clk.Advance(20 * time.Millisecond)
	settleOne(t, l, clk, time.Millisecond, Lease.Drop)
	return l.Estimate() / before
}

// R1: with a fleet limit and a cut, backoff's bound floor (half of
// estimate·ratio) now compounds with the queue's halving: one drop takes
// the estimate to a quarter. Before f8d9349 the worst was 0.45.
func TestReviewFleetBoundQuarter(t *testing.T) {
	l, clk := newTestLimiter(t, Config{InitialLimit: 100})
	l.SetCeiling(10)
	l.SetFleetLimit(20)
	sampleOne(t, l, clk, 10*time.Millisecond)
	sampleOne(t, l, clk, 40*time.Millisecond)
	r := dropRatioOf(t, l, clk)
	t.Logf("ratio %.3f", r)
	require.GreaterOrEqual(t, r, 0.45-1e-9, "one drop should take at most what it took before the change")
}

// R2: samples of requests admitted before a queue backoff, already
// answered by it, close the next round trip too: a drop of a request
// admitted after the backoff halves again.
func TestReviewAnsweredSamplesHalveTwice(t *testing.T) {
	l, clk := newTestLimiter(t, Config{InitialLimit: 100})
	sampleOne(t, l, clk, 10*time.Millisecond) // rttNoload
	a := acquireN(t, l, 20)
	clk.Advance(20 * time.Millisecond) // all of them queued 2x
	a[0].Release()                     // closes the round: last = 20ms
	e0 := l.Estimate()
	a[1].Drop() // 429: backs off by the queue, 0.5
	e1 := l.Estimate()
	require.InDelta(t, 0.5, e1/e0, 1e-9)
	for _, le := range a[2:] {
		le.Release() // the rest of the queued batch: roundMin = 20ms
	}
	clk.Advance(11 * time.Millisecond) // past rttNoload since the backoff
	b := acquireN(t, l, 2)             // admitted after the backoff
	clk.Advance(25 * time.Millisecond)
	b[0].Release() // closes the round whose fastest sample is a[2]'s 20ms
	e2 := l.Estimate()
	b[1].Drop()
	t.Logf("estimate %.1f -> %.1f -> %.1f -> %.1f", e0, e1, e2, l.Estimate())
	require.InDelta(t, 0.9, l.Estimate()/e2, 1e-9,
		"the 20ms queueing was answered by the first backoff already")
}

// R3: a recalibration's probe samples, taken at MinLimit, are not a round
// trip at the estimate, yet a drop after them backs off by their jitter.
func TestReviewRecalibrationProbeJitter(t *testing.T) {
	l, clk := newTestLimiter(t, Config{
		InitialLimit:  20,
		Recalibration: Recalibration{Interval: time.Second, Samples: 3},
	})
	sampleOne(t, l, clk, 10*time.Millisecond)
	clk.Advance(time.Second)
	sampleOne(t, l, clk, 10*time.Millisecond)
	sampleOne(t, l, clk, 10*time.Millisecond)
	require.True(t, l.Snapshot().Recalibrating)
	sampleOne(t, l, clk, 19*time.Millisecond)
	require.False(t, l.Snapshot().Recalibrating)
	r := dropRatioOf(t, l, clk)
	t.Logf("ratio %.3f", r)
	require.InDelta(t, 0.9, r, 1e-9, "one probe's jitter at concurrency 1 says nothing about the estimate")
}

// R4: SetEstimate (a fleet warm start) lowers the estimate; the round trip
// measured at the old estimate still halves the new one.
func TestReviewSetEstimateStaleQueue(t *testing.T) {
	l, clk := newTestLimiter(t, Config{InitialLimit: 100})
	sampleOne(t, l, clk, 10*time.Millisecond)
	sampleOne(t, l, clk, 20*time.Millisecond)
	l.SetEstimate(40)
	r := dropRatioOf(t, l, clk)
	t.Logf("ratio %.3f", r)
	require.InDelta(t, 0.9, r, 1e-9)
}

// R5: a drop an hour after the last (queued) round trip halves: the
// stray timeout on an idle upstream is judged by an hour-old round trip.
func TestReviewHourOldRoundTrip(t *testing.T) {
	l, clk := newTestLimiter(t, Config{InitialLimit: 100})
	sampleOne(t, l, clk, 10*time.Millisecond)
	sampleOne(t, l, clk, 20*time.Millisecond)
	clk.Advance(time.Hour)
	r := dropRatioOf(t, l, clk)
	t.Logf("ratio %.3f", r)
	// Open: still halves. A drop long after the last round trip could
	// back off by BackoffRatio alone.
	require.InDelta(t, 0.5, r, 1e-9)
}

// R6: Auto counts a drop after a round trip at 1.2x rttNoload as a sign of
// a flat upstream (no queueing), while dropRatio backs it off by the queue.
func TestReviewAutoFlatVersusQueue(t *testing.T) {
	l, clk := newTestLimiter(t, Config{Law: Auto, InitialLimit: 100})
	sampleOne(t, l, clk, 10*time.Millisecond)
	sampleOne(t, l, clk, 12*time.Millisecond)
	r := dropRatioOf(t, l, clk)
	t.Logf("ratio %.3f law %v", r, l.Snapshot().Law)
}

// R7: MaxHealthyRTT: a slow sample counts as a drop and backs off by the
// previous round's queue.
func TestReviewMaxHealthySlow(t *testing.T) {
	l, clk := newTestLimiter(t, Config{InitialLimit: 100, MaxHealthyRTT: 30 * time.Millisecond})
	sampleOne(t, l, clk, 10*time.Millisecond)
	sampleOne(t, l, clk, 20*time.Millisecond)
	before := l.Estimate()
	clk.Advance(20 * time.Millisecond)
	sampleOne(t, l, clk, 50*time.Millisecond)
	t.Logf("ratio %.3f", l.Estimate()/before)
	before = l.Estimate()
	clk.Advance(20 * time.Millisecond)
	sampleOne(t, l, clk, 50*time.Millisecond)
	t.Logf("second slow ratio %.3f", l.Estimate()/before)
}
