package adaptive

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStress runs many goroutines through every admission and settlement
// path at once, with the ceiling, the peers' load and pauses changing
// underneath, and checks that every admission respected the limit and
// that nothing is left in flight or queued.
func TestStress(t *testing.T) {
	t.Parallel()
	const (
		workers    = 64
		iterations = 300
		maxLimit   = 8
	)
	l, err := New(Config{InitialLimit: 4, MaxLimit: maxLimit, MaxQueued: 48})
	require.NoError(t, err)

	var violations, admissions atomic.Int64
	l.onAdmit = func(inflight, _, limit, _ int) {
		admissions.Add(1)
		if inflight > limit {
			violations.Add(1)
		}
	}
	var held highWater

	stop := make(chan struct{})
	var control sync.WaitGroup
	control.Add(1)
	go func() {
		defer control.Done()
		rng := rand.New(rand.NewPCG(1, 1))
		for {
			select {
			case <-stop:
				return
			default:
			}
			switch rng.IntN(16) {
			case 0, 1:
				l.ClearCeiling()
			case 2:
				l.SetCeiling(0)
			case 3:
				l.RetryAfter(time.Duration(rng.IntN(100)) * time.Microsecond)
			case 4, 5:
				l.SetPeerInflight(rng.IntN(20))
			case 6, 7:
				l.SetEstimate(float64(1 + rng.IntN(maxLimit)))
			default:
				l.SetCeiling(rng.IntN(maxLimit + 2))
			}
			time.Sleep(50 * time.Microsecond)
		}
	}()

	var workersWG sync.WaitGroup
	for w := range workers {
		workersWG.Add(1)
		go func() {
			defer workersWG.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 2))
			for range iterations {
				var le Lease
				var ok bool
				if rng.IntN(4) == 0 {
					le, ok = l.TryAcquire()
				} else {
					ctx, cancel := context.WithCancel(context.Background())
					if rng.IntN(3) == 0 {
						go cancel() // races with the grant
					}
					var err error
					le, err = l.Acquire(ctx)
					ok = err == nil
					cancel()
				}
				if !ok {
					continue
				}
				held.add(1)
				if rng.IntN(2) == 0 {
					time.Sleep(time.Duration(rng.IntN(50)) * time.Microsecond)
				}
				held.add(-1)
				switch rng.IntN(8) {
				case 0:
					le.Drop()
				case 1, 2:
					le.Ignore()
				default:
					le.Release()
				}
				if rng.IntN(8) == 0 {
					le.Release() // settling twice is a no-op
				}
			}
		}()
	}
	workersWG.Wait()
	close(stop)
	control.Wait()

	t.Logf("admissions %d, drops %d, max held %d, estimate %.2f", admissions.Load(), l.Drops(), held.max.Load(), l.Estimate())
	require.Zero(t, violations.Load(), "admitted past the limit")
	require.Positive(t, admissions.Load())
	require.LessOrEqual(t, held.max.Load(), int64(maxLimit))
	require.Zero(t, l.Inflight())
	require.Zero(t, l.Queued())
	est := l.Estimate()
	require.GreaterOrEqual(t, est, 1.0)
	require.LessOrEqual(t, est, float64(maxLimit))
}
