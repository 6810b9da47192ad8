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
	l, clk := newTestLimiter(t, Config{InitialLimit: 100})
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
	drop := func(l *Limiter, clk *fakeClock) float64 {
		t.Helper()
		before := l.Estimate()
		clk.Advance(20 * time.Millisecond) // past rttNoload since the last backoff
		settleOne(t, l, clk, time.Millisecond, Lease.Drop)
		return l.Estimate() / before
	}
	l, clk := newTestLimiter(t, Config{InitialLimit: 100})
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
