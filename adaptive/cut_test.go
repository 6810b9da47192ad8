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
// the next waiter. A drop of a request sent together with the first
// takes one more: each is one slot of the excess.
func TestDropCutsTheCeilingAtOnce(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 100})
	l.SetCeiling(10)
	leases := acquireN(t, l, 10)
	clk.Advance(time.Millisecond)
	leases[0].Drop()
	require.Equal(t, 9, l.Limit(), "the first refusal of an overload: one slot fewer")
	leases[1].Drop()
	require.Equal(t, 8, l.Limit(), "a refusal of a request admitted before the backoff: one more")
	_, ok := l.TryAcquire()
	require.False(t, ok, "8 in flight under a limit of 8")
	for _, le := range leases[2:] {
		le.Release()
	}
}

// TestDropTakesTheLimitToTheInflight: under a ceiling that binds the
// limit, a refusal that comes while PaceGrowth holds the in-flight below
// it with all the paced room in use — a climb to a share that rose — ends
// the climb: the limit comes down to what was in flight when the drop is
// reported, the refused request included (by weight), and then loses the
// drop's slot, since each slot more of the climb would be refused too.
// The climb is then over, so drops while the node drains cut one slot
// each. A drop observed early (ObserveDrop) counts its request, still in
// flight. A node that leaves paced room unused for want of demand, whose
// pacing lapsed, whose estimate binds the limit, or whose refused request
// ran alone above the paced room keeps its unused slots.
func TestDropTakesTheLimitToTheInflight(t *testing.T) {
	t.Parallel()
	// climb returns a limiter whose share rose from 10 to share with 10 in
	// flight, rttNoload 10ms and a clean release just now: the pacing
	// lets the in-flight reach half the share at once, no more.
	climb := func(t *testing.T, share int) (*Limiter, *fakeClock, []Lease) {
		l, clk := newPacedLimiter(t, Config{InitialLimit: 1000})
		l.SetCeiling(10)
		leases := acquireN(t, l, 10)
		l.SetCeiling(share)
		return l, clk, leases
	}
	// full is climb to 100 with all the paced room, 50, in use.
	full := func(t *testing.T) (*Limiter, *fakeClock, []Lease) {
		l, clk, leases := climb(t, 100)
		return l, clk, append(leases, acquireN(t, l, 40)...)
	}
	t.Run("climbing", func(t *testing.T) {
		t.Parallel()
		l, clk, leases := full(t)
		_, ok := l.TryAcquire()
		require.False(t, ok, "the climb is paced")
		clk.Advance(time.Millisecond)
		leases[0].Drop()
		require.Equal(t, 49, l.Limit(), "50 in flight at the refusal, less its slot")
		leases[1].Drop()
		require.Equal(t, 48, l.Limit(), "the climb has ended: one slot")
		clk.Advance(time.Millisecond)
		releaseAll(leases[2:12]) // 38 in flight
		leases = append(leases[12:], acquireN(t, l, 10)...)
		_, ok = l.TryAcquire()
		require.False(t, ok, "what is left of the limit refills at once, no more")
		leases[0].Drop()
		require.Equal(t, 47, l.Limit(), "a drop while it drains: one slot")
		releaseAll(leases[1:])
	})
	t.Run("share raised within the burst", func(t *testing.T) {
		t.Parallel()
		l, clk, leases := full(t)
		clk.Advance(time.Millisecond)
		leases[0].Drop()
		require.Equal(t, 49, l.Limit())
		l.SetCeiling(150) // the next share, before the rest of the burst
		require.Equal(t, 49, l.Limit(), "refused at 50 in flight: a higher share leaves the room where it is")
		leases[1].Drop()
		require.Equal(t, 48, l.Limit(), "sent before the backoff: one slot")
		releaseAll(leases[2:])
	})
	t.Run("odd share", func(t *testing.T) {
		t.Parallel()
		l, clk, leases := climb(t, 99)
		leases = append(leases, acquireN(t, l, 39)...) // 49, half of 99
		clk.Advance(time.Millisecond)
		leases[0].Drop()
		require.Equal(t, 48, l.Limit())
		releaseAll(leases[1:])
	})
	t.Run("observed early", func(t *testing.T) {
		t.Parallel()
		l, clk, leases := full(t)
		clk.Advance(time.Millisecond)
		leases[0].ObserveDrop()
		require.Equal(t, 49, l.Limit(), "50 in flight, the refused one among them, less its slot")
		leases[0].Drop()
		require.Equal(t, 49, l.Limit(), "its drop was counted")
		releaseAll(leases[1:])
	})
	t.Run("weighted", func(t *testing.T) {
		t.Parallel()
		l, clk, leases := climb(t, 100)
		var heavy []Lease
		for range 13 { // 10 + 39 in flight: no room for 3 more under 50
			le, err := l.TryAcquireRequest(Request{Weight: 3})
			require.NoError(t, err)
			heavy = append(heavy, le)
		}
		_, err := l.TryAcquireRequest(Request{Weight: 3})
		require.ErrorIs(t, err, ErrWouldWait)
		clk.Advance(time.Millisecond)
		heavy[0].Drop()
		require.Equal(t, 48, l.Limit(), "49 in flight at the refusal, less one slot")
		releaseAll(append(leases, heavy[1:]...))
	})
	t.Run("short of demand", func(t *testing.T) {
		t.Parallel()
		l, clk, leases := climb(t, 100)
		clk.Advance(time.Millisecond)
		releaseAll(leases[3:]) // 3 in flight: the paced room is not in use
		leases[0].Drop()
		require.Equal(t, 99, l.Limit(), "room left unused: one slot")
		releaseAll(leases[1:3])
	})
	t.Run("between the paced count and half the share", func(t *testing.T) {
		t.Parallel()
		l, clk, leases := climb(t, 100)
		leases = append(leases, acquireN(t, l, 20)...) // 30: room up to 50
		clk.Advance(time.Millisecond)
		leases[0].Drop()
		require.Equal(t, 99, l.Limit(), "room left unused: one slot")
		releaseAll(leases[1:])
	})
	t.Run("alone above the room", func(t *testing.T) {
		t.Parallel()
		l, clk, leases := climb(t, 100)
		clk.Advance(10 * time.Millisecond)
		releaseAll(leases) // the pacing stays active
		l.SetCeiling(10)
		l.SetCeiling(100)
		heavy, err := l.TryAcquireRequest(Request{Weight: 60})
		require.NoError(t, err, "nothing in flight: the whole share")
		clk.Advance(time.Millisecond)
		heavy.Drop()
		require.Equal(t, 99, l.Limit(), "admitted alone, not climbing: one slot")
	})
	t.Run("pacing lapsed", func(t *testing.T) {
		t.Parallel()
		l, clk, leases := full(t)
		clk.Advance(20 * time.Millisecond) // no clean release for rttNoload
		leases[0].Drop()
		require.Equal(t, 99, l.Limit(), "no clock to pace by: one slot")
		releaseAll(leases[1:])
	})
	t.Run("estimate binds", func(t *testing.T) {
		t.Parallel()
		l, clk := newPacedLimiter(t, Config{InitialLimit: 1000})
		l.SetCeiling(1000)
		l.SetEstimate(50)
		leases := acquireN(t, l, 50)
		l.SetEstimate(60)
		clk.Advance(time.Millisecond)
		leases[0].Drop()
		require.Equal(t, 1, l.cut, "the ceiling does not bind: one slot")
		releaseAll(leases[1:])
	})
}

