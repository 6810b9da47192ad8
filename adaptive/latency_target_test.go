package adaptive

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLatencyTargetOfEachLaw: Gradient2 (and Auto) take a LatencyTarget
// left 0 as 4/5 of MaxHealthyRTT; AIMD reads LatencyTarget as set, as
// before; under every law a target at or above MaxHealthyRTT is none. Smoothing's
// default stays 0.2 in the Config either way. Snapshot reports the
// target in force, and Config.GradientLatencyTarget Gradient2's.
func TestLatencyTargetOfEachLaw(t *testing.T) {
	t.Parallel()
	const maxDuration = time.Duration(math.MaxInt64)
	for _, tc := range []struct {
		name   string
		cfg    Config
		target time.Duration
	}{
		{"neither", Config{}, 0},
		{"MaxHealthyRTT", Config{MaxHealthyRTT: time.Second}, 800 * time.Millisecond},
		{"LatencyTarget", Config{LatencyTarget: 50 * time.Millisecond}, 50 * time.Millisecond},
		{"under MaxHealthyRTT", Config{MaxHealthyRTT: time.Second, LatencyTarget: 900 * time.Millisecond}, 900 * time.Millisecond},
		{"at MaxHealthyRTT", Config{MaxHealthyRTT: time.Second, LatencyTarget: time.Second}, 0},
		{"above MaxHealthyRTT", Config{MaxHealthyRTT: time.Second, LatencyTarget: 2 * time.Second}, 0},
		{"Gradient2", Config{Law: Gradient2, MaxHealthyRTT: time.Second}, 800 * time.Millisecond},
		{"AIMD with MaxHealthyRTT", Config{Law: AIMD, MaxHealthyRTT: time.Second}, 0},
		{"AIMD with both", Config{Law: AIMD, MaxHealthyRTT: time.Second, LatencyTarget: 900 * time.Millisecond}, 900 * time.Millisecond},
		{"AIMD above MaxHealthyRTT", Config{Law: AIMD, MaxHealthyRTT: time.Second, LatencyTarget: 2 * time.Second}, 0},
		{"FlatLatency above MaxHealthyRTT", func() Config {
			c := FlatLatency()
			c.MaxHealthyRTT, c.LatencyTarget = time.Second, time.Second
			return c
		}(), 0},
		{"longest MaxHealthyRTT", Config{MaxHealthyRTT: maxDuration}, maxDuration - maxDuration/5},
	} {
		l, err := New(tc.cfg)
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.target, l.law.latencyTarget, tc.name)
		require.Equal(t, tc.target, l.Snapshot().LatencyTarget, tc.name)
		if tc.cfg.Law != AIMD {
			require.Equal(t, tc.target, tc.cfg.GradientLatencyTarget(), tc.name)
		}
		require.Equal(t, tc.cfg.LatencyTarget, l.cfg.LatencyTarget, tc.name)
		require.Equal(t, 0.2, l.cfg.Smoothing, tc.name)
	}
}

// fullFlight admits the whole limit and releases it after rtt, each
// request its own sample.
func fullFlight(t *testing.T, l *Limiter, clk *fakeClock, rtt time.Duration) {
	t.Helper()
	leases := acquireN(t, l, l.Limit())
	clk.Advance(rtt)
	for _, le := range leases {
		le.Release()
	}
}

// TestGradient2MovesDownOverLatencyTarget: under Gradient2 a full round
// trip slower than LatencyTarget, over a baseline under it, moves the
// estimate to AIMDBackoff times itself, once per round trip, and counts no
// drop.
func TestGradient2MovesDownOverLatencyTarget(t *testing.T) {
	t.Parallel()
	for _, tol := range []float64{0, 2} {
		l, clk := newTestLimiter(t, Config{Law: Gradient2, Tolerance: tol, LatencyTarget: 50 * time.Millisecond})
		fullFlight(t, l, clk, 20*time.Millisecond) // the baseline
		before := l.Estimate()
		fullFlight(t, l, clk, 60*time.Millisecond)
		require.InDelta(t, before*0.9, l.Estimate(), 1e-9, "Tolerance %v: the slow samples of one round trip move it once", tol)
		require.Zero(t, l.Drops(), "a slow round trip that succeeded is not a drop")
	}
}

// TestLatencyTargetCountsTheWholeLimitAsFull: as the utilization guard
// does, the target takes a round that filled the whole limit,
// floor(estimate), as loaded, whatever UtilizationThreshold says: with
// unit requests the load never exceeds the limit.
func TestLatencyTargetCountsTheWholeLimitAsFull(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{Law: Gradient2, LatencyTarget: 50 * time.Millisecond, UtilizationThreshold: 1})
	fullFlight(t, l, clk, 20*time.Millisecond)
	before := l.Estimate()
	require.Greater(t, before, float64(l.Limit()), "a fractional estimate")
	fullFlight(t, l, clk, 60*time.Millisecond)
	require.InDelta(t, before*0.9, l.Estimate(), 1e-9)
}

// TestATargetUnderTheBaselineIsNoTarget: an upstream whose round trips
// are all slower than the target, and all succeed, is not walked down to
// MinLimit: with the baseline over the target no load would meet it, and
// the gradient judges the rounds.
func TestATargetUnderTheBaselineIsNoTarget(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{MaxHealthyRTT: time.Second})
	for range 60 {
		fullFlight(t, l, clk, 850*time.Millisecond)
	}
	require.Zero(t, l.Drops())
	require.Greater(t, l.Estimate(), 20.0)
}

