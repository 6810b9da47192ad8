package adaptive

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// newPacedLimiter returns a limiter with PaceGrowth on and one clean round
// trip of 10ms behind it, so that it paces: releases keep the clock as
// long as the tests advance it by less than 10ms between them.
func newPacedLimiter(t *testing.T, cfg Config) (*Limiter, *fakeClock) {
	t.Helper()
	cfg.PaceGrowth = true
	l, clk := newTestLimiter(t, cfg)
	le, ok := l.TryAcquire()
	require.True(t, ok)
	clk.Advance(10 * time.Millisecond)
	le.Release()
	return l, clk
}

// TestPaceGrowthTakesARaisedLimitAsLeasesSettle: with PaceGrowth, a share
// raised from 10 to 20 is taken up two admissions per clean release —
// the slot it frees and one more — not in one burst of ten.
func TestPaceGrowthTakesARaisedLimitAsLeasesSettle(t *testing.T) {
	t.Parallel()
	l, clk := newPacedLimiter(t, Config{InitialLimit: 100})
	l.SetCeiling(10)
	leases := acquireN(t, l, 10)
	l.SetCeiling(20)
	require.Equal(t, 20, l.Limit(), "the limit itself rises at once")
	_, ok := l.TryAcquire()
	require.False(t, ok, "no release yet: the raise waits for one")
	for inflight := 10; inflight < 20; inflight++ {
		clk.Advance(time.Millisecond)
		leases[0].Release()
		leases = leases[1:]
		leases = append(leases, acquireN(t, l, 2)...)
		_, ok := l.TryAcquire()
		require.False(t, ok, "after %d releases, %d in flight is as high as they allow", inflight-9, inflight+1)
	}
	require.Len(t, leases, 20)
	releaseAll(leases)
}

// TestWithoutPaceGrowthARaiseIsAdmittedAtOnce is the control: the whole
// raise goes out at once.
func TestWithoutPaceGrowthARaiseIsAdmittedAtOnce(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{InitialLimit: 100})
	l.SetCeiling(10)
	leases := acquireN(t, l, 10)
	l.SetCeiling(20)
	leases = append(leases, acquireN(t, l, 10)...)
	releaseAll(leases)
}

// TestPaceGrowthAdmitsHalfTheLimitAtOnce: however low the paced level
// fell — a share of 1 — half of a new limit goes out at once.
func TestPaceGrowthAdmitsHalfTheLimitAtOnce(t *testing.T) {
	t.Parallel()
	l, _ := newPacedLimiter(t, Config{InitialLimit: 100})
	l.SetCeiling(4)
	held, ok := l.TryAcquire()
	require.True(t, ok)
	l.SetCeiling(1)
	l.SetCeiling(30)
	leases := acquireN(t, l, 14)
	_, ok = l.TryAcquire()
	require.False(t, ok, "15 in flight: half of 30, and nothing settled since the share was 1")
	releaseAll(append(leases, held))
}

// TestPaceGrowthLapsesWithoutReleases: long requests carry no clock. Once
// no lease has settled clean for a no-load round trip, the whole limit is
// admitted, so leases that hold half a raised share — streams — do not
// hold admission until one of them ends.
func TestPaceGrowthLapsesWithoutReleases(t *testing.T) {
	t.Parallel()
	l, clk := newPacedLimiter(t, Config{InitialLimit: 100})
	l.SetCeiling(5)
	streams := acquireN(t, l, 5)
	l.SetCeiling(20)
	streams = append(streams, acquireN(t, l, 5)...)
	_, ok := l.TryAcquire()
	require.False(t, ok, "half of 20 is in flight, and a release came within the no-load round trip")
	clk.Advance(10 * time.Millisecond)
	leases := acquireN(t, l, 10)
	_, ok = l.TryAcquire()
	require.False(t, ok, "the limit, 20, is in flight")
	releaseAll(append(streams, leases...))
}

