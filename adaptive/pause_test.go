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