// TestMaxHealthyRTTMovesDownBeforeFailures: with MaxHealthyRTT alone, the
// default law comes down on a full round trip between 4/5 of it and it,
// with no drop; one past it is a drop.
func TestMaxHealthyRTTMovesDownBeforeFailures(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{MaxHealthyRTT: time.Second})
	fullFlight(t, l, clk, 100*time.Millisecond) // the baseline
	before := l.Estimate()
	fullFlight(t, l, clk, 900*time.Millisecond)
	require.Zero(t, l.Drops())
	require.InDelta(t, before*0.9, l.Estimate(), 1e-9)

	fullFlight(t, l, clk, 1100*time.Millisecond)
	require.Positive(t, l.Drops())
	require.Less(t, l.Estimate(), before*0.9*0.9+1e-9, "the failures back off")
}

// TestLatencyTargetIgnoresALightLoad: a round trip over the target at a
// load under the utilization threshold does not move the estimate: the
// upstream is slow, and this load did not make it so. Requests one at a
// time, every other one slower than the target, used to take the estimate
// from 20 to a few.
func TestLatencyTargetIgnoresALightLoad(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{MaxHealthyRTT: time.Second})
	for i := range 40 {
		rtt := 300 * time.Millisecond
		if i%2 == 1 {
			rtt = 850 * time.Millisecond
		}
		sampleOne(t, l, clk, rtt)
	}
	require.Zero(t, l.Drops())
	require.InDelta(t, 20, l.Estimate(), 1e-9)
}

// TestDropsAfterATargetMoveBackOff: the target's move is not a backoff, so
// the refusals of requests admitted before it still back off.
func TestDropsAfterATargetMoveBackOff(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{Law: Gradient2, MaxHealthyRTT: time.Second})
	fullFlight(t, l, clk, 100*time.Millisecond) // the baseline
	before := l.Estimate()
	leases := acquireN(t, l, l.Limit())
	clk.Advance(900 * time.Millisecond)
	leases[0].Release()
	require.InDelta(t, before*0.9, l.Estimate(), 1e-9)
	clk.Advance(300 * time.Millisecond)
	for _, le := range leases[1:] {
		le.Release() // past MaxHealthyRTT: drops
	}
	require.EqualValues(t, len(leases)-1, l.Drops())
	require.Less(t, l.Estimate(), before*0.9*0.9+1e-9)
}

// TestAFarTargetLeavesGradient2Alone: a MaxHealthyRTT far above the round
// trip, as a timeout would be, changes nothing: its target never fires
// and Smoothing stays 0.2. On an upstream whose latency grows with its
// load the defaults settle where they do without it.
func TestAFarTargetLeavesGradient2Alone(t *testing.T) {
	t.Parallel()
	shared := sharedAbove(50)
	without := flatRounds(t, Config{MaxLimit: 400}, 1500, shared)
	far := flatRounds(t, Config{MaxLimit: 400, MaxHealthyRTT: 30 * time.Second}, 1500, shared)
	require.Equal(t, without, far)
}

// TestANearTargetDoublesTheClimb: Smoothing left 0 is 0.4 for a round
// whose target is at most twice rttNoload, 0.2 for one further away or
// when Smoothing is set.
func TestANearTargetDoublesTheClimb(t *testing.T) {
	t.Parallel()
	climb := func(cfg Config) float64 {
		l, clk := newTestLimiter(t, cfg)
		fullFlight(t, l, clk, 20*time.Millisecond)
		return l.Estimate() - 20
	}
	step := math.Sqrt(20)
	require.InDelta(t, 0.4*step, climb(Config{MaxHealthyRTT: 50 * time.Millisecond}), 1e-9, "target 40ms, twice the 20ms round trip")
	require.InDelta(t, 0.2*step, climb(Config{MaxHealthyRTT: 51 * time.Millisecond}), 1e-9, "target 40.8ms")
	require.InDelta(t, 0.2*step, climb(Config{MaxHealthyRTT: 50 * time.Millisecond, Smoothing: 0.2}), 1e-9, "Smoothing set")
	require.InDelta(t, 0.2*step, climb(Config{}), 1e-9, "no target")
}

// TestFlatLatencyLawTakesNoDerivedTarget: Auto's move to FlatLatency's
// law, which reads no latency, leaves MaxHealthyRTT's target behind; a
// target the Config sets goes with it.
func TestFlatLatencyLawTakesNoDerivedTarget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg    Config
		target time.Duration
	}{
		{Config{MaxHealthyRTT: time.Second}, 0},
		{Config{MaxHealthyRTT: time.Second, LatencyTarget: 900 * time.Millisecond}, 900 * time.Millisecond},
	} {
		l, clk := newTestLimiter(t, tc.cfg)
		require.Positive(t, l.law.latencyTarget)
		for range 3 {
			flatRefusal(t, l, clk)
		}
		require.Equal(t, AIMD, l.Snapshot().Law)
		require.Equal(t, tc.target, l.law.latencyTarget)
	}
}
