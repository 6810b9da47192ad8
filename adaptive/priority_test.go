package adaptive

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/internal/bubble"
	"github.com/stretchr/testify/require"
)

// queueRequest starts AcquireRequest(r) in a goroutine, waits until it is
// queued and returns the channel its result arrives on.
func queueRequest(t *testing.T, l *Limiter, ctx context.Context, r Request) <-chan acquired {
	t.Helper()
	before := l.Queued()
	out := make(chan acquired, 1)
	go func() {
		le, err := l.AcquireRequest(ctx, r)
		out <- acquired{le, err}
	}()
	waitUntil(t, func() bool { return l.Queued() > before })
	return out
}

type acquired struct {
	lease Lease
	err   error
}

func TestRequestBadWeight(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{MaxQueued: 4})
	for w, want := range map[int]string{
		0:  "adaptive: invalid request: Request.Weight = 0, want ≥ 1 (the zero Request has no weight: set it)",
		-3: "adaptive: invalid request: Request.Weight is negative, want ≥ 1",
	} {
		_, err := l.AcquireRequest(context.Background(), Request{Priority: 9, Weight: w})
		require.ErrorIs(t, err, ErrInvalidRequest)
		require.EqualError(t, err, want)
		_, err = l.TryAcquireRequest(Request{Weight: w})
		require.ErrorIs(t, err, ErrInvalidRequest)
	}
	require.Zero(t, l.Inflight())
}

// A waiter whose weight the estimate falls below while it waits is not
// refused: it waits for what is in flight, then runs alone.
func TestWaiterOutlivesTheEstimateFallingBelowIt(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{InitialLimit: 20, MaxLimit: 100, MaxQueued: 10})
	held, err := l.AcquireRequest(context.Background(), Request{Weight: 1})
	require.NoError(t, err)
	res := queueRequest(t, l, context.Background(), Request{Weight: 20})
	l.SetEstimate(10)
	require.Equal(t, 1, l.Queued())
	held.Release()
	r := <-res
	require.NoError(t, r.err)
	require.Equal(t, 20, l.Inflight())
	r.lease.Release()
	require.Zero(t, l.Inflight())
	require.Zero(t, l.Queued())
}

// The limit bounds the sum of weights in flight; a lease frees its weight.
func TestWeightsShareTheLimit(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{InitialLimit: 10, MaxLimit: 10})
	six, err := l.TryAcquireRequest(Request{Priority: 1, Weight: 6})
	require.NoError(t, err)
	_, err = l.TryAcquireRequest(Request{Priority: 255, Weight: 5})
	require.ErrorIs(t, err, ErrWouldWait)
	four, err := l.TryAcquireRequest(Request{Priority: 1, Weight: 4})
	require.NoError(t, err)
	snap := l.Snapshot()
	require.Equal(t, 10, snap.Inflight)
	require.Equal(t, 2, snap.Leases)
	_, ok := l.TryAcquire()
	require.False(t, ok)
	six.Release()
	six.Release() // a second settle frees nothing more
	require.Equal(t, 4, l.Inflight())
	four.Drop()
	require.Zero(t, l.Inflight())
	require.Zero(t, l.Snapshot().Leases)
}

// Freed room goes to waiters by finish time: priority 255 (cost 1), then
// 128 (cost 128), then 0 (cost 256), whatever order they arrived in.
func TestAcquireRequestAdmitsByFinishTime(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{InitialLimit: 1, MaxLimit: 1, MaxQueued: 8})
	held, _ := l.TryAcquire()
	ctx := context.Background()
	low := queueRequest(t, l, ctx, Request{Priority: 0, Weight: 1})
	high := queueRequest(t, l, ctx, Request{Priority: 255, Weight: 1})
	mid := queueRequest(t, l, ctx, Request{Priority: DefaultPriority, Weight: 1})
	_, err := l.TryAcquireRequest(Request{Priority: 255, Weight: 1})
	require.ErrorIs(t, err, ErrWouldWait, "no room: not even the highest priority overtakes")

	held.Release()
	r := <-high
	require.NoError(t, r.err)
	r.lease.Release()
	r = <-mid
	require.NoError(t, r.err)
	r.lease.Release()
	r = <-low
	require.NoError(t, r.err)
	r.lease.Release()
	require.Zero(t, l.Inflight())
}