// TestAnsweredDropCutsTwo: a drop of a request admitted after the last
// backoff and refused less than rttNoload after it — sent after the cut
// into the same overload — takes two slots and does not back off again;
// one of a request admitted before the backoff takes one (it was sent
// with the request that caused it), and one rttNoload or more after the
// backoff takes one and backs off again.
func TestAnsweredDropCutsTwo(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 100})
	l.SetCeiling(50)
	le, _ := l.TryAcquire()
	clk.Advance(10 * time.Millisecond)
	le.Release() // rttNoload 10ms
	le, _ = l.TryAcquire()
	sentWith, _ := l.TryAcquire()
	le.Drop()
	require.Equal(t, 49, l.Limit())
	est := l.Snapshot().Estimate
	clk.Advance(5 * time.Millisecond)
	le, _ = l.TryAcquire() // admitted after the backoff, but within rttNoload of it
	le.Drop()
	require.Equal(t, 47, l.Limit(), "answered by time: two slots")
	require.Equal(t, est, l.Snapshot().Estimate, "and no second backoff")
	sentWith.Drop()
	require.Equal(t, 46, l.Limit(), "admitted before the backoff: one slot")
	require.Equal(t, est, l.Snapshot().Estimate, "and no second backoff")
	clk.Advance(5 * time.Millisecond)
	le, _ = l.TryAcquire()
	le.Drop()
	require.Equal(t, 45, l.Limit(), "rttNoload after the backoff: a new overload, one slot")
	require.Less(t, l.Snapshot().Estimate, est, "and a backoff")
}

