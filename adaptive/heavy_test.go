package adaptive

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A weight near math.MaxInt is refused with ErrTooHeavy whatever is in
// flight: the weight in flight plus it would wrap around to a negative sum
// that fits under any limit.
func TestHugeWeightIsRefusedWithoutOverflow(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{InitialLimit: 20, MaxQueued: 4})
	held, ok := l.TryAcquire()
	require.True(t, ok)
	for _, w := range []int{math.MaxInt, math.MaxInt - 1, math.MaxInt/2 + 1, 1 << 40} {
		_, err := l.TryAcquireRequest(Request{Priority: 3, Weight: w})
		require.ErrorIs(t, err, ErrTooHeavy, "TryAcquireRequest, weight %d", w)
		_, err = l.AcquireRequest(context.Background(), Request{Priority: 3, Weight: w})
		require.ErrorIs(t, err, ErrTooHeavy, "AcquireRequest, weight %d", w)
		require.Equal(t, 1, l.Inflight(), "weight %d", w)
		require.Zero(t, l.Queued())
	}
	rest := acquireN(t, l, l.Limit()-1)
	_, ok = l.TryAcquire()
	require.False(t, ok, "the limit still holds")
	held.Release()
	for _, le := range rest {
		le.Release()
	}
	require.Zero(t, l.Inflight())
	require.Equal(t, uint64(8), statsOf(l, 3).Refused)
}

// Peers' in-flight near math.MaxInt is a load far above the estimate, not
// a negative one that the utilization guard would read as idle.
func TestHugePeerInflightCountsAsLoad(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 20})
	l.SetPeerInflight(math.MaxInt)
	le, ok := l.TryAcquire()
	require.True(t, ok)
	clk.Advance(10 * time.Millisecond)
	le.Release()
	require.Greater(t, l.Estimate(), 20.0, "a clean sample under a full load raises the estimate")
}

// Backoffs take the estimate below a request's weight. The request is
// still admitted, alone, when nothing is in flight, and its samples let
// the estimate grow back. Without that, from the seventh drop on every
// weight-10 request failed for good: no admission, no sample, no growth.
func TestHeavyRequestRunsAloneAfterBackoffs(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 20, MaxQueued: 4})
	for range 7 {
		le, ok := l.TryAcquire()
		require.True(t, ok)
		clk.Advance(time.Millisecond)
		le.Drop()
	}
	require.InDelta(t, 9.57, l.Estimate(), 0.01)
	require.Equal(t, 9, l.Limit())
	heavy := Request{Priority: 9, Weight: 10}

	le, err := l.TryAcquireRequest(heavy)
	require.NoError(t, err, "nothing in flight: admitted alone")
	require.Equal(t, 10, l.Inflight())
	_, err = l.TryAcquireRequest(Request{Priority: 255, Weight: 1})
	require.ErrorIs(t, err, ErrWouldWait, "nothing joins a request admitted above the limit")
	le.Ignore()

	// With something in flight it waits for it to end, then runs alone,
	// and those behind it wait for it.
	one, ok := l.TryAcquire()
	require.True(t, ok)
	res := queueRequest(t, l, t.Context(), heavy)
	light := queueRequest(t, l, t.Context(), Request{Priority: 9, Weight: 1})
	clk.Advance(10 * time.Millisecond)
	one.Release()
	r := <-res
	require.NoError(t, r.err)
	require.Equal(t, 10, l.Inflight())
	require.Equal(t, 1, l.Queued())
	clk.Advance(10 * time.Millisecond)
	r.lease.Release()
	r = <-light
	require.NoError(t, r.err)
	r.lease.Release()

	t.Logf("estimate after the heavy request's sample: %.2f", l.Estimate())
	require.GreaterOrEqual(t, l.Estimate(), 10.0, "the heavy request's sample raised the estimate")
	require.Equal(t, 10, l.Limit())
	le, err = l.TryAcquireRequest(heavy)
	require.NoError(t, err)
	le.Release()
	require.Zero(t, l.Inflight())
}

