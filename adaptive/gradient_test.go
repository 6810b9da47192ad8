package adaptive

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestGradient2FirstSampleGrowsByQueueSize(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 20})
	leases := acquireN(t, l, 10) // load 10 = half the estimate: utilized
	clk.Advance(10 * time.Millisecond)
	leases[9].Release()

	// rtt == rttNoload, so gradient = min(2·1, 1) = 1.
	want := 20*0.8 + (20+math.Sqrt(20))*0.2
	require.InDelta(t, want, l.Estimate(), 1e-9)
	require.Equal(t, 10*time.Millisecond, l.RTTNoload())
	for _, le := range leases[:9] {
		le.Ignore()
	}
}

func TestGradient2SlowSampleShrinks(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 20, Tolerance: 2})
	le := acquireN(t, l, 1)[0]
	clk.Advance(10 * time.Millisecond)
	le.Release() // sets rttNoload; idle, so the estimate stays
	require.Equal(t, 20.0, l.Estimate())

	// 4× slower: gradient = clamp(2·10/40, 0.5, 1) = 0.5. The limiter is
	// idle (load 1), yet the decrease is not blocked by the guard.
	le = acquireN(t, l, 1)[0]
	clk.Advance(40 * time.Millisecond)
	le.Release()
	want := 20*0.8 + (20*0.5+math.Sqrt(20))*0.2
	require.InDelta(t, want, l.Estimate(), 1e-9)

	// 3× slower: gradient = 2/3.
	e := l.Estimate()
	le = acquireN(t, l, 1)[0]
	clk.Advance(30 * time.Millisecond)
	le.Release()
	want = e*0.8 + (e*2/3+math.Sqrt(e))*0.2
	require.InDelta(t, want, l.Estimate(), 1e-9)
}

func TestGradient2ConvergesUnderSustainedQueueing(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 100, Tolerance: 2})
	le := acquireN(t, l, 1)[0]
	clk.Advance(10 * time.Millisecond)
	le.Release()
	for range 500 {
		le := acquireN(t, l, 1)[0]
		clk.Advance(100 * time.Millisecond)
		le.Release()
	}
	// The fixed point of e = 0.9e + 0.2·sqrt(e) is e = 4.
	require.InDelta(t, 4, l.Estimate(), 0.01)
	require.Equal(t, 4, l.Limit())
}

func TestGradient2GrowsUnderLoadAndStopsAtMaxLimit(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 10, MaxLimit: 50})
	for range 200 {
		leases := acquireN(t, l, l.Limit())
		clk.Advance(10 * time.Millisecond)
		for _, le := range leases {
			le.Release()
		}
	}
	require.Equal(t, 50.0, l.Estimate())
}

func TestGradient2QueueSizeOption(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{
		InitialLimit: 10,
		QueueSize:    func(float64) float64 { return 5 },
	})
	leases := acquireN(t, l, 10)
	clk.Advance(time.Millisecond)
	leases[0].Release()
	require.InDelta(t, 10*0.8+(10+5)*0.2, l.Estimate(), 1e-9)

	for _, bad := range []float64{math.NaN(), math.Inf(1), -3} {
		l, clk := newTestLimiter(t, Config{
			InitialLimit: 10,
			QueueSize:    func(float64) float64 { return bad },
		})
		le := acquireN(t, l, 1)[0]
		clk.Advance(time.Millisecond)
		le.Release()
		require.Equal(t, 10.0, l.Estimate(), "queue size %v counts as 0", bad)
	}
}

func TestGradient2ZeroRTTIsNotNaN(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 4})
	for range 10 {
		for _, le := range acquireN(t, l, l.Limit()) {
			le.Release() // the fake clock did not move: rtt 0, no sample
		}
	}
	require.Equal(t, 4.0, l.Estimate(), "no latency was measured")
	require.Zero(t, l.RTTNoload())
	for range 10 {
		leases := acquireN(t, l, l.Limit())
		clk.Advance(time.Nanosecond) // the shortest round trip the clock can tell
		for _, le := range leases {
			le.Release()
		}
	}
	e := l.Estimate()
	require.False(t, math.IsNaN(e))
	require.Greater(t, e, 4.0)
}

func TestReleaseRTTSamplesTheGivenRoundTrip(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 20})
	le := acquireN(t, l, 1)[0]
	clk.Advance(10 * time.Millisecond)
	le.Release()

	// A stream whose first byte came after 10 ms but which held its slot
	// for a second: the sample is 10 ms, so the estimate does not shrink.
	le = acquireN(t, l, 1)[0]
	clk.Advance(time.Second)
	le.ReleaseRTT(10 * time.Millisecond)
	require.Equal(t, 20.0, l.Estimate())
	require.Equal(t, 10*time.Millisecond, l.RTTNoload())
	require.Equal(t, 0, l.Inflight())

	le.ReleaseRTT(time.Millisecond) // settling twice is a no-op
	require.Equal(t, 10*time.Millisecond, l.RTTNoload())

	// A round trip of 0 or less measures nothing: the slot is freed and
	// no sample taken, so the no-load round trip stays 10 ms (it was
	// 1 ns, and a fixed Tolerance then cut the estimate to 4).
	for _, rtt := range []time.Duration{0, -time.Second} {
		le = acquireN(t, l, 1)[0]
		le.ReleaseRTT(rtt)
		require.Equal(t, 10*time.Millisecond, l.RTTNoload(), "rtt %v", rtt)
		require.Equal(t, 0, l.Inflight())
	}
}

func TestGradient2MovesOncePerRoundTrip(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 20})
	leases := acquireN(t, l, 20)
	clk.Advance(10 * time.Millisecond)
	for _, le := range leases {
		le.Release()
	}
	// Twenty samples of one round trip make one step, not twenty.
	want := 20*0.8 + (20+math.Sqrt(20))*0.2
	require.InDelta(t, want, l.Estimate(), 1e-9)
}
