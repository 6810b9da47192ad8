package adaptive

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestQueueFIFO(t *testing.T) {
	t.Parallel()
	const n = 6
	l, _ := newTestLimiter(t, Config{MaxLimit: 1, MaxQueued: n})
	held, _ := l.TryAcquire()

	type grant struct {
		id    int
		lease Lease
	}
	granted := make(chan grant)
	var wg sync.WaitGroup
	for id := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			le, err := l.Acquire(context.Background())
			if err == nil {
				granted <- grant{id, le}
			}
		}()
		waitUntil(t, func() bool { return l.Queued() == id+1 })
	}

	_, ok := l.TryAcquire()
	require.False(t, ok, "TryAcquire does not overtake the queue")
	held.Release()
	for want := range n {
		g := <-granted
		require.Equal(t, want, g.id)
		g.lease.Release()
	}
	wg.Wait()
	require.Zero(t, l.Inflight())
	require.Zero(t, l.Queued())
}

func TestQueueFullRejectsAtOnce(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{MaxLimit: 1, MaxQueued: 2})
	held, _ := l.TryAcquire()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := l.Acquire(ctx)
			errc <- err
		}()
	}
	waitUntil(t, func() bool { return l.Queued() == 2 })

	_, err := l.Acquire(context.Background())
	require.ErrorIs(t, err, ErrQueueFull)

	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	require.ErrorIs(t, <-errc, context.Canceled)
	require.Zero(t, l.Queued())
	held.Release()
	require.Zero(t, l.Inflight())
}

func TestNoQueueRejectsAtOnce(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{MaxLimit: 1})
	le, err := l.Acquire(context.Background())
	require.NoError(t, err)
	_, err = l.Acquire(context.Background())
	require.ErrorIs(t, err, ErrQueueFull)
	le.Release()
}

func TestAcquireDoneContext(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{MaxLimit: 1, MaxQueued: 1})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	le, err := l.Acquire(ctx)
	require.NoError(t, err, "a free slot is taken even with a done context")
	_, err = l.Acquire(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, l.Queued())
	le.Release()
}

func TestCancelledWaiterLeaksNothing(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{MaxLimit: 1, MaxQueued: 1})
	held, _ := l.TryAcquire()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() {
		_, err := l.Acquire(ctx)
		errc <- err
	}()
	waitUntil(t, func() bool { return l.Queued() == 1 })
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	require.Zero(t, l.Queued())
	held.Release()
	require.Zero(t, l.Inflight())
	le, ok := l.TryAcquire()
	require.True(t, ok)
	le.Release()
}

// The slot is handed to the waiter after it saw its context end but before
// it took the lock: it must give the slot back.
func TestCancelledWaiterGivesBackConcurrentGrant(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{MaxLimit: 1, MaxQueued: 1})
	held, _ := l.TryAcquire()
	ctx, cancel := context.WithCancel(context.Background())
	var inflightAfterGrant, queuedAfterGrant int
	l.afterWaitCancel = func() {
		held.Release() // grants the slot to the cancelled waiter
		inflightAfterGrant, queuedAfterGrant = l.Inflight(), l.Queued()
	}
	errc := make(chan error)
	go func() {
		_, err := l.Acquire(ctx)
		errc <- err
	}()
	waitUntil(t, func() bool { return l.Queued() == 1 })
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	require.Equal(t, 1, inflightAfterGrant, "the slot went to the waiter")
	require.Zero(t, queuedAfterGrant)
	require.Zero(t, l.Inflight(), "the granted slot was given back")
	require.Zero(t, l.Queued())
}

