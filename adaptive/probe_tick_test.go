package adaptive

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// tickWithOneAdmitted admits one request, ticks with it in flight and
// settles it without a sample.
func tickWithOneAdmitted(t *testing.T, l *Limiter) {
	t.Helper()
	le, ok := l.TryAcquire()
	require.True(t, ok)
	l.ProbeTick()
	le.Ignore()
}

// TestProbeTickSlowStartGrowsWithoutARoundTrip: during the slow start a
// tick grows the estimate by half when the load, peers' in-flight
// included, reached half of it (PaceGrowth), again while the load still
// reaches half of the grown estimate, up to 2.25 times the larger of the
// estimate and the fleet's limit, and leaves it alone below.
func TestProbeTickSlowStartGrowsWithoutARoundTrip(t *testing.T) {
	t.Parallel()
	cfg := Config{Law: AIMD, AIMDProbe: 5, InitialLimit: 30, PaceGrowth: true}
	for _, tc := range []struct {
		own, peers int
		want       float64
	}{{14, 0, 30}, {15, 0, 45}, {5, 10, 45}, {5, 9, 30}, {22, 0, 45}, {23, 0, 67.5}, {10, 30, 67.5}, {1, 1000, 67.5}} {
		l, _ := newTestLimiter(t, cfg)
		l.SetPeerInflight(tc.peers)
		leases := acquireN(t, l, tc.own)
		l.ProbeTick()
		require.InDelta(t, tc.want, l.Estimate(), 1e-9, "%d in flight here and %d at peers, of 30", tc.own, tc.peers)
		releaseAll(leases)
	}

	// Under a fleet limit of 100 an estimate of 30 catches up with a load
	// of 100: 45, 67.5, 101.25, 151.875, and no further than 2.25·100.
	l, _ := newTestLimiter(t, cfg)
	l.SetFleetLimit(100)
	l.SetPeerInflight(90)
	leases := acquireN(t, l, 10)
	l.ProbeTick()
	require.InDelta(t, 151.875, l.Estimate(), 1e-9)
	releaseAll(leases)
}

// TestProbeTickStepsOnlyAboveTheLastBackoffAndAfterACalmTick: after the
// slow start a tick adds the probe step only while the estimate is above
// the level the last backoff came down from, never on the first tick
// after a drop, and never beyond what the utilization guard allows.
func TestProbeTickStepsOnlyAboveTheLastBackoffAndAfterACalmTick(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{
		Law: AIMD, AIMDProbe: 5, AIMDIncrease: 0.25, BackoffRatio: 0.95,
		UtilizationThreshold: 0.8, InitialLimit: 20,
	})
	le, ok := l.TryAcquire()
	require.True(t, ok)
	le.Drop() // 20 → 19; the backoff came down from 20
	require.InDelta(t, 19.0, l.Estimate(), 1e-9)

	l.SetEstimate(30)
	l.SetPeerInflight(30)
	tickWithOneAdmitted(t, l)
	require.InDelta(t, 30.0, l.Estimate(), 1e-9, "a drop came since the last tick")
	tickWithOneAdmitted(t, l)
	// The first step after the backoff: max(0.25, 30·(1−0.95)/5) = 0.3.
	require.InDelta(t, 30.3, l.Estimate(), 1e-9)

	le, ok = l.TryAcquire()
	require.True(t, ok)
	le.Drop() // 30.3 → 28.785; the backoff came down from 30.3
	tickWithOneAdmitted(t, l)
	tickWithOneAdmitted(t, l)
	require.InDelta(t, 0.95*30.3, l.Estimate(), 1e-9, "at or under the level the last backoff came down from, round trips clock the probe")

	l.SetEstimate(32)
	l.SetPeerInflight(10)
	tickWithOneAdmitted(t, l)
	require.InDelta(t, 32.0, l.Estimate(), 1e-9, "a load of 11 is under 0.8·32: the guard holds")
	l.SetPeerInflight(30)
	tickWithOneAdmitted(t, l)
	// max(0.25, 32·(1−0.95)/5) = 0.32, not yet doubled.
	require.InDelta(t, 32.32, l.Estimate(), 1e-9, "a load of 31 passes the guard")
}