// TestCutSlotsComeBack: one slot returns after cutRecovery round trips
// without a drop; each time what was given back holds (cutRecovery round
// trips without a drop), the next give-back returns twice as many, so a burst of refusals that
// cut most of a share is undone in a few waits, not one slot per wait.
// A drop starts the give-back at one slot again.
func TestCutSlotsComeBack(t *testing.T) {
	t.Parallel()
	d, l := newBurstCutDriver(t)
	clk := d.clk
	for i, want := range []int{38, 40, 44, 52, 68, 100} {
		before := l.Limit()
		d.clean(cutRecovery - 1)
		require.Equal(t, before, l.Limit(), "nothing before the wait ends")
		d.clean(1)
		require.Equal(t, want, l.Limit(), "after %d clean round trips", (i+1)*cutRecovery)
	}

	d.clean(cutRecovery) // the last give-back held too
	clk.Advance(time.Second)
	d.drop(1)
	clk.Advance(time.Second)
	d.drop(1)
	require.Equal(t, 98, l.Limit())
	d.clean(cutRecovery)
	require.Equal(t, 99, l.Limit(), "a drop starts the give-back at one slot again")
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
	require.Equal(t, 5, l.Limit(), "a higher share after a refusal comes back by give-backs")
	l.SetCeiling(0)
	l.SetCeiling(9)
	require.Equal(t, 9, l.Limit(), "a share after a ceiling of 0 is the node's at once")
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

// TestAIMDSlowStart: with AIMDProbe set, until the first drop the
// estimate grows by half on every round trip whose load reached the
// estimate it grew from, and not at all on one that did not; a drop ends
// it, a warm start does not.
func TestAIMDSlowStart(t *testing.T) {
	t.Parallel()
	cfg := Config{Law: AIMD, InitialLimit: 8, MaxLimit: 100000, AIMDIncrease: 1, AIMDProbe: 2, UtilizationThreshold: 1e-5}
	full := func(l *Limiter, clk interface{ Advance(time.Duration) }) {
		leases := acquireN(t, l, l.Limit())
		clk.Advance(time.Millisecond)
		for _, le := range leases {
			le.Release()
		}
	}
	l, clk := newTestLimiter(t, cfg)
	for _, want := range []float64{12, 18, 27, 40.5} {
		full(l, clk)
		require.InDelta(t, want, l.Estimate(), 1e-9)
	}
	le, _ := l.TryAcquire()
	clk.Advance(time.Millisecond)
	le.Release()
	require.InDelta(t, 40.5, l.Estimate(), 1e-9, "one request in flight of 40 proves nothing")

	le, _ = l.TryAcquire()
	clk.Advance(time.Millisecond)
	le.Drop()
	after := l.Estimate()
	full(l, clk)
	require.InDelta(t, after+after*(1-0.9)/2, l.Estimate(), 1e-9, "after a drop the probe's step (estimate·(1 − BackoffRatio)/AIMDProbe), not half the estimate")

	part, clk := newTestLimiter(t, cfg)
	part.SetEstimate(30)
	leases := acquireN(t, part, 19)
	clk.Advance(time.Millisecond)
	for _, le := range leases {
		le.Release()
	}
	require.InDelta(t, 30, part.Estimate(), 1e-9, "19 of 30 is under two thirds")
	leases = acquireN(t, part, 20)
	clk.Advance(time.Millisecond)
	for _, le := range leases {
		le.Release()
	}
	require.InDelta(t, 45, part.Estimate(), 1e-9, "20 of 30 is the estimate it grew from")

	slow := cfg
	slow.LatencyTarget = 10 * time.Millisecond
	ls, clk := newTestLimiter(t, slow)
	le, _ = ls.TryAcquire()
	clk.Advance(20 * time.Millisecond)
	le.Release()
	require.InDelta(t, 8*0.9, ls.Estimate(), 1e-9, "a slow sample backs off")
	full(ls, clk)
	require.InDelta(t, 8*0.9+1, ls.Estimate(), 1e-9, "and ends the slow start as a drop does")

	warm, clk := newTestLimiter(t, cfg)
	warm.SetEstimate(30)
	full(warm, clk)
	require.InDelta(t, 45, warm.Estimate(), 1e-9, "a warm start slow-starts from where it was put")
}

// TestAIMDProbeDoubles: after a drop the step starts at the larger of
// AIMDIncrease and estimate·(1 − BackoffRatio)/AIMDProbe, doubles every
// two clean round trips (probeDoubling, not AIMDProbe's 5), and is capped
// at a quarter of the estimate.
func TestAIMDProbeDoubles(t *testing.T) {
	t.Parallel()
	cfg := Config{Law: AIMD, InitialLimit: 15, MaxLimit: 100000, AIMDIncrease: 1, AIMDProbe: 5, UtilizationThreshold: 1e-5}
	l, clk := newTestLimiter(t, cfg)
	round := func() float64 {
		before := l.Estimate()
		le, _ := l.TryAcquire()
		clk.Advance(time.Millisecond)
		le.Release()
		return l.Estimate() - before
	}
	drop := func() {
		le, _ := l.TryAcquire()
		clk.Advance(time.Millisecond)
		le.Drop()
	}
	l.SetEstimate(15)
	drop()
	require.InDelta(t, 13.5, l.Estimate(), 1e-9)
	steps := []float64{round(), round(), round(), round(), round()}
	require.Equal(t, []float64{1, 1, 2, 2, 4}, steps, "a small estimate: AIMDIncrease, doubling every two round trips")

	for range 30 {
		round()
	}
	d := round()
	require.InDelta(t, 0.25, d/(l.Estimate()-d), 1e-9, "at most a quarter of the estimate per round trip")

	// At a large estimate the step scales with it: AIMDProbe round trips
	// at the start would win back one backoff.
	l.SetEstimate(1000)
	drop()
	require.InDelta(t, 900, l.Estimate(), 1e-9)
	require.InDelta(t, 18, round(), 1e-9)    // 900·0.1/5
	require.InDelta(t, 18.36, round(), 1e-9) // 918·0.1/5
	require.InDelta(t, 37.4544, round(), 1e-9, "doubled after two round trips")
}

// TestAIMDProbeFindsAGrownCapacity: under FlatLatency's law a 5 % backoff
// is won back in 4 round trips (steps of 1, 1, 2 and 2 %), and with no
// drop since, the step keeps doubling every two round trips up to a
// quarter of the estimate: a capacity twice the last one refused is
// reached in 11 round trips, not the 16 of a step doubling every
// AIMDProbe round trips.
func TestAIMDProbeFindsAGrownCapacity(t *testing.T) {
	t.Parallel()
	cfg := FlatLatency()
	cfg.InitialLimit, cfg.MaxLimit, cfg.PaceGrowth = 1000, 100000, false
	l, clk := newTestLimiter(t, cfg)
	le, _ := l.TryAcquire()
	clk.Advance(time.Millisecond)
	le.Drop()
	require.InDelta(t, 950, l.Estimate(), 1e-9, "backed off from 1000")

	var got []float64
	rounds := 0
	for l.Estimate() < 2000 {
		before := l.Estimate()
		// The load that keeps the utilization guard (80 %) open.
		leases := acquireN(t, l, int(0.8*before)+1)
		clk.Advance(time.Millisecond)
		releaseAll(leases)
		got = append(got, (l.Estimate()-before)/before)
		if rounds++; rounds == 4 {
			require.Greater(t, l.Estimate(), 1000.0, "the backoff won back in 4 round trips")
		}
	}
	want := []float64{0.01, 0.01, 0.02, 0.02, 0.04, 0.04, 0.08, 0.08, 0.16, 0.16, 0.25}
	require.InDeltaSlice(t, want, got, 1e-9)
}

// TestFleetLimitBoundsBackoff: under a fleet limit, a drop's backoff takes
// the estimate down to the fleet limit less the slots cut, but not below
// half of what the ratio leaves; without a fleet limit or a cut, the
// ratio alone.
func TestFleetLimitBoundsBackoff(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		estimate    float64
		fleet       int
		ceiling     bool
		want        float64
		explanation string
	}{
		{"bound", 60, 40, true, 39, "0.9·60 = 54 > 40 − 1 cut = 39"},
		{"floor", 100, 40, true, 45, "0.9·100 = 90; 39 is below half of it"},
		{"ratio below the bound", 40, 100, true, 36, "0.9·40 = 36 < 99"},
		{"no fleet limit", 60, 0, true, 54, "the ratio alone"},
		{"no ceiling, no cut", 60, 40, false, 54, "a lone limiter cuts nothing"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, clk := newTestLimiter(t, Config{InitialLimit: 1000})
			l.SetEstimate(c.estimate)
			if c.ceiling {
				l.SetCeiling(10)
			}
			l.SetFleetLimit(c.fleet)
			le, _ := l.TryAcquire()
			clk.Advance(time.Millisecond)
			le.Drop()
			require.InDelta(t, c.want, l.Estimate(), 1e-9, c.explanation)
		})
	}
}

