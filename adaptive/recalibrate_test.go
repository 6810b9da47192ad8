package adaptive

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/internal/bubble"
	"github.com/stretchr/testify/require"
)

func TestRecalibration(t *testing.T) {
	t.Parallel()
	const interval, jitter = 10 * time.Second, 2 * time.Second
	twin := rand.New(rand.NewPCG(7, 7)) // draws what the limiter draws
	jittered := func() time.Duration {
		return interval + time.Duration((2*twin.Float64()-1)*float64(jitter))
	}
	l, clk := newTestLimiter(t, Config{
		InitialLimit:  20,
		MinLimit:      2,
		Recalibration: Recalibration{Interval: interval, Jitter: jitter},
		Rand:          rand.New(rand.NewPCG(7, 7)),
	})
	start := clk.Now()
	first := jittered()
	require.NotEqual(t, interval, first)

	// Establish a baseline under load.
	old := acquireN(t, l, 5)
	clk.Advance(30 * time.Millisecond)
	old[4].Release()
	old[4], _ = l.TryAcquire()
	require.Equal(t, 30*time.Millisecond, l.RTTNoload())
	estimate := l.Estimate()

	// Not yet due.
	clk.Advance(start.Add(first).Sub(clk.Now()) - time.Nanosecond)
	le, ok := l.TryAcquire()
	require.True(t, ok)
	old = append(old, le)
	require.False(t, l.Snapshot().Recalibrating)

	// Due: the limit is pinned to MinLimit while the 6 old leases drain.
	clk.Advance(time.Nanosecond)
	_, ok = l.TryAcquire()
	require.False(t, ok)
	snap := l.Snapshot()
	require.True(t, snap.Recalibrating)
	require.Equal(t, 2, snap.Limit)
	for _, le := range old[:5] {
		le.Release()
	}
	mid, ok := l.TryAcquire() // admitted while one old lease still runs
	require.True(t, ok)
	require.Equal(t, 30*time.Millisecond, l.RTTNoload(), "window kept while draining")
	require.Equal(t, estimate, l.Estimate(), "estimate frozen while recalibrating")

	// Drained: the window empties; samples of leases admitted earlier do
	// not refill it.
	old[5].Release()
	require.Zero(t, l.RTTNoload())
	clk.Advance(time.Millisecond)
	mid.Release()
	require.Zero(t, l.RTTNoload())
	require.True(t, l.Snapshot().Recalibrating)

	// A fresh no-load sample ends the recalibration.
	probe, ok := l.TryAcquire()
	require.True(t, ok)
	clk.Advance(12 * time.Millisecond)
	probe.Release()
	snap = l.Snapshot()
	require.False(t, snap.Recalibrating)
	require.Equal(t, 12*time.Millisecond, snap.RTTNoload)
	require.Equal(t, estimate, snap.Estimate)
	require.Equal(t, int(estimate), snap.Limit)

	// The next one is scheduled from the end of this one.
	end := clk.Now()
	second := jittered()
	clk.Advance(second - time.Nanosecond)
	le, _ = l.TryAcquire()
	require.False(t, l.Snapshot().Recalibrating)
	le.Ignore()
	clk.Advance(time.Nanosecond)
	require.Equal(t, end.Add(second), clk.Now())
	le, _ = l.TryAcquire() // idle: straight to probing
	require.True(t, l.Snapshot().Recalibrating)
	require.Zero(t, l.RTTNoload())
	clk.Advance(time.Millisecond)
	le.Release()
	require.False(t, l.Snapshot().Recalibrating)
	require.Equal(t, time.Millisecond, l.RTTNoload())
}

func TestRecalibrationDropStillBacksOff(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{
		InitialLimit:  20,
		Recalibration: Recalibration{Interval: time.Second, Samples: 3},
	})
	held, _ := l.TryAcquire()
	clk.Advance(time.Second)
	_, ok := l.TryAcquire()
	require.False(t, ok, "pinned to MinLimit 1")
	held.Drop()
	require.InDelta(t, 18, l.Estimate(), 1e-9)
	for range 3 {
		require.True(t, l.Snapshot().Recalibrating)
		le, ok := l.TryAcquire()
		require.True(t, ok)
		clk.Advance(time.Millisecond)
		le.Release()
	}
	require.False(t, l.Snapshot().Recalibrating)
}

