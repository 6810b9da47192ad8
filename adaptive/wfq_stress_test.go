package adaptive

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStressWeighted runs 64 goroutines through every admission path with
// random priorities and weights — some heavier than the limit or the
// ceiling, some above MaxLimit — wait bounds, cancellations and evictions,
// while the ceiling, the estimate and pauses change underneath. Every
// admission must keep the weight in flight within the hard bound it was
// admitted under, and within the limit unless it was admitted alone; the
// weight the workers hold, summed from outside the limiter, must never
// pass MaxLimit; and every call must be accounted once in the per-priority
// counters.
func TestStressWeighted(t *testing.T) {
	t.Parallel()
	const (
		workers    = 64
		iterations = 250
		maxLimit   = 12
	)
	l, err := New(Config{InitialLimit: 8, MinLimit: 4, MaxLimit: maxLimit, MaxQueued: 48, TimeoutFactor: 2 * time.Millisecond})
	require.NoError(t, err)

	var violations, admissions atomic.Int64
	l.onAdmit = func(inflight, weight, limit, bound int) {
		admissions.Add(1)
		if inflight > bound || inflight > limit && inflight != weight {
			violations.Add(1)
		}
	}
	var held highWater

	stop := make(chan struct{})
	var control sync.WaitGroup
	control.Go(func() {
		rng := rand.New(rand.NewPCG(3, 3))
		for {
			select {
			case <-stop:
				return
			default:
			}
			switch rng.IntN(32) {
			case 0, 1, 2, 3:
				l.ClearCeiling()
			case 4:
				l.RetryAfter(time.Duration(rng.IntN(100)) * time.Microsecond)
			case 5:
				l.SetCeiling(0)
			case 6, 7, 8, 9, 10, 11:
				l.SetEstimate(float64(4 + rng.IntN(maxLimit-3)))
			default:
				l.SetCeiling(4 + rng.IntN(maxLimit-2))
			}
			time.Sleep(100 * time.Microsecond)
		}
	})

	priorities := []uint8{0, 1, 64, DefaultPriority, 200, 254, 255}
	var calls [256]atomic.Uint64
	var leases atomic.Uint64 // leases the workers received
	var workersWG sync.WaitGroup
	for w := range workers {
		workersWG.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 4))
			for range iterations {
				r := Request{Priority: priorities[rng.IntN(len(priorities))], Weight: 1 + rng.IntN(4)}
				switch rng.IntN(40) {
				case 0:
					r.Weight = maxLimit + 1 // always too heavy
				case 1:
					r.Weight = math.MaxInt // too heavy, and a sum with it would overflow
				case 2, 3:
					r.Weight = 5 + rng.IntN(maxLimit-4) // at times above the limit or the ceiling
				}
				calls[r.Priority].Add(1)
				var le Lease
				var err error
				if rng.IntN(4) == 0 {
					le, err = l.TryAcquireRequest(r)
				} else {
					ctx, cancel := context.WithCancel(context.Background())
					if rng.IntN(3) == 0 {
						go cancel() // races with the grant
					}
					le, err = l.AcquireRequest(ctx, r)
					cancel()
				}
				if r.Weight > maxLimit {
					require.ErrorIs(t, err, ErrTooHeavy)
				}
				if err != nil {
					if !errors.Is(err, ErrWouldWait) && !errors.Is(err, ErrQueueFull) && !errors.Is(err, ErrPaused) &&
						!errors.Is(err, ErrWaitTimeout) && !errors.Is(err, ErrTooHeavy) && !errors.Is(err, context.Canceled) {
						t.Errorf("unexpected error %v", err)
					}
					continue
				}
				leases.Add(1)
				held.add(r.Weight)
				if rng.IntN(2) == 0 {
					time.Sleep(time.Duration(rng.IntN(50)) * time.Microsecond)
				}
				held.add(-r.Weight)
				switch rng.IntN(8) {
				case 0:
					le.Drop()
				case 1, 2:
					le.Ignore()
				default:
					le.Release()
				}
			}
		})
	}
	workersWG.Wait()
	close(stop)
	control.Wait()

	t.Logf("admissions %d, max weight held %d, estimate %.1f", admissions.Load(), held.max.Load(), l.Estimate())
	require.Zero(t, violations.Load(), "admitted past the limit or the hard bound")
	require.Positive(t, admissions.Load())
	require.LessOrEqual(t, held.max.Load(), int64(maxLimit))
	require.Zero(t, l.Inflight())
	require.Zero(t, l.Queued())
	require.Zero(t, l.Snapshot().QueuedWeight)
	var admitted uint64
	for _, s := range l.PriorityStats() {
		require.Zero(t, s.Queued)
		require.Equal(t, calls[s.Priority].Load(), s.Admitted+s.Refused+s.TimedOut+s.Cancelled,
			"priority %d: every call counted once: %+v", s.Priority, s)
		admitted += s.Admitted
	}
	require.Equal(t, leases.Load(), admitted, "a lease granted to a caller that gave up is not counted")
}

// highWater tracks a count changed from many goroutines and the highest
// it reached.
type highWater struct{ cur, max atomic.Int64 }

func (h *highWater) add(n int) {
	v := h.cur.Add(int64(n))
	for {
		m := h.max.Load()
		if v <= m || h.max.CompareAndSwap(m, v) {
			return
		}
	}
}