// TestCutWaitDoublesOnRehit: a slot given back and refused again before
// it held makes the next wait twice as long, up to maxCutWait; more drops
// of the same burst keep it; a slot that held, a lower ceiling (which
// absorbs the cut) and ClearCeiling start it again at cutRecovery.
func TestCutWaitDoublesOnRehit(t *testing.T) {
	t.Parallel()
	d, l := newCutDriver(t)
	clean, drop := d.clean, func() { d.drop(1) }
	// backAfter drops once, then counts the clean round trips until the
	// slot comes back.
	backAfter := func() int {
		drop()
		limit := l.Limit()
		for n := 1; n <= 2*maxCutWait; n++ {
			clean(1)
			if l.Limit() > limit {
				return n
			}
		}
		return -1
	}
	require.Equal(t, cutRecovery, backAfter())
	require.Equal(t, 2*cutRecovery, backAfter(), "refused again at once: twice the wait")
	drop()
	drop() // a second drop of the same burst keeps the doubling
	require.Equal(t, 4*cutRecovery, l.cutWait)
	d.clk.Advance(time.Millisecond) // what follows is a new overload, not this one

	l.ClearCeiling()
	l.SetCeiling(10)
	require.Equal(t, cutRecovery, backAfter(), "a new ceiling after ClearCeiling starts afresh")
	for range 5 {
		backAfter()
	}
	require.Equal(t, maxCutWait, backAfter(), "at most maxCutWait")

	clean(cutRecovery) // the slot given back held
	require.Equal(t, cutRecovery, backAfter(), "a calm stretch starts the wait again")

	require.Equal(t, 2*cutRecovery, backAfter())
	drop()
	l.SetCeiling(9) // absorbs the cut and starts the wait again
	require.Equal(t, cutRecovery, backAfter(), "a lower share started the wait again")
}