func TestRecalibrationWakesQueuedWaiters(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{
		InitialLimit:  4,
		MaxQueued:     4,
		Recalibration: Recalibration{Interval: time.Second},
	})
	clk.Advance(time.Second)
	probe, _ := l.TryAcquire() // starts the recalibration: pinned to 1
	got := make(chan Lease, 3)
	for range 3 {
		go func() {
			le, err := l.Acquire(t.Context())
			if err == nil {
				got <- le
			}
		}()
	}
	waitUntil(t, func() bool { return l.Queued() == 3 })
	probe.Release() // ends it: the limit returns to 4
	for range 3 {
		(<-got).Release()
	}
	require.Zero(t, l.Inflight())
}

// TestRecalibrationWithLeakedLease: a lease that is never settled (an
// unclosed body, a recovered panic) must not pin the limit at MinLimit:
// the recalibration is abandoned after MaxPinned and the limiter resumes,
// and the next one is abandoned the same way.
func TestRecalibrationWithLeakedLease(t *testing.T) {
	t.Parallel()
	const interval = 10 * time.Second
	l, clk := newTestLimiter(t, Config{
		InitialLimit:  20,
		MinLimit:      1,
		Recalibration: Recalibration{Interval: interval},
	})
	leaked, ok := l.TryAcquire()
	require.True(t, ok)
	_ = leaked // never settled

	for round := range 3 {
		clk.Advance(interval)
		_, ok = l.TryAcquire()
		require.False(t, ok, "round %d: pinned at MinLimit behind the leaked lease", round)
		require.True(t, l.Snapshot().Recalibrating)

		clk.Advance(interval/10 - time.Nanosecond)
		_, ok = l.TryAcquire()
		require.False(t, ok, "round %d: still within MaxPinned", round)

		clk.Advance(time.Nanosecond)
		le, ok := l.TryAcquire()
		require.True(t, ok, "round %d: MaxPinned has passed: the recalibration is abandoned", round)
		require.False(t, l.Snapshot().Recalibrating)
		require.Equal(t, 20, l.Limit())
		le.Release()
	}
}

// TestRecalibrationWithLongRequest: one long request delays the probe no
// longer than MaxPinned either.
func TestRecalibrationWithLongRequest(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{
		InitialLimit:  20,
		MinLimit:      2,
		Recalibration: Recalibration{Interval: 10 * time.Second, MaxPinned: 3 * time.Second},
	})
	long, ok := l.TryAcquire()
	require.True(t, ok)
	clk.Advance(10 * time.Second)
	probe, ok := l.TryAcquire() // starts the recalibration, pinned at 2
	require.True(t, ok)
	require.Equal(t, 2, l.Limit(), "pinned while the long request runs")
	_, ok = l.TryAcquire()
	require.False(t, ok)
	clk.Advance(3 * time.Second)
	le, ok := l.TryAcquire()
	require.True(t, ok)
	require.Equal(t, 20, l.Limit())
	for _, x := range []Lease{le, probe, long} {
		x.Release()
	}
}

func TestRecalibrationMaxPinnedValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rc   Recalibration
		want string
	}{
		{Recalibration{Interval: time.Second, MaxPinned: 2 * time.Second}, "Recalibration.MaxPinned"},
		{Recalibration{Interval: time.Second, MaxPinned: -time.Second}, "Recalibration.MaxPinned"},
		{Recalibration{MaxPinned: time.Second}, "Recalibration.MaxPinned"},
	} {
		_, err := New(Config{Recalibration: tc.rc})
		require.ErrorContains(t, err, tc.want, "%+v", tc.rc)
	}
}

// TestRecalibrationIntervalNearTheLongestDuration: an Interval near the
// longest Duration, meant as "hardly ever", plus a positive jitter wrapped
// to a time in the past, and the limiter recalibrated at once.
func TestRecalibrationIntervalNearTheLongestDuration(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{
		InitialLimit:  20,
		MinLimit:      1,
		Recalibration: Recalibration{Interval: math.MaxInt64, Jitter: math.MaxInt64 / 2},
		Rand:          constRand(0.999),
	})
	le, ok := l.TryAcquire()
	require.True(t, ok)
	clk.Advance(time.Millisecond)
	le.Release()
	s := l.Snapshot()
	require.False(t, s.Recalibrating, "recalibrating 1ms after New, the limit pinned to %d", s.Limit)

	require.Equal(t, time.Duration(math.MaxInt64), jittered(math.MaxInt64-1, math.MaxInt64-2, 0.75))
	require.Equal(t, 8*time.Second, jittered(10*time.Second, 4*time.Second, 0.25))
	require.Equal(t, time.Second, jittered(10*time.Second, 9*time.Second, 0))
}

