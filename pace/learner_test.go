package pace

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func newLearner(t *testing.T, cfg LearnerConfig) *Learner {
	t.Helper()
	l, err := NewLearner(cfg, epoch)
	require.NoError(t, err)
	return l
}

// TestLearnerRules applies one period of each kind to a learner at the
// default configuration with SeedRate 30: the cut, the step, and both
// edges of the dead zone, which hold.
func TestLearnerRules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name             string
		requests, errors int64
		minRequests      int64
		action           Action
		rate             float64
	}{
		{"above target", 100, 11, 0, Decreased, 20},
		{"all errors", 3, 3, 0, Decreased, 20},
		{"at target: dead zone", 100, 10, 0, Held, 30},
		{"inside dead zone", 100, 7, 0, Held, 30},
		{"at recover: dead zone", 100, 5, 0, Held, 30},
		{"below recover", 100, 4, 0, Increased, 32},
		{"no errors", 1, 0, 0, Increased, 32},
		{"no requests", 0, 0, 0, Idle, 30},
		{"too few requests", 9, 9, 10, Idle, 30},
		{"just enough requests", 10, 0, 10, Increased, 32},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := newLearner(t, LearnerConfig{SeedRate: 30, MinRequests: tt.minRequests})
			require.NoError(t, l.RecordN(at(time.Second), tt.requests, tt.errors))
			require.Equal(t, 30.0, l.Rate(at(5*time.Second-1)), "the period has not ended")
			require.InDelta(t, tt.rate, l.Rate(at(5*time.Second)), 1e-9)
			c, ok := l.LastCheck(at(5 * time.Second))
			require.True(t, ok)
			require.Equal(t, tt.action, c.Action)
			require.Equal(t, Check{
				Start: epoch, End: at(5 * time.Second), Requests: tt.requests, Errors: tt.errors,
				ErrorPct: c.ErrorPct, Action: tt.action, Rate: c.Rate,
			}, c)
			if tt.requests > 0 {
				require.InDelta(t, 100*float64(tt.errors)/float64(tt.requests), c.ErrorPct, 1e-9)
			}
		})
	}
}

// TestLearnerBounds: repeated cuts stop at MinRate, repeated steps at
// MaxRate.
func TestLearnerBounds(t *testing.T) {
	t.Parallel()
	l := newLearner(t, LearnerConfig{SeedRate: 30})
	now := epoch
	for range 10 {
		l.Record(now, true)
		now = now.Add(5 * time.Second)
	}
	require.Equal(t, 15.0, l.Rate(now), "MinRate defaults to SeedRate/2")
	for range 100 {
		l.Record(now, false)
		now = now.Add(5 * time.Second)
	}
	require.Equal(t, 60.0, l.Rate(now), "MaxRate defaults to SeedRate×2")
	c, _ := l.LastCheck(now)
	require.Equal(t, Increased, c.Action, "the rule applied, even at the bound")
}

// TestLearnerPeriods: periods follow one another from the learner's start;
// a record at a period's end belongs to the next; idle periods change
// nothing and keep the alignment; time going back reads as the latest.
func TestLearnerPeriods(t *testing.T) {
	t.Parallel()
	l := newLearner(t, LearnerConfig{SeedRate: 30, CheckPeriod: 10 * time.Second})
	_, ok := l.LastCheck(at(9 * time.Second))
	require.False(t, ok)

	l.Record(at(9*time.Second), false)
	l.Record(at(10*time.Second), true) // next period
	c, ok := l.LastCheck(at(10 * time.Second))
	require.True(t, ok)
	require.Equal(t, Check{Start: epoch, End: at(10 * time.Second), Requests: 1, Action: Increased, Rate: 32}, c)

	l.Record(at(5*time.Second), true) // before the last time seen: counts at 10s
	// An hour passes: the [10s, 20s) period is judged, the rest is idle.
	require.InDelta(t, 32/1.5, l.Rate(at(time.Hour+3*time.Second)), 1e-9)
	c, _ = l.LastCheck(at(time.Hour + 3*time.Second))
	require.Equal(t, at(10*time.Second), c.Start)
	require.Equal(t, int64(2), c.Errors)

	l.Record(at(time.Hour+4*time.Second), false)
	c, _ = l.LastCheck(at(time.Hour + 10*time.Second))
	require.Equal(t, at(time.Hour), c.Start, "periods stay aligned to the start")
	require.Equal(t, Increased, c.Action)
}

