package pace

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fleetlimit/fleetlimit/internal/bubble"
	"github.com/stretchr/testify/require"
)

func newPacer(t *testing.T, cfg Config) *Pacer {
	t.Helper()
	p, err := New(cfg, time.Now())
	require.NoError(t, err)
	return p
}

// waitAsync runs Wait in a goroutine and reports when it returned,
// measured from start on the bubble's clock.
func waitAsync(p *Pacer, start time.Time, tokens int64) <-chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		tk, err := p.Wait(context.Background(), tokens)
		ch <- waitResult{tk, time.Since(start), err}
	}()
	return ch
}

type waitResult struct {
	ticket Ticket
	after  time.Duration
	err    error
}

// TestPacerWaitPaces: 10 requests go at once from a full bucket of 10/s,
// then one every 100ms.
func TestPacerWaitPaces(t *testing.T) {
	t.Parallel()
	bubble.Test(t, func(t *testing.T) {
		p := newPacer(t, Config{RequestRate: 10, TokenRate: Unlimited})
		start := time.Now()
		for i := range 15 {
			_, err := p.Wait(context.Background(), 1000)
			require.NoError(t, err)
			want := time.Duration(max(0, i-9)) * 100 * ms
			require.Equal(t, want, time.Since(start), "request %d", i)
		}
	})
}

// TestPacerSetRateAppliesToWaiters: a waiter's turn follows the rate as
// it is when it looks, not as it was when it reserved. Under 10/s, a
// waiter due at 100ms goes at 550ms once the rate drops to 1/s at 50ms;
// under 1/s, one due at 1s goes at 109ms once it rises to 100/s at 100ms.
func TestPacerSetRateAppliesToWaiters(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		rate, newRate float64
		change, want  time.Duration
	}{
		{"lowered", 10, 1, 50 * ms, 550 * ms},  // 0.5 owed at 1/s
		{"raised", 1, 100, 100 * ms, 109 * ms}, // 0.9 owed at 100/s
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			bubble.Test(t, func(t *testing.T) {
				p := newPacer(t, Config{RequestRate: tt.rate, TokenRate: Unlimited})
				start := time.Now()
				for range int(tt.rate) { // empty the bucket
					_, _, err := p.Reserve(start, 0)
					require.NoError(t, err)
				}
				w := waitAsync(p, start, 0)
				time.Sleep(tt.change)
				require.NoError(t, p.SetRate(time.Now(), tt.newRate, Unlimited))
				r := <-w
				require.NoError(t, r.err)
				require.Equal(t, tt.want, r.after)
			})
		})
	}
}

// TestPacerSettle: a refund wakes a waiter at once; an under-estimate
// delays the next request by its debt.
func TestPacerSettle(t *testing.T) {
	t.Parallel()
	bubble.Test(t, func(t *testing.T) {
		p := newPacer(t, Config{RequestRate: Unlimited, TokenRate: 100})
		start := time.Now()
		first, err := p.Wait(context.Background(), 100)
		require.NoError(t, err)
		require.Equal(t, int64(100), first.Estimate())
		w := waitAsync(p, start, 50) // due at 500ms
		time.Sleep(100 * ms)
		require.NoError(t, p.Settle(time.Now(), first, 20))
		r := <-w
		require.NoError(t, r.err)
		require.Equal(t, 100*ms, r.after, "80 refunded: paid for at once")
		_, tokens := p.Levels(time.Now())
		require.InDelta(t, 40, tokens, 1e-9)
	})
	bubble.Test(t, func(t *testing.T) {
		p := newPacer(t, Config{RequestRate: Unlimited, TokenRate: 100})
		start := time.Now()
		tk, err := p.Wait(context.Background(), 10)
		require.NoError(t, err)
		require.NoError(t, p.Settle(start, tk, 150)) // 140 more than estimated
		_, err = p.Wait(context.Background(), 10)
		require.NoError(t, err)
		require.Equal(t, 600*ms, time.Since(start), "100 − 150 − 10 = −60 owed at 100/s")
		require.EqualError(t, p.Settle(start, tk, -1), "pace: settle: actual tokens must be in [0, 1e+09], got -1")
	})
}

// TestPacerWaitCanceled: a Wait whose context ends returns its error and
// gives its reservation back.
func TestPacerWaitCanceled(t *testing.T) {
	t.Parallel()
	bubble.Test(t, func(t *testing.T) {
		p := newPacer(t, Config{RequestRate: 1, TokenRate: 1000})
		_, err := p.Wait(context.Background(), 1000)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 300*ms)
		defer cancel()
		_, err = p.Wait(ctx, 500)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.EqualError(t, err, "pace: wait: context deadline exceeded")
		requests, tokens := p.Levels(time.Now())
		require.InDelta(t, 0.3, requests, 1e-9, "the request given back")
		require.InDelta(t, 300, tokens, 1e-9, "the 500 tokens given back")

		done, cancelDone := context.WithCancel(context.Background())
		cancelDone()
		_, err = p.Wait(done, 1)
		require.ErrorIs(t, err, context.Canceled)
	})
}

