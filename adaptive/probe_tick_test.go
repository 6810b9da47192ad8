package adaptive

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestProbeTickSlowStartGrowsWithoutARoundTrip: during the slow start a
// tick grows the estimate by half when the load, peers' in-flight
// included, reached half of it (PaceGrowth), and leaves it alone below.
func TestProbeTickSlowStartGrowsWithoutARoundTrip(t *testing.T) {
	t.Parallel()
	cfg := Config{Law: AIMD, AIMDProbe: 5, InitialLimit: 30, PaceGrowth: true}
	for _, tc := range []struct {
		own, peers int
		want       float64
	}{{14, 0, 30}, {15, 0, 45}, {5, 10, 45}, {5, 9, 30}} {
		l, _ := newTestLimiter(t, cfg)
		l.SetPeerInflight(tc.peers)
		leases := acquireN(t, l, tc.own)
		l.ProbeTick()
		require.InDelta(t, tc.want, l.Estimate(), 1e-9, "%d in flight here and %d at peers, of 30", tc.own, tc.peers)
		releaseAll(leases)
	}
}

// TestProbeTickStepsOnlyAboveTheLastBackoffAndAfterACalmTick: after the
// slow start a tick adds the probe step only while the estimate is above
// the level the last backoff came down from, never on the first tick
// after a drop, and never beyond what the utilization guard allows.
func TestProbeTickStepsOnlyAboveTheLastBackoffAndAfterACalmTick(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{Law: AIMD, AIMDProbe: 5, AIMDIncrease: 0.25, BackoffRatio: 0.95, InitialLimit: 20})
	l.ProbeTick() // no drop yet: the tick after this one is calm
	le, ok := l.TryAcquire()
	require.True(t, ok)
	le.Drop() // 20 → 19; the backoff came down from 20
	require.InDelta(t, 19.0, l.Estimate(), 1e-9)

	l.SetEstimate(30)
	l.SetPeerInflight(30)
	l.ProbeTick()
	require.InDelta(t, 30.0, l.Estimate(), 1e-9, "a drop came since the last tick")
	l.ProbeTick()
	// The first step after the backoff: max(0.25, 30·(1−0.95)/5) = 0.3.
	require.InDelta(t, 30.3, l.Estimate(), 1e-9)

	le, ok = l.TryAcquire()
	require.True(t, ok)
	le.Drop() // 30.3 → 28.785; the backoff came down from 30.3
	l.ProbeTick()
	l.ProbeTick()
	require.InDelta(t, 0.95*30.3, l.Estimate(), 1e-9, "at or under the level the last backoff came down from, round trips clock the probe")

	l.SetEstimate(32)
	l.SetPeerInflight(10)
	l.ProbeTick()
	require.InDelta(t, 32.0, l.Estimate(), 1e-9, "a load of 10 is under 0.8·32: the guard holds")
	l.SetPeerInflight(30)
	l.ProbeTick()
	require.Greater(t, l.Estimate(), 32.0, "a load of 30 passes the guard")
}

// TestProbeTickLeavesOtherLawsAlone: Gradient2, and AIMD without
// AIMDProbe, move only on round trips.
func TestProbeTickLeavesOtherLawsAlone(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{{InitialLimit: 10}, {Law: AIMD, InitialLimit: 10}} {
		l, _ := newTestLimiter(t, cfg)
		leases := acquireN(t, l, 10)
		l.ProbeTick()
		l.ProbeTick()
		require.InDelta(t, 10.0, l.Estimate(), 1e-9, "%v", cfg.Law)
		releaseAll(leases)
	}
}