// cutDriver drives l, under a ceiling, one round trip at a time.
type cutDriver struct {
	t   *testing.T
	l   *Limiter
	clk interface{ Advance(time.Duration) }
}

// newCutDriver returns a driver of a limiter whose estimate, 100, stands
// above its ceiling, 10, and that limiter.
func newCutDriver(t *testing.T) (cutDriver, *Limiter) {
	l, clk := newTestLimiter(t, Config{InitialLimit: 100})
	l.SetCeiling(10)
	return cutDriver{t, l, clk}, l
}

// newBurstCutDriver returns a driver of a limiter under a ceiling of 100
// whose 63 requests in flight together were refused: a cut of 63.
func newBurstCutDriver(t *testing.T) (cutDriver, *Limiter) {
	l, clk := newTestLimiter(t, Config{InitialLimit: 1000})
	l.SetCeiling(100)
	clk.Advance(time.Millisecond)
	for _, le := range acquireN(t, l, 63) {
		le.Drop()
	}
	require.Equal(t, 37, l.Limit(), "a cut of 63")
	return cutDriver{t, l, clk}, l
}

// clean runs n round trips without a drop.
func (d cutDriver) clean(n int) {
	for range n {
		le, ok := d.l.TryAcquire()
		require.True(d.t, ok)
		d.clk.Advance(time.Millisecond)
		le.Release()
	}
}

// drop refuses n requests.
func (d cutDriver) drop(n int) {
	for range n {
		le, ok := d.l.TryAcquire()
		require.True(d.t, ok)
		le.Drop()
	}
}

// TestCutWaitRestartsOnceASlotHolds: after a doubled wait, a slot given
// back to the cut at which one was refused that holds for cutRecovery
// round trips brings the rest of the cut back at the cutRecovery pace,
// without waiting for another drop, or another doubled wait, to say so:
// an upstream whose capacity grew back gets its slots back after one
// long wait, not two.
func TestCutWaitRestartsOnceASlotHolds(t *testing.T) {
	t.Parallel()
	d, l := newCutDriver(t)
	d.drop(5)
	d.clean(cutRecovery)
	require.Equal(t, 6, l.Limit())
	d.drop(1) // the slot given back, at a cut of 4, is refused: the wait doubles
	require.Equal(t, 2*cutRecovery, l.cutWait)
	require.Equal(t, 5, l.Limit())
	d.clean(2 * cutRecovery)
	require.Equal(t, 6, l.Limit(), "one slot back after the doubled wait, to the cut refused")
	d.clean(cutRecovery - 1)
	require.Equal(t, 6, l.Limit(), "not held yet")
	d.clean(1)
	require.Equal(t, 8, l.Limit(), "it held for cutRecovery round trips: two slots back")
	require.Equal(t, cutRecovery, l.cutWait)
	d.clean(cutRecovery)
	require.Equal(t, 10, l.Limit(), "so the last two come back after cutRecovery, not another doubled wait")
}

