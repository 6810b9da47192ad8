package adaptive

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPaceGrowthTakesARaisedLimitAsLeasesSettle: with PaceGrowth, a share
// raised from 10 to 20 is taken up two admissions per clean release —
// the slot it frees and one more — not in one burst of ten.
func TestPaceGrowthTakesARaisedLimitAsLeasesSettle(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 100, PaceGrowth: true})
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
	for _, le := range leases {
		le.Release()
	}
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
	for _, le := range leases {
		le.Release()
	}
}

// TestPaceGrowthAdmitsHalfTheLimitAtOnce: however low the paced level
// fell — a share of 0 — half of a new limit goes out at once, so a lease
// that never settles, a long stream, cannot hold admission to itself.
func TestPaceGrowthAdmitsHalfTheLimitAtOnce(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{InitialLimit: 100, PaceGrowth: true})
	l.SetCeiling(4)
	stream, ok := l.TryAcquire()
	require.True(t, ok)
	l.SetCeiling(0)
	l.SetCeiling(30)
	leases := acquireN(t, l, 14)
	_, ok = l.TryAcquire()
	require.False(t, ok, "15 in flight: half of 30, and nothing settled since the share was 0")
	stream.Release()
	for _, le := range leases {
		le.Release()
	}
}

// TestPaceGrowthOnlyCleanReleasesCount: a drop frees its slot but lets
// nothing more in, and an abandoned lease neither.
func TestPaceGrowthOnlyCleanReleasesCount(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 100, MinLimit: 1, PaceGrowth: true})
	l.SetCeiling(10)
	leases := acquireN(t, l, 10)
	l.SetCeiling(20)
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
		for _, le := range leases {
			le.Release()
		}
		require.InDelta(t, tc.want, l.Estimate(), 1e-9, "%d in flight of 30", tc.load)
	}
}

// TestPaceGrowthHandsTheRaiseToWaitersAsLeasesSettle: queued callers get
// a raised share as releases let it in — two per clean release — and all
// of it in the end.
func TestPaceGrowthHandsTheRaiseToWaitersAsLeasesSettle(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 100, MaxQueued: 10, PaceGrowth: true})
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
