package adaptive

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// refuse admits one lease, lets rtt pass and drops it.
func refuse(t *testing.T, l *Limiter, clk *fakeClock, rtt time.Duration) {
	t.Helper()
	settleOne(t, l, clk, rtt, Lease.Drop)
}

// flatRefusal is a round trip served at the no-load latency, then a
// refusal answered at once: an upstream that refuses above its capacity
// without queueing first.
func flatRefusal(t *testing.T, l *Limiter, clk *fakeClock) {
	t.Helper()
	sampleOne(t, l, clk, 20*time.Millisecond)
	refuse(t, l, clk, time.Millisecond)
}

func TestAutoMovesToFlatLatencyOnRefusalsAnsweredAtOnce(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{})
	flatRefusal(t, l, clk)
	flatRefusal(t, l, clk)
	require.Equal(t, Gradient2, l.Snapshot().Law)
	require.InDelta(t, 20*0.95*0.95, l.Estimate(), 1e-9, "FlatLatency's backoff of 0.95 before the move")
	flatRefusal(t, l, clk)
	require.Equal(t, AIMD, l.Snapshot().Law, "the third refusal in a row moves the law")
	require.InDelta(t, 20*0.95*0.95*0.95, l.Estimate(), 1e-9, "FlatLatency's backoff of 0.95")
	require.Equal(t, lawParams{law: AIMD, backoffRatio: 0.95, aimdIncrease: 0.25, aimdBackoff: 0.9, aimdProbe: 5,
		utilization: 0.8, paceGrowth: true}, l.law, "FlatLatency's law")
}

// Before Auto moves, a refusal with the mark of a flat upstream already
// backs off by FlatLatency's BackoffRatio (the Config's own if it sets
// one); any other drop by Gradient2's, and a chosen Gradient2 keeps 0.9.
func TestAutoBacksOffLikeFlatLatencyBeforeTheMove(t *testing.T) {
	t.Parallel()
	ratio := func(cfg Config, refusal func(*testing.T, *Limiter, *fakeClock)) float64 {
		cfg.InitialLimit = 100
		l, clk := newTestLimiter(t, cfg)
		sampleOne(t, l, clk, 20*time.Millisecond) // rttNoload 20ms
		before := l.Estimate()
		refusal(t, l, clk)
		return l.Estimate() / before
	}
	timedOut := func(t *testing.T, l *Limiter, clk *fakeClock) {
		sampleOne(t, l, clk, 20*time.Millisecond)
		refuse(t, l, clk, time.Second)
	}
	// A round trip 1.2 times rttNoload: within Auto's mark of no
	// queueing, and queue evidence to Gradient2 (10/12).
	slightlySlow := func(t *testing.T, l *Limiter, clk *fakeClock) {
		sampleOne(t, l, clk, 24*time.Millisecond)
		refuse(t, l, clk, time.Millisecond)
	}
	require.InDelta(t, 0.95, ratio(Config{}, flatRefusal), 1e-9, "Auto, answered at once")
	require.InDelta(t, 0.95, ratio(Config{}, slightlySlow), 1e-9, "Auto: no queue to FlatLatency's law")
	require.InDelta(t, 0.97, ratio(Config{BackoffRatio: 0.97}, flatRefusal), 1e-9, "Auto, the Config's own BackoffRatio")
	require.InDelta(t, 0.9, ratio(Config{}, timedOut), 1e-9, "Auto, a refusal that timed out")
	require.InDelta(t, 0.9, ratio(Config{Law: Gradient2}, flatRefusal), 1e-9, "Gradient2 chosen")
	require.InDelta(t, 20.0/24, ratio(Config{Law: Gradient2}, slightlySlow), 1e-9, "Gradient2 chosen: the queue's ratio")

	// Under a fleet limit that binds, one backoff takes at most half of
	// what the ratio leaves: FlatLatency's for Auto's flat refusal.
	bound := func(cfg Config) float64 {
		cfg.InitialLimit = 100
		l, clk := newTestLimiter(t, cfg)
		l.SetCeiling(10)
		l.SetFleetLimit(20)
		flatRefusal(t, l, clk)
		return l.Estimate()
	}
	require.InDelta(t, 47.5, bound(Config{}), 1e-9, "Auto: half of 0.95")
	require.InDelta(t, 45, bound(Config{Law: Gradient2}), 1e-9, "Gradient2 chosen: half of 0.9")
}

func TestAutoKeepsGradient2(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		refusal func(t *testing.T, l *Limiter, clk *fakeClock)
	}{
		{"refusals after queueing", func(t *testing.T, l *Limiter, clk *fakeClock) {
			sampleOne(t, l, clk, 30*time.Millisecond) // 1.5 × rttNoload
			refuse(t, l, clk, time.Millisecond)
		}},
		{"refusals after a timeout", func(t *testing.T, l *Limiter, clk *fakeClock) {
			sampleOne(t, l, clk, 20*time.Millisecond)
			refuse(t, l, clk, time.Second)
		}},
		{"refusals answered after half of rttNoload", func(t *testing.T, l *Limiter, clk *fakeClock) {
			sampleOne(t, l, clk, 20*time.Millisecond)
			refuse(t, l, clk, 10*time.Millisecond)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l, clk := newTestLimiter(t, Config{})
			sampleOne(t, l, clk, 20*time.Millisecond) // rttNoload 20ms
			for range 10 {
				tc.refusal(t, l, clk)
			}
			require.Equal(t, Gradient2, l.Snapshot().Law)
		})
	}
}

