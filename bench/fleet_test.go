package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/internal/pgtemp"
	"github.com/fleetlimit/fleetlimit/internal/sim"
)

func TestJainIndex(t *testing.T) {
	t.Parallel()
	require.InDelta(t, 1.0, JainIndex([]int64{5, 5, 5, 5}), 1e-12)
	require.InDelta(t, 0.25, JainIndex([]int64{8, 0, 0, 0}), 1e-12)
	require.InDelta(t, 0.9, JainIndex([]int64{1, 2}), 1e-12) // 9 / (2·5)
	require.True(t, math.IsNaN(JainIndex(nil)))
	require.True(t, math.IsNaN(JainIndex([]int64{0, 0})))
}

func TestDurationPercentile(t *testing.T) {
	t.Parallel()
	ds := []time.Duration{40, 10, 30, 20, 50}
	require.Equal(t, time.Duration(30), DurationPercentile(ds, 0.5))
	require.Equal(t, time.Duration(10), DurationPercentile(ds, 0))
	require.Equal(t, time.Duration(50), DurationPercentile(ds, 1))
	require.Equal(t, time.Duration(46), DurationPercentile(ds, 0.9))
	require.Equal(t, []time.Duration{40, 10, 30, 20, 50}, ds, "the input is not reordered")
	require.Zero(t, DurationPercentile(nil, 0.5))
}

func TestFleetScenarioSchedule(t *testing.T) {
	t.Parallel()
	sc := DefaultFleetScenario()
	require.NoError(t, sc.validate())
	require.Equal(t, []sim.Step{{At: 0, Capacity: 40}, {At: 6 * time.Second, Capacity: 20}, {At: 12 * time.Second, Capacity: 40}}, sc.Steps())
	require.Equal(t, 40, sc.CapacityAt(0))
	require.Equal(t, 40, sc.CapacityAt(6*time.Second-1))
	require.Equal(t, 20, sc.CapacityAt(6*time.Second))
	require.Equal(t, 40, sc.CapacityAt(17*time.Second))
	// (40·6 + 20·6 + 40·6) / 18 = 33.3 in flight, over 20 ms.
	require.InDelta(t, 100.0/3/0.020, sc.IdealGoodput(), 1e-9)
	require.Equal(t, 30, sc.WorkersPerNode, "3·C/N")

	bad := sc
	bad.Settle = sc.Duration / 3
	require.ErrorContains(t, bad.validate(), "Settle")
	bad = sc
	bad.Capacity = 3
	require.ErrorContains(t, bad.validate(), "Capacity")
}

// series builds a FleetSample every 10 ms from 10 ms to end, with
// in-flight f(t) and capacity c(t).
func series(end time.Duration, f func(time.Duration) float64, c func(time.Duration) int) []FleetSample {
	var out []FleetSample
	for at := 10 * time.Millisecond; at <= end; at += 10 * time.Millisecond {
		out = append(out, FleetSample{At: at, Inflight: f(at), Capacity: c(at - 1)})
	}
	return out
}

func TestConvergence(t *testing.T) {
	t.Parallel()
	step, end := 3*time.Second, 6*time.Second
	capAt := func(at time.Duration) int {
		if at < step {
			return 40
		}
		return 20
	}
	for _, tc := range []struct {
		name   string
		f      func(time.Duration) float64
		want   time.Duration
		wantOK bool
	}{
		{"jumps at once", func(at time.Duration) float64 {
			if at <= step {
				return 40
			}
			return 20
		}, 10 * time.Millisecond, true},
		{"never comes down", func(time.Duration) float64 { return 40 }, 0, false},
		{"settles 500 ms late", func(at time.Duration) float64 {
			if at <= step+500*time.Millisecond {
				return 40
			}
			return 20
		}, 0, true}, // checked below: the trailing mean must come within 10 %
		{"inside the band", func(at time.Duration) float64 {
			if at <= step {
				return 40
			}
			return 21.5
		}, 10 * time.Millisecond, true},
		{"settles too late to hold for a second", func(at time.Duration) float64 {
			if at <= end-500*time.Millisecond {
				return 40
			}
			return 20
		}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := Convergence(series(end, tc.f, capAt), step, end)
			require.Equal(t, tc.wantOK, ok)
			if tc.name == "settles 500 ms late" {
				// 50 samples at 40, then the 1-s trailing mean falls to 22
				// once 90 of its 100 samples are at 20: 0.5 s + 0.9 s.
				require.InDelta(t, 1400*time.Millisecond, got, float64(20*time.Millisecond))
				return
			}
			require.Equal(t, tc.want, got)
		})
	}
	_, ok := Convergence(nil, step, end)
	require.False(t, ok)
}