// The limiter refuses with ErrTooHeavy only a weight above MaxLimit,
// whatever the estimate: a weight between the estimate and MaxLimit runs
// alone.
func TestTooHeavyOnlyAboveMaxLimit(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{InitialLimit: 20, MaxLimit: 100, MaxQueued: 4})
	le, err := l.TryAcquireRequest(Request{Weight: 100})
	require.NoError(t, err)
	require.Equal(t, 100, l.Inflight())
	le.Ignore()
	_, err = l.TryAcquireRequest(Request{Weight: 101})
	require.ErrorIs(t, err, ErrTooHeavy)
	require.EqualError(t, err, "adaptive: request heavier than the limit: Request.Weight = 101 exceeds Config.MaxLimit = 100: it can never be admitted")
	_, err = l.AcquireRequest(context.Background(), Request{Weight: 101})
	require.ErrorIs(t, err, ErrTooHeavy)
	require.Zero(t, l.Queued())
}

// A lone limiter's ErrTooHeavy names the refused weight and MaxLimit, on
// both paths, and a second weight gets its own message rather than the
// first's.
func TestTooHeavyErrorNamesTheWeight(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{InitialLimit: 20, MaxLimit: 100, MaxQueued: 4})
	for _, w := range []int{101, 250, 101, math.MaxInt} {
		want := fmt.Sprintf("adaptive: request heavier than the limit: Request.Weight = %d exceeds Config.MaxLimit = 100: it can never be admitted", w)
		_, err := l.TryAcquireRequest(Request{Weight: w})
		require.ErrorIs(t, err, ErrTooHeavy)
		require.EqualError(t, err, want, "TryAcquireRequest")
		_, err = l.AcquireRequest(context.Background(), Request{Priority: 9, Weight: w})
		require.ErrorIs(t, err, ErrTooHeavy)
		require.EqualError(t, err, want, "AcquireRequest")
	}
	require.Zero(t, l.Inflight())
	require.Zero(t, l.Queued())
}

// A queued request heavier than the ceiling — the hard bound — cannot run
// even alone: it waits, counted in the queued weight, without holding
// back the requests that fit, whether they would come after it by finish
// time (another priority) or by arrival (its own). Once the ceiling holds
// it, it blocks those behind it again until it fits.
func TestHeadHeavierThanTheCeilingDoesNotBlock(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		heavy, low uint8 // priorities
	}{
		{"other priority", 255, 9},
		{"same priority", 9, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l, _ := newTestLimiter(t, Config{InitialLimit: 20, MaxQueued: 8})
			l.SetCeiling(4)
			heavy := queueRequest(t, l, t.Context(), Request{Priority: tc.heavy, Weight: 8})
			require.Equal(t, 8, l.Snapshot().QueuedWeight)

			light, err := l.TryAcquireRequest(Request{Priority: tc.low, Weight: 1})
			require.NoError(t, err, "TryAcquireRequest passes the heavy waiter")
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			two, err := l.AcquireRequest(ctx, Request{Priority: tc.low, Weight: 2})
			require.NoError(t, err, "AcquireRequest passes the heavy waiter")
			require.Equal(t, 3, l.Inflight())
			// One that does not fit now waits, and is handed the room
			// that frees up.
			res := queueRequest(t, l, t.Context(), Request{Priority: tc.low, Weight: 2})
			light.Release()
			r := <-res
			require.NoError(t, r.err)
			require.Equal(t, 4, l.Inflight())
			require.Equal(t, 1, l.Queued())
			l.TakePeak()
			require.Equal(t, 4+8, l.TakePeak(), "the heavy waiter counts in the demand")

			// The ceiling rises to hold it: it waits for the room and those
			// behind it wait for it.
			l.SetCeiling(8)
			_, err = l.TryAcquireRequest(Request{Priority: tc.low, Weight: 1})
			require.ErrorIs(t, err, ErrWouldWait)
			two.Release()
			require.Equal(t, 1, l.Queued())
			r.lease.Release()
			r = <-heavy
			require.NoError(t, r.err)
			require.Equal(t, 8, l.Inflight())
			r.lease.Release()
			require.Zero(t, l.Inflight())
			require.Zero(t, l.Queued())
		})
	}
}

