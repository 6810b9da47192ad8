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
