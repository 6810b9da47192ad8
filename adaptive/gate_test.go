package adaptive

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/internal/bubble"
	"github.com/stretchr/testify/require"
)

// burst is the outcome of a burst of tasks onto a limiter: each task
// acquires at time 0, runs for task and releases.
type burst struct {
	ran, queueFull, timedOut int
	maxRunning               int64
	refusedAt                []time.Duration // when each refused task was refused
	drained                  time.Duration   // when the last task ended
}

// runBurst runs n tasks of length task at once on a limiter configured by
// cfg, in virtual time (the caller is inside a synctest bubble).
func runBurst(t *testing.T, cfg Config, n int, task time.Duration) burst {
	t.Helper()
	l, err := New(cfg)
	require.NoError(t, err)
	var running atomic.Int64
	var mu sync.Mutex
	var b burst
	start := time.Now()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			le, err := l.Acquire(context.Background())
			if err != nil {
				mu.Lock()
				defer mu.Unlock()
				b.refusedAt = append(b.refusedAt, time.Since(start))
				switch {
				case errors.Is(err, ErrQueueFull):
					b.queueFull++
				case errors.Is(err, ErrWaitTimeout):
					b.timedOut++
				default:
					t.Errorf("unexpected error %v", err)
				}
				return
			}
			now := running.Add(1)
			time.Sleep(task)
			running.Add(-1)
			le.Release()
			mu.Lock()
			defer mu.Unlock()
			b.ran++
			b.maxRunning = max(b.maxRunning, now)
			b.drained = max(b.drained, time.Since(start))
		})
	}
	wg.Wait()
	require.Zero(t, l.Inflight())
	require.Zero(t, l.Queued())
	return b
}

// Seed 002's burst, scaled down a hundredfold: 370 tasks of 2.3 s onto 80
// slots. With a queue of 360 behind the slots (the gate: running + queued
// = 440) every task is admitted and runs, waiting patiently for a slot,
// and the burst drains in ⌈370/80⌉ = 5 rounds of 2.3 s. The same limiter
// with the seed's legacy single timeout of 0.5 s (TimeoutFactor 0.5 s at
// weight 1), far shorter than a task, admits the 80 it can run at once and
// rejects the other 290 — most of the burst — after waiting 0.5 s for
// slots that no task frees in time; a timeout of 2 s, still shorter than a
// task, only rejects them later.
func TestSeed002Burst(t *testing.T) {
	t.Parallel()
	const (
		slots  = 80
		queue  = 360
		tasks  = 370
		task   = 2300 * time.Millisecond
		legacy = 500 * time.Millisecond
	)
	fixed := Config{InitialLimit: slots, MinLimit: slots, MaxLimit: slots}

	t.Run("gate", func(t *testing.T) {
		bubble.Test(t, func(t *testing.T) {
			cfg := fixed
			cfg.MaxQueued = queue
			b := runBurst(t, cfg, tasks, task)
			require.Equal(t, tasks, b.ran, "every task admitted and run")
			require.Zero(t, b.queueFull+b.timedOut, "none rejected")
			require.Equal(t, int64(slots), b.maxRunning)
			require.Equal(t, 5*task, b.drained)
		})
	})

	t.Run("gate rejects beyond running + queued, at once", func(t *testing.T) {
		bubble.Test(t, func(t *testing.T) {
			cfg := fixed
			cfg.MaxQueued = queue
			b := runBurst(t, cfg, slots+queue+10, task)
			require.Equal(t, slots+queue, b.ran)
			require.Equal(t, 10, b.queueFull)
			require.Zero(t, b.timedOut)
			for _, at := range b.refusedAt {
				require.Zero(t, at, "refused without waiting")
			}
		})
	})

	for _, timeout := range []time.Duration{legacy, 2 * time.Second} {
		t.Run("legacy timeout "+timeout.String(), func(t *testing.T) {
			bubble.Test(t, func(t *testing.T) {
				cfg := fixed
				cfg.MaxQueued = tasks // unbounded waiting, as one semaphore
				cfg.TimeoutFactor = timeout
				b := runBurst(t, cfg, tasks, task)
				require.Equal(t, slots, b.ran, "only the first round runs")
				require.Equal(t, tasks-slots, b.timedOut, "the rest time out")
				require.Greater(t, b.timedOut, tasks/2, "most of the burst is rejected")
				for _, at := range b.refusedAt {
					require.Equal(t, timeout, at, "each after waiting the whole timeout")
				}
			})
		})
	}
}
