package adaptive

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fullRound admits the whole limit, gives each lease a round trip of
// draw(load), load being the leases admitted, and settles them fastest
// first if sorted, else in the order drawn; then it moves the clock on by
// the slowest.
func fullRound(t *testing.T, l *Limiter, clk *fakeClock, sorted bool, draw func(load int) time.Duration) {
	t.Helper()
	leases := acquireN(t, l, l.Limit())
	rtts := make([]time.Duration, len(leases))
	for i := range rtts {
		rtts[i] = draw(len(leases))
	}
	if sorted {
		slices.Sort(rtts)
	}
	for i, le := range leases {
		le.ReleaseRTT(rtts[i])
	}
	clk.Advance(slices.Max(rtts))
}

// constant is a draw of the same round trip every time.
func constant(rtt time.Duration) func(int) time.Duration {
	return func(int) time.Duration { return rtt }
}

func TestNoiseBandCancelsASteadyTrend(t *testing.T) {
	t.Parallel()
	var b noiseBand
	require.Equal(t, noiseStart, b.tolerance(), "before a second difference")
	// A fastest sample that climbs 1 ms per round, as under a load that
	// climbs at a steady pace: no noise.
	for i := range 50 {
		b.add(time.Duration(10+i)*time.Millisecond, 10*time.Millisecond)
	}
	require.Equal(t, noiseFloor, b.tolerance(), "no noise: the floor")
}

func TestNoiseBandRecoversFromALongQuietStretch(t *testing.T) {
	t.Parallel()
	// Samples that repeat exactly (a coarse clock) drive the running
	// median down; it must still widen when noise comes.
	var b noiseBand
	for range 100000 {
		b.add(10*time.Millisecond, 10*time.Millisecond)
	}
	require.Equal(t, noiseFloor, b.tolerance())
	rng := rand.New(rand.NewPCG(3, 4))
	for range 1000 {
		b.add(time.Duration(float64(10*time.Millisecond)*(1+0.1*rng.NormFloat64())), 8*time.Millisecond)
	}
	require.Greater(t, b.tolerance(), 1.5, "10 %% noise widens the band")
}

func TestOneRoundBeyondTheBandMovesNothing(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 50})
	full := func(rtt time.Duration) { fullRound(t, l, clk, false, constant(rtt)) }
	for range 50 {
		full(10 * time.Millisecond)
	}
	// Slow rounds, beyond the floor of 1.1. The first still closes on a
	// late sample of the round before (a round's fastest sample takes in
	// the samples that settle after the last move).
	full(15 * time.Millisecond)
	before := l.Estimate()
	full(15 * time.Millisecond)
	require.Equal(t, before, l.Estimate(), "the first round beyond the band may be noise")
	full(15 * time.Millisecond) // a queue persists
	require.Less(t, l.Estimate(), before)
}

func TestANewBaselineIsLearned(t *testing.T) {
	t.Parallel()
	// The upstream's latency steps from 20 ms to 26 ms and stays there,
	// whatever the load: a slower deploy. The estimate falls while the
	// rounds stay beyond the band; once it has halved without the latency
	// falling, the window restarts there, and the estimate climbs back.
	const limit = 200
	step := 0
	latency := func(_ int, rng *rand.Rand) time.Duration {
		step++
		base := 20 * time.Millisecond
		if step > 300*limit {
			base = 26 * time.Millisecond
		}
		return time.Duration(float64(base) * (1 + 0.01*math.Abs(rng.NormFloat64())))
	}
	est, snap := flatRoundsSnapshot(t, Config{MaxLimit: limit}, 1200, latency)
	require.Greater(t, est, 0.9*limit)
	require.Greater(t, snap.RTTNoload, 25*time.Millisecond, "the new baseline")
}

func TestAQuietRoundWithinTwiceTheBaselineMovesNothing(t *testing.T) {
	t.Parallel()
	// A round of one request has a slower fastest sample than a round of
	// a hundred, queue or not. Under the utilization threshold the band
	// is at least 2, a fixed Gradient2's tolerance.
	l, clk := newTestLimiter(t, Config{InitialLimit: 100})
	for range 50 {
		fullRound(t, l, clk, false, constant(10*time.Millisecond))
	}
	before := l.Estimate()
	for range 10 {
		acquireN(t, l, 1)[0].ReleaseRTT(18 * time.Millisecond)
		clk.Advance(18 * time.Millisecond)
	}
	require.Equal(t, before, l.Estimate())
}

func TestNoiseBandWidensWithNoise(t *testing.T) {
	t.Parallel()
	// Fastest samples of 10 ms·(1 + 0.02·Z) against an rttNoload of 9 ms:
	// the median |second difference| is 1.65·0.2 ms, 0.037 of rttNoload,
	// so the band is about 1 + 4·0.037. The running median wanders about
	// a fifth around it; its mean over many rounds does not.
	rng := rand.New(rand.NewPCG(1, 2))
	var b noiseBand
	var sum float64
	const rounds = 20000
	for i := range rounds {
		fastest := time.Duration(float64(10*time.Millisecond) * (1 + 0.02*rng.NormFloat64()))
		b.add(fastest, 9*time.Millisecond)
		if i >= rounds/2 {
			sum += b.tolerance()
		}
	}
	want := 1 + noiseWidths*1.65*0.02*10/9
	require.InDelta(t, want, sum/(rounds/2), 0.01)
}