// TestLearnerWarmStart stores a learned rate and starts a new learner from
// it.
func TestLearnerWarmStart(t *testing.T) {
	t.Parallel()
	cfg := LearnerConfig{SeedRate: 30, MinRate: 1, MaxRate: 100}
	l := newLearner(t, cfg)
	now := epoch
	for range 3 {
		l.Record(now, true)
		now = now.Add(5 * time.Second)
	}
	stored := l.Rate(now)
	require.InDelta(t, 30/1.5/1.5/1.5, stored, 1e-9)

	cfg.WarmRate = stored
	warm := newLearner(t, cfg)
	require.Equal(t, stored, warm.Rate(epoch))
	warm.Record(epoch, false)
	require.InDelta(t, stored+2, warm.Rate(at(5*time.Second)), 1e-9, "the step is SeedRate/15, from the seed")
}

func TestLearnerConfigDefaults(t *testing.T) {
	t.Parallel()
	l := newLearner(t, LearnerConfig{SeedRate: 3})
	require.Equal(t, LearnerConfig{
		SeedRate: 3, MinRate: 1.5, MaxRate: 6, CheckPeriod: 5 * time.Second,
		TargetErrorPct: 10, RecoverPct: 5, BackoffMul: 1.5, SpeedupStep: 0.2, MinRequests: 1, ProbeFraction: 1,
	}, l.Config())
	l = newLearner(t, LearnerConfig{SeedRate: 3, TargetErrorPct: 2})
	require.Equal(t, 1.0, l.Config().RecoverPct, "half the target")
}

func TestLearnerConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cfg  LearnerConfig
		want string
	}{
		{LearnerConfig{}, "LearnerConfig.SeedRate must be > 0 and finite, got 0"},
		{LearnerConfig{SeedRate: -1}, "SeedRate must be > 0 and finite, got -1"},
		{LearnerConfig{SeedRate: 1, MinRate: -1}, "LearnerConfig.MinRate must be > 0 and finite, got -1"},
		{LearnerConfig{SeedRate: 1, MinRate: 1, MaxRate: 0.5}, "LearnerConfig.MaxRate must be finite and >= MinRate (1), got 0.5"},
		{LearnerConfig{SeedRate: 5, MinRate: 1, MaxRate: 4}, "LearnerConfig.SeedRate must be within [MinRate, MaxRate] = [1, 4], got 5"},
		{LearnerConfig{SeedRate: 1e308}, "LearnerConfig.SeedRate = 1e+308 leaves MaxRate's default, 2·SeedRate, infinite: set MaxRate"},
		{LearnerConfig{SeedRate: 5e-324}, "LearnerConfig.SeedRate = 5e-324 leaves MinRate's default, SeedRate/2, at 0: set MinRate"},
		{LearnerConfig{SeedRate: 2, WarmRate: 5}, "LearnerConfig.WarmRate must be 0 or within [MinRate, MaxRate] = [1, 4], got 5"},
		{LearnerConfig{SeedRate: 2, CheckPeriod: -time.Second}, "LearnerConfig.CheckPeriod must be > 0, got -1s"},
		{LearnerConfig{SeedRate: 2, TargetErrorPct: 101}, "LearnerConfig.TargetErrorPct must be in (0, 100], got 101"},
		{LearnerConfig{SeedRate: 2, TargetErrorPct: 4, RecoverPct: 6}, "LearnerConfig.RecoverPct must be in (0, TargetErrorPct] = (0, 4], got 6"},
		{LearnerConfig{SeedRate: 2, BackoffMul: 0.9}, "LearnerConfig.BackoffMul must be > 1 and finite, got 0.9"},
		{LearnerConfig{SeedRate: 2, SpeedupStep: -1}, "LearnerConfig.SpeedupStep must be > 0 and finite, got -1"},
		{LearnerConfig{SeedRate: 2, MinRequests: -1}, "LearnerConfig.MinRequests must be >= 0, got -1"},
		{LearnerConfig{SeedRate: 2, ProbeFraction: 1.5}, "LearnerConfig.ProbeFraction must be in (0, 1], got 1.5"},
		{LearnerConfig{SeedRate: 2, ProbeFraction: math.NaN()}, "LearnerConfig.ProbeFraction must be in (0, 1], got NaN"},
		{LearnerConfig{SeedRate: 2, CutEarlyAfter: -1}, "LearnerConfig.CutEarlyAfter must be >= 0, got -1"},
		{LearnerConfig{SeedRate: 2, Window: -time.Second}, "LearnerConfig.Window must be >= 0, got -1s"},
	}
	for _, tt := range tests {
		_, err := NewLearner(tt.cfg, epoch)
		require.ErrorContains(t, err, tt.want)
	}
	l := newLearner(t, LearnerConfig{SeedRate: 1})
	require.EqualError(t, l.RecordN(epoch, 1, 2), "pace: record: need 0 <= errs <= requests, got errs 2 of 1 requests")
	require.Error(t, l.RecordN(epoch, -1, 0))
	require.Equal(t, "increased", Increased.String())
	require.Equal(t, "Action(9)", Action(9).String())
}