// TestPaceGrowthClimbsOnFromAnUnpacedSpell: what is admitted while the
// pacing has lapsed — before the first round trip, or while only long
// requests are in flight — counts as paced, so when clean releases bring
// the pacing back each refills its slot, where the paced level of before
// the spell held admission until the in-flight fell to half the limit.
func TestPaceGrowthClimbsOnFromAnUnpacedSpell(t *testing.T) {
	t.Parallel()
	t.Run("a first grant", func(t *testing.T) {
		t.Parallel()
		l, clk := newTestLimiter(t, Config{Law: Gradient2, InitialLimit: 20, PaceGrowth: true})
		l.SetCeiling(0) // as a fleet node does before its first grant
		l.SetEstimate(100)
		l.SetCeilingUntil(100, clk.Now().Add(time.Hour))
		leases := acquireAll(l, 1000)
		require.Len(t, leases, 100, "no round trip yet: unpaced")
		releaseAll(refillEach(t, l, clk, leases, 20))
	})
	t.Run("streams", func(t *testing.T) {
		t.Parallel()
		l, clk := newPacedLimiter(t, Config{InitialLimit: 100, MaxLimit: 100})
		l.SetCeiling(10)
		leases := acquireN(t, l, 10)
		l.SetCeiling(100)
		clk.Advance(10 * time.Millisecond) // no clean release for a no-load round trip
		leases = append(leases, acquireAll(l, 1000)...)
		require.Len(t, leases, 100, "the pacing lapsed: the whole limit")
		releaseAll(refillEach(t, l, clk, leases, 20))
	})
}

// TestPaceGrowthOnlyCleanReleasesCount: a drop frees its slot but lets
// nothing more in, and an abandoned lease neither.
func TestPaceGrowthOnlyCleanReleasesCount(t *testing.T) {
	t.Parallel()
	l, clk := newPacedLimiter(t, Config{InitialLimit: 10, MinLimit: 1})
	leases := acquireN(t, l, 10)
	l.SetEstimate(20)
	clk.Advance(time.Millisecond)
	leases[0].Drop()
	leases[1].Ignore()
	require.Len(t, acquireN(t, l, 2), 2, "the two freed slots")
	_, ok := l.TryAcquire()
	require.False(t, ok, "neither a drop nor an ignored lease lets the in-flight rise")
}

// TestPacedSlowStartGrowsAtHalfTheEstimate: under PaceGrowth the slow
// start grows once the load reached half the estimate, not two thirds.
func TestPacedSlowStartGrowsAtHalfTheEstimate(t *testing.T) {
	t.Parallel()
	cfg := Config{Law: AIMD, AIMDProbe: 5, InitialLimit: 30, PaceGrowth: true}
	for _, tc := range []struct {
		load int
		want float64
	}{{14, 30}, {15, 45}} {
		l, clk := newTestLimiter(t, cfg)
		leases := acquireN(t, l, tc.load)
		clk.Advance(time.Millisecond)
		releaseAll(leases)
		require.InDelta(t, tc.want, l.Estimate(), 1e-9, "%d in flight of 30", tc.load)
	}
}