// TestProbeTickNeedsARequestOfItsOwn: peers' load alone, or a pause, says
// nothing about room at the upstream, so a tick with no admission since
// the last one, or during a pause, leaves the estimate alone.
func TestProbeTickNeedsARequestOfItsOwn(t *testing.T) {
	t.Parallel()
	cfg := Config{Law: AIMD, AIMDProbe: 5, InitialLimit: 30, PaceGrowth: true}
	l, clk := newTestLimiter(t, cfg)
	l.SetPeerInflight(20) // with 2 of its own, half of 30 but not of 45
	l.ProbeTick()
	require.InDelta(t, 30.0, l.Estimate(), 1e-9, "nothing admitted yet")

	leases := acquireN(t, l, 2)
	l.ProbeTick()
	require.InDelta(t, 45.0, l.Estimate(), 1e-9, "two admitted since the last tick")
	l.ProbeTick()
	require.InDelta(t, 45.0, l.Estimate(), 1e-9, "nothing admitted since the last tick, though two are still in flight")

	le, ok := l.TryAcquire()
	require.True(t, ok)
	l.RetryAfter(time.Second)
	l.ProbeTick()
	require.InDelta(t, 45.0, l.Estimate(), 1e-9, "paused")
	clk.Advance(2 * time.Second)
	tickWithOneAdmitted(t, l)
	require.InDelta(t, 67.5, l.Estimate(), 1e-9, "the pause is over")
	le.Release()
	releaseAll(leases)
}

// TestProbeTickCountsRequestsHeldWhileOthersWait: with its room all in
// use and a request waiting for it, a limiter admits nothing until one
// ends — a round trip longer than the interval between ticks — yet the
// upstream took and holds all it sent: as much evidence of room as an
// admission, so the tick steps.
func TestProbeTickCountsRequestsHeldWhileOthersWait(t *testing.T) {
	t.Parallel()
	cfg := Config{Law: AIMD, AIMDProbe: 5, InitialLimit: 30, PaceGrowth: true, MaxQueued: 1}
	l, _ := newTestLimiter(t, cfg)
	l.SetCeiling(2)
	l.SetPeerInflight(20) // with 2 of its own, half of 30 but not of 45
	leases := acquireN(t, l, 2)
	l.ProbeTick()
	require.InDelta(t, 45.0, l.Estimate(), 1e-9, "two admitted since the last tick")
	l.ProbeTick()
	require.InDelta(t, 45.0, l.Estimate(), 1e-9, "nothing admitted since and nothing waiting")

	ctx, cancel := context.WithCancel(context.Background())
	got := queueRequest(t, l, ctx, unitRequest)
	l.SetPeerInflight(25) // 27 in all: half of 45, not of 67.5
	l.ProbeTick()
	require.InDelta(t, 67.5, l.Estimate(), 1e-9, "two held while a third waits")
	cancel()
	require.ErrorIs(t, (<-got).err, context.Canceled)
	releaseAll(leases)
}

// TestProbeTickHeldAtItsShareTakesTheFleetLimit: on a tick that is not
// the first, where the no-load round trip is at least as long as the
// longer of the last two intervals between ticks (or no clean round trip
// has ended yet), a limiter held at its room counts its load as at least
// the fleet's limit, so its estimate takes the steps a load of the whole
// limit would: 30 under a limit of 100 grows to 151.875 instead of 67.5.
// With round trips shorter than the interval — an early tick after a
// usual one included — with nothing waiting, or on the first tick, its
// own load counts, as before.
func TestProbeTickHeldAtItsShareTakesTheFleetLimit(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	for _, tc := range []struct {
		name      string
		rtt       time.Duration   // the no-load round trip; 0: none ended
		intervals []time.Duration // between the ticks before the one measured
		waiting   bool
		want      float64
	}{
		{"round trip longer than the interval", 200 * ms, []time.Duration{100 * ms}, true, 151.875},
		{"round trip as long as the interval", 100 * ms, []time.Duration{100 * ms}, true, 151.875},
		{"no round trip yet", 0, []time.Duration{100 * ms}, true, 151.875},
		{"round trip shorter than the interval", 20 * ms, []time.Duration{100 * ms}, true, 67.5},
		{"early tick after a usual interval", 60 * ms, []time.Duration{100 * ms, 25 * ms}, true, 67.5},
		{"usual intervals", 60 * ms, []time.Duration{50 * ms, 50 * ms}, true, 151.875},
		{"nothing waiting", 200 * ms, []time.Duration{100 * ms}, false, 67.5},
		{"first tick", 200 * ms, nil, true, 67.5},
		{"first tick, no round trip yet", 0, nil, true, 67.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, clk := newTestLimiter(t, Config{Law: AIMD, AIMDProbe: 5, InitialLimit: 30, PaceGrowth: true, MaxQueued: 1})
			if tc.rtt > 0 {
				le, ok := l.TryAcquire()
				require.True(t, ok)
				clk.Advance(tc.rtt)
				le.Release() // the no-load round trip; a load of 1 grows nothing
			}
			require.InDelta(t, 30.0, l.Estimate(), 1e-9)
			for i, d := range tc.intervals {
				if i == 0 {
					l.ProbeTick() // nothing admitted since: moves nothing, starts the intervals
				}
				clk.Advance(d)
				if i < len(tc.intervals)-1 {
					l.ProbeTick() // nothing admitted since: moves nothing
				}
			}
			require.InDelta(t, 30.0, l.Estimate(), 1e-9)
			l.SetFleetLimit(100)
			l.SetCeiling(10)
			l.SetPeerInflight(20) // 30 with its own 10: half of 30 and 45, not of 67.5
			leases := acquireN(t, l, 10)
			ctx, cancel := context.WithCancel(context.Background())
			var got <-chan acquired
			if tc.waiting {
				got = queueRequest(t, l, ctx, unitRequest)
			}
			l.ProbeTick()
			require.InDelta(t, tc.want, l.Estimate(), 1e-9)
			cancel()
			if got != nil {
				require.ErrorIs(t, (<-got).err, context.Canceled)
			}
			releaseAll(leases)
		})
	}
}

