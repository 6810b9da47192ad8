package adaptive

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDropBacksOffOncePerRTT(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 100})
	leases := acquireN(t, l, 10)
	clk.Advance(time.Second)
	for _, le := range leases {
		le.Drop()
	}
	require.InDelta(t, 90, l.Estimate(), 1e-9, "drops of one round trip back off once")
	require.EqualValues(t, 10, l.Drops())

	le, _ := l.TryAcquire()
	le.Drop()
	require.InDelta(t, 81, l.Estimate(), 1e-9, "a request admitted after the decrease backs off again")
	require.EqualValues(t, 11, l.Drops())
	require.Zero(t, l.Inflight())
}

func TestDropUnderConstantTimeoutsShrinksToMinLimit(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 100, MinLimit: 3})
	for range 200 {
		leases := acquireN(t, l, l.Limit())
		clk.Advance(30 * time.Second)
		for _, le := range leases {
			le.Drop()
		}
	}
	require.Equal(t, 3.0, l.Estimate())
}

func TestDropNotFedToWindow(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{})
	le, _ := l.TryAcquire()
	clk.Advance(time.Millisecond)
	le.Drop()
	require.Zero(t, l.RTTNoload())
}

func TestMaxHealthyRTTCountsSlowSamplesAsDrops(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 50, MaxHealthyRTT: time.Second})
	le, _ := l.TryAcquire()
	clk.Advance(time.Second) // at the limit: healthy
	le.Release()
	require.Zero(t, l.Drops())
	require.Equal(t, 50.0, l.Estimate())

	le, _ = l.TryAcquire()
	clk.Advance(2 * time.Second)
	le.Release()
	require.EqualValues(t, 1, l.Drops())
	require.InDelta(t, 45, l.Estimate(), 1e-9)
	require.Equal(t, time.Second, l.RTTNoload(), "the slow sample is not a baseline")
}

func TestMaxHealthyRTTUnderAIMD(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{Law: AIMD, InitialLimit: 10, MaxHealthyRTT: time.Second, BackoffRatio: 0.5})
	leases := acquireN(t, l, 10)
	clk.Advance(5 * time.Second)
	for _, le := range leases {
		le.Release()
	}
	require.Equal(t, 5.0, l.Estimate())
	require.EqualValues(t, 10, l.Drops())
}

func TestInstantDropsBackOffNoSoonerThanRTTNoload(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{Law: Gradient2, InitialLimit: 100})
	le := acquireN(t, l, 1)[0]
	clk.Advance(100 * time.Millisecond)
	le.Release() // rttNoload = 100 ms
	require.Equal(t, 100*time.Millisecond, l.RTTNoload())

	le = acquireN(t, l, 1)[0]
	le.Drop() // an instant 429
	require.InDelta(t, 90, l.Estimate(), 1e-9)

	// Instant 429s of requests admitted after the decrease, within one
	// rttNoload of it: the upstream is still busy with what came before.
	for range 5 {
		clk.Advance(10 * time.Millisecond)
		le = acquireN(t, l, 1)[0]
		le.Drop()
	}
	require.InDelta(t, 90, l.Estimate(), 1e-9, "no second decrease within rttNoload")

	clk.Advance(60 * time.Millisecond)
	le = acquireN(t, l, 1)[0]
	le.Drop()
	require.InDelta(t, 81, l.Estimate(), 1e-9, "a round trip later, drops count again")
}

// Under Gradient2 a drop after a round trip whose fastest sample queued
// backs off by rttNoload over that sample, down to 0.5, instead of
// BackoffRatio, once per such round trip: the round trip said how much too
// high the estimate was. A drop with no clean round trip since the last
// one that did, one after a round trip without queueing (a stray timeout
// on a healthy upstream), and every drop under AIMD back off by
// BackoffRatio.
func TestDropAfterQueueingBacksOffByTheQueue(t *testing.T) {
	t.Parallel()
	drop := func(l *Limiter, clk *fakeClock) float64 { return dropRatioOf(t, l, clk) }
	l, clk := newTestLimiter(t, Config{Law: Gradient2, InitialLimit: 100})
	sampleOne(t, l, clk, 10*time.Millisecond) // rttNoload
	sampleOne(t, l, clk, 16*time.Millisecond) // within tolerance: the estimate stays
	require.Equal(t, 100.0, l.Estimate())
	require.InDelta(t, 10.0/16, drop(l, clk), 1e-9, "the round trip queued 1.6 times rttNoload")
	require.InDelta(t, 0.9, drop(l, clk), 1e-9, "no clean round trip since: BackoffRatio")
	sampleOne(t, l, clk, 10*time.Millisecond)
	require.InDelta(t, 0.9, drop(l, clk), 1e-9, "no queueing: BackoffRatio")
	sampleOne(t, l, clk, 40*time.Millisecond)
	require.InDelta(t, 0.5, drop(l, clk), 1e-9, "four times rttNoload: at most halved")
	sampleOne(t, l, clk, 10500*time.Microsecond)
	require.InDelta(t, 0.9, drop(l, clk), 1e-9, "less queueing than BackoffRatio answers")

	a, aclk := newTestLimiter(t, Config{Law: AIMD, InitialLimit: 100})
	sampleOne(t, a, aclk, 10*time.Millisecond)
	sampleOne(t, a, aclk, 16*time.Millisecond)
	require.InDelta(t, 0.9, drop(a, aclk), 1e-9, "AIMD: BackoffRatio")
}

// dropRatioOf reports by how much a drop, rttNoload-clear of the last
// backoff, multiplies the estimate.
func dropRatioOf(t *testing.T, l *Limiter, clk *fakeClock) float64 {
	t.Helper()
	before := l.Estimate()
	clk.Advance(20 * time.Millisecond)
	settleOne(t, l, clk, time.Millisecond, Lease.Drop)
	return l.Estimate() / before
}