// The slot is handed to the waiter after its wait bound ran out but before
// it took the lock: the grant came within the bound, and the waiter keeps
// it, counted as admitted after a wait. Giving it back would charge the
// waiter's flow for an admission it did not get.
func TestTimedOutWaiterKeepsConcurrentGrant(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{MaxLimit: 1, MaxQueued: 1, TimeoutFactor: time.Millisecond})
	held, _ := l.TryAcquire()
	var inflightAfterGrant int
	l.afterWaitCancel = func() {
		held.Release() // grants the slot to the waiter whose bound ran out
		inflightAfterGrant = l.Inflight()
	}
	le, err := l.AcquireRequest(context.Background(), Request{Priority: 7, Weight: 1})
	require.NoError(t, err)
	require.Equal(t, 1, inflightAfterGrant, "the slot went to the waiter")
	require.Equal(t, 1, l.Inflight(), "and it kept it")
	require.Zero(t, l.Queued())
	s := statsOf(l, 7)
	require.Equal(t, uint64(1), s.Admitted)
	require.Equal(t, uint64(1), s.Waits)
	require.Zero(t, s.TimedOut)
	le.Release()
	require.Zero(t, l.Inflight())
}

// A waiter refused (here by a pause) in the instant its context ends, or
// its wait bound runs out, returns what it saw end — ctx.Err() or
// ErrWaitTimeout — and is counted as that, not as refused.
func TestRefusalRacingTheEndOfAWaitCountsAsTheCallerSeesIt(t *testing.T) {
	t.Parallel()
	t.Run("cancelled", func(t *testing.T) {
		t.Parallel()
		l, _ := newTestLimiter(t, Config{MaxLimit: 1, MaxQueued: 1})
		held, _ := l.TryAcquire()
		l.afterWaitCancel = func() { l.RetryAfter(time.Hour) }
		ctx, cancel := context.WithCancel(context.Background())
		res := queueRequest(t, l, ctx, Request{Priority: 7, Weight: 1})
		cancel()
		require.ErrorIs(t, (<-res).err, context.Canceled)
		s := statsOf(l, 7)
		require.Zero(t, s.Refused)
		require.Equal(t, uint64(1), s.Cancelled)
		held.Release()
	})
	t.Run("timed out", func(t *testing.T) {
		t.Parallel()
		l, _ := newTestLimiter(t, Config{MaxLimit: 1, MaxQueued: 1, TimeoutFactor: time.Millisecond})
		held, _ := l.TryAcquire()
		l.afterWaitCancel = func() { l.RetryAfter(time.Hour) }
		_, err := l.AcquireRequest(context.Background(), Request{Priority: 7, Weight: 1})
		require.ErrorIs(t, err, ErrWaitTimeout)
		require.EqualError(t, err, "adaptive: waited TimeoutFactor × weight without a slot (Config.TimeoutFactor = 1ms per unit of weight)")
		s := statsOf(l, 7)
		require.Zero(t, s.Refused)
		require.Equal(t, uint64(1), s.TimedOut)
		held.Release()
	})
}

// SetFleetLimit fails the queued requests heavier than the fleet's limit
// with ErrTooHeavy, counted refused at their priority; lighter ones wait
// on.
func TestSetFleetLimitFailsHeavierWaiters(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{InitialLimit: 20, MaxLimit: 100, MaxQueued: 8})
	l.SetCeiling(20)
	held, err := l.TryAcquireRequest(Request{Priority: 1, Weight: 18})
	require.NoError(t, err)
	heavy, light := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := l.AcquireRequest(context.Background(), Request{Priority: 9, Weight: 15})
		heavy <- err
	}()
	go func() {
		le, err := l.AcquireRequest(context.Background(), Request{Priority: 1, Weight: 5})
		le.Release()
		light <- err
	}()
	require.Eventually(t, func() bool { return l.Queued() == 2 }, 5*time.Second, time.Millisecond)

	l.SetFleetLimit(14)
	err = <-heavy
	require.ErrorIs(t, err, ErrTooHeavy)
	require.ErrorContains(t, err, "Request.Weight = 15 exceeds the fleet's limit 14")
	require.Equal(t, 1, l.Queued(), "the lighter waiter waits on")
	held.Release()
	require.NoError(t, <-light)
	for _, s := range l.PriorityStats() {
		if s.Priority == 9 {
			require.Equal(t, uint64(1), s.Refused)
		}
	}
}
