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

// blockingClass is one stream of requests offered to a limiter through
// AcquireRequest, one goroutine per request.
type blockingClass struct {
	req Request
	// admitted and refused count the requests admitted, and refused, at an
	// instant of the measured window.
	admitted, refused atomic.Int64
}

// overloadBlocking offers one request of every class per tick for
// warmup+ticks ticks, each on its own goroutine calling AcquireRequest and
// holding an admitted lease for hold before releasing it, in virtual time
// (the caller is inside a synctest bubble). It counts the outcomes that
// happen during the last ticks ticks, when the queue is in its steady
// state, and waits for every goroutine to end. Every admission must keep
// the weight in flight within the limit; the only refusals allowed are
// the ones the configuration provides for (a full queue, a wait bound).
func overloadBlocking(t *testing.T, l *Limiter, tick, hold time.Duration, warmup, ticks int, classes []*blockingClass) {
	t.Helper()
	var over atomic.Int64
	l.onAdmit = func(inflight, _, limit, _ int) {
		if inflight > limit {
			over.Add(1)
		}
	}
	start := time.Now()
	from, to := start.Add(time.Duration(warmup)*tick), start.Add(time.Duration(warmup+ticks)*tick)
	measured := func(at time.Time) bool { return !at.Before(from) && at.Before(to) }
	ctx := context.Background()
	var wg sync.WaitGroup
	for range warmup + ticks {
		for _, c := range classes {
			wg.Go(func() {
				le, err := l.AcquireRequest(ctx, c.req)
				at := time.Now()
				if err != nil {
					if !errors.Is(err, ErrQueueFull) && !errors.Is(err, ErrWaitTimeout) {
						t.Errorf("AcquireRequest(%+v): %v", c.req, err)
					}
					if measured(at) {
						c.refused.Add(1)
					}
					return
				}
				if measured(at) {
					c.admitted.Add(1)
				}
				time.Sleep(hold)
				le.Release()
			})
		}
		time.Sleep(tick)
	}
	wg.Wait()
	require.Zero(t, over.Load(), "admissions that took the weight in flight over the limit")
	require.Zero(t, l.Inflight())
	require.Zero(t, l.Queued())
}

// Under 2× overload, through the blocking path — a goroutine per request
// parked in AcquireRequest, woken by the lease its turn is handed, holding
// its slot in virtual time — priority 255 is admitted twice as often as
// 254 at equal weights, and 200 is admitted 156/56 ≈ 2.79 times as often
// as 100, as the formula 1/(256 − p) predicts. The limit of 10 is held
// 10 ms per request, so it admits one request per millisecond; each class
// offers one per millisecond. The excess is refused by the gate
// (MaxQueued 20, evicting the waiter admitted last) or, with an unbounded
// queue, by the wait bound (TimeoutFactor 20 ms), seed 003's way; the
// bounds run out on the same instants as slots are freed, so this also
// checks that a slot handed over as a wait bound runs out is not lost to
// its flow. Weight multiplies cost: weight 2 at 255 costs what weight 1 at
// 254 does, so both are admitted equally often and the heavier class gets
// twice the weight; its head, blocking while only one unit is free, leaves
// a tenth of the limit idle.
func TestWFQAcceptanceRatioBlocking(t *testing.T) {
	t.Parallel()
	const (
		limit  = 10
		tick   = time.Millisecond
		hold   = 10 * time.Millisecond
		warmup = 200
		ticks  = 5000
	)
	gate := Config{InitialLimit: limit, MinLimit: limit, MaxLimit: limit, MaxQueued: 2 * limit}
	timeout := Config{InitialLimit: limit, MinLimit: limit, MaxLimit: limit, MaxQueued: 1000, TimeoutFactor: 20 * time.Millisecond}
	for _, tc := range []struct {
		name      string
		cfg       Config
		high, low Request
		want      float64 // admissions of high per admission of low
		fill      float64 // the least part of the limit kept busy
	}{
		{"255 vs 254", gate, Request{Priority: 255, Weight: 1}, Request{Priority: 254, Weight: 1}, 2, 0.99},
		{"200 vs 100", gate, Request{Priority: 200, Weight: 1}, Request{Priority: 100, Weight: 1}, 156.0 / 56.0, 0.99},
		{"255 vs 254, wait bound", timeout, Request{Priority: 255, Weight: 1}, Request{Priority: 254, Weight: 1}, 2, 0.99},
		{"200 vs 100, wait bound", timeout, Request{Priority: 200, Weight: 1}, Request{Priority: 100, Weight: 1}, 156.0 / 56.0, 0.99},
		{"255 weight 2 vs 254 weight 1", gate, Request{Priority: 255, Weight: 2}, Request{Priority: 254, Weight: 1}, 1, 0.89},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			bubble.Test(t, func(t *testing.T) {
				l, err := New(tc.cfg)
				require.NoError(t, err)
				high, low := &blockingClass{req: tc.high}, &blockingClass{req: tc.low}
				overloadBlocking(t, l, tick, hold, warmup, ticks, []*blockingClass{high, low})

				h, lo := high.admitted.Load(), low.admitted.Load()
				ratio := float64(h) / float64(lo)
				// The limit can admit limit weight per hold.
				capacity := float64(ticks * limit * tick / hold)
				fill := float64(h*int64(tc.high.Weight)+lo*int64(tc.low.Weight)) / capacity
				t.Logf("admitted %d vs %d, ratio %.3f (formula %.3f); refused %d vs %d; limit %.3f busy",
					h, lo, ratio, tc.want, high.refused.Load(), low.refused.Load(), fill)
				require.InEpsilon(t, tc.want, ratio, 0.10)
				require.GreaterOrEqual(t, fill, tc.fill, "the limit stays busy")
				require.LessOrEqual(t, fill, 1+float64(limit)/capacity)
				// Each class offered one request per tick: 2× overload.
				require.InEpsilon(t, float64(2*ticks), float64(h+lo+high.refused.Load()+low.refused.Load()), 0.01,
					"in the steady state as many requests end in the window as are offered in it")
			})
		})
	}
}