// With a fleet limit and a cut, the bound's floor in backoff does not
// compound with a queue's halving: one drop takes at most what it took
// before the queue's ratio, 0.45 (not a quarter).
func TestQueueBackoffUnderAFleetBoundTakesAtMostHalf(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 100})
	l.SetCeiling(10)
	l.SetFleetLimit(20)
	sampleOne(t, l, clk, 10*time.Millisecond)
	sampleOne(t, l, clk, 40*time.Millisecond)
	require.InDelta(t, 0.45, dropRatioOf(t, l, clk), 1e-9, "half of what BackoffRatio leaves, the bound's floor")
}

// Samples of requests admitted before a queue backoff, already answered by
// it, that close the next round trip are no new evidence of queueing: a
// drop of a request admitted after the backoff backs off by BackoffRatio,
// not by the same queue again.
func TestQueueAnsweredOnceIsNotAnsweredAgain(t *testing.T) {
	t.Parallel()
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
	require.InDelta(t, 0.9, l.Estimate()/e2, 1e-9,
		"the 20ms queueing was answered by the first backoff already")
}

// A recalibration's probe samples, taken at MinLimit, are no round trip at
// the estimate: a drop after them backs off by BackoffRatio, not by their
// jitter.
func TestRecalibrationProbesAreNoQueueEvidence(t *testing.T) {
	t.Parallel()
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
	require.InDelta(t, 0.9, dropRatioOf(t, l, clk), 1e-9, "one probe's jitter at concurrency 1 says nothing about the estimate")
}

// A round trip measured before SetEstimate (a fleet warm start) says
// nothing of the new estimate: a drop after it backs off by BackoffRatio.
func TestSetEstimateForgetsQueueEvidence(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 100})
	sampleOne(t, l, clk, 10*time.Millisecond)
	sampleOne(t, l, clk, 20*time.Millisecond)
	l.SetEstimate(40)
	require.InDelta(t, 0.9, dropRatioOf(t, l, clk), 1e-9)
}

// A refusal of a request sent an hour after the last round trip, which
// queued, says nothing of that queue: it backs off by BackoffRatio.
func TestStaleQueueEvidenceIsIgnored(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 100})
	sampleOne(t, l, clk, 10*time.Millisecond)
	sampleOne(t, l, clk, 20*time.Millisecond)
	clk.Advance(time.Hour)
	require.InDelta(t, 0.9, dropRatioOf(t, l, clk), 1e-9)
}

// A fleet node that joins an upstream its peers already fill meets only
// refusals, and with no round trip to space its backoffs each one backs
// off. Each says the fleet's in-flight at the refused request's
// admission was too much, not that the upstream holds less than a backoff
// from it: the estimate stops at BackoffRatio × that load, instead of
// falling to MinLimit and taking the fleet's lower median with it. A
// lone limiter (no fleet limit) still backs off all the way.
func TestFleetDropsBackOffNoFurtherThanTheFleetLoad(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 32})
	l.SetFleetLimit(32)
	l.SetCeiling(16)
	l.SetPeerInflight(16)
	refuseEach(t, l, clk, 60, 20*time.Millisecond)
	require.InDelta(t, 0.9*17, l.Estimate(), 1e-9, "16 of the peers' and the refused request")
	require.Equal(t, 1, l.Limit(), "the cut still keeps the node to one slot")

	lone, clk := newTestLimiter(t, Config{InitialLimit: 32})
	refuseEach(t, lone, clk, 60, 20*time.Millisecond)
	require.Equal(t, 1.0, lone.Estimate())
}

// refuseEach admits n requests one at a time, each refused a millisecond
// after its admission, the next admitted gap after the refusal.
func refuseEach(t *testing.T, l *Limiter, clk *fakeClock, n int, gap time.Duration) {
	t.Helper()
	for range n {
		le, ok := l.TryAcquire()
		require.True(t, ok)
		clk.Advance(time.Millisecond)
		le.Drop()
		clk.Advance(gap)
	}
}

// The fleet's bound (L_global less the slots cut, see SetFleetLimit)
// takes precedence over the floor of the fleet's in-flight: a request
// admitted after the first backoff with 31 in flight across the fleet,
// refused only after the rest of the old burst was refused and cut 12
// slots, takes the estimate to 32 − 12 = 20, not to 0.9 × 31. And an
// estimate already below the floor stays where it is: the refusal says
// the fleet's load was too much, not how much less the upstream holds.
func TestFleetBoundTakesPrecedenceOverTheFloor(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 34})
	l.SetFleetLimit(32)
	l.SetCeiling(16)
	l.SetPeerInflight(16)
	old := acquireN(t, l, 16)
	clk.Advance(time.Second)
	old[15].Drop() // a timeout: 34 → 30.6, one slot cut
	require.InDelta(t, 30.6, l.Estimate(), 1e-9)
	old[14].Ignore()
	x, ok := l.TryAcquire() // 15 of its own and the peers' 16
	require.True(t, ok)
	for _, le := range old[:10] {
		le.Drop() // answered by the first backoff: a slot cut each
	}
	clk.Advance(time.Second)
	x.Drop()
	require.InDelta(t, 20, l.Estimate(), 1e-9, "the bound, 32 − 12")

	below, clk := newTestLimiter(t, Config{InitialLimit: 10})
	below.SetFleetLimit(30)
	below.SetCeiling(15)
	below.SetPeerInflight(20)
	refuseEach(t, below, clk, 20, time.Second)
	require.Equal(t, 10.0, below.Estimate(), "10 is already below 0.9 × 21")
}