// TestPaceGrowthLeavesTheSlowStartToTheCeiling: in AIMD's slow start a
// raised ceiling — a fleet node's share — is admitted at once, since the
// share already grows only with the fleet's estimates. The pacing that
// the first drop or a cleared ceiling resumes starts from the in-flight
// the share let in: one clean release lets one more in. After the first
// drop, under another law, and without a ceiling, a raise is paced.
func TestPaceGrowthLeavesTheSlowStartToTheCeiling(t *testing.T) {
	t.Parallel()
	cfg := FlatLatency()
	cfg.InitialLimit = 100
	// raise sets a ceiling of 10, fills it, raises it to share and
	// returns the leases in flight and how many of the raise went out.
	raise := func(t *testing.T, l *Limiter, share int) ([]Lease, int) {
		t.Helper()
		l.SetCeiling(10)
		leases := acquireN(t, l, 10)
		l.SetCeiling(share)
		more := acquireAll(l, share-10)
		return append(leases, more...), len(more)
	}
	// from is a paced limiter on cfg starting at initial.
	from := func(t *testing.T, initial int) (*Limiter, *fakeClock) {
		t.Helper()
		cfg := cfg
		cfg.InitialLimit = initial
		return newPacedLimiter(t, cfg)
	}
	// afterRelease releases one lease clean and returns how many it let
	// in: its own slot and, on a paced climb, one more.
	afterRelease := func(t *testing.T, l *Limiter, clk *fakeClock, leases []Lease) int {
		t.Helper()
		clk.Advance(time.Millisecond)
		leases[0].Release()
		more := acquireAll(l, len(leases))
		releaseAll(append(leases[1:], more...))
		return len(more)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want int
		why  string
	}{
		{"slow start", cfg, 10, "the whole raise at once"},
		{"another law", Config{Law: Gradient2, AIMDProbe: 5, InitialLimit: 100}, 0, "only AIMD slow-starts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l, _ := newPacedLimiter(t, tc.cfg)
			leases, n := raise(t, l, 20)
			require.Equal(t, tc.want, n, tc.why)
			releaseAll(leases)
		})
	}
	t.Run("the first drop", func(t *testing.T) {
		t.Parallel()
		l, clk := from(t, 1000)
		leases, n := raise(t, l, 100)
		require.Equal(t, 90, n)
		clk.Advance(time.Millisecond)
		leases[0].Drop()
		require.Equal(t, 99, l.Limit(), "one slot cut")
		require.Equal(t, 1, afterRelease(t, l, clk, leases[1:]), "its slot, up to the limit")
	})
	t.Run("ceiling cleared", func(t *testing.T) {
		t.Parallel()
		l, clk := from(t, 120)
		leases, _ := raise(t, l, 100)
		l.ClearCeiling()
		require.Equal(t, 120, l.Limit())
		require.Equal(t, 2, afterRelease(t, l, clk, leases), "its slot and one more: a climb paced from the share")
	})
	t.Run("after the first drop", func(t *testing.T) {
		t.Parallel()
		l, clk := newPacedLimiter(t, cfg)
		le, ok := l.TryAcquire()
		require.True(t, ok)
		clk.Advance(time.Millisecond)
		le.Drop()
		le, ok = l.TryAcquire()
		require.True(t, ok)
		clk.Advance(time.Millisecond)
		le.Release() // a clean release within rttNoload: pacing holds
		leases, n := raise(t, l, 20)
		require.Equal(t, 0, n, "the raise waits for releases")
		releaseAll(leases)
	})
	t.Run("no ceiling", func(t *testing.T) {
		t.Parallel()
		l, _ := from(t, 10)
		leases := acquireN(t, l, 10)
		l.SetEstimate(20)
		_, ok := l.TryAcquire()
		require.False(t, ok, "a raised estimate waits for releases")
		releaseAll(leases)
	})
}

// TestPaceGrowthHoldsLeaveThePacingWhereTheyFoundIt: a hold that admits
// nothing new — a ceiling past its deadline, a fenced node's ceiling of
// 0, a share of 0 — lowers the paced level no further than the limit it
// masks, nor lets the releases during it raise that level. When it ends,
// the slots those releases freed are refilled at once, and the climb to
// a raised share goes on release by release from where the hold found
// it: not started again from nothing, and not sped up by the hold
// either.
func TestPaceGrowthHoldsLeaveThePacingWhereTheyFoundIt(t *testing.T) {
	t.Parallel()
	const during = 3 // clean releases while a hold lasts
	// climb raises a share of 10, full, to 100 — half goes out at once —
	// then releases n leases clean inside hold (nil: no hold), and
	// returns how many the end of the hold let in, then how many each of
	// 70 more clean releases let in.
	climb := func(t *testing.T, n int, hold, end func(*Limiter, *fakeClock)) []int {
		t.Helper()
		l, clk := newPacedLimiter(t, Config{InitialLimit: 100, MaxLimit: 100})
		l.SetCeiling(10)
		leases := acquireN(t, l, 10)
		l.SetCeiling(100)
		leases = append(leases, acquireAll(l, 100)...)
		require.Len(t, leases, 50, "half the raise at once")
		if hold != nil {
			hold(l, clk)
		}
		for range n {
			var in int
			leases, in = releaseOne(l, clk, leases)
			require.Zero(t, in, "nothing admitted during the hold")
		}
		if end != nil {
			end(l, clk)
		}
		more := acquireAll(l, 100)
		leases = append(leases, more...)
		got := []int{len(more)}
		for range 70 {
			var in int
			leases, in = releaseOne(l, clk, leases)
			got = append(got, in)
		}
		releaseAll(leases)
		return got
	}
	renew := func(l *Limiter, clk *fakeClock) { l.SetCeilingUntil(100, clk.Now().Add(time.Hour)) }
	want := climb(t, 0, nil, nil)
	require.Equal(t, []int{0, 1, 1}, want[:3], "without a hold: its slot per release, up to half the limit")
	require.Equal(t, []int{2, 2}, want[69:71], "then its slot and one more")
	for _, tc := range []struct {
		name      string
		hold, end func(*Limiter, *fakeClock)
	}{
		{"deadline passed", func(l *Limiter, clk *fakeClock) { l.SetCeilingUntil(100, clk.Now()) }, renew},
		{"fenced", func(l *Limiter, _ *fakeClock) { l.SetCeilingUntil(0, time.Time{}) }, renew},
		{"deadline passed, then fenced", func(l *Limiter, clk *fakeClock) {
			l.SetCeilingUntil(100, clk.Now())
			l.SetCeilingUntil(0, time.Time{})
		}, renew},
		{"share of 0", func(l *Limiter, _ *fakeClock) { l.SetCeiling(0) }, func(l *Limiter, _ *fakeClock) { l.SetCeiling(100) }},
		{"cleared after its deadline", func(l *Limiter, clk *fakeClock) { l.SetCeilingUntil(100, clk.Now()) },
			func(l *Limiter, _ *fakeClock) { l.ClearCeiling() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := climb(t, during, tc.hold, tc.end)
			require.Equal(t, during, got[0], "the slots freed during the hold, refilled at its end")
			require.Equal(t, want[1:], got[1:], "then the climb as without the hold")
		})
	}
}