// TestPacerZeroRate: at rate 0 a Wait blocks until the rate is raised.
func TestPacerZeroRate(t *testing.T) {
	t.Parallel()
	bubble.Test(t, func(t *testing.T) {
		p := newPacer(t, Config{RequestRate: 0, TokenRate: Unlimited})
		start := time.Now()
		_, d, err := p.Reserve(start, 0)
		require.NoError(t, err)
		require.Equal(t, Never, d)
		w := waitAsync(p, start, 0)
		time.Sleep(time.Hour)
		synctest.Wait()
		select {
		case <-w:
			t.Fatal("admitted at rate 0")
		default:
		}
		require.NoError(t, p.SetRate(time.Now(), 2, Unlimited))
		r := <-w
		require.NoError(t, r.err)
		require.Equal(t, time.Hour+time.Second, r.after, "two requests owed at 2/s")
	})
}

func TestPacerTryReserve(t *testing.T) {
	t.Parallel()
	p, err := New(Config{RequestRate: 2, TokenRate: 100}, epoch)
	require.NoError(t, err)
	_, ok, err := p.TryReserve(epoch, 100)
	require.NoError(t, err)
	require.True(t, ok)
	_, ok, err = p.TryReserve(epoch, 1)
	require.NoError(t, err)
	require.False(t, ok, "no tokens left")
	requests, _ := p.Levels(epoch)
	require.InDelta(t, 1, requests, 1e-9, "the request debit was given back")
	_, ok, _ = p.TryReserve(epoch, 0)
	require.True(t, ok, "a request without tokens fits, the token bucket holding no debt")
	_, ok, _ = p.TryReserve(epoch, 0)
	require.False(t, ok, "no requests left")
	_, _, err = p.TryReserve(epoch, -1)
	require.EqualError(t, err, "pace: reserve: tokens must be in [0, 1e+09], got -1")

	tk, d, err := p.Reserve(epoch, 10)
	require.NoError(t, err)
	require.Equal(t, 500*ms, d)
	require.Equal(t, 250*ms, p.Delay(at(250*ms), tk))
	p.Cancel(at(250*ms), tk)
	_, _, err = p.Reserve(epoch, -3)
	require.EqualError(t, err, "pace: reserve: tokens must be in [0, 1e+09], got -3")
}

func TestPacerConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cfg  Config
		want string
	}{
		{Config{RequestRate: -1}, "pace: Config.RequestRate must be >= 0 (or Unlimited), got -1"},
		{Config{TokenRate: math.NaN()}, "pace: Config.TokenRate must be >= 0 (or Unlimited), got NaN"},
		{Config{Burst: -1}, "pace: Config.Burst must be >= 0, got -1ns"},
	}
	for _, tt := range tests {
		_, err := New(tt.cfg, epoch)
		require.EqualError(t, err, tt.want)
	}
	p, err := New(Config{RequestRate: 5, TokenRate: Unlimited, Burst: 2 * time.Second}, epoch)
	require.NoError(t, err)
	requests, tokens := p.Levels(epoch)
	require.Equal(t, []float64{10, Unlimited}, []float64{requests, tokens})
	require.EqualError(t, p.SetRate(epoch, 1, -1), "pace: set rate: token rate must be >= 0 (or Unlimited), got -1")
	require.EqualError(t, p.SetRate(epoch, -1, 1), "pace: set rate: request rate must be >= 0 (or Unlimited), got -1")
	rr, tr := p.Rates()
	require.Equal(t, []float64{5, Unlimited}, []float64{rr, tr}, "neither rate changed")
	require.Equal(t, 50.0, PerMinute(3000))
}

// TestPacerConcurrentWaiters: 8 goroutines wait for 200 requests at 50/s
// with a burst of 1s, while the rate is lowered and raised: all are
// admitted, and by when the last is, the rates allowed them.
func TestPacerConcurrentWaiters(t *testing.T) {
	t.Parallel()
	bubble.Test(t, func(t *testing.T) {
		p := newPacer(t, Config{RequestRate: 50, TokenRate: 5000})
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, 200)
		for g := range 8 {
			wg.Go(func() {
				for i := range 25 {
					tk, err := p.Wait(context.Background(), int64(50+g+i))
					if err != nil {
						errs <- err
						return
					}
					if err := p.Settle(time.Now(), tk, 100); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		time.Sleep(time.Second)
		require.NoError(t, p.SetRate(time.Now(), 25, 2500))
		time.Sleep(time.Second)
		require.NoError(t, p.SetRate(time.Now(), 50, 5000))
		wg.Wait()
		close(errs)
		require.NoError(t, errors.Join(func() []error {
			var all []error
			for err := range errs {
				all = append(all, err)
			}
			return all
		}()...))
		// The 200th request goes when 150 requests have been earned: 50 in
		// the first second, 25 in the second at the lowered rate, 75 at
		// 50/s. The tokens, 200×100 settled less the last one's 100 plus
		// its estimate, are paid by then: 5,000 lent, 5,000, 2,500, 7,500.
		require.Equal(t, 3500*ms, time.Since(start), "no waiter slept past its turn")
	})
}