// TestMeter drives the meter on a fake clock.
func TestMeter(t *testing.T) {
	t.Parallel()
	sc := DefaultFleetScenario()
	sc.Capacity, sc.Nodes = 2, 2
	sc.Duration, sc.Settle = 21*time.Second, 2*time.Second // C halves at 7 s
	start := time.Unix(1000, 0)
	now := start
	m := newMeter(sc)
	m.now = func() time.Time { return now }
	m.begin(start)

	s0 := m.inc() // 1 in flight
	now = now.Add(3 * time.Second)
	s1 := m.inc() // 2 = C
	now = now.Add(time.Second)
	s2 := m.inc() // 3 > C, 4 s in: not in a settle window (it ends at 2 s)
	now = now.Add(500 * time.Millisecond)
	m.dec(0, s2, outcomeRejected, 0)
	now = now.Add(2500 * time.Millisecond) // 7 s: C halves to 1
	s3 := m.inc()                          // 3 > 1, settling
	now = now.Add(time.Second)
	m.dec(1, s0, outcomeOK, 20*time.Millisecond)
	m.dec(0, s1, outcomeOK, 30*time.Millisecond)
	m.dec(0, s3, outcomeFailed, 0)
	now = now.Add(time.Second)

	r := m.result(StaticSplit, sc)
	require.Equal(t, int64(4), r.Sent)
	require.Equal(t, int64(2), r.Succeeded)
	require.Equal(t, int64(1), r.Rejected)
	require.Equal(t, int64(1), r.Failed)
	require.Equal(t, []int64{1, 1}, r.NodeSucceeded)
	require.Equal(t, []time.Duration{20 * time.Millisecond, 30 * time.Millisecond}, r.Latencies)
	require.Equal(t, 3, r.PeakInflight)
	require.InDelta(t, 3.0, r.PeakRatio, 1e-12)
	require.Equal(t, 7*time.Second, r.PeakAt)
	require.InDelta(t, 1.5, r.SteadyPeakRatio, 1e-12, "the peak at the halving is in its settle window")
	require.InDelta(t, 3.0, r.OuterPeakRatio, 1e-12, "the 3 in flight at C = 1 outlast the halving's first heartbeat")
	require.Equal(t, 7*time.Second+sc.Heartbeat, r.OuterPeakAt)
	require.InDelta(t, 2.0, r.CarriedRatio, 1e-12, "of those 3, the 2 sent before the halving")
	require.Equal(t, []time.Duration{0, 3 * time.Second, 4 * time.Second, 7 * time.Second}, []time.Duration{s0, s1, s2, s3})
	// Over C: 0.5 s at 3 > 2, then 1 s at 3 > 1 after the halving.
	require.Equal(t, 1500*time.Millisecond, r.OverCapacity)
	require.Equal(t, 9*time.Second, r.Elapsed)
}