// TestLearnerNeedSaturation: with NeedSaturation, a good period raises the
// rate only if requests waited for it; cuts are not affected.
func TestLearnerNeedSaturation(t *testing.T) {
	t.Parallel()
	l := newLearner(t, LearnerConfig{SeedRate: 30, NeedSaturation: true})
	require.NoError(t, l.RecordN(at(time.Second), 100, 0))
	require.Equal(t, 30.0, l.Rate(at(5*time.Second)), "not saturated: held")
	c, _ := l.LastCheck(at(5 * time.Second))
	require.Equal(t, Held, c.Action)
	require.NoError(t, l.RecordN(at(6*time.Second), 100, 0))
	l.Saturated(at(7 * time.Second))
	require.Equal(t, 32.0, l.Rate(at(10*time.Second)), "saturated: increased")
	require.NoError(t, l.RecordN(at(11*time.Second), 100, 0))
	require.Equal(t, 32.0, l.Rate(at(15*time.Second)), "the mark lasts one period")
	require.NoError(t, l.RecordN(at(16*time.Second), 100, 50))
	require.InDelta(t, 32/1.5, l.Rate(at(20*time.Second)), 1e-9, "a cut needs no mark")
}

// TestLearnerCeiling: a ceiling lowers the rate at once, even below
// MinRate, and stops increases; a rate learned above it comes back when it
// is lifted (it was overwritten: one reply stating a limit of 1 a minute
// left a learned 720 a minute at 1 for 80 s after the next reply lifted
// it); 0 removes it; bad values are refused.
func TestLearnerCeiling(t *testing.T) {
	t.Parallel()
	l := newLearner(t, LearnerConfig{SeedRate: 30})
	require.NoError(t, l.SetCeiling(at(time.Second), 10))
	require.Equal(t, 10.0, l.Rate(at(time.Second)), "below MinRate 15: the provider's word wins")
	require.NoError(t, l.RecordN(at(2*time.Second), 100, 0))
	require.Equal(t, 10.0, l.Rate(at(5*time.Second)), "no increase past the ceiling")
	require.NoError(t, l.SetCeiling(at(6*time.Second), 0))
	require.Equal(t, 30.0, l.Rate(at(6*time.Second)), "the cap removed, the rate learned comes back")
	require.NoError(t, l.RecordN(at(6*time.Second), 100, 0))
	require.Equal(t, 32.0, l.Rate(at(10*time.Second)), "and the step applies")
	require.NoError(t, l.SetCeiling(at(11*time.Second), 1e6))
	require.Equal(t, 32.0, l.Rate(at(11*time.Second)), "a ceiling above the rate changes nothing")
	require.NoError(t, l.SetCeiling(at(12*time.Second), 20))
	require.NoError(t, l.RecordN(at(12*time.Second), 100, 50))
	require.Less(t, l.Rate(at(15*time.Second)), 20.0, "a bad period cuts from the ceiling, the rate paced by")
	for _, bad := range []float64{-1, math.NaN(), math.Inf(1)} {
		require.ErrorContains(t, l.SetCeiling(at(16*time.Second), bad), "ceiling must be >= 0")
	}
}