func TestQueueGradientAimsUnderTheQueue(t *testing.T) {
	t.Parallel()
	cfg := Config{}.withDefaults()
	// Within the band (gradientSample's other branch): gradient 1 and the
	// headroom.
	within := gradient2(100, 10*time.Millisecond, 10*time.Millisecond, 1, cfg.Smoothing, &cfg)
	require.InDelta(t, 100*0.8+(100+10)*0.2, within, 1e-9)
	// Beyond it, 1.25 times rttNoload: the target is 100·(1/1.25)² = 64,
	// with no headroom.
	beyond := queueGradient(100, 12500*time.Microsecond, 10*time.Millisecond, cfg.Smoothing)
	require.InDelta(t, 100*0.8+64*0.2, beyond, 1e-9)
	// Far beyond, the target is at least half the estimate.
	far := queueGradient(100, 40*time.Millisecond, 10*time.Millisecond, cfg.Smoothing)
	require.InDelta(t, 100*0.8+50*0.2, far, 1e-9)
}

// flatRounds runs rounds round trips of a limiter against an upstream
// that never refuses: each round, the whole limit is in flight and each
// lease's round trip is rtt(load, rng); the leases settle in the order
// drawn, as in bench.SpreadCeiling, so the sample closing a round is not
// always its fastest. It returns the mean estimate over
// the last tenth of the rounds.
func flatRounds(t *testing.T, cfg Config, rounds int, rtt func(load int, rng *rand.Rand) time.Duration) float64 {
	est, _ := flatRoundsSnapshot(t, cfg, rounds, rtt)
	return est
}

// flatRoundsSnapshot is flatRounds, and the limiter's last Snapshot.
func flatRoundsSnapshot(t *testing.T, cfg Config, rounds int, rtt func(load int, rng *rand.Rand) time.Duration) (float64, Snapshot) {
	t.Helper()
	l, clk := newTestLimiter(t, cfg)
	rng := rand.New(rand.NewPCG(7, 11))
	var sum float64
	var n int
	for r := range rounds {
		fullRound(t, l, clk, false, func(load int) time.Duration { return rtt(load, rng) })
		if r >= rounds-rounds/10 {
			sum += l.Estimate()
			n++
		}
	}
	return sum / float64(n), l.Snapshot()
}

func TestDefaultsHoldOnRequestsOfUnequalSize(t *testing.T) {
	t.Parallel()
	// A flat upstream whose requests differ in size: 20 ms·exp(0.3·Z), a
	// p90 2.2 times the p10. Nothing queues. The fixed tolerance of 2
	// reads the spread as queueing; the measured band does not.
	spread := func(_ int, rng *rand.Rand) time.Duration {
		return time.Duration(float64(20*time.Millisecond) * math.Exp(0.3*rng.NormFloat64()))
	}
	fixed := flatRounds(t, Config{MaxLimit: 200, Tolerance: 2}, 1500, spread)
	band, snap := flatRoundsSnapshot(t, Config{MaxLimit: 200}, 1500, spread)
	t.Logf("estimate: Tolerance 2 %.1f, measured band %.1f (tolerance %.2f)", fixed, band, snap.Tolerance)
	require.Greater(t, snap.Tolerance, 1.0)
	require.Less(t, fixed, 50.0)
	require.Greater(t, band, 180.0)
}

// sharedAbove returns the round trips of processor sharing above a
// capacity c: 20 ms·load/c, at least 20 ms, with 1 % jitter.
func sharedAbove(c int) func(load int, rng *rand.Rand) time.Duration {
	return func(load int, rng *rand.Rand) time.Duration {
		base := 20 * time.Millisecond * time.Duration(max(load, c)) / time.Duration(c)
		return time.Duration(float64(base) * (1 + 0.01*math.Abs(rng.NormFloat64())))
	}
}

func TestDefaultsSettleNearACapacityThatSlowsDown(t *testing.T) {
	t.Parallel()
	// Processor sharing above C = 50: a round trip takes 20 ms·load/C,
	// with 1 % jitter. Tolerance 2 shrinks only past 2·C, and once every
	// round in the window has queued, rttNoload itself has risen and it
	// climbs to MaxLimit. The band turns a tenth or so above the baseline
	// and settles within a fifth or so above C.
	const c = 50
	shared := sharedAbove(c)
	fixed := flatRounds(t, Config{MaxLimit: 400, Tolerance: 2}, 1500, shared)
	band := flatRounds(t, Config{MaxLimit: 400}, 1500, shared)
	t.Logf("estimate ÷ C: Tolerance 2 %.2f, measured band %.2f", fixed/c, band/c)
	require.Greater(t, fixed, 1.9*c)
	require.Greater(t, band, 0.9*c)
	require.Less(t, band, 1.3*c)
}