// TestMeterOuterPeak: only [s, s+Heartbeat) after a capacity drop s is
// excused; the start, the doubling and a count that stays up past the
// window all count.
func TestMeterOuterPeak(t *testing.T) {
	t.Parallel()
	sc := DefaultFleetScenario()
	sc.Capacity, sc.Nodes = 2, 2
	sc.Duration, sc.Settle = 21*time.Second, 2*time.Second // C = 2, 1 at 7 s, 2 at 14 s
	start := time.Unix(1000, 0)
	halving, doubling := 7*time.Second, 14*time.Second
	var sent []time.Duration // the sends in flight, oldest first
	run := func(events func(m *meter, at func(time.Duration))) FleetResult {
		now := start
		sent = nil
		m := newMeter(sc)
		m.now = func() time.Time { return now }
		m.begin(start)
		events(m, func(d time.Duration) { now = start.Add(d) })
		now = now.Add(time.Second)
		return m.result(Fleetlimit, sc)
	}
	incs := func(m *meter, n int) {
		for range n {
			sent = append(sent, m.inc())
		}
	}
	decs := func(m *meter, n int) {
		for range n {
			m.dec(0, sent[0], outcomeRejected, 0)
			sent = sent[1:]
		}
	}

	r := run(func(m *meter, at func(time.Duration)) {
		incs(m, 3) // 1.5·C at the start, in its settle window: counts
		decs(m, 3)
		at(halving + 50*time.Millisecond)
		incs(m, 4) // 4·C within the drop's first heartbeat, ended within it: excused
		decs(m, 4)
	})
	require.InDelta(t, 1.5, r.OuterPeakRatio, 1e-12)
	require.Equal(t, time.Duration(0), r.OuterPeakAt)
	require.InDelta(t, 4.0, r.PeakRatio, 1e-12)
	require.Zero(t, r.SteadyPeakRatio, "every send fell in a settle window")
	require.Zero(t, r.CarriedRatio, "nothing sent before the halving was in flight after it")

	r = run(func(m *meter, at func(time.Duration)) {
		at(halving + sc.Heartbeat)
		incs(m, 2) // at the window's end exactly: counts
	})
	require.InDelta(t, 2.0, r.OuterPeakRatio, 1e-12)
	require.Equal(t, halving+sc.Heartbeat, r.OuterPeakAt)
	require.Zero(t, r.CarriedRatio, "sent at the window's end, after the halving")

	r = run(func(m *meter, at func(time.Duration)) {
		at(halving - time.Millisecond)
		incs(m, 3) // 1.5·C before the halving, 3·C after it, with no send
	})
	require.InDelta(t, 3.0, r.OuterPeakRatio, 1e-12, "a count that outlasts the window counts at its end")
	require.Equal(t, halving+sc.Heartbeat, r.OuterPeakAt)
	require.InDelta(t, 3.0, r.PeakRatio, 1e-12, "the halving itself lifts the whole-run peak")
	require.Equal(t, halving, r.PeakAt)
	require.InDelta(t, 1.5, r.SteadyPeakRatio, 1e-12, "sent before the halving, out of any settle window")
	require.InDelta(t, 3.0, r.CarriedRatio, 1e-12, "all three were sent before the halving")

	r = run(func(m *meter, at func(time.Duration)) {
		at(doubling + time.Millisecond)
		incs(m, 5) // a rise is no drop: 2.5·C right after the doubling counts
	})
	require.InDelta(t, 2.5, r.OuterPeakRatio, 1e-12)
	require.Equal(t, doubling+time.Millisecond, r.OuterPeakAt)
}

func TestRunFleetWayStatic(t *testing.T) {
	t.Parallel()
	sc := DefaultFleetScenario()
	sc.Capacity, sc.Nodes, sc.WorkersPerNode = 8, 2, 6
	sc.BaseLatency = 10 * time.Millisecond
	sc.Duration, sc.Settle = 3*time.Second, 200*time.Millisecond
	r, err := RunFleetWay(context.Background(), sc, StaticSplit, FleetEnv{})
	require.NoError(t, err)
	require.Equal(t, r.Sent, r.Succeeded+r.Rejected+r.Failed)
	require.Positive(t, r.Succeeded)
	// The requests in flight when the load stops may end as successes at
	// the provider and as failures (cancelled) at the clients.
	require.InDelta(t, float64(r.ServerSuccesses), float64(r.Succeeded), float64(r.PeakInflight), "the clients and the provider agree")
	require.Equal(t, r.ServerRejected, r.Rejected)
	require.LessOrEqual(t, r.PeakInflight, 8, "two semaphores of C/N = 4")
	require.Positive(t, r.Rejected, "C/N per node is twice the halved capacity")
	require.NotEmpty(t, r.Series)
	require.Len(t, r.NodeSucceeded, 2)

	_, err = RunFleetWay(context.Background(), sc, Fleetlimit, FleetEnv{})
	require.ErrorContains(t, err, "FleetEnv.Pool")
}