// TestSlowStarting: the slow start is AIMD's with AIMDProbe set, until
// the first decrease.
func TestSlowStarting(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{Law: AIMD, AIMDProbe: 5})
	require.True(t, l.SlowStarting())
	le, ok := l.TryAcquire()
	require.True(t, ok)
	le.Drop()
	require.False(t, l.SlowStarting(), "after a backoff")

	for _, cfg := range []Config{{Law: AIMD}, {Law: Gradient2, AIMDProbe: 5}} {
		l, _ := newTestLimiter(t, cfg)
		require.False(t, l.SlowStarting(), "law %v, AIMDProbe %d", cfg.Law, cfg.AIMDProbe)
	}
}

// TestProbeTickHeldNeedsItsRoomInUse: requests held while another waits
// are evidence only when the waiter waits for room the held ones use —
// not under a share of 0 (a fenced or drained node's), where nothing is
// admitted whatever the upstream holds, nor behind a waiter too heavy
// for the room left.
func TestProbeTickHeldNeedsItsRoomInUse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		what                  string
		ceiling, held, weight int
	}{
		{"a share of 0", 0, 2, 1},
		{"9 of 10 slots free for a waiter of 10", 10, 1, 10},
	} {
		cfg := Config{Law: AIMD, AIMDProbe: 5, InitialLimit: 30, PaceGrowth: true, MaxQueued: 1}
		l, _ := newTestLimiter(t, cfg)
		l.SetCeiling(max(tc.ceiling, tc.held))
		leases := acquireN(t, l, tc.held)
		l.SetCeiling(tc.ceiling)
		ctx, cancel := context.WithCancel(context.Background())
		got := queueRequest(t, l, ctx, Request{Priority: DefaultPriority, Weight: tc.weight})
		l.SetPeerInflight(20)
		l.ProbeTick()
		require.InDelta(t, 45.0, l.Estimate(), 1e-9, "%s: the admissions before the first tick", tc.what)
		l.SetPeerInflight(40) // 41 or 42 in all, half of 67.5
		l.ProbeTick()
		est := l.Estimate()
		cancel()
		require.ErrorIs(t, (<-got).err, context.Canceled)
		releaseAll(leases)
		require.InDelta(t, 45.0, est, 1e-9, "%s: no evidence of room", tc.what)
	}
}

// TestProbeTickLeavesOtherLawsAlone: Gradient2, even with AIMDProbe set,
// and AIMD without AIMDProbe move only on round trips.
func TestProbeTickLeavesOtherLawsAlone(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{
		{InitialLimit: 10},
		{AIMDProbe: 5, InitialLimit: 10},
		{Law: AIMD, InitialLimit: 10},
	} {
		l, _ := newTestLimiter(t, cfg)
		leases := acquireN(t, l, 10)
		l.ProbeTick()
		l.ProbeTick()
		require.InDelta(t, 10.0, l.Estimate(), 1e-9, "%v, AIMDProbe %d", cfg.Law, cfg.AIMDProbe)
		releaseAll(leases)
	}
}