// A head that does not fit blocks the queue: lighter waiters behind it do
// not take the room it is waiting for. An arrival that finishes before
// the head is not behind it, and takes free room at once.
func TestHeadOfLineBlocks(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{InitialLimit: 4, MaxLimit: 4, MaxQueued: 8})
	ctx := context.Background()
	a, _ := l.TryAcquire()
	b, _ := l.TryAcquire()
	heavy := queueRequest(t, l, ctx, Request{Priority: DefaultPriority, Weight: 4}) // finish 512
	light := queueRequest(t, l, ctx, Request{Priority: 0, Weight: 2})               // finish 512, later: behind
	require.Equal(t, 2, l.Queued())
	require.Equal(t, 2, l.Inflight(), "two units free, nobody admitted")

	// Priority 255 finishes at 1, before the head: admitted into the free room.
	ahead, err := l.TryAcquireRequest(Request{Priority: 255, Weight: 1})
	require.NoError(t, err)
	ahead.Release()

	a.Release()
	b.Release()
	r := <-heavy
	require.NoError(t, r.err)
	require.Equal(t, 4, l.Inflight())
	require.Equal(t, 1, l.Queued())
	r.lease.Release()
	r = <-light
	require.NoError(t, r.err)
	r.lease.Release()
}

// When a heavy head leaves the queue unadmitted, the waiters behind it
// that fit are admitted at once.
func TestLeavingHeadUnblocks(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{InitialLimit: 4, MaxLimit: 4, MaxQueued: 8})
	held, _ := l.TryAcquireRequest(Request{Priority: 1, Weight: 2})
	ctx, cancel := context.WithCancel(context.Background())
	heavy := queueRequest(t, l, ctx, Request{Priority: DefaultPriority, Weight: 4})
	light := queueRequest(t, l, context.Background(), Request{Priority: 0, Weight: 2})
	cancel()
	require.ErrorIs(t, (<-heavy).err, context.Canceled)
	r := <-light
	require.NoError(t, r.err)
	r.lease.Release()
	held.Release()
	require.Zero(t, l.Inflight())
}

// A full queue refuses the request that would be admitted last, at once:
// a high-priority arrival evicts the newest low-priority waiter, and a
// low-priority arrival is refused.
func TestFullQueueEvictsTheLast(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{InitialLimit: 1, MaxLimit: 1, MaxQueued: 2})
	held, _ := l.TryAcquire()
	ctx := context.Background()
	first := queueRequest(t, l, ctx, Request{Priority: 10, Weight: 1})  // finish 246
	second := queueRequest(t, l, ctx, Request{Priority: 10, Weight: 1}) // finish 492

	_, err := l.AcquireRequest(ctx, Request{Priority: 10, Weight: 1})
	require.ErrorIs(t, err, ErrQueueFull, "same priority: behind both, refused at once")
	// Priority 0 finishes at 256: after the first waiter, before the second.
	low := queueRequestEvicting(t, l, ctx, Request{Priority: 0, Weight: 1})
	require.ErrorIs(t, (<-second).err, ErrQueueFull, "the second was evicted")
	// Priority 255 finishes at 1: the priority-0 waiter (256) is now last.
	high := queueRequestEvicting(t, l, ctx, Request{Priority: 255, Weight: 1})
	require.ErrorIs(t, (<-low).err, ErrQueueFull)
	require.Equal(t, 2, l.Queued())

	held.Release()
	r := <-high
	require.NoError(t, r.err)
	r.lease.Release()
	r = <-first
	require.NoError(t, r.err)
	r.lease.Release()
	stats := l.PriorityStats()
	require.Len(t, stats, 4)
	require.Equal(t, PriorityStats{Priority: 0, Refused: 1}, stats[0], "queued, then evicted")
	require.Equal(t, uint8(10), stats[1].Priority)
	require.Equal(t, uint64(1), stats[1].Admitted)
	require.Equal(t, uint64(2), stats[1].Refused, "one refused at once, one evicted")
	require.Equal(t, uint64(1), stats[1].Waits)
	require.Equal(t, PriorityStats{Priority: DefaultPriority, Admitted: 1, AdmittedWeight: 1}, stats[2])
	require.Equal(t, uint8(255), stats[3].Priority)
	require.Equal(t, uint64(1), stats[3].Admitted)
}

// queueRequestEvicting is queueRequest into a full queue: the queue's
// length stays the same, so it waits for the evicted count instead.
func queueRequestEvicting(t *testing.T, l *Limiter, ctx context.Context, r Request) <-chan acquired {
	t.Helper()
	refused := func() uint64 {
		var n uint64
		for _, s := range l.PriorityStats() {
			n += s.Refused
		}
		return n
	}
	before := refused()
	out := make(chan acquired, 1)
	go func() {
		le, err := l.AcquireRequest(ctx, r)
		out <- acquired{le, err}
	}()
	waitUntil(t, func() bool { return refused() > before })
	return out
}