// TestRunFleetWayFleetlimit runs a short fleet on a throwaway Postgres.
func TestRunFleetWayFleetlimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg, err := StartFleetPostgres(ctx, 4)
	if errors.Is(err, pgtemp.ErrNotInstalled) {
		t.Skip("Postgres is not installed:", err)
	}
	require.NoError(t, err)
	defer func() { require.NoError(t, pg.Stop()) }()
	sc := DefaultFleetScenario()
	sc.Capacity, sc.Nodes, sc.WorkersPerNode = 8, 2, 6
	sc.BaseLatency = 10 * time.Millisecond
	sc.Duration, sc.Settle = 3*time.Second, 200*time.Millisecond
	r, err := RunFleetWay(ctx, sc, Fleetlimit, FleetEnv{Pool: pg.Pool, Key: "test-fleet"})
	require.NoError(t, err)
	require.Positive(t, r.Succeeded)
	require.Equal(t, r.Sent, r.Succeeded+r.Rejected+r.Failed)
	lGlobal := 0
	for _, s := range r.Series {
		lGlobal = max(lGlobal, s.LGlobal)
	}
	require.Positive(t, lGlobal, "the series carries L_global")
}

// TestFleetlimitTightDeadlines: callers that give each request a few base
// latencies, admission wait included. The busy nodes' queues take most of
// that; when the requests they then sent with a few milliseconds left
// counted their timeouts as drops, the limits fell, the waits grew and
// the fleet spiralled down: eight nodes of unequal demand at a 429
// provider with 150 ms deadlines served a quarter to two fifths of the
// ideal, and four nodes on the library's defaults at a provider whose
// latency grows with its load, with 100 ms deadlines, served about 1 %.
// Each is compared with a static split of C/N in the same run, so the
// machine's speed cancels out: fleetlimit served about 1.5 and 1.03 times
// the split's goodput, where the spirals served 0.25–0.86 and 0.01.
func TestFleetlimitTightDeadlines(t *testing.T) {
	ctx := context.Background()
	pg, err := StartFleetPostgres(ctx, 8)
	require.NoError(t, err)
	defer func() { require.NoError(t, pg.Stop()) }()

	unequal := DefaultFleetScenario()
	unequal.Nodes, unequal.Workers = 8, []int{64, 64, 8, 8, 2, 2, 1, 1}
	unequal.RequestTimeout = 150 * time.Millisecond
	shaped := DefaultFleetScenario()
	shaped.LatencyShaped = true
	shaped.RequestTimeout = 100 * time.Millisecond
	defaults := func(maxQueued int) adaptive.Config { return adaptive.Config{MaxQueued: maxQueued} }
	for _, c := range []struct {
		name    string
		sc      FleetScenario
		limiter func(int) adaptive.Config
		atLeast float64 // fleetlimit's goodput ÷ the split's
	}{
		{"429, eight unequal nodes, 150ms", unequal, nil, 1},
		{"latency-shaped, defaults, 100ms", shaped, defaults, 0.8},
	} {
		t.Run(c.name, func(t *testing.T) {
			sc := c.sc
			sc.Duration, sc.Settle = 9*time.Second, time.Second
			requireGoodputOfSplit(t, pg, sc, c.limiter, c.atLeast)
		})
	}
}