func TestAutoCountsRefusalsInARow(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{})
	flatRefusal(t, l, clk)
	flatRefusal(t, l, clk)
	sampleOne(t, l, clk, 30*time.Millisecond)
	refuse(t, l, clk, time.Millisecond) // after queueing: the count starts again
	flatRefusal(t, l, clk)
	flatRefusal(t, l, clk)
	require.Equal(t, Gradient2, l.Snapshot().Law)
	flatRefusal(t, l, clk)
	require.Equal(t, AIMD, l.Snapshot().Law)

	// Refusals of one round trip back off once, and count once.
	l, clk = newTestLimiter(t, Config{})
	sampleOne(t, l, clk, 20*time.Millisecond)
	leases := acquireN(t, l, 10)
	clk.Advance(time.Millisecond)
	for _, le := range leases {
		le.Drop()
	}
	require.Equal(t, Gradient2, l.Snapshot().Law)
}

func TestAutoKeepsTheLawFieldsItSets(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{BackoffRatio: 0.8, UtilizationThreshold: 0.5})
	for range 3 {
		flatRefusal(t, l, clk)
	}
	require.Equal(t, AIMD, l.Snapshot().Law)
	require.InDelta(t, 20*0.8*0.8*0.8, l.Estimate(), 1e-9, "BackoffRatio 0.8 under either law")
	require.Equal(t, 0.5, l.law.utilization)
	require.True(t, l.law.paceGrowth, "FlatLatency's PaceGrowth: the Config left it unset")
	require.Equal(t, 5, l.law.aimdProbe)
}

// TestAutoKeepsNoTargetAtOrAboveMaxHealthyRTT: a LatencyTarget at or
// above MaxHealthyRTT is no target after Auto's move either.
func TestAutoKeepsNoTargetAtOrAboveMaxHealthyRTT(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		target, want time.Duration
	}{{time.Second, 0}, {2 * time.Second, 0}, {900 * time.Millisecond, 900 * time.Millisecond}} {
		l, clk := newTestLimiter(t, Config{MaxHealthyRTT: time.Second, LatencyTarget: tc.target})
		for range 3 {
			flatRefusal(t, l, clk)
		}
		require.Equal(t, AIMD, l.Snapshot().Law)
		require.Equal(t, tc.want, l.Snapshot().LatencyTarget, "LatencyTarget %v", tc.target)
	}
}

func TestChosenLawsNeverMove(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{{Law: Gradient2}, {Law: AIMD}, FlatLatency()} {
		l, clk := newTestLimiter(t, cfg)
		for range 10 {
			flatRefusal(t, l, clk)
		}
		require.Equal(t, cfg.Law, l.Snapshot().Law, cfg.Law)
	}
}

// What is no evidence of an upstream that refuses without queueing.
func TestAutoIgnoresOutagesAndStrayErrors(t *testing.T) {
	t.Parallel()
	t.Run("an outage: no request served between the refusals", func(t *testing.T) {
		t.Parallel()
		l, clk := newTestLimiter(t, Config{})
		for range 200 {
			sampleOne(t, l, clk, 20*time.Millisecond)
		}
		for range 100 {
			refuse(t, l, clk, time.Millisecond)
		}
		require.Equal(t, Gradient2, l.Snapshot().Law)
		flatRefusal(t, l, clk) // the outage counted once
		require.Equal(t, Gradient2, l.Snapshot().Law)
		flatRefusal(t, l, clk)
		require.Equal(t, AIMD, l.Snapshot().Law)
	})
	t.Run("stray refusals between spells of queueing", func(t *testing.T) {
		t.Parallel()
		l, clk := newTestLimiter(t, Config{})
		sampleOne(t, l, clk, 20*time.Millisecond)
		for range 5 {
			flatRefusal(t, l, clk)
			sampleOne(t, l, clk, 35*time.Millisecond) // queueing: the count starts again
			flatRefusal(t, l, clk)
			for range 3 {
				sampleOne(t, l, clk, 35*time.Millisecond)
			}
		}
		require.Equal(t, Gradient2, l.Snapshot().Law)
	})
	t.Run("stray refusals far apart", func(t *testing.T) {
		t.Parallel()
		l, clk := newTestLimiter(t, Config{})
		for range 5 {
			flatRefusal(t, l, clk)
			for range autoFlatSpan {
				sampleOne(t, l, clk, 20*time.Millisecond)
			}
		}
		require.Equal(t, Gradient2, l.Snapshot().Law)
	})
	t.Run("a drop during a recalibration", func(t *testing.T) {
		t.Parallel()
		l, clk := newTestLimiter(t, Config{Recalibration: Recalibration{Interval: time.Second, Samples: 3}})
		sampleOne(t, l, clk, 20*time.Millisecond)
		flatRefusal(t, l, clk)
		flatRefusal(t, l, clk)
		clk.Advance(2 * time.Second)
		sampleOne(t, l, clk, 20*time.Millisecond) // starts the recalibration
		require.True(t, l.Snapshot().Recalibrating)
		refuse(t, l, clk, time.Second) // backs off, and cannot be judged
		for range 3 {
			sampleOne(t, l, clk, 20*time.Millisecond)
		}
		require.False(t, l.Snapshot().Recalibrating)
		flatRefusal(t, l, clk)
		require.Equal(t, Gradient2, l.Snapshot().Law)
	})
	t.Run("a clock that went back", func(t *testing.T) {
		t.Parallel()
		l, clk := newTestLimiter(t, Config{})
		for range 3 {
			sampleOne(t, l, clk, 20*time.Millisecond)
			settleOne(t, l, clk, -500*time.Millisecond, Lease.Drop)
			clk.Advance(time.Second)
		}
		require.Equal(t, Gradient2, l.Snapshot().Law)
	})
}
