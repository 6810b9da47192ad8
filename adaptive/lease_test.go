package adaptive

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func nan() float64 { return math.NaN() }

func TestSettleTwiceIsNoOp(t *testing.T) {
	t.Parallel()
	for name, settle := range map[string]func(Lease){
		"Release": Lease.Release,
		"Drop":    Lease.Drop,
		"Ignore":  Lease.Ignore,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l, _ := newTestLimiter(t, Config{InitialLimit: 10})
			le, _ := l.TryAcquire()
			other, _ := l.TryAcquire()
			copied := le
			settle(le)
			settle(le)
			copied.Release()
			copied.Drop()
			copied.Ignore()
			require.Equal(t, 1, l.Inflight(), "only the first settle counts")

			// The record is reused by the next lease; the stale copy must
			// not settle it.
			next, _ := l.TryAcquire()
			require.Same(t, le.rec, next.rec)
			copied.Release()
			require.Equal(t, 2, l.Inflight())
			next.Release()
			other.Release()
			require.Zero(t, l.Inflight())
		})
	}
}

func TestDropTwiceCountsOnce(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{})
	le, _ := l.TryAcquire()
	le.Drop()
	le.Drop()
	require.EqualValues(t, 1, l.Drops())
}

func TestZeroLeaseSettleIsNoOp(t *testing.T) {
	t.Parallel()
	var le Lease
	le.Release()
	le.Drop()
	le.Ignore()
}

func TestRecordsAreRecycled(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{InitialLimit: 100})
	leases := acquireN(t, l, 100)
	for _, le := range leases {
		le.Release()
	}
	seen := map[*leaseRecord]bool{}
	for _, le := range leases {
		seen[le.rec] = true
	}
	for range 10 {
		for _, le := range acquireN(t, l, 100) {
			require.True(t, seen[le.rec])
			le.Ignore()
		}
	}
}

func TestAdmitAndRejectDoNotAllocate(t *testing.T) {
	l, clk := newTestLimiter(t, Config{InitialLimit: 8, MaxLimit: 8, MaxQueued: 1})
	warm := acquireN(t, l, 8)
	for _, le := range warm {
		le.Release()
	}

	admit := testing.AllocsPerRun(1000, func() {
		le, _ := l.TryAcquire()
		clk.Advance(time.Millisecond)
		le.Release()
	})
	require.Zero(t, admit, "TryAcquire + Release")

	admitCtx := testing.AllocsPerRun(1000, func() {
		le, _ := l.Acquire(context.Background())
		le.Drop()
	})
	require.Zero(t, admitCtx, "Acquire fast path + Drop")

	full := acquireN(t, l, l.Limit())
	reject := testing.AllocsPerRun(1000, func() {
		_, ok := l.TryAcquire()
		if ok {
			panic("admitted past the limit")
		}
	})
	require.Zero(t, reject, "TryAcquire rejected")

	l.SetCeiling(0)
	l.cfg.MaxQueued = 0
	rejectQueue := testing.AllocsPerRun(1000, func() {
		_, err := l.Acquire(context.Background())
		if err != ErrQueueFull {
			panic(err)
		}
	})
	require.Zero(t, rejectQueue, "Acquire rejected with ErrQueueFull")

	l.RetryAfter(time.Hour)
	rejectPause := testing.AllocsPerRun(1000, func() {
		_, err := l.Acquire(context.Background())
		if !errors.Is(err, ErrPaused) {
			panic(err)
		}
		_, err = l.TryAcquireRequest(Request{Weight: 1})
		if !errors.Is(err, ErrPaused) {
			panic(err)
		}
	})
	require.Zero(t, rejectPause, "Acquire and TryAcquireRequest refused by a pause")
	for _, le := range full {
		le.Ignore()
	}
}

func TestObserveDropKeepsTheSlot(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{InitialLimit: 10, MinLimit: 1})
	le, ok := l.TryAcquire()
	require.True(t, ok)
	le.ObserveDrop()
	require.Equal(t, uint64(1), l.Drops())
	require.Equal(t, 9.0, l.Estimate(), "backed off at once")
	require.Equal(t, 1, l.Inflight(), "the slot stays held")
	le.ObserveDrop()
	le.Drop()
	require.Equal(t, uint64(1), l.Drops(), "one drop in all")
	require.Equal(t, 0, l.Inflight())
	again, _ := l.TryAcquire() // a recycled record starts afresh
	again.Drop()
	require.Equal(t, uint64(2), l.Drops())
}

// TestAnInstantReleaseMeasuresNothing: a Release on a clock that did not
// move between admission and settlement (a fake clock, a coarse one) is no
// sample, as ReleaseRTT(0) is none: a 1 ns round trip would stand as the
// no-load round trip for RTTWindow rounds and read every later round as a
// queue.
func TestAnInstantReleaseMeasuresNothing(t *testing.T) {
	t.Parallel()
	for _, tol := range []float64{0, 2} {
		l, clk := newTestLimiter(t, Config{Law: Gradient2, Tolerance: tol, InitialLimit: 100, MaxLimit: 200})
		for i := range 60 {
			leases := acquireN(t, l, l.Limit())
			if i == 10 {
				leases[0].Release() // settled in the clock's same tick
				leases = leases[1:]
			}
			clk.Advance(10 * time.Millisecond)
			for _, le := range leases {
				le.Release()
			}
		}
		snap := l.Snapshot()
		require.Equal(t, 10*time.Millisecond, snap.RTTNoload, "tolerance %v", tol)
		require.InDelta(t, 200, snap.Estimate, 1e-9, "tolerance %v: an upstream that never queued", tol)
	}
}

// TestAnInstantReleaseIsASuccessForAIMD: a Release on a clock that did not
// move is no latency sample, but still a success: AIMD (and FlatLatency's
// law) grows on it, as on a coarse clock that reads 0 for a fast upstream.
func TestAnInstantReleaseIsASuccessForAIMD(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{{Law: AIMD, InitialLimit: 4}, FlatLatency()} {
		cfg.InitialLimit = 4
		l, _ := newTestLimiter(t, cfg)
		for range 20 {
			for _, le := range acquireN(t, l, l.Limit()) {
				le.Release() // the fake clock did not move
			}
		}
		require.Greater(t, l.Estimate(), 4.0, "law %v", cfg.Law)
		require.Zero(t, l.RTTNoload())
	}
}