// requireGoodputOfSplit runs sc with a static split of C/N and with
// fleetlimit on pg (its nodes on limiter, nil for the fleet sections'),
// logs both, requires fleetlimit's goodput to be at least atLeast times
// the split's, and returns fleetlimit's run.
func requireGoodputOfSplit(t *testing.T, pg *FleetPostgres, sc FleetScenario, limiter func(int) adaptive.Config, atLeast float64) FleetResult {
	t.Helper()
	ctx := context.Background()
	split, err := RunFleetWay(ctx, sc, StaticSplit, FleetEnv{})
	require.NoError(t, err)
	fleet, err := RunFleetWay(ctx, sc, Fleetlimit, FleetEnv{Pool: pg.Pool, Key: "test-" + t.Name(), Limiter: limiter})
	require.NoError(t, err)
	t.Logf("goodput: static C/N %.0f req/s, fleetlimit %.0f req/s = %.1f %% of the ideal, %.1f %% 429s (per node %v)",
		split.Goodput(), fleet.Goodput(), 100*fleet.Goodput()/sc.IdealGoodput(), 100*fleet.RejectedFraction(), fleet.NodeSucceeded)
	require.GreaterOrEqual(t, fleet.Goodput(), atLeast*split.Goodput(), "fleetlimit ÷ a static split of C/N")
	return fleet
}

// TestFleetlimitMoreNodesThanCapacity: more nodes than the capacity while
// it is halved to 20, on section 3's scenario cut to 9 s, compared with a
// static split of C/N in the same run.
//   - Forty nodes of three workers, heartbeating every 100 ms (400
//     heartbeats/s on one key). When a heartbeat that timed out cut its
//     connection, the next waited for a new one and timed out too: every
//     node was fenced within 0.2 s and the fleet served under 1 % of the
//     ideal for the rest of the run.
//   - Twenty-four nodes of five workers. Every node keeps its floor of one
//     slot, so 24 are in flight against 20 and each round trip used to
//     refuse four of them: 429s were 6.0–6.3 % of the requests sent before
//     refusals at a node's last slot backed off.
func TestFleetlimitMoreNodesThanCapacity(t *testing.T) {
	ctx := context.Background()
	pg, err := StartFleetPostgres(ctx, 16)
	require.NoError(t, err)
	defer func() { require.NoError(t, pg.Stop()) }()
	for _, c := range []struct {
		nodes, workers int
		atLeast        float64 // fleetlimit's goodput ÷ the split's
		most429        float64 // of the requests fleetlimit sent
	}{
		// Forty nodes read 10–12 % 429s on a 2-core machine (the
		// 7.2–9.0 % of an earlier report came from a machine where a
		// fleet whose heartbeats were cancelled at their timeout was not
		// fenced; it is no baseline), so 15 % leaves room; the goodput
		// bound of 0.5 catches the fenced fleet of the first bullet, and
		// the twenty-four nodes' 5 % guards the backoff.
		{40, 3, 0.5, 0.15},
		{24, 5, 0.9, 0.05},
	} {
		t.Run(fmt.Sprintf("%d nodes of %d", c.nodes, c.workers), func(t *testing.T) {
			sc := DefaultFleetScenario()
			sc.Nodes, sc.WorkersPerNode = c.nodes, c.workers
			sc.Duration, sc.Settle = 9*time.Second, time.Second
			fleet := requireGoodputOfSplit(t, pg, sc, nil, c.atLeast)
			require.LessOrEqual(t, fleet.RejectedFraction(), c.most429, "429s")
		})
	}
}

