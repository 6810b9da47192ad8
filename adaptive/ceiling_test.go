package adaptive

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCeilingCapsLimit(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{InitialLimit: 10})
	l.SetCeiling(3)
	require.Equal(t, 3, l.Limit())
	leases := acquireN(t, l, 3)
	_, ok := l.TryAcquire()
	require.False(t, ok)

	l.SetCeiling(50)
	require.Equal(t, 10, l.Limit(), "min(ceiling, floor(estimate))")

	l.SetCeiling(1)
	require.Equal(t, 3, l.Inflight(), "lowering the ceiling revokes nothing")
	leases[0].Release()
	_, ok = l.TryAcquire()
	require.False(t, ok, "2 in flight ≥ ceiling 1")

	l.ClearCeiling()
	snap := l.Snapshot()
	require.False(t, snap.HasCeiling)
	require.Equal(t, 10, snap.Limit)
	for _, le := range leases[1:] {
		le.Release()
	}
}

func TestCeilingZeroAdmitsNothing(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{})
	l.SetCeiling(0)
	_, ok := l.TryAcquire()
	require.False(t, ok)
	_, err := l.Acquire(context.Background())
	require.ErrorIs(t, err, ErrQueueFull, "no queue configured")

	l.SetCeiling(-4)
	snap := l.Snapshot()
	require.True(t, snap.HasCeiling)
	require.Zero(t, snap.Ceiling, "a negative ceiling counts as 0")
	require.Zero(t, snap.Limit)
}

func TestRaisingCeilingWakesWaiters(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{MaxQueued: 3})
	l.SetCeiling(0) // a fleet node before its first grant
	got := make(chan Lease, 3)
	for range 3 {
		go func() {
			le, err := l.Acquire(context.Background())
			if err == nil {
				got <- le
			}
		}()
	}
	waitUntil(t, func() bool { return l.Queued() == 3 })

	l.SetCeiling(2)
	a, b := <-got, <-got
	require.Equal(t, 1, l.Queued())
	require.Equal(t, 2, l.Inflight())

	l.ClearCeiling()
	c := <-got
	require.Zero(t, l.Queued())
	for _, le := range []Lease{a, b, c} {
		le.Release()
	}
	require.Zero(t, l.Inflight())
}

func TestSetEstimate(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{MinLimit: 2, MaxLimit: 100, MaxQueued: 1})
	l.SetEstimate(64.5)
	require.Equal(t, 64.5, l.Estimate())
	require.Equal(t, 64, l.Limit())
	l.SetEstimate(1e9)
	require.Equal(t, 100.0, l.Estimate())
	l.SetEstimate(-1)
	require.Equal(t, 2.0, l.Estimate())
	l.SetEstimate(nan())
	require.Equal(t, 2.0, l.Estimate())

	leases := acquireN(t, l, 2)
	got := make(chan Lease, 1)
	go func() {
		le, err := l.Acquire(context.Background())
		if err == nil {
			got <- le
		}
	}()
	waitUntil(t, func() bool { return l.Queued() == 1 })
	l.SetEstimate(3) // a raise hands the new slot to the waiter
	(<-got).Release()
	for _, le := range leases {
		le.Release()
	}
}

// TestCeilingDeadlineOnEveryPath: past the ceiling's deadline nothing is
// admitted — not by TryAcquire, not by Acquire, and not to a waiter queued
// before the deadline when a slot frees after it — even though no timer
// has lowered the ceiling.
func TestCeilingDeadlineOnEveryPath(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 10, MaxQueued: 4})
	deadline := clk.Now().Add(time.Second)
	l.SetCeilingUntil(2, deadline)
	held := acquireN(t, l, 2)

	got := make(chan error, 1)
	go func() {
		_, err := l.Acquire(context.Background())
		got <- err
	}()
	require.Eventually(t, func() bool { return l.Snapshot().Queued == 1 }, 5*time.Second, time.Millisecond)

	clk.Advance(time.Second) // the deadline passes; nothing fires
	require.Equal(t, 0, l.Limit())
	held[0].Release() // frees a slot after the deadline
	select {
	case err := <-got:
		t.Fatalf("a queued waiter was handed a slot past the deadline (err %v)", err)
	case <-time.After(50 * time.Millisecond):
	}
	_, ok := l.TryAcquire()
	require.False(t, ok)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := l.Acquire(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// A renewal lets the waiter in.
	l.SetCeilingUntil(2, clk.Now().Add(time.Second))
	require.NoError(t, <-got)
	require.Equal(t, 2, l.Inflight())
	held[1].Release()
}

// TestCeilingDeadlineWallClock: a deadline is also compared by the wall
// clock. Go offers no way to make a time whose monotonic and wall readings
// disagree (they do after a suspend or a clock step), so this shows the
// wall comparison on deadlines without a monotonic reading, and that the
// usual deadline, with one, behaves.
func TestCeilingDeadlineWallClock(t *testing.T) {
	t.Parallel()
	l, err := New(Config{InitialLimit: 10})
	require.NoError(t, err)
	now := time.Now()
	l.SetCeilingUntil(5, now.Add(-time.Minute).Round(0))
	require.Equal(t, 0, l.Limit(), "a wall-clock deadline in the past")
	l.SetCeilingUntil(5, now.Add(time.Minute).Round(0))
	require.Equal(t, 5, l.Limit(), "a wall-clock deadline ahead")
	l.SetCeilingUntil(5, now.Add(time.Minute))
	require.Equal(t, 5, l.Limit())
	l.SetCeilingUntil(5, now)
	require.Equal(t, 0, l.Limit())
	l.SetCeiling(5)
	require.True(t, l.Snapshot().CeilingUntil.IsZero(), "SetCeiling removes the deadline")
	require.Equal(t, 5, l.Limit())
}