// TestLearnerCeilingIncreasesUpToIt: under a ceiling above the rate,
// increases stop at the ceiling.
func TestLearnerCeilingIncreasesUpToIt(t *testing.T) {
	t.Parallel()
	l := newLearner(t, LearnerConfig{SeedRate: 30})
	require.NoError(t, l.SetCeiling(at(0), 31))
	require.NoError(t, l.RecordN(at(time.Second), 100, 0))
	require.Equal(t, 31.0, l.Rate(at(5*time.Second)), "30 + 2 capped at 31")
	require.NoError(t, l.SetCeiling(at(5*time.Second), 0))
	require.Equal(t, 31.0, l.Rate(at(5*time.Second)), "the rate learned under the cap is 31")
}

// TestLearnerHoldAfterCut: after a cut, good periods within HoldAfterCut
// hold the rate; a bad one still cuts; after it, the rate grows again.
func TestLearnerHoldAfterCut(t *testing.T) {
	t.Parallel()
	l := newLearner(t, LearnerConfig{SeedRate: 30, HoldAfterCut: 10 * time.Second})
	require.NoError(t, l.RecordN(at(time.Second), 100, 50))
	require.Equal(t, 20.0, l.Rate(at(5*time.Second)), "cut at the period ending at 5s")
	require.NoError(t, l.RecordN(at(6*time.Second), 100, 0))
	require.Equal(t, 20.0, l.Rate(at(10*time.Second)), "5s after the cut: held")
	c, _ := l.LastCheck(at(10 * time.Second))
	require.Equal(t, Held, c.Action)
	require.NoError(t, l.RecordN(at(11*time.Second), 100, 0))
	require.Equal(t, 22.0, l.Rate(at(15*time.Second)), "10s after the cut: raised")
	_, err := NewLearner(LearnerConfig{SeedRate: 1, HoldAfterCut: -time.Second}, epoch)
	require.ErrorContains(t, err, "HoldAfterCut must be >= 0")
}

// TestLearnerWindowTimeGoingBack: an accepted request recorded at a time
// before an earlier call's counts among the window's accepted requests at
// that earlier time, as it does in the period: wherever the clock stepped
// back to, it neither drops out of the window nor takes a slot's records
// out with it.
func TestLearnerWindowTimeGoingBack(t *testing.T) {
	t.Parallel()
	cfg := LearnerConfig{SeedRate: 100, MinRate: 10, MaxRate: 400, Window: 10 * time.Second, NeedSaturation: true}
	tick := func(i int) time.Time { return at(time.Duration(i) * 100 * time.Millisecond) }
	for _, tc := range []struct {
		name  string
		ticks int           // one accepted request every 100 ms, for ticks × 100 ms
		back  time.Duration // when the stepped-back record says it was
	}{
		{"within the window", 100, 5 * time.Second},
		{"before the learner's start", 100, -5 * time.Second},
		// 2 s is a window and more before 19.9 s, in the place of the
		// slot ring that holds [12 s, 12.17 s).
		{"a window and more back", 200, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := newLearner(t, cfg)
			for i := range tc.ticks {
				l.RecordScaled(tick(i), false, 6)
			}
			l.RecordScaled(at(tc.back), false, 6) // counts at tick(tc.ticks-1)
			end := tick(tc.ticks)
			for range 30 {
				l.RecordScaled(end.Add(-50*time.Millisecond), true, 6)
			}
			// As in TestLearnerCutToAccepted, the window leaves out the
			// first two records of its span; the stepped-back one is in.
			require.InDelta(t, (98+1)*6/10.0, l.Rate(end), 1e-9, "the accepted rate over the window")
		})
	}
}

