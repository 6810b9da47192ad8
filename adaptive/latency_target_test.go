package adaptive

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLatencyTargetDefaults: MaxHealthyRTT sets LatencyTarget to 4/5 of
// itself when LatencyTarget is left 0, and a target in force, set or
// derived, doubles Smoothing's default; fields set keep their values.
func TestLatencyTargetDefaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		cfg       Config
		target    time.Duration
		smoothing float64
	}{
		{"neither", Config{}, 0, 0.2},
		{"MaxHealthyRTT", Config{MaxHealthyRTT: time.Second}, 800 * time.Millisecond, 0.4},
		{"LatencyTarget", Config{LatencyTarget: 50 * time.Millisecond}, 50 * time.Millisecond, 0.4},
		{"both", Config{MaxHealthyRTT: time.Second, LatencyTarget: time.Second}, time.Second, 0.4},
		{"Smoothing set", Config{MaxHealthyRTT: time.Second, Smoothing: 0.2}, 800 * time.Millisecond, 0.2},
		{"longest MaxHealthyRTT", Config{MaxHealthyRTT: 1<<63 - 1}, (1<<63 - 1) - (1<<63-1)/5, 0.4},
	} {
		l, err := New(tc.cfg)
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.target, l.cfg.LatencyTarget, tc.name)
		require.Equal(t, tc.target, l.law.latencyTarget, tc.name)
		require.Equal(t, tc.smoothing, l.cfg.Smoothing, tc.name)
	}
}

// TestGradient2BacksOffOverLatencyTarget: under Gradient2 a round trip
// slower than LatencyTarget backs off by AIMDBackoff, once per round trip,
// and counts no drop; without a target the same round trip grows the
// estimate (the first round is its own baseline).
func TestGradient2BacksOffOverLatencyTarget(t *testing.T) {
	t.Parallel()
	slowRound := func(cfg Config) *Limiter {
		l, clk := newTestLimiter(t, cfg)
		leases := acquireN(t, l, 10)
		clk.Advance(60 * time.Millisecond)
		for _, le := range leases {
			le.Release()
		}
		require.Zero(t, l.Drops(), "a slow round trip that succeeded is not a drop")
		return l
	}
	l := slowRound(Config{Law: Gradient2, LatencyTarget: 50 * time.Millisecond})
	require.InDelta(t, 20*0.9, l.Estimate(), 1e-9, "ten slow samples of one round trip back off once")
	require.Greater(t, slowRound(Config{Law: Gradient2}).Estimate(), 20.0)
}

// TestMaxHealthyRTTBacksOffBeforeFailures: with MaxHealthyRTT alone, a
// round trip between 4/5 of it and it backs off under the default law
// without a drop; one past it is a drop.
func TestMaxHealthyRTTBacksOffBeforeFailures(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{MaxHealthyRTT: time.Second})
	le, _ := l.TryAcquire()
	clk.Advance(900 * time.Millisecond)
	le.Release()
	require.Zero(t, l.Drops())
	require.InDelta(t, 20*0.9, l.Estimate(), 1e-9)

	le, _ = l.TryAcquire()
	clk.Advance(1100 * time.Millisecond)
	le.Release()
	require.EqualValues(t, 1, l.Drops())
}

// TestAutoKeepsTheDerivedLatencyTarget: Auto's move to FlatLatency's law
// keeps the target MaxHealthyRTT gave it.
func TestAutoKeepsTheDerivedLatencyTarget(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{MaxHealthyRTT: time.Second})
	for range 3 {
		flatRefusal(t, l, clk)
	}
	require.Equal(t, AIMD, l.Snapshot().Law)
	require.Equal(t, 800*time.Millisecond, l.law.latencyTarget)
}