// TestCutWaitKeepsGrowingAboveTheRefusedCut: a slot that holds above the
// cut at which one was refused proves nothing new, so it does not start
// the wait again. Without that rule a refusal that costs two drops would
// take the wait back and forth between cutRecovery and twice it, and a
// fleet limit that stays too high would be refused every few waits
// instead of ever more rarely.
func TestCutWaitKeepsGrowingAboveTheRefusedCut(t *testing.T) {
	t.Parallel()
	d, l := newCutDriver(t)
	d.drop(1)
	d.clean(cutRecovery)
	require.Equal(t, 10, l.Limit())
	wait := cutRecovery
	for range 3 {
		d.drop(2) // the give-back, to a cut of 0, is refused twice: 1 + 2 slots
		wait = min(2*wait, maxCutWait)
		require.Equal(t, wait, l.cutWait)
		require.Equal(t, 7, l.Limit())
		d.clean(wait)
		require.Equal(t, 8, l.Limit(), "one slot back after the wait")
		d.clean(cutRecovery) // holds at a cut of 2: back to just above the refused 0
		require.Equal(t, 9, l.Limit())
		d.clean(cutRecovery) // and then the refused cut itself, one slot
		require.Equal(t, 10, l.Limit())
	}
	require.Equal(t, 8*cutRecovery, l.cutWait, "the wait doubled on every refusal")
}

// TestLateRefusalCountsAgainstItsGiveBack: a give-back holds only once
// as many round trips have passed as the last refusal of a request sent
// while slots were coming back took to come back after its admission. A
// request that hangs while others come and go,
// and is refused later (a timeout, a 503 after a queue), thus refuses
// the give-back it went out with once the first such refusal has shown
// how late they come: the wait grows again instead of starting at
// cutRecovery after every give-back, which would be judged to have held
// before its refusal could come.
func TestLateRefusalCountsAgainstItsGiveBack(t *testing.T) {
	t.Parallel()
	d, l := newCutDriver(t)
	d.drop(1)
	for l.cutWait < maxCutWait { // give-backs refused at once: the wait grows
		d.clean(l.cutWait)
		d.drop(1)
	}
	require.Equal(t, cutRecovery, l.holdRounds())
	const hang = 12
	// late gives a slot back, sends a request in it that hangs for hang
	// round trips and is refused, and returns the round trips the slot
	// took to come back.
	late := func() int {
		limit := l.Limit()
		n := 0
		for l.Limit() == limit {
			d.clean(1)
			n++
		}
		require.Equal(t, limit+1, l.Limit(), "one slot back")
		le, ok := l.TryAcquire()
		require.True(t, ok)
		d.clean(hang)
		le.Drop()
		require.Equal(t, hang+1, l.holdRounds(), "the hold outlasts the refusal's lag")
		return n
	}
	require.Equal(t, maxCutWait, late())
	require.Equal(t, 2*cutRecovery, l.cutWait,
		"the first late refusal came after the give-back held at cutRecovery, which started the wait again")
	for _, want := range []int{2 * cutRecovery, 4 * cutRecovery, 8 * cutRecovery, maxCutWait, maxCutWait} {
		require.Equal(t, want, late(), "the give-back came after the wait")
		require.Equal(t, min(2*want, maxCutWait), l.cutWait, "refused before it held: the wait doubles")
	}

	// A give-back's request refused more than maxCutWait round trips
	// after it was sent, but less than maxCutWait after the last slot
	// came back, holds the next give-backs for maxCutWait round trips,
	// no more.
	d.clean(maxCutWait)
	le, ok := l.TryAcquire()
	require.True(t, ok)
	d.clean(maxCutWait + 6)
	le.Drop()
	require.Equal(t, maxCutWait, l.holdRounds())
	// One refused at once brings the hold back to cutRecovery.
	d.clean(maxCutWait)
	d.drop(1)
	require.Equal(t, cutRecovery, l.holdRounds())
}