// A queued request waits at most TimeoutFactor × its weight; the
// context's deadline still applies when it is sooner.
func TestTimeoutFactorBoundsTheWait(t *testing.T) {
	t.Parallel()
	bubble.Test(t, func(t *testing.T) {
		l, err := New(Config{InitialLimit: 4, MaxLimit: 4, MaxQueued: 8, TimeoutFactor: 100 * time.Millisecond})
		require.NoError(t, err)
		held, err := l.TryAcquireRequest(Request{Priority: 1, Weight: 4})
		require.NoError(t, err)
		ctx := context.Background()
		start := time.Now()
		waits := make([]time.Duration, 4)
		errs := make([]error, 4)
		var wg sync.WaitGroup
		for i, weight := range []int{1, 3} {
			wg.Go(func() {
				_, errs[i] = l.AcquireRequest(ctx, Request{Priority: 200, Weight: weight})
				waits[i] = time.Since(start)
			})
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			_, errs[2] = l.AcquireRequest(ctx, Request{Priority: 0, Weight: 1})
			waits[2] = time.Since(start)
		})
		wg.Wait()
		require.ErrorIs(t, errs[0], ErrWaitTimeout)
		require.Equal(t, 100*time.Millisecond, waits[0])
		require.ErrorIs(t, errs[1], ErrWaitTimeout)
		require.Equal(t, 300*time.Millisecond, waits[1])
		require.ErrorIs(t, errs[2], context.DeadlineExceeded)
		require.Equal(t, 50*time.Millisecond, waits[2])
		require.Zero(t, l.Queued())
		require.Equal(t, uint64(1), statsOf(l, 0).Cancelled, "at the context's deadline")
		require.Equal(t, uint64(2), statsOf(l, 200).TimedOut)

		// Admitted in time, the wait is counted.
		res := make(chan acquired)
		go func() {
			le, err := l.AcquireRequest(ctx, Request{Priority: 200, Weight: 1})
			res <- acquired{le, err}
		}()
		time.Sleep(40 * time.Millisecond)
		held.Release()
		r := <-res
		require.NoError(t, r.err)
		r.lease.Release()
		require.Equal(t, uint64(1), statsOf(l, 200).Waits)
		require.Equal(t, 40*time.Millisecond, statsOf(l, 200).WaitTime)
	})
}

func TestTimeoutFactorValidated(t *testing.T) {
	t.Parallel()
	_, err := New(Config{TimeoutFactor: -time.Second})
	require.ErrorContains(t, err, "Config.TimeoutFactor = -1s, want 0 (no bound but the context's) or ≥ 1µs")
}

// Demand counts weight: TakePeak reports weight in flight plus queued.
func TestTakePeakCountsWeight(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{InitialLimit: 8, MaxLimit: 8, MaxQueued: 4})
	le, err := l.TryAcquireRequest(Request{Priority: 3, Weight: 5})
	require.NoError(t, err)
	res := queueRequest(t, l, context.Background(), Request{Priority: 3, Weight: 4})
	require.Equal(t, 5+4, l.TakePeak())
	require.Equal(t, 4, l.Snapshot().QueuedWeight)
	le.Release()
	r := <-res
	require.NoError(t, r.err)
	r.lease.Release()
	require.Equal(t, 9, l.TakePeak(), "the peak stays until taken")
	require.Zero(t, l.TakePeak())
}

// A pause fails every waiter with ErrPaused and counts it refused.
func TestPauseRefusesWaiters(t *testing.T) {
	t.Parallel()
	l, clk := newTestLimiter(t, Config{InitialLimit: 1, MaxLimit: 1, MaxQueued: 4})
	held, _ := l.TryAcquire()
	res := queueRequest(t, l, context.Background(), Request{Priority: 40, Weight: 1})
	l.PauseUntil(clk.Now().Add(time.Second))
	require.ErrorIs(t, (<-res).err, ErrPaused)
	_, err := l.TryAcquireRequest(Request{Priority: 40, Weight: 1})
	require.ErrorIs(t, err, ErrPaused)
	require.Equal(t, uint64(2), l.PriorityStats()[0].Refused)
	held.Release()
}