// TestPaceGrowthAfterARecalibrationGivenUp: a recalibration given up at
// MaxPinned with the limit's worth of leases still in flight leaves the
// pacing where it found it: the slots freed during the pin are refilled
// and then each clean release refills its own, where the pin's MinLimit,
// taken as the paced level, held admission until the in-flight fell to
// half the limit.
func TestPaceGrowthAfterARecalibrationGivenUp(t *testing.T) {
	t.Parallel()
	l, clk, leases, n := throughAPin(t, 100)
	require.Equal(t, 100, l.Limit())
	require.Equal(t, 2, n, "the two slots freed since the pin began")
	releaseAll(refillEach(t, l, clk, leases, 10))
}

// TestPaceGrowthLeavesARecalibrationsProbesToThePin: the probes of a
// recalibration go out up to MinLimit, however low the paced level
// stood when the pin began; their releases keep the pacing's clock for
// after the pin, but do not hold the probes.
func TestPaceGrowthLeavesARecalibrationsProbesToThePin(t *testing.T) {
	t.Parallel()
	l, clk := newPacedLimiter(t, Config{
		InitialLimit:  100,
		MinLimit:      10,
		Recalibration: Recalibration{Interval: 10 * time.Second, Samples: 40, MaxPinned: 3 * time.Second},
	})
	l.SetCeiling(4)
	clk.Advance(time.Millisecond)
	releaseAll(acquireN(t, l, 4)) // paced 4, nothing in flight
	l.SetCeiling(100)
	clk.Advance(10 * time.Second)
	probes := acquireAll(l, 1000)
	require.True(t, l.Snapshot().Recalibrating)
	require.Len(t, probes, 10, "pinned at MinLimit")
	releaseAll(refillEach(t, l, clk, probes, 5))
}

// throughAPin fills a paced limiter's share of from, starts a
// recalibration (MaxPinned 3s) with a clean release, sets the shares in
// turn while the limit is pinned behind the leases in flight, and gives
// the pin up with another clean release at MaxPinned. It returns the
// leases in flight and how many that last release let in.
func throughAPin(t *testing.T, from int, shares ...int) (*Limiter, *fakeClock, []Lease, int) {
	t.Helper()
	l, clk := newPacedLimiter(t, Config{
		InitialLimit:  100,
		MinLimit:      1,
		Recalibration: Recalibration{Interval: 10 * time.Second, MaxPinned: 3 * time.Second},
	})
	l.SetCeiling(from)
	leases := acquireN(t, l, from)
	clk.Advance(10 * time.Second)
	leases, _ = releaseOne(l, clk, leases)
	require.True(t, l.Snapshot().Recalibrating, "pinned behind the leases in flight")
	for _, n := range shares {
		l.SetCeiling(n)
	}
	clk.Advance(3 * time.Second)
	leases, n := releaseOne(l, clk, leases)
	require.False(t, l.Snapshot().Recalibrating, "given up at MaxPinned")
	return l, clk, leases, n
}