// TestStaleDropLeavesTheHold: a request that hung for 200 round trips
// and timed out at the start or the end of a burst of 429s — sent before
// any give-back, after the last cut came back, or while a slot was
// coming back but refused long after it came back — or one sent long
// before a give-back that held says nothing of how late a give-back's
// refusal comes: the hold stays at cutRecovery, the cut comes back at
// the usual pace, and a give-back that held is not blamed.
func TestStaleDropLeavesTheHold(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name        string
		earlierCut  bool // a cut that came back before the stale request was sent
		whileBack   bool // … and the stale request was sent while it came back
		staleIsLast bool
	}{
		{"at the end of a burst", false, false, true},
		{"at the start of a burst", false, false, false},
		{"after the last cut came back, at the start of a burst", true, false, false},
		{"after the last cut came back, at the end of a burst", true, false, true},
		{"sent while the last cut came back", true, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			l, clk := newTestLimiter(t, Config{InitialLimit: 1000})
			l.SetCeiling(100)
			d := cutDriver{t, l, clk}
			if c.earlierCut {
				d.drop(1)
				d.clean(cutRecovery)
				require.Equal(t, 100, l.Limit(), "the earlier cut came back")
			}
			if !c.whileBack {
				d.clean(cutRecovery) // and held
			}
			stale, ok := l.TryAcquire()
			require.True(t, ok)
			d.clean(200)
			clk.Advance(time.Millisecond)
			burst := acquireN(t, l, 32)
			if !c.staleIsLast {
				stale.Drop()
			}
			for _, le := range burst {
				le.Drop()
			}
			if c.staleIsLast {
				stale.Drop()
			}
			require.Equal(t, cutRecovery, l.holdRounds())
			n := 0
			for l.Limit() < 100 && n < 10*maxCutWait {
				d.clean(1)
				n++
			}
			require.Equal(t, 100, l.Limit())
			require.LessOrEqual(t, n, 8*cutRecovery, "give-backs held for maxCutWait would take about 6·maxCutWait")
		})
	}
	t.Run("sent just after the drop that ended the give-backs", func(t *testing.T) {
		t.Parallel()
		l, clk := newTestLimiter(t, Config{InitialLimit: 1000})
		l.SetCeiling(100)
		d := cutDriver{t, l, clk}
		d.drop(1)
		d.clean(cutRecovery) // a slot comes back
		clk.Advance(time.Millisecond)
		d.drop(1)                   // and is refused
		stale, ok := l.TryAcquire() // in the same round trip
		require.True(t, ok)
		l.SetCeiling(99) // a lower share absorbs the cut
		d.clean(200)
		clk.Advance(time.Millisecond)
		burst := acquireN(t, l, 32)
		stale.Drop()
		for _, le := range burst {
			le.Drop()
		}
		require.Equal(t, cutRecovery, l.holdRounds())
	})
	t.Run("after a give-back held", func(t *testing.T) {
		t.Parallel()
		d, l := newCutDriver(t)
		stale, ok := l.TryAcquire()
		require.True(t, ok)
		d.clean(100)
		d.drop(1)
		d.clean(cutRecovery) // the slot comes back
		d.clean(2 * cutRecovery)
		require.Equal(t, 10, l.Limit(), "and held")
		stale.Drop()
		require.Equal(t, cutRecovery, l.holdRounds())
		require.Equal(t, cutRecovery, l.cutWait, "a new overload, not the give-back's refusal")
		require.Equal(t, -1, l.cutHit)
	})
}

// TestLagSlowsOnlyTheNextRecovery: a request sent in the slot that came
// back last, refused 40 round trips later together with a burst of 429s,
// holds the give-backs of the recovery that follows for 41 round trips
// each; once that recovery has ended (the last slot back and held), the
// lag is forgotten and the next burst's cut comes back at the usual pace.
func TestLagSlowsOnlyTheNextRecovery(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 1000})
	l.SetCeiling(100)
	d := cutDriver{t, l, clk}
	// recovery counts the clean round trips until the cut is gone.
	recovery := func() int {
		n := 0
		for l.Limit() < 100 && n < 100*maxCutWait {
			d.clean(1)
			n++
		}
		require.Equal(t, 100, l.Limit())
		return n
	}
	burst := func(first *Lease) {
		clk.Advance(time.Millisecond)
		les := acquireN(t, l, 32)
		if first != nil {
			first.Drop()
		}
		for _, le := range les {
			le.Drop()
		}
	}
	d.drop(1)
	d.clean(cutRecovery) // the slot comes back
	hung, ok := l.TryAcquire()
	require.True(t, ok)
	d.clean(40)
	burst(&hung)
	require.Equal(t, 41, l.holdRounds())
	require.Greater(t, recovery(), 4*41, "the recovery after the late refusal waits for it")
	d.clean(40)
	require.Equal(t, 41, l.holdRounds(), "until the last slot has held")
	d.clean(1)
	require.Equal(t, cutRecovery, l.holdRounds(), "and then forgets it")
	d.clean(100)
	burst(nil)
	require.LessOrEqual(t, recovery(), 8*cutRecovery, "the next recovery comes at the usual pace")

	// A share that dips before the last give-back holds, or a cleared
	// ceiling, leaves no cut: that recovery is over too.
	for _, dip := range []func(){
		func() { l.SetCeiling(99); l.SetCeiling(100) },
		func() { l.ClearCeiling(); l.SetCeiling(100) },
	} {
		d.clean(100) // the last recovery has ended
		d.drop(1)
		d.clean(cutRecovery)
		hung, ok := l.TryAcquire()
		require.True(t, ok)
		d.clean(40)
		burst(&hung)
		require.Equal(t, 41, l.holdRounds())
		recovery()
		dip()
		require.Equal(t, cutRecovery, l.holdRounds())
	}
}