// TestLearnerCutToAccepted: with Window, a cut takes the rate to what the
// window accepted (scaled), within rate/BackoffMul² and a cut of
// TargetErrorPct; without a whole window of records it divides by
// BackoffMul.
func TestLearnerCutToAccepted(t *testing.T) {
	t.Parallel()
	// NeedSaturation holds the rate through the clean periods.
	cfg := LearnerConfig{SeedRate: 100, MinRate: 10, MaxRate: 400, Window: 10 * time.Second, NeedSaturation: true}
	tick := func(i int) time.Time { return at(time.Duration(i) * 100 * time.Millisecond) }

	early := newLearner(t, cfg)
	require.NoError(t, early.RecordN(at(time.Second), 100, 50))
	require.InDelta(t, 100/1.5, early.Rate(at(5*time.Second)), 1e-9, "no whole window yet: the seed's cut")

	// One accepted request every 100 ms, each standing for 6 of the
	// fleet's: 60 a second; then 429s late in the period that ends at 10 s.
	l := newLearner(t, cfg)
	for i := range 100 {
		l.RecordScaled(tick(i), false, 6)
	}
	for range 30 {
		l.RecordScaled(at(9950*time.Millisecond), true, 6)
	}
	// The window ending at 10 s starts after its first slot (1/60 of it),
	// which held the first two records.
	require.InDelta(t, 98*6/10.0, l.Rate(at(10*time.Second)), 1e-9, "the accepted rate over the window")

	// An accepted rate above a cut of TargetErrorPct takes that cut, one
	// below rate/BackoffMul² takes that; scales that are not > 0 and
	// finite count nothing.
	hi, lo, bad := newLearner(t, cfg), newLearner(t, cfg), newLearner(t, cfg)
	for i := range 100 {
		hi.RecordScaled(tick(i), false, 50)
		lo.RecordScaled(tick(i), false, 0.1)
		bad.RecordScaled(tick(i), false, math.Inf(1))
		bad.RecordScaled(tick(i), false, math.NaN())
		bad.RecordScaled(tick(i), false, -3)
	}
	for _, x := range []*Learner{hi, lo, bad} {
		require.NoError(t, x.RecordN(at(9950*time.Millisecond), 50, 50))
	}
	require.InDelta(t, 90, hi.Rate(at(10*time.Second)), 1e-9, "100 less TargetErrorPct (10 %)")
	require.InDelta(t, 100/1.5/1.5, lo.Rate(at(10*time.Second)), 1e-9, "rate/BackoffMul²")
	require.InDelta(t, 100/1.5/1.5, bad.Rate(at(10*time.Second)), 1e-9, "nothing accepted: the deepest cut")
}

// TestLearnerCutEarly: with CutEarlyAfter, the 429s that pass it cut the
// rate at once, mid-period, and a new period starts there.
func TestLearnerCutEarly(t *testing.T) {
	t.Parallel()
	l := newLearner(t, LearnerConfig{SeedRate: 30, CutEarlyAfter: 5})
	require.NoError(t, l.RecordN(at(time.Second), 20, 0))
	for range 4 {
		l.Record(at(2*time.Second), true)
	}
	require.Equal(t, 30.0, l.Rate(at(2*time.Second)), "4 429s: not yet")
	l.Record(at(2*time.Second), true)
	require.Equal(t, 20.0, l.Rate(at(2*time.Second)), "the 5th (20 % of 25): cut at once")
	c, ok := l.LastCheck(at(2 * time.Second))
	require.True(t, ok)
	require.Equal(t, Check{Start: epoch, End: at(2 * time.Second), Requests: 25, Errors: 5, ErrorPct: 20, Action: Decreased, Rate: 20}, c)
	// The next period runs from 2 s to 7 s.
	require.NoError(t, l.RecordN(at(3*time.Second), 100, 0))
	require.Equal(t, 20.0, l.Rate(at(6900*time.Millisecond)))
	require.Equal(t, 22.0, l.Rate(at(7*time.Second)), "a clean period from the cut on: raised")

	// 429s under TargetErrorPct do not cut early, however many.
	m := newLearner(t, LearnerConfig{SeedRate: 30, CutEarlyAfter: 5})
	require.NoError(t, m.RecordN(at(time.Second), 1000, 0))
	for range 50 {
		m.Record(at(2*time.Second), true)
	}
	require.Equal(t, 30.0, m.Rate(at(2*time.Second)), "50 of 1050 is under 10 %")
}