func TestDropBurst(t *testing.T) {
	t.Parallel()
	after, err := DropBurst(FleetLimiterConfig(30), 30, 7, 50, 500*time.Microsecond)
	require.NoError(t, err)
	require.NotEmpty(t, after)
	prev := 30.0
	for _, v := range after {
		require.LessOrEqual(t, v, prev, "a 429 never raises the estimate")
		prev = v
	}
	again, err := DropBurst(FleetLimiterConfig(30), 30, 7, 50, 500*time.Microsecond)
	require.NoError(t, err)
	require.Equal(t, after, again, "deterministic")

	cfg := FleetLimiterConfig(30)
	cfg.Clock = sim.NewManualClock(time.Unix(0, 0))
	_, err = DropBurst(cfg, 30, 7, 5, time.Millisecond)
	require.ErrorContains(t, err, "Config.Clock must be nil")
	_, err = JitterCeiling(cfg, time.Millisecond, 0, 10, 1)
	require.ErrorContains(t, err, "Config.Clock must be nil")
	_, err = SpreadCeiling(cfg, time.Millisecond, 0, 10, 1)
	require.ErrorContains(t, err, "SpreadCeiling: Config.Clock must be nil")
}

func TestSpreadCeiling(t *testing.T) {
	t.Parallel()
	base := 20 * time.Millisecond
	flat, err := SpreadCeiling(FleetLimiterConfig(30), base, 1, 3000, 1)
	require.NoError(t, err)
	require.InDelta(t, 1000, flat, 1e-9, "AIMD on drops does not read the spread")
	fixed := adaptive.Config{Tolerance: 2}
	narrow, err := SpreadCeiling(fixed, base, 0.05, 3000, 1)
	require.NoError(t, err)
	require.InDelta(t, 1000, narrow, 1e-9)
	wide, err := SpreadCeiling(fixed, base, 0.5, 3000, 1)
	require.NoError(t, err)
	require.InDelta(t, 5, wide, 1, "a fixed tolerance reads a wide spread as queueing: near Gradient2's floor, 4")
	for _, sigma := range []float64{0.05, 0.5, 1} {
		band, err := SpreadCeiling(adaptive.Config{}, base, sigma, 3000, 1)
		require.NoError(t, err)
		require.Greater(t, band, 500.0, "σ %v: the defaults' noise band takes the spread for noise", sigma)
	}
	again, err := SpreadCeiling(fixed, base, 0.5, 3000, 1)
	require.NoError(t, err)
	require.Equal(t, wide, again, "deterministic")
}

func TestJitterCeiling(t *testing.T) {
	t.Parallel()
	cfg := FleetLimiterConfig(30)
	flat, err := JitterCeiling(cfg, 20*time.Millisecond, 0, 3000, 1)
	require.NoError(t, err)
	require.InDelta(t, 1000, flat, 1e-9, "without jitter the estimate grows to MaxLimit")
	prev := flat
	for _, sigma := range []float64{0.03, 0.15} {
		v, err := JitterCeiling(cfg, 20*time.Millisecond, sigma, 3000, 1)
		require.NoError(t, err)
		require.LessOrEqual(t, v, prev, "more jitter never raises it")
		again, err := JitterCeiling(cfg, 20*time.Millisecond, sigma, 3000, 1)
		require.NoError(t, err)
		require.Equal(t, v, again, "deterministic")
		prev = v
	}
}

// TestQuotaUsed: the window takes the samples that end in (from, to], caps
// each at the capacity then, and is NaN with no sample.
func TestQuotaUsed(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	r := FleetResult{Series: []FleetSample{
		{At: 10 * ms, Capacity: 40, Inflight: 10},
		{At: 20 * ms, Capacity: 40, Inflight: 30},
		{At: 30 * ms, Capacity: 20, Inflight: 50}, // above C: full, not 2.5
		{At: 40 * ms, Capacity: 20, Inflight: 5},
	}}
	require.InDelta(t, (0.25+0.75)/2, r.QuotaUsed(0, 20*ms), 1e-12)
	require.InDelta(t, (0.75+1+0.25)/3, r.QuotaUsed(10*ms, 40*ms), 1e-12)
	require.InDelta(t, 1.0, r.QuotaUsed(20*ms, 30*ms), 1e-12)
	require.True(t, math.IsNaN(r.QuotaUsed(40*ms, time.Second)))
}