// TestProbeTickFleetGuardTightAfterADrop: from a drop until cutRecovery
// ProbeTicks have passed without one, a fleet node's estimate rises only
// while the load is within tightUtilization of it, whatever
// UtilizationThreshold says; ticks that admit nothing count, a drop in
// between starts the count again, and a lone limiter — or one whose drop
// came before it joined a fleet — keeps the configured threshold.
func TestProbeTickFleetGuardTightAfterADrop(t *testing.T) {
	t.Parallel()
	cfg := Config{
		Law: AIMD, AIMDProbe: 5, AIMDIncrease: 0.25, BackoffRatio: 0.95,
		UtilizationThreshold: 0.8, InitialLimit: 20,
	}
	// dropAt drops one request and puts the estimate at e with a load
	// (own 1 + peers) of 0.825·e: within the configured 0.8 but not
	// within tightUtilization. The backoff comes down from below e, so a
	// probe step is not held to the round trips.
	dropAt := func(t *testing.T, l *Limiter, e float64) {
		t.Helper()
		le, ok := l.TryAcquire()
		require.True(t, ok)
		le.Drop()
		l.SetEstimate(e)
		l.SetPeerInflight(int(0.825*e) - 1)
		require.Less(t, 0.825*e, tightUtilization*e)
	}
	// heldFor ticks with one admitted until the estimate leaves e and
	// returns how many ticks that took. A fleet node's limit is set again
	// before each tick, as fleet.Node does at every grant.
	heldFor := func(t *testing.T, l *Limiter, e float64) int {
		t.Helper()
		held := 0
		for l.Estimate() == e && held < 4*cutRecovery {
			l.mu.Lock()
			n := l.fleetLimit
			l.mu.Unlock()
			if n > 0 {
				l.SetFleetLimit(n)
			}
			tickWithOneAdmitted(t, l)
			held++
		}
		require.Greater(t, l.Estimate(), e)
		return held
	}

	fleetNode := func(t *testing.T) *Limiter {
		l, _ := newTestLimiter(t, cfg)
		l.SetFleetLimit(1000)
		return l
	}

	t.Run("lone", func(t *testing.T) {
		t.Parallel()
		l, _ := newTestLimiter(t, cfg)
		dropAt(t, l, 40)
		tickWithOneAdmitted(t, l) // a drop came since the last tick: no step
		require.InDelta(t, 40.0, l.Estimate(), 1e-9)
		require.Equal(t, 1, heldFor(t, l, 40), "steps on the first tick without a drop")
	})
	t.Run("fleet", func(t *testing.T) {
		t.Parallel()
		l := fleetNode(t)
		dropAt(t, l, 40)
		tickWithOneAdmitted(t, l)
		require.Equal(t, cutRecovery, heldFor(t, l, 40), "steps on the cutRecovery-th tick without a drop")

		// A load within tightUtilization passes on the first tick. The
		// estimate is put well above the level this backoff came down
		// from, so a probe step is not held to the round trips.
		le, ok := l.TryAcquire()
		require.True(t, ok)
		le.Drop()
		e := l.Estimate() + 10
		l.SetEstimate(e)
		l.SetPeerInflight(int(math.Ceil(tightUtilization*e)) - 1)
		tickWithOneAdmitted(t, l)
		require.Equal(t, 1, heldFor(t, l, e))
	})
	t.Run("idle ticks count", func(t *testing.T) {
		t.Parallel()
		l := fleetNode(t)
		dropAt(t, l, 40)
		for range cutRecovery {
			l.ProbeTick() // the first sees the drop; the rest count
		}
		require.Equal(t, 1, heldFor(t, l, 40))
	})
	t.Run("a drop starts the count again", func(t *testing.T) {
		t.Parallel()
		l := fleetNode(t)
		dropAt(t, l, 40)
		tickWithOneAdmitted(t, l)
		for range cutRecovery - 2 {
			tickWithOneAdmitted(t, l)
		}
		require.InDelta(t, 40.0, l.Estimate(), 1e-9)
		dropAt(t, l, 60)
		tickWithOneAdmitted(t, l)
		require.Equal(t, cutRecovery, heldFor(t, l, 60))
	})
	t.Run("drop before joining", func(t *testing.T) {
		t.Parallel()
		l, _ := newTestLimiter(t, cfg)
		dropAt(t, l, 40)
		tickWithOneAdmitted(t, l)
		l.SetFleetLimit(1000)
		require.Equal(t, 1, heldFor(t, l, 40))

		// Nor one from while the fleet limit was 0.
		l = fleetNode(t)
		dropAt(t, l, 40)
		tickWithOneAdmitted(t, l)
		l.SetFleetLimit(0)
		l.SetFleetLimit(1000)
		require.Equal(t, 1, heldFor(t, l, 40))
	})
	t.Run("gradient2", func(t *testing.T) {
		t.Parallel()
		l, clk := newTestLimiter(t, Config{InitialLimit: 100})
		l.SetFleetLimit(1000)
		le, ok := l.TryAcquire()
		require.True(t, ok)
		le.Drop()
		l.SetEstimate(100)
		l.SetPeerInflight(60) // own 1 + 60: within the default 0.5, not within 0.9
		sampleOne(t, l, clk, 10*time.Millisecond)
		require.InDelta(t, 100.0, l.Estimate(), 1e-9, "held at 0.9 after a drop")
		for range cutRecovery + 1 {
			l.ProbeTick()
		}
		sampleOne(t, l, clk, 10*time.Millisecond)
		require.Greater(t, l.Estimate(), 100.0, "the default 0.5 again")
	})
}