// TestLearnerProbeBand: after a cut, the first SpeedupStep above the rate
// it set is climbed by ProbeFraction of a step a period; above it, by
// whole steps again.
func TestLearnerProbeBand(t *testing.T) {
	t.Parallel()
	l := newLearner(t, LearnerConfig{SeedRate: 30, SpeedupStep: 4, ProbeFraction: 0.25})
	clean := func(i int) float64 {
		require.NoError(t, l.RecordN(at(time.Duration(5*i)*time.Second+time.Second), 100, 0))
		return l.Rate(at(time.Duration(5*i+5) * time.Second))
	}
	require.Equal(t, 34.0, clean(0), "no cut yet: whole steps")
	require.NoError(t, l.RecordN(at(6*time.Second), 100, 50))
	require.InDelta(t, 34/1.5, l.Rate(at(10*time.Second)), 1e-9)
	cut := 34 / 1.5
	var got []float64
	for i := 2; i < 8; i++ {
		got = append(got, clean(i))
	}
	require.InDeltaSlice(t, []float64{cut + 1, cut + 2, cut + 3, cut + 4, cut + 8, cut + 12}, got, 1e-9)
}

// TestLearnerEarlyCutOncePerOverload: when a sliding-window quota fills,
// every request in flight comes back 429. Recorded with their send times,
// thirty such 429s within 300 ms cut once (counted as new, they cut 600 a
// minute to 319), and the period the cut starts, in which every request
// sent after it is accepted, does not cut again at its end.
func TestLearnerEarlyCutOncePerOverload(t *testing.T) {
	t.Parallel()
	l, err := NewLearner(LearnerConfig{SeedRate: 10, MinRate: 1, MaxRate: 40, Window: time.Minute,
		HoldAfterCut: time.Minute, CutEarlyAfter: 5, ProbeFraction: 0.5, NeedSaturation: true}, epoch)
	if err != nil {
		t.Fatal(err)
	}
	// A minute at 10 a second, all accepted: the quota's window is full.
	for i := range 600 {
		at := epoch.Add(time.Duration(i) * 100 * time.Millisecond)
		l.RecordSent(at, at, false, 1)
	}
	// Then the 30 requests in flight, sent in the last 3 s, come back 429,
	// 10 ms apart.
	start := epoch.Add(time.Minute)
	for i := range 30 {
		l.RecordSent(start.Add(time.Duration(i)*10*time.Millisecond), start.Add(-3*time.Second+time.Duration(i)*100*time.Millisecond), true, 1)
	}
	after := l.Rate(start.Add(300*time.Millisecond)) * 60
	t.Logf("after 30 429s within 300 ms of a full window at 600 a minute: %.0f a minute", after)
	if after < 0.9*600*0.99 {
		t.Fatalf("one overload cut %.0f%% off the rate (one cut takes at most 10%% here)", 100*(1-after/600))
	}
	if after >= 600 {
		t.Fatalf("no cut: %.0f a minute", after)
	}
	// Every request at the new rate is accepted: the overload is over.
	at := start.Add(300 * time.Millisecond)
	for at.Before(start.Add(6 * time.Second)) {
		l.RecordSent(at, at.Add(-200*time.Millisecond), false, 1)
		at = at.Add(time.Duration(float64(time.Second) / (after / 60)))
	}
	end := l.Rate(start.Add(6*time.Second)) * 60
	t.Logf("after the period the cut started: %.0f a minute", end)
	if end < after {
		t.Fatalf("the 429s of requests sent before the cut cut again at the period's end: %.0f -> %.0f a minute", after, end)
	}
	// The period after the cut counted none of the stale 429s.
	c, _ := l.LastCheck(start.Add(6 * time.Second))
	if c.Errors != 0 {
		t.Fatalf("the period after the cut counted %d stale 429s", c.Errors)
	}
}

// TestLearnerCountsSaturate: a period's counts wrapped past MaxInt64, and
// the check reported negative requests and errors.
func TestLearnerCountsSaturate(t *testing.T) {
	t.Parallel()
	l, err := NewLearner(LearnerConfig{SeedRate: 10}, epoch)
	require.NoError(t, err)
	require.NoError(t, l.RecordN(epoch, math.MaxInt64, math.MaxInt64))
	require.NoError(t, l.RecordN(epoch, 1, 1))
	l.Record(epoch, true)
	l.mu.Lock()
	defer l.mu.Unlock()
	require.Equal(t, [2]int64{math.MaxInt64, math.MaxInt64}, [2]int64{l.requests, l.errs})
}