// A waiter heavier than the hard bound leaves after TimeoutFactor × its
// weight if the bound does not rise.
func TestHeadHeavierThanTheCeilingTimesOut(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{InitialLimit: 20, MaxQueued: 8, TimeoutFactor: time.Millisecond})
	l.SetCeiling(4)
	_, err := l.AcquireRequest(t.Context(), Request{Priority: 3, Weight: 8})
	require.ErrorIs(t, err, ErrWaitTimeout)
	require.Equal(t, uint64(1), statsOf(l, 3).TimedOut)
	require.Zero(t, l.Queued())
}

// A drop's cut takes the limit below the weight of the head of the queue;
// the head still runs, alone, since the ceiling holds it. Without that the
// queue stalled for good: nothing in flight, nothing admitted.
func TestCutBelowTheHeadsWeight(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 20, MaxQueued: 4})
	l.SetCeiling(10)
	held, err := l.TryAcquireRequest(Request{Priority: 5, Weight: 10})
	require.NoError(t, err)
	heavy := queueRequest(t, l, t.Context(), Request{Priority: 5, Weight: 10})
	light := queueRequest(t, l, t.Context(), Request{Priority: 5, Weight: 1})
	clk.Advance(time.Millisecond)
	held.Drop()
	require.Equal(t, 9, l.Limit())
	require.Equal(t, 10, l.Inflight(), "the head was admitted alone")
	r := <-heavy
	require.NoError(t, r.err)
	require.Equal(t, 1, l.Queued(), "the light one waits for it")
	r.lease.Release()
	r = <-light
	require.NoError(t, r.err)
	r.lease.Release()
	require.Zero(t, l.Inflight())
}

// A recalibration pins the limit to MinLimit, below the weight of the
// requests waiting. The first of them runs alone once the old leases have
// drained, and its sample ends the recalibration. Without that the queue
// waited for a call or a settle to end the recalibration at MaxPinned.
func TestRecalibrationAdmitsHeavyProbe(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{
		InitialLimit:  20,
		MinLimit:      1,
		MaxQueued:     4,
		Recalibration: Recalibration{Interval: 10 * time.Second},
	})
	req := Request{Priority: 7, Weight: 4}
	old, err := l.TryAcquireRequest(req)
	require.NoError(t, err)
	clk.Advance(10 * time.Second)
	res := queueRequest(t, l, t.Context(), req)
	snap := l.Snapshot()
	require.True(t, snap.Recalibrating)
	require.Equal(t, 1, snap.Limit)

	clk.Advance(5 * time.Millisecond)
	old.Release()
	require.Equal(t, 4, l.Inflight(), "the probe admits the waiter alone")
	r := <-res
	require.NoError(t, r.err)
	clk.Advance(3 * time.Millisecond)
	r.lease.Release()
	snap = l.Snapshot()
	require.False(t, snap.Recalibrating, "its sample ended the recalibration")
	require.Equal(t, 3*time.Millisecond, snap.RTTNoload)
	require.Equal(t, 20, snap.Limit)

	// The same when nothing is in flight as the recalibration starts.
	clk.Advance(10 * time.Second)
	le, err := l.TryAcquireRequest(req)
	require.NoError(t, err)
	require.True(t, l.Snapshot().Recalibrating)
	clk.Advance(2 * time.Millisecond)
	le.Release()
	require.False(t, l.Snapshot().Recalibrating)
}

// Refusals of different weights from several goroutines at once each name
// their own weight: the kept error is read and replaced under the lock.
func TestTooHeavyErrorsConcurrently(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{MaxLimit: 100, MaxQueued: 4})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				w := 101 + (i+g)%3
				_, err := l.TryAcquireRequest(Request{Weight: w})
				if want := fmt.Sprintf("Request.Weight = %d exceeds", w); err == nil || !strings.Contains(err.Error(), want) {
					errs <- fmt.Errorf("weight %d: %v", w, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