// constRand always draws u.
type constRand float64

func (u constRand) Float64() float64 { return float64(u) }

// TestRecalibrationEndsAtMaxPinnedWithoutACall: behind a lease that is
// never settled, the pin ended at MaxPinned only when some call came to
// end it; callers already queued waited with slots free until then, or
// until their contexts ended. A timer ends it, and admits them, at
// MaxPinned.
func TestRecalibrationEndsAtMaxPinnedWithoutACall(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		l, err := New(Config{InitialLimit: 5, MaxQueued: 10,
			Recalibration: Recalibration{Interval: 50 * time.Millisecond, MaxPinned: 10 * time.Millisecond}})
		require.NoError(t, err)
		stuck, ok := l.TryAcquire()
		require.True(t, ok)
		_ = stuck // never settled
		time.Sleep(60 * time.Millisecond)
		first, ok := l.TryAcquire() // starts the pin, at MinLimit: 1
		require.False(t, ok)
		_ = first
		require.True(t, l.Snapshot().Recalibrating)
		start := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		done := make(chan time.Duration, 3)
		for range 3 {
			go func() {
				le, err := l.Acquire(ctx)
				if err == nil {
					done <- time.Since(start)
					le.Release()
					return
				}
				done <- -1
			}()
		}
		for range 3 {
			waited := <-done
			require.GreaterOrEqual(t, waited, time.Duration(0), "admitted, not timed out")
			require.LessOrEqual(t, waited, 10*time.Millisecond, "admitted at MaxPinned")
		}
		require.False(t, l.Snapshot().Recalibrating)
	})
}

// coarseClock reads the system clock truncated to res.
type coarseClock struct{ res time.Duration }

func (c coarseClock) Now() time.Time { return time.Now().Truncate(c.res) }

// TestRecalibrationEndsAtMaxPinnedOnACoarseClock: the timer that ends a
// pin looked once, at MaxPinned of real time; a coarse Clock could read
// less than MaxPinned then, and the queued caller waited on, pinned.
func TestRecalibrationEndsAtMaxPinnedOnACoarseClock(t *testing.T) {
	t.Parallel()
	for range 3 {
		l, err := New(Config{InitialLimit: 5, MaxQueued: 10, Clock: coarseClock{20 * time.Millisecond},
			Recalibration: Recalibration{Interval: 100 * time.Millisecond, MaxPinned: 30 * time.Millisecond}})
		require.NoError(t, err)
		stuck, ok := l.TryAcquire()
		require.True(t, ok)
		time.Sleep(150 * time.Millisecond)
		_, ok = l.TryAcquire() // pins at MinLimit, behind stuck
		require.False(t, ok)
		require.True(t, l.Snapshot().Recalibrating)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		le, err := l.Acquire(ctx)
		cancel()
		require.NoError(t, err, "admitted when MaxPinned passed by the Clock")
		le.Release()
		stuck.Release()
	}
}

// TestRecalibrationPinnedInABubbleEndsOutsideIt: the timer of a pin was
// kept and stopped when the pin ended; a pin begun inside a
// testing/synctest bubble and ended outside it stopped a bubble's timer
// from outside, which kills the process.
func TestRecalibrationPinnedInABubbleEndsOutsideIt(t *testing.T) {
	l, clk := newTestLimiter(t, Config{InitialLimit: 5,
		Recalibration: Recalibration{Interval: time.Second, MaxPinned: 100 * time.Millisecond}})
	held, ok := l.TryAcquire()
	require.True(t, ok)
	bubble.Test(t, func(t *testing.T) {
		clk.Advance(2 * time.Second)
		le, ok := l.TryAcquire() // pins: its timer is the bubble's
		if ok {
			le.Release()
		}
		require.True(t, l.Snapshot().Recalibrating)
	})
	clk.Advance(time.Second)
	held.Release() // ends the pin outside the bubble
	require.False(t, l.Snapshot().Recalibrating)
}