func TestRoundNoiseHoldsTheEstimateBelowItsMaximum(t *testing.T) {
	t.Parallel()
	// Every round is slower or faster as a whole, by 5 % (Gaussian), the
	// load notwithstanding: the band reads some of it as queueing. The
	// estimate stays below its MaxLimit of 200, but far from the floor.
	run := func(cfg Config) (mean, least float64) {
		l, clk := newTestLimiter(t, cfg)
		rng := rand.New(rand.NewPCG(5, 6))
		least = math.Inf(1)
		const rounds = 6000
		for r := range rounds {
			c := 1 + 0.05*rng.NormFloat64()
			fullRound(t, l, clk, true, func(int) time.Duration {
				return time.Duration(float64(10*time.Millisecond) * c * (1 + 0.01*rng.ExpFloat64()))
			})
			if r >= rounds/2 {
				mean += l.Estimate() / (rounds / 2)
				least = min(least, l.Estimate())
			}
		}
		return mean, least
	}
	mean, least := run(Config{MaxLimit: 200, InitialLimit: 100})
	fixedMean, _ := run(Config{MaxLimit: 200, InitialLimit: 100, Tolerance: 2})
	t.Logf("mean estimate %.1f (least %.1f); Tolerance 2: %.1f", mean, least, fixedMean)
	require.InDelta(t, 200.0, fixedMean, 1e-6)
	require.Greater(t, mean, 100.0)
	require.Less(t, mean, 200.0)
}

// sharedRounds runs a limiter against a processor-sharing upstream whose
// capacity is capacity(r) in round r: each round the whole limit is in
// flight, and a round trip takes 20 ms·max(load, C)/C with 1 % jitter,
// the leases settling fastest first. It returns estimate ÷ C after each
// round.
func sharedRounds(t *testing.T, cfg Config, rounds int, capacity func(r int) int) []float64 {
	t.Helper()
	l, clk := newTestLimiter(t, cfg)
	rng := rand.New(rand.NewPCG(1, 2))
	ratios := make([]float64, rounds)
	for r := range rounds {
		c := capacity(r)
		fullRound(t, l, clk, true, func(load int) time.Duration {
			base := float64(20*time.Millisecond) * float64(max(load, c)) / float64(c)
			return time.Duration(base * (1 + 0.01*math.Abs(rng.NormFloat64())))
		})
		ratios[r] = l.Estimate() / float64(c)
	}
	return ratios
}

func meanOf(x []float64) float64 {
	var sum float64
	for _, v := range x {
		sum += v
	}
	return sum / float64(len(x))
}

func TestDefaultsDoNotCreepAboveACapacityThatSlowsDown(t *testing.T) {
	t.Parallel()
	// Over many windows the sawtooth stays above C, so the window's
	// minimum, left to itself, would rise window after window and the
	// load with it. The band's baseline does not forget.
	ratios := sharedRounds(t, Config{MaxLimit: 1000, InitialLimit: 50}, 15000, func(int) int { return 50 })
	late := meanOf(ratios[12000:])
	t.Logf("estimate ÷ C over the last 3000 of 15000 rounds: %.2f", late)
	require.Less(t, late, 1.4)
	require.Greater(t, late, 0.9)
}

func TestACapacityDropIsNotANewBaseline(t *testing.T) {
	t.Parallel()
	// C falls from 100 to 10: the load halves on the way down while the
	// latency stays beyond the band, but it falls with the load, so it
	// is a queue, not a slower upstream.
	ratios := sharedRounds(t, Config{MaxLimit: 1000, InitialLimit: 100}, 4000, func(r int) int {
		if r < 1000 {
			return 100
		}
		return 10
	})
	after := meanOf(ratios[2000:])
	t.Logf("estimate ÷ C after the drop: %.2f", after)
	require.Less(t, after, 1.8)
}

// TestAHugePeerLoadIsNoNewBaseline: the rule that learns a new baseline
// when the load halves doubled the load, which wrapped negative for a
// peers' in-flight near the largest int (SetPeerInflight takes any
// count): every queue then read as a new baseline, and the estimate
// climbed over it instead of coming down.
func TestAHugePeerLoadIsNoNewBaseline(t *testing.T) {
	t.Parallel()
	run := func(peers int) (float64, time.Duration) {
		l, clk := newTestLimiter(t, Config{InitialLimit: 10})
		l.SetPeerInflight(peers)
		for range 10 {
			fullRound(t, l, clk, false, constant(10*time.Millisecond))
		}
		for range 6 {
			fullRound(t, l, clk, false, constant(30*time.Millisecond))
		}
		s := l.Snapshot()
		return s.Estimate, s.RTTNoload
	}
	wantEst, wantBase := run(1_000_000)
	require.Equal(t, 10*time.Millisecond, wantBase)
	for _, peers := range []int{math.MaxInt / 2, math.MaxInt} {
		est, base := run(peers)
		require.Equal(t, wantBase, base, "peers %d: the queue is no new baseline", peers)
		require.Equal(t, wantEst, est, "peers %d", peers)
	}
}