// TestDropThatShortensTheHold: under a hold of 13 learned from a late
// refusal, a request sent after a give-back and refused at once 8 round
// trips later says refusals come at once again: the give-back, 8 round
// trips old, had held by that measure, so the drop is a new overload
// and the wait starts at cutRecovery again instead of doubling.
func TestDropThatShortensTheHold(t *testing.T) {
	t.Parallel()
	d, l := newCutDriver(t)
	d.drop(1)
	d.clean(cutRecovery)
	h, ok := l.TryAcquire() // sent in the slot given back
	require.True(t, ok)
	d.clean(12)
	h.Drop()
	require.Equal(t, 13, l.holdRounds())
	require.Equal(t, 2*cutRecovery, l.cutWait)
	d.clean(l.cutWait) // a slot back, to the cut refused
	d.clean(8)
	d.drop(1)
	require.Equal(t, cutRecovery, l.holdRounds())
	require.Equal(t, cutRecovery, l.cutWait)
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

	// A two-slot cut stops at ceiling−1 too: a ceiling of 3, one slot
	// for the first refusal, one (not two) for a request sent after it
	// and refused less than rttNoload (1ms) after its backoff.
	l.SetCeiling(3)
	clk.Advance(time.Second)
	le, ok := l.TryAcquire()
	require.True(t, ok)
	le.Drop()
	require.Equal(t, 2, l.Limit())
	le, ok = l.TryAcquire()
	require.True(t, ok)
	le.Drop()
	require.Equal(t, 1, l.Limit(), "a drop answered by time takes two, but never the last slot")
	require.Equal(t, 2, l.cut, "cut 2 of a ceiling of 3")
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

// TestCutOfAShareThatStaysTooHigh: a share that stays 40 slots above what
// the upstream serves this node (it serves 60 and refuses the rest at
// once) costs about one refusal per maxCutWait round trips once the wait
// has grown, and keeps the node's in-flight at what is served. A
// give-back that grew while it held must not overshoot the cut at which
// one was last refused: the refusals of an overshoot of s slots cut it
// again, and give-backs of 1, 2 … s/2 then return it, and the same
// overshoot, within a few waits.
func TestCutOfAShareThatStaysTooHigh(t *testing.T) {
	t.Parallel()
	const served = 60
	l, clk := newTestLimiter(t, Config{InitialLimit: 1000})
	l.SetCeiling(100)
	drops, inflight := 0, 0
	for r := range 2024 {
		l.SetEstimate(1000) // the cut alone bounds the limit
		n := l.Limit()
		leases := acquireN(t, l, n)
		for _, le := range leases[min(served, n):] {
			le.Drop()
		}
		clk.Advance(time.Millisecond)
		for _, le := range leases[:min(served, n)] {
			le.Release()
		}
		if r >= 1000 {
			drops += max(n-served, 0)
			inflight += min(n, served)
		}
	}
	const rounds = 1024
	require.LessOrEqual(t, drops, rounds/maxCutWait+1, "refusals over the last %d round trips", rounds)
	require.GreaterOrEqual(t, float64(inflight)/rounds, served-1.0, "mean in flight and served")
}

// TestLowerCeilingRestartsTheGiveBack: a lower share starts the give-back
// at one slot again, as a drop does.
func TestLowerCeilingRestartsTheGiveBack(t *testing.T) {
	t.Parallel()
	d, l := newBurstCutDriver(t)
	d.clean(3 * cutRecovery) // give-backs of 1, 2 and 4
	require.Equal(t, 44, l.Limit())
	l.SetCeiling(90) // absorbs 10 of the cut of 56
	require.Equal(t, 44, l.Limit())
	d.clean(cutRecovery)
	require.Equal(t, 45, l.Limit(), "one slot, not the 8 the give-back had grown to")
}