// TestPaceGrowthAFullShareFencedAndGrantedAgain: the fleet's outage path
// — a full share's deadline passes, the fence sets a ceiling of 0, the
// next grant brings the share back — refills the slots freed meanwhile
// and then one per clean release, where the fence's 0, taken as the
// paced level, held admission until the in-flight fell to half the share.
func TestPaceGrowthAFullShareFencedAndGrantedAgain(t *testing.T) {
	t.Parallel()
	l, clk := newPacedLimiter(t, Config{InitialLimit: 100, MaxLimit: 100})
	l.SetCeilingUntil(100, clk.Now().Add(time.Second))
	leases := acquireN(t, l, 100)
	clk.Advance(time.Second)
	leases, n := releaseOne(l, clk, leases)
	require.Zero(t, n, "past the deadline")
	l.SetCeilingUntil(0, time.Time{})
	leases, n = releaseOne(l, clk, leases)
	require.Zero(t, n, "fenced")
	l.SetCeilingUntil(100, clk.Now().Add(time.Second))
	leases = append(leases, acquireAll(l, 100)...)
	require.Len(t, leases, 100, "the two slots freed meanwhile, refilled")
	releaseAll(refillEach(t, l, clk, leases, 10))
}

// TestPaceGrowthHoldsKeepTheLimitTheyMask: a hold lowers the paced level
// to the limit it masks, so a share lowered and raised again during a
// recalibration's pin is climbed back as leases settle, as without the
// pin; the releases during the pin keep the pacing's clock, so a share
// raised during it is climbed too, not admitted whole when it ends; and
// Auto's move to FlatLatency's law during a lapsed or fenced share
// starts the pacing where a move before the hold does, not from
// Gradient2's unpaced count of releases or the whole estimate.
func TestPaceGrowthHoldsKeepTheLimitTheyMask(t *testing.T) {
	t.Parallel()
	t.Run("a share lowered during a pin", func(t *testing.T) {
		t.Parallel()
		l, clk, leases, _ := throughAPin(t, 100, 10, 100)
		for i := range 5 {
			var n int
			leases, n = releaseOne(l, clk, leases)
			require.Zero(t, n, "clean release %d: the climb from 10 is still under the in-flight", i+1)
		}
		releaseAll(leases)
	})
	t.Run("a share raised during a pin", func(t *testing.T) {
		t.Parallel()
		l, _, leases, _ := throughAPin(t, 10, 100)
		require.LessOrEqual(t, l.Inflight(), 50, "paced: half the raise, not all of it")
		releaseAll(leases)
	})
	t.Run("Auto's move", func(t *testing.T) {
		t.Parallel()
		// moved returns how many a renewal to 100 lets in at once after
		// Auto moved during hold (nil: before any), with a share of 20.
		moved := func(t *testing.T, hold func(*Limiter, *fakeClock)) int {
			t.Helper()
			l, clk := newTestLimiter(t, Config{InitialLimit: 100})
			l.SetCeiling(20)
			flatRefusal(t, l, clk)
			flatRefusal(t, l, clk)
			sampleOne(t, l, clk, 20*time.Millisecond)
			leases := acquireAll(l, 1000)
			if hold != nil {
				hold(l, clk)
			}
			clk.Advance(time.Millisecond)
			leases[0].Drop() // the third refusal: Auto moves
			require.Equal(t, AIMD, l.Snapshot().Law)
			l.SetCeilingUntil(0, time.Time{})
			leases, n := releaseOne(l, clk, leases[1:])
			require.Zero(t, n, "fenced")
			l.SetCeilingUntil(100, clk.Now().Add(time.Hour))
			more := acquireAll(l, 1000)
			releaseAll(append(leases, more...))
			return len(more)
		}
		before := moved(t, nil)
		require.Less(t, before, 50, "paced: less than the raise at once")
		require.Equal(t, before, moved(t, func(l *Limiter, clk *fakeClock) { l.SetCeilingUntil(20, clk.Now()) }), "during a lapse")
		require.Equal(t, before, moved(t, func(l *Limiter, _ *fakeClock) { l.SetCeilingUntil(0, time.Time{}) }), "while fenced")
	})
}

