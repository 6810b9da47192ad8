package adaptive

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRetryAfterPausesAdmission(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{MaxQueued: 5})
	held, _ := l.TryAcquire()

	l.RetryAfter(5 * time.Second)
	_, ok := l.TryAcquire()
	require.False(t, ok)
	_, err := l.Acquire(context.Background())
	require.ErrorIs(t, err, ErrPaused)
	require.Equal(t, 1, l.Inflight(), "admitted leases are not revoked")

	l.PauseUntil(clk.Now().Add(time.Second)) // earlier: ignored
	clk.Advance(4 * time.Second)
	_, ok = l.TryAcquire()
	require.False(t, ok)

	clk.Advance(time.Second)
	le, ok := l.TryAcquire()
	require.True(t, ok, "admission resumes once the pause passes")
	le.Release()
	held.Release()
	require.Equal(t, clk.Now(), l.Snapshot().PausedUntil)
}

// A pause's refusals say until when, to new calls and to the waiters it
// releases alike; a later pause's refusals name its own end, and an
// error already returned keeps the end it was returned with.
func TestPauseErrorSaysUntilWhen(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{MaxLimit: 1, MaxQueued: 1})
	held, _ := l.TryAcquire()
	waiter := make(chan error, 1)
	go func() {
		_, err := l.Acquire(context.Background())
		waiter <- err
	}()
	waitUntil(t, func() bool { return l.Queued() == 1 })

	until := clk.Now().Add(2500 * time.Millisecond)
	l.RetryAfter(2500 * time.Millisecond)
	released := <-waiter
	_, err := l.TryAcquireRequest(Request{Weight: 1})
	for _, err := range []error{released, err} {
		require.ErrorIs(t, err, ErrPaused)
		var pe *PauseError
		require.ErrorAs(t, err, &pe)
		require.Equal(t, until, pe.Until)
		require.EqualError(t, err, "adaptive: admission paused until "+until.UTC().Format("2006-01-02 15:04:05.000")+
			" UTC (Limiter.PauseUntil or RetryAfter)")
	}

	later := clk.Now().Add(time.Minute)
	l.PauseUntil(later)
	_, err2 := l.TryAcquireRequest(Request{Weight: 1})
	var pe2 *PauseError
	require.ErrorAs(t, err2, &pe2)
	require.Equal(t, later, pe2.Until, "an extended pause names its new end")
	var pe *PauseError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, until, pe.Until, "an error already returned is not changed")
	held.Release()
}

func TestRetryAfterNonPositiveDoesNothing(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{})
	l.RetryAfter(0)
	l.RetryAfter(-time.Second)
	le, ok := l.TryAcquire()
	require.True(t, ok)
	le.Release()
}

func TestPauseReleasesQueuedWaiters(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{MaxLimit: 1, MaxQueued: 3})
	held, _ := l.TryAcquire()
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			_, err := l.Acquire(context.Background())
			errs <- err
		}()
	}
	waitUntil(t, func() bool { return l.Queued() == 3 })

	l.RetryAfter(time.Second)
	for range 3 {
		require.ErrorIs(t, <-errs, ErrPaused)
	}
	require.Zero(t, l.Queued())
	held.Release()
	require.Zero(t, l.Inflight())
}
