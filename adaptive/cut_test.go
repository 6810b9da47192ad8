package adaptive

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDropCutsTheCeilingAtOnce: under a ceiling, every drop takes a slot
// off it before any new share arrives, so a node whose share is too large
// does not refill its excess slot with another request that will be
// refused. Without the cut, a slot freed by a 429 was handed straight to
// the next waiter.
func TestDropCutsTheCeilingAtOnce(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 100})
	l.SetCeiling(10)
	leases := acquireN(t, l, 10)
	clk.Advance(time.Millisecond)
	leases[0].Drop()
	leases[1].Drop()
	require.Equal(t, 8, l.Limit(), "two refusals, two slots fewer")
	_, ok := l.TryAcquire()
	require.False(t, ok, "8 in flight under a limit of 8")
	for _, le := range leases[2:] {
		le.Release()
	}
}

// TestCutSlotsComeBack: one slot returns after every cutRecovery round
// trips without a drop.
func TestCutSlotsComeBack(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 100})
	l.SetCeiling(10)
	for range 3 {
		le, _ := l.TryAcquire()
		le.Drop()
	}
	require.Equal(t, 7, l.Limit())
	for i := range 2 * cutRecovery {
		le, ok := l.TryAcquire()
		require.True(t, ok)
		clk.Advance(time.Millisecond)
		le.Release()
		want := 7 + (i+1)/cutRecovery
		require.Equal(t, want, l.Limit(), "after %d clean round trips", i+1)
	}
}

// TestLowerCeilingAbsorbsTheCut: a share that falls by as much as the cut
// already took does not take it again; a share that stays keeps the cut.
func TestLowerCeilingAbsorbsTheCut(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{InitialLimit: 100})
	l.SetCeiling(10)
	for range 3 {
		le, _ := l.TryAcquire()
		le.Drop()
	}
	l.SetCeiling(10)
	require.Equal(t, 7, l.Limit(), "the same share keeps the cut")
	l.SetCeiling(8)
	require.Equal(t, 7, l.Limit(), "a share 2 lower absorbs 2 of the 3")
	l.SetCeiling(5)
	require.Equal(t, 5, l.Limit(), "a share lower than the cut absorbs it all")
	l.SetCeiling(9)
	require.Equal(t, 9, l.Limit())
	l.ClearCeiling()
	require.Equal(t, int(l.Estimate()), l.Limit(), "no ceiling, no cut")
}

// TestNoCutWithoutACeiling: a lone limiter's drops act on its estimate
// only.
func TestNoCutWithoutACeiling(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{InitialLimit: 100})
	le, _ := l.TryAcquire()
	le.Drop()
	require.Equal(t, 90, l.Limit())
}

// TestAIMDProbeDoubles: the increase doubles every AIMDProbe clean round
// trips (every round trip before the first drop), is capped at a quarter
// of the estimate, and starts again at AIMDIncrease after a drop.
func TestAIMDProbeDoubles(t *testing.T) {
	t.Parallel()
	cfg := Config{Law: AIMD, InitialLimit: 100, MaxLimit: 100000, AIMDIncrease: 1, AIMDProbe: 2, UtilizationThreshold: 1e-5}
	l, clk := newTestLimiter(t, cfg)
	round := func() float64 {
		before := l.Estimate()
		le, _ := l.TryAcquire()
		clk.Advance(time.Millisecond)
		le.Release()
		return l.Estimate() - before
	}
	require.Equal(t, []float64{1, 2, 4, 8}, []float64{round(), round(), round(), round()},
		"before the first drop the step doubles every round trip")
	require.Equal(t, 115.0, l.Estimate())

	le, _ := l.TryAcquire()
	clk.Advance(time.Millisecond)
	le.Drop()
	require.InDelta(t, 103.5, l.Estimate(), 1e-9)
	steps := []float64{round(), round(), round(), round(), round(), round()}
	require.Equal(t, []float64{1, 1, 2, 2, 4, 4}, steps, "after a drop: doubling every AIMDProbe round trips")

	for range 30 {
		round()
	}
	d := round()
	require.InDelta(t, 0.25, d/(l.Estimate()-d), 1e-9, "at most a quarter of the estimate per round trip")
}

func TestFlatLatencyIsValid(t *testing.T) {
	t.Parallel()
	l, err := New(FlatLatency())
	require.NoError(t, err)
	require.Equal(t, 20, l.Limit())
	bad := FlatLatency()
	bad.AIMDProbe = -1
	_, err = New(bad)
	require.ErrorContains(t, err, "Config.AIMDProbe = -1")
}

// TestCutLeavesOneSlot: however many drops, a non-zero ceiling keeps one
// slot, so round trips can give the cut back.
func TestCutLeavesOneSlot(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 100})
	l.SetCeiling(2)
	for range 5 {
		le, ok := l.TryAcquire()
		require.True(t, ok)
		le.Drop()
	}
	require.Equal(t, 1, l.Limit())
	for range cutRecovery {
		le, ok := l.TryAcquire()
		require.True(t, ok)
		clk.Advance(time.Millisecond)
		le.Release()
	}
	require.Equal(t, 2, l.Limit(), "the cut never exceeds ceiling−1, so 5 clean round trips give the slot back")
	l.SetCeiling(0)
	require.Zero(t, l.Limit())
}

// TestGuardHasNoDeadZone: with a threshold of 0.8, an estimate of 2.6
// has a limit of 2, and a load of 2 is under 0.8·2.6; the whole limit in
// use must still let the estimate grow, or it stays at 2.6 for good.
func TestGuardHasNoDeadZone(t *testing.T) {
	t.Parallel()
	for _, start := range []float64{1.3, 2.6, 3.9} {
		cfg := FlatLatency()
		cfg.MaxLimit = 8
		l, clk := newTestLimiter(t, cfg)
		l.SetEstimate(start)
		for range 50 {
			leases := acquireN(t, l, l.Limit())
			clk.Advance(time.Millisecond)
			for _, le := range leases {
				le.Release()
			}
		}
		require.Equal(t, 8.0, l.Estimate(), "from %v", start)
	}
}