// TestPaceGrowthARenewalIsNoClimbsEnd: a share renewed higher after its
// deadline passed, with a slot freed during the lapse, is not a climb
// that used all its paced room: a refusal then cuts one slot, as it does
// without the lapse, not the share down to the in-flight.
func TestPaceGrowthARenewalIsNoClimbsEnd(t *testing.T) {
	t.Parallel()
	l, clk := newPacedLimiter(t, Config{InitialLimit: 1000})
	l.SetCeilingUntil(100, clk.Now().Add(time.Second))
	leases := acquireN(t, l, 100)
	clk.Advance(time.Second)
	leases, n := releaseOne(l, clk, leases)
	require.Zero(t, n, "past the deadline")
	l.SetCeilingUntil(150, clk.Now().Add(time.Second))
	clk.Advance(time.Millisecond)
	leases[0].Drop()
	require.Equal(t, 149, l.Limit(), "one slot cut")
	releaseAll(leases[1:])
}

// refillEach releases n leases clean, one by one, and requires each to
// let its own slot in and no more — the limit being in flight — and
// returns the leases in flight.
func refillEach(t *testing.T, l *Limiter, clk *fakeClock, leases []Lease, n int) []Lease {
	t.Helper()
	for i := range n {
		var in int
		leases, in = releaseOne(l, clk, leases)
		require.Equal(t, 1, in, "clean release %d: its slot, the limit being in flight", i+1)
	}
	return leases
}

// releaseOne releases the first lease clean a millisecond on — within the
// no-load round trip of newPacedLimiter, so the pacing holds — admits what
// it lets in, and returns the leases in flight and how many it let in.
func releaseOne(l *Limiter, clk *fakeClock, leases []Lease) ([]Lease, int) {
	clk.Advance(time.Millisecond)
	leases[0].Release()
	more := acquireAll(l, 1000)
	return append(leases[1:], more...), len(more)
}

// TestPaceGrowthHandsTheRaiseToWaitersAsLeasesSettle: queued callers get
// a raised share as releases let it in — half of it at once, then one
// more per clean release once the in-flight passes half — and all of it
// in the end.
func TestPaceGrowthHandsTheRaiseToWaitersAsLeasesSettle(t *testing.T) {
	t.Parallel()
	l, clk := newPacedLimiter(t, Config{InitialLimit: 100, MaxQueued: 10})
	l.SetCeiling(4)
	leases := acquireN(t, l, 4)
	admitted := make(chan Lease, 10)
	for range 10 {
		go func() {
			le, err := l.Acquire(context.Background())
			if err == nil {
				admitted <- le
			}
		}()
	}
	waitUntil(t, func() bool { return l.Queued() == 10 })
	l.SetCeiling(14)
	require.Equal(t, 7, l.Inflight(), "half of 14 goes out at once")
	require.Equal(t, 7, l.Queued())
	for i, le := range leases {
		clk.Advance(time.Millisecond)
		le.Release()
		require.Equal(t, max(4+i+1, 7), l.Inflight(), "after %d clean releases", i+1)
	}
	require.Equal(t, 2, l.Queued())
	le := <-admitted
	clk.Advance(time.Millisecond)
	le.Release()
	require.Equal(t, 9, l.Inflight(), "the fifth release lets in two")
	require.Zero(t, l.Queued(), "every waiter admitted")
	for range 9 {
		(<-admitted).Release()
	}
}

// acquireAll admits leases with TryAcquire until one is refused or most
// are in, and returns them.
func acquireAll(l *Limiter, most int) []Lease {
	var leases []Lease
	for len(leases) < most {
		le, ok := l.TryAcquire()
		if !ok {
			break
		}
		leases = append(leases, le)
	}
	return leases
}

// releaseAll releases every lease, cleanly.
func releaseAll(leases []Lease) {
	for _, le := range leases {
		le.Release()
	}
}
