package adaptive

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestAIMDAdditiveIncreaseWhileUtilizedOncePerRoundTrip(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{Law: AIMD, InitialLimit: 10, AIMDIncrease: 2})
	leases := acquireN(t, l, 5)
	clk.Advance(time.Millisecond)
	leases[0].Release() // load 5 ≥ 0.5·10
	require.Equal(t, 12.0, l.Estimate())
	leases[1].Release() // admitted in the same round trip: no second step
	require.Equal(t, 12.0, l.Estimate())

	next := acquireN(t, l, 1)[0] // a new round trip, load 4 < 0.5·12
	clk.Advance(time.Millisecond)
	next.Release()
	require.Equal(t, 12.0, l.Estimate())

	l.SetPeerInflight(10)
	next = acquireN(t, l, 1)[0] // load 4 + 10 peers
	clk.Advance(time.Millisecond)
	next.Release()
	require.Equal(t, 14.0, l.Estimate())
	for _, le := range leases[2:] {
		le.Ignore()
	}
}

func TestAIMDIdleDoesNotGrow(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{Law: AIMD, InitialLimit: 10})
	for range 20 {
		le, _ := l.TryAcquire()
		clk.Advance(time.Millisecond)
		le.Release()
	}
	require.Equal(t, 10.0, l.Estimate())
}

func TestAIMDBacksOffOverLatencyTargetOncePerRTT(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{
		Law: AIMD, InitialLimit: 20, AIMDBackoff: 0.5, LatencyTarget: 50 * time.Millisecond,
	})
	leases := acquireN(t, l, 10)
	clk.Advance(60 * time.Millisecond)
	for _, le := range leases {
		le.Release()
	}
	require.Equal(t, 10.0, l.Estimate(), "ten slow samples of one round trip back off once")
	require.Zero(t, l.Drops(), "a slow sample is not a drop")

	le, _ := l.TryAcquire()
	clk.Advance(60 * time.Millisecond)
	le.Release()
	require.Equal(t, 5.0, l.Estimate(), "a request admitted after the decrease backs off again")
}

func TestAIMDDropUsesBackoffRatio(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{Law: AIMD, InitialLimit: 20, BackoffRatio: 0.75})
	le, _ := l.TryAcquire()
	le.Drop()
	require.Equal(t, 15.0, l.Estimate())
}

func TestAIMDWithoutLatencyTargetIgnoresLatency(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{Law: AIMD, InitialLimit: 2})
	leases := acquireN(t, l, 2)
	clk.Advance(time.Hour)
	leases[0].Release()
	require.Equal(t, 3.0, l.Estimate())
	leases[1].Ignore()
}

// roundTrips runs two round trips of n requests each, lockstep: all are
// admitted, rtt passes, all are released (fast of them first, after
// fastRTT, when fast > 0). The estimate moves at the first release of a
// round, judging the samples settled since its last move, so the second
// round trip's move judges the first's samples. It returns the estimate.
func roundTrips(t *testing.T, l *Limiter, clk *fakeClock, n, fast int, fastRTT, rtt time.Duration) float64 {
	t.Helper()
	for range 2 {
		leases := acquireN(t, l, n)
		clk.Advance(fastRTT)
		for _, le := range leases[:fast] {
			le.Release()
		}
		clk.Advance(rtt - fastRTT)
		for _, le := range leases[fast:] {
			le.Release()
		}
	}
	return l.Estimate()
}

func TestAIMDBacksOffWhenARoundQueued(t *testing.T) {
	t.Parallel()
	newLimiter := func(rise float64) (*Limiter, *fakeClock) {
		l, clk := newTestLimiter(t, Config{
			Law: AIMD, InitialLimit: 20, AIMDIncrease: 1, AIMDBackoff: 0.5, LatencyRise: rise,
			UtilizationThreshold: 0.001, // the guard is not under test
		})
		require.Equal(t, 22.0, roundTrips(t, l, clk, 10, 0, 0, 100*time.Millisecond), "rttNoload 100ms")
		return l, clk
	}
	l, clk := newLimiter(0.05)
	require.Equal(t, 24.0, roundTrips(t, l, clk, 10, 0, 0, 104*time.Millisecond), "4 % slower: within the rise")

	l, clk = newLimiter(0.05)
	require.Equal(t, 11.5, roundTrips(t, l, clk, 10, 0, 0, 110*time.Millisecond), "10 % slower: the round queued")
	require.Zero(t, l.Drops(), "a queued round is not a drop")

	// The round's fastest sample decides: one request that did not wait
	// means the upstream was not queueing them all.
	l, clk = newLimiter(0.05)
	require.Equal(t, 24.0, roundTrips(t, l, clk, 10, 1, 100*time.Millisecond, 150*time.Millisecond))

	l, clk = newLimiter(0.05)
	require.Equal(t, 24.0, roundTrips(t, l, clk, minRoundSamples-1, 0, 0, 200*time.Millisecond), "too few samples to judge")

	l, clk = newLimiter(0)
	require.Equal(t, 24.0, roundTrips(t, l, clk, 10, 0, 0, 200*time.Millisecond), "off")
}

func TestQueuedRoundEndsSlowStart(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{Law: AIMD, InitialLimit: 20, AIMDProbe: 5, LatencyRise: 0.05, AIMDBackoff: 0.5})
	require.Equal(t, 45.0, roundTrips(t, l, clk, 20, 0, 0, 100*time.Millisecond), "slow start")
	require.Equal(t, 33.75, roundTrips(t, l, clk, 30, 0, 0, 150*time.Millisecond), "×1.5, then the queued round halves it")
	require.Less(t, roundTrips(t, l, clk, 30, 0, 0, 100*time.Millisecond), 40.0, "the slow start is over: steps, not ×1.5")
}