func TestWeightedPathsDoNotAllocate(t *testing.T) {
	l, clk := newTestLimiter(t, Config{InitialLimit: 8, MaxLimit: 8, MaxQueued: 1})
	ctx := context.Background()
	r := Request{Priority: 200, Weight: 3}
	admit := testing.AllocsPerRun(1000, func() {
		le, err := l.TryAcquireRequest(r)
		if err != nil {
			panic(err)
		}
		clk.Advance(time.Millisecond)
		le.Release()
	})
	require.Zero(t, admit, "TryAcquireRequest + Release")
	admitCtx := testing.AllocsPerRun(1000, func() {
		le, err := l.AcquireRequest(ctx, r)
		if err != nil {
			panic(err)
		}
		le.Ignore()
	})
	require.Zero(t, admitCtx, "AcquireRequest without waiting + Ignore")

	full, _ := l.TryAcquireRequest(Request{Priority: 1, Weight: 6})
	refuse := testing.AllocsPerRun(1000, func() {
		if _, err := l.TryAcquireRequest(r); !errors.Is(err, ErrWouldWait) {
			panic(err)
		}
	})
	require.Zero(t, refuse, "TryAcquireRequest refused")
	l.cfg.MaxQueued = 0
	refuseQueue := testing.AllocsPerRun(1000, func() {
		if _, err := l.AcquireRequest(ctx, r); err != ErrQueueFull {
			panic(err)
		}
	})
	require.Zero(t, refuseQueue, "AcquireRequest refused with ErrQueueFull")
	full.Release()
}

// statsOf returns l's counters for priority p.
func statsOf(l *Limiter, p uint8) PriorityStats {
	for _, s := range l.PriorityStats() {
		if s.Priority == p {
			return s
		}
	}
	return PriorityStats{Priority: p}
}

// Refusing a bad weight allocates nothing either: a weight below 1, above
// MaxLimit, or so large that a sum with it would overflow (ErrTooHeavy's
// error is kept for the weight it was made for). Alternating between two
// weights above MaxLimit costs one allocation a refusal, no more.
func TestBadWeightRefusalsDoNotAllocate(t *testing.T) {
	l, _ := newTestLimiter(t, Config{MaxLimit: 100, MaxQueued: 4})
	ctx := context.Background()
	for _, w := range []int{0, -1, 101, math.MaxInt} {
		r := Request{Priority: 7, Weight: w}
		try := testing.AllocsPerRun(100, func() {
			if _, err := l.TryAcquireRequest(r); err == nil {
				panic("admitted")
			}
		})
		require.Zero(t, try, "TryAcquireRequest, weight %d", w)
		acquire := testing.AllocsPerRun(100, func() {
			if _, err := l.AcquireRequest(ctx, r); err == nil {
				panic("admitted")
			}
		})
		require.Zero(t, acquire, "AcquireRequest, weight %d", w)
	}
	next := 101
	alternate := testing.AllocsPerRun(100, func() {
		next = 203 - next // 101, 102, 101, …
		if _, err := l.TryAcquireRequest(Request{Priority: 7, Weight: next}); err == nil {
			panic("admitted")
		}
	})
	require.LessOrEqual(t, alternate, 1.0)
}

// TestFullQueueEvictsInFairOrderNotStrictPriority: the request a full
// queue refuses is the one weighted fair queueing would admit last. A low
// priority's first request takes a turn ahead of a high priority's tail,
// so it evicts the eighth of eight priority-200 waiters rather than being
// refused itself, as the package documentation says.
func TestFullQueueEvictsInFairOrderNotStrictPriority(t *testing.T) {
	t.Parallel()
	l, _ := newTestLimiter(t, Config{InitialLimit: 1, MaxLimit: 1, MaxQueued: 8})
	held, _ := l.TryAcquire()
	ctx := context.Background()
	var high []<-chan acquired
	for range 8 {
		high = append(high, queueRequest(t, l, ctx, Request{Priority: 200, Weight: 1}))
	}
	low := make(chan acquired, 1)
	go func() {
		le, err := l.AcquireRequest(ctx, Request{Priority: 0, Weight: 1})
		low <- acquired{le, err}
	}()
	r := <-high[7]
	require.ErrorIs(t, r.err, ErrQueueFull, "the high priority's tail is evicted")
	waitUntil(t, func() bool { return l.Queued() == 8 })

	// Every waiter left is served, one slot at a time, the low one
	// among the high ones.
	held.Release()
	served := make(chan acquired, 8)
	for _, ch := range append(high[:7:7], low) {
		go func() { served <- <-ch }()
	}
	for range 8 {
		r := <-served
		require.NoError(t, r.err)
		r.lease.Release()
	}
	require.Zero(t, l.Inflight())
}
